package replica

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ps is a partition state of topic t, partition 0, for the tables.
func ps(replicas []int32, leader, leaderEpoch int32, isr []int32, partitionEpoch int32, adding, removing []int32) PartitionState {
	return PartitionState{Topic: "t", Replicas: replicas, Leader: leader, LeaderEpoch: leaderEpoch, ISR: isr,
		PartitionEpoch: partitionEpoch, AddingReplicas: adding, RemovingReplicas: removing}
}

func ids(v ...int32) []int32 { return v }

func TestReassign(t *testing.T) {
	registered := func(id int32) bool { return id >= 1 && id <= 5 }
	base := ps(ids(1, 2, 3), 1, 4, ids(1, 2, 3), 9, nil, nil)
	moving := ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 3), 10, ids(4), ids(3))
	cases := []struct {
		name     string
		st       PartitionState
		target   []int32
		keepRF   bool
		eligible Eligible
		want     PartitionState
		changed  bool
		err      error
	}{
		{name: "replace a follower: the new one is added, the old one stays until it completes",
			st: base, target: ids(1, 2, 4), eligible: eligibleSet(1, 2, 3, 4),
			want: moving, changed: true},
		{name: "replace the leader: it keeps leading while the new replica catches up",
			st: base, target: ids(4, 2, 3), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(4, 2, 3, 1), 1, 4, ids(1, 2, 3), 10, ids(4), ids(1)), changed: true},
		{name: "only removing: completes at once, the removed replica is fenced by a new leader epoch",
			st: base, target: ids(1, 2), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(1, 2), 1, 5, ids(1, 2), 10, nil, nil), changed: true},
		{name: "only removing the leader: completes at once, the next target replica in sync leads",
			st: base, target: ids(3, 2), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(3, 2), 3, 5, ids(2, 3), 10, nil, nil), changed: true},
		{name: "only removing, but no other replica is in sync: waits",
			st: ps(ids(1, 2, 3), 3, 4, ids(3), 9, nil, nil), target: ids(1, 2), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(1, 2, 3), 3, 4, ids(3), 10, nil, ids(3)), changed: true},
		{name: "reordering: the replicas change, the leader stays (a preferred election moves it)",
			st: base, target: ids(3, 2, 1), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(3, 2, 1), 1, 4, ids(1, 2, 3), 10, nil, nil), changed: true},
		{name: "the current replicas: nothing to do",
			st: base, target: ids(1, 2, 3), eligible: eligibleSet(1, 2, 3), want: base},
		{name: "the target under way again: nothing to do",
			st: moving, target: ids(1, 2, 4), eligible: eligibleSet(1, 2, 3, 4), want: moving},
		{name: "a new target replaces one under way: what it was adding counts as current",
			st: moving, target: ids(1, 2, 5), eligible: eligibleSet(1, 2, 3, 4, 5),
			want: ps(ids(1, 2, 5, 4, 3), 1, 4, ids(1, 2, 3), 11, ids(5), ids(4, 3)), changed: true},
		{name: "a new target that keeps a replica being added: it is added still, not current",
			st: moving, target: ids(1, 2, 4, 5), eligible: eligibleSet(1, 2, 3, 4, 5),
			want: ps(ids(1, 2, 4, 5, 3), 1, 4, ids(1, 2, 3), 11, ids(4, 5), ids(3)), changed: true},
		{name: "back to the original replicas while moving: the added replica leaves at once",
			st: moving, target: ids(1, 2, 3), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(1, 2, 3), 1, 5, ids(1, 2, 3), 11, nil, nil), changed: true},
		{name: "growing the replication factor", st: base, target: ids(1, 2, 3, 4), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(1, 2, 3, 4), 1, 4, ids(1, 2, 3), 10, ids(4), nil), changed: true},
		{name: "empty target", st: base, target: ids(), eligible: eligibleSet(1, 2, 3), want: base, err: ErrInvalidReplicaAssignment},
		{name: "a broker twice", st: base, target: ids(1, 2, 2), eligible: eligibleSet(1, 2, 3), want: base, err: ErrInvalidReplicaAssignment},
		{name: "an unregistered broker", st: base, target: ids(1, 2, 9), eligible: eligibleSet(1, 2, 3), want: base, err: ErrInvalidReplicaAssignment},
		{name: "a negative broker id", st: base, target: ids(1, -1), eligible: eligibleSet(1, 2, 3), want: base, err: ErrInvalidReplicaAssignment},
		{name: "replication factor kept when asked (KIP-860): 3 to 2 refused", st: base, target: ids(1, 2), keepRF: true,
			eligible: eligibleSet(1, 2, 3), want: base, err: ErrReplicationFactorChange},
		{name: "replication factor kept when asked: what is being added does not count", st: moving, target: ids(5, 2, 1), keepRF: true,
			eligible: eligibleSet(1, 2, 3, 4, 5), want: ps(ids(5, 2, 1, 4, 3), 1, 4, ids(1, 2, 3), 11, ids(5), ids(4, 3)), changed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.st.Clone()
			got, changed, err := Reassign(c.st, c.target, !c.keepRF, registered, c.eligible)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.want, got)
			require.Equal(t, c.changed, changed)
			require.Equal(t, before, c.st, "the state given is not modified")
		})
	}
}

