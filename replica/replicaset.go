package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/notify"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
)

// Acks is how much replication a produce waits for (Kafka's acks).
type Acks int8

const (
	// AcksNone returns once the batch is handed to the leader (acks=0).
	AcksNone Acks = 0
	// AcksLeader returns once the leader has written the batch (acks=1):
	// lost if the leader fails before a follower copies it.
	AcksLeader Acks = 1
	// AcksAll returns once every ISR member has the batch and the ISR has
	// at least MinInSyncReplicas members (acks=all, -1).
	AcksAll Acks = -1
)

// Config is a partition's replication settings.
type Config struct {
	// MinInSyncReplicas is the smallest ISR that accepts acks=all produce
	// and commits records (min.insync.replicas). Default 1.
	MinInSyncReplicas int
}

// AppendOptions qualify one Append.
type AppendOptions struct {
	// Acks is what to wait for. The zero value is AcksNone.
	Acks Acks
	// Timeout bounds the wait for acks=all (the produce request's timeout).
	// Default 30s.
	Timeout time.Duration
	// Trusted says the batch was encoded in this process (see
	// log.Log.AppendTrusted); otherwise it gets AppendBatch's full check.
	Trusted bool
	// Idempotent applies the idempotent-producer checks to batches with a
	// producer id (partition.Partition.AppendProduced): a retry of one of
	// the producer's last batches is not written again, and its original
	// base offset is returned. A new leader rebuilds the producers' state
	// from its log, so retries are recognised across leader changes. It
	// takes precedence over Trusted: transaction markers and a
	// coordinator's transactional batches are encoded here yet must reach
	// the producer state.
	Idempotent bool
	// Waited, if not nil, receives how long an acks=all append waited for
	// the in-sync replicas after its own write (a request's remote time).
	Waited *time.Duration
}

// ReplicaSet is one partition's replica on one broker: the leader, which
// takes produce requests and serves its followers, or a follower, which
// copies the leader. The controller's partition states (through Node) move
// it between roles. Safe for concurrent use.
type ReplicaSet struct {
	node  *Node
	part  *partition.Partition
	cfg   Config
	topic string
	id    int32

	applyMu sync.Mutex   // serializes Apply
	roleMu  sync.RWMutex // appends hold it shared, role changes exclusively

	mu      sync.Mutex
	state   PartitionState
	known   bool // state was set
	leader  *Leader
	fetcher *fetcher
	closed  bool
	changed notify.Notifier // high watermark, role or state moved
	// resignTried is the state in which this leader last asked to resign
	// over damage (zero: never), so that it asks again only once the
	// state changes.
	resignTried PartitionState
	// leaderHW is, on a follower, the high watermark its leader reported
	// in the last fetch of the current fetcher, before it is capped at
	// this replica's log end; -1 before that fetch.
	leaderHW atomic.Int64
	// fencedLogged is, per follower, the stale leader epoch whose fetch
	// this leader last logged as fenced, so that a follower retrying with
	// it is logged once; guarded by mu.
	fencedLogged map[int32]int32
}

func newReplicaSet(n *Node, p *partition.Partition, cfg Config, topic string, id int32) *ReplicaSet {
	if cfg.MinInSyncReplicas < 1 {
		cfg.MinInSyncReplicas = 1
	}
	r := &ReplicaSet{node: n, part: p, cfg: cfg, topic: topic, id: id}
	r.leaderHW.Store(-1)
	return r
}

// Partition is the local partition this replica set drives.
func (r *ReplicaSet) Partition() *partition.Partition { return r.part }

// State is the latest partition state this replica has applied.
func (r *ReplicaSet) State() PartitionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.Clone()
}

// IsLeader reports whether this replica leads the partition now.
func (r *ReplicaSet) IsLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader != nil
}

// HighWatermark is the partition's high watermark on this replica.
func (r *ReplicaSet) HighWatermark() int64 { return r.part.HighWatermark() }

// MinInSyncReplicas is the smallest ISR that accepts acks=all writes.
func (r *ReplicaSet) MinInSyncReplicas() int { return r.cfg.MinInSyncReplicas }

