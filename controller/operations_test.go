package controller

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

// opsCluster is a one-voter quorum with brokers 1..n registered and
// heartbeating (skip stops some), and a topic "t" of one partition with
// replication factor 3.
func opsCluster(t *testing.T, n int32) (q *Quorum, epochs map[int32]int64, skip *atomic.Int32) {
	c := newCluster(t, 1)
	c.startAll()
	q = c.active()
	var brokers []int32
	for id := int32(1); id <= n; id++ {
		brokers = append(brokers, id)
	}
	epochs = registerAll(t, q, brokers...)
	skip = new(atomic.Int32)
	skip.Store(-1)
	stop := beat(func() *Quorum { return q }, epochs, func(id int32) bool { return id == skip.Load() })
	t.Cleanup(stop)
	_, err := q.CreateTopic(context.Background(), TopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3})
	require.NoError(t, err)
	return q, epochs, skip
}

// isr asks, as the partition's leader, for an ISR.
func isr(q *Quorum, epochs map[int32]int64, members ...int32) (replica.PartitionState, error) {
	st, _ := q.Image().Partition("t", 0)
	return q.AlterPartition(context.Background(), replica.AlterPartitionRequest{Topic: "t", Partition: 0, Leader: st.Leader,
		LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch, ISR: members, BrokerEpochs: epochs})
}

func others(all []int32, not ...int32) []int32 {
	var out []int32
	for _, x := range all {
		keep := true
		for _, n := range not {
			keep = keep && x != n
		}
		if keep {
			out = append(out, x)
		}
	}
	return out
}

func TestQuorumReassignsAPartition(t *testing.T) {
	q, epochs, _ := opsCluster(t, 4)
	ctx := context.Background()
	st, _ := q.Image().Partition("t", 0)
	spare := others([]int32{1, 2, 3, 4}, st.Replicas...)[0]
	follower := st.Replicas[2]
	target := []int32{st.Replicas[0], st.Replicas[1], spare}

	errs, err := q.AlterPartitionReassignments(ctx, []Reassignment{
		{Topic: "t", Partition: 0, Replicas: target},
		{Topic: "t", Partition: 5, Replicas: target},
		{Topic: "nope", Partition: 0, Replicas: target},
		{Topic: "t", Partition: 0, Replicas: []int32{1, 9}},
	}, true)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], replica.ErrUnknownPartition)
	require.ErrorIs(t, errs[2], replica.ErrUnknownTopic)
	require.ErrorIs(t, errs[3], replica.ErrInvalidReplicaAssignment)
	moving, _ := q.Image().Partition("t", 0)
	require.Equal(t, append(append([]int32{}, target...), follower), moving.Replicas)
	require.Equal(t, []int32{spare}, moving.AddingReplicas)
	require.Equal(t, []int32{follower}, moving.RemovingReplicas)
	require.Equal(t, st.LeaderEpoch, moving.LeaderEpoch, "nothing removed yet: same leader epoch")
	require.Equal(t, []OngoingReassignment{{Topic: "t", Partition: 0, Replicas: moving.Replicas, Adding: moving.AddingReplicas, Removing: moving.RemovingReplicas}},
		q.ListPartitionReassignments(nil))
	require.Equal(t, q.ListPartitionReassignments(nil), q.ListPartitionReassignments([]TopicPartition{{"t", 0}, {"t", 0}, {"t", 7}, {"x", 0}}))

	// A broker added to the topic's partitions meanwhile counts the
	// original replicas only.
	require.NoError(t, q.CreatePartitions(ctx, "t", 2))
	p1, _ := q.Image().Partition("t", 1)
	require.Len(t, p1.Replicas, 3, "a new partition gets the replication factor, not the reassignment's replica count")

	// The leader adds the new replica to the ISR: the reassignment
	// completes in the same change, the old follower leaves, and the leader
	// epoch moves so that it is fenced.
	next, err := isr(q, epochs, append(append([]int32{}, st.ISR...), spare)...)
	require.NoError(t, err, "the leader stays: no NEW_LEADER_ELECTED")
	require.Equal(t, target, next.Replicas)
	require.ElementsMatch(t, target, next.ISR)
	require.False(t, next.Reassigning())
	require.Equal(t, st.Leader, next.Leader)
	require.Equal(t, st.LeaderEpoch+1, next.LeaderEpoch)
	got, _ := q.Image().Partition("t", 0)
	require.Equal(t, next, got)
	require.Empty(t, q.ListPartitionReassignments(nil))
}

