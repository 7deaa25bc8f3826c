package transport

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterCoordinatorCommitsPartitionsItHoldsNoReplicaOf: a group's
// coordinator takes OffsetCommit, TxnOffsetCommit and OffsetDelete for
// every partition the cluster has, not only for those it holds a replica
// of; only a topic or partition the cluster's metadata lacks is refused
// (UNKNOWN_TOPIC_OR_PARTITION). The coordinator used to check the
// partition against its own replicas, so that in a cluster larger than
// the topic's replication factor a member that was assigned a partition
// stored elsewhere could never commit it: with 5 brokers and topics at
// replication factor 3, the clustertest fault run's group committed only
// the partition its coordinator happened to hold.
func TestClusterCoordinatorCommitsPartitionsItHoldsNoReplicaOf(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	const partitions = 3
	const groupID = "g"
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorKey = groupID
	var coord *kmsg.FindCoordinatorResponse
	require.Eventually(t, func() bool {
		resp, err := find.RequestWith(ctx, cl)
		coord = resp
		return err == nil && resp.ErrorCode == errNone && resp.NodeID >= 0
	}, 30*time.Second, 100*time.Millisecond, "the group gets a coordinator")
	// Replication factor 1: each partition on one broker, so that the
	// coordinator holds a replica of at most some of them. Placement skips
	// a broker the controller holds fenced, which on a loaded machine a
	// late heartbeat can make any of them for a moment: a topic placed
	// wholly on the coordinator is set aside and another created.
	var topic string
	var md kmsg.MetadataResponseTopic
	var elsewhere []int32 // partitions the coordinator holds no replica of
	for try := 1; ; try++ {
		topic = fmt.Sprintf("spread-%d", try)
		c.createTopic(ctx, cl, topic, partitions, 1, nil)
		md = c.metadata(ctx, cl, topic)
		elsewhere = nil
		for _, p := range md.Partitions {
			if !slices.Contains(p.Replicas, coord.NodeID) {
				elsewhere = append(elsewhere, p.Partition)
			}
		}
		if len(elsewhere) > 0 {
			break
		}
		require.Less(t, try, 5, "every partition of %d topics placed on the coordinator (node %d)", try, coord.NodeID)
	}
	conn := groupDial(t, net.JoinHostPort(coord.Host, strconv.Itoa(int(coord.Port))))

	fetch := func(v int16) *kmsg.OffsetFetchResponse {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = groupID
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{0, 1, 2}}}
		return groupDo[*kmsg.OffsetFetchResponse](t, conn, v, req)
	}
	// The coordinator named may still be taking its offsets partition on.
	require.Eventually(t, func() bool { return fetch(5).ErrorCode == errNone },
		30*time.Second, 50*time.Millisecond, "node %d coordinating the group", coord.NodeID)
	committed := func(v int16) map[int32]int64 {
		resp := fetch(v)
		require.Equal(t, errNone, resp.ErrorCode)
		out := map[int32]int64{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				require.Equal(t, errNone, p.ErrorCode)
				out[p.Partition] = p.Offset
			}
		}
		return out
	}

	// OffsetCommit by name (v8) and by topic id (v10): every partition of
	// the topic is taken; one past its last and one of an unknown topic
	// are refused, and their refusal does not hold the others back.
	for _, v := range []int16{8, 10} {
		off := int64(10 * v)
		req := groupCommitReq(groupID, -1, "", topic, map[int32]int64{0: off, 1: off + 1, 2: off + 2, partitions: off + 3})
		req.Topics = append(req.Topics, groupCommitReq("", -1, "", "nosuch", map[int32]int64{0: 1}).Topics...)
		if v >= 10 {
			req.Topics = req.Topics[:1]
			req.Topics[0].Topic, req.Topics[0].TopicID = "", md.TopicID
		}
		resp := groupDo[*kmsg.OffsetCommitResponse](t, conn, v, req)
		codes := map[string]int16{}
		for _, rt := range resp.Topics {
			name := rt.Topic
			if v >= 10 {
				name = topic
			}
			for _, p := range rt.Partitions {
				codes[fmt.Sprintf("%s/%d", name, p.Partition)] = p.ErrorCode
			}
		}
		want := map[string]int16{topic + "/0": errNone, topic + "/1": errNone, topic + "/2": errNone, topic + "/3": errUnknownTopicOrPartition}
		if v < 10 {
			want["nosuch/0"] = errUnknownTopicOrPartition
		}
		require.Equal(t, want, codes, "OffsetCommit v%d to node %d, which holds no replica of %v", v, coord.NodeID, elsewhere)
		require.Equal(t, map[int32]int64{0: off, 1: off + 1, 2: off + 2}, committed(5), "v%d", v)
	}

	// TxnOffsetCommit: a transactional producer commits the group's
	// offsets of every partition inside its transaction.
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = kmsg.StringPtr("committer")
	init.TransactionTimeoutMillis = 30_000
	var pid *kmsg.InitProducerIDResponse
	require.Eventually(t, func() bool {
		resp, err := init.RequestWith(ctx, cl)
		pid = resp
		return err == nil && resp.ErrorCode == errNone
	}, 30*time.Second, 100*time.Millisecond, "a transactional producer id")
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "committer", pid.ProducerID, pid.ProducerEpoch, groupID
	require.Eventually(t, func() bool {
		resp, err := add.RequestWith(ctx, cl)
		return err == nil && resp.ErrorCode == errNone
	}, 30*time.Second, 100*time.Millisecond, "the group's offsets in the transaction")
	treq := kmsg.NewPtrTxnOffsetCommitRequest()
	treq.TransactionalID, treq.Group, treq.ProducerID, treq.ProducerEpoch = "committer", groupID, pid.ProducerID, pid.ProducerEpoch
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = topic
	for p := range int32(partitions + 1) {
		tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		tp.Partition, tp.Offset = p, 500+int64(p)
		tt.Partitions = append(tt.Partitions, tp)
	}
	treq.Topics = append(treq.Topics, tt)
	tresp := groupDo[*kmsg.TxnOffsetCommitResponse](t, conn, 3, treq)
	var tcodes []int16
	for _, p := range tresp.Topics[0].Partitions {
		tcodes = append(tcodes, p.ErrorCode)
	}
	require.Equal(t, []int16{errNone, errNone, errNone, errUnknownTopicOrPartition}, tcodes, "TxnOffsetCommit to node %d", coord.NodeID)
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "committer", pid.ProducerID, pid.ProducerEpoch, true
	eresp, err := end.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Equal(t, errNone, eresp.ErrorCode)
	require.Eventually(t, func() bool {
		return fmt.Sprint(committed(5)) == fmt.Sprint(map[int32]int64{0: 500, 1: 501, 2: 502})
	}, 30*time.Second, 50*time.Millisecond, "the transaction's offsets, once committed")

	// OffsetDelete of a partition held elsewhere.
	dreq := kmsg.NewPtrOffsetDeleteRequest()
	dreq.Group = groupID
	dreq.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: elsewhere[0]}, {Partition: partitions}}}}
	dresp := groupDo[*kmsg.OffsetDeleteResponse](t, conn, 0, dreq)
	require.Equal(t, errNone, dresp.ErrorCode)
	require.Equal(t, errNone, dresp.Topics[0].Partitions[0].ErrorCode, "OffsetDelete of %s/%d at node %d", topic, elsewhere[0], coord.NodeID)
	require.Equal(t, errUnknownTopicOrPartition, dresp.Topics[0].Partitions[1].ErrorCode)
	require.Equal(t, int64(-1), committed(5)[elsewhere[0]])
}
