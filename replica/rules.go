package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file holds the rules of replication as deterministic functions and
// state machines: no goroutines, no clocks (time is passed in), no I/O. The
// drivers in replicaset.go, follower.go and controller.go apply them. Each
// rule names the Kafka code or KIP it follows.

// PartitionState is the controller's record of one partition: which
// brokers hold replicas, who leads in which leader epoch, and which replicas
// are in sync. The controller is its only writer; every change bumps
// PartitionEpoch, and a change of leader bumps LeaderEpoch too.
type PartitionState struct {
	Topic     string
	Partition int32
	// Replicas are the brokers holding the partition; the first is the
	// preferred leader.
	Replicas []int32
	// Leader is the leading broker, or -1 while there is none.
	Leader int32
	// LeaderEpoch counts leader changes; every batch the leader writes
	// carries it.
	LeaderEpoch int32
	// ISR is the in-sync replica set, the leader included.
	ISR []int32
	// PartitionEpoch counts every change to this state (KIP-497).
	PartitionEpoch int32
	// AddingReplicas and RemovingReplicas are an ongoing reassignment's
	// (KIP-455): while it runs, Replicas holds the target's replicas (in
	// the target's order) followed by those it removes; the ones it adds
	// catch up as followers, and once all of them are in the ISR the
	// reassignment completes - Replicas becomes the target, the removed
	// replicas leave (CompleteReassignment). Both empty: none runs.
	AddingReplicas   []int32 `json:",omitempty"`
	RemovingReplicas []int32 `json:",omitempty"`
}

// Clone returns a deep copy.
func (s PartitionState) Clone() PartitionState {
	s.Replicas = slices.Clone(s.Replicas)
	s.ISR = slices.Clone(s.ISR)
	s.AddingReplicas = slices.Clone(s.AddingReplicas)
	s.RemovingReplicas = slices.Clone(s.RemovingReplicas)
	return s
}

// Reassigning reports whether a reassignment of the partition is under
// way.
func (s PartitionState) Reassigning() bool {
	return len(s.AddingReplicas) > 0 || len(s.RemovingReplicas) > 0
}

// InISR reports whether broker id is in the ISR.
func (s PartitionState) InISR(id int32) bool { return slices.Contains(s.ISR, id) }

// HasReplica reports whether broker id holds a replica.
func (s PartitionState) HasReplica(id int32) bool { return slices.Contains(s.Replicas, id) }

// NewerThan reports whether s is a later version of the same partition's
// state than o.
func (s PartitionState) NewerThan(o PartitionState) bool {
	if s.LeaderEpoch != o.LeaderEpoch {
		return s.LeaderEpoch > o.LeaderEpoch
	}
	return s.PartitionEpoch > o.PartitionEpoch
}

func (s PartitionState) String() string {
	moving := ""
	if s.Reassigning() {
		moving = fmt.Sprintf(" adding %v removing %v", s.AddingReplicas, s.RemovingReplicas)
	}
	return fmt.Sprintf("%s-%d{leader %d epoch %d isr %v replicas %v%s partition epoch %d}",
		s.Topic, s.Partition, s.Leader, s.LeaderEpoch, s.ISR, s.Replicas, moving, s.PartitionEpoch)
}

// Progress is what a leader knows of one follower.
type Progress struct {
	// LogEnd is the follower's log end offset as its last fetch showed it
	// (the fetch offset), -1 before the first fetch in this leader epoch.
	LogEnd int64
	// BrokerEpoch is the follower broker's registration epoch its last
	// fetch carried (KIP-903).
	BrokerEpoch int64
	// LastCaughtUp is the last time the follower had everything the leader
	// had.
	LastCaughtUp time.Time

	lastFetch          time.Time
	lastFetchLeaderEnd int64
}

