package controller

import (
	"bytes"
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger adapts slog for hashicorp/raft, which logs through hclog.
// Raft is loud about what a quorum goes through all the time (elections,
// a peer down, a peer shutting down), and the quorum logs what an operator
// needs itself (the active controller, fencing), so Raft's messages come
// one level down: info becomes debug, warnings info, errors warnings.
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
	case strings.Contains(line, "transport shutdown"), strings.Contains(line, "stopping replication"):
		// What Raft says while this node or a peer shuts down.
	case strings.HasPrefix(line, "[ERROR]"):
		level = slog.LevelWarn
	case strings.HasPrefix(line, "[WARN]"):
		level = slog.LevelInfo
	}
	if w.lg.Enabled(context.Background(), level) {
		if i := strings.IndexByte(line, ']'); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		w.lg.Log(context.Background(), level, line)
	}
	return len(p), nil
}
