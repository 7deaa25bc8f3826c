package transport

import (
	"context"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A consumer of many partitions, each of several segments, reads every
// record by sendfile from a broker that keeps 4 segment files open: a
// span's file stays open from the moment the fetch finds it until its bytes
// are sent, whatever the other partitions' reads close meanwhile.
func TestFetchManyPartitionsThroughFewFiles(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{Flush: log.None, MaxOpenSegmentFiles: 4}, Options{})
	const topic, parts, size = "few-files", 16, 200
	require.NoError(t, b.CreateTopic(context.Background(), topic, spool.TopicConfig{Partitions: parts, SegmentBytes: 4096}))
	ends := map[int32]int64{}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	want := 0
	for p := int32(0); p < parts; p++ {
		fetchAppend(t, b, topic, p, 30, 3, size)
		bp, err := b.Partition(topic, p)
		require.NoError(t, err)
		require.Greater(t, bp.Log().NumSegments(), 2)
		ends[p] = bp.HighWatermark()
		want += int(ends[p])
		offsets[topic][p] = kgo.NewOffset().At(0)
	}
	before := fetchSendfileBytes.Load()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(offsets),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxPartitionBytes(3000), kgo.FetchMaxBytes(20000))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := map[int32]int64{}
	for got := 0; got < want; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, next[r.Partition], r.Offset, "partition %d", r.Partition)
			require.Equal(t, fetchValue(topic, r.Partition, r.Offset, size), r.Value)
			next[r.Partition]++
			got++
		})
	}
	require.Equal(t, ends, next)
	require.Greater(t, fetchSendfileBytes.Load(), before, "the records went by sendfile")
}
