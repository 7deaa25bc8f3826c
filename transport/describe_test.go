package transport

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The operators' describe APIs are advertised, each from version 0, on
// every broker.
func TestDescribeAPIsAdvertised(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	c := adminDial(t, n.addr)
	resp := adminDo[*kmsg.ApiVersionsResponse](t, c, 3, &kmsg.ApiVersionsRequest{ClientSoftwareName: "t", ClientSoftwareVersion: "1"})
	got := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	require.Equal(t, [2]int16{0, 5}, got[kmsg.DescribeLogDirs.Int16()])
	require.Equal(t, [2]int16{0, 2}, got[kmsg.DescribeQuorum.Int16()])
	require.Equal(t, [2]int16{0, 0}, got[kmsg.DescribeProducers.Int16()])
	require.Equal(t, [2]int16{0, 2}, got[kmsg.DescribeCluster.Int16()])
}

// logDirsOf flattens a DescribeLogDirs answer: topic -> partition ->
// (size, lag), checking every partition is a current replica.
func logDirsOf(t testing.TB, d kmsg.DescribeLogDirsResponseDir) map[string]map[int32][2]int64 {
	t.Helper()
	out := map[string]map[int32][2]int64{}
	for _, rt := range d.Topics {
		require.NotContains(t, out, rt.Topic, "a topic listed twice")
		out[rt.Topic] = map[int32][2]int64{}
		for _, rp := range rt.Partitions {
			require.False(t, rp.IsFuture)
			out[rt.Topic][rp.Partition] = [2]int64{rp.Size, rp.OffsetLag}
		}
	}
	return out
}

// A standalone broker's DescribeLogDirs, at every version: its data
// directory by absolute path with every partition's size (as
// DescribeTopic has it) and no lag, the file system's space from v4 on;
// a request naming partitions gets only those it holds; an empty one
// none; franz-go's sharded request reaches it.
func TestDescribeLogDirsStandalone(t *testing.T) {
	dir := t.TempDir()
	n := adminStart(t, dir, spool.Options{}, Options{})
	ctx := context.Background()
	require.NoError(t, n.b.CreateTopic(ctx, "a", spool.TopicConfig{Partitions: 2}))
	require.NoError(t, n.b.CreateTopic(ctx, "b", spool.TopicConfig{}))
	cl := adminClient(t, n.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 9 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "a", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	size := func(topic string, p int32) int64 {
		d, err := n.b.DescribeTopic(topic)
		require.NoError(t, err)
		return d.Partitions[p].Size
	}
	all := map[string]map[int32][2]int64{"a": {0: {size("a", 0), 0}, 1: {size("a", 1), 0}}, "b": {0: {0, 0}}}
	require.Positive(t, all["a"][1][0])
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)

	c := adminDial(t, n.addr)
	for v := int16(0); v <= 5; v++ {
		resp := adminDo[*kmsg.DescribeLogDirsResponse](t, c, v, kmsg.NewPtrDescribeLogDirsRequest()) // null topics: all
		require.Zero(t, resp.ErrorCode)
		require.Len(t, resp.Dirs, 1, "v%d", v)
		d := resp.Dirs[0]
		require.Zero(t, d.ErrorCode)
		require.Equal(t, abs, d.Dir)
		require.Equal(t, all, logDirsOf(t, d), "v%d", v)
		require.False(t, d.IsCordoned)
		if v >= 4 {
			require.Positive(t, d.UsableBytes)
			require.GreaterOrEqual(t, d.TotalBytes, d.UsableBytes)
		} else {
			require.Equal(t, int64(-1), d.TotalBytes, "not in v%d", v)
		}
	}

	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Topics = []kmsg.DescribeLogDirsRequestTopic{{Topic: "a", Partitions: []int32{1, 5}}, {Topic: "unknown", Partitions: []int32{0}}}
	resp := adminDo[*kmsg.DescribeLogDirsResponse](t, c, 4, req)
	require.Equal(t, map[string]map[int32][2]int64{"a": {1: all["a"][1]}}, logDirsOf(t, resp.Dirs[0]), "only the partitions named that it holds")
	req.Topics = []kmsg.DescribeLogDirsRequestTopic{}
	resp = adminDo[*kmsg.DescribeLogDirsResponse](t, c, 4, req)
	require.Len(t, resp.Dirs, 1)
	require.Empty(t, resp.Dirs[0].Topics, "an empty list names nothing")

	kresp := adminKgo[*kmsg.DescribeLogDirsResponse](t, cl, kmsg.NewPtrDescribeLogDirsRequest())
	require.Equal(t, int16(5), kresp.Version)
	require.Len(t, kresp.Dirs, 1)
	require.Equal(t, all, logDirsOf(t, kresp.Dirs[0]))
}

// producersOf flattens a DescribeProducers answer for one topic:
// partition -> its error code and its producers by id.
func producersOf(t testing.TB, resp *kmsg.DescribeProducersResponse, topic string) map[int32]kmsg.DescribeProducersResponseTopicPartition {
	t.Helper()
	out := map[int32]kmsg.DescribeProducersResponseTopicPartition{}
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			out[p.Partition] = p
		}
	}
	return out
}

