package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spoolmq/spool/quota"
)

// These tests check that each Close joins the goroutines its object
// started: goleak compares the goroutines after Close with those before
// the object was opened (IgnoreCurrent), so goroutines of other tests or of
// an object the test keeps open do not count.

func TestBrokerCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b, err := Open(t.TempDir(), Options{RetentionCheckInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 2, CleanupPolicy: CleanupCompact}))
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	for i := range 10 {
		p.Produce(ctx, Record{Topic: "t", Key: []byte{byte(i % 3)}, Value: []byte("v")}, nil)
	}
	require.NoError(t, p.Close())
	require.Len(t, consumeAll(t, b, "t"), 10)
	require.NoError(t, b.Close())
}

func TestProducerCloseLeavesNoGoroutines(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 4}))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 20 {
		p, err := b.NewProducer(ProducerConfig{Linger: -1})
		require.NoError(t, err)
		for i := range 40 {
			p.Produce(ctx, Record{Topic: "t", Partition: int32(i % 4), Value: []byte("v")}, nil)
		}
		require.NoError(t, p.Close())
		// Close returned: no sender may run on. Checked at once, not
		// eventually, as goleak would.
		p.mu.Lock()
		for _, pt := range p.topics {
			for _, a := range pt.accums {
				require.False(t, a.sending, "a sender of %s-%d outlived Close", a.topic, a.id)
			}
		}
		p.mu.Unlock()
	}
}

func TestConsumerCloseLeavesNoGoroutines(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 2}))
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	for range 10 {
		p.Produce(ctx, Record{Topic: "t", Value: []byte("v")}, nil)
	}
	require.NoError(t, p.Close())
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	c, err := b.NewConsumer(ConsumerConfig{AutoOffsetReset: ResetEarliest, FetchMaxWait: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Assign("t"))
	_, err = c.Poll(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())

	g, err := b.NewConsumer(ConsumerConfig{Group: "g", Topics: []string{"t"}, AutoOffsetReset: ResetEarliest,
		FetchMaxWait: 10 * time.Millisecond, HeartbeatInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < 10 && time.Now().Before(deadline); {
		recs, err := g.Poll(ctx)
		require.NoError(t, err)
		got += len(recs)
	}
	require.Equal(t, 10, got)
	require.NoError(t, g.Close())
}

func TestShareConsumerCloseLeavesNoGoroutines(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "jobs", TopicConfig{}))
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	p.Produce(ctx, Record{Topic: "jobs", Value: []byte("job")}, nil)
	require.NoError(t, p.Close())
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	c, err := b.NewShareConsumer(ShareConsumerConfig{Group: "workers", Topics: []string{"jobs"}, FetchMaxWait: 10 * time.Millisecond})
	require.NoError(t, err)
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, c.Ack(ctx, recs...))
	require.NoError(t, c.Close())
}

func TestClusterCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := NewLocalCluster(ClusterOptions{SessionTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		ReplicaLagTime: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, FetchBackoff: 50 * time.Millisecond})
	root := t.TempDir()
	var bs []*Broker
	for id := int32(1); id <= 3; id++ {
		b, err := Open(filepath.Join(root, fmt.Sprintf("node-%d", id)), Options{Cluster: c, NodeID: id})
		require.NoError(t, err)
		bs = append(bs, b)
	}
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "t", TopicConfig{Partitions: 2, ReplicationFactor: 3}))
	p, err := bs[0].NewProducer(ProducerConfig{Acks: AcksAll, Linger: time.Millisecond})
	require.NoError(t, err)
	produceAcked(t, p, "t", "v", 20)
	require.NoError(t, p.Close())
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	require.NoError(t, c.Close())
}

// TestProducerCloseJoinsASenderItGaveUpOn makes Close's flush time out
// while a sender waits out a quota, so that Close stops it: when Close
// returns, the sender has ended and reported its records - none is left
// running, or calls back, after Close.
func TestProducerCloseJoinsASenderItGaveUpOn(t *testing.T) {
	m, err := quota.New(quota.Config{Quotas: map[quota.Entity]map[quota.Key]float64{
		{HasClient: true, ClientID: "slow"}: {quota.ProducerByteRate: 100},
	}})
	require.NoError(t, err)
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	p, err := b.NewProducer(ProducerConfig{Quota: m, ClientID: "slow", Linger: -1, DeliveryTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	var called atomic.Int32
	for range 3 {
		p.Produce(ctx, Record{Topic: "t", Value: make([]byte, 4<<10)}, func(RecordMetadata, error) { called.Add(1) })
	}
	require.ErrorIs(t, p.Close(), context.DeadlineExceeded, "the quota holds the sender past DeliveryTimeout")
	require.EqualValues(t, 3, called.Load(), "every callback ran before Close returned")
	p.mu.Lock()
	defer p.mu.Unlock()
	require.False(t, p.topics["t"].accums[0].sending, "the sender ended before Close returned")
}

// A broker's partitions run no goroutine each: their logs' flushes and
// checkpoints share the broker's scheduler. Opening 64 partitions starts
// about as many goroutines as opening one.
func TestManyPartitionsStartNoGoroutineEach(t *testing.T) {
	const many = 64
	grown := func(partitions int32) int {
		dir := t.TempDir()
		b := openBroker(t, dir, Options{})
		require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: partitions}))
		require.NoError(t, b.Close())
		before := runtime.NumGoroutine()
		b = openBroker(t, dir, Options{})
		defer b.Close()
		return runtime.NumGoroutine() - before
	}
	one, all := grown(1), grown(many)
	// The scheduler's workers come and go with the work; a goroutine per
	// partition would be 63 more.
	require.LessOrEqual(t, all-one, 8, "goroutines for 1 partition: %d, for %d: %d", one, many, all)
}

// A failed Open closes every partition it opened, concurrently as they
// were, and stops their scheduler: nothing runs on, and nothing holds a
// log's directory - the next Open opens them all.
func TestFailedOpenLeavesNoGoroutines(t *testing.T) {
	dir := t.TempDir()
	opts := Options{OffsetsTopicPartitions: 8}
	b := openBroker(t, dir, opts)
	require.NoError(t, b.PrepareGroups(context.Background()))
	require.NoError(t, b.Close())
	meta := filepath.Join(dir, OffsetsTopic+"-5", partitionMetaFile)
	good, err := os.ReadFile(meta)
	require.NoError(t, err)
	require.NoError(t, writePartitionMeta(filepath.Dir(meta), newTopicID()))

	func() {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		_, err = Open(dir, opts)
		require.ErrorContains(t, err, OffsetsTopic+"-5")
	}()
	require.NoError(t, os.WriteFile(meta, good, 0o644))
	b = openBroker(t, dir, opts)
	require.NoError(t, b.Close())
}
