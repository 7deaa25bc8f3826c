package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadOnlyCommandsCreateNothing: a command that only reads refuses a
// missing directory, or one that is not a data directory, and leaves the
// tree as it was (no data directory, lock file or registry made).
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "missing")
	empty := filepath.Join(tmp, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	other := filepath.Join(tmp, "other")
	require.NoError(t, os.MkdirAll(filepath.Join(other, "dbus-1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("hello"), 0o644))

	for _, dir := range []string{missing, empty, other} {
		for _, args := range [][]string{
			{"topics", "list", "--data", dir},
			{"topics", "describe", "--data", dir},
			{"topics", "delete", "--data", dir, "--topic", "t"},
			{"consume", "--data", dir, "--topic", "nope", "--timeout", "10ms"},
			{"groups", "list", "--data", dir},
			{"groups", "describe", "--data", dir, "--group", "g"},
			{"perf", "consume", "--data", dir, "--topic", "t", "--records", "1"},
			{"check", dir},
		} {
			before := snapshot(t, tmp)
			code, _, stderr := runTool(t, args...)
			require.NotEqual(t, exitOK, code, "%v\n%s", args, stderr)
			if dir == missing {
				require.True(t, strings.Contains(stderr, "does not exist") || strings.Contains(stderr, "no such file"), "%v: %s", args, stderr)
			} else {
				require.Contains(t, stderr, "is not a spool data directory", args)
			}
			require.Equal(t, before, snapshot(t, tmp), "%v changed the tree", args)
		}
	}
}

// TestProduceCreatesOnlyTheLastElement: produce makes a new data
// directory, says so, and refuses to create missing parents.
func TestProduceCreatesOnlyTheLastElement(t *testing.T) {
	tmp := t.TempDir()
	deep := filepath.Join(tmp, "no", "such", "dir")
	code, _, stderr := runToolInput(t, "a\n", "produce", "--data", deep, "--topic", "t")
	require.Equal(t, exitProblem, code, stderr)
	require.Contains(t, stderr, "does not exist (create it first)")
	_, err := os.Stat(filepath.Join(tmp, "no"))
	require.ErrorIs(t, err, fs.ErrNotExist)

	data := filepath.Join(tmp, "data")
	code, _, stderr = runToolInput(t, "a\n", "produce", "--data", data, "--topic", "t")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "created a new data directory "+data)

	// The second time it is there: nothing to say.
	code, _, stderr = runToolInput(t, "b\n", "produce", "--data", data, "--topic", "t")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stderr, "created")

	// And the read-only commands take it.
	code, stdout, stderr := runTool(t, "topics", "list", "--data", data)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "t\n", stdout)
}

// TestCheckRefusesNonDataDir: "spool check /etc" is not "clean".
func TestCheckRefusesNonDataDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dbus-1"), 0o755))
	code, stdout, stderr := runTool(t, "check", dir)
	require.Equal(t, exitUsage, code, stdout)
	require.NotContains(t, stdout, "clean")
	require.Contains(t, stderr, "is not a spool data directory")
}

// TestConsumeLockedDirNamesTheWayOut: a directory a server holds cannot
// be opened; the error says how to read it anyway.
func TestConsumeLockedDirNamesTheWayOut(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	s := startServe(t, "--data", data)
	code, _, stderr := runTool(t, "consume", "--data", data, "--topic", "events", "--timeout", "10ms")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "in use by another process")
	require.Contains(t, stderr, "--bootstrap-server HOST:PORT")
	_ = s
}

// TestConsumeSaysItWaits: from the latest offset, consume says what it is
// waiting for, so that the default does not look like a hang.
func TestConsumeSaysItWaits(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	code, _, stderr := runTool(t, "consume", "--data", data, "--topic", "events", "--timeout", "10ms")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stderr, "reading events from the latest offset; waiting for new records (--from earliest to read what is there)")

	code, _, stderr = runTool(t, "consume", "--data", data, "--topic", "events", "--from", "earliest", "--count", "1")
	require.Equal(t, exitOK, code, stderr)
	require.False(t, strings.Contains(stderr, "waiting for new records"), stderr)
}

// TestConsumeBootstrapServer: consume reads a served directory through the
// server, with the same printing, --from and --count.
func TestConsumeBootstrapServer(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\nb\nc\n")
	s := startServe(t, "--data", data)
	code, stdout, stderr := runTool(t, "consume", "--bootstrap-server", s.addr, "--topic", "events",
		"--from", "earliest", "--count", "3", "--print-offsets", "--timeout", "20s")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "0 0 a\n0 1 b\n0 2 c\n", stdout)

	code, stdout, stderr = runTool(t, "consume", "--bootstrap-server", s.addr, "--topic", "events", "--from", "1", "--count", "2")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "b\nc\n", stdout)

	code, _, stderr = runTool(t, "consume", "--bootstrap-server", s.addr, "--topic", "nope", "--timeout", "1s")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "no such topic")

	code, _, stderr = runTool(t, "consume", "--bootstrap-server", s.addr, "--data", data, "--topic", "events")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--data opens a data directory")
}
