package replica

import (
	"fmt"
	"slices"
)

// This file holds the rules of the changes an operator asks the controller
// for: partition reassignment (KIP-455) and leader elections (KIP-460),
// after KRaft's PartitionChangeBuilder, PartitionReassignmentReplicas and
// PartitionReassignmentRevert. Like the rules beside it they are pure
// functions of a partition's state and of what the controller knows of
// the brokers; the controller commits what they return.
//
// A reassignment moves a partition to target replicas without a moment
// where fewer replicas than before hold its committed records:
//
//	start     Replicas = target ++ (current - target)   (the target's order first)
//	          AddingReplicas = target - current, RemovingReplicas = current - target
//	          the added replicas are created on their brokers and fetch as followers
//	catch up  the leader adds them to the ISR as they catch up (AlterPartition)
//	complete  once every added replica is in the ISR: Replicas = target,
//	          the removed ones leave the ISR and the replicas; a leader being
//	          removed hands over to the first target replica in the ISR; the
//	          leader epoch is bumped, fencing the removed replicas
//	cancel    back to the replicas before it: the added ones leave
//
// Every change bumps the partition epoch; one that changes the leader or
// removes a replica bumps the leader epoch too.

// ReplicationFactor is the partition's replication factor: its replicas,
// less those an ongoing reassignment is adding.
func (s PartitionState) ReplicationFactor() int {
	return len(s.Replicas) - len(s.AddingReplicas)
}

// advance sets the epochs of to, the next state after from: the partition
// epoch one more; the leader epoch one more if the leader changes or a
// replica leaves (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded:
// the removed replica must not keep fetching under the old epoch).
func advance(from, to PartitionState) PartitionState {
	to.LeaderEpoch, to.PartitionEpoch = from.LeaderEpoch, from.PartitionEpoch+1
	if to.Leader != from.Leader || !containsAll(to.Replicas, from.Replicas) {
		to.LeaderEpoch++
	}
	return to
}

