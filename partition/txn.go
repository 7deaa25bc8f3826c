package partition

// Transactions (KIP-98), the partition's side: Kafka's ProducerAppendInfo
// and ProducerStateManager for transactional producers.
//
// A transactional producer writes batches with the transactional bit set;
// its transaction coordinator ends the transaction with a marker, a
// control batch (record.NewControlBatch, MarkerBatch) that says COMMIT or
// ABORT, written to every partition the transaction touched through the
// same path as produced batches (AppendProduced). Per producer id:
//
//	transactional batch, no open transaction    opens one at the batch's base offset
//	transactional batch, open transaction       continues it
//	non-transactional batch, open transaction   ErrInvalidTxnState
//	marker, producer epoch older                ErrInvalidProducerEpoch
//	marker, coordinator epoch older than the    ErrTransactionCoordinatorFenced
//	  producer's last marker's
//	marker, producer epoch newer                bumps the producer's epoch (fences the old one)
//	marker, open transaction                    ends it; an ABORT gets an entry in the
//	                                            aborted-transaction index
//	marker, no open transaction                 legal, nothing to end (a transaction that
//	                                            wrote nothing here, or a retried marker)
//
// Batches copied from a leader (AppendReplica) and replayed from the log
// when the state loads go through the same bookkeeping without the checks:
// the leader made them.
//
// # Last stable offset
//
// The last stable offset (LSO) is the offset below which every
// transaction is decided: the least of the first offset of each open
// transaction, the first offset of each ended transaction whose marker is
// not yet below the high watermark, and the high watermark. read_committed
// consumers read only below it. With no transaction in flight it is the
// high watermark.

