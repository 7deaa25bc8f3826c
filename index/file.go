package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"
	"github.com/spoolmq/spool/internal/vfs"
)

// Errors. Each is wrapped with the file's path.
var (
	// ErrCorrupt means the index file cannot be trusted and must be rebuilt
	// from the log.
	ErrCorrupt = errors.New("index: corrupt")
	// ErrFull means the index has no room for another entry: the segment
	// must roll.
	ErrFull = errors.New("index: full")
	// ErrOutOfOrder means an append did not strictly increase the index.
	ErrOutOfOrder = errors.New("index: entry out of order")
	// ErrReadOnly means a write to an index opened read-only or trimmed.
	ErrReadOnly = errors.New("index: read-only")
	// ErrFault means the memory map faulted (the file shrank under it).
	ErrFault = errors.New("index: memory map fault")
	// ErrReopen means the index could not open its file again for an
	// operation the map cannot do (growth, trim, fsync): the open failed,
	// or the path now names another file than the one mapped. Nothing was
	// changed; the error also wraps the cause.
	ErrReopen = errors.New("index: cannot reopen the mapped file")
)

// Growth of a writable file: the first step, and the most one step adds.
// Steps double from firstStep up to maxStep, then add maxStep at a time,
// so an index of e entries took O(log e + e*entrySize/maxStep)
// allocations and holds at most max(firstStep, min(e*entrySize, maxStep))
// bytes of unwritten blocks: a first step, half the file, or one maxStep.
const (
	firstStep = 4 << 10
	maxStep   = 1 << 20
)

// file is a memory-mapped array of fixed-size entries. One goroutine writes
// (appends, truncates, grows); any number read concurrently: n is published
// with an atomic store after the entry bytes are written.
//
// A file holds no file descriptor: the map does not need one once made
// (the kernel keeps the mapped file alive through the map), and a broker
// with thousands of idle partitions would otherwise spend two descriptors
// on each for nothing. The few operations that do need one - growth
// (fallocate), trim (ftruncate) and sync (fsync) - open the file again by
// path and close it after (see reopen); they are rare next to lookups and
// appends, which only touch the map.
//
// A writable file maps its whole maximum size (address space only) but
// holds real disk blocks only for its first alloc bytes - its size on
// disk, always whole entries. An entry is written only below alloc: the
// file is grown (fallocate) first, so a full disk is an error from the
// append and never a fault on a page past the end of the file.
type file struct {
	fsys      vfs.FS
	path      string
	id        fs.FileInfo // the file mapped, told from another at path by os.SameFile
	mm        mmap.MMap
	entrySize int
	max       int // entries the mapping can hold
	alloc     int // bytes of the file with disk blocks (its size); the writer's
	n         atomic.Int64
	writable  atomic.Bool // false once trimmed; read by sync from other goroutines
	untrimmed bool        // zero entries followed the entries when opened

	// synced is true while the file, as it is, is on stable storage: set
	// by a successful sync (or AssumeSynced) and cleared after every
	// change - an entry written or cleared, a growth, a trim - so that
	// sync of an unchanged index costs no syscall. syncMu makes a sync
	// that finds it set wait for one in flight to finish.
	syncMu  sync.Mutex
	synced  atomic.Bool
	syncErr error // the first failed sync; every later sync returns it; guarded by syncMu
}

// open maps the file at path. A writable file is mapped at maxBytes
// (rounded down to whole entries) but keeps its size: it grows as entries
// are appended. A read-only one is mapped at its size. valid reports how
// many leading entries are in order; open reads that many as the index
// after checking that only zero entries follow them.
func open(fsys vfs.FS, path string, entrySize, maxBytes int, writable bool, valid func(mm []byte, n int) int) (*file, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	flag := os.O_RDONLY
	if writable {
		flag = os.O_RDWR | os.O_CREATE
	}
	f, err := fsys.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	ix := &file{fsys: fsys, path: path, entrySize: entrySize}
	ix.writable.Store(writable)
	err = ix.mapFile(f, maxBytes, valid)
	// The map keeps the file; the descriptor is not needed past here.
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("index: close %s after mapping it: %w", path, cerr)
	}
	if err != nil {
		if ix.mm != nil {
			_ = ix.mm.Unmap()
			ix.mm = nil
		}
		return nil, err
	}
	return ix, nil
}