// recordFetch applies Kafka's caught-up rule (Replica.updateFetchState): a
// fetch at or past the leader's end means caught up now; a fetch at or past
// where the leader's log ended at the previous fetch means caught up as of
// that previous fetch.
func (p *Progress) recordFetch(fetchOffset, leaderEnd int64, brokerEpoch int64, now time.Time) {
	if fetchOffset >= leaderEnd {
		p.LastCaughtUp = later(p.LastCaughtUp, now)
	} else if fetchOffset >= p.lastFetchLeaderEnd && !p.lastFetch.IsZero() {
		p.LastCaughtUp = later(p.LastCaughtUp, p.lastFetch)
	}
	p.LogEnd = fetchOffset
	p.BrokerEpoch = brokerEpoch
	p.lastFetch = now
	p.lastFetchLeaderEnd = leaderEnd
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// caughtUp reports whether the follower was caught up within lag of now.
func (p *Progress) caughtUp(now time.Time, lag time.Duration) bool {
	return !p.LastCaughtUp.IsZero() && now.Sub(p.LastCaughtUp) <= lag
}

// LeaderConfig is what the leader's rules need from the topic's settings.
type LeaderConfig struct {
	// MinInSyncReplicas is the smallest ISR that may commit records
	// (min.insync.replicas). At least 1.
	MinInSyncReplicas int
	// ReplicaLagTime is how long a follower may go without catching up
	// before it leaves the ISR (replica.lag.time.max.ms).
	ReplicaLagTime time.Duration
}

// Leader is the leader's view of a partition in one leader epoch: the
// committed partition state, each follower's progress, the high watermark
// and at most one ISR change in flight. It is a pure state machine: the
// caller serializes calls and passes the time.
type Leader struct {
	cfg        LeaderConfig
	self       int32
	state      PartitionState
	epochStart int64
	hw         int64
	progress   map[int32]*Progress
	pending    []int32 // proposed ISR not yet committed; nil: none
}

// NewLeader starts leading in st.LeaderEpoch. logEnd is the leader's log end
// offset now (the start of its epoch) and hw the high watermark it knew as a
// follower. Every follower's log end is unknown until it fetches; the ISR
// members count as caught up now, so that they have ReplicaLagTime to show
// up.
func NewLeader(self int32, st PartitionState, cfg LeaderConfig, logEnd, hw int64, now time.Time) *Leader {
	if cfg.MinInSyncReplicas < 1 {
		cfg.MinInSyncReplicas = 1
	}
	l := &Leader{cfg: cfg, self: self, state: st.Clone(), epochStart: logEnd, hw: min(hw, logEnd), progress: map[int32]*Progress{}}
	for _, r := range st.Replicas {
		if r == self {
			continue
		}
		p := &Progress{LogEnd: -1, lastFetchLeaderEnd: -1}
		if st.InISR(r) {
			p.LastCaughtUp = now
		}
		l.progress[r] = p
	}
	return l
}

// State is the committed partition state the leader works with.
func (l *Leader) State() PartitionState { return l.state.Clone() }

// HighWatermark is the offset below which records are committed.
func (l *Leader) HighWatermark() int64 { return l.hw }

// EpochStart is the leader's log end offset when its epoch began.
func (l *Leader) EpochStart() int64 { return l.epochStart }

// Progress returns a copy of what the leader knows of follower id.
func (l *Leader) Progress(id int32) (Progress, bool) {
	p, ok := l.progress[id]
	if !ok {
		return Progress{}, false
	}
	return *p, true
}

// Pending is the ISR proposed to the controller and not yet answered, or
// nil.
func (l *Leader) Pending() []int32 { return slices.Clone(l.pending) }

// UnderMinISR reports whether the committed ISR is smaller than
// MinInSyncReplicas: acks=all produce is refused and the high watermark
// does not move (KIP-966 strict min ISR).
func (l *Leader) UnderMinISR() bool { return len(l.state.ISR) < l.cfg.MinInSyncReplicas }

// CheckAppend decides whether a produce with acks=all may be written at
// all: not while the ISR is below the minimum (Partition.appendRecordsToLeader).
func (l *Leader) CheckAppend(acksAll bool) error {
	if acksAll && l.UnderMinISR() {
		return fmt.Errorf("%w: ISR %v, minimum %d", ErrNotEnoughReplicas, l.state.ISR, l.cfg.MinInSyncReplicas)
	}
	return nil
}

// Committed reports whether every record before end is committed: acks=all
// may be acknowledged.
func (l *Leader) Committed(end int64) bool { return l.hw >= end }

// Fetch records follower id fetching at fetchOffset while the leader's log
// ends at logEnd, and advances the high watermark. It reports whether the
// high watermark moved. A broker that holds no replica is ignored.
func (l *Leader) Fetch(id int32, brokerEpoch int64, fetchOffset, logEnd int64, now time.Time) bool {
	p, ok := l.progress[id]
	if !ok {
		return false
	}
	p.recordFetch(fetchOffset, logEnd, brokerEpoch, now)
	return l.Advance(logEnd, now)
}

// maximal reports whether id counts as in the ISR for the high watermark:
// in the committed ISR or added by the change in flight (KIP-497: a pending
// expansion counts at once, a pending shrink only once committed).
func (l *Leader) maximal(id int32) bool {
	return l.state.InISR(id) || slices.Contains(l.pending, id)
}

// Advance moves the high watermark to the smallest log end among the
// leader (logEnd), the maximal ISR and the followers about to join it (those
// caught up within ReplicaLagTime: Partition.shouldWaitForReplicaToJoinIsr,
// so that a follower keeping pace is not starved of the ISR). It never moves
// back, and never moves while the ISR is below MinInSyncReplicas (KIP-966).
// It reports whether it moved.
func (l *Leader) Advance(logEnd int64, now time.Time) bool {
	if l.UnderMinISR() {
		return false
	}
	hw := logEnd
	for id, p := range l.progress {
		counts := l.maximal(id) || (l.pending == nil && p.caughtUp(now, l.cfg.ReplicaLagTime))
		if counts && p.LogEnd < hw {
			hw = p.LogEnd
		}
	}
	if hw > l.hw {
		l.hw = hw
		return true
	}
	return false
}

// ProposeISR returns the ISR the leader should ask the controller for, if
// it differs from the committed one and no change is in flight: followers
// not caught up within ReplicaLagTime leave (Partition.getOutOfSyncReplicas);
// followers caught up within it whose log reaches both the high watermark and
// the start of this leader epoch join (Partition.isFollowerInSync). The proposal is pending
// until Apply or Abort.
func (l *Leader) ProposeISR(now time.Time) ([]int32, bool) {
	if l.pending != nil {
		return nil, false
	}
	isr := []int32{l.self}
	for _, r := range l.state.Replicas {
		if r == l.self {
			continue
		}
		p := l.progress[r]
		if l.state.InISR(r) {
			if p.caughtUp(now, l.cfg.ReplicaLagTime) {
				isr = append(isr, r)
			}
			continue
		}
		// Kafka checks this as the follower fetches; here the check runs on
		// a timer too, so the follower must also have been caught up
		// recently: one that stopped fetching does not rejoin on the
		// strength of an old fetch.
		if p.LogEnd >= 0 && p.LogEnd >= l.hw && p.LogEnd >= l.epochStart && p.caughtUp(now, l.cfg.ReplicaLagTime) {
			isr = append(isr, r)
		}
	}
	if sameSet(isr, l.state.ISR) {
		return nil, false
	}
	l.pending = isr
	return slices.Clone(isr), true
}

// Apply takes a newer committed state of the partition in the same leader
// epoch (the controller's answer to a proposal, or a change it made itself,
// such as removing a fenced broker), ending any change in flight. A state
// that is not newer is ignored; it reports whether it was taken.
//
// A follower the new state takes out of the ISR stops counting as caught
// up: it holds the high watermark back again only once it catches up anew.
// The controller removes a follower whose broker it fenced or that shuts
// down, which Kafka's leader no longer waits for
// (Partition.isReplicaIsrEligible); one the leader itself dropped was not
// caught up anyway.
func (l *Leader) Apply(st PartitionState) bool {
	if st.LeaderEpoch != l.state.LeaderEpoch || st.PartitionEpoch <= l.state.PartitionEpoch {
		return false
	}
	for id, p := range l.progress {
		if l.state.InISR(id) && !st.InISR(id) {
			p.LastCaughtUp = time.Time{}
		}
	}
	// A reassignment adds replicas within the leader epoch: the leader
	// tracks them from their first fetch, as out-of-sync followers, so
	// that they can catch up and join the ISR. (Replicas only leave with a
	// new leader epoch, but a state without one is not tracked either.)
	for _, r := range st.Replicas {
		if _, ok := l.progress[r]; !ok && r != l.self {
			l.progress[r] = &Progress{LogEnd: -1, lastFetchLeaderEnd: -1}
		}
	}
	for id := range l.progress {
		if !st.HasReplica(id) {
			delete(l.progress, id)
		}
	}
	l.state = st.Clone()
	l.pending = nil
	return true
}

// Abort forgets the change in flight: the controller refused it or did not
// answer.
func (l *Leader) Abort() { l.pending = nil }

// ISRAnswer is what a leader did with the controller's answer to its ISR
// proposal (Leader.Answer).
type ISRAnswer int

const (
	// ISRApplied: the answer is the new state in this leader epoch, taken.
	ISRApplied ISRAnswer = iota
	// ISRWaiting: the controller holds a state this leader has not seen -
	// one this very change committed in a new leader epoch (a reassignment
	// it completed removed replicas or moved the leadership), or one that
	// made the proposal stale. The proposal stays counted for the high
	// watermark, and no other is made, until that state arrives (Apply, or
	// a new leader epoch).
	ISRWaiting
	// ISRAborted: refused, or no answer; the proposal is forgotten and may
	// be made again.
	ISRAborted
)

// Answer takes the controller's answer to the proposal in flight, as
// Kafka's Partition.handleAlterPartitionUpdate and
// handleAlterPartitionError do. A success in this leader epoch is applied.
// A success in another epoch, NEW_LEADER_ELECTED (ErrNewLeaderElected) and
// a stale proposal (ErrStaleState) wait for the metadata: the change may
// be committed - with a member the proposal adds already in the ISR the
// controller holds, one that may lead next - so the high watermark must
// keep counting that member until the leader learns the new state; taking
// the old ISR back instead could acknowledge records the next leader does
// not have. Any other error forgets the proposal.
func (l *Leader) Answer(next PartitionState, err error) ISRAnswer {
	switch {
	case err == nil && next.Leader == l.self && next.LeaderEpoch == l.state.LeaderEpoch:
		l.Apply(next)
		return ISRApplied
	case err == nil, errors.Is(err, ErrNewLeaderElected), errors.Is(err, ErrStaleState):
		return ISRWaiting
	}
	l.Abort()
	return ISRAborted
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Truncation is where a follower must cut its log before copying the
// leader's.
type Truncation struct {
	// Offset is the new log end: everything at or after it goes (nothing,
	// if it is at or past the log end).
	Offset int64
	// Done is false when the follower must ask the leader again, for
	// NextEpoch, after truncating to Offset (KIP-279).
	Done      bool
	NextEpoch int32
}

// EpochEnds looks up the follower's own leader-epoch cache: the largest
// epoch it knows at or below epoch and where that epoch ends (see
// partition.EpochCache.EndOffsetFor); -1, -1 if it knows none.
type EpochEnds func(epoch int32) (int32, int64)

// DecideTruncation is Kafka's AbstractFetcherThread.getOffsetTruncationState.
// The follower asked the leader where some epoch ends, and the leader
// answered with leaderEpoch (the largest epoch it knows at or below the one
// asked) ending at leaderEnd. The follower keeps what both logs agree on:
//
//   - If the follower knows leaderEpoch too, the logs agree up to the end of
//     that epoch on both sides: truncate to min(leaderEnd, own end of the
//     epoch, log end). Done.
//   - If it does not, truncate to the end of the largest epoch it knows
//     below leaderEpoch and ask again for that epoch (KIP-279: fast
//     back-to-back leader changes leave epochs one side never saw).
//   - If it knows no epoch at all, truncate to min(leaderEnd, log end).
//   - If the leader knows no epoch at or below the one asked (it answered
//     -1), keep nothing: truncate to logStart.
//
// Truncating to the high watermark is never the answer (KIP-101).
func DecideTruncation(local EpochEnds, logStart, logEnd int64, leaderEpoch int32, leaderEnd int64) Truncation {
	if leaderEpoch < 0 || leaderEnd < 0 {
		return Truncation{Offset: logStart, Done: true}
	}
	fe, fend := local(leaderEpoch)
	switch {
	case fe < 0:
		return Truncation{Offset: min(leaderEnd, logEnd), Done: true}
	case fe != leaderEpoch:
		return Truncation{Offset: min(fend, logEnd), NextEpoch: fe}
	default:
		return Truncation{Offset: min(fend, leaderEnd, logEnd), Done: true}
	}
}

// LogEnds reports where a replica's log ends: its latest leader epoch and
// its log end offset, or ok false if it cannot be asked.
type LogEnds func(broker int32) (epoch int32, end int64, ok bool)

// ElectLeader picks a partition's leader: the first replica, in replica
// order, that is in the ISR and alive - so the preferred leader whenever it
// can be. With none and unclean set, the live replica whose log is the most
// up to date (latest epoch, then largest end offset; replica order breaks
// ties), and clean reports false: records the old ISR committed may be lost.
// With no candidate it returns -1.
func ElectLeader(replicas, isr []int32, alive func(int32) bool, unclean bool, ends LogEnds) (leader int32, clean bool) {
	for _, r := range replicas {
		if slices.Contains(isr, r) && alive(r) {
			return r, true
		}
	}
	if !unclean {
		return -1, true
	}
	best, bestEpoch, bestEnd := int32(-1), int32(-2), int64(-2)
	for _, r := range replicas {
		if !alive(r) {
			continue
		}
		e, end, ok := int32(-1), int64(-1), true
		if ends != nil {
			e, end, ok = ends(r)
		}
		if !ok {
			continue
		}
		if e > bestEpoch || (e == bestEpoch && end > bestEnd) {
			best, bestEpoch, bestEnd = r, e, end
		}
	}
	return best, false
}

// AssignReplicas places each of partitions partitions on rf of brokers,
// round-robin: partition p's replicas are the rf brokers following
// brokers[(start+p) mod n], so leaders (the first replica, the preferred
// leader) spread evenly and no broker holds two replicas of a partition.
func AssignReplicas(brokers []int32, partitions, rf, start int) ([][]int32, error) {
	n := len(brokers)
	if rf < 1 || rf > n {
		return nil, fmt.Errorf("%w: replication factor %d with %d brokers", ErrInvalidConfig, rf, n)
	}
	if partitions < 0 {
		return nil, fmt.Errorf("%w: %d partitions", ErrInvalidConfig, partitions)
	}
	out := make([][]int32, partitions)
	for p := range out {
		first := (start + p) % n
		if first < 0 {
			first += n
		}
		rs := make([]int32, rf)
		for i := range rs {
			rs[i] = brokers[(first+i)%n]
		}
		out[p] = rs
	}
	return out, nil
}

// ResignRequest is a leader giving up a partition's leadership because its
// own log holds a damaged batch (one whose CRC-32C does not match) at
// Offset, which it must not serve and cannot repair while it leads. It is
// refused with ErrStaleState unless Leader and LeaderEpoch are the
// controller's current ones.
type ResignRequest struct {
	Topic       string
	Partition   int32
	Leader      int32
	LeaderEpoch int32
	// Offset is where the damaged batch begins on the leader.
	Offset int64
}

// DecideResignation is the controller's rule for a ResignRequest; Kafka
// has none (its brokers serve log bytes unchecked), so this goes beyond it.
// Leadership moves to the first replica, in replica order, that is in the
// ISR, alive, not the resigning leader, and whose log reaches past Offset:
// it holds its own copy of the damaged batch (every ISR member holds every
// committed record; ends tells for the rest). The old leader leaves the
// ISR, so that it cannot be elected again with the damage; it rejoins once
// it has cut its log before the damage, copied the batches again from the
// new leader and caught up. Should the new leader's copy be damaged too, it
// resigns in turn and leaves the ISR: leadership walks the ISR at most
// once. With no such replica the state does not change and the answer is
// ErrNoIntactReplica: the leader keeps the partition, refusing to serve the
// damaged batch, rather than hand it to a replica without the records.
func DecideResignation(st PartitionState, req ResignRequest, alive func(int32) bool, ends LogEnds) (PartitionState, error) {
	if req.Leader != st.Leader || req.LeaderEpoch != st.LeaderEpoch {
		return st, fmt.Errorf("%w: %s-%d resignation from leader %d epoch %d, controller has %s",
			ErrStaleState, req.Topic, req.Partition, req.Leader, req.LeaderEpoch, st)
	}
	for _, r := range st.Replicas {
		if r == st.Leader || !st.InISR(r) || !alive(r) {
			continue
		}
		if ends != nil {
			if _, end, ok := ends(r); !ok || end <= req.Offset {
				continue
			}
		}
		next := st.Clone()
		next.Leader = r
		next.LeaderEpoch++
		next.PartitionEpoch++
		next.ISR = slices.DeleteFunc(next.ISR, func(id int32) bool { return id == st.Leader })
		return next, nil
	}
	return st, fmt.Errorf("%w: %s-%d: no other live in-sync replica holds offset %d (ISR %v)",
		ErrNoIntactReplica, req.Topic, req.Partition, req.Offset, st.ISR)
}
