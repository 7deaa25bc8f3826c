package log

import (
	"errors"
	"fmt"

	"github.com/spoolmq/spool/segment"
)

// DeleteRecordsBefore advances the log start offset to offset (Kafka's
// DeleteRecords): records below it are no longer readable, and segments that
// hold nothing at or above it are deleted. The new start offset is on stable
// storage before it returns. offset may not pass the committed offset.
func (l *Log) DeleteRecordsBefore(offset int64) error {
	defer l.lockState()()
	if err := l.writable(); err != nil {
		return err
	}
	if limit := l.retentionLimit(); offset > limit {
		return fmt.Errorf("%w: cannot delete before %d, committed offset is %d", ErrOffsetOutOfRange, offset, limit)
	}
	if offset <= l.start.Load() {
		return nil
	}
	if err := l.writeStateLocked(offset); err != nil {
		return err
	}
	l.start.Store(offset)
	return l.deleteFirst(whollyBelow(l.segments(), offset))
}

// whollyBelow counts the leading segments that hold nothing at or above
// offset (the next one begins at or below it); the last is never counted.
func whollyBelow(segs []*segment.Segment, offset int64) int {
	n := 0
	for n < len(segs)-1 && segs[n+1].Base() <= offset {
		n++
	}
	return n
}

// ApplyRetention deletes sealed segments by age (RetentionTime: the newest
// record is older, or the file's modification time where no record has a
// timestamp) and by size (RetentionBytes: the log is larger), oldest
// first, never the active segment, and advances the log start offset past
// them - when the cleanup policy includes delete. It runs in the background every RetentionCheckInterval; it returns
// the number of segments deleted.
func (l *Log) ApplyRetention() (int, error) {
	st, err := l.ApplyRetentionStats()
	return st.Segments, err
}

// RetentionStats reports what one ApplyRetention deleted.
type RetentionStats struct {
	// Segments and Bytes count the segments deleted and their bytes.
	Segments int
	Bytes    int64
	// StartOffset is the log start offset after them: every offset
	// below it is gone. Meaningful when Segments > 0.
	StartOffset int64
}

// ApplyRetentionStats is ApplyRetention reporting what it deleted, for the
// caller to log.
func (l *Log) ApplyRetentionStats() (RetentionStats, error) {
	if !l.opts.Cleanup.deletes() {
		return RetentionStats{}, nil // compacted only: kept until compaction removes it
	}
	defer l.lockState()()
	if err := l.writable(); err != nil {
		return RetentionStats{}, err
	}
	segs := l.segments()
	limit := l.retentionLimit()
	var total int64
	for _, s := range segs {
		total += s.Size()
	}
	now := l.opts.now().UnixMilli()
	n := 0
	for n < len(segs)-1 {
		s := segs[n]
		bySize := total-s.Size() >= l.opts.RetentionBytes
		byTime := false
		if l.opts.RetentionTime < 1<<62 {
			maxTS, err := s.MaxTimestamp()
			if err != nil {
				return RetentionStats{}, err
			}
			if maxTS < 0 && s.Size() > 0 {
				// No record carries a timestamp (message format v0
				// producers send none): the file's modification
				// time stands in, as in Kafka.
				if st, err := l.fs.Stat(s.Path()); err == nil {
					maxTS = st.ModTime().UnixMilli()
				}
			}
			// An empty segment (compaction can leave one) is expired.
			byTime = s.Size() == 0 || maxTS >= 0 && now-maxTS > l.opts.RetentionTime.Milliseconds()
		}
		// Deleting it would leave the log start past the committed offset
		// (or the high watermark, RetentionLimit).
		if !(bySize || byTime) || segs[n+1].Base() > limit {
			break
		}
		total -= s.Size()
		n++
	}
	if n == 0 {
		return RetentionStats{}, nil
	}
	newStart := max(l.start.Load(), segs[n].Base())
	if err := l.writeStateLocked(newStart); err != nil {
		return RetentionStats{}, err
	}
	l.start.Store(newStart)
	st := RetentionStats{Segments: n, StartOffset: newStart}
	for _, s := range segs[:n] {
		st.Bytes += s.Size()
	}
	return st, l.deleteFirst(n)
}

// retentionLimit is the offset retention may not delete past: the
// committed offset, or RetentionLimit's if lower.
func (l *Log) retentionLimit() int64 {
	limit := l.committed.Load()
	if f := l.opts.RetentionLimit; f != nil {
		limit = min(limit, f())
	}
	return limit
}

