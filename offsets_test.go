package spool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's Utils.abs(groupId.hashCode()) % 50 for these ids, as the JDK
// computes it (java 17: String.hashCode, then Math.abs, % 50).
func TestOffsetsPartitionMatchesKafka(t *testing.T) {
	for id, want := range map[string]int32{
		"":                       0,
		"a":                      47,
		"hello":                  22,
		"my-consumer-group":      13,
		"grüße":                  23,
		"😀":                      49,
		"console-consumer-12345": 6,
	} {
		require.Equal(t, want, offsetsPartitionFor(id, 50), "%q", id)
	}
}

// Our records decode with franz-go's kmsg definitions of Kafka's
// OffsetCommitKey and OffsetCommitValue: the topic is readable by Kafka's
// tools.
func TestOffsetRecordsAreKafkas(t *testing.T) {
	tp := group.TopicPartition{Topic: "orders", Partition: 7}
	key := encodeOffsetKey("g1", tp)
	var k kmsg.OffsetCommitKey
	require.NoError(t, k.ReadFrom(key))
	require.Equal(t, int16(1), k.Version)
	require.Equal(t, "g1", k.Group)
	require.Equal(t, "orders", k.Topic)
	require.Equal(t, int32(7), k.Partition)

	now := time.UnixMilli(1_700_000_000_123)
	val := encodeOffsetValue(group.OffsetAndMetadata{Offset: 42, LeaderEpoch: 3, Metadata: "m", CommitTime: now})
	var v kmsg.OffsetCommitValue
	require.NoError(t, v.ReadFrom(val))
	require.Equal(t, int16(3), v.Version)
	require.Equal(t, int64(42), v.Offset)
	require.Equal(t, int32(3), v.LeaderEpoch)
	require.Equal(t, "m", v.Metadata)
	require.Equal(t, now.UnixMilli(), v.CommitTimestamp)

	g, gotTP, ok, err := decodeOffsetKey(key)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "g1", g)
	require.Equal(t, tp, gotTP)
	o, err := decodeOffsetValue(val)
	require.NoError(t, err)
	require.Equal(t, int64(42), o.Offset)
	require.Equal(t, "m", o.Metadata)

	for i := 0; i < len(key); i++ {
		_, _, _, err := decodeOffsetKey(key[:i])
		require.Error(t, err, "prefix %d", i)
	}
	for i := 0; i < len(val); i++ {
		_, err := decodeOffsetValue(val[:i])
		require.Error(t, err, "prefix %d", i)
	}
}

// Committed offsets survive a restart: they are in __consumer_offsets, a
// compacted topic, and loaded on Open.
func TestCommittedOffsetsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{OffsetsTopicPartitions: 5})
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 2}))
	for i := int64(0); i < 20; i++ {
		_, err := b.Groups().CommitOffsets(group.CommitRequest{Group: fmt.Sprint("g", i%3), Generation: -1,
			Offsets: map[group.TopicPartition]group.OffsetAndMetadata{{Topic: "t", Partition: int32(i % 2)}: {Offset: i, Metadata: "m"}}})
		require.NoError(t, err)
	}
	_, err := b.Groups().DeleteOffsets("g2", []group.TopicPartition{{Topic: "t", Partition: 0}})
	require.NoError(t, err)
	d, err := b.DescribeTopic(OffsetsTopic)
	require.NoError(t, err)
	require.True(t, d.Internal)
	require.Equal(t, CleanupCompact, d.Config.CleanupPolicy)
	require.Len(t, d.Partitions, 5)
	want := map[string]map[group.TopicPartition]group.OffsetAndMetadata{}
	for _, g := range []string{"g0", "g1", "g2"} {
		want[g], err = b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
	}
	require.Len(t, want["g2"], 1)
	// Compaction keeps exactly the latest commit per key.
	_, err = b.Compact(context.Background(), OffsetsTopic)
	require.NoError(t, err)
	require.NoError(t, b.Close())

	b = openBroker(t, dir, Options{OffsetsTopicPartitions: 5})
	defer b.Close()
	for g, w := range want {
		got, err := b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
		require.Len(t, got, len(w), g)
		for tp, o := range w {
			require.Equal(t, o.Offset, got[tp].Offset, "%s %v", g, tp)
			require.Equal(t, o.Metadata, got[tp].Metadata)
		}
	}
	require.ErrorIs(t, b.CreateTopic(context.Background(), OffsetsTopic, TopicConfig{}), ErrInvalidTopic)
}

func TestCompactedTopic(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "table", TopicConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 2048}))
	_, err := b.Compact(ctx, "table")
	require.NoError(t, err)
	for i := 0; i < 500; i++ {
		_, err := b.Produce(ctx, Record{Topic: "table", Key: []byte(fmt.Sprint("k", i%10)), Value: []byte(fmt.Sprint("v", i))})
		require.NoError(t, err)
	}
	p, _ := b.Partition("table", 0)
	require.NoError(t, p.Log().Roll())
	st, err := b.Compact(ctx, "table")
	require.NoError(t, err)
	require.True(t, st.Cleaned)
	recs := consumeAll(t, b, "table")
	require.Len(t, recs, 10)
	for _, r := range recs {
		var k, v int
		fmt.Sscanf(string(r.Key), "k%d", &k)
		fmt.Sscanf(string(r.Value), "v%d", &v)
		require.Equal(t, 490+k, v, "latest value of %s", r.Key)
	}
	require.NoError(t, b.CreateTopic(ctx, "plain", TopicConfig{}))
	_, err = b.Compact(ctx, "plain")
	require.ErrorIs(t, err, ErrInvalidConfig)
	_ = log.Compact
}