func TestCompleteReassignment(t *testing.T) {
	cases := []struct {
		name     string
		st       PartitionState
		eligible Eligible
		want     PartitionState
		ok       bool
	}{
		{name: "no reassignment", st: ps(ids(1, 2, 3), 1, 4, ids(1, 2, 3), 9, nil, nil), eligible: eligibleSet(1, 2, 3)},
		{name: "the added replica is not in sync yet",
			st: ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 3), 10, ids(4), ids(3)), eligible: eligibleSet(1, 2, 3, 4)},
		{name: "one of two added replicas in sync: not yet",
			st: ps(ids(4, 5, 1, 2), 1, 4, ids(1, 2, 4), 10, ids(4, 5), ids(1, 2)), eligible: eligibleSet(1, 2, 4, 5)},
		{name: "in sync: the target in its order, the removed replica out, a new leader epoch",
			st: ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 3, 4), 11, ids(4), ids(3)), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(1, 2, 4), 1, 5, ids(1, 2, 4), 12, nil, nil), ok: true},
		{name: "the leader is removed: the first target replica in sync and eligible leads",
			st: ps(ids(4, 2, 3, 1), 1, 4, ids(1, 2, 3, 4), 11, ids(4), ids(1)), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(4, 2, 3), 4, 5, ids(2, 3, 4), 12, nil, nil), ok: true},
		{name: "the leader is removed and the first target replica is fenced: the next one leads",
			st: ps(ids(4, 2, 3, 1), 1, 4, ids(1, 2, 3, 4), 11, ids(4), ids(1)), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(4, 2, 3), 2, 5, ids(2, 3, 4), 12, nil, nil), ok: true},
		{name: "the leader is removed and no target replica could lead: waits",
			st: ps(ids(4, 1), 1, 4, ids(1, 4), 11, ids(4), ids(1)), eligible: eligibleSet(1)},
		{name: "only adding: same replicas, same leader epoch",
			st: ps(ids(1, 2, 3, 4), 1, 4, ids(1, 2, 3, 4), 11, ids(4), nil), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(1, 2, 3, 4), 1, 4, ids(1, 2, 3, 4), 12, nil, nil), ok: true},
		{name: "only the removed replicas are in sync: waits",
			st: ps(ids(1, 2, 3), 3, 4, ids(3), 10, nil, ids(3)), eligible: eligibleSet(1, 2, 3)},
		{name: "only removing, another replica back in sync: completes",
			st: ps(ids(1, 2, 3), 3, 4, ids(3, 1), 11, nil, ids(3)), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(1, 2), 1, 5, ids(1), 12, nil, nil), ok: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.st.Clone()
			got, ok := CompleteReassignment(c.st, c.eligible)
			require.Equal(t, c.ok, ok)
			if !c.ok {
				c.want = c.st
			}
			require.Equal(t, c.want, got)
			require.Equal(t, before, c.st, "the state given is not modified")
		})
	}
}

