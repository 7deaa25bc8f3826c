package vfs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrHandleClosed is returned by Handle.Acquire once the handle is closed,
// or once the file it names may no longer be reopened (see Handle.Keep).
var ErrHandleClosed = errors.New("vfs: file handle closed")

// FilePool bounds how many files its Handles keep open at once. A Handle
// opens its file on first use and keeps it open; when opening one takes
// the pool over its limit, the pool closes others that are not in use,
// least recently used first (CLOCK: each handle carries a "used since the
// hand last passed" bit, and the hand passes over the handles in a ring,
// clearing set bits and closing the first handle found with its bit clear).
// A file just opened starts with its bit clear: the use that opened it does
// not count, so a file used once is closed before one used again and again.
//
// A Handle in use - between Acquire and Release - is never closed: a pread,
// a write, an fsync, a truncation or an in-flight sendfile keeps its file
// open. When every open handle is in use the pool goes over its limit
// rather than wait: the bound on open files is the limit plus the handles
// in use at that moment.
//
// The hot path costs a use two atomic additions and a load: the pool's
// lock is taken only to open a file and to close others to make room.
//
// A FilePool is safe for concurrent use.
type FilePool struct {
	limit int

	mu   sync.Mutex
	ring []*Handle // the open handles; each knows its slot
	hand int

	open      atomic.Int64
	opens     atomic.Int64
	evictions atomic.Int64
}

// NewFilePool returns a pool that keeps at most limit files open (plus the
// ones in use; see FilePool). limit is at least 1.
func NewFilePool(limit int) *FilePool {
	return &FilePool{limit: max(limit, 1)}
}

// FilePoolStats is a snapshot of a pool's counters.
type FilePoolStats struct {
	Limit     int   // the most files kept open while not in use
	Open      int64 // files open now
	Opens     int64 // files handles opened on a use (first or after eviction), over the pool's life
	Evictions int64 // files closed to make room
}

// Stats returns the pool's counters.
func (p *FilePool) Stats() FilePoolStats {
	return FilePoolStats{Limit: p.limit, Open: p.open.Load(), Opens: p.opens.Load(), Evictions: p.evictions.Load()}
}

// BeforeClose is what a Handle's owner does before the pool closes its
// file to make room. The pool calls it with the open file, no one using
// it. Without flush it must not block (no fsync): it returns true when the
// file holds nothing that is not yet durable (or a failure to make it so
// is recorded already), false to keep the file open for now. With flush it
// may make the file's data durable first (fsync), recording a failure
// where the owner will report it, and returns true to let the file close,
// false (only if it cannot act now) to keep it open. The pool passes over
// dirty files while it finds clean ones to close, so that an fsync lands
// on an unlucky opener's path only when nothing else can go.
type BeforeClose func(f File, flush bool) bool

// Handle is a file that a FilePool may close while it is not in use and
// that reopens on the next use. Without a pool (nil) it is opened at once
// and stays open until Close.
type Handle struct {
	pool  *FilePool
	fs    FS
	path  string
	flag  int
	owner BeforeClose

	// state counts the uses in progress (Acquire without Release), plus
	// closedBit while the file is not open. The pool closes a file only
	// by moving state from 0 to closedBit.
	state atomic.Int64
	used  atomic.Bool // CLOCK's bit: set by a use, cleared by the hand

	mu   sync.Mutex // serialises opening and closing f
	f    File       // written under mu while state has closedBit
	slot int        // index in pool.ring while open; guarded by pool.mu
	kept bool       // Keep: the file stays open until Close; guarded by mu
	lost bool       // the file may not be reopened; guarded by mu
	done bool       // Close was called; guarded by mu
}

const closedBit = 1 << 62

// NewHandle returns a handle on the file at path, opened with flag (which
// must not hold O_CREATE, O_EXCL or O_TRUNC: the file may be reopened) in
// fsys. f, if not nil, is the file already open (a caller that created it
// hands it over). Without a pool the file is opened now if f is nil, and
// stays open; owner may then be nil. With one, owner says what must happen
// before the pool closes the file (see BeforeClose); nil means nothing.
func NewHandle(pool *FilePool, fsys FS, path string, flag int, f File, owner BeforeClose) (*Handle, error) {
	h := &Handle{pool: pool, fs: fsys, path: path, flag: flag, owner: owner, slot: -1}
	if pool == nil {
		if f == nil {
			var err error
			if f, err = fsys.OpenFile(path, flag, 0); err != nil {
				return nil, err
			}
		}
		h.f = f
		return h, nil
	}
	if f == nil {
		h.state.Store(closedBit)
		return h, nil
	}
	h.f = f
	h.state.Store(1) // pinned while it joins the pool, so it is not the one evicted
	pool.add(h)
	h.Release()
	return h, nil
}

// Path is the file's path.
func (h *Handle) Path() string { return h.path }

// Acquire returns the open file, opening it if the pool closed it, and
// keeps it open until the matching Release. Every successful Acquire must
// be paired with one Release; the file must not be used after it.
func (h *Handle) Acquire() (File, error) {
	if h.pool == nil {
		return h.f, nil
	}
	if h.state.Add(1)&closedBit == 0 {
		if !h.used.Load() {
			h.used.Store(true)
		}
		return h.f, nil
	}
	return h.acquireSlow()
}

