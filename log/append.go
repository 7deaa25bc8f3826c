package log

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/spoolmq/spool/internal/measure"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// errTruncatedWhileWaiting is returned to an append whose data a Truncate or Reset
// removed before it became durable.
var errTruncatedWhileWaiting = errors.New("log: appended data was truncated before it was flushed")

// Append encodes records as one batch (with Options.Compression), appends
// it and returns the offset of the first record. Records get consecutive
// offsets; those without a timestamp get the current time. Under the Sync
// policy it returns once the batch is on stable storage.
func (l *Log) Append(recs ...record.Record) (int64, error) {
	base, _, err := l.AppendRecords(recs)
	return base, err
}

// AppendRecords is Append that also returns the bytes of the batch it
// wrote.
func (l *Log) AppendRecords(recs []record.Record) (base int64, size int, err error) {
	if l.opts.Compression == record.None {
		if small, stamp := smallRecords(recs); small {
			return l.appendSmall(recs, stamp)
		}
	}
	l.enterWrite() // before encoding: gatherWriters waits for us
	bp := l.batchBuf.Get().(*[]byte)
	defer l.batchBuf.Put(bp)
	buf, err := record.AppendBatch((*bp)[:0], recs, record.BatchOptions{Compression: l.opts.Compression, Now: l.opts.now()})
	if cap(buf) <= 4<<20 {
		*bp = buf[:0] // keep a grown buffer, but not a huge one
	}
	if err != nil {
		l.leaveWrite()
		return 0, 0, err
	}
	b, _, err := record.ParseBatch(buf)
	if err != nil {
		l.leaveWrite()
		return 0, 0, err
	}
	base, err = l.append(b)
	return base, b.Size(), err
}

// smallBatch bounds the batches appendSmall encodes and the buffer each log
// keeps for them.
const smallBatch = 4 << 10

// smallRecords reports whether recs' keys and values take at most half of
// smallBatch: their batch then fits it unless their headers are large (a
// batch that does not fit is encoded all the same, in a buffer the log does
// not keep). If they do, stamp reports whether any record lacks a timestamp
// and so needs the clock read.
func smallRecords(recs []record.Record) (small, stamp bool) {
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value) + 32
		if n > smallBatch/2 {
			return false, false
		}
		stamp = stamp || recs[i].Timestamp.IsZero()
	}
	return true, stamp
}

// appendSmall is AppendRecords for a small uncompressed batch: it encodes
// under mu, into a buffer the log keeps for this (l.enc), rather than
// outside it into a pooled one. For one small record the pool's Get and
// Put cost more than encoding does, and encoding small records without
// compression holds mu for less time than the write itself; batches that
// compress, or are large, are encoded before mu is taken, so that
// concurrent appends encode in parallel. It reads the clock only if stamp
// (some record has no timestamp): a clock read costs as much as a tenth of
// such an append.
func (l *Log) appendSmall(recs []record.Record, stamp bool) (base int64, size int, err error) {
	l.enterWrite()
	base, end, truncs, size, err := l.encodeAndWrite(recs, stamp)
	l.leaveWrite()
	if err != nil || l.opts.Flush.kind != flushSync {
		return base, size, err
	}
	return base, size, l.syncTo(end, truncs)
}

