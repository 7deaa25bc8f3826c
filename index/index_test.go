package index

import (
	"fmt"
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

// A crash leaves the index at the size of its last growth step, with zeros
// after the entries that were written; reopening for writing finds exactly
// those entries.
func TestOffsetReopenUntrimmed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	require.NoError(t, x.Append(0, 0)) // an entry of all zeros is valid first
	require.NoError(t, x.Append(7, 300))
	require.NoError(t, x.Sync())
	require.NoError(t, x.CloseNoTrim())
	st, _ := os.Stat(p)
	require.Equal(t, int64(firstStep), st.Size(), "the first step, not the maximum")

	x, err = OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	require.Equal(t, 2, x.Len())
	require.True(t, x.Untrimmed())
	require.NoError(t, x.Append(9, 400))
	require.NoError(t, x.Close())
}

// The file grows in steps as entries arrive - a first step, doubling, then
// fixed steps - and never past the maximum; a trim cuts it to its entries.
func TestIndexGrowsInSteps(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	const maxBytes = 3 << 20
	x, err := OpenOffset(nil, p, 0, maxBytes, true)
	require.NoError(t, err)
	require.Equal(t, int64(0), x.Allocated(), "opening allocates nothing")
	var sizes []int64
	for i := int64(1); !x.Full(); i++ {
		require.NoError(t, x.Append(i, i))
		if a := x.Allocated(); len(sizes) == 0 || a != sizes[len(sizes)-1] {
			sizes = append(sizes, a)
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, a, st.Size(), "the file's size is what it has allocated")
		}
		require.GreaterOrEqual(t, x.Allocated(), int64(x.Len()*OffsetEntrySize))
	}
	want := []int64{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 3 << 20}
	require.Equal(t, want, sizes)
	require.ErrorIs(t, x.Append(1<<30, 1<<30), ErrFull)
	x.TruncateAt(1000, 1<<40)
	require.NoError(t, x.Close())
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(999*OffsetEntrySize), st.Size())

	// A time index's steps are whole 12-byte entries.
	tp := filepath.Join(t.TempDir(), "t")
	tx, err := OpenTime(nil, tp, 0, maxBytes, true)
	require.NoError(t, err)
	for i := int64(1); i <= 400; i++ {
		_, err := tx.MaybeAppend(i, i)
		require.NoError(t, err)
	}
	require.Equal(t, int64(2*firstStep-2*firstStep%TimeEntrySize), tx.Allocated())
	require.NoError(t, tx.CloseNoTrim())
	tx, err = OpenTime(nil, tp, 0, maxBytes, false)
	require.NoError(t, err)
	require.Equal(t, 400, tx.Len())
	require.True(t, tx.Untrimmed())
	require.NoError(t, tx.Close())
}

// A crash after the file grew several times, with its entries partly
// synced: whatever size the file has - the last step, or an earlier one
// whose growth was the last durable - the reopened index reads the
// entries that are there, and appends go on growing it.
func TestReopenAfterCrashWithPartialGrowth(t *testing.T) {
	for _, cut := range []int64{0, 8 << 10, 4 << 10} { // 0: the size the crash left
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "i")
			x, err := OpenOffset(nil, p, 100, 1<<20, true)
			require.NoError(t, err)
			const n = 1500 // 12,000 bytes: grown to 4, 8, then 16 KiB
			for i := int64(1); i <= n; i++ {
				require.NoError(t, x.Append(100+i*2, i*50))
			}
			require.Equal(t, int64(16<<10), x.Allocated())
			require.NoError(t, x.CloseNoTrim())
			want := n
			if cut > 0 {
				require.NoError(t, os.Truncate(p, cut))
				want = int(cut / OffsetEntrySize)
			}

			x, err = OpenOffset(nil, p, 100, 1<<20, true)
			require.NoError(t, err)
			require.Equal(t, want, x.Len())
			require.Equal(t, cut == 0, x.Untrimmed())
			for _, i := range []int{0, want / 2, want - 1} {
				e, err := x.Entry(i)
				require.NoError(t, err)
				require.Equal(t, OffsetEntry{100 + int64(i+1)*2, int64(i+1) * 50}, e)
			}
			e, ok, err := x.Lookup(100 + int64(want)*2 + 1)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, 100+int64(want)*2, e.Offset)
			for i := int64(want + 1); i <= n+1000; i++ {
				require.NoError(t, x.Append(100+i*2, i*50))
			}
			require.NoError(t, x.Close())
			x, err = OpenOffset(nil, p, 100, 1<<20, false)
			require.NoError(t, err)
			require.Equal(t, n+1000, x.Len())
			require.False(t, x.Untrimmed())
			require.NoError(t, x.Close())
		})
	}
}