func TestQuorumReassignmentMovesTheLeader(t *testing.T) {
	q, epochs, _ := opsCluster(t, 4)
	ctx := context.Background()
	st, _ := q.Image().Partition("t", 0)
	spare := others([]int32{1, 2, 3, 4}, st.Replicas...)[0]
	target := []int32{spare, st.Replicas[1], st.Replicas[2]}
	errs, err := q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0, Replicas: target}}, false)
	require.NoError(t, err)
	require.NoError(t, errs[0])

	// The leader's own ISR change completes the reassignment that removes
	// it: committed, and answered NEW_LEADER_ELECTED.
	_, err = isr(q, epochs, append(append([]int32{}, st.ISR...), spare)...)
	require.ErrorIs(t, err, replica.ErrNewLeaderElected)
	got, _ := q.Image().Partition("t", 0)
	require.Equal(t, target, got.Replicas)
	require.Equal(t, spare, got.Leader, "the first target replica in sync leads")
	require.Equal(t, st.LeaderEpoch+1, got.LeaderEpoch)
	require.False(t, got.InISR(st.Leader))

	// A preferred election has nothing to do; an unclean one neither.
	res, err := q.ElectLeaders(ctx, replica.PreferredElection, []TopicPartition{{"t", 0}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, replica.ErrElectionNotNeeded)
	res, err = q.ElectLeaders(ctx, replica.UncleanElection, []TopicPartition{{"t", 0}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, replica.ErrElectionNotNeeded)

	// KIP-860: a request that keeps the replication factor refuses one
	// that changes it.
	errs, err = q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0, Replicas: target[:2]}}, false)
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], replica.ErrReplicationFactorChange)
}

func TestQuorumCancelsAReassignment(t *testing.T) {
	q, epochs, _ := opsCluster(t, 5)
	ctx := context.Background()
	st, _ := q.Image().Partition("t", 0)
	spares := others([]int32{1, 2, 3, 4, 5}, st.Replicas...)
	target := []int32{spares[0], spares[1], st.Replicas[0]}
	errs, err := q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0, Replicas: target}}, true)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	// One of the two new replicas joins the ISR: not complete yet.
	next, err := isr(q, epochs, append(append([]int32{}, st.ISR...), spares[0])...)
	require.NoError(t, err)
	require.True(t, next.Reassigning())

	errs, err = q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0}}, true)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	got, _ := q.Image().Partition("t", 0)
	require.ElementsMatch(t, st.Replicas, got.Replicas)
	require.ElementsMatch(t, st.ISR, got.ISR, "the added replica leaves the ISR")
	require.False(t, got.Reassigning())
	require.Equal(t, st.Leader, got.Leader)
	require.Equal(t, next.LeaderEpoch+1, got.LeaderEpoch, "replicas left: a new leader epoch")

	errs, err = q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0}}, true)
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], replica.ErrNoReassignmentInProgress)
	after, _ := q.Image().Partition("t", 0)
	require.Equal(t, got, after, "a refused cancellation changes nothing")
}

