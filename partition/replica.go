package partition

import (
	"fmt"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// This file is the partition's side of replication: what package replica
// calls on a partition opened with Options.Replicated.

// BecomeLeader makes this broker the partition's leader in epoch: the epoch
// is recorded as starting at the log end offset (on stable storage before
// any batch of the epoch is written) and stamped into every later append.
// An epoch older than the partition's current one is refused.
func (p *Partition) BecomeLeader(epoch int32) error {
	if cur := p.epoch.Load(); epoch < cur {
		return fmt.Errorf("partition %s-%d: leader epoch %d is older than %d", p.topic, p.id, epoch, cur)
	}
	if err := p.epochs.Assign(epoch, p.log.EndOffset()); err != nil {
		return err
	}
	// A follower does not track producers as it copies: the next
	// idempotent produce loads their state from the snapshots and the log.
	if err := p.ResetProducers(); err != nil {
		return err
	}
	p.epoch.Store(epoch)
	p.log.SetLeaderEpoch(epoch)
	return nil
}

// BecomeFollower makes this broker a follower of the leader of epoch:
// appends from producers stop being stamped, and AppendReplica copies the
// leader's batches as they are.
func (p *Partition) BecomeFollower(epoch int32) error {
	if cur := p.epoch.Load(); epoch < cur {
		return fmt.Errorf("partition %s-%d: leader epoch %d is older than %d", p.topic, p.id, epoch, cur)
	}
	p.log.SetLeaderEpoch(-1)
	p.epoch.Store(epoch)
	return nil
}

// AppendReplica appends batches fetched from the leader - whole RecordBatch
// v2 frames back to back, the first starting at the log end offset - keeping
// their offsets and leader epochs, and records in the epoch cache each
// epoch the batches begin (before writing them, so that the cache never
// misses an epoch the log holds). It returns the new end offset once the
// batches are durable under the log's flush policy. A batch that does not
// parse, verify or follow on is an error; the batches before it stay.
//
// The producer state follows the copied batches as they are written
// (without the leader's checks), so that a follower's open transactions,
// last stable offset and aborted-transaction index match the leader's.
// When the state cannot be loaded the batches are still copied; the state
// is loaded from the log when next needed.
func (p *Partition) AppendReplica(batches []byte) (int64, error) {
	var last log.Pending
	var wrote bool
	st, serr := p.producerState()
	if serr != nil {
		st = nil
	}
	for len(batches) > 0 {
		b, n, err := record.ParseBatch(batches)
		if err != nil {
			if wrote {
				err = joinWait(err, p.log.WaitDurable(last))
			}
			return p.log.EndOffset(), err
		}
		if e := b.PartitionLeaderEpoch(); e >= 0 && e > p.epochs.Latest() {
			if err := p.epochs.Assign(e, b.BaseOffset()); err != nil {
				return p.log.EndOffset(), err
			}
		}
		pd, err := p.appendReplica(st, b)
		if err != nil {
			if wrote {
				err = joinWait(err, p.log.WaitDurable(last))
			}
			return p.log.EndOffset(), err
		}
		last, wrote = pd, true
		batches = batches[n:]
	}
	if wrote {
		if err := p.log.WaitDurable(last); err != nil {
			return p.log.EndOffset(), err
		}
	}
	return p.log.EndOffset(), nil
}

// appendReplica writes one copied batch and applies it to the producer
// state st (if not nil). The state counts the write as in flight, so that
// no snapshot is taken between the write and the update.
func (p *Partition) appendReplica(st *producerState, b record.Batch) (log.Pending, error) {
	if st == nil || b.ProducerID() < 0 {
		return p.log.AppendReplicaNoWait(b)
	}
	st.mu.Lock()
	st.inflight++
	st.mu.Unlock()
	pd, err := p.log.AppendReplicaNoWait(b)
	if err == nil {
		seen := b.MaxTimestamp()
		if seen < 0 {
			seen = st.now().UnixMilli()
		}
		err = st.apply(b, seen)
	}
	st.mu.Lock()
	st.inflight--
	st.mu.Unlock()
	if err == nil {
		st.maybeSnapshot()
	}
	return pd, err
}

func joinWait(err, werr error) error {
	if werr != nil {
		return fmt.Errorf("%w (and waiting for the batches before it: %v)", err, werr)
	}
	return err
}

// TruncateTo removes every record at or after offset (the batch holding it
// goes whole, see log.Log.Truncate), drops the epochs that began there and
// lowers the high watermark to the new end. It returns the new end offset.
func (p *Partition) TruncateTo(offset int64) (int64, error) {
	end, err := p.log.Truncate(offset)
	if err != nil {
		return 0, err
	}
	if err := p.epochs.TruncateFromEnd(end); err != nil {
		return end, err
	}
	if err := p.ResetProducers(); err != nil {
		return end, err
	}
	if p.replicated {
		lowered := false
		for {
			hw := p.hw.Load()
			if hw <= end {
				break
			}
			if p.hw.CompareAndSwap(hw, end) {
				lowered = true
				break
			}
		}
		p.hwNotify.Broadcast()
		if lowered {
			// Never leave a checkpoint above the log: a restart would
			// take records it no longer has for committed ones.
			if err := p.hwFile.write(end); err != nil {
				return end, err
			}
		}
	}
	return end, nil
}

// StartAt empties the partition and starts its log at offset, past its end
// (see log.Log.Reset): what a follower does when its whole log lies below
// the leader's log start offset, so that nothing it could fetch next still
// exists. The epoch cache and the producer snapshots are emptied with it,
// and the high watermark becomes offset. Kafka calls this
// truncateFullyAndStartAt.
func (p *Partition) StartAt(offset int64) error {
	if err := p.log.Reset(offset); err != nil {
		return err
	}
	if err := p.epochs.Reset(nil); err != nil {
		return err
	}
	if err := p.dropProducers(func(int64) bool { return true }); err != nil {
		return err
	}
	if p.replicated {
		p.hw.Store(offset)
		p.hwNotify.Broadcast()
		if err := p.hwFile.write(offset); err != nil {
			return err
		}
	}
	return nil
}

// Crash closes the partition as if its process had died: no producer
// snapshot, no last high-watermark record, and the log closed as log.Log.Crash
// does (with dropUnsynced, losing what was not fsynced). For crash tests.
func (p *Partition) Crash(dropUnsynced bool) error {
	if p.hwFile != nil {
		p.hwFile.abandon()
	}
	err := p.log.Crash(dropUnsynced)
	p.hwNotify.Broadcast()
	return err
}

// SetHighWatermark sets a replicated partition's high watermark (it is
// never reported past the log's committed offset) and wakes fetches waiting
// for it. The replication layer keeps it monotonic on a leader; a follower
// takes the leader's. No effect on a partition that is not Replicated.
func (p *Partition) SetHighWatermark(hw int64) {
	if !p.replicated {
		return
	}
	if p.hw.Swap(hw) != hw {
		p.hwNotify.Broadcast()
		p.hwFile.maybeWrite(p.HighWatermark)
	}
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch from this replica's log:
// see EpochCache.EndOffsetFor. The end of the latest epoch is the log's
// committed offset: what this replica holds on stable storage.
func (p *Partition) EndOffsetForEpoch(epoch int32) (int32, int64) {
	return p.epochs.EndOffsetFor(epoch, p.log.CommittedOffset())
}
