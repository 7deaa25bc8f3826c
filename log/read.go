package log

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// Changed returns a channel that is closed the next time the committed
// offset moves, the log is truncated, fails or closes.
func (l *Log) Changed() <-chan struct{} { return l.notify.Wait() }

// Wake closes the channel Changed returned now, as an append does: for a
// layer above whose readers wait for more than the log's end to move (a
// partition's last stable offset moves when a transaction's state does).
func (l *Log) Wake() { l.notify.Broadcast() }

// Read returns whole batches starting with the one that holds offset, up to
// maxBytes in all - always at least one batch, however large - from the
// committed part of the log. The first batch may begin before offset: skip
// its earlier records. Every batch is checked (CRC-32C) before it is
// returned, and a damaged one never is: the read returns the batches before
// it, and a read that begins with it gets an error wrapping ErrCorrupt that
// names the file and position (the log records the damage: see Stats and
// Damage). Reading at the committed offset returns nothing; outside
// [StartOffset, CommittedOffset] is ErrOffsetOutOfRange.
func (l *Log) Read(offset int64, maxBytes int) ([]byte, error) {
	return l.ReadInto(nil, offset, maxBytes)
}

// ReadInto is Read appending to dst, to reuse a buffer.
func (l *Log) ReadInto(dst []byte, offset int64, maxBytes int) ([]byte, error) {
	return l.read(dst, offset, maxBytes, l.committed.Load(), true)
}

// ReadUpTo is Read bounded by limit (an offset, below the end offset)
// instead of the committed offset: a replica leader serves followers data
// that is written but not yet committed.
func (l *Log) ReadUpTo(dst []byte, offset int64, maxBytes int, limit int64) ([]byte, error) {
	return l.read(dst, offset, maxBytes, min(limit, l.next.Load()), true)
}

func (l *Log) read(dst []byte, offset int64, maxBytes int, limit int64, verify bool) ([]byte, error) {
	if l.closed.Load() {
		return dst, ErrClosed
	}
	start := l.start.Load()
	if offset < start || offset > limit {
		return dst, fmt.Errorf("%w: offset %d, log holds [%d, %d)", ErrOffsetOutOfRange, offset, start, limit)
	}
	if offset == limit {
		return dst, nil
	}
	for attempt := 0; ; attempt++ {
		segs := l.segments()
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Base() > offset }) - 1
		if i < 0 {
			i = 0
		}
		out, retry, err := l.readSegments(dst, segs[i:], offset, maxBytes, limit, verify)
		if retry && attempt < 10 {
			continue // a segment was deleted under us; take a fresh list
		}
		return out, err
	}
}

// readSegments reads from the first segment of segs that has a batch at or
// after offset below limit.
func (l *Log) readSegments(dst []byte, segs []*segment.Segment, offset int64, maxBytes int, limit int64, verify bool) ([]byte, bool, error) {
	truncs := l.truncs.Load() // a truncation during the read can tear what it reads
	for _, s := range segs {
		if s.Base() >= limit {
			return dst, false, nil
		}
		if !s.Acquire() {
			return dst, true, nil
		}
		// A segment's committed bytes end on a batch boundary at or below
		// the log's committed offset; for a limit below that (ReadUpTo of a
		// high watermark), batches ending past limit are cut below.
		start := len(dst)
		out, first, err := s.Read(dst, offset, maxBytes, s.Committed())
		if err == io.EOF {
			s.Release()
			continue
		}
		if err != nil {
			s.Release()
			return dst, false, err
		}
		out, err = l.checkBatches(s, out, start, first, limit, verify, truncs)
		s.Release()
		return out, false, err
	}
	return dst, false, nil
}

// checkBatches verifies the batches in out[start:], which were read from s
// starting with the batch whose header is first, and drops those that end
// at or past limit. A damaged batch is recorded and dropped with those
// after it; it is an error only if it is the first.
func (l *Log) checkBatches(s *segment.Segment, out []byte, start int, first segment.Header, limit int64, verify bool, truncs int64) ([]byte, error) {
	p := start
	offset := first.BaseOffset // where the batch at p begins
	for p < len(out) {
		b, n, err := record.ParseBatch(out[p:])
		if err == nil && verify {
			err = b.Verify()
		}
		if err != nil {
			pos := first.Position + int64(p-start)
			cerr := &segment.CorruptError{Path: s.Path(), Position: pos, Err: err}
			l.noteDamage(s, pos, offset, cerr, truncs)
			if p > start {
				break
			}
			return out[:start], fmt.Errorf("log: batch at offset %d: %w", offset, cerr)
		}
		if b.LastOffset() >= limit {
			break
		}
		p += n
		offset = b.NextOffset()
	}
	return out[:p], nil
}

