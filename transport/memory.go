package transport

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of the request memory pool. A connection that gets one is
// closed: the client's request was not read, and the protocol has no way
// to refuse a request whose bytes are still on the wire.
var (
	// errRequestTimeout: the request did not arrive whole within
	// RequestReadTimeout of its size prefix, counting any wait for pool
	// memory.
	errRequestTimeout = errors.New("transport: request not received within the request read timeout")
	// errConnStopping: the server is shutting down.
	errConnStopping = errors.New("transport: server shutting down")
)

// requestMemory is the pool that QueuedMaxRequestBytes
// (queued.max.request.bytes) sizes: the bytes of request frames held in
// memory at once, whether still arriving or being served. A frame's whole
// size is reserved when its size prefix has been read and before a byte of
// its body is, as Kafka's broker allocates the receive buffer from its
// memory pool; it is given back once the request has been served. A frame
// the pool cannot hold now waits, without reading from its socket, so the
// kernel's receive window pushes back on the client instead of the heap
// growing.
//
// What must hold: used never exceeds limit (the pool is strict, where
// Kafka's lets one allocation overshoot); a waiter is granted as soon as
// its frame fits, in arrival order among those that fit, so small requests
// (a consumer's fetch, a producer's batch) pass a large one that waits for
// room ("first fit"). A large frame could in principle wait behind a
// stream of small ones; the request read timeout bounds that wait, as it
// bounds every wait here, so nothing waits for ever.
type requestMemory struct {
	limit int64 // <= 0: no bound, only counted

	// abandoned holds, by capacity, the buffers of large frames that
	// never arrived whole (their connection timed out or went): no
	// handler ever saw them, so a later frame of the same size class can
	// read into one instead of allocating, and a flood of stalled
	// requests cycles through the same memory rather than leaving a
	// pool's worth of garbage for the collector at each round. A
	// sync.Pool, so that the collector still takes those no frame
	// reuses.
	abandoned sync.Map // int -> *sync.Pool of []byte

	mu      sync.Mutex
	used    int64
	peak    int64
	waiters []*memoryWaiter // in arrival order

	// spares are the buffers of served Produce frames (conn.handle), the
	// most recently served last, for the next large frames to be read
	// into: a producer streams frames of about the same size, and reading
	// one into the buffer the last one left - already faulted in, already
	// in the CPU's caches, and needing no zeroing - spares the heap a
	// fresh allocation of each (and the collector its garbage). At most
	// spareMaxBytes in all, the oldest given up first, and kept for good
	// (a broker that served large produce requests keeps that much heap);
	// they are not part of used, which counts the frames being read or
	// served: a frame that takes a spare holds its whole capacity.
	spares     [][]byte
	spareBytes int
	// reused counts the frames read into a spare, for tests.
	reused atomic.Int64
}

// Bounds of requestMemory.spares: the least frame read into a spare
// buffer (smaller ones are cheap to allocate), and the bytes kept.
const (
	spareMinFrame = 64 << 10
	spareMaxBytes = 32 << 20
)

// memoryWaiter is a frame waiting for room in the pool.
type memoryWaiter struct {
	n     int64
	ready chan struct{} // closed, under mu, once n bytes are granted
}

func newRequestMemory(limit int64) *requestMemory {
	return &requestMemory{limit: limit}
}

// fits reports whether n more bytes fit now. mu is held.
func (m *requestMemory) fits(n int64) bool {
	return m.limit <= 0 || m.used+n <= m.limit
}

// take counts n bytes as held. mu is held.
func (m *requestMemory) take(n int64) {
	m.used += n
	m.peak = max(m.peak, m.used)
}

// acquire reserves n bytes, waiting for room until deadline or until stop
// is closed. A frame larger than the whole pool is refused at once: it
// could never fit (NewServer keeps every frame a connection may announce
// within the pool, so this guards the pool's own contract). On success
// the caller owns n bytes and gives them back with release.
func (m *requestMemory) acquire(n int64, deadline time.Time, stop <-chan struct{}) error {
	if n <= 0 {
		return nil
	}
	m.mu.Lock()
	if m.limit > 0 && n > m.limit {
		m.mu.Unlock()
		return fmt.Errorf("transport: a request of %d bytes is larger than the request memory pool (QueuedMaxRequestBytes %d)", n, m.limit)
	}
	if m.fits(n) {
		m.take(n)
		m.mu.Unlock()
		return nil
	}
	w := &memoryWaiter{n: n, ready: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-timer.C:
		err = errRequestTimeout
	case <-stop:
		err = errConnStopping
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-w.ready:
		// Granted as we gave up: keep it. The caller's read, past its
		// deadline or stopping, fails and gives the bytes back.
		return nil
	default:
	}
	for i, o := range m.waiters {
		if o == w {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			break
		}
	}
	return err
}

