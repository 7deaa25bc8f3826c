package transport

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
)

// direct sends a request to one listener itself (seed broker), not where
// kgo would route it: to test what a node that is not the active
// controller does with an operator's request, or the controller listener.
func direct(t *testing.T, ctx context.Context, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	require.NoError(t, err)
	return resp
}

func reassignReq(topic string, partition int32, replicas []int32) *kmsg.AlterPartitionAssignmentsRequest {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
	rp.Partition, rp.Replicas = partition, replicas
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// reassignCode is the partition's answer to a reassignment sent to addr.
func reassignCode(t *testing.T, ctx context.Context, addr string, req *kmsg.AlterPartitionAssignmentsRequest) int16 {
	t.Helper()
	resp := direct(t, ctx, addr, req).(*kmsg.AlterPartitionAssignmentsResponse)
	require.Zero(t, resp.ErrorCode, "%v", resp.ErrorMessage)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return resp.Topics[0].Partitions[0].ErrorCode
}

func listReassignments(t *testing.T, ctx context.Context, addr string) []kmsg.ListPartitionReassignmentsResponseTopic {
	t.Helper()
	resp := direct(t, ctx, addr, kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse)
	require.Zero(t, resp.ErrorCode)
	return resp.Topics
}

// TestClusterReassignsThroughAnyBroker: reassignment, its cancellation,
// elections and unregistration sent to a broker that is not the active
// controller are forwarded there, with Kafka's answers.
func TestClusterReassignsThroughAnyBroker(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	active, _ := c.running()[1].Broker().Quorum().Leader()
	var other *Node
	for id, nd := range c.running() {
		if id != active {
			other = nd
		}
	}
	at := other.Addr().String()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "mv", 1, 3, nil)
	c.createTopic(ctx, cl, "still", 1, 3, nil)
	for i := range 100 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "mv", Value: fmt.Appendf(nil, "r%d", i)}).FirstErr())
	}
	part := c.metadata(ctx, cl, "mv").Partitions[0]
	leader := part.Leader
	var follower, kept int32 = -1, -1
	for _, r := range part.Replicas {
		switch {
		case r == leader:
		case follower < 0:
			follower = r
		default:
			kept = r
		}
	}

	// Broker 4 joins, and stops: registered, but it cannot catch up, so
	// a reassignment to it stays under way.
	c.dirs[4], c.ctrl[4] = t.TempDir(), freeAddr(t)
	n4 := c.start(4)
	<-n4.Broker().Ready()
	c.stop(4)

	target := []int32{leader, kept, 4}
	require.Zero(t, reassignCode(t, ctx, at, reassignReq("mv", 0, target)))
	lt := listReassignments(t, ctx, at)
	require.Len(t, lt, 1)
	require.Equal(t, "mv", lt[0].Topic)
	require.Equal(t, []kmsg.ListPartitionReassignmentsResponseTopicPartition{{Partition: 0, Replicas: append(slices.Clone(target), follower),
		AddingReplicas: []int32{4}, RemovingReplicas: []int32{follower}}}, lt[0].Partitions)
	require.Eventually(t, func() bool {
		return len(c.metadata(ctx, cl, "mv").Partitions[0].Replicas) == 4
	}, 10*time.Second, 20*time.Millisecond, "metadata lists the replicas being added and removed")

	// Under way, the replication factor is still 3: the replica being
	// added does not count (describe, and what min.insync.replicas may be).
	for id, nd := range c.running() {
		require.Eventually(t, func() bool {
			d, err := nd.Broker().DescribeTopic("mv")
			return err == nil && d.Config.ReplicationFactor == 3 && len(d.Partitions) == 1
		}, 10*time.Second, 20*time.Millisecond, "node %d describes replication factor 3", id)
	}
	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "mv"
	res.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "min.insync.replicas", Op: kmsg.IncrementalAlterConfigOpSet, Value: ptr("4")}}
	ia.Resources = append(ia.Resources, res)
	iar := direct(t, ctx, at, ia).(*kmsg.IncrementalAlterConfigsResponse)
	require.Equal(t, kerr.InvalidConfig.Code, iar.Resources[0].ErrorCode, "min.insync.replicas 4 with 3 replicas")

	// Refusals, each for one partition.
	for _, bad := range []struct {
		req  *kmsg.AlterPartitionAssignmentsRequest
		code int16
	}{
		{reassignReq("mv", 0, []int32{1, 1, 2}), kerr.InvalidReplicaAssignment.Code},
		{reassignReq("mv", 0, []int32{1, 2, 9}), kerr.InvalidReplicaAssignment.Code},
		{reassignReq("mv", 0, []int32{}), kerr.InvalidReplicaAssignment.Code},
		{reassignReq("nope", 0, []int32{1, 2, 3}), kerr.UnknownTopicOrPartition.Code},
		{reassignReq("mv", 7, []int32{1, 2, 3}), kerr.UnknownTopicOrPartition.Code},
		{reassignReq("still", 0, nil), kerr.NoReassignmentInProgress.Code},
		{func() *kmsg.AlterPartitionAssignmentsRequest {
			r := reassignReq("still", 0, []int32{1, 2})
			r.AllowReplicationFactorChange = false
			return r
		}(), kerr.InvalidReplicationFactor.Code},
	} {
		require.Equal(t, bad.code, reassignCode(t, ctx, at, bad.req), "%+v", bad.req.Topics)
	}

	// Cancel: back to the original replicas.
	require.Zero(t, reassignCode(t, ctx, at, reassignReq("mv", 0, nil)))
	require.Empty(t, listReassignments(t, ctx, at))
	require.Eventually(t, func() bool {
		p := c.metadata(ctx, cl, "mv").Partitions[0]
		return len(p.Replicas) == 3 && !slices.Contains(p.Replicas, 4)
	}, 10*time.Second, 20*time.Millisecond)

	// Broker 4 runs again; the reassignment completes once it is in sync.
	n4 = c.start(4)
	<-n4.Broker().Ready()
	require.Zero(t, reassignCode(t, ctx, at, reassignReq("mv", 0, target)))
	require.Eventually(t, func() bool {
		p := c.metadata(ctx, cl, "mv").Partitions[0]
		return slices.Equal(p.Replicas, target) && len(p.ISR) == 3 && len(listReassignments(t, ctx, at)) == 0
	}, 30*time.Second, 50*time.Millisecond, "the reassignment completes")
	p4, err := n4.Broker().Partition("mv", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p4.HighWatermark() == 100 }, 10*time.Second, 20*time.Millisecond, "the new replica has every record")
	require.Eventually(t, func() bool {
		_, err := c.running()[follower].Broker().Partition("mv", 0)
		_, serr := os.Stat(fmt.Sprintf("%s/mv-0", c.dirs[follower]))
		return err != nil && os.IsNotExist(serr)
	}, 10*time.Second, 20*time.Millisecond, "the removed replica is deleted")

	// The leader stayed, in a new leader epoch (the removed follower is
	// fenced), which it stamps on what it writes from now on.
	part = c.metadata(ctx, cl, "mv").Partitions[0]
	require.Equal(t, leader, part.Leader)
	rs, ok := c.running()[leader].Broker().ReplicaNode().ReplicaSet("mv", 0)
	require.True(t, ok)
	require.Eventually(t, func() bool { return rs.IsLeader() && rs.State().LeaderEpoch == part.LeaderEpoch }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, part.LeaderEpoch, rs.Partition().Epochs().Latest(), "the leader leads in the new epoch")
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "mv", Value: []byte("after")}).FirstErr())

	// A reassignment that removes the leader moves the leadership.
	target = []int32{4, kept, follower}
	require.Zero(t, reassignCode(t, ctx, at, reassignReq("mv", 0, target)))
	require.Eventually(t, func() bool {
		p := c.metadata(ctx, cl, "mv").Partitions[0]
		return slices.Equal(p.Replicas, target) && len(p.ISR) == 3 && p.Leader != leader && p.Leader >= 0
	}, 30*time.Second, 50*time.Millisecond, "the leader is replaced")
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "mv", Value: []byte("moved")}).FirstErr())

	// Elections.
	elect := func(typ int8, topics []kmsg.ElectLeadersRequestTopic) *kmsg.ElectLeadersResponse {
		req := kmsg.NewPtrElectLeadersRequest()
		req.ElectionType, req.Topics = typ, topics
		return direct(t, ctx, at, req).(*kmsg.ElectLeadersResponse)
	}
	er := elect(0, []kmsg.ElectLeadersRequestTopic{{Topic: "still", Partitions: []int32{0, 5}}, {Topic: "nope", Partitions: []int32{0}}})
	require.Zero(t, er.ErrorCode)
	require.Len(t, er.Topics, 2)
	require.Equal(t, kerr.ElectionNotNeeded.Code, er.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, er.Topics[0].Partitions[1].ErrorCode)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, er.Topics[1].Partitions[0].ErrorCode)
	er = elect(1, []kmsg.ElectLeadersRequestTopic{{Topic: "still", Partitions: []int32{0}}})
	require.Equal(t, kerr.ElectionNotNeeded.Code, er.Topics[0].Partitions[0].ErrorCode, "unclean, with a leader")
	er = elect(7, []kmsg.ElectLeadersRequestTopic{{Topic: "still", Partitions: []int32{0}}})
	require.Equal(t, kerr.InvalidRequest.Code, er.ErrorCode)
	er = elect(0, nil)
	require.Zero(t, er.ErrorCode)
	for _, rt := range er.Topics {
		for _, rp := range rt.Partitions {
			require.NotEqual(t, kerr.ElectionNotNeeded.Code, rp.ErrorCode, "all partitions: those that need none are left out")
		}
	}

	// Unregistration.
	unregister := func(id int32) *kmsg.UnregisterBrokerResponse {
		req := kmsg.NewPtrUnregisterBrokerRequest()
		req.BrokerID = id
		return direct(t, ctx, at, req).(*kmsg.UnregisterBrokerResponse)
	}
	require.Equal(t, kerr.BrokerIDNotRegistered.Code, unregister(99).ErrorCode)
	ur := unregister(4)
	require.Equal(t, kerr.InvalidRequest.Code, ur.ErrorCode)
	require.Contains(t, *ur.ErrorMessage, "holds replicas")
	ur = unregister(kept)
	require.Equal(t, kerr.InvalidRequest.Code, ur.ErrorCode)
	require.Contains(t, *ur.ErrorMessage, "holds replicas")
	// Once "still" is gone, the old leader holds no replica (no group made
	// __consumer_offsets), but it runs.
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"still"}
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: ptr("still")}}
	dr, err := dt.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, dr.Topics[0].ErrorCode)
	require.Eventually(t, func() bool {
		ur = unregister(leader)
		return ur.ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(*ur.ErrorMessage, "holds replicas")
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, kerr.InvalidRequest.Code, ur.ErrorCode)
	require.Contains(t, *ur.ErrorMessage, "is running")
}

