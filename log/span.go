package log

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/segment"
)

// Span is a run of whole batches in one segment's .log file, found but not
// read: a network fetch sends it from the file to the socket without
// copying it through user space (sendfile). Its bytes are not checked when
// it is found: Verify checks them, as a sender must first, for the bytes
// go out unseen.
//
// A non-empty Span holds a reference to its segment, so retention or
// compaction can delete the segment without closing the file under the
// send; Release drops it. The zero Span is empty.
type Span struct {
	l      *Log
	truncs int64 // the log's truncation count when the span was found
	seg    *segment.Segment
	pos    int64
	n      int64
	base   int64
	upper  int64
	file   vfs.File // taken by File, kept open until Release; nil before
}

// Len is the number of bytes in the span.
func (s *Span) Len() int64 { return s.n }

// Position is the span's byte position in its file.
func (s *Span) Position() int64 { return s.pos }

// BaseOffset is the base offset of the span's first batch (which may begin
// before the offset asked for); -1 for an empty span.
func (s *Span) BaseOffset() int64 {
	if s.n == 0 {
		return -1
	}
	return s.base
}

// UpperBound is an offset at or after the end of the span's last batch and
// at or before the limit it was found with: the end of the offsets the
// span covers, as precisely as finding it told (Kafka's
// fetchUpperBoundOffset is such a bound too). A read_committed fetch
// collects the aborted transactions below it. -1 for an empty span.
func (s *Span) UpperBound() int64 {
	if s.n == 0 {
		return -1
	}
	return s.upper
}

// File is the open .log file holding the span, for sendfile: the span is
// [Position, Position+Len) of it. Read it only at explicit positions (pread,
// sendfile with an offset): the file's own read position is shared with
// every other reader of the segment. The file stays open until Release,
// whatever a file pool (Options.Files) would do otherwise: do not use it
// after. File is nil for an empty span, when the file system has no
// operating-system file behind it, or when the file cannot be opened
// (ReadAt then says why); ReadAt works either way.
func (s *Span) File() *os.File {
	if s.seg == nil {
		return nil
	}
	if s.file == nil {
		f, err := s.seg.AcquireFile()
		if err != nil {
			return nil
		}
		s.file = f
	}
	return s.file.OS()
}

// ReadAt reads the span's bytes from off, relative to the start of the span.
// It returns io.EOF at the end of the span.
func (s *Span) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("log: span read at %d", off)
	}
	if s.seg == nil || off >= s.n {
		return 0, io.EOF
	}
	short := false
	if rest := s.n - off; int64(len(p)) > rest {
		p, short = p[:rest], true
	}
	n, err := s.seg.ReadAt(p, s.pos+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// Verify checks every batch of the span - framing and CRC-32C - reading it
// through the page cache (pread; the send that follows reads the same
// cached pages). If one does not verify, the span is cut to the batches
// before it (and released if none is left), the log records the damage
// (logged once, counted in Stats, found by Damage), and the error, wrapping
// ErrCorrupt and a *segment.CorruptError naming the file and position, says
// where. The span's remaining bytes may then be sent: the next read, at the
// damaged batch, gets the error.
func (s *Span) Verify() error {
	if s.seg == nil {
		return nil
	}
	good, next, err := s.seg.Verify(s.pos, s.pos+s.n)
	if err == nil {
		return nil
	}
	if !errors.Is(err, segment.ErrCorrupt) {
		// Not damage (the file could not be read at all): the span
		// stays as it is, and its reader gets the error too.
		return fmt.Errorf("log: verify batches at offset %d: %w", s.base, err)
	}
	offset := s.base // the damaged batch is the first
	if next >= 0 {
		offset = next
	}
	if s.l != nil {
		s.l.noteDamage(s.seg, good, offset, err, s.truncs)
	}
	s.n = good - s.pos
	if s.n == 0 {
		s.Release()
	}
	return fmt.Errorf("log: batch at offset %d: %w", offset, err)
}

// Release drops the span's reference to its segment. It may be called more
// than once; the span is empty afterwards.
func (s *Span) Release() {
	if s.file != nil {
		s.seg.ReleaseFile()
	}
	if s.seg != nil {
		s.seg.Release()
	}
	*s = Span{}
}

// Span finds the batches that Read would return from offset - whole
// batches, starting with the one that holds offset, up to maxBytes in all
// but always the first batch whole - within limit (an offset, as for
// ReadUpTo: the high watermark for a consumer) and the committed bytes of
// one segment, without reading them. The caller must Release the span.
//
// Reading at limit returns an empty span; an offset outside [StartOffset,
// limit] is ErrOffsetOutOfRange. A read stops at the end of a segment,
// so a span may hold less than maxBytes while more follows.
func (l *Log) Span(offset int64, maxBytes int, limit int64) (Span, error) {
	if l.closed.Load() {
		return Span{}, ErrClosed
	}
	limit = min(limit, l.next.Load())
	start := l.start.Load()
	if offset < start || offset > limit {
		return Span{}, fmt.Errorf("%w: offset %d, log holds [%d, %d)", ErrOffsetOutOfRange, offset, start, limit)
	}
	if offset == limit {
		return Span{}, nil
	}
	for attempt := 0; ; attempt++ {
		truncs := l.truncs.Load()
		segs := l.segments()
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Base() > offset }) - 1
		sp, retry, err := spanSegments(segs, max(i, 0), offset, maxBytes, limit)
		if retry && attempt < 10 {
			continue // a segment was deleted under us; take a fresh list
		}
		if sp.seg != nil {
			sp.l, sp.truncs = l, truncs
		}
		return sp, err
	}
}