import (
	"fmt"
	"math"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// MarkerBatch encodes the transaction marker a coordinator at
// coordinatorEpoch has written for producer pid at epoch: COMMIT when
// commit is set, ABORT otherwise. Append it with AppendProduced (on a
// replicated leader, replica.ReplicaSet.Append with Idempotent set). See
// record.NewControlBatch.
func MarkerBatch(pid int64, epoch int16, commit bool, coordinatorEpoch int32) (record.Batch, error) {
	typ := record.ControlAbort
	if commit {
		typ = record.ControlCommit
	}
	return record.NewControlBatch(pid, epoch, typ, coordinatorEpoch, time.Now())
}

// abortedTxnIndex is where the producer state writes the aborted
// transactions it sees end: the log's .txnindex files. lastStable is the
// index entry's lastStableOffset.
type abortedTxnIndex interface {
	AppendAbortedTxn(t AbortedTxn, lastStable int64) error
}

// logTxnIndex writes index entries to the log's segments.
type logTxnIndex struct{ l *log.Log }

func (x logTxnIndex) AppendAbortedTxn(t AbortedTxn, lastStable int64) error {
	return x.l.AppendAbortedTxn(segment.AbortedTxn{ProducerID: t.ProducerID, FirstOffset: t.FirstOffset, LastOffset: t.LastOffset, LastStableOffset: lastStable})
}

// doneTxn is an ended transaction whose marker is not yet below the high
// watermark: it still holds the last stable offset back.
type doneTxn struct {
	first, marker int64
}

// checkMarker decides whether a marker of this producer may be appended.
func (e *producerEntry) checkMarker(epoch int16, m record.ControlRecord) error {
	if e.epoch >= 0 && epoch < e.epoch {
		return fmt.Errorf("%w: marker at epoch %d, latest %d", ErrInvalidProducerEpoch, epoch, e.epoch)
	}
	if e.marked && m.CoordinatorEpoch < e.coordEpoch {
		return fmt.Errorf("%w: marker from coordinator epoch %d, last marker's %d", ErrTransactionCoordinatorFenced, m.CoordinatorEpoch, e.coordEpoch)
	}
	return nil
}

// checkTxn decides whether a data batch fits the producer's transaction;
// the sequence checks have passed.
func (e *producerEntry) checkTxn(epoch int16, transactional bool) error {
	if !transactional && e.inTxn {
		return fmt.Errorf("%w: a non-transactional batch (epoch %d) while the transaction from offset %d is open",
			ErrInvalidTxnState, epoch, e.txnFirst)
	}
	return nil
}

// openTxnLocked records (or moves) pid's open transaction to first.
// Called with mu held.
func (st *producerState) openTxnLocked(pid int64, e *producerEntry, first int64) {
	e.inTxn, e.txnFirst = true, first
	st.open[pid] = e
	st.publishTxnsLocked()
	st.changed = true
}

// closeTxnLocked forgets pid's open transaction; a marker offset >= 0
// keeps it as ended but not yet below the high watermark. Called with mu
// held.
func (st *producerState) closeTxnLocked(pid int64, e *producerEntry, marker int64) {
	if e.inTxn && marker >= 0 {
		st.done = append(st.done, doneTxn{first: e.txnFirst, marker: marker})
	}
	e.inTxn, e.txnFirst = false, 0
	delete(st.open, pid)
	st.publishTxnsLocked()
	st.changed = true
}

// publishTxnsLocked lets LastStableOffset know, without the lock, whether
// any transaction holds it back. Called with mu held.
func (st *producerState) publishTxnsLocked() {
	st.txns.Store(int64(len(st.open) + len(st.done)))
}

// markerLocked applies a marker at offset to the producer's state: epochs,
// and the end of its open transaction. For an ABORT of an open
// transaction it returns the aborted-transaction index entry to write
// (ok), with the index's lastStableOffset: the first offset of the oldest
// other open transaction, or the offset after the marker. Called with mu
// held.
func (st *producerState) markerLocked(pid int64, e *producerEntry, m record.ControlRecord, offset int64) (AbortedTxn, int64, bool) {
	var entry AbortedTxn
	lso := offset + 1
	ok := false
	if e.inTxn && m.Type == record.ControlAbort {
		entry = AbortedTxn{ProducerID: pid, FirstOffset: e.txnFirst, LastOffset: offset}
		for opid, o := range st.open {
			if opid != pid && o.txnFirst < lso {
				lso = o.txnFirst
			}
		}
		ok = true
	}
	return entry, lso, ok
}

// finishMarkerLocked ends the transaction of a marker at offset. Called
// with mu held.
func (st *producerState) finishMarkerLocked(pid int64, e *producerEntry, epoch int16, m record.ControlRecord, offset, seen int64) {
	if epoch > e.epoch {
		// A newer epoch (the coordinator fenced the producer): its
		// sequences start over.
		e.epoch = epoch
		e.batches = e.batches[:0]
	}
	e.marked, e.coordEpoch = true, m.CoordinatorEpoch
	e.lastSeen = max(e.lastSeen, seen)
	if e.inTxn {
		st.closeTxnLocked(pid, e, offset)
	}
	st.changed = true
}

// endTxn applies a marker the log has accepted at offset: the index entry
// of an aborted transaction first (while the transaction still holds the
// last stable offset back), then the end of the transaction. An index
// write that fails leaves the transaction open: the log is failed then,
// and its next open rebuilds the index.
func (st *producerState) endTxn(pid int64, e *producerEntry, epoch int16, m record.ControlRecord, offset, seen int64) error {
	st.mu.Lock()
	entry, lso, ok := st.markerLocked(pid, e, m, offset)
	st.mu.Unlock()
	if ok && st.index != nil {
		if err := st.index.AppendAbortedTxn(entry, lso); err != nil {
			return fmt.Errorf("partition: aborted transaction index: %w", err)
		}
	}
	st.mu.Lock()
	st.finishMarkerLocked(pid, e, epoch, m, offset, seen)
	st.mu.Unlock()
	if st.wake != nil {
		st.wake() // the LSO may have moved after the marker's own wake-up
	}
	return nil
}

// apply does a batch's bookkeeping without checks: for batches copied from
// a leader and batches replayed from the log. A control batch that is no
// marker is passed over.
func (st *producerState) apply(b record.Batch, seen int64) error {
	pid := b.ProducerID()
	if pid < 0 {
		return nil
	}
	epoch := b.ProducerEpoch()
	if b.IsControl() {
		m, err := record.ParseControlBatch(b)
		if err != nil {
			return nil
		}
		st.mu.Lock()
		e := st.producers[pid]
		if e == nil {
			e = newProducerEntry()
			st.producers[pid] = e
		}
		entry, lso, ok := st.markerLocked(pid, e, m, b.BaseOffset())
		st.mu.Unlock()
		if ok && st.index != nil {
			if err := st.index.AppendAbortedTxn(entry, lso); err != nil {
				return fmt.Errorf("partition: aborted transaction index: %w", err)
			}
		}
		st.mu.Lock()
		st.finishMarkerLocked(pid, e, epoch, m, b.BaseOffset(), seen)
		st.mu.Unlock()
		return nil
	}
	first := b.BaseSequence()
	if first < 0 && !b.IsTransactional() {
		return nil // a producer id without idempotence: nothing to track
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.producers[pid]
	if e == nil {
		e = newProducerEntry()
		st.producers[pid] = e
	}
	e.add(epoch, producerBatch{
		firstSeq: first, lastSeq: lastSequence(first, b.LastOffsetDelta()),
		firstOffset: b.BaseOffset(), lastOffset: b.LastOffset(),
	}, seen)
	if b.IsTransactional() && !e.inTxn {
		st.openTxnLocked(pid, e, b.BaseOffset())
	}
	st.changed = true
	return nil
}

// firstUnstable is the first offset some transaction holds back given the
// high watermark hw, or math.MaxInt64. Ended transactions whose markers
// are below hw are forgotten here.
func (st *producerState) firstUnstable(hw int64) int64 {
	if st.txns.Load() == 0 {
		return math.MaxInt64
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	first := int64(math.MaxInt64)
	for _, e := range st.open {
		first = min(first, e.txnFirst)
	}
	kept := st.done[:0]
	for _, d := range st.done {
		if d.marker >= hw {
			kept = append(kept, d)
			first = min(first, d.first)
		}
	}
	clear(st.done[len(kept):])
	st.done = kept
	st.publishTxnsLocked()
	return first
}

// LastStableOffset is the offset below which every transaction is decided
// (see txn.go): what read_committed consumers may read up to. It is never
// past the high watermark, and equals it when no transaction is open or
// waiting for its marker to be committed. If the producer state cannot be
// loaded it is the log start offset: nothing is claimed stable that may
// not be.
func (p *Partition) LastStableOffset() int64 {
	lso, _ := p.StableOffset()
	return lso
}

// StableOffset is LastStableOffset and, when the producer state cannot be
// loaded (a damaged log), why: a read_committed reader must be told of
// the damage, not left waiting at the log start for a stable offset that
// never moves.
func (p *Partition) StableOffset() (int64, error) {
	hw := p.HighWatermark()
	st, err := p.producerState()
	if err != nil {
		return min(hw, p.StartOffset()), err
	}
	return min(hw, st.firstUnstable(hw)), nil
}

// AbortedTxn is an aborted transaction as a read_committed reader needs
// it: its producer, its first offset, and the offset of its ABORT marker.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// AbortedTransactions returns the transactions aborted in this partition
// that a read of [from, upTo) needs to know of: those whose ABORT marker
// is at or after from and that began before upTo, in marker order (Kafka's
// order; a Fetch at read_committed answers them). The producer state is
// loaded first, so that an index entry a crash lost is back.
func (p *Partition) AbortedTransactions(from, upTo int64) ([]AbortedTxn, error) {
	if _, err := p.producerState(); err != nil {
		return nil, err
	}
	entries, err := p.log.AbortedTxns(from, upTo)
	if err != nil {
		return nil, fmt.Errorf("partition %s-%d: %w", p.topic, p.id, err)
	}
	out := make([]AbortedTxn, len(entries))
	for i, e := range entries {
		out[i] = AbortedTxn{ProducerID: e.ProducerID, FirstOffset: e.FirstOffset, LastOffset: e.LastOffset}
	}
	return out, nil
}

// loadTxns loads the producer state when the partition opens, so that its
// open transactions hold the last stable offset from the start. Missing or
// damaged aborted-transaction indexes are rebuilt then, by replaying the
// whole log (a transaction can span segments). A state that cannot be
// loaded otherwise is left for the next use to try again.
func (p *Partition) loadTxns() error {
	if err := p.log.TxnIndexErr(); err == nil {
		_, _ = p.producerState()
		return nil
	}
	h := p.producerHolder()
	h.mu.Lock()
	defer h.mu.Unlock()
	st, err := loadProducerState(p.log, p.dir, p.producerExpiration, true)
	if err != nil {
		return fmt.Errorf("partition %s-%d: rebuilding the aborted-transaction index: %w", p.topic, p.id, err)
	}
	st.wake = p.wakeFetches
	h.st = st
	return nil
}

// wakeFetches wakes fetches waiting on Changed.
func (p *Partition) wakeFetches() {
	if p.replicated {
		p.hwNotify.Broadcast()
		return
	}
	p.log.Wake()
}
