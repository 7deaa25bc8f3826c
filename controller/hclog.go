package controller

import (
	"bytes"
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger adapts slog for hashicorp/raft, which logs through hclog.
// Raft's info messages (elections, heartbeats failing while a peer is
// down) are frequent and expected, so they become debug; its warnings and
// errors keep their level.
func newHCLogger(lg *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		Level:       hclog.Debug,
		Output:      slogWriter{lg},
		DisableTime: true,
	})
}

type slogWriter struct{ lg *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(line, "[ERROR]"):
		level = slog.LevelError
	case strings.HasPrefix(line, "[WARN]"):
		level = slog.LevelWarn
	}
	if w.lg.Enabled(context.Background(), level) {
		if i := strings.IndexByte(line, ']'); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		w.lg.Log(context.Background(), level, line)
	}
	return len(p), nil
}
