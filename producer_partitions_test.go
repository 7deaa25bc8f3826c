package spool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/stretchr/testify/require"
)

// TestProducerManyPartitionsKeepsOrder produces round-robin over more
// partitions than one sender takes at once, so that the pool's senders
// share them: each partition's callbacks still come in the order of the
// Produce calls, with offsets 0, 1, 2, ... and no record is lost. The
// first round is delivered by Linger alone, without Flush. Under the Sync
// flush policy the pool has many senders, under None few.
func TestProducerManyPartitionsKeepsOrder(t *testing.T) {
	for _, flush := range []log.FlushPolicy{log.Sync, log.None} {
		t.Run(fmt.Sprint(flush), func(t *testing.T) { testManyPartitionsOrder(t, flush) })
	}
}

func testManyPartitionsOrder(t *testing.T, flush log.FlushPolicy) {
	const parts, perPart = 40, 30
	b := openBroker(t, t.TempDir(), Options{Flush: flush})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: parts}))
	// Small batches, so that partitions have several queued at a time.
	p, err := b.NewProducer(ProducerConfig{Partitioner: partition.ManualPartitioner(), BatchBytes: 300, Linger: time.Millisecond})
	require.NoError(t, err)

	var mu sync.Mutex
	got := make([][]string, parts) // each partition's values, in callback order
	offsets := make([][]int64, parts)
	var fails []error
	var delivered sync.WaitGroup
	produce := func(n int32, v string) {
		delivered.Add(1)
		p.Produce(ctx, Record{Topic: "t", Partition: n, Value: []byte(v)}, func(md RecordMetadata, err error) {
			defer delivered.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, err)
				return
			}
			got[md.Partition] = append(got[md.Partition], v)
			offsets[md.Partition] = append(offsets[md.Partition], md.Offset)
		})
	}
	for n := range int32(parts) {
		produce(n, fmt.Sprint(0))
	}
	waitGroup(t, &delivered) // Linger writes them: no Flush
	for i := 1; i < perPart; i++ {
		for n := range int32(parts) {
			produce(n, fmt.Sprint(i))
		}
	}
	require.NoError(t, p.Flush(ctx))
	require.NoError(t, p.Close())

	require.Empty(t, fails)
	for n := range parts {
		require.Len(t, got[n], perPart, "partition %d", n)
		for i := range perPart {
			require.Equal(t, fmt.Sprint(i), got[n][i], "partition %d: callbacks out of Produce order", n)
			require.Equal(t, int64(i), offsets[n][i], "partition %d", n)
		}
	}
	recs := consumeAll(t, b, "t")
	require.Len(t, recs, parts*perPart)
}

// waitGroup waits for wg, failing the test if that takes longer than a
// minute (a hang, not a slow run).
func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("records not delivered")
	}
}

// holdSenders makes p believe its sender pool is full, so that no sender
// starts and the test decides when a ready batch is taken.
func holdSenders(p *Producer) {
	p.mu.Lock()
	p.senders = p.maxSenders
	p.mu.Unlock()
}

// releaseSender lets one sender run. The caller holds p.mu.
func releaseSender(p *Producer) {
	p.senders = 1
	p.goroutines.Go(p.sendLoop)
}

// offsetRecorder collects the offsets and errors Produce's callbacks
// report, from whichever goroutine runs them.
type offsetRecorder struct {
	mu      sync.Mutex
	offsets []int64
	errs    []error
}

func (r *offsetRecorder) callback(md RecordMetadata, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.offsets = append(r.offsets, md.Offset)
	if err != nil {
		r.errs = append(r.errs, err)
	}
}

// check asserts that no callback reported an error and that the offsets
// came in the order given.
func (r *offsetRecorder) check(t *testing.T, want ...int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.errs)
	require.Equal(t, want, r.offsets)
}

// TestProducerLingeredBatchTakesRecordsUntilSent checks the accumulator's
// rule for the broker's own partitions: a batch that has waited out Linger
// is queued for a sender but stays open, and a record produced before a
// sender takes it joins it. The test holds the senders back by letting
// the pool believe it is full, so that it decides when the batch is taken.
func TestProducerLingeredBatchTakesRecordsUntilSent(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}))
	// Linger long enough that only the test's sealDue finds the batch due.
	p, err := b.NewProducer(ProducerConfig{Linger: time.Hour})
	require.NoError(t, err)

	holdSenders(p)
	var rec offsetRecorder
	cb := rec.callback
	p.Produce(ctx, Record{Topic: "t", Value: []byte("a")}, cb)
	p.sealDue(time.Now().Add(2 * time.Hour))

	p.mu.Lock()
	a := p.topics["t"].accums[0]
	require.NotNil(t, a.open, "a lingered batch stays open until a sender takes it")
	require.True(t, a.sending)
	require.Equal(t, []*accum{a}, p.ready[p.readyOff:])
	p.mu.Unlock()

	p.Produce(ctx, Record{Topic: "t", Value: []byte("b")}, cb)
	p.mu.Lock()
	require.Equal(t, 2, a.open.bld.Len(), "the record joins the lingered batch")
	releaseSender(p)
	p.mu.Unlock()

	require.NoError(t, p.Flush(ctx))
	require.Equal(t, int64(1), p.Stats().Batches, "one batch written")
	rec.check(t, 0, 1)
	require.NoError(t, p.Close())
}

// TestProducerSyncGroupCommit: under the Sync flush policy with Linger at
// its default, a record makes its partition ready for a sender at once -
// no linger - with its batch still open, so that records produced until a
// sender takes it (here: while no sender may run) join it and go in one
// write and one fsync. An explicit Linger is waited out as under the other
// policies: the partition is not ready after a Produce.
func TestProducerSyncGroupCommit(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{Flush: log.Sync})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}))

	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	holdSenders(p)
	var rec offsetRecorder
	cb := rec.callback
	p.Produce(ctx, Record{Topic: "t", Value: []byte("a")}, cb)
	p.mu.Lock()
	a := p.topics["t"].accums[0]
	require.True(t, a.sending, "ready for a sender at once")
	require.Equal(t, []*accum{a}, p.ready[p.readyOff:])
	require.NotNil(t, a.open, "its batch still open")
	p.mu.Unlock()
	p.Produce(ctx, Record{Topic: "t", Value: []byte("b")}, cb)
	p.mu.Lock()
	require.Equal(t, 2, a.open.bld.Len(), "the next record joins the batch")
	releaseSender(p)
	p.mu.Unlock()
	require.NoError(t, p.Flush(ctx))
	require.Equal(t, int64(1), p.Stats().Batches, "one batch, one fsync")
	rec.check(t, 0, 1)
	require.NoError(t, p.Close())

	// An explicit Linger is waited out.
	p, err = b.NewProducer(ProducerConfig{Linger: time.Hour})
	require.NoError(t, err)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("c")}, cb)
	p.mu.Lock()
	require.False(t, p.topics["t"].accums[0].sending, "an explicit Linger: not ready yet")
	p.mu.Unlock()
	require.NoError(t, p.Flush(ctx))
	rec.check(t, 0, 1, 2)
	require.NoError(t, p.Close())
}
