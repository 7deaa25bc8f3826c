package log

import (
	"github.com/spoolmq/spool/segment"
)

// jobCheckpoint is the index of the checkpoint among the jobs a log
// registers (startJobs): a roll triggers it.
const jobCheckpoint = 0

// jobWriteback is the index of the writeback job: an append triggers it
// when writebackBytes more of the active segment are written (not under
// Sync).
const jobWriteback = 1

// writebackBytes is how much of the active segment is written between
// hints to the kernel to start writing it to disk (sync_file_range), under
// None and Interval. Without them a segment of 1 GiB could sit dirty in the
// page cache until the checkpoint after its roll fsyncs it all at once -
// a burst of writeback that stalled appends to the next segment for tens of
// milliseconds (p99 produce-to-consume 10-52 ms at 2.2 M records/s, 5-7 ms
// without the burst; brokerbench). RocksDB's bytes_per_sync is the same
// idea.
const writebackBytes = 8 << 20

// writeback hands the active segment's bytes written since the last hint
// to the kernel to write back, without waiting: the fsync that makes them
// durable - a checkpoint, a flush, Close - then finds little left to do.
func (l *Log) writeback() error {
	l.mu.Lock()
	l.wbQueued = false
	seg := l.active
	from := int64(0)
	if l.wbSeg == seg {
		from = l.wbPos
	}
	to := seg.Size()
	if to-from < writebackBytes || !seg.Acquire() {
		l.mu.Unlock()
		return nil
	}
	l.wbSeg, l.wbPos = seg, to
	l.mu.Unlock()
	defer seg.Release()
	return seg.StartWriteback(from, to-from)
}

// startJobs registers the log's background work with its scheduler: it
// flushes on the Interval policy, records the recovery point on
// CheckpointInterval and after rolls, and applies retention every
// RetentionCheckInterval. The scheduler runs them one at a time, as one
// goroutine of the log's own once did. Close unregisters them.
func (l *Log) startJobs() error {
	jobs := []jobSpec{
		jobCheckpoint: {period: l.opts.CheckpointInterval, run: func() { l.background(l.checkpoint()) }},
		jobWriteback:  {run: func() { l.background(l.writeback()) }}, // when triggered only
	}
	if l.opts.Flush.kind == flushInterval {
		jobs = append(jobs, jobSpec{period: l.opts.Flush.interval, run: func() {
			l.background(l.syncTo(l.next.Load(), l.truncs.Load()))
		}})
	}
	if l.opts.RetentionCheckInterval > 0 {
		jobs = append(jobs, jobSpec{period: l.opts.RetentionCheckInterval, run: func() {
			_, err := l.ApplyRetention()
			l.background(err)
		}})
	}
	g, err := l.opts.Scheduler.register(jobs...)
	if err != nil {
		return err
	}
	l.jobs = g
	return nil
}

// background reports the error of a background job: nobody waits for it.
// A failed or closed log already said why.
func (l *Log) background(err error) {
	if err != nil && l.failed() == nil && !l.closed.Load() {
		l.logger.Warn("background work failed", "err", err)
	}
}

// stopJobs unregisters the log's background work and waits for the job
// running, if any: afterwards none runs. Called once, by whoever set closed.
func (l *Log) stopJobs() { l.jobs.unregister() }

// checkpoint makes everything written so far durable - the data and indexes
// of every segment from the last recovery point on - and records the new
// recovery point, so that an unclean restart checks only what came after.
func (l *Log) checkpoint() error {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failed(); err != nil {
		return err
	}

	l.mu.Lock()
	active, size, end := l.active, l.active.Size(), l.next.Load()
	if len(l.unsynced) == 0 && l.flushed == l.cpStateLocked(size, end, l.start.Load()) {
		// Nothing has changed since the last flush made everything
		// durable and recorded it: flushing again would only repeat it.
		// An idle log is then free, however many there are.
		l.mu.Unlock()
		return nil
	}
	truncs := l.truncs.Load()
	var segs []*segment.Segment
	for _, s := range l.segments() {
		if s.Base() >= l.rp.SegmentBase && s.Acquire() {
			segs = append(segs, s)
		}
	}
	l.unsynced = nil // synced below
	l.mu.Unlock()
	defer func() {
		for _, s := range segs {
			s.Release()
		}
	}()

	for _, s := range segs {
		if err := s.Sync(); err != nil {
			return l.fail(err)
		}
		if err := s.SyncIndexes(); err != nil {
			return l.fail(err)
		}
	}
	l.markDurable(active, size, end)
	rp := RecoveryPoint{Offset: end, SegmentBase: active.Base(), Position: size}
	start := l.start.Load()
	if err := l.writeCheckpoint(Checkpoint{RecoveryPoint: rp, StartOffset: start, CleanerOffset: l.cleanerOffset}); err != nil {
		return l.fail(err)
	}
	l.rp = rp
	l.flushed = cpState{active: active, size: size, end: end, start: start, cleanerOffset: l.cleanerOffset, truncs: truncs, rp: rp}
	return nil
}

// cpState is what a checkpoint flushed and recorded: the active segment up
// to size, the log's end, its start and cleaner offsets, the truncation
// count (a truncation and appends back to the same end would look alike
// without it) and the recovery point written. A segment, not just a base:
// a Reset makes a new segment at the same base.
type cpState struct {
	active                                  *segment.Segment
	size, end, start, cleanerOffset, truncs int64
	rp                                      RecoveryPoint
}

// cpStateLocked is the log's state now, as a checkpoint would record it
// with the active segment at size, the log ending at end and starting at
// start. Called with cpMu and mu held.
func (l *Log) cpStateLocked(size, end, start int64) cpState {
	return cpState{active: l.active, size: size, end: end, start: start, cleanerOffset: l.cleanerOffset, truncs: l.truncs.Load(), rp: l.rp}
}

// writeStateLocked records the current recovery point with a new log start
// offset. Called with cpMu held. Like every checkpoint but Close's, it says
// the log is open: the paths that call it before changing the files
// (retention, DeleteRecordsBefore, Reset, Truncate) need no markUnclean of
// their own for that change.
func (l *Log) writeStateLocked(start int64) error {
	if err := l.writeCheckpoint(Checkpoint{RecoveryPoint: l.rp, StartOffset: start, CleanerOffset: l.cleanerOffset}); err != nil {
		return l.fail(err)
	}
	return nil
}