// Damage in an untrimmed file is found, not read around: a flipped bit in
// the zeros after the entries, or an entry knocked out of order (the run
// stops there and what follows is not zero), makes the file corrupt - the
// segment rebuilds it from the log.
func TestBitFlipInUntrimmedTailIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "i")
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 100; i++ {
		require.NoError(t, x.Append(i, i*10))
	}
	require.NoError(t, x.CloseNoTrim())
	good, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Len(t, good, firstStep)

	for name, at := range map[string]int{
		"in the zeros":              3000,
		"in the last byte":          firstStep - 1,
		"an entry out of order":     50 * OffsetEntrySize, // entry 50 gains 2^31: 51 is out of order
		"just after the last entry": 100 * OffsetEntrySize,
	} {
		t.Run(name, func(t *testing.T) {
			bad := append([]byte(nil), good...)
			bad[at] ^= 0x80
			require.NoError(t, os.WriteFile(p, bad, 0o644))
			for _, writable := range []bool{false, true} {
				_, err := OpenOffset(nil, p, 0, 1<<20, writable)
				require.ErrorIs(t, err, ErrCorrupt, "writable %v", writable)
			}
		})
	}

	tp := filepath.Join(dir, "t")
	tx, err := OpenTime(nil, tp, 0, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 10; i++ {
		_, err := tx.MaybeAppend(1000+i, i)
		require.NoError(t, err)
	}
	require.NoError(t, tx.CloseNoTrim())
	data, err := os.ReadFile(tp)
	require.NoError(t, err)
	data[2000] = 1
	require.NoError(t, os.WriteFile(tp, data, 0o644))
	_, err = OpenTime(nil, tp, 0, 1<<20, false)
	require.ErrorIs(t, err, ErrCorrupt)
}

// Truncated entries are zeroed in the file, so that after a crash it is
// still entries followed by zeros and the dropped entries do not come back.
func TestTruncatedEntriesAreZeroed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 0, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 20; i++ {
		require.NoError(t, x.Append(i*10, i*100))
	}
	x.TruncateAt(105, 1<<40)
	require.Equal(t, 10, x.Len())
	require.NoError(t, x.Append(107, 1050)) // smaller than the dropped entry 11
	require.NoError(t, x.Sync())
	require.NoError(t, x.CloseNoTrim())
	x, err = OpenOffset(nil, p, 0, 1<<20, false)
	require.NoError(t, err)
	require.Equal(t, 11, x.Len())
	last, ok := x.Last()
	require.True(t, ok)
	require.Equal(t, OffsetEntry{107, 1050}, last)
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
	// A zero timestamp is never an entry: after a valid one it is
	// unwritten space, before one it is damage.
	require.NoError(t, os.WriteFile(tp, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1}, 0o644))
	_, err = OpenTime(nil, tp, 0, 4096, false)
	require.ErrorIs(t, err, ErrCorrupt)

	// Zeros alone are an empty index left by a crash: untrimmed, no entries -
	// a lone zero offset entry followed by zeros included.
	for _, name := range []string{"zeros.index", "zeros.timeindex"} {
		zp := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(zp, make([]byte, 96), 0o644))
		var n int
		var untrimmed bool
		if name == "zeros.index" {
			x, err := OpenOffset(nil, zp, 0, 4096, false)
			require.NoError(t, err)
			n, untrimmed = x.Len(), x.Untrimmed()
			require.NoError(t, x.Close())
		} else {
			x, err := OpenTime(nil, zp, 0, 4096, false)
			require.NoError(t, err)
			n, untrimmed = x.Len(), x.Untrimmed()
			require.NoError(t, x.Close())
		}
		require.Equal(t, 0, n, name)
		require.True(t, untrimmed, name)
	}

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

