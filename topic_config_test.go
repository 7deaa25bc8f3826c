package spool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
)

func TestAlterTopicConfigAppliesAndPersists(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{Topic: TopicConfig{RetentionBytes: 1 << 30}})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 2, SegmentBytes: 1024, DeleteRetention: time.Hour}))
	old := time.Now().Add(-time.Hour)
	for i := 0; i < 200; i++ {
		_, err := b.Produce(ctx, Record{Topic: "t", Partition: int32(i % 2), Timestamp: old, Value: make([]byte, 50)})
		require.NoError(t, err)
	}
	own, eff, err := b.TopicSettings("t")
	require.NoError(t, err)
	require.Equal(t, TopicConfig{SegmentBytes: 1024, DeleteRetention: time.Hour}, own)
	require.Equal(t, int32(2), eff.Partitions)
	require.Equal(t, log.DefaultRetentionTime, eff.RetentionTime)
	require.Equal(t, int64(1<<30), eff.RetentionBytes) // the broker's default

	// Retention now a minute: the old records' segments go at the next
	// round, on every partition.
	require.NoError(t, b.AlterTopicConfig(ctx, "t", func(c TopicConfig) (TopicConfig, error) {
		c.RetentionTime = time.Minute
		c.DeleteRetention = 0 // back to the default
		return c, nil
	}))
	b.maintain()
	d, err := b.DescribeTopic("t")
	require.NoError(t, err)
	for _, p := range d.Partitions {
		require.Greater(t, p.StartOffset, int64(0), "partition %d", p.Partition)
	}
	require.Equal(t, time.Minute, d.Config.RetentionTime)
	require.Equal(t, log.DefaultDeleteRetention, d.Config.DeleteRetention)
	require.NoError(t, b.Close())

	// The registry has it.
	b = openBroker(t, dir, Options{})
	defer b.Close()
	own, eff, err = b.TopicSettings("t")
	require.NoError(t, err)
	require.Equal(t, TopicConfig{SegmentBytes: 1024, RetentionTime: time.Minute}, own)
	require.Equal(t, time.Minute, eff.RetentionTime)
	require.Equal(t, int64(log.Unlimited), eff.RetentionBytes)
}

func TestAlterTopicConfigRejects(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{RetentionTime: time.Hour}))
	keep := func(c TopicConfig) (TopicConfig, error) { return c, nil }

	require.ErrorIs(t, b.AlterTopicConfig(ctx, "nope", keep), ErrUnknownTopic)
	_, _, err := b.TopicSettings("nope")
	require.ErrorIs(t, err, ErrUnknownTopic)
	for _, bad := range []TopicConfig{
		{SegmentBytes: 10},            // below a batch header: the log refuses it
		{MaxMessageBytes: 20},         // same
		{CleanupPolicy: "sometimes"},  // unknown policy
		{MinCleanableDirtyRatio: 2},   // out of [0, 1]
		{SegmentAge: -time.Second},    // negative
		{SegmentBytes: 1<<31 + 1<<20}, // over a segment's 32-bit positions
	} {
		err := b.AlterTopicConfig(ctx, "t", func(TopicConfig) (TopicConfig, error) { return bad, nil })
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", bad)
		require.ErrorIs(t, b.CheckTopicConfig(bad), ErrInvalidConfig)
		// CreateTopic refuses it too, recording nothing.
		require.ErrorIs(t, b.CreateTopic(ctx, "bad", bad), ErrInvalidConfig, "%+v", bad)
		require.NotContains(t, b.Topics(), "bad")
	}
	boom := errors.New("boom")
	require.ErrorIs(t, b.AlterTopicConfig(ctx, "t", func(TopicConfig) (TopicConfig, error) { return TopicConfig{}, boom }), boom)
	own, _, err := b.TopicSettings("t")
	require.NoError(t, err)
	require.Equal(t, TopicConfig{RetentionTime: time.Hour}, own)
	require.NoError(t, b.CheckTopicConfig(TopicConfig{}))

	// The offsets topic stays compacted.
	_, err = b.offsetsTopic(ctx)
	require.NoError(t, err)
	err = b.AlterTopicConfig(ctx, OffsetsTopic, func(c TopicConfig) (TopicConfig, error) {
		c.CleanupPolicy = CleanupDelete
		return c, nil
	})
	require.ErrorIs(t, err, ErrInvalidConfig)

	require.True(t, b.AutoCreateTopics())
	require.Equal(t, int32(1), b.Options().DefaultPartitions)
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.AlterTopicConfig(ctx, "t", keep), ErrClosed)
	b = openBroker(t, dir, Options{AutoCreateTopics: Disabled})
	defer b.Close()
	require.False(t, b.AutoCreateTopics())
}