func containsAll(set, of []int32) bool {
	for _, x := range of {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

func without(from, drop []int32) []int32 {
	var out []int32
	for _, x := range from {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}

// samePlacement reports whether two states place the partition alike:
// same replicas in the same order, reassignment, ISR and leader.
func samePlacement(a, b PartitionState) bool {
	return slices.Equal(a.Replicas, b.Replicas) && slices.Equal(a.AddingReplicas, b.AddingReplicas) &&
		slices.Equal(a.RemovingReplicas, b.RemovingReplicas) && sameSet(a.ISR, b.ISR) && a.Leader == b.Leader
}

// completeReassignment is st with its reassignment completed, if it can
// complete: every added replica is in the ISR, the ISR keeps a member once
// the removed replicas leave it, and one of those members is eligible to
// lead. The leader stays if it is such a member; else the first target
// replica that is leads. The epochs are left as they are (see advance).
func completeReassignment(st PartitionState, eligible Eligible) (PartitionState, bool) {
	if !st.Reassigning() {
		return st, false
	}
	isr := without(st.ISR, st.RemovingReplicas)
	if len(isr) == 0 || !containsAll(isr, st.AddingReplicas) {
		return st, false
	}
	next := st.Clone()
	next.Replicas = without(st.Replicas, st.RemovingReplicas)
	next.ISR = isr
	next.AddingReplicas, next.RemovingReplicas = nil, nil
	if st.Leader < 0 || !slices.Contains(isr, st.Leader) || !eligible(st.Leader) {
		next.Leader = -1
		for _, r := range next.Replicas {
			if slices.Contains(isr, r) && eligible(r) {
				next.Leader = r
				break
			}
		}
		if next.Leader < 0 {
			// No one could lead the target: keep the reassignment going
			// rather than take the partition offline.
			return st, false
		}
	}
	return next, true
}

// CompleteReassignment completes a partition's ongoing reassignment if it
// can (see the comment at the top of this file): ok reports a change, next
// is the new state with its epochs bumped. The controller checks this after
// every ISR change (DecideAlterPartition does it for the leader's) and
// periodically, so that a reassignment never waits on a check that was
// missed.
func CompleteReassignment(st PartitionState, eligible Eligible) (next PartitionState, ok bool) {
	done, ok := completeReassignment(st, eligible)
	if !ok {
		return st, false
	}
	return advance(st, done), true
}

// Reassign starts a reassignment of a partition to target (in the order
// given: the first is the preferred leader), replacing any reassignment
// under way: what it was adding and the new target drops leaves once the
// new one completes, and what both add is still added. The target must
// be non-empty and name registered brokers, each once
// (ErrInvalidReplicaAssignment); with allowRFChange false it must keep the
// replication factor (ErrReplicationFactorChange, KIP-860). A target that
// adds no replica completes at once, as does one whose added replicas are
// in the ISR already. changed is false when the state already is what the
// target asks for.
func Reassign(st PartitionState, target []int32, allowRFChange bool, registered func(int32) bool, eligible Eligible) (next PartitionState, changed bool, err error) {
	if len(target) == 0 {
		return st, false, fmt.Errorf("%w: %s-%d: the target replica list is empty", ErrInvalidReplicaAssignment, st.Topic, st.Partition)
	}
	seen := map[int32]bool{}
	for _, id := range target {
		if seen[id] {
			return st, false, fmt.Errorf("%w: %s-%d: the target %v names broker %d more than once", ErrInvalidReplicaAssignment, st.Topic, st.Partition, target, id)
		}
		if id < 0 || !registered(id) {
			return st, false, fmt.Errorf("%w: %s-%d: the target %v names broker %d, which is not registered", ErrInvalidReplicaAssignment, st.Topic, st.Partition, target, id)
		}
		seen[id] = true
	}
	if !allowRFChange && len(target) != st.ReplicationFactor() {
		return st, false, fmt.Errorf("%w: %s-%d: from %d to %d replicas", ErrReplicationFactorChange, st.Topic, st.Partition, st.ReplicationFactor(), len(target))
	}
	next = st.Clone()
	next.Replicas = slices.Clone(target)
	next.AddingReplicas, next.RemovingReplicas = nil, nil
	for _, r := range st.Replicas {
		if !seen[r] {
			next.Replicas = append(next.Replicas, r)
			next.RemovingReplicas = append(next.RemovingReplicas, r)
		}
	}
	// A replica an earlier reassignment was adding is added still: it may
	// not have caught up. (KRaft counts it as current, and so could drop
	// the replicas being removed before it holds the records.)
	original := without(st.Replicas, st.AddingReplicas)
	for _, r := range target {
		if !slices.Contains(original, r) {
			next.AddingReplicas = append(next.AddingReplicas, r)
		}
	}
	if done, ok := completeReassignment(next, eligible); ok {
		next = done
	}
	if samePlacement(next, st) {
		return st, false, nil
	}
	return advance(st, next), true, nil
}

// CancelReassignment reverts a partition's ongoing reassignment
// (ErrNoReassignmentInProgress if none): the replicas it was adding leave
// the replicas and the ISR, those it was removing stay. The leader stays
// unless it was one being added; then the first original replica in the
// ISR leads. Should every ISR member be one being added, reverting needs an
// unclean election: refused (ErrInvalidReplicaAssignment) unless unclean,
// when the first original replica eligible leads with an ISR of itself
// (Kafka's PartitionReassignmentRevert).
func CancelReassignment(st PartitionState, unclean bool, eligible Eligible) (PartitionState, error) {
	if !st.Reassigning() {
		return st, fmt.Errorf("%w: %s-%d", ErrNoReassignmentInProgress, st.Topic, st.Partition)
	}
	next := st.Clone()
	next.Replicas = without(st.Replicas, st.AddingReplicas)
	next.ISR = without(st.ISR, st.AddingReplicas)
	next.AddingReplicas, next.RemovingReplicas = nil, nil
	if len(next.ISR) == 0 {
		if !unclean {
			return st, fmt.Errorf("%w: %s-%d: cancelling would need an unclean leader election: every in-sync replica (%v) is one the reassignment adds",
				ErrInvalidReplicaAssignment, st.Topic, st.Partition, st.ISR)
		}
		next.ISR = []int32{next.Replicas[0]}
	}
	if st.Leader < 0 || !slices.Contains(next.ISR, st.Leader) || !eligible(st.Leader) {
		leader, clean := ElectLeader(next.Replicas, next.ISR, eligible, unclean, nil)
		next.Leader = leader
		if leader >= 0 && !clean {
			next.ISR = []int32{leader}
		}
	}
	return advance(st, next), nil
}

// ElectionType is the kind of leader election an operator asks for
// (ElectLeaders, KIP-460).
type ElectionType int8

const (
	// PreferredElection moves the leadership to the preferred (first)
	// replica.
	PreferredElection ElectionType = 0
	// UncleanElection elects a leader for a partition that has none, from
	// outside the ISR if no in-sync replica is eligible: records only the
	// old ISR held may be lost.
	UncleanElection ElectionType = 1
)

// DecideElection is the controller's answer to an operator's election for
// one partition (Kafka's ReplicationControlManager.electLeader):
//
//   - preferred: ErrElectionNotNeeded if the preferred replica leads; it
//     leads if it is an eligible ISR member; otherwise the leader stays if
//     it is one (ErrPreferredLeaderNotAvailable), or else the next eligible
//     ISR member in replica order leads;
//   - unclean: ErrElectionNotNeeded if the partition has a leader; else the
//     first eligible ISR member in replica order, or the first eligible
//     replica, whose ISR becomes just itself;
//     ErrEligibleLeadersNotAvailable if there is none.
//
// The next state has its epochs bumped.
func DecideElection(st PartitionState, typ ElectionType, eligible Eligible) (PartitionState, error) {
	valid := func(r int32) bool { return r >= 0 && st.InISR(r) && eligible(r) }
	next := st.Clone()
	switch typ {
	case PreferredElection:
		if len(st.Replicas) == 0 {
			return st, fmt.Errorf("%w: %s-%d has no replicas", ErrPreferredLeaderNotAvailable, st.Topic, st.Partition)
		}
		pref := st.Replicas[0]
		switch {
		case st.Leader == pref:
			return st, fmt.Errorf("%w: %s-%d is led by its preferred replica %d", ErrElectionNotNeeded, st.Topic, st.Partition, pref)
		case valid(pref):
			next.Leader = pref
		case valid(st.Leader):
			return st, fmt.Errorf("%w: %s-%d: replica %d is not an eligible in-sync replica (ISR %v)", ErrPreferredLeaderNotAvailable, st.Topic, st.Partition, pref, st.ISR)
		default:
			next.Leader = -1
			for _, r := range st.Replicas[1:] {
				if valid(r) {
					next.Leader = r
					break
				}
			}
			if next.Leader < 0 {
				return st, fmt.Errorf("%w: %s-%d: no replica is an eligible in-sync replica (ISR %v)", ErrPreferredLeaderNotAvailable, st.Topic, st.Partition, st.ISR)
			}
		}
	case UncleanElection:
		if st.Leader >= 0 {
			return st, fmt.Errorf("%w: %s-%d is led by %d", ErrElectionNotNeeded, st.Topic, st.Partition, st.Leader)
		}
		leader, clean := ElectLeader(st.Replicas, st.ISR, eligible, true, nil)
		if leader < 0 {
			return st, fmt.Errorf("%w: %s-%d: none of replicas %v is eligible", ErrEligibleLeadersNotAvailable, st.Topic, st.Partition, st.Replicas)
		}
		next.Leader = leader
		if !clean {
			next.ISR = []int32{leader}
		}
	default:
		return st, fmt.Errorf("%w: election type %d", ErrInvalidConfig, typ)
	}
	return advance(st, next), nil
}

// DecideAlterPartition is CheckAlterPartition followed by what the new ISR
// allows: it completes the partition's reassignment when every replica it
// adds is now in sync (CompleteReassignment), in the same change. If that
// moves the leadership away from the leader that asked, the controller
// commits the change and answers ErrNewLeaderElected (Kafka's
// NEW_LEADER_ELECTED): the old leader learns its new role from the
// metadata.
func DecideAlterPartition(st PartitionState, req AlterPartitionRequest, ineligible IneligibleMember, eligible Eligible) (PartitionState, error) {
	next, err := CheckAlterPartition(st, req, ineligible)
	if err != nil {
		return next, err
	}
	if done, ok := completeReassignment(next, eligible); ok {
		return advance(st, done), nil
	}
	return next, nil
}
