package index

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/stretchr/testify/require"
)

func TestOffsetAppendLookup(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "00000000000000001000.index")
	x, err := OpenOffset(nil, p, 1000, 80, true)
	require.NoError(t, err)
	// Empty: every lookup starts at the segment's beginning.
	_, ok, err := x.Lookup(5000)
	require.NoError(t, err)
	require.False(t, ok)

	for i := int64(0); i < 10; i++ {
		require.NoError(t, x.Append(1000+i*10+9, i*100))
	}
	require.True(t, x.Full())
	require.ErrorIs(t, x.Append(2000, 5000), ErrFull)

	cases := []struct {
		target  int64
		ok      bool
		off, at int64
	}{
		{999, false, 0, 0}, {1000, false, 0, 0}, {1008, false, 0, 0},
		{1009, true, 1009, 0}, {1010, true, 1009, 0}, {1019, true, 1019, 100},
		{1098, true, 1089, 800}, {1099, true, 1099, 900}, {1 << 40, true, 1099, 900},
	}
	for _, c := range cases {
		e, ok, err := x.Lookup(c.target)
		require.NoError(t, err)
		require.Equal(t, c.ok, ok, "target %d", c.target)
		if ok {
			require.Equal(t, OffsetEntry{c.off, c.at}, e, "target %d", c.target)
		}
	}
	require.NoError(t, x.Close()) // trims
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(80), st.Size())

	// Reopened read-only, the same answers.
	x, err = OpenOffset(nil, p, 1000, 80, false)
	require.NoError(t, err)
	require.Equal(t, 10, x.Len())
	e, ok, err := x.Lookup(1055)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, OffsetEntry{1049, 400}, e)
	require.ErrorIs(t, x.Append(3000, 9000), ErrReadOnly)
	require.NoError(t, x.Close())
}

func TestOffsetRejectsOutOfOrder(t *testing.T) {
	x, err := OpenOffset(nil, filepath.Join(t.TempDir(), "i"), 100, 1024, true)
	require.NoError(t, err)
	defer x.Close()
	require.ErrorIs(t, x.Append(99, 0), ErrOutOfOrder)
	require.NoError(t, x.Append(110, 10))
	require.ErrorIs(t, x.Append(110, 20), ErrOutOfOrder)
	require.ErrorIs(t, x.Append(120, 10), ErrOutOfOrder)
	require.ErrorIs(t, x.Append(100+1<<32, 30), ErrOutOfOrder)
	require.Equal(t, 1, x.Len())
}

func TestOffsetTruncateAt(t *testing.T) {
	x, err := OpenOffset(nil, filepath.Join(t.TempDir(), "i"), 0, 1024, true)
	require.NoError(t, err)
	defer x.Close()
	for i := int64(1); i <= 5; i++ {
		require.NoError(t, x.Append(i*10, i*1000))
	}
	x.TruncateAt(35, 1<<40)
	require.Equal(t, 3, x.Len())
	x.TruncateAt(1<<40, 2000)
	require.Equal(t, 1, x.Len())
	require.NoError(t, x.Append(20, 2000))
	require.Equal(t, 2, x.Len())
}

// A crash leaves the index at full size with zeros after the entries that
// were written; reopening for writing finds exactly those entries.
func TestOffsetReopenUntrimmed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 0, 4096, true)
	require.NoError(t, err)
	require.NoError(t, x.Append(0, 0)) // an entry of all zeros is valid first
	require.NoError(t, x.Append(7, 300))
	require.NoError(t, x.Sync())
	require.NoError(t, x.CloseNoTrim())
	st, _ := os.Stat(p)
	require.Equal(t, int64(4096), st.Size())

	x, err = OpenOffset(nil, p, 0, 4096, true)
	require.NoError(t, err)
	require.Equal(t, 2, x.Len())
	require.NoError(t, x.Append(9, 400))
	require.NoError(t, x.Close())
}

func TestCorruptFilesAreReported(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.index")
	require.NoError(t, os.WriteFile(p, []byte{1, 2, 3}, 0o644))
	_, err := OpenOffset(nil, p, 0, 4096, false)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = OpenOffset(nil, p, 0, 4096, true)
	require.ErrorIs(t, err, ErrCorrupt)

	// Whole entries but out of order, in a trimmed file.
	require.NoError(t, os.WriteFile(p, []byte{0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0, 0, 20}, 0o644))
	_, err = OpenOffset(nil, p, 0, 4096, false)
	require.ErrorIs(t, err, ErrCorrupt)

	tp := filepath.Join(dir, "bad.timeindex")
	require.NoError(t, os.WriteFile(tp, make([]byte, 13), 0o644))
	_, err = OpenTime(nil, tp, 0, 4096, false)
	require.ErrorIs(t, err, ErrCorrupt)
	require.NoError(t, os.WriteFile(tp, make([]byte, 12), 0o644)) // a zero timestamp
	_, err = OpenTime(nil, tp, 0, 4096, false)
	require.ErrorIs(t, err, ErrCorrupt)

	// An empty file is a valid empty index.
	ep := filepath.Join(dir, "empty.index")
	require.NoError(t, os.WriteFile(ep, nil, 0o644))
	x, err := OpenOffset(nil, ep, 0, 4096, false)
	require.NoError(t, err)
	require.Equal(t, 0, x.Len())
	require.NoError(t, x.Close())
}

