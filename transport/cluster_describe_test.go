package transport

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// quorumRequest is a DescribeQuorum of the metadata partition, as kadm
// and kafka-metadata-quorum send it.
func quorumRequest() *kmsg.DescribeQuorumRequest {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}
	req.Topics = append(req.Topics, rt)
	return req
}

// quorumPartition is the metadata partition of a DescribeQuorum answer.
func quorumPartition(t testing.TB, resp *kmsg.DescribeQuorumResponse) kmsg.DescribeQuorumResponseTopicPartition {
	t.Helper()
	require.Zero(t, resp.ErrorCode, "%v", resp.ErrorMessage)
	require.Len(t, resp.Topics, 1)
	require.Equal(t, "__cluster_metadata", resp.Topics[0].Topic)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return resp.Topics[0].Partitions[0]
}

func replicaIDs(rs []kmsg.DescribeQuorumResponseTopicPartitionReplicaState) []int32 {
	var out []int32
	for _, r := range rs {
		out = append(out, r.ReplicaID)
	}
	return out
}

// caughtUp reports whether every voter and observer has the leader's log
// end and has been heard from.
func caughtUp(p kmsg.DescribeQuorumResponseTopicPartition) bool {
	var end int64 = -1
	for _, v := range p.CurrentVoters {
		if v.ReplicaID == p.LeaderID {
			end = v.LogEndOffset
		}
	}
	for _, r := range append(slices.Clone(p.CurrentVoters), p.Observers...) {
		if r.LogEndOffset != end || r.LastFetchTimestamp <= 0 || r.LastCaughtUpTimestamp <= 0 {
			return false
		}
	}
	return end >= p.HighWatermark && p.HighWatermark > 0
}