// Reader reads a log in order, waiting for new batches. Create one with
// NewReader; it is not safe for concurrent use.
type Reader struct {
	l        *Log
	next     int64 // the next offset to return
	maxBytes int
	buf      []byte
	pending  []byte
	truncs   int64
}

// DefaultReadBytes is how much a Reader reads at a time.
const DefaultReadBytes = 1 << 20

// NewReader returns a Reader positioned at offset.
func (l *Log) NewReader(offset int64) *Reader {
	return &Reader{l: l, next: offset, maxBytes: DefaultReadBytes, truncs: l.truncs.Load()}
}

// Offset is the offset the next record returned will have (at least).
func (r *Reader) Offset() int64 { return r.next }

// Next returns the next batch, waiting for one to be committed if needed,
// until ctx ends. The batch may hold records before Offset (the first batch
// read after a seek into its middle): skip them. It is valid until the next
// call. After a Truncate below the reader's position, Next returns
// ErrOffsetOutOfRange.
func (r *Reader) Next(ctx context.Context) (record.Batch, error) {
	for {
		if t := r.l.truncs.Load(); t != r.truncs {
			// Buffered batches may have been truncated away.
			r.truncs = t
			r.pending = nil
			if r.next > r.l.next.Load() {
				return record.Batch{}, fmt.Errorf("%w: offset %d was truncated", ErrOffsetOutOfRange, r.next)
			}
		}
		if len(r.pending) > 0 {
			b, n, err := record.ParseBatch(r.pending)
			if err != nil {
				return record.Batch{}, err // cannot happen: checked by read
			}
			r.pending = r.pending[n:]
			if b.LastOffset() < r.next {
				continue
			}
			r.next = b.NextOffset()
			return b, nil
		}
		changed := r.l.notify.Wait()
		out, err := r.l.ReadInto(r.buf[:0], r.next, r.maxBytes)
		if err != nil {
			return record.Batch{}, err
		}
		r.buf = out[:0]
		if len(out) > 0 {
			r.pending = out
			continue
		}
		if err := r.l.failed(); err != nil {
			return record.Batch{}, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return record.Batch{}, ctx.Err()
		}
	}
}

// OffsetForTime returns the offset of the first record (in log order) whose
// timestamp is at or after t, and false if no committed record is that
// recent (Kafka's ListOffsets by timestamp).
func (l *Log) OffsetForTime(t time.Time) (int64, bool, error) {
	ts := t.UnixMilli()
	limit := l.committed.Load()
	start := l.start.Load()
	for _, s := range l.segments() {
		if s.Base() >= limit {
			break
		}
		if !s.Acquire() {
			continue
		}
		off, found, err := l.offsetForTimeIn(s, ts, start, limit)
		s.Release()
		if err != nil || found {
			return off, found, err
		}
	}
	return 0, false, nil
}

func (l *Log) offsetForTimeIn(s *segment.Segment, ts, start, limit int64) (int64, bool, error) {
	maxTS, err := s.MaxTimestamp()
	if err != nil {
		return 0, false, err
	}
	if maxTS < ts {
		return 0, false, nil
	}
	committed := s.Committed()
	h, err := s.FindTime(ts, committed)
	for ; err == nil; h, err = nextAtOrAfter(s, h, ts, committed) {
		if h.BaseOffset >= limit {
			return 0, false, nil
		}
		if h.LastOffset < start {
			continue
		}
		buf, err := s.ReadFrom(nil, h, h.Size, committed)
		if err != nil {
			return 0, false, err
		}
		b, _, err := record.ParseBatch(buf)
		if err != nil {
			return 0, false, &segment.CorruptError{Path: s.Path(), Position: h.Position, Err: err}
		}
		var it record.Iterator
		it.Reset(b)
		for it.Next() {
			r := it.Record()
			if r.Offset >= start && r.Offset < limit && !r.Timestamp.IsZero() && r.Timestamp.UnixMilli() >= ts {
				return r.Offset, true, nil
			}
		}
		if it.Err() != nil {
			return 0, false, &segment.CorruptError{Path: s.Path(), Position: h.Position, Err: it.Err()}
		}
	}
	if err == io.EOF {
		return 0, false, nil
	}
	return 0, false, err
}

// nextAtOrAfter returns the batch after h whose greatest timestamp is at or
// after ts.
func nextAtOrAfter(s *segment.Segment, h segment.Header, ts, limit int64) (segment.Header, error) {
	for {
		var err error
		h, err = s.Find(h.NextOffset(), limit)
		if err != nil || h.MaxTimestamp >= ts {
			return h, err
		}
	}
}
