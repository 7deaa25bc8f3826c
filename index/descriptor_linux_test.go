package index

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/stretchr/testify/require"
)

// descriptorsOf counts this process's open file descriptors on the file at
// path (deleted or not), from /proc/self/fd.
func descriptorsOf(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the descriptor ReadDir itself used, closed since
		}
		if target == path || strings.TrimSuffix(target, " (deleted)") == path {
			n++
		}
	}
	return n
}

// An index holds no file descriptor between calls, whatever it went
// through: created, grown many times, synced, truncated, trimmed, closed,
// reopened writable and read-only. (Each used to hold one for its life,
// two per segment, which bounded how many idle partitions a process could
// keep open.)
func TestIndexHoldsNoDescriptor(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir()) // /proc shows resolved paths
	require.NoError(t, err)
	p := filepath.Join(dir, "i")
	none := func(what string) {
		t.Helper()
		require.Zero(t, descriptorsOf(t, p), "descriptors on the index %s", what)
	}
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	none("after creating it")
	for i := int64(1); i <= 5000; i++ { // grows through several steps
		require.NoError(t, x.Append(i, i))
	}
	require.Greater(t, x.Allocated(), int64(firstStep))
	none("after growing it")
	require.NoError(t, x.Sync())
	none("after syncing it")
	x.TruncateAt(4000, 4000)
	require.NoError(t, x.Sync())
	none("after truncating and syncing it")
	require.NoError(t, x.CloseNoTrim())
	none("after closing it untrimmed")

	x, err = OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	require.True(t, x.Untrimmed())
	require.Equal(t, 3999, x.Len())
	none("reopened")
	require.NoError(t, x.Trim())
	require.NoError(t, x.Sync())
	none("after trimming and syncing it")
	require.NoError(t, x.Close())

	x, err = OpenOffset(nil, p, 0, 1<<20, false)
	require.NoError(t, err)
	require.Equal(t, 3999, x.Len())
	none("opened read-only")
	_, ok, err := x.Lookup(2500)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, x.Close())

	tp := filepath.Join(dir, "t")
	tx, err := OpenTime(nil, tp, 0, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 1000; i++ {
		_, err := tx.MaybeAppend(i, i)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Sync())
	require.Zero(t, descriptorsOf(t, tp), "descriptors on the time index")
	require.NoError(t, tx.Close())
}

// The operations that open the file again - a growth, a sync, a trim -
// fail with ErrReopen (wrapping the cause) when that open fails, and
// change nothing: no entry, no size, no synced state, no sticky sync
// error; the same operation succeeds once the file can be opened.
func TestReopenFailureChangesNothing(t *testing.T) {
	var sw vfs.Switch
	fsys := vfs.NewFaultFS(vfs.Default, sw.Inject)
	p := filepath.Join(t.TempDir(), "i")
	isIndex := func(path string) bool { return path == p }
	size := func() int64 {
		t.Helper()
		st, err := os.Stat(p)
		require.NoError(t, err)
		return st.Size()
	}
	x, err := OpenOffset(fsys, p, 0, 1<<20, true)
	require.NoError(t, err)
	perStep := firstStep / OffsetEntrySize
	for i := int64(1); i <= int64(perStep); i++ {
		require.NoError(t, x.Append(i, i))
	}

	// Growth.
	sw.FailAfter(vfs.OpOpen, isIndex, 0, vfs.ErrIO, 1)
	next := int64(perStep + 1)
	allocs := sw.Count(vfs.OpAllocate)
	err = x.Append(next, next)
	require.ErrorIs(t, err, ErrReopen)
	require.ErrorIs(t, err, vfs.ErrIO)
	require.Equal(t, perStep, x.Len())
	require.Equal(t, int64(firstStep), x.Allocated())
	require.Equal(t, int64(firstStep), size())
	require.Equal(t, allocs, sw.Count(vfs.OpAllocate), "nothing allocated")
	sw.FailAfter(vfs.OpOpen, isIndex, 0, vfs.ErrIO, 1)
	require.ErrorIs(t, x.Reserve(1), ErrReopen)
	require.Equal(t, int64(firstStep), x.Allocated())
	require.NoError(t, x.Append(next, next))
	require.Equal(t, perStep+1, x.Len())

	// Sync: not sticky, and the index is still unsynced afterwards.
	syncs := sw.Count(vfs.OpSync)
	sw.FailAfter(vfs.OpOpen, isIndex, 0, vfs.ErrIO, 1)
	err = x.Sync()
	require.ErrorIs(t, err, ErrReopen)
	require.ErrorIs(t, err, vfs.ErrIO)
	require.Equal(t, syncs, sw.Count(vfs.OpSync))
	require.NoError(t, x.Sync(), "a failed open wrote and dropped nothing: a later sync may succeed")
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync))

	// Trim: the file keeps its size and the index stays writable.
	sw.FailAfter(vfs.OpOpen, isIndex, 0, vfs.ErrIO, 1)
	before := size()
	require.ErrorIs(t, x.Trim(), ErrReopen)
	require.Equal(t, before, size())
	require.Equal(t, before, x.Allocated())
	require.NoError(t, x.Sync(), "the failed trim left nothing to sync")
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync))
	require.NoError(t, x.Append(next+1, next+1), "still writable")
	require.NoError(t, x.Trim())
	require.Equal(t, int64((perStep+2)*OffsetEntrySize), size())
	require.NoError(t, x.Close())

	x, err = OpenOffset(nil, p, 0, 1<<20, false)
	require.NoError(t, err)
	require.Equal(t, perStep+2, x.Len())
	require.False(t, x.Untrimmed())
	require.NoError(t, x.Close())
}

// An index whose path names another file now (replaced by a rename) or no
// file (removed) does not touch what is there: a trim, a growth or a sync
// fails with ErrReopen, and neither cuts, grows nor creates a file at the
// path.
func TestReopenFindsAnotherFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "i")
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	defer x.CloseNoTrim()
	require.NoError(t, x.Append(1, 1))

	other := filepath.Join(dir, "other")
	payload := make([]byte, 3*firstStep)
	for i := range payload {
		payload[i] = byte(i)
	}
	require.NoError(t, os.WriteFile(other, payload, 0o644))
	require.NoError(t, os.Rename(other, p))
	require.ErrorIs(t, x.Sync(), ErrReopen)
	require.ErrorIs(t, x.Trim(), ErrReopen)
	for i := int64(2); i <= int64(firstStep/OffsetEntrySize)+1; i++ {
		if err = x.Append(i, i); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrReopen, "the growth")
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, payload, got, "the file now at the path is untouched")

	require.NoError(t, os.Remove(p))
	err = x.Sync()
	require.ErrorIs(t, err, ErrReopen)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(p)
	require.ErrorIs(t, err, fs.ErrNotExist, "no file created at the path")
}