func (ix *file) mapFile(f vfs.File, maxBytes int, valid func([]byte, int) int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ix.id = st
	size := st.Size()
	maxBytes -= maxBytes % ix.entrySize
	// Every size the file has ever had is whole entries: trimmed to its
	// entries, or grown by whole entries.
	if size%int64(ix.entrySize) != 0 {
		return fmt.Errorf("%w: %s: size %d is not a multiple of %d", ErrCorrupt, ix.path, size, ix.entrySize)
	}
	mapBytes := int(size)
	if ix.writable.Load() {
		if size > int64(maxBytes) {
			return fmt.Errorf("%w: %s: size %d is over the maximum %d", ErrCorrupt, ix.path, size, maxBytes)
		}
		if maxBytes < ix.entrySize {
			return fmt.Errorf("index: %s: maximum size %d holds no entry", ix.path, maxBytes)
		}
		// Linux maps past the end of a file; only touching a page
		// wholly past it faults. Entries are written below alloc only.
		mapBytes = maxBytes
	}
	ix.alloc = int(size)
	ix.max = mapBytes / ix.entrySize
	if mapBytes > 0 {
		prot := mmap.RDONLY
		if ix.writable.Load() {
			prot = mmap.RDWR
		}
		mm, err := mmap.MapRegion(f.OS(), mapBytes, prot, 0, 0)
		if err != nil {
			return fmt.Errorf("index: mmap %s: %w", ix.path, err)
		}
		adviseRandom(mm)
		ix.mm = mm
	}
	n := int(size) / ix.entrySize
	var got, nonZero int
	if err := ix.guard(func() { got, nonZero = entriesThenZeros(ix.mm[:size], ix.entrySize, n, valid) }); err != nil {
		return err
	}
	if nonZero >= 0 {
		return fmt.Errorf("%w: %s: byte %d, after the %d in-order entries, is not zero", ErrCorrupt, ix.path, nonZero, got)
	}
	ix.untrimmed = got < n
	ix.n.Store(int64(got))
	return nil
}

