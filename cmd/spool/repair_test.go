package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
)

// TestRepairRefusesToGuess: each way the partition directories leave a
// topic undecided makes repair write nothing and say what to do; once
// that is done, repair rebuilds the registry and every record is there.
func TestRepairRefusesToGuess(t *testing.T) {
	const anotherID = "AAAAAAAAAAAAAAAAAAAAAQ"
	meta := func(data string, n string) string { return filepath.Join(data, "orders-"+n, "partition.metadata") }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, data string) string // returns the path repair must name
		want   string
		fix    func(t *testing.T, data string)
		// lost is the number of records the fix gives up (a lost
		// partition's); the rest must all be readable.
		lost int
	}{
		{"partitions disagree on the topic id", func(t *testing.T, data string) string {
			require.NoError(t, os.WriteFile(meta(data, "2"), []byte("version: 0\ntopic_id: "+anotherID+"\n"), 0o644))
			return meta(data, "2")
		}, "topic id " + anotherID + ", but ", func(t *testing.T, data string) {
			// The operator decides orders-2 is the topic's after all.
			require.NoError(t, os.Remove(meta(data, "2")))
		}, 0},
		{"gap in the partition numbers", func(t *testing.T, data string) string {
			require.NoError(t, os.RemoveAll(filepath.Join(data, "orders-1")))
			return filepath.Join(data, "orders-1")
		}, `topic "orders" has partition directories up to 2 but not this one: if that partition's records are gone, create the directory empty (mkdir)`,
			func(t *testing.T, data string) {
				require.NoError(t, os.Mkdir(filepath.Join(data, "orders-1"), 0o755))
			}, 15 * recordsPerBatch},
		{"partition.metadata unreadable", func(t *testing.T, data string) string {
			require.NoError(t, os.WriteFile(meta(data, "0"), []byte("version: 0\ntopic_id: !\n"), 0o644))
			return meta(data, "0")
		}, "cannot tell which topic incarnation the directory belongs to", func(t *testing.T, data string) {
			require.NoError(t, os.Remove(meta(data, "0")))
		}, 0},
		{"not a topic name", func(t *testing.T, data string) string {
			p := filepath.Join(data, "not a topic-0")
			require.NoError(t, os.Mkdir(p, 0o755))
			return p
		}, "invalid topic name", func(t *testing.T, data string) {
			require.NoError(t, os.Remove(filepath.Join(data, "not a topic-0")))
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			makeDataDir(t, data, "orders", 3, 15)
			b, err := spool.Open(data, spool.Options{})
			require.NoError(t, err)
			before := allValues(t, b, "orders")
			require.NoError(t, b.Close())
			reg := filepath.Join(data, "topics.json")
			modify(t, reg, func(b []byte) []byte { return b[:len(b)/3] })
			damaged, err := os.ReadFile(reg)
			require.NoError(t, err)
			path := tc.damage(t, data)
			files := snapshot(t, data)

			code, out, _ := runTool(t, "repair", data)
			require.Equal(t, exitProblem, code, out)
			var found bool
			for _, l := range problemLines(out, "error") {
				found = found || strings.HasPrefix(l, "error: "+path+": ") && strings.Contains(l, tc.want)
			}
			require.True(t, found, "want an error about %s saying %q in\n%s", path, tc.want, out)
			require.Contains(t, out, "cannot be rebuilt without guessing: nothing written")
			require.NotContains(t, out, "topic orders:")
			require.Equal(t, files, snapshot(t, data), "a refused repair wrote something")
			now, err := os.ReadFile(reg)
			require.NoError(t, err)
			require.Equal(t, damaged, now)

			tc.fix(t, data)
			code, out, _ = runTool(t, "repair", data)
			require.Equal(t, exitOK, code, out)
			require.Contains(t, out, "wrote "+reg+" with 2 topics")
			code, out, _ = runTool(t, "check", data)
			require.Equal(t, exitOK, code, out)
			b, err = spool.Open(data, spool.Options{})
			require.NoError(t, err)
			got := allValues(t, b, "orders")
			require.NoError(t, b.Close())
			require.Len(t, got, 3)
			lost := 0
			for i := range got {
				if len(got[i]) < len(before[i]) {
					require.Empty(t, got[i])
					lost += len(before[i])
					continue
				}
				require.Equal(t, before[i], got[i])
			}
			require.Equal(t, tc.lost, lost)
		})
	}
}

func TestRepairIntactRegistry(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "orders", 2, 15)
	files := snapshot(t, data)
	code, out, _ := runTool(t, "repair", data)
	require.Equal(t, exitOK, code, out)
	require.Equal(t, data+"/topics.json is intact: nothing to repair\n", out)
	require.Equal(t, files, snapshot(t, data))
}

func TestRepairDryRun(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "orders", 2, 15)
	reg := filepath.Join(data, "topics.json")
	require.NoError(t, os.Remove(reg))
	files := snapshot(t, data)
	code, out, _ := runTool(t, "repair", "--dry-run", data)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "topic orders: id ")
	require.Contains(t, out, "dry run: would write "+reg+" with 2 topics")
	require.Equal(t, files, snapshot(t, data))
}

func TestRepairRefusesWhileInUse(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "orders", 2, 15)
	b, err := spool.Open(data, spool.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	reg := filepath.Join(data, "topics.json")
	require.NoError(t, os.Truncate(reg, 10))

	code, out, stderr := runTool(t, "repair", data)
	require.Equal(t, exitProblem, code, out)
	require.Empty(t, out)
	require.Contains(t, stderr, "data directory "+data+" is in use by another process")
	st, err := os.Stat(reg)
	require.NoError(t, err)
	require.Equal(t, int64(10), st.Size())
}

func TestRepairUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, args := range [][]string{
		{"repair"},
		{"repair", dir, dir},
		{"repair", "--no-such-flag", dir},
		{"repair", filepath.Join(dir, "does-not-exist")},
		{"repair", file},
	} {
		code, stdout, stderr := runTool(t, args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Empty(t, stdout, "%v", args)
		require.NotEmpty(t, stderr, "%v", args)
	}
	code, stdout, _ := runTool(t, "help", "repair")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: spool repair [--dry-run] DIR")
	require.Contains(t, stdout, "--dry-run")
}