// TestQuorumCompletesReassignmentsPeriodically: a reassignment whose added
// replicas are in sync completes even when no ISR change of the leader's
// triggers it.
func TestQuorumCompletesReassignmentsPeriodically(t *testing.T) {
	q, _, _ := opsCluster(t, 4)
	st, _ := q.Image().Partition("t", 0)
	spare := others([]int32{1, 2, 3, 4}, st.Replicas...)[0]
	// Committed by a controller that did not check (as one might have
	// before a failover): the added replica is in the ISR already.
	stuck := st.Clone()
	stuck.Replicas = []int32{st.Replicas[0], st.Replicas[1], spare, st.Replicas[2]}
	stuck.AddingReplicas, stuck.RemovingReplicas = []int32{spare}, []int32{st.Replicas[2]}
	stuck.ISR = append(stuck.ISR, spare)
	stuck.PartitionEpoch++
	tp, _ := q.Image().Topic("t")
	q.opMu.Lock()
	_, _, err := q.applyLocked(partitionRecord(tp.ID, stuck))
	q.opMu.Unlock()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, _ := q.Image().Partition("t", 0)
		return !got.Reassigning() && len(got.Replicas) == 3 && got.HasReplica(spare)
	}, 10*time.Second, 10*time.Millisecond)
}