func TestCancelReassignment(t *testing.T) {
	cases := []struct {
		name     string
		st       PartitionState
		unclean  bool
		eligible Eligible
		want     PartitionState
		err      error
	}{
		{name: "nothing to cancel", st: ps(ids(1, 2, 3), 1, 4, ids(1, 2, 3), 9, nil, nil), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(1, 2, 3), 1, 4, ids(1, 2, 3), 9, nil, nil), err: ErrNoReassignmentInProgress},
		{name: "the added replica leaves (new leader epoch), the removed one stays",
			st: ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 3, 4), 11, ids(4), ids(3)), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(1, 2, 3), 1, 5, ids(1, 2, 3), 12, nil, nil)},
		{name: "an added replica led: the first original one in sync leads",
			st: ps(ids(4, 2, 3, 1), 4, 6, ids(1, 2, 4), 11, ids(4), ids(1)), eligible: eligibleSet(1, 2, 3, 4),
			want: ps(ids(2, 3, 1), 2, 7, ids(1, 2), 12, nil, nil)},
		{name: "only added replicas in sync, unclean election off: refused",
			st: ps(ids(4, 1), 4, 6, ids(4), 11, ids(4), ids(1)), eligible: eligibleSet(1, 4),
			want: ps(ids(4, 1), 4, 6, ids(4), 11, ids(4), ids(1)), err: ErrInvalidReplicaAssignment},
		{name: "only added replicas in sync, unclean election on: the first original replica leads alone",
			st: ps(ids(4, 1, 2), 4, 6, ids(4), 11, ids(4), ids(1, 2)), unclean: true, eligible: eligibleSet(1, 2, 4),
			want: ps(ids(1, 2), 1, 7, ids(1), 12, nil, nil)},
		{name: "unclean, the first original replica fenced: the next eligible one leads alone",
			st: ps(ids(4, 1, 2), 4, 6, ids(4), 11, ids(4), ids(1, 2)), unclean: true, eligible: eligibleSet(2, 4),
			want: ps(ids(1, 2), 2, 7, ids(2), 12, nil, nil)},
		{name: "the original replicas all fenced: offline, ISR kept",
			st: ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 4), 11, ids(4), ids(3)), eligible: eligibleSet(4),
			want: ps(ids(1, 2, 3), -1, 5, ids(1, 2), 12, nil, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.st.Clone()
			got, err := CancelReassignment(c.st, c.unclean, c.eligible)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.want, got)
			require.Equal(t, before, c.st, "the state given is not modified")
		})
	}
}

func TestDecideElection(t *testing.T) {
	cases := []struct {
		name     string
		st       PartitionState
		typ      ElectionType
		eligible Eligible
		want     PartitionState
		err      error
	}{
		{name: "preferred leads already", st: ps(ids(1, 2, 3), 1, 4, ids(1, 2, 3), 9, nil, nil), eligible: eligibleSet(1, 2, 3),
			err: ErrElectionNotNeeded},
		{name: "preferred in sync: it leads, new leader epoch", st: ps(ids(1, 2, 3), 2, 4, ids(1, 2, 3), 9, nil, nil), eligible: eligibleSet(1, 2, 3),
			want: ps(ids(1, 2, 3), 1, 5, ids(1, 2, 3), 10, nil, nil)},
		{name: "preferred out of sync, leader fine", st: ps(ids(1, 2, 3), 2, 4, ids(2, 3), 9, nil, nil), eligible: eligibleSet(1, 2, 3),
			err: ErrPreferredLeaderNotAvailable},
		{name: "preferred fenced, leader fine", st: ps(ids(1, 2, 3), 2, 4, ids(1, 2, 3), 9, nil, nil), eligible: eligibleSet(2, 3),
			err: ErrPreferredLeaderNotAvailable},
		{name: "preferred fenced, no leader: the next in sync leads", st: ps(ids(1, 2, 3), -1, 4, ids(1, 3), 9, nil, nil), eligible: eligibleSet(2, 3),
			want: ps(ids(1, 2, 3), 3, 5, ids(1, 3), 10, nil, nil)},
		{name: "nobody in sync can lead", st: ps(ids(1, 2, 3), -1, 4, ids(1), 9, nil, nil), eligible: eligibleSet(2, 3),
			err: ErrPreferredLeaderNotAvailable},
		{name: "unclean with a leader: not needed", st: ps(ids(1, 2, 3), 2, 4, ids(2), 9, nil, nil), typ: UncleanElection, eligible: eligibleSet(1, 2, 3),
			err: ErrElectionNotNeeded},
		{name: "unclean, an in-sync replica is eligible: a clean election", st: ps(ids(1, 2, 3), -1, 4, ids(1, 3), 9, nil, nil), typ: UncleanElection,
			eligible: eligibleSet(2, 3), want: ps(ids(1, 2, 3), 3, 5, ids(1, 3), 10, nil, nil)},
		{name: "unclean: the first eligible replica leads alone", st: ps(ids(1, 2, 3), -1, 4, ids(1), 9, nil, nil), typ: UncleanElection,
			eligible: eligibleSet(2, 3), want: ps(ids(1, 2, 3), 2, 5, ids(2), 10, nil, nil)},
		{name: "unclean, nobody eligible", st: ps(ids(1, 2, 3), -1, 4, ids(1), 9, nil, nil), typ: UncleanElection, eligible: eligibleSet(),
			err: ErrEligibleLeadersNotAvailable},
		{name: "an unknown type", st: ps(ids(1, 2, 3), 2, 4, ids(1, 2, 3), 9, nil, nil), typ: 7, eligible: eligibleSet(1, 2, 3),
			err: ErrInvalidConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.st.Clone()
			got, err := DecideElection(c.st, c.typ, c.eligible)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				c.want = c.st
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.want, got)
			require.Equal(t, before, c.st, "the state given is not modified")
		})
	}
}