// idempotentClient is a franz-go producer (idempotent: kgo's default)
// writing to the partitions records name.
func idempotentClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// A standalone broker's DescribeProducers lists each partition's
// idempotent producers - id, epoch, last sequence, when they last wrote,
// no coordinator epoch or transaction - and none that are not
// idempotent; an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION
// with a message.
func TestDescribeProducersStandalone(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	ctx := context.Background()
	require.NoError(t, n.b.CreateTopic(ctx, "p", spool.TopicConfig{Partitions: 3}))
	before := time.Now().UnixMilli()
	one := idempotentClient(t, []string{n.addr})
	two := idempotentClient(t, []string{n.addr})
	plain := idempotentClient(t, []string{n.addr}, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	produce := func(cl *kgo.Client, p int32, count int) {
		for i := range count {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "p", Partition: p, Value: fmt.Appendf(nil, "%d", i)}).FirstErr())
		}
	}
	produce(one, 0, 4)
	produce(two, 0, 2)
	produce(one, 1, 3)
	produce(plain, 2, 5)
	after := time.Now().UnixMilli()
	pid1, epoch1, err := one.ProducerID(ctx)
	require.NoError(t, err)
	pid2, epoch2, err := two.ProducerID(ctx)
	require.NoError(t, err)
	require.NotEqual(t, pid1, pid2)

	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: "p", Partitions: []int32{0, 1, 2, 9}}, {Topic: "unknown", Partitions: []int32{0}}}
	resp := adminDo[*kmsg.DescribeProducersResponse](t, adminDial(t, n.addr), 0, req)
	got := producersOf(t, resp, "p")
	require.Len(t, got, 4)
	check := func(p int32, want map[int64][2]int32) {
		t.Helper()
		require.Zero(t, got[p].ErrorCode, "partition %d", p)
		have := map[int64][2]int32{}
		for _, ap := range got[p].ActiveProducers {
			have[ap.ProducerID] = [2]int32{ap.ProducerEpoch, ap.LastSequence}
			require.Equal(t, int32(-1), ap.CoordinatorEpoch)
			require.Equal(t, int64(-1), ap.CurrentTxnStartOffset)
			require.GreaterOrEqual(t, ap.LastTimestamp, before)
			require.LessOrEqual(t, ap.LastTimestamp, after)
		}
		require.Equal(t, want, have, "partition %d", p)
	}
	check(0, map[int64][2]int32{pid1: {int32(epoch1), 3}, pid2: {int32(epoch2), 1}})
	check(1, map[int64][2]int32{pid1: {int32(epoch1), 2}})
	check(2, map[int64][2]int32{})
	require.Equal(t, errUnknownTopicOrPartition, got[9].ErrorCode)
	require.NotNil(t, got[9].ErrorMessage)
	unknown := producersOf(t, resp, "unknown")
	require.Equal(t, errUnknownTopicOrPartition, unknown[0].ErrorCode)
	require.Contains(t, *unknown[0].ErrorMessage, "unknown")

	// franz-go shards the request to each partition's leader: this one.
	req.Topics = req.Topics[:1]
	req.Topics[0].Partitions = []int32{0, 1}
	kresp := adminKgo[*kmsg.DescribeProducersResponse](t, one, req)
	kgot := producersOf(t, kresp, "p")
	require.Len(t, kgot[0].ActiveProducers, 2)
	require.Len(t, kgot[1].ActiveProducers, 1)
}

// A standalone broker has no controller quorum: DescribeQuorum is
// answered, at every version, with UNKNOWN_TOPIC_OR_PARTITION for the
// metadata partition (from v2 with a message), as for any partition
// other than __cluster_metadata-0 on any broker.
func TestDescribeQuorumStandalone(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	c := adminDial(t, n.addr)
	for v := int16(0); v <= 2; v++ {
		for _, tp := range []struct {
			topic string
			parts []int32
		}{{"__cluster_metadata", []int32{0}}, {"__cluster_metadata", []int32{1}}, {"other", []int32{0, 3}}} {
			req := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = tp.topic
			for _, p := range tp.parts {
				rt.Partitions = append(rt.Partitions, kmsg.DescribeQuorumRequestTopicPartition{Partition: p})
			}
			req.Topics = append(req.Topics, rt)
			resp := adminDo[*kmsg.DescribeQuorumResponse](t, c, v, req)
			require.Zero(t, resp.ErrorCode)
			require.Len(t, resp.Topics, 1)
			require.Equal(t, tp.topic, resp.Topics[0].Topic)
			var parts []int32
			for _, p := range resp.Topics[0].Partitions {
				parts = append(parts, p.Partition)
				require.Equal(t, errUnknownTopicOrPartition, p.ErrorCode, "v%d %s", v, tp.topic)
				if v >= 2 {
					require.NotNil(t, p.ErrorMessage)
				}
				require.Empty(t, p.CurrentVoters)
			}
			require.True(t, slices.Equal(tp.parts, parts))
		}
	}
}
