package replica

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func eligibleSet(ids ...int32) Eligible {
	return func(id int32) bool { return slices.Contains(ids, id) }
}

func TestReconcile(t *testing.T) {
	base := PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}, PartitionEpoch: 9}
	cases := []struct {
		name     string
		st       PartitionState
		eligible Eligible
		unclean  bool
		ends     LogEnds
		want     ReconcileResult
	}{
		{name: "all eligible: nothing to do", st: base, eligible: eligibleSet(1, 2, 3),
			want: ReconcileResult{State: base}},
		{name: "follower fenced: leaves the ISR, same leader epoch", st: base, eligible: eligibleSet(1, 2),
			want: ReconcileResult{Changed: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2}, PartitionEpoch: 10}}},
		{name: "leader fenced: next ISR member in replica order leads, new leader epoch", st: base, eligible: eligibleSet(2, 3),
			want: ReconcileResult{Changed: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 5, ISR: []int32{2, 3}, PartitionEpoch: 10}}},
		{name: "whole ISR fenced: offline, last members keep their ISR place", st: base, eligible: eligibleSet(),
			want: ReconcileResult{Changed: true, Offline: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1, 2, 3}, PartitionEpoch: 10}}},
		{name: "offline and still no one: no change",
			st:       PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1}, PartitionEpoch: 10},
			eligible: eligibleSet(2, 3),
			want:     ReconcileResult{Offline: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1}, PartitionEpoch: 10}}},
		{name: "last ISR member returns: it leads again",
			st:       PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1}, PartitionEpoch: 10},
			eligible: eligibleSet(1, 2, 3),
			want:     ReconcileResult{Changed: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 6, ISR: []int32{1}, PartitionEpoch: 11}}},
		{name: "unclean: most up-to-date eligible replica, ISR just itself",
			st:       PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1}, PartitionEpoch: 10},
			eligible: eligibleSet(2, 3), unclean: true,
			ends: func(id int32) (int32, int64, bool) { return 4, int64(id) * 10, true },
			want: ReconcileResult{Changed: true, Unclean: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 3, LeaderEpoch: 6, ISR: []int32{3}, PartitionEpoch: 11}}},
		{name: "unclean without log ends: first eligible replica",
			st:       PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: -1, LeaderEpoch: 5, ISR: []int32{1}, PartitionEpoch: 10},
			eligible: eligibleSet(2, 3), unclean: true,
			want: ReconcileResult{Changed: true, Unclean: true, State: PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 6, ISR: []int32{2}, PartitionEpoch: 11}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.st.Clone()
			got := Reconcile(c.st, c.eligible, c.unclean, c.ends)
			require.Equal(t, c.want, got)
			require.Equal(t, before, c.st, "the state given is not modified")
		})
	}
}

func TestElectPreferred(t *testing.T) {
	st := PartitionState{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 3, ISR: []int32{1, 2, 3}, PartitionEpoch: 7}
	next, ok := ElectPreferred(st, eligibleSet(1, 2, 3))
	require.True(t, ok)
	require.Equal(t, int32(1), next.Leader)
	require.Equal(t, int32(4), next.LeaderEpoch)
	require.Equal(t, int32(8), next.PartitionEpoch)

	_, ok = ElectPreferred(st, eligibleSet(2, 3))
	require.False(t, ok, "preferred replica not eligible")
	notInISR := st.Clone()
	notInISR.ISR = []int32{2, 3}
	_, ok = ElectPreferred(notInISR, eligibleSet(1, 2, 3))
	require.False(t, ok, "preferred replica out of sync")
	_, ok = ElectPreferred(next, eligibleSet(1, 2, 3))
	require.False(t, ok, "already leading")
}

func TestCheckAlterPartition(t *testing.T) {
	st := PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 3, ISR: []int32{1, 2}, PartitionEpoch: 7}
	req := func(isr []int32, mod func(*AlterPartitionRequest)) AlterPartitionRequest {
		r := AlterPartitionRequest{Topic: "t", Leader: 1, LeaderEpoch: 3, PartitionEpoch: 7, ISR: isr, BrokerEpochs: map[int32]int64{1: 10, 2: 20, 3: 30}}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	epochs := map[int32]int64{1: 10, 2: 20, 3: 30}
	ineligible := func(id int32, seen int64) bool { return epochs[id] != seen }

	next, err := CheckAlterPartition(st, req([]int32{1, 2, 3}, nil), ineligible)
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 3}, next.ISR)
	require.Equal(t, int32(8), next.PartitionEpoch)
	require.Equal(t, int32(3), next.LeaderEpoch, "an ISR change keeps the leader epoch")

	next, err = CheckAlterPartition(st, req([]int32{1}, nil), ineligible)
	require.NoError(t, err, "shrinking needs no eligibility")
	require.Equal(t, []int32{1}, next.ISR)

	for _, c := range []struct {
		name string
		r    AlterPartitionRequest
		want error
	}{
		{"older partition epoch", req([]int32{1}, func(r *AlterPartitionRequest) { r.PartitionEpoch = 6 }), ErrStaleState},
		{"older leader epoch", req([]int32{1}, func(r *AlterPartitionRequest) { r.LeaderEpoch = 2 }), ErrStaleState},
		{"not the leader", req([]int32{2}, func(r *AlterPartitionRequest) { r.Leader = 2 }), ErrStaleState},
		{"ISR without the leader", req([]int32{2}, nil), ErrInvalidConfig},
		{"member twice", req([]int32{1, 2, 2}, nil), ErrInvalidConfig},
		{"not a replica", req([]int32{1, 4}, nil), ErrInvalidConfig},
		{"restarted broker (KIP-903)", req([]int32{1, 2, 3}, func(r *AlterPartitionRequest) { r.BrokerEpochs[3] = 29 }), ErrIneligibleReplica},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CheckAlterPartition(st, c.r, ineligible)
			require.True(t, errors.Is(err, c.want), "got %v, want %v", err, c.want)
			require.Equal(t, st, got, "a refused change returns the current state")
		})
	}
}
