package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
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
)

// file is a memory-mapped array of fixed-size entries. One goroutine writes
// (appends, truncates); any number read concurrently: n is published with an
// atomic store after the entry bytes are written.
type file struct {
	path      string
	f         vfs.File
	mm        mmap.MMap
	entrySize int
	max       int // entries the mapping can hold
	n         atomic.Int64
	writable  atomic.Bool // false once trimmed; read by sync from other goroutines
	untrimmed bool        // the file was at its full preallocated size when opened
}

// open maps the file at path. A writable file is allocated and mapped at
// maxBytes (rounded down to whole entries); a read-only one is mapped at its
// size. valid reports how many leading entries are in order; open reads that
// many as the index, after checking the size is whole entries when the file
// was trimmed.
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
	ix := &file{path: path, f: f, entrySize: entrySize}
	ix.writable.Store(writable)
	if err := ix.mapFile(maxBytes, valid); err != nil {
		f.Close()
		return nil, err
	}
	return ix, nil
}

func (ix *file) mapFile(maxBytes int, valid func([]byte, int) int) error {
	st, err := ix.f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	maxBytes -= maxBytes % ix.entrySize
	// A file at its full preallocated size was not trimmed (a crash, or a
	// segment still being written): it is read up to its last in-order
	// entry. A smaller file was trimmed and must be whole, ordered entries.
	trimmed := size < int64(maxBytes)
	ix.untrimmed = !trimmed
	if trimmed && size%int64(ix.entrySize) != 0 {
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
		if err := ix.f.Allocate(0, int64(maxBytes)); err != nil {
			// A failed fallocate may have extended the file part of the
			// way (ext4 keeps what it allocated before running out).
			// Cut it back, so that the entries still read as they did
			// and a retry with a smaller maxBytes finds the same file.
			if size < int64(maxBytes) {
				_ = ix.f.Truncate(size)
			}
			return fmt.Errorf("index: allocate %s: %w", ix.path, err)
		}
		mapBytes = maxBytes
	}
	ix.max = mapBytes / ix.entrySize
	if mapBytes > 0 {
		prot := mmap.RDONLY
		if ix.writable.Load() {
			prot = mmap.RDWR
		}
		mm, err := mmap.MapRegion(ix.f.OS(), mapBytes, prot, 0, 0)
		if err != nil {
			return fmt.Errorf("index: mmap %s: %w", ix.path, err)
		}
		adviseRandom(mm)
		ix.mm = mm
	}
	n := int(size) / ix.entrySize
	var got int
	if err := ix.guard(func() { got = valid(ix.mm, n) }); err != nil {
		return err
	}
	if got != n && trimmed {
		return fmt.Errorf("%w: %s: entry %d is out of order", ErrCorrupt, ix.path, got)
	}
	ix.n.Store(int64(got))
	return nil
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

func (ix *file) entries() int { return int(ix.n.Load()) }

// Preallocated reports whether the file was at its full preallocated size
// when opened - not trimmed: its segment was still being written, or was not
// closed cleanly.
func (ix *file) Preallocated() bool { return ix.untrimmed }

func (ix *file) entry(i int) []byte {
	return ix.mm[i*ix.entrySize : (i+1)*ix.entrySize]
}

// appendEntry writes an entry after the last one.
func (ix *file) appendEntry(put func([]byte)) error {
	if !ix.writable.Load() {
		return fmt.Errorf("%w: %s", ErrReadOnly, ix.path)
	}
	n := ix.entries()
	if n >= ix.max {
		return fmt.Errorf("%w: %s has %d entries", ErrFull, ix.path, n)
	}
	if err := ix.guard(func() { put(ix.entry(n)) }); err != nil {
		return err
	}
	ix.n.Store(int64(n + 1))
	return nil
}

// truncateEntries keeps the first n entries.
func (ix *file) truncateEntries(n int) {
	if n < ix.entries() {
		ix.n.Store(int64(max(n, 0)))
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
	if err := ix.f.Truncate(int64(ix.entries() * ix.entrySize)); err != nil {
		return fmt.Errorf("index: trim %s: %w", ix.path, err)
	}
	ix.writable.Store(false)
	ix.max = ix.entries()
	return nil
}

// sync makes the entries durable. On Linux fsync also writes back pages
// dirtied through the map; msync first keeps that true elsewhere.
func (ix *file) sync() error {
	if ix.mm != nil && ix.writable.Load() {
		if err := ix.mm.Flush(); err != nil {
			return fmt.Errorf("index: msync %s: %w", ix.path, err)
		}
	}
	if err := ix.f.Sync(); err != nil {
		return fmt.Errorf("index: fsync %s: %w", ix.path, err)
	}
	return nil
}

// close unmaps and closes the file; a writable index is trimmed first when
// trim is set.
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
	if cerr := ix.f.Close(); err == nil && cerr != nil && !errors.Is(cerr, fs.ErrClosed) {
		err = cerr
	}
	return err
}