// acquireSlow opens the file, with this use already counted in state.
func (h *Handle) acquireSlow() (File, error) {
	h.mu.Lock()
	if h.state.Load()&closedBit == 0 {
		// Opened by another use while we waited.
		f := h.f
		h.mu.Unlock()
		return f, nil
	}
	if h.done || h.lost {
		h.mu.Unlock()
		h.state.Add(-1)
		return nil, fmt.Errorf("%w: %s", ErrHandleClosed, h.path)
	}
	f, err := h.fs.OpenFile(h.path, h.flag, 0)
	if err != nil {
		h.mu.Unlock()
		h.state.Add(-1)
		return nil, err
	}
	h.f = f
	h.pool.opens.Add(1)
	h.state.Add(-closedBit)
	h.mu.Unlock()
	h.pool.add(h) // with our use counted: the pool does not pick h
	return f, nil
}

// Release ends a use begun by Acquire.
func (h *Handle) Release() {
	if h.pool != nil {
		h.state.Add(-1)
	}
}

// Keep opens the file if it is closed and keeps it open until Close: for
// a file whose path is about to be removed or given to another file, while
// its readers may still use it. If the file cannot be opened, it is not
// reopened afterwards either - a use gets ErrHandleClosed rather than
// whatever the path then names - and Keep returns the error.
func (h *Handle) Keep() error {
	if h.pool == nil {
		return nil
	}
	if _, err := h.Acquire(); err != nil {
		h.mu.Lock()
		h.lost = true
		h.mu.Unlock()
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kept {
		h.state.Add(-1) // one use stands for every Keep
	}
	h.kept = true
	return nil
}

// Close closes the file and takes the handle out of its pool; later uses
// get ErrHandleClosed. The caller makes sure nothing uses the handle any
// more (a Keep's use aside).
func (h *Handle) Close() error {
	if h.pool == nil {
		// h.f stays: a stray use after Close gets the file's own
		// "closed" error, not a nil file.
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.done {
			return nil
		}
		h.done = true
		return h.f.Close()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil
	}
	h.done = true
	if h.state.Load()&closedBit != 0 {
		return nil
	}
	h.state.Add(closedBit)
	h.pool.remove(h)
	f := h.f
	h.f = nil
	return f.Close()
}

// add puts an open handle in the ring and, if that takes the pool over its
// limit, closes others to make room.
func (p *FilePool) add(h *Handle) {
	p.mu.Lock()
	h.slot = len(p.ring)
	p.ring = append(p.ring, h)
	n := p.open.Add(1)
	p.mu.Unlock()
	if n > int64(p.limit) {
		p.evict()
	}
}

// remove takes h out of the ring. Called with h.mu held.
func (p *FilePool) remove(h *Handle) {
	p.mu.Lock()
	p.removeLocked(h)
	p.mu.Unlock()
}

func (p *FilePool) removeLocked(h *Handle) {
	i := h.slot
	last := len(p.ring) - 1
	p.ring[i] = p.ring[last]
	p.ring[i].slot = i
	p.ring[last] = nil
	p.ring = p.ring[:last]
	h.slot = -1
	if p.hand > last {
		p.hand = 0
	}
	p.open.Add(-1)
}

// evict closes files not in use until the pool is back at its limit or
// none is left to close. Clean files go first: the ring is swept twice
// (once to clear the CLOCK bits, once more to find them clear) taking only
// files whose owner says they need no fsync; then, if the pool is still
// over, once more taking dirty ones, whose owners fsync them outside the
// pool's lock.
func (p *FilePool) evict() {
	p.mu.Lock()
	victims := p.sweep(false, nil)
	var dirty []*Handle
	if p.open.Load() > int64(p.limit) {
		dirty = p.sweep(true, nil)
	}
	p.mu.Unlock()
	for _, h := range victims {
		p.closeVictim(h)
	}
	for _, h := range dirty {
		if h.owner != nil && !h.owner(h.f, true) {
			// The owner could not act now: back into the ring.
			p.mu.Lock()
			h.slot = len(p.ring)
			p.ring = append(p.ring, h)
			p.open.Add(1)
			p.mu.Unlock()
			h.state.Add(-closedBit)
			h.mu.Unlock()
			continue
		}
		p.closeVictim(h)
	}
}

// sweep walks the ring from the hand and claims handles to close until the
// pool would be back at its limit. A claimed handle has state closedBit,
// its mu held, and is out of the ring. With dirty, it claims handles
// whatever their owners say (they are flushed after the sweep); without,
// only those whose owners let them close without a flush. Called with
// p.mu held.
func (p *FilePool) sweep(dirty bool, out []*Handle) []*Handle {
	excess := p.open.Load() - int64(p.limit)
	steps := 2 * len(p.ring)
	if dirty {
		steps = len(p.ring)
	}
	for ; excess > 0 && steps > 0 && len(p.ring) > 0; steps-- {
		if p.hand >= len(p.ring) {
			p.hand = 0
		}
		h := p.ring[p.hand]
		if !dirty && h.used.Load() {
			h.used.Store(false)
			p.hand++
			continue
		}
		if h.state.Load() != 0 || !h.mu.TryLock() {
			p.hand++
			continue
		}
		if h.kept || !h.state.CompareAndSwap(0, closedBit) {
			h.mu.Unlock()
			p.hand++
			continue
		}
		if !dirty && h.owner != nil && !h.owner(h.f, false) {
			h.state.Add(-closedBit)
			h.mu.Unlock()
			p.hand++
			continue
		}
		p.removeLocked(h) // moves the last handle into this slot: look at it next
		out = append(out, h)
		excess--
	}
	return out
}

// closeVictim closes a claimed handle's file. A close error is dropped:
// the file's data is durable already when its owner needs it to be (see
// BeforeClose), and the handle reopens the file on its next use.
func (p *FilePool) closeVictim(h *Handle) {
	_ = h.f.Close()
	h.f = nil
	p.evictions.Add(1)
	h.mu.Unlock()
}