// encodeAndWrite encodes recs into l.enc and writes the batch, under mu.
func (l *Log) encodeAndWrite(recs []record.Record, stamp bool) (base, end, truncs int64, size int, err error) {
	var now time.Time
	if stamp {
		now = l.opts.now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	buf, err := record.AppendBatch(l.enc[:0], recs, record.BatchOptions{Now: now})
	if cap(buf) <= smallBatch {
		l.enc = buf[:0] // a log keeps no more than this
	}
	if err != nil {
		return 0, 0, 0, 0, err
	}
	b, _, err := record.ParseBatch(buf)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if b.Size() > l.opts.MaxMessageBytes {
		return 0, 0, 0, 0, fmt.Errorf("%w: batch of %d bytes is over MaxMessageBytes %d", record.ErrRecordTooLarge, b.Size(), l.opts.MaxMessageBytes)
	}
	base, end, truncs, err = l.writeHeld(b, false)
	return base, end, truncs, b.Size(), err
}

// AppendBatch appends a batch a producer encoded (as a Kafka client sends
// it in a produce request) and returns its first offset. The batch is
// checked first - framing, CRC-32C, header fields, every record's framing,
// offset deltas 0..n-1, size against MaxMessageBytes - and a bad batch gets
// an error (wrapping ErrCorrupt or record.ErrRecordTooLarge) with nothing
// written.
//
// AppendBatch stamps the base offset into b's bytes: the caller hands the
// bytes over. The CRC does not cover the base offset, so it stays valid.
func (l *Log) AppendBatch(b record.Batch) (int64, error) {
	l.enterWrite()
	if err := l.checkProducerBatch(b); err != nil {
		l.leaveWrite()
		return 0, err
	}
	return l.append(b)
}

// AppendTrusted appends a batch built in this process with record.Builder,
// record.AppendBatch or record.NewBatch, without AppendBatch's walk over its
// records: an in-process producer that encoded the batch itself need not pay
// to decode it again. It still refuses a batch over MaxMessageBytes and one
// whose header does not check out; everything else is the caller's promise.
// Batches from outside the process (the network) go through AppendBatch.
func (l *Log) AppendTrusted(b record.Batch) (int64, error) {
	base, p, err := l.AppendTrustedNoWait(b)
	if err != nil {
		return 0, err
	}
	return base, l.WaitDurable(p)
}

// Pending is an append that has been written but, under the Sync policy,
// may not be on stable storage yet: WaitDurable waits for it.
type Pending struct {
	end, truncs int64
}

// AppendTrustedNoWait is AppendTrusted without the wait for durability: it
// writes the batch (appends are ordered as the calls are) and returns at
// once. The caller must not report the batch as durable before WaitDurable
// returns for it. A producer writes several batches of a partition this way
// and waits once, so that one fsync covers them all.
func (l *Log) AppendTrustedNoWait(b record.Batch) (int64, Pending, error) {
	l.enterWrite()
	if b.IsZero() || len(b.Bytes()) < record.HeaderSize {
		l.leaveWrite()
		return 0, Pending{}, fmt.Errorf("%w: empty batch", ErrCorrupt)
	}
	if err := record.VerifyHeader(b.Bytes(), b.Size()); err != nil {
		l.leaveWrite()
		return 0, Pending{}, err
	}
	base, end, truncs, err := l.write(b, false)
	return base, Pending{end: end, truncs: truncs}, err
}

// AppendReplicaNoWait appends a batch exactly as a partition leader wrote
// it: its base offset must be the log's end offset (else ErrOffsetMismatch)
// and its partitionLeaderEpoch is kept, whatever SetLeaderEpoch says. This
// is how a follower copies the leader's log, so that both hold the same
// bytes at the same offsets. The batch is verified first (framing, CRC-32C):
// it came from another broker. Wait for durability with WaitDurable.
func (l *Log) AppendReplicaNoWait(b record.Batch) (Pending, error) {
	l.enterWrite()
	if b.IsZero() {
		l.leaveWrite()
		return Pending{}, fmt.Errorf("%w: empty batch", ErrCorrupt)
	}
	if err := b.Verify(); err != nil {
		l.leaveWrite()
		return Pending{}, err
	}
	_, end, truncs, err := l.write(b, true)
	return Pending{end: end, truncs: truncs}, err
}

// WaitDurable returns once the append p is on stable storage under the Sync
// policy (at once under the others), or with the error that prevents it.
// Waiting for an append waits for every append written before it.
func (l *Log) WaitDurable(p Pending) error {
	if l.opts.Flush.kind != flushSync || p.end == 0 {
		return nil
	}
	return l.syncTo(p.end, p.truncs)
}

// SetLeaderEpoch makes every later append stamp epoch into its batch's
// partitionLeaderEpoch field (outside the CRC), as a Kafka partition leader
// does. Negative: leave the field as the batch has it (the default).
func (l *Log) SetLeaderEpoch(epoch int32) { l.epoch.Store(epoch) }

// checkProducerBatch validates a batch from outside.
func (l *Log) checkProducerBatch(b record.Batch) error {
	if b.IsZero() {
		return fmt.Errorf("%w: empty batch", ErrCorrupt)
	}
	if b.Size() > l.opts.MaxMessageBytes {
		return fmt.Errorf("%w: batch of %d bytes is over MaxMessageBytes %d", record.ErrRecordTooLarge, b.Size(), l.opts.MaxMessageBytes)
	}
	it := l.iters.Get().(*record.Iterator)
	defer l.iters.Put(it)
	it.MaxUncompressedBytes = l.MaxUncompressedBytes()
	it.Reset(b) // verifies framing, CRC and header fields first
	if err := it.Err(); err != nil {
		return err
	}
	if int64(b.NumRecords()) != int64(b.LastOffsetDelta())+1 {
		return fmt.Errorf("%w: %d records but last offset delta %d", ErrCorrupt, b.NumRecords(), b.LastOffsetDelta())
	}
	var i int64
	for it.Skip() { // the framing of every record, none decoded
		if int64(it.LastOffsetDelta()) != i {
			return fmt.Errorf("%w: record %d has offset delta %d", ErrCorrupt, i, it.LastOffsetDelta())
		}
		i++
	}
	if err := it.Err(); err != nil {
		return err
	}
	if i != int64(b.NumRecords()) {
		return fmt.Errorf("%w: decoded %d records, header says %d", ErrCorrupt, i, b.NumRecords())
	}
	return nil
}

// append writes a checked batch and, under Sync, waits for the group fsync.
// The caller has entered (enterWrite); write leaves once the
// batch is written (or refused).
func (l *Log) append(b record.Batch) (int64, error) {
	base, end, truncs, err := l.write(b, false)
	if err != nil || l.opts.Flush.kind != flushSync {
		return base, err
	}
	return base, l.syncTo(end, truncs)
}

// write stamps the base offset (or, for a replica's batch, checks it),
// rolls if needed and writes the batch.
//
// Its two defers live in two functions: in one, with this many returns, the
// compiler could not open-code them, and the defer records it builds
// instead cost every append more than the rest of its bookkeeping.
func (l *Log) write(b record.Batch, replica bool) (base, end, truncs int64, err error) {
	defer l.leaveWrite()
	if b.Size() > l.opts.MaxMessageBytes {
		return 0, 0, 0, fmt.Errorf("%w: batch of %d bytes is over MaxMessageBytes %d", record.ErrRecordTooLarge, b.Size(), l.opts.MaxMessageBytes)
	}
	return l.writeLocked(b, replica)
}

// writeLocked is write under mu.
func (l *Log) writeLocked(b record.Batch, replica bool) (base, end, truncs int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeHeld(b, replica)
}

// writeHeld is write's work; mu is held.
func (l *Log) writeHeld(b record.Batch, replica bool) (base, end, truncs int64, err error) {
	if err := l.writable(); err != nil {
		return 0, 0, 0, err
	}
	base = l.next.Load()
	if base > math.MaxInt64-int64(b.LastOffsetDelta())-1 {
		return 0, 0, 0, fmt.Errorf("%w: %d records after offset %d", ErrOffsetOverflow, b.LastOffsetDelta()+1, base)
	}
	if replica {
		if b.BaseOffset() != base {
			return 0, 0, 0, fmt.Errorf("%w: batch at %d, log ends at %d", ErrOffsetMismatch, b.BaseOffset(), base)
		}
	} else {
		b.SetBaseOffset(base)
		if e := l.epoch.Load(); e >= 0 {
			b.SetPartitionLeaderEpoch(e)
		}
	}
	if err := l.markUnclean(); err != nil {
		return 0, 0, 0, err
	}
	if err := l.maybeRoll(b); err != nil {
		return 0, 0, 0, err
	}
	seg := l.active
	if err := seg.Reserve(); err != nil {
		// The indexes could not grow (a full disk) and nothing was
		// written: the log is as it was and stays writable, so an
		// append once there is room succeeds without a reopen.
		return 0, 0, 0, fmt.Errorf("log: %w", err)
	}
	if _, err := seg.Append(b); err != nil {
		return 0, 0, 0, l.fail(err)
	}
	end = b.NextOffset()
	l.next.Store(end)
	if l.opts.Flush.kind != flushSync {
		size := seg.Size()
		l.publishCommitted(seg, size, end)
		if !l.wbQueued && (l.wbSeg != seg || size-l.wbPos >= writebackBytes) && size >= writebackBytes {
			l.wbQueued = true
			l.jobs.trigger(jobWriteback)
		}
	}
	return base, end, l.truncs.Load(), nil
}

// maybeRoll seals the active segment and starts a new one when the batch
// does not fit (size, offsets, index room) or the segment is too old. Called
// with mu held.
func (l *Log) maybeRoll(b record.Batch) error {
	s := l.active
	roll := s.Sealed()
	if !roll {
		switch err := s.Fits(b, l.opts.SegmentBytes); {
		case errors.Is(err, segment.ErrFull):
			roll = true
		case err != nil:
			return err
		}
	}
	if !roll && s.Size() > 0 && s.Age(l.opts.now, b.MaxTimestamp()) > l.opts.SegmentAge {
		roll = true
	}
	if !roll {
		return nil
	}
	return l.roll()
}

// roll seals the active segment and creates the next. Called with mu held.
func (l *Log) roll() error {
	if err := l.markUnclean(); err != nil {
		return err
	}
	old := l.active
	next := l.next.Load()
	if !old.Sealed() {
		if err := old.Seal(); err != nil {
			return l.fail(err)
		}
	}
	if l.opts.Flush.kind == flushSync {
		// Everything in the old segment was appended under Sync; make it
		// durable before anything lands in the new one, so a crash can
		// only ever tear the last segment.
		if err := old.Sync(); err != nil {
			return l.fail(err)
		}
		l.markDurable(old, old.Size(), next)
	} else {
		l.unsynced = append(l.unsynced, old)
	}
	s, err := segment.Create(l.dir, next, l.opts.segmentOptions())
	if err != nil {
		return l.fail(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		s.Close(false)
		return l.fail(err)
	}
	segs := l.segments()
	l.publish(append(segs[:len(segs):len(segs)], s))
	l.active = s
	l.jobs.trigger(jobCheckpoint) // record the recovery point soon, not here under mu
	return nil
}

// RollIfOld seals the active segment if it holds something and is older
// than SegmentAge by the wall clock (its first batch's timestamp, or when it
// was created): the roll an idle log never gets from appends. A broker calls
// it on an interval. It reports whether it rolled.
func (l *Log) RollIfOld() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return false, err
	}
	s := l.active
	now := l.opts.now()
	if s.Size() == 0 || s.Age(l.opts.now, now.UnixMilli()) <= l.opts.SegmentAge {
		return false, nil
	}
	return true, l.roll()
}