// release gives back n bytes taken by acquire and grants every waiter
// that now fits, in arrival order.
func (m *requestMemory) release(n int64) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used -= n
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if m.fits(w.n) {
			m.take(w.n)
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(m.waiters[len(kept):])
	m.waiters = kept
}

// largeFrame is the least frame whose buffer is sized by class and
// reused once abandoned; smaller ones are allocated exactly and left to
// the collector.
const largeFrame = 1 << 20

// frameCap is the capacity to reserve and allocate for a frame of n bytes:
// n rounded up to an eighth of its power of two (at most 12.5% more) for a
// large frame, so that abandoned buffers serve frames of nearby sizes - or
// n itself when that would not fit in the pool, so that every frame up to
// the pool's size can be read.
func (m *requestMemory) frameCap(n int) int {
	if n < largeFrame {
		return n
	}
	step := 1 << (bits.Len(uint(n-1)) - 4)
	c := (n + step - 1) / step * step
	if m.limit > 0 && int64(c) > m.limit {
		return n
	}
	return c
}

// buffer returns a buffer of length n for a frame for which held bytes
// (frameCap(n)) were acquired, and the bytes the frame holds now: a spare
// whose capacity is from n to 2n, if the pool has room for what it holds
// beyond held (which it then takes), else an abandoned buffer of capacity
// held, else a new one.
func (m *requestMemory) buffer(n, held int) ([]byte, int) {
	if n >= spareMinFrame {
		if b, h, ok := m.spare(n, held); ok {
			return b, h
		}
	}
	if p, ok := m.abandoned.Load(held); ok {
		if b, ok := p.(*sync.Pool).Get().(*[]byte); ok {
			return (*b)[:n], held
		}
	}
	return make([]byte, n, held), held
}

// spare takes the most recently kept spare that fits a frame of n bytes
// for which held bytes were acquired (see buffer).
func (m *requestMemory) spare(n, held int) ([]byte, int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.spares) - 1; i >= 0; i-- {
		b := m.spares[i]
		c := cap(b)
		if c < n || c > 2*n {
			continue
		}
		if c > held {
			if !m.fits(int64(c - held)) {
				continue
			}
			m.take(int64(c - held))
			held = c
		}
		m.spares = slices.Delete(m.spares, i, i+1)
		m.spareBytes -= c
		m.reused.Add(1)
		return b[:n], held, true
	}
	return nil, 0, false
}

// keep makes the buffer of a served Produce frame a spare for the next
// large frames, giving up the oldest spares beyond spareMaxBytes. The
// caller guarantees that nothing references it any more.
func (m *requestMemory) keep(b []byte) {
	c := cap(b)
	if c < spareMinFrame || c > spareMaxBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	drop := 0
	for m.spareBytes+c > spareMaxBytes {
		m.spareBytes -= cap(m.spares[drop])
		drop++
	}
	m.spares = slices.Delete(m.spares, 0, drop)
	m.spares = append(m.spares, b[:0])
	m.spareBytes += c
}

// recycle keeps the buffer of a frame that was never served, for the next
// frame of its size class. Only such buffers: a served request's decoded
// body points into its frame, and a handler may keep parts of it.
func (m *requestMemory) recycle(b []byte) {
	if cap(b) < largeFrame || cap(b) != m.frameCap(cap(b)) {
		return
	}
	p, _ := m.abandoned.LoadOrStore(cap(b), &sync.Pool{})
	b = b[:cap(b)]
	p.(*sync.Pool).Put(&b)
}

// stats returns the bytes held now, the most ever held at once, and how
// many frames wait for room.
func (m *requestMemory) stats() (used, peak int64, waiting int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used, m.peak, len(m.waiters)
}
