package replica

import (
	"fmt"
	"slices"
)

// This file holds the controller's rules: how a partition's state follows
// broker liveness, which ISR changes a leader may make, and preferred
// leader election. They are pure functions of a partition state and what
// the controller knows of the brokers, so that every controller - the
// in-process LocalController and the Raft-backed one of package controller
// - decides the same way, and tests can table them.

// Eligible reports whether a broker may lead or be in an ISR now: it is
// registered, not fenced and not shutting down.
type Eligible func(broker int32) bool

// ReconcileResult is what Reconcile decided for one partition.
type ReconcileResult struct {
	// State is the partition's next state; meaningful when Changed.
	State PartitionState
	// Changed reports whether State differs from the state given (and so
	// must be committed: its PartitionEpoch is bumped).
	Changed bool
	// Unclean reports an unclean leader election: records only the old ISR
	// held may be lost.
	Unclean bool
	// Offline reports that the partition has no leader: no in-sync replica
	// is eligible and unclean election is off (or found no one).
	Offline bool
}

// Reconcile brings a partition's state in line with which brokers are
// eligible (Kafka's PartitionChangeBuilder after a broker is fenced,
// unfenced or starts a controlled shutdown). Ineligible brokers leave the
// ISR - unless that would empty it: the last members keep their place, as
// only they are known to hold every committed record (KIP-966's reason for
// ELR). A partition whose leader is not eligible gets a new one: the first
// eligible ISR member in replica order, or with unclean election the most
// up-to-date eligible replica (ends may be nil: the first eligible
// replica), whose ISR becomes just itself. The leader epoch is bumped when
// the leader changes, the partition epoch on every change.
func Reconcile(st PartitionState, eligible Eligible, unclean bool, ends LogEnds) ReconcileResult {
	next := st.Clone()
	isr := slices.DeleteFunc(slices.Clone(st.ISR), func(id int32) bool { return !eligible(id) })
	if len(isr) == 0 {
		isr = slices.Clone(st.ISR)
	}
	if st.Leader >= 0 && eligible(st.Leader) && slices.Contains(isr, st.Leader) {
		if sameSet(isr, st.ISR) {
			return ReconcileResult{State: next}
		}
		next.ISR = isr
		next.PartitionEpoch++
		return ReconcileResult{State: next, Changed: true}
	}
	leader, clean := ElectLeader(st.Replicas, isr, eligible, unclean, ends)
	var res ReconcileResult
	switch {
	case leader >= 0 && clean:
		next.ISR = slices.DeleteFunc(isr, func(id int32) bool { return !eligible(id) })
	case leader >= 0:
		res.Unclean = true
		next.ISR = []int32{leader}
	case st.Leader < 0 && sameSet(isr, st.ISR):
		return ReconcileResult{State: next, Offline: true} // still no one to lead
	default:
		res.Offline = true
		next.ISR = isr
	}
	if leader != st.Leader {
		next.LeaderEpoch++
	}
	next.Leader = leader
	next.PartitionEpoch++
	res.State, res.Changed = next, true
	return res
}

// ElectPreferred moves a partition's leadership to its preferred (first)
// replica when that replica is eligible, in the ISR and not leading already
// (Kafka's preferred leader election). ok reports a change.
func ElectPreferred(st PartitionState, eligible Eligible) (next PartitionState, ok bool) {
	if len(st.Replicas) == 0 {
		return st, false
	}
	pref := st.Replicas[0]
	if st.Leader == pref || !eligible(pref) || !st.InISR(pref) {
		return st, false
	}
	next = st.Clone()
	next.Leader = pref
	next.LeaderEpoch++
	next.PartitionEpoch++
	return next, true
}

// IneligibleMember reports whether a broker may not join an ISR with the
// broker epoch the leader saw it fetch with (KIP-903): it is not
// registered, fenced, shutting down, or registered under another epoch (it
// restarted since).
type IneligibleMember func(broker int32, brokerEpochSeen int64) bool

// CheckAlterPartition validates a leader's ISR change against the
// partition's current state, as Kafka's controller does
// (ReplicationControlManager.validateAlterPartitionData), and returns the
// next state. Errors: ErrStaleState when the request's leader, leader epoch
// or partition epoch is not the current one; ErrInvalidConfig for an ISR
// that is not a set of the replicas holding its leader; ErrIneligibleReplica
// for a new member that may not join (ineligible). Members already in the
// ISR stay whatever their state: removing them is the controller's job.
func CheckAlterPartition(st PartitionState, req AlterPartitionRequest, ineligible IneligibleMember) (PartitionState, error) {
	if req.Leader != st.Leader || req.LeaderEpoch != st.LeaderEpoch || req.PartitionEpoch != st.PartitionEpoch {
		return st, fmt.Errorf("%w: %s-%d request from leader %d epoch %d partition epoch %d, controller has %s",
			ErrStaleState, req.Topic, req.Partition, req.Leader, req.LeaderEpoch, req.PartitionEpoch, st)
	}
	if !slices.Contains(req.ISR, st.Leader) {
		return st, fmt.Errorf("%w: ISR %v without its leader %d", ErrInvalidConfig, req.ISR, st.Leader)
	}
	seen := map[int32]bool{}
	for _, id := range req.ISR {
		if seen[id] || !st.HasReplica(id) {
			return st, fmt.Errorf("%w: ISR %v is not a set of replicas %v", ErrInvalidConfig, req.ISR, st.Replicas)
		}
		seen[id] = true
		if st.InISR(id) {
			continue
		}
		if ineligible(id, req.BrokerEpochs[id]) {
			return st, fmt.Errorf("%w: broker %d (epoch seen %d)", ErrIneligibleReplica, id, req.BrokerEpochs[id])
		}
	}
	next := st.Clone()
	next.ISR = slices.Clone(req.ISR)
	next.PartitionEpoch++
	return next, nil
}

// NewPartitionStates is the first state of each partition of a new topic
// (or of partitions added to one): assign lists each partition's replicas
// (AssignReplicas), the first leads, and every replica starts in the ISR -
// there is nothing yet to be behind on. first is the number of the first
// partition.
func NewPartitionStates(topic string, first int32, assign [][]int32) []PartitionState {
	out := make([]PartitionState, len(assign))
	for i, rs := range assign {
		out[i] = PartitionState{Topic: topic, Partition: first + int32(i), Replicas: slices.Clone(rs), Leader: rs[0], ISR: slices.Clone(rs)}
	}
	return out
}