// Roll seals the active segment now, if it holds anything, and starts a
// new one.
func (l *Log) Roll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.failed(); err != nil {
		return err
	}
	if l.active.Size() == 0 {
		return nil
	}
	return l.roll()
}

// publishCommitted lets readers see the segment up to size and the log up
// to end, and wakes waiting readers.
func (l *Log) publishCommitted(seg *segment.Segment, size, end int64) {
	seg.Commit(size)
	for {
		c := l.committed.Load()
		if end <= c || l.committed.CompareAndSwap(c, end) {
			break
		}
	}
	l.notify.Broadcast()
}

// markDurable records that the log is on stable storage up to end (size
// bytes of seg) and, under Sync, lets readers see it.
func (l *Log) markDurable(seg *segment.Segment, size, end int64) {
	l.syncMu.Lock()
	if end > l.durable {
		l.durable = end
	}
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	if l.opts.Flush.kind == flushSync {
		l.publishCommitted(seg, size, end)
	}
}

// syncTo returns once offsets below target are on stable storage. The
// first caller to find no fsync running runs one for everybody; callers that
// arrive meanwhile wait for the next (group commit).
func (l *Log) syncTo(target, truncs int64) error {
	l.syncWaiters.Add(1)
	defer l.syncWaiters.Add(-1)
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	for {
		if err := l.failed(); err != nil {
			return err
		}
		// A truncation cut what it waits for (past the new end), or a
		// Reset emptied the log under it (below the new start): those
		// records are gone, not durable.
		if l.truncs.Load() != truncs && (target > l.next.Load() || target <= l.start.Load()) {
			return errTruncatedWhileWaiting
		}
		if l.durable >= target {
			return nil
		}
		if l.closed.Load() && !l.syncing {
			return ErrClosed
		}
		if l.syncing {
			l.syncCond.Wait()
			continue
		}
		l.syncing = true
		l.syncMu.Unlock()
		l.gatherWriters()
		err := l.syncOnce()
		l.syncMu.Lock()
		l.syncing = false
		l.syncCond.Broadcast()
		if err != nil {
			return err
		}
	}
}