// entriesThenZeros applies the rule that tells a file's entries from its
// unwritten space: an index file is a run of in-order entries (valid says
// how many lead the file) followed by nothing but zero bytes. A file cut
// to its entries (trimmed) has no zeros after them; a file left by a crash,
// or by a log still open, has the zeros of its last growth step. Anything
// else after the run - a flipped bit, an entry out of order - is damage:
// nonZero is the position of its first non-zero byte, or -1.
//
// The first offset index entry may be all zeros (relative offset 0 at
// position 0) and still be in order. Followed by zeros it is unwritten
// space, not an entry: a segment indexes a batch only after
// IndexIntervalBytes of log, so never the first batch until it is sealed,
// and sealing trims the file.
func entriesThenZeros(mm []byte, entrySize, n int, valid func([]byte, int) int) (got, nonZero int) {
	got = valid(mm, n)
	for i, c := range mm[got*entrySize:] {
		if c != 0 {
			return got, got*entrySize + i
		}
	}
	if got < n && got > 0 && allZero(mm[(got-1)*entrySize:got*entrySize]) {
		got--
	}
	return got, -1
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// guard runs fn, turning a fault on the memory map (SIGBUS when the file was
// truncated under it) into ErrFault instead of a crash.
func (ix *file) guard(fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("%w: %s: %v", ErrFault, ix.path, r)
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// reopen opens the mapped file again, by path, for an operation the map
// cannot do; the caller closes it when done. It fails, wrapping ErrReopen,
// when the open fails or the path no longer names the file mapped (it was
// removed, or replaced by another): an operation on another file at the
// same path - a ftruncate, say - would damage that file, and an fsync of
// it would say nothing about this one.
//
// The descriptor's close is not checked by the callers: it is used only
// for fallocate, ftruncate and fsync, each of which reports its own
// failure, and Linux reports writeback errors through fsync (and msync),
// not close.
func (ix *file) reopen(flag int) (vfs.File, error) {
	f, err := ix.fsys.OpenFile(ix.path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrReopen, ix.path, err)
	}
	st, err := f.Stat()
	if err == nil && !os.SameFile(st, ix.id) {
		err = errors.New("the path names another file than the one mapped")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w %s: %w", ErrReopen, ix.path, err)
	}
	return f, nil
}

func (ix *file) entries() int { return int(ix.n.Load()) }

// Untrimmed reports whether the file held unwritten (zero) entries after
// its entries when opened: it was not cut to its entries, because its
// segment was still being written or was not closed cleanly.
func (ix *file) Untrimmed() bool { return ix.untrimmed }

// Allocated is the size of the file in bytes: the disk space it holds.
// For a writable index this is its entries plus the unwritten rest of its
// last growth step; for a trimmed one, its entries.
// While the index is writable only its writer may ask.
func (ix *file) Allocated() int64 { return int64(ix.alloc) }

func (ix *file) entry(i int) []byte {
	return ix.mm[i*ix.entrySize : (i+1)*ix.entrySize]
}

// appendEntry writes an entry after the last one, growing the file first
// if the entry lies past its allocated size. A failed growth writes
// nothing.
func (ix *file) appendEntry(put func([]byte)) error {
	if !ix.writable.Load() {
		return fmt.Errorf("%w: %s", ErrReadOnly, ix.path)
	}
	n := ix.entries()
	if n >= ix.max {
		return fmt.Errorf("%w: %s has %d entries", ErrFull, ix.path, n)
	}
	if end := (n + 1) * ix.entrySize; end > ix.alloc {
		if err := ix.grow(end); err != nil {
			return err
		}
	}
	err := ix.guard(func() { put(ix.entry(n)) })
	ix.synced.Store(false)
	if err != nil {
		return err
	}
	ix.n.Store(int64(n + 1))
	return nil
}

// reserve makes sure the file has disk blocks for k more entries (or as
// many as the index can still take), growing it if not: after a nil
// return, the next k appends cannot fail for lack of space. It is how a
// caller learns of a full disk before writing anything else.
func (ix *file) reserve(k int) error {
	if !ix.writable.Load() {
		return fmt.Errorf("%w: %s", ErrReadOnly, ix.path)
	}
	end := min(ix.entries()+k, ix.max) * ix.entrySize
	if end <= ix.alloc {
		return nil
	}
	return ix.grow(end)
}

// grow allocates disk blocks up to at least end bytes (whole entries, at
// most the maximum): by one step past the current size, or to end if that
// is further. When the disk has no room for a step it takes just end, so
// that a nearly full disk fails only the appends that truly do not fit,
// and recovery, re-indexing data already on disk, needs no more than its
// entries. The new entries read as zeros, so an untrimmed file is still
// entries followed by zeros.
//
// A growth needs no fsync of its own: the file's size is metadata that the
// next fsync of the index (sync) makes durable along with the entries
// written into it, and until then a crash can only lose entries that were
// not durable anyway - the log rebuilds those from its data.
func (ix *file) grow(end int) error {
	step := min(max(ix.alloc, firstStep), maxStep)
	size := max(end, ix.alloc+step)
	size -= size % ix.entrySize
	size = min(size, ix.max*ix.entrySize)
	err := ix.allocate(size)
	if err != nil && size > end && errors.Is(err, vfs.ErrNoSpace) {
		size = end
		err = ix.allocate(size)
	}
	if err != nil {
		return fmt.Errorf("index: grow %s from %d to %d bytes: %w", ix.path, ix.alloc, size, err)
	}
	ix.alloc = size
	return nil
}

// allocate gives the file disk blocks up to size. On failure it cuts the
// file back to the size it had: a failed fallocate may have extended it
// part of the way (ext4 keeps what it allocated before running out), and
// the file must stay entries and zeros up to alloc, nothing after. A
// failure to reopen the file changes nothing.
func (ix *file) allocate(size int) error {
	f, err := ix.reopen(os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	defer ix.synced.Store(false)
	if err := f.Allocate(int64(ix.alloc), int64(size-ix.alloc)); err != nil {
		_ = f.Truncate(int64(ix.alloc))
		return err
	}
	return nil
}

// truncateEntries keeps the first n entries, zeroing the others in the
// file so that it stays entries followed by zeros (a crash before the next
// sync may still leave the old entries on disk; they are in order, and
// the log checks the last entry it keeps against its data).
func (ix *file) truncateEntries(n int) {
	n = max(n, 0)
	old := ix.entries()
	if n >= old {
		return
	}
	ix.n.Store(int64(n))
	if ix.writable.Load() {
		_ = ix.guard(func() { clear(ix.mm[n*ix.entrySize : old*ix.entrySize]) })
		ix.synced.Store(false)
	}
}

// search returns the greatest i < entries with key(i) <= target, or -1.
func (ix *file) search(target int64, key func(e []byte) int64) (i int, err error) {
	n := ix.entries()
	err = ix.guard(func() {
		lo, hi := 0, n // invariant: key(<lo) <= target, key(>=hi) > target
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if key(ix.entry(mid)) <= target {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		i = lo - 1
	})
	return i, err
}

// trim cuts the file to its entries and makes the index read-only.
func (ix *file) trim() error {
	if !ix.writable.Load() {
		return nil
	}
	size := ix.entries() * ix.entrySize
	if size != ix.alloc { // an index closed clean and not written since is trimmed already
		f, err := ix.reopen(os.O_RDWR)
		if err != nil {
			return fmt.Errorf("index: trim: %w", err)
		}
		err = f.Truncate(int64(size))
		f.Close()
		ix.synced.Store(false)
		if err != nil {
			return fmt.Errorf("index: trim %s: %w", ix.path, err)
		}
	}
	ix.writable.Store(false)
	ix.alloc = size
	ix.max = ix.entries()
	return nil
}

// sync makes the entries durable: msync(MS_SYNC) of the map, then fsync
// of the file opened again (the file holds no descriptor between calls).
//
// Why that is enough, on Linux: msync(MS_SYNC) of a MAP_SHARED map is an
// fdatasync of the map's range through the file description the map holds
// (the one open() made, which the kernel keeps alive with the map): it
// writes the pages dirtied through the map and reports a writeback error
// on them since that open. fsync acts on the inode, not on the descriptor
// it is called on: it writes every dirty page of the file - those dirtied
// through the map since the msync, and those of a trimmed index, which is
// not msynced, included - and the inode's metadata (the size a growth or a
// trim changed, the blocks fallocate gave), and flushes the device's
// cache. A writeback error that happened while no descriptor was open is
// not lost either: a description opened since samples the file's error
// state so that it still reports an error nobody has seen yet (errseq,
// Linux 4.13 on), and nothing but this index's syncs fsyncs the file -
// they see the first failure and keep it (syncErr). Elsewhere msync first
// is what POSIX asks for pages written through a map.
//
// A failure to reopen the file is returned and changes nothing: no page
// was written or dropped, so a later sync may still succeed. A failure of
// msync or fsync is sticky, below.
//
// An index unchanged since its last sync (or since AssumeSynced) is not
// synced again. The flag is set before the msync: a change made while it
// runs clears it again (after writing), so the next sync covers it. A
// change's writer clears it after the bytes are written, and a caller
// that needs that change durable has seen the change finish, so it finds
// the flag cleared. A failed sync fails every later one: a later success
// would say nothing about the pages the kernel could not write.
func (ix *file) sync() error {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	if ix.syncErr != nil {
		return ix.syncErr
	}
	if ix.synced.Load() {
		return nil
	}
	f, err := ix.reopen(os.O_RDONLY)
	if err != nil {
		return fmt.Errorf("index: sync: %w", err)
	}
	defer f.Close()
	ix.synced.Store(true)
	if ix.mm != nil && ix.writable.Load() {
		if err := ix.mm.Flush(); err != nil {
			ix.synced.Store(false)
			ix.syncErr = fmt.Errorf("index: msync %s: %w", ix.path, err)
			return ix.syncErr
		}
	}
	if err := f.Sync(); err != nil {
		ix.synced.Store(false)
		ix.syncErr = fmt.Errorf("index: fsync %s: %w", ix.path, err)
		return ix.syncErr
	}
	return nil
}

// assumeSynced records that the file, as it is, is on stable storage,
// as its owner knows (a clean close synced it and nothing wrote since):
// the next sync has nothing to do until it changes.
func (ix *file) assumeSynced() { ix.synced.Store(true) }

// close unmaps the file; a writable index is trimmed first when trim is
// set.
func (ix *file) close(trim bool) error {
	var err error
	if trim {
		err = ix.trim()
	}
	if ix.mm != nil {
		if uerr := ix.mm.Unmap(); err == nil && uerr != nil {
			err = uerr
		}
		ix.mm = nil
	}
	return err
}