func TestDecideAlterPartitionCompletesReassignments(t *testing.T) {
	ineligible := func(int32, int64) bool { return false }
	all := eligibleSet(1, 2, 3, 4, 5)
	req := func(st PartitionState, isr ...int32) AlterPartitionRequest {
		return AlterPartitionRequest{Topic: "t", Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch, ISR: isr}
	}

	// The added replica joins the ISR: the reassignment completes in the
	// same change; the leader stays, the removed replica goes.
	st := ps(ids(1, 2, 4, 3), 1, 4, ids(1, 2, 3), 10, ids(4), ids(3))
	next, err := DecideAlterPartition(st, req(st, 1, 2, 3, 4), ineligible, all)
	require.NoError(t, err)
	require.Equal(t, ps(ids(1, 2, 4), 1, 5, ids(1, 2, 4), 11, nil, nil), next)

	// The leader is the replica removed: the change moves the leadership
	// (the controller answers NEW_LEADER_ELECTED).
	st = ps(ids(4, 2, 3, 1), 1, 4, ids(1, 2, 3), 10, ids(4), ids(1))
	next, err = DecideAlterPartition(st, req(st, 1, 2, 3, 4), ineligible, all)
	require.NoError(t, err)
	require.Equal(t, ps(ids(4, 2, 3), 4, 5, ids(2, 3, 4), 11, nil, nil), next)

	// One of two added replicas joins: only the ISR changes.
	st = ps(ids(4, 5, 1), 1, 4, ids(1), 10, ids(4, 5), ids(1))
	next, err = DecideAlterPartition(st, req(st, 1, 4), ineligible, all)
	require.NoError(t, err)
	require.Equal(t, ps(ids(4, 5, 1), 1, 4, ids(1, 4), 11, ids(4, 5), ids(1)), next)

	// A stale request changes nothing.
	bad := req(st, 1, 4)
	bad.PartitionEpoch--
	got, err := DecideAlterPartition(st, bad, ineligible, all)
	require.True(t, errors.Is(err, ErrStaleState), "%v", err)
	require.Equal(t, st, got)
}