// enterWrite counts an append in l.writers, for gatherWriters, until
// leaveWrite. Only the Sync policy groups appends into an fsync: under the
// others no append waits for one, and the two atomic updates are left out.
func (l *Log) enterWrite() {
	if l.opts.Flush.kind == flushSync {
		l.writers.Add(1)
	}
}

// leaveWrite undoes enterWrite.
func (l *Log) leaveWrite() {
	if l.opts.Flush.kind == flushSync {
		l.writers.Add(-1)
	}
}

// gatherWriters lets appends that are under way finish their writes before
// an fsync starts, so that they share it instead of waiting for the next
// one. Without it, concurrent appenders settle into two groups that take
// turns, each fsync carrying half of them. The wait is bounded: a few
// scheduler yields, never a sleep.
//
// It yields only when others append concurrently - other callers wait for
// this fsync, or appends are under way: a lone appender (a producer's one
// sender per partition) must not hand its processor to a busy goroutine and
// wait for it to be preempted.
func (l *Log) gatherWriters() {
	if l.syncWaiters.Load() <= 1 && l.writers.Load() == 0 {
		return
	}
	runtime.Gosched()
	for i := 0; i < 16 && l.writers.Load() > 0; i++ {
		runtime.Gosched()
	}
}

// syncOnce fsyncs everything written so far: the segments sealed since the
// last fsync and the active one.
func (l *Log) syncOnce() error {
	l.mu.Lock()
	seg, size, end := l.active, l.active.Size(), l.next.Load()
	pending := l.unsynced
	l.unsynced = nil
	ok := seg.Acquire()
	l.mu.Unlock()
	if !ok {
		return ErrClosed
	}
	defer seg.Release()
	if h := l.opts.FlushTimes; h != nil && measure.On() {
		defer h.Since(time.Now())
	}
	for _, s := range pending {
		if s.Acquire() {
			err := s.Sync()
			s.Release()
			if err != nil {
				return l.fail(err)
			}
		}
	}
	if err := seg.Sync(); err != nil {
		return l.fail(err)
	}
	l.syncMu.Lock()
	if end > l.durable {
		l.durable = end
	}
	l.syncMu.Unlock()
	if l.opts.Flush.kind == flushSync {
		l.publishCommitted(seg, size, end)
	}
	return nil
}

// Sync flushes everything appended so far - data and indexes - to stable
// storage and records the recovery point, whatever the flush policy.
func (l *Log) Sync() error {
	if l.closed.Load() {
		return ErrClosed
	}
	if err := l.syncTo(l.next.Load(), l.truncs.Load()); err != nil {
		return err
	}
	return l.checkpoint()
}

// MaxUncompressedBytes is the largest decompressed size of a batch the log
// accepts from producers: readers that decode its batches (an
// Iterator's MaxUncompressedBytes) should allow as much.
func (l *Log) MaxUncompressedBytes() int {
	return max(record.DefaultMaxUncompressedBytes, 4*l.opts.MaxMessageBytes)
}