// A full disk when the file must grow fails the append (or the Reserve)
// with an error and writes nothing: the entries and the file are as they
// were, nothing is touched past the end of the file, and once there is
// room the same append succeeds.
func TestFullDiskOnGrow(t *testing.T) {
	var sw vfs.Switch
	fsys := vfs.NewFaultFS(vfs.Default, sw.Inject)
	dir := t.TempDir()
	p := filepath.Join(dir, "i")
	x, err := OpenOffset(fsys, p, 0, 1<<20, true)
	require.NoError(t, err)
	require.NoError(t, x.Reserve(2))
	perStep := firstStep / OffsetEntrySize
	for i := int64(1); i <= int64(perStep); i++ {
		require.NoError(t, x.Append(i, i))
	}
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	require.NoError(t, x.Reserve(0), "nothing to grow")
	require.ErrorIs(t, x.Reserve(1), vfs.ErrNoSpace)
	next := int64(perStep + 1)
	require.ErrorIs(t, x.Append(next, next), vfs.ErrNoSpace)
	require.Equal(t, perStep, x.Len())
	require.Equal(t, int64(firstStep), x.Allocated())
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(firstStep), st.Size())
	_, ok, err := x.Lookup(1 << 30)
	require.NoError(t, err)
	require.True(t, ok)

	sw.Reset()
	require.NoError(t, x.Append(next, next))
	require.Equal(t, perStep+1, x.Len())
	require.NoError(t, x.Close())

	// A disk with room for less than a step: the growth takes just what
	// the entry needs.
	p2 := filepath.Join(dir, "i2")
	x, err = OpenOffset(vfs.NewFaultFS(vfs.Default, func(op vfs.Op, path string, n int) (int, error) {
		if st, err := os.Stat(path); op == vfs.OpAllocate && err == nil && int64(n)-st.Size() > 100 {
			return 0, vfs.ErrNoSpace
		}
		return n, nil
	}), p2, 0, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 3; i++ {
		require.NoError(t, x.Append(i, i))
		require.Equal(t, i*OffsetEntrySize, x.Allocated())
	}
	require.NoError(t, x.Reserve(2))
	require.Equal(t, int64(5*OffsetEntrySize), x.Allocated())
	require.NoError(t, x.CloseNoTrim())

	// The time index the same.
	tx, err := OpenTime(fsys, filepath.Join(dir, "t"), 0, 1<<20, true)
	require.NoError(t, err)
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	ok, err = tx.MaybeAppend(1000, 1)
	require.ErrorIs(t, err, vfs.ErrNoSpace)
	require.False(t, ok)
	require.Equal(t, 0, tx.Len())
	require.NoError(t, tx.Close())
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

// A growth that fails part of the way leaves the index file as it was:
// its entries read back unchanged, not as a corrupt file, and the next
// growth starts from the same size.
func TestFailedGrowthLeavesFileAsItWas(t *testing.T) {
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(nil, p, 100, 1<<20, true)
	require.NoError(t, err)
	for i := int64(1); i <= 3; i++ {
		require.NoError(t, x.Append(100+i, i*100))
	}
	require.NoError(t, x.Close()) // trimmed to its 3 entries
	x, err = OpenOffset(halfAllocFS{vfs.Default}, p, 100, 1<<20, true)
	require.NoError(t, err, "opening allocates nothing")
	require.ErrorIs(t, x.Append(104, 400), vfs.ErrNoSpace)
	require.Equal(t, 3, x.Len())
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(3*OffsetEntrySize), st.Size())
	require.NoError(t, x.CloseNoTrim())
	x, err = OpenOffset(nil, p, 100, 1<<20, false)
	require.NoError(t, err, "the entries must still read as a trimmed index")
	require.Equal(t, 3, x.Len())
	require.False(t, x.Untrimmed())
	require.NoError(t, x.Close())
}

// Sync of an index unchanged since its last Sync, or since AssumeSynced,
// syncs nothing; every kind of change - an append, a truncation, a reset,
// a trim - makes the next Sync sync again. A trim of a file that is its
// entries already does not truncate it.
func TestSyncOnlyWhenChanged(t *testing.T) {
	var sw vfs.Switch
	fsys := vfs.NewFaultFS(vfs.Default, sw.Inject)
	p := filepath.Join(t.TempDir(), "i")
	x, err := OpenOffset(fsys, p, 0, 1<<20, true)
	require.NoError(t, err)
	syncs := func() int {
		t.Helper()
		before := sw.Count(vfs.OpSync)
		require.NoError(t, x.Sync())
		return sw.Count(vfs.OpSync) - before
	}
	require.Equal(t, 1, syncs(), "a file just opened may hold what a crash left unsynced")
	require.Zero(t, syncs())
	for i := int64(1); i <= 5; i++ {
		require.NoError(t, x.Append(i, i))
	}
	require.Equal(t, 1, syncs())
	require.Zero(t, syncs())
	x.TruncateAt(4, 4)
	require.Equal(t, 1, syncs())
	x.Reset()
	require.Equal(t, 1, syncs())
	require.NoError(t, x.Append(1, 1))
	require.NoError(t, x.Sync())
	require.NoError(t, x.Trim())
	require.Equal(t, 1, syncs(), "the trim cut the file")
	require.NoError(t, x.Close())

	// Reopened as its owner's clean close left it: trimmed and synced.
	x, err = OpenOffset(fsys, p, 0, 1<<20, true)
	require.NoError(t, err)
	x.AssumeSynced()
	require.Zero(t, syncs())
	truncs := sw.Count(vfs.OpTruncate)
	require.NoError(t, x.Trim())
	require.Equal(t, truncs, sw.Count(vfs.OpTruncate), "the file is its entries already")
	require.Zero(t, syncs())
	require.NoError(t, x.Close())
}
