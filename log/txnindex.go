package log

import (
	"fmt"

	"github.com/spoolmq/spool/segment"
)

// Aborted-transaction indexes. Every segment has a .txnindex (see package
// segment); the log puts each entry in the segment that holds its ABORT
// marker, cuts them with the log (Truncate, Reset, retention and
// DeleteRecordsBefore delete or cut the segment files with them),
// carries them through compaction, and reads them back for fetches. What
// goes in is the partition's business: it tracks the transactions.

// AppendAbortedTxn adds e to the .txnindex of the segment holding its
// marker (e.LastOffset, which must be below the end offset), on stable
// storage before it returns. Entries must come in marker order. A failure
// to write fails the log (ErrFailed): reopening it rebuilds the index.
func (l *Log) AppendAbortedTxn(e segment.AbortedTxn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if e.LastOffset < l.start.Load() || e.LastOffset >= l.next.Load() {
		return fmt.Errorf("%w: aborted transaction marker at %d, log holds [%d, %d)", ErrOffsetOutOfRange, e.LastOffset, l.start.Load(), l.next.Load())
	}
	segs := l.segments()
	s := segs[segmentFor(segs, e.LastOffset)]
	if err := l.markUnclean(); err != nil {
		return err
	}
	if err := s.AppendAbortedTxn(e); err != nil {
		return l.fail(err)
	}
	return nil
}

// segmentFor is the index of the segment that holds offset (the last whose
// base is at or below it; 0 if none is).
func segmentFor(segs []*segment.Segment, offset int64) int {
	i := len(segs) - 1
	for i > 0 && segs[i].Base() > offset {
		i--
	}
	return i
}

// TruncateAbortedTxns removes the .txnindex entries whose marker is at or
// after offset, from every segment: a partition replaying the log from
// offset writes them again. A segment from offset on whose index is
// missing or damaged gets an empty one.
func (l *Log) TruncateAbortedTxns(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	segs := l.segments()
	for _, s := range segs[segmentFor(segs, offset):] {
		if !txnCutChanges(s, offset) {
			continue // a partition's open asks this of an intact log: no fsync, no mark
		}
		if err := l.markUnclean(); err != nil {
			return err
		}
		if err := s.TruncateAbortedTxns(offset); err != nil {
			return l.fail(err)
		}
	}
	return nil
}

// TxnIndexErr reports the first segment whose .txnindex is missing or
// damaged (an error wrapping segment.ErrNoTxnIndex or
// segment.ErrBadTxnIndex), or nil. The partition rebuilds them then.
func (l *Log) TxnIndexErr() error {
	for _, s := range l.segments() {
		if err := s.TxnIndexErr(); err != nil {
			return err
		}
	}
	return nil
}

// AbortedTxns returns the aborted transactions a read of [from, upTo)
// needs: those whose marker is at or after from and that began before
// upTo, in marker order - Kafka's collectAbortedTxns. The search stops at
// the first entry whose lastStableOffset reaches upTo: no transaction
// aborted after it began before it.
func (l *Log) AbortedTxns(from, upTo int64) ([]segment.AbortedTxn, error) {
	var out []segment.AbortedTxn
	segs := l.segments()
	for _, s := range segs[segmentFor(segs, from):] {
		if !s.Acquire() {
			continue // deleted meanwhile: below the log start now
		}
		entries, err := s.AbortedTxns()
		s.Release()
		if err != nil {
			return out, err
		}
		for _, e := range entries {
			if e.LastOffset >= from && e.FirstOffset < upTo {
				out = append(out, e)
			}
			if e.LastStableOffset >= upTo {
				return out, nil
			}
		}
	}
	return out, nil
}

// txnCutChanges reports whether s.TruncateAbortedTxns(offset) would change
// the segment's .txnindex: it holds an entry whose marker is at or after
// offset, or it is missing or damaged (and would be replaced).
func txnCutChanges(s *segment.Segment, offset int64) bool {
	entries, err := s.AbortedTxns()
	return err != nil || (len(entries) > 0 && entries[len(entries)-1].LastOffset >= offset)
}