// OffsetLag is how far this replica's log end is behind the partition's
// high watermark, as DescribeLogDirs reports it: Kafka's
// max(highWatermark - logEnd, 0), which is 0 on the leader. A follower
// takes the high watermark its leader last reported, before capping it at
// its own log end - Kafka takes the capped one, so its followers always
// report 0 - so that a follower catching up shows how far it has to go
// (as of its last fetch). Before its first fetch from the current leader,
// a follower uses its own high watermark.
func (r *ReplicaSet) OffsetLag() int64 {
	hw := r.part.HighWatermark()
	if !r.IsLeader() {
		hw = max(hw, r.leaderHW.Load())
	}
	return max(hw-r.part.EndOffset(), 0)
}

func (r *ReplicaSet) notLeaderLocked() error {
	if r.closed {
		return ErrClosed
	}
	return &NotLeaderError{Topic: r.topic, Partition: r.id, Broker: r.node.id, Leader: r.state.Leader, LeaderEpoch: r.state.LeaderEpoch}
}

// Append writes a producer's batch as the leader and waits as opts.Acks
// says. It returns the batch's base offset. acks=all is refused before
// anything is written while the ISR is below MinInSyncReplicas
// (ErrNotEnoughReplicas); after writing it waits until the high watermark
// passes the batch, and fails with ErrNotEnoughReplicasAfterAppend or
// ErrTimedOut if that does not happen within the timeout, or ErrNotLeader
// if leadership moves first - in those cases the batch may or may not end
// up committed.
func (r *ReplicaSet) Append(ctx context.Context, b record.Batch, opts AppendOptions) (int64, error) {
	res := r.AppendBatches(ctx, []record.Batch{b}, opts)
	if res.Err != nil {
		return 0, res.Err
	}
	return res.Bases[0], res.AckErr
}

// AppendResult is what AppendBatches did.
type AppendResult struct {
	// Bases are the base offsets of the batches written, in order: a
	// prefix of those given.
	Bases []int64
	// Err is why the batch after them was not written (nil if all were).
	Err error
	// AckErr is why the written batches are not acknowledged as Acks asks
	// (nil: they are); their outcome is then unknown.
	AckErr error
}