// TestControllerListenerAnswersKafkaCodes: the controller listener's
// AlterPartition answers a stale partition epoch INVALID_UPDATE_VERSION
// (95), Kafka's code; NEW_LEADER_ELECTED (108) is another answer.
func TestControllerListenerAnswersKafkaCodes(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "t", 1, 3, nil)
	var active int32
	require.Eventually(t, func() bool {
		for id, nd := range c.running() {
			if nd.Broker().Quorum().Active() {
				active = id
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	im := c.running()[active].Broker().Quorum().Image()
	st, _ := im.Partition("t", 0)
	ti, _ := im.Topic("t")
	id, err := spool.ParseTopicID(ti.ID)
	require.NoError(t, err)
	req := kmsg.NewPtrAlterPartitionRequest()
	req.BrokerID, req.BrokerEpoch = st.Leader, -1
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.TopicID = [16]byte(id)
	rp := kmsg.NewAlterPartitionRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch = 0, st.LeaderEpoch, st.PartitionEpoch-1
	for _, m := range st.ISR {
		rp.NewEpochISR = append(rp.NewEpochISR, kmsg.AlterPartitionRequestTopicPartitionNewEpochISR{BrokerID: m, BrokerEpoch: -1})
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := direct(t, ctx, c.ctrl[active], req).(*kmsg.AlterPartitionResponse)
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, kerr.InvalidUpdateVersion.Code, resp.Topics[0].Partitions[0].ErrorCode)
}

// TestStandaloneOperations: a standalone broker answers the operator's
// requests as a cluster of one, at every version: nothing to move, elect
// or unregister.
func TestStandaloneOperations(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{NodeID: 1}, Options{NodeID: 1})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{Partitions: 2}))
	c := adminDial(t, n.addr)
	for v := int16(0); v <= 1; v++ {
		req := reassignReq("t", 0, []int32{1})
		rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		rp.Partition, rp.Replicas = 1, []int32{2}
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
		rp.Partition, rp.Replicas = 1, nil
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
		resp := adminDo[*kmsg.AlterPartitionAssignmentsResponse](t, c, v, req)
		require.Zero(t, resp.ErrorCode)
		codes := []int16{}
		for _, p := range resp.Topics[0].Partitions {
			codes = append(codes, p.ErrorCode)
		}
		require.Equal(t, []int16{0, kerr.InvalidReplicaAssignment.Code, kerr.NoReassignmentInProgress.Code}, codes, "v%d", v)
	}
	lr := adminDo[*kmsg.ListPartitionReassignmentsResponse](t, c, 0, kmsg.NewPtrListPartitionReassignmentsRequest())
	require.Zero(t, lr.ErrorCode)
	require.Empty(t, lr.Topics)
	for v := int16(0); v <= 2; v++ {
		req := kmsg.NewPtrElectLeadersRequest()
		req.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: "t", Partitions: []int32{0, 1, 2}}}
		resp := adminDo[*kmsg.ElectLeadersResponse](t, c, v, req)
		require.Zero(t, resp.ErrorCode)
		var codes []int16
		for _, p := range resp.Topics[0].Partitions {
			codes = append(codes, p.ErrorCode)
		}
		require.Equal(t, []int16{kerr.ElectionNotNeeded.Code, kerr.ElectionNotNeeded.Code, kerr.UnknownTopicOrPartition.Code}, codes, "v%d", v)
	}
	ur := kmsg.NewPtrUnregisterBrokerRequest()
	ur.BrokerID = 1
	require.Equal(t, kerr.InvalidRequest.Code, adminDo[*kmsg.UnregisterBrokerResponse](t, c, 0, ur).ErrorCode)
	ur.BrokerID = 2
	require.Equal(t, kerr.BrokerIDNotRegistered.Code, adminDo[*kmsg.UnregisterBrokerResponse](t, c, 0, ur).ErrorCode)
}
