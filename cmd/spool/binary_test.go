package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// The binary is built once for the tests that run it, in binDir, which
// TestMain removes.
var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// spoolBinary builds the spool binary (once per test process) and returns
// its path. It skips the test with -short or without the go command.
func spoolBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	if testing.Short() {
		t.Skip("builds a binary")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "spool-test-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "spool")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// TestBinary builds the real spool binary and runs it, to check what the
// in-process tests cannot: that main wires run to the process's exit
// status and streams.
func TestBinary(t *testing.T) {
	bin := spoolBinary(t)

	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "events", 2, 40)
	logs := segmentLogs(t, filepath.Join(data, "events-0"))

	exitCode := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), stdout.String(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stdout.String(), stderr.String()
	}

	code, stdout, _ := exitCode("check", data)
	require.Equal(t, 0, code, stdout)

	// Flip a bit in the records of a sealed segment.
	positions, _ := batchPositions(t, logs[0])
	modify(t, logs[0], func(b []byte) []byte {
		b[positions[1]+record.HeaderSize+5] ^= 0x20
		return b
	})
	code, stdout, _ = exitCode("check", data)
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stdout, "error: "+logs[0]+": position ")

	code, stdout, _ = exitCode("dump", "--verify-index", logs[0])
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stdout, "crcValid: false")

	code, _, stderr := exitCode("frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "unknown command")

	code, _, stderr = exitCode()
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Usage:")
}

// TestBinaryCheckRepair runs issue 17's reproduction with the real binary:
// a topics.json cut in half fails check (exit 1) and serve, repair (exit
// 0) rebuilds it, and then check passes and every record is consumed.
func TestBinaryCheckRepair(t *testing.T) {
	bin := spoolBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "events", 2, 20)
	reg := filepath.Join(data, "topics.json")
	st, err := os.Stat(reg)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(reg, st.Size()/2))

	exitCode := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), stdout.String(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stdout.String(), stderr.String()
	}
	code, stdout, _ := exitCode("check", "--quiet", data)
	require.Equal(t, 1, code, stdout)
	require.True(t, strings.HasPrefix(stdout, "error: "+reg+": "), stdout)
	code, _, stderr := exitCode("serve", "--data", data, "--listen", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "topic registry is damaged")

	code, stdout, stderr = exitCode("repair", data)
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	require.Contains(t, stdout, "wrote "+reg+" with 2 topics")
	code, stdout, _ = exitCode("check", "--quiet", data)
	require.Equal(t, 0, code, stdout)
	require.Empty(t, stdout)
	code, stdout, stderr = exitCode("consume", "--data", data, "--topic", "events", "--from", "earliest", "--count", "120")
	require.Equal(t, 0, code, stderr)
	require.Len(t, strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"), 2*20*recordsPerBatch)
	for k := range 20 * recordsPerBatch {
		require.Equal(t, 2, strings.Count(stdout, fmt.Sprintf("value-%d-", k)), "record %d of each partition", k)
	}
}

// FuzzLogFile feeds arbitrary bytes to dump and check as a segment's .log
// and .index: whatever the bytes, neither may panic, and the exit status
// is 0 or 1.
func FuzzLogFile(f *testing.F) {
	b, err := record.NewBatch([]record.Record{{Key: []byte("k"), Value: []byte("v")}, {Value: []byte("w")}}, record.BatchOptions{})
	if err != nil {
		f.Fatal(err)
	}
	valid := b.Bytes()
	b.SetBaseOffset(2)
	two := append(append([]byte(nil), valid...), b.Bytes()...)
	f.Add([]byte{}, []byte{})
	f.Add(valid, []byte{})
	f.Add(two, []byte{0, 0, 0, 3, 0, 0, 0, byte(len(valid))})
	f.Add(two[:len(two)-1], []byte{0, 0, 0, 3, 0, 0, 0, 5})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff\xff\xff"), []byte{1, 2, 3})

	f.Fuzz(func(t *testing.T, logData, indexData []byte) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, segment.FileName(0, segment.LogSuffix))
		if err := os.WriteFile(logPath, logData, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sibling(logPath, segment.IndexSuffix), indexData, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sibling(logPath, segment.TimeIndexSuffix), indexData, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"dump", "--records", "--verify-index", logPath},
			{"dump", sibling(logPath, segment.TimeIndexSuffix)},
			{"check", dir},
		} {
			if code, out, _ := runTool(t, args...); code != exitOK && code != exitProblem {
				t.Fatalf("%v: exit %d\n%s", args, code, out)
			}
		}
	})
}