// deleteFirst deletes the first n segments. Called with mu and cpMu held,
// after the start offset that excludes them is durable.
func (l *Log) deleteFirst(n int) error {
	if n == 0 {
		return nil
	}
	segs := l.segments()
	gone := segs[:n]
	l.publish(append([]*segment.Segment(nil), segs[n:]...))
	for _, s := range gone {
		if err := s.Delete(); err != nil {
			return l.fail(err)
		}
	}
	l.unsynced = dropDeleted(l.unsynced, gone)
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(err)
	}
	return nil
}

func dropDeleted(list, gone []*segment.Segment) []*segment.Segment {
	out := list[:0]
	for _, s := range list {
		keep := true
		for _, g := range gone {
			if s == g {
				keep = false
			}
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// Truncate removes every record at or after offset - the batch holding
// offset goes whole - and returns the new end offset (<= offset). Replicas
// whose log diverged from the leader's need it. The truncation is on stable
// storage before it returns. Truncating below the start offset is an error.
func (l *Log) Truncate(offset int64) (int64, error) {
	defer l.lockState()()
	if err := l.writable(); err != nil {
		return 0, err
	}
	if offset >= l.next.Load() {
		return l.next.Load(), nil
	}
	if offset < l.start.Load() {
		return 0, fmt.Errorf("%w: truncate to %d below the start offset %d", ErrOffsetOutOfRange, offset, l.start.Load())
	}
	if err := l.markUnclean(); err != nil {
		return 0, err
	}
	segs := l.segments()
	// Keep the segments that begin at or below offset; the last of them
	// becomes the active segment, cut at offset.
	keep := 0
	for keep < len(segs) && segs[keep].Base() <= offset {
		keep++
	}
	// offset >= start >= the first segment's base, so keep >= 1.
	//
	// The checkpoint must never promise more than the files hold: a crash
	// after the cut but before the new end is recorded would leave a
	// recovery point past the end, which Open refuses as flushed data
	// gone missing. So the recovery point comes down first, to the start of
	// the segment being cut (a lower one only costs checking on recovery).
	if l.rp.Offset > offset {
		l.rp = RecoveryPoint{Offset: segs[keep-1].Base(), SegmentBase: segs[keep-1].Base()}
		if err := l.writeStateLocked(l.start.Load()); err != nil {
			return 0, err
		}
	}
	if err := l.truncateInto(segs, keep, offset); err != nil {
		return 0, l.fail(err)
	}
	end := l.next.Load()
	l.truncated(end)
	l.committed.Store(min(l.committed.Load(), end))
	l.syncMu.Lock()
	l.durable = min(l.durable, end)
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	if l.rp.Offset > end {
		l.rp = RecoveryPoint{Offset: end, SegmentBase: l.active.Base(), Position: l.active.Size()}
	}
	l.cleanerOffset = min(l.cleanerOffset, end)
	if err := l.writeStateLocked(l.start.Load()); err != nil {
		return 0, err
	}
	l.notify.Broadcast()
	return end, nil
}

// truncateInto keeps segs[:keep], cutting the last kept one at offset. The
// segments after it go first, newest first, each removal made durable
// before the next, and only then is the kept one cut: a crash at any point
// leaves a prefix of the log, never later records after a hole.
func (l *Log) truncateInto(segs []*segment.Segment, keep int, offset int64) error {
	target := segs[keep-1]
	if target.Sealed() {
		// Reopen it writable: it is the active segment again.
		s, err := segment.Open(l.dir, target.Base(), l.opts.segmentOptions(), true)
		if err != nil {
			return err
		}
		if err := s.Resume(); err != nil {
			s.Close(false)
			return err
		}
		target.Close(false)
		target = s
	}
	l.publish(append(append([]*segment.Segment(nil), segs[:keep-1]...), target))
	l.active = target
	l.unsynced = dropDeleted(l.unsynced, append(segs[keep-1:keep:keep], segs[keep:]...))
	for i := len(segs) - 1; i >= keep; i-- {
		if err := segs[i].Delete(); err != nil {
			return err
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	next, err := target.Truncate(offset)
	if err != nil {
		return err
	}
	l.next.Store(next)
	return target.Sync()
}

// lockState takes the checkpoint lock and then the writer lock - the order
// every path takes them in - and returns what releases both.
func (l *Log) lockState() (unlock func()) {
	l.cpMu.Lock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		l.cpMu.Unlock()
	}
}

// writable reports why the log cannot be changed, or nil.
func (l *Log) writable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	return l.failed()
}

// Reset empties the log and starts it again at offset (Kafka's
// truncateFullyAndStartAt). offset must be past the log's end: a replica
// whose whole log lies below its leader's log start offset - it was away
// while the leader's retention deleted what it would have fetched next -
// keeps nothing and copies on from the leader's start. When the log holds
// no record (its start offset is its end: everything was deleted), offset
// may be anything from 0 on, below the old end too: a Raft log emptied
// after installing a snapshot starts again just past the snapshot, which
// may lie below entries it once held. Every segment is deleted; the log
// start, end and committed offsets all become offset.
//
// It is on stable storage before it returns, in an order a crash at any
// point recovers from without a hole between old records and new and
// without bringing an old record back. Past the end: first the checkpoint
// names offset as the log start (a reopen then finds every old record below
// the start and keeps none), then the new empty segment is created, then the
// old segments are deleted (Open deletes any a crash left). At or below the
// end, where old records could lie at or past the new start: first the
// checkpoint's recovery point comes down to the first segment (whatever
// subset of segments a crash leaves then reopens, every record in it below
// the unchanged start), then the old segments are deleted, then the
// checkpoint names offset as the start, then the new segment is created.
func (l *Log) Reset(offset int64) error {
	defer l.lockState()()
	if err := l.writable(); err != nil {
		return err
	}
	end := l.next.Load()
	switch empty := l.start.Load() == end; {
	case offset > end:
		return l.resetPastEnd(offset)
	case offset == end && empty:
		return nil // already empty there
	case offset >= 0 && empty:
		return l.resetBelowEnd(offset)
	case empty:
		return fmt.Errorf("%w: reset to %d, a negative offset", ErrOffsetOutOfRange, offset)
	}
	return fmt.Errorf("%w: reset to %d, not past the log end %d (the log holds records from %d)",
		ErrOffsetOutOfRange, offset, end, l.start.Load())
}

// resetPastEnd is Reset to an offset past the end. Called with mu and cpMu
// held.
func (l *Log) resetPastEnd(offset int64) error {
	if err := l.writeStateLocked(offset); err != nil {
		return err
	}
	s, err := segment.Create(l.dir, offset, l.opts.segmentOptions())
	if err != nil {
		return l.fail(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		s.Close(false)
		return l.fail(err)
	}
	old := l.segments()
	l.restartAt(s, offset)
	var errs []error
	for _, g := range old {
		errs = append(errs, g.Delete())
	}
	errs = append(errs, l.fs.SyncDir(l.dir))
	l.notify.Broadcast()
	if err := errors.Join(errs...); err != nil {
		return l.fail(err)
	}
	return l.writeStateLocked(offset)
}

// resetBelowEnd is Reset of an empty log to an offset below its end.
// Called with mu and cpMu held.
func (l *Log) resetBelowEnd(offset int64) error {
	old := l.segments()
	l.rp = RecoveryPoint{Offset: old[0].Base(), SegmentBase: old[0].Base()}
	if err := l.writeStateLocked(l.start.Load()); err != nil {
		return err
	}
	var errs []error
	for _, g := range old {
		errs = append(errs, g.Delete())
	}
	if err := errors.Join(append(errs, l.fs.SyncDir(l.dir))...); err != nil {
		return l.fail(err)
	}
	l.rp = RecoveryPoint{Offset: offset, SegmentBase: offset}
	l.cleanerOffset = offset
	if err := l.writeStateLocked(offset); err != nil {
		return err
	}
	s, err := segment.Create(l.dir, offset, l.opts.segmentOptions())
	if err != nil {
		return l.fail(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		s.Close(false)
		return l.fail(err)
	}
	l.restartAt(s, offset)
	l.notify.Broadcast()
	return nil
}

// restartAt makes s, an empty segment at offset, the whole log. Called with
// mu held.
func (l *Log) restartAt(s *segment.Segment, offset int64) {
	l.publish([]*segment.Segment{s})
	l.active = s
	l.unsynced = nil
	l.start.Store(offset)
	l.next.Store(offset)
	l.truncated(0)
	l.committed.Store(offset)
	l.syncMu.Lock()
	l.durable = offset
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	l.rp = RecoveryPoint{Offset: offset, SegmentBase: offset}
	l.cleanerOffset = offset
}
