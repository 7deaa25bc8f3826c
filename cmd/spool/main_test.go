package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	spoollog "github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// Each test batch holds recordsPerBatch records of about 120 bytes, so a
// 4 KiB segment takes 9 batches and every few batches get an index entry.
const (
	recordsPerBatch = 3
	testSegmentSize = 4096
)

var testEpoch = time.UnixMilli(1_700_000_000_000)

// makeLog creates a partition directory at dir with package log, appends
// batches batches and closes it cleanly. It returns the paths of the
// segments' .log files, in offset order.
func makeLog(t *testing.T, dir string, batches int) []string {
	t.Helper()
	l := openTestLog(t, dir)
	appendBatches(t, l, 0, batches)
	require.NoError(t, l.Close())
	logs := segmentLogs(t, dir)
	require.Greater(t, len(logs), 2, "want several segments")
	return logs
}

func openTestLog(t *testing.T, dir string) *spoollog.Log {
	t.Helper()
	l, err := spoollog.Open(dir, spoollog.Options{SegmentBytes: testSegmentSize, IndexIntervalBytes: 128})
	require.NoError(t, err)
	return l
}

// appendBatches appends n batches, numbering records from first.
func appendBatches(t *testing.T, l *spoollog.Log, first, n int) {
	t.Helper()
	for i := range n {
		recs := make([]record.Record, recordsPerBatch)
		for j := range recs {
			k := first + i*recordsPerBatch + j
			recs[j] = record.Record{
				Timestamp: testEpoch.Add(time.Duration(k) * time.Millisecond),
				Key:       fmt.Appendf(nil, "key-%d", k),
				Value:     fmt.Appendf(nil, "value-%d-%s", k, strings.Repeat("x", 100)),
			}
			if k%5 == 0 {
				recs[j].Headers = []record.Header{{Key: "h", Value: []byte("v")}}
			}
		}
		_, err := l.Append(recs...)
		require.NoError(t, err)
	}
}

// segmentLogs lists the .log files of a partition directory in offset
// order.
func segmentLogs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var bases []int64
	for _, e := range entries {
		if base, suffix, ok := segment.ParseFileName(e.Name()); ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	var paths []string
	for _, b := range bases {
		paths = append(paths, filepath.Join(dir, segment.FileName(b, segment.LogSuffix)))
	}
	return paths
}

// sibling returns the path of another file of the same segment.
func sibling(logPath, suffix string) string {
	return strings.TrimSuffix(logPath, segment.LogSuffix) + suffix
}

// batchPositions walks a .log's batch headers independently of the code
// under test and returns each batch's position and record count.
func batchPositions(t *testing.T, path string) (positions []int64, counts []int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for pos := 0; pos < len(data); {
		_, size, err := record.PeekHeader(data[pos:])
		require.NoError(t, err)
		positions = append(positions, int64(pos))
		counts = append(counts, int(int32(binary.BigEndian.Uint32(data[pos+57:]))))
		pos += size
	}
	return positions, counts
}

// modify applies fn to the contents of the file at path.
func modify(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, fn(data), 0o644))
}

// appendTo appends bytes to the file at path.
func appendTo(t *testing.T, path string, p []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(p)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// runTool runs the tool in-process, with an empty stdin, and returns its
// exit status and output.
func runTool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runToolInput(t, "", args...)
}

// runToolInput runs the tool in-process with stdin as its input.
func runToolInput(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		inStdout bool
	}{
		{"no arguments", nil, exitUsage, false},
		{"help", []string{"help"}, exitOK, true},
		{"--help", []string{"--help"}, exitOK, true},
		{"unknown command", []string{"serve-me"}, exitUsage, false},
		{"help of an unknown command", []string{"help", "nope"}, exitUsage, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runTool(t, tc.args...)
			require.Equal(t, tc.code, code)
			out := stderr
			if tc.inStdout {
				out = stdout
			}
			require.Contains(t, out, "Usage:")
			for _, c := range commands {
				require.Contains(t, out, "\t"+c.name+" ")
			}
		})
	}
}

func TestHelpCommand(t *testing.T) {
	code, stdout, _ := runTool(t, "help", "dump")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "--records")
	require.Contains(t, stdout, "--verify-index")

	code, stdout, _ = runTool(t, "help", "check")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "--quiet")

	for cmd, flag := range map[string]string{"topics": "describe", "produce": "--print-acks", "consume": "--print-offsets", "perf": "produce"} {
		code, stdout, _ = runTool(t, "help", cmd)
		require.Equal(t, exitOK, code, cmd)
		require.Contains(t, stdout, flag, cmd)
	}
}

func TestSegmentFileNames(t *testing.T) {
	base, suffix, ok := segmentFile("00000000000000000042.timeindex")
	require.True(t, ok)
	require.Equal(t, int64(42), base)
	require.Equal(t, segment.TimeIndexSuffix, suffix)
	for _, name := range []string{"+0000000000000000042.log", "00000000000000000042.log.deleted", "42.log", "00000000000000000042.snapshot"} {
		_, _, ok := segmentFile(name)
		require.False(t, ok, name)
	}
}