// spanSegments finds the span in the first of segs[i:] that has a batch at or
// after offset and below limit.
func spanSegments(segs []*segment.Segment, i int, offset int64, maxBytes int, limit int64) (Span, bool, error) {
	for ; i < len(segs); i++ {
		s := segs[i]
		if s.Base() >= limit {
			return Span{}, false, nil
		}
		if !s.Acquire() {
			return Span{}, true, nil
		}
		// The segment's committed bytes end on a batch boundary, but may
		// run past limit: its bytes are published before the log's
		// committed offset, and a limit below that (a high watermark
		// behind the log end) cuts the segment short. The batches wholly
		// below limit end where the first batch reaching it begins. A
		// segment followed by one that starts at or below limit lies below
		// it whole.
		end := s.Committed()
		upper := limit // the offsets below end are below upper
		if i+1 < len(segs) {
			upper = min(upper, segs[i+1].Base())
		}
		if i+1 == len(segs) || segs[i+1].Base() > limit {
			h, err := s.Find(limit, end)
			switch {
			case err == nil:
				end = h.Position
				upper = min(upper, h.BaseOffset)
			case err != io.EOF:
				s.Release()
				return Span{}, false, err
			}
		}
		first, err := s.Find(offset, end)
		if err == io.EOF {
			s.Release()
			continue // nothing at or after offset here (compaction leaves gaps)
		}
		if err != nil {
			s.Release()
			return Span{}, false, err
		}
		last, next, err := spanEnd(s, first, maxBytes, end)
		if err != nil {
			s.Release()
			return Span{}, false, err
		}
		if next >= 0 {
			upper = next
		}
		return Span{seg: s, pos: first.Position, n: last - first.Position, base: first.BaseOffset, upper: upper}, false, nil
	}
	return Span{}, false, nil
}

// spanEnd returns where the span that begins with batch first ends: after
// the last batch that ends within maxBytes of first's position (and by
// end, a batch boundary), or after first, whatever its size.
//
// It does not walk the batches in between - that would read the whole
// span into memory, the copy a zero-copy send exists to avoid. It asks the
// offset index instead (Find: an index lookup and a short walk from the
// entry), for offsets guessed from the first batch's density of records
// per byte, then galloping and bisecting: a few lookups of about an index
// interval each, whatever the span's size.
//
// It also returns the offset after the span's last batch when that is
// known without a further lookup, -1 when not.
func spanEnd(s *segment.Segment, first segment.Header, maxBytes int, end int64) (int64, int64, error) {
	budget := first.Position + int64(max(maxBytes, 0))
	if budget <= first.End() {
		return first.End(), first.NextOffset(), nil
	}
	if end <= budget {
		return end, -1, nil // everything to the end fits
	}
	// good is a batch known to end within budget; every batch holding an
	// offset at or after bad ends past it.
	good, bad := first, int64(-1)
	fits := func(o int64) (segment.Header, bool, error) {
		h, err := s.Find(o, end)
		if err == io.EOF {
			return h, false, nil // past the last batch before end
		}
		return h, err == nil && h.End() <= budget, err
	}
	// The guess: as many records as the first batch's density puts in
	// maxBytes.
	perBatch := first.LastOffset - first.BaseOffset + 1
	step := max(perBatch, 1)
	guess := first.BaseOffset + int64(float64(maxBytes)*float64(perBatch)/float64(first.Size))
	if guess > good.LastOffset {
		h, ok, err := fits(guess)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			good = h
		} else {
			bad = guess
			if h.Size > 0 && h.BaseOffset > good.LastOffset {
				bad = min(bad, h.BaseOffset)
			}
		}
	}
	// Gallop up from good until an offset does not fit.
	for bad < 0 {
		o := good.NextOffset() + step - 1
		h, ok, err := fits(o)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			good = h
			step *= 2
			continue
		}
		bad = o
		if h.Size > 0 && h.BaseOffset > good.LastOffset {
			bad = min(bad, h.BaseOffset)
		}
	}
	// Bisect between them.
	for good.NextOffset() < bad {
		mid := good.NextOffset() + (bad-good.NextOffset())/2
		h, ok, err := fits(mid)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			good = h
			continue
		}
		bad = mid
		if h.Size > 0 && h.BaseOffset > good.LastOffset {
			bad = min(bad, h.BaseOffset)
		}
	}
	return good.End(), good.NextOffset(), nil
}
