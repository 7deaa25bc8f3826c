package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs of the given size (mount's size= option) for
// the test and returns its path. Mounting needs root (CAP_SYS_ADMIN): the
// test is skipped, saying why, where that is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("skipped: cannot mount a %s tmpfs for a real full disk (needs root): %v", size, err)
	}
	// Detached, so that a broker a failed test left open cannot keep it mounted.
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH)) })
	return dir
}

// fillLeaving (re)allocates the file ballast so that about leave bytes of
// the file system at dir stay free.
func fillLeaving(t *testing.T, dir, ballast string, leave int64) {
	t.Helper()
	if err := os.Remove(ballast); err != nil {
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * st.Bsize
	require.Greater(t, free, leave)
	f, err := os.Create(ballast)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Fallocate(int(f.Fd()), 0, 0, free-leave))
}

// The report's case on a real full disk (a 48 MiB tmpfs): creating a topic
// on a disk with less room than its files take (a page for each index's
// first growth step, and its metadata) fails with the typed error and
// leaves nothing; the broker restarts with little free (its partition
// reopens allocating nothing) and goes on producing; and once the
// ballast is gone the same creation succeeds without a restart.
func TestRealFullDisk(t *testing.T) {
	m := mountTmpfs(t, "48m")
	dir := filepath.Join(m, "data")
	ballast := filepath.Join(m, "ballast")
	ctx := context.Background()
	b := openBroker(t, dir, Options{})
	require.NoError(t, b.CreateTopic(ctx, "a", TopicConfig{}))
	for i := range 100 {
		_, err := b.Produce(ctx, Record{Topic: "a", Value: []byte(fmt.Sprint("v", i))})
		require.NoError(t, err)
	}
	fillLeaving(t, m, ballast, 4<<10)
	names, reg := dirState(t, dir)
	err := b.CreateTopic(ctx, "b", TopicConfig{})
	require.ErrorIs(t, err, ErrStorage)
	require.ErrorIs(t, err, syscall.ENOSPC)
	gotNames, gotReg := dirState(t, dir)
	require.Equal(t, names, gotNames)
	require.Equal(t, reg, gotReg)
	require.NoError(t, b.Close()) // trims a's indexes to their entries

	fillLeaving(t, m, ballast, 64<<10)
	b = openBroker(t, dir, Options{})
	defer b.Close()
	desc, err := b.DescribeTopic("a")
	require.NoError(t, err)
	require.NoError(t, desc.Partitions[0].Offline, "reopening allocates nothing")
	_, err = b.Produce(ctx, Record{Topic: "a", Value: []byte("v100")})
	require.NoError(t, err)
	require.Len(t, consumeAll(t, b, "a"), 101)
	fillLeaving(t, m, ballast, 4<<10)
	require.ErrorIs(t, b.CreateTopic(ctx, "b", TopicConfig{}), syscall.ENOSPC)

	require.NoError(t, os.Remove(ballast))
	require.NoError(t, b.CreateTopic(ctx, "b", TopicConfig{}))
	_, err = b.Produce(ctx, Record{Topic: "b", Value: []byte("x")})
	require.NoError(t, err)
}

// descriptorsUnder lists the paths of this process's open file
// descriptors on files under dir, from /proc/self/fd.
func descriptorsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			out = append(out, target)
		}
	}
	return out
}

// The broker's lock on its data directory is the only lock it holds: its
// partitions' logs take none of their own (the broker's excludes other
// processes from all of them), so no partition holds a .lock descriptor.
// A second broker on the same directory still fails, and the directory
// opens again once the first has closed.
func TestBrokerLocksItsDataDirNotEachPartition(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir()) // /proc shows resolved paths
	require.NoError(t, err)
	ctx := context.Background()
	b := openBroker(t, dir, Options{})
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 4}))
	_, err = b.Produce(ctx, Record{Topic: "t", Value: []byte("v")})
	require.NoError(t, err)
	var locks []string
	for _, p := range descriptorsUnder(t, dir) {
		if filepath.Base(p) == ".lock" {
			locks = append(locks, p)
		}
	}
	require.Equal(t, []string{filepath.Join(dir, ".lock")}, locks)
	for i := range 4 {
		_, err := os.Stat(filepath.Join(dir, fmt.Sprint("t-", i), ".lock"))
		require.ErrorIs(t, err, os.ErrNotExist)
	}

	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, ErrLocked, "a second broker on the data directory")
	require.NoError(t, b.Close())
	b = openBroker(t, dir, Options{})
	require.NoError(t, b.Close())
}
