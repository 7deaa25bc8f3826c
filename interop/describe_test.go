package interop

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool/clustertest"
)

// kadm reads the operators' describe APIs of spool as it reads Kafka's:
// log directories of every broker and of one, and the producers of each
// partition from its leader (DescribeLogDirs, DescribeProducers). kadm has
// no DescribeQuorum; franz-go's own request, routed to the controller as
// for Kafka, gets UNKNOWN_TOPIC_OR_PARTITION from a standalone broker,
// which has no quorum.
func TestFranzGoDescribeStandalone(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	cl := kgoClient(t, s, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	kadmCreate(t, ctx, adm, "desc", 2, nil)
	for i := range 6 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "desc", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	data, err := filepath.Abs(s.Data)
	require.NoError(t, err)

	all, err := adm.DescribeAllLogDirs(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, 1)
	dirs := all[1]
	require.Len(t, dirs, 1)
	d := dirs[data]
	require.NoError(t, d.Err)
	require.Equal(t, int32(1), d.Broker)
	require.Positive(t, d.UsableBytes)
	require.GreaterOrEqual(t, d.TotalBytes, d.UsableBytes)
	for p := int32(0); p < 2; p++ {
		dp, ok := d.Topics["desc"][p]
		require.True(t, ok, "desc-%d", p)
		require.Positive(t, dp.Size)
		require.Zero(t, dp.OffsetLag)
		require.False(t, dp.IsFuture)
	}
	one, err := adm.DescribeBrokerLogDirs(ctx, 1, kadm.TopicsSet{"desc": {1: {}}})
	require.NoError(t, err)
	require.Len(t, one[data].Topics["desc"], 1, "only the partition asked for")
	require.Equal(t, d.Topics["desc"][1].Size, one[data].Topics["desc"][1].Size)

	producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"desc": {0: {}, 1: {}}})
	require.NoError(t, err)
	for p := int32(0); p < 2; p++ {
		dp := producers["desc"].Partitions[p]
		require.NoError(t, dp.Err, "desc-%d: %s", p, dp.ErrMessage)
		require.Equal(t, int32(1), dp.Leader)
		pr, ok := dp.ActiveProducers[pid]
		require.True(t, ok, "desc-%d lists producer %d", p, pid)
		require.Equal(t, epoch, pr.ProducerEpoch)
		require.Equal(t, int32(2), pr.LastSequence, "three records a partition")
		require.Equal(t, int32(-1), pr.CoordinatorEpoch)
		require.Equal(t, int64(-1), pr.CurrentTxnStartOffset)
	}

	resp, err := quorumRequest().RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, resp.Topics[0].Partitions[0].ErrorCode)
}

func quorumRequest() *kmsg.DescribeQuorumRequest {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}
	req.Topics = append(req.Topics, rt)
	return req
}

// The same against a cluster of "spool serve" processes, three voters and
// a broker-only node: kadm describes every broker's directory and its
// replicas, and each partition's producer from its leader; DescribeQuorum,
// sent by franz-go to the controller, names the leader, the three voters
// and the observer, all caught up.
func TestFranzGoDescribeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	c := clustertest.Start(t, clustertest.Options{Nodes: 4, Voters: 3})
	ctx := testContext(t, 90*time.Second)
	require.NoError(t, c.CreateTopic(ctx, "desc", 2, 3, nil))
	require.NoError(t, c.WaitInSync(ctx, "desc"))
	cl, err := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	for i := range 6 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "desc", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	pid, _, err := cl.ProducerID(ctx)
	require.NoError(t, err)

	require.NoError(t, clustertest.Eventually(ctx, "every replica described, caught up", func(ctx context.Context) error {
		all, err := adm.DescribeAllLogDirs(ctx, nil)
		if err != nil {
			return err
		}
		replicas := 0
		for broker, dirs := range all {
			require.Len(t, dirs, 1, "broker %d", broker)
			for path, d := range dirs {
				require.NoError(t, d.Err)
				abs, err := filepath.Abs(c.Node(broker).Dir())
				require.NoError(t, err)
				require.Equal(t, abs, path)
				for p, dp := range d.Topics["desc"] {
					if dp.OffsetLag != 0 || dp.Size == 0 {
						return fmt.Errorf("broker %d desc-%d: size %d, lag %d", broker, p, dp.Size, dp.OffsetLag)
					}
					replicas++
				}
			}
		}
		if replicas != 6 {
			return fmt.Errorf("%d replicas of desc described, want 6", replicas)
		}
		return nil
	}))

	producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"desc": {0: {}, 1: {}}})
	require.NoError(t, err)
	for p := int32(0); p < 2; p++ {
		dp := producers["desc"].Partitions[p]
		require.NoError(t, dp.Err, "desc-%d: %s", p, dp.ErrMessage)
		leader, err := c.Leader(ctx, "desc", p)
		require.NoError(t, err)
		require.Equal(t, leader, dp.Leader)
		require.Contains(t, dp.ActiveProducers, pid)
	}

	require.NoError(t, clustertest.Eventually(ctx, "the quorum described, every member caught up", func(ctx context.Context) error {
		resp, err := quorumRequest().RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return err
		}
		var voters, observers []int32
		for _, v := range p.CurrentVoters {
			voters = append(voters, v.ReplicaID)
		}
		for _, o := range p.Observers {
			observers = append(observers, o.ReplicaID)
			if o.LogEndOffset < p.HighWatermark || o.LastFetchTimestamp < 0 {
				return fmt.Errorf("observer %d: log end %d, high watermark %d", o.ReplicaID, o.LogEndOffset, p.HighWatermark)
			}
		}
		require.Equal(t, []int32{1, 2, 3}, voters)
		require.Contains(t, voters, p.LeaderID)
		require.Positive(t, p.LeaderEpoch)
		if len(observers) != 1 || observers[0] != 4 {
			return fmt.Errorf("observers %v, want [4]", observers)
		}
		return nil
	}))
}