// AppendBatches is Append for several batches of the partition, written in
// order and acknowledged together: one wait for durability and one for the
// ISR cover them all, as one produce request with several batches would.
func (r *ReplicaSet) AppendBatches(ctx context.Context, batches []record.Batch, opts AppendOptions) AppendResult {
	res, pending := r.WriteBatches(batches, opts)
	if len(res.Bases) == 0 || res.AckErr != nil || opts.Acks != AcksAll {
		return res
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	start := time.Now()
	res.AckErr = r.waitCommitted(ctx, pending, timeout)
	if opts.Waited != nil {
		*opts.Waited = time.Since(start)
	}
	return res
}

// Pending is a write awaiting commit: WriteBatches returns it, Commit and
// AppendBatches wait for it.
type Pending struct {
	epoch int32
	end   int64
}

// WriteBatches is the first half of AppendBatches: it writes the batches
// (and, for acks other than AcksNone, waits until they are durable on the
// leader) without waiting for the ISR. A producer that keeps several
// writes in flight per partition, as Kafka's does, checks each with
// Commit.
func (r *ReplicaSet) WriteBatches(batches []record.Batch, opts AppendOptions) (AppendResult, Pending) {
	var res AppendResult
	r.roleMu.RLock()
	r.mu.Lock()
	if r.leader == nil || r.closed {
		res.Err = r.notLeaderLocked()
		r.mu.Unlock()
		r.roleMu.RUnlock()
		return res, Pending{}
	}
	if err := r.leader.CheckAppend(opts.Acks == AcksAll); err != nil {
		r.mu.Unlock()
		r.roleMu.RUnlock()
		res.Err = fmt.Errorf("%s-%d: %w", r.topic, r.id, err)
		return res, Pending{}
	}
	pd := Pending{epoch: r.state.LeaderEpoch, end: -1}
	r.mu.Unlock()
	var last log.Pending
	for _, b := range batches {
		var base int64
		var err error
		switch {
		case opts.Idempotent:
			// First: a batch with a producer id must go through the
			// producer state (its sequences, its transaction), trusted
			// or not.
			base, _, err = r.part.AppendProduced(b)
		case opts.Trusted:
			base, last, err = r.part.AppendTrustedNoWait(b)
		default:
			base, err = r.part.AppendBatch(b)
		}
		if err != nil {
			res.Err = err
			break
		}
		res.Bases = append(res.Bases, base)
		pd.end = base + int64(b.LastOffsetDelta()) + 1
	}
	r.roleMu.RUnlock()
	if len(res.Bases) == 0 {
		return res, pd
	}
	if opts.Trusted && !opts.Idempotent && opts.Acks != AcksNone {
		if err := r.part.WaitDurable(last); err != nil {
			res.AckErr = err
			return res, pd
		}
	}
	r.advance()
	return res, pd
}

// Commit reports, without waiting, whether a write is committed (done,
// nil), has failed (done, error: leadership moved, so the outcome is
// unknown), or is still pending (not done); changed is closed when that may
// have changed.
func (r *ReplicaSet) Commit(pd Pending) (done bool, changed <-chan struct{}, err error) {
	changed = r.changed.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == nil || r.state.LeaderEpoch != pd.epoch {
		return true, changed, fmt.Errorf("%w (leadership moved before the records were committed; they may or may not be)", r.notLeaderLocked())
	}
	if r.leader.Committed(pd.end) {
		return true, changed, nil
	}
	return false, changed, nil
}

// TimeoutError is the error for a write not committed in time: whether the
// ISR is below the minimum (ErrNotEnoughReplicasAfterAppend) or not
// (ErrTimedOut).
func (r *ReplicaSet) TimeoutError(after time.Duration) error {
	r.mu.Lock()
	under := r.leader != nil && r.leader.UnderMinISR()
	isr := r.state.ISR
	r.mu.Unlock()
	if under {
		return fmt.Errorf("%s-%d: %w (ISR %v)", r.topic, r.id, ErrNotEnoughReplicasAfterAppend, isr)
	}
	return fmt.Errorf("%s-%d: %w after %v", r.topic, r.id, ErrTimedOut, after)
}

// advance moves the leader's high watermark after its own log grew.
func (r *ReplicaSet) advance() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advanceLocked()
}

func (r *ReplicaSet) advanceLocked() {
	if r.leader == nil {
		return
	}
	if r.leader.Advance(r.part.Log().CommittedOffset(), time.Now()) {
		r.part.SetHighWatermark(r.leader.HighWatermark())
		r.changed.Broadcast()
	}
}

// waitCommitted waits until a write is committed.
func (r *ReplicaSet) waitCommitted(ctx context.Context, pd Pending, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		done, ch, err := r.Commit(pd)
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return r.TimeoutError(timeout)
		}
	}
}

// checkLeaderLocked validates the leader epoch a follower's request carries
// (KIP-320) and that this replica leads.
func (r *ReplicaSet) checkLeaderLocked(epoch int32) error {
	switch {
	case r.closed:
		return ErrClosed
	case epoch < r.state.LeaderEpoch:
		return fmt.Errorf("%w: request epoch %d, %s-%d is in epoch %d", ErrFencedLeaderEpoch, epoch, r.topic, r.id, r.state.LeaderEpoch)
	case epoch > r.state.LeaderEpoch || !r.known:
		return fmt.Errorf("%w: request epoch %d, %s-%d knows epoch %d", ErrUnknownLeaderEpoch, epoch, r.topic, r.id, r.state.LeaderEpoch)
	case r.leader == nil:
		return r.notLeaderLocked()
	}
	return nil
}

// logFencedLocked logs, once per follower and stale epoch, that this
// leader fenced a follower's fetch made in an older leader epoch.
func (r *ReplicaSet) logFencedLocked(replica, epoch int32) {
	if last, ok := r.fencedLogged[replica]; ok && last == epoch {
		return
	}
	if r.fencedLogged == nil {
		r.fencedLogged = map[int32]int32{}
	}
	r.fencedLogged[replica] = epoch
	r.node.log.Info("fenced a replica with a stale leader epoch", "topic", r.topic, "partition", r.id,
		"replica", replica, "replica_leader_epoch", epoch, "leader_epoch", r.state.LeaderEpoch, "partition_epoch", r.state.PartitionEpoch)
}