// DescribeQuorum over the wire, from a cluster of three voters and a
// broker-only node: franz-go sends it to the controller; every broker's
// Kafka listener answers it (the others forwarding to the quorum's
// leader); on the controller listener only the leader answers, the others
// say NOT_LEADER_OR_FOLLOWER; the voters, the observer, their log ends and
// times, the Raft term as the epoch and the voters' endpoints (v2) are
// the leader's. Once the leader shuts down, another answers with a later
// epoch.
func TestClusterDescribeQuorum(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.dirs[4], c.ctrl[4] = t.TempDir(), freeAddr(t)
	n4 := c.start(4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	select {
	case <-n4.Broker().Ready():
	case <-ctx.Done():
		t.Fatal("the broker-only node did not join")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	var p kmsg.DescribeQuorumResponseTopicPartition
	require.Eventually(t, func() bool {
		resp, err := quorumRequest().RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Equal(t, int16(2), resp.Version)
		p = quorumPartition(t, resp)
		return caughtUp(p) && len(p.Observers) == 1
	}, 30*time.Second, 20*time.Millisecond, "every member caught up, the broker-only node observing")
	require.Zero(t, p.ErrorCode)
	leader := p.LeaderID
	require.Contains(t, []int32{1, 2, 3}, leader)
	require.Positive(t, p.LeaderEpoch)
	if d, err := c.running()[leader].Broker().Quorum().Describe(); err == nil { // still leading
		require.GreaterOrEqual(t, d.LeaderEpoch, p.LeaderEpoch, "the Raft term, which only grows")
	}
	require.Equal(t, []int32{1, 2, 3}, replicaIDs(p.CurrentVoters))
	require.Equal(t, []int32{4}, replicaIDs(p.Observers))
	for _, r := range append(p.CurrentVoters, p.Observers...) {
		require.Equal(t, [16]byte{}, r.ReplicaDirectoryID, "a static voter list has no directory ids")
		require.LessOrEqual(t, r.LastCaughtUpTimestamp, r.LastFetchTimestamp)
	}

	// Every broker answers it, v0 to v2; the leader's own listener
	// answers from its quorum, the others forward.
	for id, nd := range c.running() {
		conn := adminDial(t, nd.Addr().String())
		for v := int16(0); v <= 2; v++ {
			resp := adminDo[*kmsg.DescribeQuorumResponse](t, conn, v, quorumRequest())
			got := quorumPartition(t, resp)
			require.Zero(t, got.ErrorCode, "broker %d v%d: %v", id, v, got.ErrorMessage)
			// The same leader - unless a loaded machine saw an election
			// meanwhile, which a later epoch shows.
			require.GreaterOrEqual(t, got.LeaderEpoch, p.LeaderEpoch)
			if got.LeaderEpoch == p.LeaderEpoch {
				require.Equal(t, leader, got.LeaderID, "broker %d", id)
			}
			require.GreaterOrEqual(t, got.HighWatermark, p.HighWatermark)
			require.Equal(t, []int32{1, 2, 3}, replicaIDs(got.CurrentVoters))
			if v == 0 {
				require.Equal(t, int64(-1), got.CurrentVoters[0].LastFetchTimestamp, "no timestamps before v1")
			}
			if v < 2 {
				require.Empty(t, resp.Nodes)
				continue
			}
			require.Len(t, resp.Nodes, 3)
			for i, node := range resp.Nodes {
				require.Equal(t, int32(i+1), node.NodeID)
				require.Len(t, node.Listeners, 1)
				l := node.Listeners[0]
				require.Equal(t, "CONTROLLER", l.Name)
				require.Equal(t, c.ctrl[node.NodeID], net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port))))
			}
		}
		// A partition other than __cluster_metadata-0 is unknown.
		bad := quorumRequest()
		bad.Topics[0].Partitions[0].Partition = 1
		resp := adminDo[*kmsg.DescribeQuorumResponse](t, conn, 2, bad)
		require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[0].ErrorCode)
	}

	// The controller listener: the leader answers, the others refuse
	// naming it (asked again if an election came between the answers).
	require.Eventually(t, func() bool {
		answered := map[int32]int32{} // node -> the leader it names
		for id, nd := range c.running() {
			resp := adminDo[*kmsg.DescribeQuorumResponse](t, adminDial(t, nd.ControllerAddr().String()), 2, quorumRequest())
			got := quorumPartition(t, resp)
			switch got.ErrorCode {
			case 0:
				require.Equal(t, id, got.LeaderID, "only the leader answers")
				answered[id] = id
			case errNotLeaderOrFollower:
				for l := int32(1); l <= 3; l++ {
					if strings.Contains(*got.ErrorMessage, fmt.Sprintf("node %d ", l)) {
						answered[id] = l
					}
				}
			default:
				t.Fatalf("node %d: %v %v", id, got.ErrorCode, got.ErrorMessage)
			}
		}
		named := map[int32]bool{}
		for _, l := range answered {
			named[l] = true
		}
		if len(answered) != 4 || len(named) != 1 {
			return false
		}
		l := answered[4]
		return answered[l] == l
	}, 20*time.Second, 50*time.Millisecond, "one leader answers; every other node names it")

	// The leader goes; another leads, in a later term.
	c.stop(leader)
	require.Eventually(t, func() bool {
		resp, err := quorumRequest().RequestWith(ctx, cl)
		if err != nil {
			return false
		}
		got := quorumPartition(t, resp)
		if got.ErrorCode != 0 || got.LeaderID == leader {
			return false
		}
		require.Greater(t, got.LeaderEpoch, p.LeaderEpoch)
		return true
	}, 30*time.Second, 50*time.Millisecond, "a new leader describes the quorum")
}

