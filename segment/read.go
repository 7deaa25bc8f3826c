package segment

import (
	"fmt"
	"io"
	"sync"

	"github.com/spoolmq/spool/record"
)

// corrupt wraps an error found reading the .log file at pos.
func (s *Segment) corrupt(pos int64, err error) error {
	return &CorruptError{Path: s.logPath, Position: pos, Err: err}
}

// Find returns the header of the first batch, among those that end by limit
// bytes, whose last offset is >= target. It returns io.EOF when there is
// none. It starts from the offset index's entry for target and walks batch
// headers forward; an entry that disagrees with the header it points at is
// ignored (the walk restarts from the beginning) and the index rebuilt.
func (s *Segment) Find(target, limit int64) (Header, error) {
	ix, err := s.indexes()
	if err != nil {
		return Header{}, err
	}
	start, entry := int64(0), int64(-1)
	if e, ok, err := ix.off.Lookup(target); err == nil && ok && e.Position < limit {
		start, entry = e.Position, e.Offset
	}
	return s.search(ix, start, entry, limit, func(h Header) bool { return h.LastOffset >= target })
}

// search walks from an index entry (at start, for offset entry; -1 for
// none) to the first header for which stop is true. If the entry does not
// match the batch it points at, the index is rebuilt and the walk starts over
// from the beginning of the file.
func (s *Segment) search(ix *indexes, start, entry, limit int64, stop func(Header) bool) (Header, error) {
	h, err := s.walk(start, limit, entry, stop)
	if err == errMismatch {
		s.rebuildAfterMismatch(ix)
		h, err = s.walk(0, limit, -1, stop)
	}
	return h, err
}

// walk walks headers from start to limit and returns the first for which
// stop is true. If entry >= 0, the first header must have that last offset,
// or walk returns errMismatch.
func (s *Segment) walk(start, limit, entry int64, stop func(Header) bool) (Header, error) {
	f, err := s.acquire()
	if err != nil {
		return Header{}, err
	}
	defer s.file.Release()
	sc := newScanner(f, start, limit, s.opts.IndexIntervalBytes+2*record.HeaderSize)
	defer sc.close()
	for {
		pos := sc.pos
		h, err := sc.next()
		if err == io.EOF {
			return Header{}, io.EOF
		}
		if entry >= 0 {
			if err != nil || h.LastOffset != entry {
				return Header{}, errMismatch
			}
			entry = -1
		}
		if err != nil {
			return Header{}, s.corrupt(pos, err)
		}
		if stop(h) {
			return h, nil
		}
	}
}

// FindTime returns the header of the first batch, among those that end by
// limit, whose greatest timestamp is >= ts; io.EOF if there is none.
func (s *Segment) FindTime(ts, limit int64) (Header, error) {
	ix, err := s.indexes()
	if err != nil {
		return Header{}, err
	}
	start, entry := int64(0), int64(-1)
	if te, ok, err := ix.tim.Lookup(ts); err == nil && ok {
		// Every record up to te.Offset is older than ts.
		if e, ok, err := ix.off.Lookup(te.Offset); err == nil && ok && e.Position < limit {
			start, entry = e.Position, e.Offset
		}
	}
	return s.search(ix, start, entry, limit, func(h Header) bool { return h.MaxTimestamp >= ts })
}

// Read appends to dst whole batches, starting with the first whose last
// offset is >= target, up to maxBytes in all - but always the first batch
// whole, however large, so a reader can make progress - and not past limit.
// It returns the extended dst and the header of the first batch, or io.EOF
// when no batch qualifies. Batches are not CRC-checked here; see
// record.Batch.Verify.
func (s *Segment) Read(dst []byte, target int64, maxBytes int, limit int64) ([]byte, Header, error) {
	h, err := s.Find(target, limit)
	if err != nil {
		return dst, Header{}, err
	}
	out, err := s.ReadFrom(dst, h, maxBytes, limit)
	return out, h, err
}

// ReadFrom is Read from the batch whose header is first.
func (s *Segment) ReadFrom(dst []byte, first Header, maxBytes int, limit int64) ([]byte, error) {
	n := int(min(int64(maxBytes), limit-first.Position))
	n = max(n, first.Size)
	start := len(dst)
	if cap(dst)-start < n {
		nd := make([]byte, start, start+n)
		copy(nd, dst)
		dst = nd
	}
	buf := dst[start : start+n]
	f, err := s.acquire()
	if err != nil {
		return dst, err
	}
	m, err := f.ReadAt(buf, first.Position)
	s.file.Release()
	if m < first.Size {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: file ends at %d", record.ErrTruncated, first.Position+int64(m))
		}
		return dst, s.corrupt(first.Position, err)
	}
	// Keep whole batches only.
	p := 0
	for p < m {
		_, size, err := record.PeekHeader(buf[p:m])
		if err != nil || p+size > m {
			break
		}
		p += size
	}
	return dst[:start+p], nil
}

// Span is like Read without the copy: it returns the position and length of
// the whole batches Read would return, for a zero-copy send from File.
func (s *Segment) Span(target int64, maxBytes int, limit int64) (pos int64, n int64, first Header, err error) {
	first, err = s.Find(target, limit)
	if err != nil {
		return 0, 0, Header{}, err
	}
	f, err := s.acquire()
	if err != nil {
		return 0, 0, Header{}, err
	}
	defer s.file.Release()
	sc := newScanner(f, first.Position, limit, 0)
	defer sc.close()
	end := first.End()
	for {
		h, err := sc.next()
		if err != nil || h.End()-first.Position > int64(maxBytes) && h.Position != first.Position {
			break
		}
		end = h.End()
	}
	return first.Position, end - first.Position, first, nil
}

// Verify checks the batches in [pos, end) of the .log file - framing, magic,
// header fields and CRC-32C - reading them through the page cache: what a
// zero-copy send (sendfile), which never sees the bytes, needs done first.
// pos must be where a batch begins and end where one ends (a Span's bounds).
//
// It returns good, where the batches that verify end (end when all do), and
// next, the offset after the last of them (-1 if the first one fails); when
// a batch fails, err is a *CorruptError naming the file and good as its
// position.
func (s *Segment) Verify(pos, end int64) (good, next int64, err error) {
	f, err := s.acquire()
	if err != nil {
		return pos, -1, err
	}
	defer s.file.Release()
	v := verifiers.Get().(*verifier)
	v.f, v.bufPos = f, -1
	defer func() {
		v.f = nil
		verifiers.Put(v)
	}()
	next = -1
	for pos < end {
		h, err := v.batchAt(pos, end)
		if err != nil {
			return pos, next, s.corrupt(pos, err)
		}
		pos, next = h.End(), h.NextOffset()
	}
	return pos, next, nil
}

// verifiers reuse the read-ahead buffers of Verify: a fetch verifies on
// every request.
var verifiers = sync.Pool{New: func() any { return newVerifier(nil) }}
