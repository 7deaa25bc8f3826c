package spool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/share"
	"github.com/stretchr/testify/require"
)

var shareOptions = Options{OffsetsTopicPartitions: 3, ShareLockDuration: 300 * time.Millisecond, ShareDeliveryLimit: 3}

func shareConfig(topics ...string) ShareConsumerConfig {
	return ShareConsumerConfig{Group: "q", Topics: topics, FetchMaxWait: 20 * time.Millisecond, MaxRecords: 50}
}

func newShareConsumer(t testing.TB, b *Broker, cfg ShareConsumerConfig) *ShareConsumer {
	t.Helper()
	c, err := b.NewShareConsumer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// acks counts successful acknowledgements per offset.
type acks struct {
	mu sync.Mutex
	n  map[int64]int
}

func (a *acks) add(recs []ShareRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range recs {
		a.n[r.Offset]++
	}
}

func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.n)
}

// Eight consumers on one partition: every record is acknowledged exactly
// once. One of them takes a batch and dies without acknowledging it or
// closing: its records go to the others once their locks expire (not
// before), with a delivery count of 2.
func TestShareGroupEightConsumersOnePartition(t *testing.T) {
	opts := shareOptions
	opts.ShareLockDuration = time.Second // long enough not to expire under a loaded machine's acknowledgements
	b := openBroker(t, t.TempDir(), opts)
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "jobs", TopicConfig{Partitions: 1}))
	const n = 2000
	produceN(t, b, "jobs", 0, n)

	// The one that dies: it takes a batch and is never heard from again.
	dead, err := b.NewShareConsumer(shareConfig("jobs"))
	require.NoError(t, err)
	// The locks are taken inside Poll, so no earlier than this: a redelivery
	// measured from here comes no sooner than a lock duration later, however
	// slowly Poll returns on a loaded machine.
	diedAt := time.Now()
	orphaned, err := dead.Poll(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, orphaned)

	got := &acks{n: map[int64]int{}}
	var mu sync.Mutex
	redelivered := map[int64]time.Duration{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 7 {
		c := newShareConsumer(t, b, shareConfig("jobs"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				recs, err := c.Poll(ctx)
				if err != nil {
					return
				}
				for _, r := range recs {
					if r.DeliveryCount > 1 {
						mu.Lock()
						redelivered[r.Offset] = time.Since(diedAt)
						mu.Unlock()
					}
				}
				err = c.Ack(ctx, recs...)
				if errors.Is(err, share.ErrInvalidRecordState) {
					continue // a lock expired on a loaded machine: another has them
				}
				if err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				got.add(recs)
			}
		}()
	}
	require.Eventually(t, func() bool { return got.count() == n }, 30*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
	for off, k := range got.n {
		require.Equal(t, 1, k, "offset %d acknowledged %d times", off, k)
	}
	for _, r := range orphaned {
		require.Contains(t, redelivered, r.Offset)
		require.GreaterOrEqual(t, redelivered[r.Offset], opts.ShareLockDuration-10*time.Millisecond, "not before the lock expired") // 10ms: a millisecond clock's rounding
	}
	// The dead consumer's late acknowledgement is refused.
	err = dead.Ack(context.Background(), orphaned[0])
	require.ErrorIs(t, err, share.ErrInvalidRecordState)
}

// A record that is never processed - released, or its consumer dies on it
// each time - is archived at the delivery limit and copied to the dead
// letter topic with where it came from; the others flow past it.
func TestShareGroupPoisonRecordIsDeadLettered(t *testing.T) {
	b := openBroker(t, t.TempDir(), shareOptions)
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "jobs", TopicConfig{Partitions: 1}))
	require.NoError(t, b.CreateTopic(ctx, "jobs.dlq", TopicConfig{Partitions: 1}))
	produceN(t, b, "jobs", 0, 10) // v3 is the poison
	cfg := shareConfig("jobs")
	cfg.DeadLetterTopic = "jobs.dlq"
	done := map[string]bool{}
	deliveries := 0
	for len(done) < 9 || deliveries < 3 {
		c := newShareConsumer(t, b, cfg)
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			if string(r.Value) != "v3" {
				require.NoError(t, c.Ack(ctx, r))
				done[string(r.Value)] = true
				continue
			}
			deliveries++
			require.Equal(t, deliveries, r.DeliveryCount)
			if deliveries%2 == 1 {
				require.NoError(t, c.Release(ctx, r))
			} else {
				// Dies on it: the lock expires.
				time.Sleep(350 * time.Millisecond)
			}
		}
	}
	// Past the limit it is never delivered again.
	c := newShareConsumer(t, b, cfg)
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Equal(t, 3, deliveries)

	dlq, err := b.NewConsumer(ConsumerConfig{AutoOffsetReset: ResetEarliest, FetchMaxWait: 20 * time.Millisecond})
	require.NoError(t, err)
	defer dlq.Close()
	require.NoError(t, dlq.Assign("jobs.dlq"))
	var dead []Record
	require.Eventually(t, func() bool {
		rs, err := dlq.Poll(ctx)
		require.NoError(t, err)
		dead = append(dead, rs...)
		return len(dead) > 0
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, dead, 1)
	require.Equal(t, "v3", string(dead[0].Value))
	hs := map[string]string{}
	for _, h := range dead[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	require.Equal(t, map[string]string{"spool.dlq.topic": "jobs", "spool.dlq.partition": "0", "spool.dlq.offset": "3", "spool.dlq.delivery.count": "3"}, hs)
}

// After a restart, acknowledged records are never delivered again;
// records delivered but not acknowledged are, with their delivery counts
// kept.
func TestShareGroupStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, shareOptions)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "jobs", TopicConfig{Partitions: 2}))
	produceN(t, b, "jobs", 0, 40)
	c, err := b.NewShareConsumer(shareConfig("jobs"))
	require.NoError(t, err)
	var first []ShareRecord
	for len(first) < 40 {
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		first = append(first, recs...)
	}
	acked := map[string]bool{}
	var toAck []ShareRecord
	for i, r := range first {
		if i%3 != 0 {
			toAck = append(toAck, r)
			acked[fmt.Sprint(r.Partition, "/", r.Offset)] = true
		}
	}
	require.NoError(t, c.Ack(ctx, toAck...))
	require.NoError(t, b.Close()) // no consumer Close: as a crash leaves it

	b = openBroker(t, dir, shareOptions)
	defer b.Close()
	c2 := newShareConsumer(t, b, shareConfig("jobs"))
	var again []ShareRecord
	require.Eventually(t, func() bool {
		recs, err := c2.Poll(ctx)
		require.NoError(t, err)
		again = append(again, recs...)
		return len(again) >= 40-len(toAck)
	}, 5*time.Second, 10*time.Millisecond)
	require.Len(t, again, 40-len(toAck))
	for _, r := range again {
		require.False(t, acked[fmt.Sprint(r.Partition, "/", r.Offset)], "acknowledged %d/%d delivered again", r.Partition, r.Offset)
		require.Equal(t, 2, r.DeliveryCount)
	}
	require.NoError(t, c2.Ack(ctx, again...))
	recs, err := c2.Poll(ctx)
	require.NoError(t, err)
	require.Empty(t, recs)
}