// TestLeaderTracksReplicasAReassignmentAdds: a replica added within the
// leader epoch is tracked from its first fetch, holds the high watermark
// back only once caught up, and joins the ISR once it reaches it.
func TestLeaderTracksReplicasAReassignmentAdds(t *testing.T) {
	lag := 10 * time.Second
	st := state3()
	l := NewLeader(1, st, LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: lag}, 100, 100, t0)
	next := st.Clone()
	next.Replicas, next.AddingReplicas, next.RemovingReplicas = ids(1, 2, 4, 3), ids(4), ids(3)
	next.PartitionEpoch++
	require.True(t, l.Apply(next))

	l.Fetch(2, 1, 100, 100, t0)
	l.Fetch(3, 1, 100, 100, t0)
	_, ok := l.ProposeISR(t0)
	require.False(t, ok, "nothing to change before the new replica fetches")
	_, known := l.Progress(4)
	require.True(t, known, "the added replica is tracked")

	l.Fetch(4, 7, 40, 100, t0)
	p, _ := l.Progress(4)
	require.Equal(t, int64(40), p.LogEnd)
	require.Equal(t, int64(100), l.HighWatermark(), "a replica catching up does not hold the high watermark back")
	_, ok = l.ProposeISR(t0)
	require.False(t, ok, "not caught up yet")

	l.Fetch(4, 7, 100, 100, t0.Add(time.Second))
	isr, ok := l.ProposeISR(t0.Add(time.Second))
	require.True(t, ok)
	require.True(t, slices.Contains(isr, 4), "caught up: it joins the ISR (%v)", isr)

	// A state in which it left again (the controller cancelled) stops its
	// tracking.
	l.Abort()
	gone := next.Clone()
	gone.Replicas, gone.AddingReplicas, gone.RemovingReplicas = ids(1, 2, 3), nil, nil
	gone.PartitionEpoch++
	require.True(t, l.Apply(gone))
	_, known = l.Progress(4)
	require.False(t, known)
}

// TestLeaderAnswerKeepsACommittedProposalCounted: the controller's answer
// to an ISR expansion that completed a reassignment (NEW_LEADER_ELECTED, or
// success in a new leader epoch) or found the proposal stale leaves the
// proposal counted for the high watermark until the new state arrives: the
// member it adds may be in the committed ISR, and lead next, without the
// records past its log end. Refusals and lost answers forget it.
func TestLeaderAnswerKeepsACommittedProposalCounted(t *testing.T) {
	// The new member then stops fetching for longer than the lag time: only
	// a proposal still counted holds the high watermark at its log end.
	lag := 500 * time.Millisecond
	moving := PartitionState{Topic: "t", Replicas: ids(1, 2, 4, 3), Leader: 1, LeaderEpoch: 5, ISR: ids(1, 2, 3), PartitionEpoch: 10,
		AddingReplicas: ids(4), RemovingReplicas: ids(3)}
	completed := PartitionState{Topic: "t", Replicas: ids(1, 2, 4), Leader: 1, LeaderEpoch: 6, ISR: ids(1, 2, 4), PartitionEpoch: 11}
	moved := completed.Clone()
	moved.Leader = 4
	expanded := moving.Clone()
	expanded.ISR, expanded.PartitionEpoch = ids(1, 2, 3, 4), 11
	for _, c := range []struct {
		name   string
		next   PartitionState
		err    error
		want   ISRAnswer
		wantHW int64
	}{
		{"NEW_LEADER_ELECTED", PartitionState{}, fmt.Errorf("remote: %w", ErrNewLeaderElected), ISRWaiting, 150},
		{"committed in a new leader epoch", completed, nil, ISRWaiting, 150},
		{"committed with another leader", moved, nil, ISRWaiting, 150},
		{"stale proposal", moving, ErrStaleState, ISRWaiting, 150},
		{"applied in this epoch", expanded, nil, ISRApplied, 150},
		{"refused: ineligible", moving, ErrIneligibleReplica, ISRAborted, 200},
		{"no answer", PartitionState{}, ErrUnreachable, ISRAborted, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLeader(1, moving, LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: lag}, 150, 150, t0)
			l.Fetch(2, 1, 150, 150, t0)
			l.Fetch(3, 1, 150, 150, t0)
			l.Fetch(4, 1, 150, 150, t0) // caught up: it joins
			isr, ok := l.ProposeISR(t0)
			require.True(t, ok)
			require.ElementsMatch(t, ids(1, 2, 3, 4), isr)

			got := l.Answer(c.next, c.err)
			require.Equal(t, c.want, got)
			// The leader's log grows to 200 and the old ISR has it all;
			// the new member has not fetched since.
			l.Fetch(2, 1, 200, 200, t0.Add(time.Second))
			l.Fetch(3, 1, 200, 200, t0.Add(time.Second))
			l.Advance(200, t0.Add(time.Second))
			require.Equal(t, c.wantHW, l.HighWatermark())
			if c.want == ISRWaiting {
				require.ElementsMatch(t, isr, l.Pending(), "the proposal stays in flight")
				_, again := l.ProposeISR(t0.Add(time.Second))
				require.False(t, again, "no other proposal meanwhile")
			} else {
				require.Nil(t, l.Pending())
			}
		})
	}
}