func TestQuorumElectsPreferredLeaders(t *testing.T) {
	q, epochs, skip := opsCluster(t, 3)
	ctx := context.Background()
	st, _ := q.Image().Partition("t", 0)
	pref := st.Replicas[0]
	require.Equal(t, pref, st.Leader)

	// The preferred leader's broker goes silent: fenced, the leadership
	// moves; it returns and rejoins the ISR, but does not lead again by
	// itself.
	skip.Store(pref)
	require.Eventually(t, func() bool {
		b, _ := q.Image().Broker(pref)
		return b.Fenced
	}, 5*time.Second, 10*time.Millisecond)
	skip.Store(-1)
	require.Eventually(t, func() bool {
		b, _ := q.Image().Broker(pref)
		return !b.Fenced
	}, 5*time.Second, 10*time.Millisecond)
	moved, _ := q.Image().Partition("t", 0)
	require.NotEqual(t, pref, moved.Leader)

	res, err := q.ElectLeaders(ctx, replica.PreferredElection, []TopicPartition{{"t", 0}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, replica.ErrPreferredLeaderNotAvailable, "out of sync: it may not lead")
	_, err = isr(q, epochs, append(append([]int32{}, moved.ISR...), pref)...)
	require.NoError(t, err)

	res, err = q.ElectLeaders(ctx, replica.PreferredElection, nil)
	require.NoError(t, err)
	require.Equal(t, []ElectionResult{{Topic: "t", Partition: 0}}, res)
	got, _ := q.Image().Partition("t", 0)
	require.Equal(t, pref, got.Leader)
	require.Greater(t, got.LeaderEpoch, moved.LeaderEpoch)

	res, err = q.ElectLeaders(ctx, replica.PreferredElection, nil)
	require.NoError(t, err)
	require.Empty(t, res, "electing for every partition leaves out those that need none")
	res, err = q.ElectLeaders(ctx, replica.PreferredElection, []TopicPartition{{"t", 0}, {"t", 3}, {"x", 0}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, replica.ErrElectionNotNeeded)
	require.ErrorIs(t, res[1].Err, replica.ErrUnknownPartition)
	require.ErrorIs(t, res[2].Err, replica.ErrUnknownTopic)
	_, err = q.ElectLeaders(ctx, 5, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestQuorumUnregistersADecommissionedBroker(t *testing.T) {
	q, _, skip := opsCluster(t, 4)
	ctx := context.Background()
	st, _ := q.Image().Partition("t", 0)
	spare := others([]int32{1, 2, 3, 4}, st.Replicas...)[0]
	leaving := st.Replicas[2]

	require.ErrorIs(t, q.UnregisterBroker(ctx, 9), ErrBrokerNotRegistered)
	err := q.UnregisterBroker(ctx, leaving)
	require.ErrorIs(t, err, ErrBrokerHoldsReplicas)
	require.Contains(t, err.Error(), "t-0")
	require.ErrorIs(t, q.UnregisterBroker(ctx, spare), ErrBrokerAlive, "a running broker would register again")

	// Its replica moves to the spare broker, and it stops.
	errs, err := q.AlterPartitionReassignments(ctx, []Reassignment{{Topic: "t", Partition: 0, Replicas: []int32{st.Replicas[0], st.Replicas[1], spare}}}, true)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, q.UnregisterBroker(ctx, leaving), ErrBrokerHoldsReplicas, "it holds the replica until the reassignment completes")
	cur, _ := q.Image().Partition("t", 0)
	_, err = q.AlterPartition(ctx, replica.AlterPartitionRequest{Topic: "t", Partition: 0, Leader: cur.Leader, LeaderEpoch: cur.LeaderEpoch,
		PartitionEpoch: cur.PartitionEpoch, ISR: append(append([]int32{}, cur.ISR...), spare), BrokerEpochs: map[int32]int64{spare: mustBroker(t, q, spare).Epoch}})
	require.NoError(t, err)
	require.ErrorIs(t, q.UnregisterBroker(ctx, leaving), ErrBrokerAlive)

	skip.Store(leaving)
	require.Eventually(t, func() bool { return q.UnregisterBroker(ctx, leaving) == nil }, 10*time.Second, 20*time.Millisecond)
	_, ok := q.Image().Broker(leaving)
	require.False(t, ok)
	require.ErrorIs(t, q.UnregisterBroker(ctx, leaving), ErrBrokerNotRegistered)
}

func mustBroker(t *testing.T, q *Quorum, id int32) BrokerInfo {
	b, ok := q.Image().Broker(id)
	require.True(t, ok)
	return b
}

// TestPartitionRecordsBeforeReassignmentsDecode: records and snapshots
// written before a partition state had a reassignment still decode, as a
// partition with none; the new fields round-trip.
func TestPartitionRecordsBeforeReassignmentsDecode(t *testing.T) {
	old := `{"v":1,"records":[{"topic":{"name":"t","id":"id"}},` +
		`{"partition":{"topic_id":"id","topic":"t","partition":0,"replicas":[1,2],"leader":1,"leader_epoch":3,"isr":[1,2],"partition_epoch":4}}]}`
	e, err := DecodeEntry([]byte(old))
	require.NoError(t, err)
	im, res := NewImage().apply(e, 1)
	require.Zero(t, res.Skipped)
	st, _ := im.Partition("t", 0)
	require.Equal(t, replica.PartitionState{Topic: "t", Replicas: []int32{1, 2}, Leader: 1, LeaderEpoch: 3, ISR: []int32{1, 2}, PartitionEpoch: 4}, st)

	next := st.Clone()
	next.Replicas, next.AddingReplicas, next.RemovingReplicas = []int32{3, 2, 1}, []int32{3}, []int32{1}
	next.PartitionEpoch++
	data, err := EncodeEntry(partitionRecord("id", next))
	require.NoError(t, err)
	require.Contains(t, string(data), `"adding_replicas":[3]`)
	e, err = DecodeEntry(data)
	require.NoError(t, err)
	im, res = im.apply(e, 2)
	require.Zero(t, res.Skipped)
	got, _ := im.Partition("t", 0)
	require.Equal(t, next, got)

	oldSnapshot := `{"index":1,"cluster_id":"c","brokers":[],"topics":[{"Name":"t","ID":"id","Partitions":[` +
		`{"Topic":"t","Partition":0,"Replicas":[1,2],"Leader":1,"LeaderEpoch":3,"ISR":[1,2],"PartitionEpoch":4}]}],"next_producer_id":0}`
	var snap Image
	require.NoError(t, json.Unmarshal([]byte(oldSnapshot), &snap))
	st, _ = snap.Partition("t", 0)
	require.False(t, st.Reassigning())
	data, err = im.MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &snap))
	got, _ = snap.Partition("t", 0)
	require.Equal(t, next, got, "a snapshot keeps the reassignment")
}