func TestTimeIndex(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t")
	x, err := OpenTime(nil, p, 500, 12*8, true)
	require.NoError(t, err)
	ok, err := x.MaybeAppend(1000, 509)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = x.MaybeAppend(1000, 519) // not greater: skipped
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = x.MaybeAppend(900, 529)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = x.MaybeAppend(2000, 539)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = x.MaybeAppend(3000, 520)
	require.ErrorIs(t, err, ErrOutOfOrder)

	_, ok, err = x.Lookup(1000)
	require.NoError(t, err)
	require.False(t, ok, "no entry below 1000: search from the segment's start")
	e, ok, err := x.Lookup(1001)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, TimeEntry{1000, 509}, e)
	e, ok, err = x.Lookup(5000)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, TimeEntry{2000, 539}, e)
	last, ok := x.Last()
	require.True(t, ok)
	require.Equal(t, int64(2000), last.Timestamp)

	x.TruncateAt(530)
	require.Equal(t, 1, x.Len())
	require.NoError(t, x.Close())
	x, err = OpenTime(nil, p, 500, 12*8, false)
	require.NoError(t, err)
	require.Equal(t, 1, x.Len())
	require.NoError(t, x.Close())
}

// A full disk fails preallocation with an error; nothing is mapped that a
// later write could fault on.
func TestFullDiskFailsAllocation(t *testing.T) {
	var sw vfs.Switch
	fsys := vfs.NewFaultFS(vfs.Default, sw.Inject)
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	_, err := OpenOffset(fsys, filepath.Join(t.TempDir(), "i"), 0, 4096, true)
	require.ErrorIs(t, err, vfs.ErrNoSpace)
	_, err = OpenTime(fsys, filepath.Join(t.TempDir(), "t"), 0, 4096, true)
	require.ErrorIs(t, err, vfs.ErrNoSpace)
}

// If the file is cut short under the map (by another program), a lookup
// returns ErrFault instead of crashing the process with SIGBUS.
func TestTruncatedUnderMapFaultsSafely(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	defer x.CloseNoTrim()
	for i := int64(0); i < 100_000; i++ {
		require.NoError(t, x.Append(i, i*10))
	}
	require.NoError(t, os.Truncate(p, 0))
	_, _, err = x.Lookup(99_999)
	require.ErrorIs(t, err, ErrFault)
	err = x.Append(200_000, 2_000_000)
	require.ErrorIs(t, err, ErrFault)
}

func TestConcurrentReadersDuringAppends(t *testing.T) {
	x, err := OpenOffset(nil, filepath.Join(t.TempDir(), "i"), 0, 8*20000, true)
	require.NoError(t, err)
	defer x.Close()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				e, ok, err := x.Lookup(1 << 30)
				if err != nil {
					t.Error(err)
					return
				}
				if ok && e.Position != e.Offset*3 {
					t.Errorf("torn entry %+v", e)
					return
				}
			}
		}()
	}
	for i := int64(1); i <= 20000; i++ {
		require.NoError(t, x.Append(i, i*3))
	}
	close(done)
	wg.Wait()
}

// halfAllocFS is a file system whose fallocate runs out of space half way,
// as ext4's can: the file keeps the size reached before the error.
type halfAllocFS struct{ vfs.FS }

func (h halfAllocFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return halfAllocFile{f}, nil
}

type halfAllocFile struct{ vfs.File }

func (f halfAllocFile) Allocate(off, n int64) error {
	if err := f.File.Allocate(off, n/2); err != nil {
		return err
	}
	return &os.PathError{Op: "fallocate", Path: f.Name(), Err: vfs.ErrNoSpace}
}

// A preallocation that fails part of the way leaves the index file as it
// was: its entries read back unchanged, not as a corrupt file.
func TestFailedAllocationLeavesFileAsItWas(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 100, 4096, true)
	require.NoError(t, err)
	for i := int64(1); i <= 3; i++ {
		require.NoError(t, x.Append(100+i, i*100))
	}
	require.NoError(t, x.Close()) // trimmed to its 3 entries
	_, err = OpenOffset(halfAllocFS{vfs.Default}, p, 100, 4096, true)
	require.ErrorIs(t, err, vfs.ErrNoSpace)
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(3*OffsetEntrySize), st.Size())
	x, err = OpenOffset(nil, p, 100, 4096, false)
	require.NoError(t, err, "the entries must still read as a trimmed index")
	require.Equal(t, 3, x.Len())
	require.NoError(t, x.Close())
}