// DescribeLogDirs, DescribeProducers and DescribeCluster over the wire on
// a three-node cluster: franz-go's sharded DescribeLogDirs reaches every
// broker, each describing its own replicas (as Metadata places them) with
// the same sizes as the others once caught up and no lag; DescribeProducers
// goes to each partition's leader, which lists the idempotent producer,
// while a follower answers NOT_LEADER_OR_FOLLOWER - and a new leader lists
// it too after a failover, from its log; DescribeCluster v2 lists a
// stopped broker as fenced when asked to.
func TestClusterDescribeReplicas(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := idempotentClient(t, c.seeds())
	c.createTopic(ctx, cl, "r", 3, 2, nil)
	for i := range 30 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "r", Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	md := c.metadata(ctx, cl, "r")
	placed := map[int32]map[int32]bool{} // broker -> partitions it holds
	for _, p := range md.Partitions {
		for _, r := range p.Replicas {
			if placed[r] == nil {
				placed[r] = map[int32]bool{}
			}
			placed[r][p.Partition] = true
		}
	}

	require.Eventually(t, func() bool {
		sizes := map[int32]int64{}
		answered := 0
		for _, shard := range cl.RequestSharded(ctx, kmsg.NewPtrDescribeLogDirsRequest()) {
			require.NoError(t, shard.Err)
			resp := shard.Resp.(*kmsg.DescribeLogDirsResponse)
			require.Len(t, resp.Dirs, 1)
			require.Equal(t, c.dirs[shard.Meta.NodeID], resp.Dirs[0].Dir)
			got := logDirsOf(t, resp.Dirs[0])["r"]
			require.Len(t, got, len(placed[shard.Meta.NodeID]), "broker %d holds the replicas Metadata places on it", shard.Meta.NodeID)
			for p, sl := range got {
				require.True(t, placed[shard.Meta.NodeID][p])
				if sl[1] != 0 {
					return false
				}
				if s, ok := sizes[p]; ok && s != sl[0] {
					return false
				}
				sizes[p] = sl[0]
			}
			answered++
		}
		return answered == 3
	}, 20*time.Second, 20*time.Millisecond, "every broker describes its replicas, alike and caught up")

	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: "r", Partitions: []int32{0, 1, 2}}}
	resp := adminKgo[*kmsg.DescribeProducersResponse](t, cl, req)
	got := producersOf(t, resp, "r")
	require.Len(t, got, 3)
	for p, rp := range got {
		require.Zero(t, rp.ErrorCode, "partition %d: %v", p, rp.ErrorMessage)
		require.Len(t, rp.ActiveProducers, 1)
		require.Equal(t, pid, rp.ActiveProducers[0].ProducerID)
		require.Equal(t, int32(epoch), rp.ActiveProducers[0].ProducerEpoch)
		require.Equal(t, int32(9), rp.ActiveProducers[0].LastSequence, "ten records a partition")
	}
	p0 := md.Partitions[slices.IndexFunc(md.Partitions, func(p kmsg.MetadataResponseTopicPartition) bool { return p.Partition == 0 })]
	follower := p0.Replicas[0]
	if follower == p0.Leader {
		follower = p0.Replicas[1]
	}
	req.Topics[0].Partitions = []int32{0}
	fresp := adminDo[*kmsg.DescribeProducersResponse](t, adminDial(t, c.running()[follower].Addr().String()), 0, req)
	require.Equal(t, errNotLeaderOrFollower, producersOf(t, fresp, "r")[0].ErrorCode)

	// The leader of partition 0 shuts down: its follower leads, and knows
	// the producer from its copy of the log.
	c.stop(p0.Leader)
	require.Eventually(t, func() bool {
		fresp := adminDo[*kmsg.DescribeProducersResponse](t, adminDial(t, c.running()[follower].Addr().String()), 0, req)
		rp := producersOf(t, fresp, "r")[0]
		if rp.ErrorCode != 0 {
			return false
		}
		require.Len(t, rp.ActiveProducers, 1)
		require.Equal(t, pid, rp.ActiveProducers[0].ProducerID)
		require.Equal(t, int32(9), rp.ActiveProducers[0].LastSequence)
		return true
	}, 20*time.Second, 20*time.Millisecond, "the new leader lists the producer")

	// The stopped broker is fenced: listed only when asked for fenced
	// brokers (v2).
	conn := adminDial(t, c.running()[follower].Addr().String())
	dc := kmsg.NewPtrDescribeClusterRequest()
	dresp := adminDo[*kmsg.DescribeClusterResponse](t, conn, 2, dc)
	require.Len(t, dresp.Brokers, 2)
	dc.IncludeFencedBrokers = true
	dresp = adminDo[*kmsg.DescribeClusterResponse](t, conn, 2, dc)
	require.Len(t, dresp.Brokers, 3)
	for i, b := range dresp.Brokers {
		require.Equal(t, int32(i+1), b.NodeID)
		require.Equal(t, b.NodeID == p0.Leader, b.IsFenced, "broker %d", b.NodeID)
	}
	dresp = adminDo[*kmsg.DescribeClusterResponse](t, conn, 1, dc)
	require.Len(t, dresp.Brokers, 2, "v1 has no fenced brokers")
}
