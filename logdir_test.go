package spool

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/stretchr/testify/require"
)

// A standalone broker's data directory is one log directory, named by its
// absolute path (a relative --data included), holding every open
// partition with its size; a partition that could not be opened is left
// out; a closed broker describes nothing.
func TestDescribeLogDirStandalone(t *testing.T) {
	t.Chdir(t.TempDir())
	opts := Options{Partitioner: partition.ManualPartitioner(), Flush: log.None}
	b := openBroker(t, "data", opts)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "b", TopicConfig{Partitions: 2}))
	require.NoError(t, b.CreateTopic(ctx, "a", TopicConfig{}))
	for i := range 7 {
		_, err := b.Produce(ctx, Record{Topic: "b", Partition: int32(i % 2), Value: fmt.Appendf(nil, "value %d", i)})
		require.NoError(t, err)
	}

	d, err := b.DescribeLogDir()
	require.NoError(t, err)
	abs, err := filepath.Abs("data")
	require.NoError(t, err)
	require.Equal(t, abs, d.Path)
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		require.Positive(t, d.UsableBytes)
		require.GreaterOrEqual(t, d.TotalBytes, d.UsableBytes)
	} else {
		require.Equal(t, int64(-1), d.TotalBytes)
		require.Equal(t, int64(-1), d.UsableBytes)
	}
	size := func(topic string, p int32) int64 {
		desc, err := b.DescribeTopic(topic)
		require.NoError(t, err)
		return desc.Partitions[p].Size
	}
	want := []ReplicaLog{{Topic: "a", Partition: 0, Size: 0}, {Topic: "b", Partition: 0, Size: size("b", 0)}, {Topic: "b", Partition: 1, Size: size("b", 1)}}
	require.Equal(t, want, d.Replicas)
	require.Positive(t, want[1].Size)
	require.Positive(t, want[2].Size)
	require.Less(t, want[2].Size, want[1].Size, "3 records against 4")

	// Partition b-1 cannot be opened (its directory belongs to another
	// topic): it is left out, the others are described.
	require.NoError(t, b.Close())
	_, err = b.DescribeLogDir()
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, writePartitionMeta(filepath.Join("data", "b-1"), newTopicID()))
	b = openBroker(t, "data", opts)
	defer b.Close()
	d, err = b.DescribeLogDir()
	require.NoError(t, err)
	require.Equal(t, want[:2], d.Replicas)
}

// A node of a cluster describes its own replicas: all of a topic
// replicated to every node, none of one placed elsewhere, each with no
// lag once the followers have caught up.
func TestDescribeLogDirCluster(t *testing.T) {
	_, bs, _ := threeNodes(t, log.None)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, bs[0].CreateTopic(ctx, "everywhere", TopicConfig{Partitions: 2, ReplicationFactor: 3}))
	p, err := bs[0].NewProducer(ProducerConfig{})
	require.NoError(t, err)
	defer p.Close()
	produceAcked(t, p, "everywhere", "v", 20)

	require.Eventually(t, func() bool {
		for _, b := range bs {
			d, err := b.DescribeLogDir()
			require.NoError(t, err)
			var mine []ReplicaLog
			for _, r := range d.Replicas {
				if r.Topic == "everywhere" {
					mine = append(mine, r)
				}
			}
			if len(mine) != 2 {
				return false
			}
			for _, r := range mine {
				part, err := b.route("everywhere").partition("everywhere", r.Partition)
				require.NoError(t, err)
				if r.OffsetLag != 0 || r.Size != part.Log().Size() || part.HighWatermark() != part.EndOffset() {
					return false
				}
			}
			require.Equal(t, b.Dir(), d.Path)
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every node holds both partitions, caught up")
}