// Acknowledgements that are not the consumer's to make are refused with
// share's errors and change nothing; so is bad configuration.
func TestShareGroupRefusals(t *testing.T) {
	b := openBroker(t, t.TempDir(), shareOptions)
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "jobs", TopicConfig{Partitions: 1}))
	produceN(t, b, "jobs", 0, 4)
	a := newShareConsumer(t, b, shareConfig("jobs"))
	other := newShareConsumer(t, b, shareConfig("jobs"))
	recs, err := a.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	snapshot := func() []byte {
		b.shares.mu.Lock()
		defer b.shares.mu.Unlock()
		return b.shares.parts[shareKey{"q", "jobs", 0}].p.Snapshot()
	}
	before := snapshot()

	require.ErrorIs(t, other.Ack(ctx, recs[0]), share.ErrInvalidRecordState, "another consumer's")
	require.ErrorIs(t, a.Ack(ctx, recs[1], recs[1]), share.ErrInvalidRequest, "twice in one call")
	never := recs[0]
	never.Offset = 99
	require.ErrorIs(t, a.Ack(ctx, recs[0], never), share.ErrInvalidRecordState, "never delivered: all or none")
	unknown := recs[0]
	unknown.Topic = "nope"
	require.ErrorIs(t, a.Ack(ctx, unknown), share.ErrInvalidRecordState)
	require.ErrorIs(t, a.Acknowledge(ctx, share.Gap, recs[0]), ErrInvalidConfig)
	require.Equal(t, before, snapshot(), "the refusals changed nothing")

	require.NoError(t, a.Ack(ctx, recs[0]))
	require.ErrorIs(t, a.Ack(ctx, recs[0]), share.ErrInvalidRecordState, "acknowledged already")
	require.NoError(t, a.Renew(ctx, recs[1]))
	require.NoError(t, a.Reject(ctx, recs[1]))
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Ack(ctx, recs[2]), ErrClosed)
	_, err = a.Poll(ctx)
	require.ErrorIs(t, err, ErrClosed)
	// Close released the rest: the other consumer has them now.
	got, err := other.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)

	for name, cfg := range map[string]ShareConsumerConfig{
		"no group":    {Topics: []string{"jobs"}},
		"no topics":   {Group: "q"},
		"bad dlq":     {Group: "q", Topics: []string{"jobs"}, DeadLetterTopic: "missing"},
		"bad topic":   {Group: "q", Topics: []string{"bad/name"}},
		"max records": {Group: "q", Topics: []string{"jobs"}, MaxRecords: -1},
	} {
		_, err := b.NewShareConsumer(cfg)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrInvalidTopic), "%s: %v", name, err)
	}
}