// handleFetch serves a follower's fetch as the leader.
func (r *ReplicaSet) handleFetch(ctx context.Context, req *FetchRequest) (*FetchResponse, error) {
	now := time.Now()
	r.mu.Lock()
	if err := r.checkLeaderLocked(req.CurrentLeaderEpoch); err != nil {
		if errors.Is(err, ErrFencedLeaderEpoch) {
			r.logFencedLocked(req.ReplicaID, req.CurrentLeaderEpoch)
		}
		r.mu.Unlock()
		return nil, err
	}
	if req.ReplicaID == r.node.id || !r.state.HasReplica(req.ReplicaID) {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: broker %d holds no replica of %s-%d", ErrUnknownPartition, req.ReplicaID, r.topic, r.id)
	}
	leaderEnd := r.part.Log().CommittedOffset()
	resp := &FetchResponse{HighWatermark: r.part.HighWatermark(), LogStartOffset: r.part.StartOffset(), LogEndOffset: leaderEnd}
	if req.FetchOffset < resp.LogStartOffset {
		// Below the log start whatever the epochs say (as Kafka): the
		// follower starts over at the leader's log start.
		r.mu.Unlock()
		return nil, &OffsetOutOfRangeError{Offset: req.FetchOffset, LogStartOffset: resp.LogStartOffset, LogEndOffset: leaderEnd}
	}
	if req.LastFetchedEpoch >= 0 {
		// The follower's last batch is from an epoch this log ended
		// earlier, or never had: its log diverges (Partition.scala's
		// divergingEpoch check).
		e, end := r.part.EndOffsetForEpoch(req.LastFetchedEpoch)
		if e < req.LastFetchedEpoch || end < req.FetchOffset {
			r.mu.Unlock()
			resp.Diverging = &EpochEnd{Epoch: e, EndOffset: end}
			return resp, nil
		}
	}
	if req.FetchOffset > leaderEnd {
		r.mu.Unlock()
		return nil, &OffsetOutOfRangeError{Offset: req.FetchOffset, LogStartOffset: resp.LogStartOffset, LogEndOffset: leaderEnd}
	}
	if r.leader.Fetch(req.ReplicaID, req.BrokerEpoch, req.FetchOffset, leaderEnd, now) {
		r.part.SetHighWatermark(r.leader.HighWatermark())
		r.changed.Broadcast()
	}
	r.mu.Unlock()
	r.proposeISR() // a follower that caught up joins the ISR at once

	var deadline <-chan time.Time
	for {
		logChanged := r.part.Log().Changed()
		stateChanged := r.changed.Wait()
		out, err := r.part.Log().ReadUpTo(nil, req.FetchOffset, max(req.MaxBytes, 1), r.part.Log().CommittedOffset())
		if errors.Is(err, log.ErrCorrupt) {
			// The read checked the batches and found this replica's copy
			// damaged: the follower gets the error, never the bytes, and
			// the leadership goes to a replica with the batch intact.
			r.resignIfDamaged()
		}
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		if err := r.checkLeaderLocked(req.CurrentLeaderEpoch); err != nil {
			r.mu.Unlock()
			return nil, err
		}
		hw := r.part.HighWatermark()
		r.mu.Unlock()
		if len(out) > 0 || req.MaxWait <= 0 || hw != resp.HighWatermark {
			resp.Records = out
			resp.HighWatermark = hw
			resp.LogEndOffset = r.part.Log().CommittedOffset()
			return resp, nil
		}
		if deadline == nil {
			t := time.NewTimer(req.MaxWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-logChanged:
		case <-stateChanged:
		case <-deadline:
			resp.HighWatermark = r.part.HighWatermark()
			return resp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resignIfDamaged has a leader whose log holds a damaged batch that reads
// found (log.Log.Damage) ask the controller to move the leadership to an
// in-sync replica with the batch intact (DecideResignation), once per
// partition state. As a follower it then cuts its log before the damage and
// copies the batches again (follow). With no such replica it keeps leading
// and keeps refusing the damaged batch.
func (r *ReplicaSet) resignIfDamaged() {
	offset, damaged := r.part.Log().Damage()
	if !damaged {
		return
	}
	r.mu.Lock()
	if r.leader == nil || r.closed {
		r.mu.Unlock()
		return
	}
	st := r.leader.State()
	if r.resignTried.Topic != "" && st.LeaderEpoch == r.resignTried.LeaderEpoch && st.PartitionEpoch == r.resignTried.PartitionEpoch {
		r.mu.Unlock()
		return
	}
	r.resignTried = st
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.node.ctx, 10*time.Second)
	next, err := r.node.ctrl.Resign(ctx, ResignRequest{Topic: r.topic, Partition: r.id, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, Offset: offset})
	cancel()
	if err != nil {
		r.node.log.Error("leader: damaged batch in this replica's log, and no replica to hand the partition to; its reads fail",
			"topic", r.topic, "partition", r.id, "offset", offset, "err", err)
		return
	}
	r.node.resignations.Add(1)
	r.node.log.Warn("leader: damaged batch in this replica's log: resigned, to repair it as a follower",
		"topic", r.topic, "partition", r.id, "offset", offset, "new_leader", next.Leader, "epoch", next.LeaderEpoch)
	// The controller sends the new state to every replica; this one
	// becomes a follower when it arrives.
}

// handleEpoch answers a follower's OffsetsForLeaderEpoch as the leader.
func (r *ReplicaSet) handleEpoch(req *EpochRequest) (EpochEnd, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLeaderLocked(req.CurrentLeaderEpoch); err != nil {
		return EpochEnd{}, err
	}
	e, end := r.part.EndOffsetForEpoch(req.Epoch)
	return EpochEnd{Epoch: e, EndOffset: end}, nil
}

// proposeISR asks the controller for the ISR change the leader's rules
// call for, if any, and applies the answer.
func (r *ReplicaSet) proposeISR() {
	r.mu.Lock()
	if r.leader == nil || r.closed {
		r.mu.Unlock()
		return
	}
	isr, ok := r.leader.ProposeISR(time.Now())
	if !ok {
		r.mu.Unlock()
		return
	}
	st := r.leader.State()
	req := AlterPartitionRequest{Topic: r.topic, Partition: r.id, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
		PartitionEpoch: st.PartitionEpoch, ISR: isr, BrokerEpochs: map[int32]int64{}}
	for _, id := range isr {
		if p, ok := r.leader.Progress(id); ok {
			req.BrokerEpochs[id] = p.BrokerEpoch
		}
	}
	leader := r.leader
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.node.ctx, 10*time.Second)
	next, err := r.node.ctrl.AlterPartition(ctx, req)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader != leader {
		return
	}
	switch r.leader.Answer(next, err) {
	case ISRAborted:
		r.node.log.Debug("ISR change refused", "topic", r.topic, "partition", r.id, "isr", isr, "err", err)
	case ISRWaiting:
		// The new state comes with the metadata, through Apply, which must
		// find this replica still in the old one.
		r.node.log.Info("ISR change answered with a state not yet seen; waiting for it", "topic", r.topic, "partition", r.id,
			"isr", isr, "state", next, "err", err)
	case ISRApplied:
		r.applySameEpochLocked(next)
	}
}

// applySameEpochLocked takes a newer state in the leader epoch this replica
// leads.
func (r *ReplicaSet) applySameEpochLocked(st PartitionState) {
	if !st.NewerThan(r.state) {
		return
	}
	// Logged and counted here, where a leader takes every ISR change of
	// its epoch: the controller's answer, or the metadata that carries it.
	if !slices.Equal(st.ISR, r.state.ISR) {
		removed := slices.ContainsFunc(r.state.ISR, func(id int32) bool { return !slices.Contains(st.ISR, id) })
		added := slices.ContainsFunc(st.ISR, func(id int32) bool { return !slices.Contains(r.state.ISR, id) })
		msg := "ISR changed"
		switch {
		case removed && !added:
			msg = "ISR shrunk"
		case added && !removed:
			msg = "ISR expanded"
		}
		if removed {
			r.node.isrShrinks.Add(1)
		}
		if added {
			r.node.isrExpands.Add(1)
		}
		r.node.log.Info(msg, "topic", r.topic, "partition", r.id, "old_isr", r.state.ISR, "isr", st.ISR,
			"leader_epoch", st.LeaderEpoch, "partition_epoch", st.PartitionEpoch)
	}
	r.state = st.Clone()
	r.leader.Apply(st)
	r.advanceLocked()
	r.changed.Broadcast()
}

// Apply moves the replica to a new partition state from the controller:
// it becomes leader (stamping the new epoch from the current log end),
// follows a new leader (truncating by leader epoch first), or, in the same
// leader epoch, takes the new ISR. States not newer than the current one
// are ignored.
func (r *ReplicaSet) Apply(st PartitionState) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	self := r.node.id
	r.mu.Lock()
	if r.closed || (r.known && !st.NewerThan(r.state)) {
		r.mu.Unlock()
		return
	}
	cur, leading := r.state, r.leader != nil
	if st.Leader == self && leading && cur.LeaderEpoch == st.LeaderEpoch {
		r.applySameEpochLocked(st)
		r.mu.Unlock()
		return
	}
	if st.Leader != self && !leading && r.known && cur.Leader == st.Leader && cur.LeaderEpoch == st.LeaderEpoch {
		r.state = st.Clone() // an ISR change while following the same leader
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	r.stopFetcher()
	r.roleMu.Lock()
	defer r.roleMu.Unlock()
	if st.Leader == self {
		if err := r.part.BecomeLeader(st.LeaderEpoch); err != nil {
			r.node.log.Error("cannot become leader", "topic", r.topic, "partition", r.id, "leader_epoch", st.LeaderEpoch, "err", err)
			r.mu.Lock()
			r.state, r.known, r.leader = st.Clone(), true, nil
			r.changed.Broadcast()
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.state, r.known = st.Clone(), true
		r.leader = NewLeader(self, st, LeaderConfig{MinInSyncReplicas: r.cfg.MinInSyncReplicas, ReplicaLagTime: r.node.cfg.ReplicaLagTime},
			r.part.Log().CommittedOffset(), r.part.HighWatermark(), time.Now())
		r.advanceLocked()
		r.changed.Broadcast()
		r.mu.Unlock()
		r.node.log.Info("became leader", "topic", r.topic, "partition", r.id, "leader_epoch", st.LeaderEpoch,
			"partition_epoch", st.PartitionEpoch, "isr", st.ISR, "log_end", r.part.EndOffset(), "high_watermark", r.part.HighWatermark())
		if f := r.node.cfg.OnRoleChange; f != nil {
			f(r.topic, r.id, true, st.LeaderEpoch)
		}
		return
	}
	if err := r.part.BecomeFollower(st.LeaderEpoch); err != nil {
		r.node.log.Error("cannot become follower", "topic", r.topic, "partition", r.id, "leader_epoch", st.LeaderEpoch, "err", err)
	}
	r.mu.Lock()
	r.state, r.known, r.leader = st.Clone(), true, nil
	r.changed.Broadcast()
	r.mu.Unlock()
	if st.HasReplica(self) {
		r.node.log.Info("became follower", "topic", r.topic, "partition", r.id, "leader", st.Leader,
			"leader_epoch", st.LeaderEpoch, "partition_epoch", st.PartitionEpoch, "isr", st.ISR)
	}
	if f := r.node.cfg.OnRoleChange; f != nil && leading {
		f(r.topic, r.id, false, st.LeaderEpoch)
	}
	if st.Leader >= 0 && st.HasReplica(self) {
		r.startFetcher(st.Leader, st.LeaderEpoch)
	}
}

// close stops the replica: waiters fail with ErrClosed, the fetcher stops.
func (r *ReplicaSet) close() {
	r.mu.Lock()
	r.closed = true
	r.leader = nil
	r.changed.Broadcast()
	r.mu.Unlock()
	r.stopFetcher()
}
