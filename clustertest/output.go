package clustertest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// servingPrefix starts the line spool serve prints on stderr once its
// Kafka listener is bound; controllerPrefix, the controller listener's.
const (
	servingPrefix    = "spool: serving on "
	controllerPrefix = "spool: controller on "
)

// output receives one incarnation of a node's stderr: it appends it to
// the node's log file, mirrors it to this process's stderr when asked
// (Options.Verbose), and closes serving when the "serving on" line comes.
type output struct {
	file    io.Writer
	mirror  io.Writer // nil, or where to copy each line, prefixed
	prefix  string
	serving chan struct{}

	mu      sync.Mutex
	partial []byte // the unfinished last line
	seen    bool   // serving is closed
}

func newOutput(file io.Writer, mirror io.Writer, prefix string) *output {
	return &output{file: file, mirror: mirror, prefix: prefix, serving: make(chan struct{})}
}

// Write is called by the goroutine exec.Cmd copies the child's stderr
// with; writing the file fails the copy only if the file fails, which
// then fails the wait.
func (o *output) Write(p []byte) (int, error) {
	if _, err := o.file.Write(p); err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		line := string(o.partial[:i])
		o.partial = o.partial[i+1:]
		if !o.seen && strings.HasPrefix(line, servingPrefix) {
			o.seen = true
			close(o.serving)
		}
		if o.mirror != nil {
			fmt.Fprintf(o.mirror, "%s%s\n", o.prefix, line)
		}
	}
	// Keep the buffer from growing without bound on output with no
	// newlines: no line we look for is that long.
	if len(o.partial) > 64<<10 {
		o.partial = o.partial[:0]
	}
	return len(p), nil
}

// tailLines returns the last n lines of the file at path (all of it if
// n <= 0), reading at most the last max bytes.
func tailLines(path string, n int, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := int64(0)
	if st.Size() > max {
		off = st.Size() - max
	}
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return "", err
	}
	s := string(b)
	if off > 0 {
		// Drop the cut first line.
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	cut := off > 0
	if n > 0 {
		lines := strings.SplitAfter(s, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			s, cut = strings.Join(lines[len(lines)-n:], ""), true
		}
	}
	if cut {
		s = fmt.Sprintf("... (the start is in %s)\n", path) + s
	}
	return s, nil
}

// raceMarker starts each report the race detector writes (on stderr) in a
// process built with -race; the process goes on running.
const raceMarker = "WARNING: DATA RACE"

// raceReports returns the race detector's reports in the file at path:
// each from its marker line to the next "==================" line.
func raceReports(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	s := string(b)
	for {
		i := strings.Index(s, raceMarker)
		if i < 0 {
			return out, nil
		}
		s = s[i:]
		end := strings.Index(s, "\n==================")
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
}
