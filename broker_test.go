package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

func openBroker(t testing.TB, dir string, opts Options) *Broker {
	t.Helper()
	b, err := Open(dir, opts)
	require.NoError(t, err)
	return b
}

// consumeAll reads every record of a topic from the start, up to the high
// watermarks at the call.
func consumeAll(t testing.TB, b *Broker, topic string) []Record {
	t.Helper()
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 10 * time.Millisecond, AutoOffsetReset: ResetEarliest})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign(topic))
	require.NoError(t, c.SeekToStart(topic))
	d, err := b.DescribeTopic(topic)
	require.NoError(t, err)
	done := func() bool {
		for _, p := range d.Partitions {
			pos, err := c.Position(topic, p.Partition)
			require.NoError(t, err)
			if pos < p.HighWatermark {
				return false
			}
		}
		return true
	}
	var out []Record
	for !done() {
		recs, err := c.Poll(context.Background())
		require.NoError(t, err)
		out = append(out, recs...)
	}
	return out
}

func TestProduceConsumeKeyedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "orders", TopicConfig{Partitions: 3}))

	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	const n = 3000
	var mu sync.Mutex
	acked := map[string]RecordMetadata{}
	var failed atomic.Int64
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("customer-%d", i%50)
		val := fmt.Sprintf("order-%d", i)
		p.Produce(ctx, Record{Topic: "orders", Key: []byte(key), Value: []byte(val)}, func(md RecordMetadata, err error) {
			if err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			acked[val] = md
			mu.Unlock()
		})
	}
	require.NoError(t, p.Flush(ctx))
	require.Zero(t, failed.Load())
	require.Len(t, acked, n)
	require.NoError(t, p.Close())

	recs := consumeAll(t, b, "orders")
	require.Len(t, recs, n)
	// Per partition, offsets are dense and in produce order; each key is
	// where murmur2 puts it.
	lastOrder := map[int32]int{}
	nextOffset := map[int32]int64{}
	for _, r := range recs {
		require.Equal(t, partition.KeyPartition(r.Key, 3), r.Partition, "key %s", r.Key)
		require.Equal(t, nextOffset[r.Partition], r.Offset)
		nextOffset[r.Partition]++
		var i int
		_, err := fmt.Sscanf(string(r.Value), "order-%d", &i)
		require.NoError(t, err)
		if prev, ok := lastOrder[r.Partition]; ok {
			require.Greater(t, i, prev, "produce order within a partition")
		}
		lastOrder[r.Partition] = i
		md := acked[string(r.Value)]
		require.Equal(t, r.Partition, md.Partition)
		require.Equal(t, r.Offset, md.Offset)
	}
	require.NoError(t, b.Close())

	// Reopen: everything is still there; a consumer resumes where told.
	b = openBroker(t, dir, Options{})
	defer b.Close()
	require.Equal(t, []string{"orders"}, b.Topics())
	require.Len(t, consumeAll(t, b, "orders"), n)
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Assign("orders", 1))
	require.NoError(t, c.Seek("orders", 1, nextOffset[1]-5))
	recs, err = c.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 5)
	require.Equal(t, nextOffset[1]-5, recs[0].Offset)
}

func TestSyncProduce(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{DefaultPartitions: 2})
	defer b.Close()
	ctx := context.Background()
	md, err := b.Produce(ctx, Record{Topic: "auto", Key: []byte("k"), Value: []byte("v")})
	require.NoError(t, err)
	require.Equal(t, partition.KeyPartition([]byte("k"), 2), md.Partition)
	require.Equal(t, int64(0), md.Offset)
	d, err := b.DescribeTopic("auto")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 2, "auto-created with DefaultPartitions")
	require.Equal(t, int64(1), d.Partitions[md.Partition].HighWatermark)
}

func TestTopicAdministration(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{AutoCreateTopics: Disabled})
	ctx := context.Background()

	for _, bad := range []string{"", ".", "..", "has space", "slash/y", string(make([]byte, 250)), "ünïcode"} {
		require.ErrorIs(t, b.CreateTopic(ctx, bad, TopicConfig{}), ErrInvalidTopic, "%q", bad)
	}
	require.NoError(t, b.CreateTopic(ctx, "a.b_c-1", TopicConfig{Partitions: 2, RetentionTime: time.Hour}))
	require.ErrorIs(t, b.CreateTopic(ctx, "a.b_c-1", TopicConfig{}), ErrTopicExists)
	require.ErrorIs(t, b.CreateTopic(ctx, "neg", TopicConfig{Partitions: -1}), ErrInvalidConfig)

	_, err := b.Produce(ctx, Record{Topic: "nope", Value: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	var got error
	p.Produce(ctx, Record{Topic: "nope"}, func(_ RecordMetadata, err error) { got = err })
	require.ErrorIs(t, got, ErrUnknownTopic)
	require.ErrorIs(t, p.Close(), ErrUnknownTopic, "Close reports what failed since the last Flush")

	d, err := b.DescribeTopic("a.b_c-1")
	require.NoError(t, err)
	require.Equal(t, time.Hour, d.Config.RetentionTime)
	require.Equal(t, int64(log.DefaultSegmentBytes), d.Config.SegmentBytes)

	// Grow: old data stays put.
	for i := 0; i < 10; i++ {
		_, err := b.Produce(ctx, Record{Topic: "a.b_c-1", Key: []byte(fmt.Sprint(i)), Value: []byte("x")})
		require.NoError(t, err)
	}
	before, _ := b.DescribeTopic("a.b_c-1")
	require.ErrorIs(t, b.CreatePartitions(ctx, "a.b_c-1", 2), ErrInvalidConfig)
	require.NoError(t, b.CreatePartitions(ctx, "a.b_c-1", 5))
	after, err := b.DescribeTopic("a.b_c-1")
	require.NoError(t, err)
	require.Len(t, after.Partitions, 5)
	for i := 0; i < 2; i++ {
		require.Equal(t, before.Partitions[i].EndOffset, after.Partitions[i].EndOffset)
	}
	require.Equal(t, int32(5), after.Config.Partitions)
	// New keys spread over all partitions.
	seen := map[int32]bool{}
	for i := 0; i < 200; i++ {
		md, err := b.Produce(ctx, Record{Topic: "a.b_c-1", Key: []byte(fmt.Sprint("k", i)), Value: []byte("x")})
		require.NoError(t, err)
		seen[md.Partition] = true
	}
	require.Len(t, seen, 5)
	require.NoError(t, b.Close())

	// Settings and partition counts survive a restart.
	b = openBroker(t, dir, Options{AutoCreateTopics: Disabled})
	d, err = b.DescribeTopic("a.b_c-1")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 5)
	require.Equal(t, time.Hour, d.Config.RetentionTime)
	id := d.ID

	// Delete, then recreate under the same name: a new topic, empty.
	require.NoError(t, b.DeleteTopic(ctx, "a.b_c-1"))
	require.ErrorIs(t, b.DeleteTopic(ctx, "a.b_c-1"), ErrUnknownTopic)
	_, err = os.Stat(filepath.Join(dir, "a.b_c-1-0"))
	require.True(t, errors.Is(err, os.ErrNotExist))
	require.NoError(t, b.CreateTopic(ctx, "a.b_c-1", TopicConfig{}))
	d, err = b.DescribeTopic("a.b_c-1")
	require.NoError(t, err)
	require.NotEqual(t, id, d.ID)
	require.Equal(t, int64(0), d.Partitions[0].EndOffset)
	require.NoError(t, b.Close())
}

// A crash between the registry update and the removal of a deleted topic's
// directories leaves directories whose topic ID the registry no longer
// knows; the next Open removes them. Directories without metadata are left.
func TestLeftoversOfDeletedTopicsAreRemoved(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{})
	require.NoError(t, b.CreateTopic(context.Background(), "keep", TopicConfig{}))
	require.NoError(t, b.Close())

	stale := filepath.Join(dir, "gone-0")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	require.NoError(t, writePartitionMeta(stale, newTopicID()))
	aside := filepath.Join(dir, "gone-1.xyz-delete")
	require.NoError(t, os.MkdirAll(aside, 0o755))
	unknown := filepath.Join(dir, "mystery-0")
	require.NoError(t, os.MkdirAll(unknown, 0o755))

	b = openBroker(t, dir, Options{})
	defer b.Close()
	for _, p := range []string{stale, aside} {
		_, err := os.Stat(p)
		require.True(t, errors.Is(err, os.ErrNotExist), p)
	}
	_, err := os.Stat(unknown)
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, b.Topics())
}

func TestRegistryDamageRefusesToGuess(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{})
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{}))
	require.NoError(t, b.Close())
	data, err := os.ReadFile(filepath.Join(dir, registryFile))
	require.NoError(t, err)
	data[10] ^= 1
	require.NoError(t, os.WriteFile(filepath.Join(dir, registryFile), data, 0o644))
	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, errBadRegistry)

	require.NoError(t, os.Remove(filepath.Join(dir, registryFile)))
	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, errBadRegistry, "data without a registry")
	// Nothing was deleted.
	_, err = os.Stat(filepath.Join(dir, "t-0"))
	require.NoError(t, err)
}

func TestBadInputGetsTypedErrors(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{Topic: TopicConfig{MaxMessageBytes: 1000}})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))

	_, err := b.Produce(ctx, Record{Topic: "t", Value: make([]byte, 2000)})
	require.ErrorIs(t, err, ErrRecordTooLarge)
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	var got error
	p.Produce(ctx, Record{Topic: "t", Value: make([]byte, 2000)}, func(_ RecordMetadata, err error) { got = err })
	require.ErrorIs(t, got, ErrRecordTooLarge)
	manual, err := b.NewProducer(ProducerConfig{Partitioner: partition.ManualPartitioner()})
	require.NoError(t, err)
	manual.Produce(ctx, Record{Topic: "t", Partition: 3, Value: []byte("x")}, func(_ RecordMetadata, err error) { got = err })
	require.ErrorIs(t, got, ErrUnknownPartition)
	require.ErrorIs(t, manual.Close(), ErrUnknownPartition, "Close reports what failed since the last Flush")
	d, _ := b.DescribeTopic("t")
	require.Equal(t, int64(0), d.Partitions[0].EndOffset, "nothing written")

	_, err = b.NewProducer(ProducerConfig{BatchBytes: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = b.NewConsumer(ConsumerConfig{AutoOffsetReset: 9})
	require.ErrorIs(t, err, ErrInvalidConfig)

	c, err := b.NewConsumer(ConsumerConfig{AutoOffsetReset: ResetNone, FetchMaxWait: time.Millisecond})
	require.NoError(t, err)
	require.ErrorIs(t, c.Seek("t", 0, 5), ErrNotAssigned)
	require.ErrorIs(t, c.Assign("t", 7), ErrUnknownPartition)
	require.ErrorIs(t, c.Assign("nope"), ErrUnknownTopic)
	require.NoError(t, c.Assign("t"))
	_, err = c.Poll(ctx)
	require.ErrorIs(t, err, ErrOffsetOutOfRange, "no position and no reset")
	require.NoError(t, c.Seek("t", 0, 42))
	_, err = c.Poll(ctx)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)

	require.ErrorIs(t, p.Close(), ErrRecordTooLarge, "Close reports what failed since the last Flush")
	p.Produce(ctx, Record{Topic: "t", Value: []byte("x")}, func(_ RecordMetadata, err error) { got = err })
	require.ErrorIs(t, got, ErrProducerClosed)

	require.NoError(t, b.Close())
	_, err = b.Produce(ctx, Record{Topic: "t", Value: []byte("x")})
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.Poll(ctx)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, b.CreateTopic(ctx, "u", TopicConfig{}), ErrClosed)
	_, err = b.NewProducer(ProducerConfig{})
	require.ErrorIs(t, err, ErrClosed)
}

// A full buffer blocks Produce for MaxBlock, then fails the record with
// ErrBufferFull; memory never grows past BufferBytes.
func TestBufferFullAfterMaxBlock(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))
	// Batches never fill and never linger out: nothing is sent.
	p, err := b.NewProducer(ProducerConfig{BufferBytes: 2000, BatchBytes: 1 << 20, Linger: time.Hour, MaxBlock: 30 * time.Millisecond})
	require.NoError(t, err)
	var full, ok atomic.Int64
	for i := 0; i < 30; i++ {
		p.Produce(ctx, Record{Topic: "t", Value: make([]byte, 100)}, func(_ RecordMetadata, err error) {
			switch {
			case errors.Is(err, ErrBufferFull):
				full.Add(1)
			case err == nil:
				ok.Add(1)
			}
		})
	}
	require.Greater(t, full.Load(), int64(0))
	p.mu.Lock()
	require.LessOrEqual(t, p.used, 2000)
	p.mu.Unlock()
	// A cancelled context ends the wait too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	var got error
	p.Produce(cctx, Record{Topic: "t", Value: make([]byte, 100)}, func(_ RecordMetadata, err error) { got = err })
	require.ErrorIs(t, got, context.Canceled)
	// Close flushes what was accepted, and reports what failed: the
	// records refused for space and the cancelled one.
	err = p.Close()
	require.ErrorIs(t, err, ErrBufferFull)
	require.ErrorContains(t, err, fmt.Sprintf("%d records failed", full.Load()+1))
	require.Equal(t, int64(30)-full.Load(), ok.Load())
}

func TestPollWaitsAndWakes(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 4}))
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: time.Minute})
	require.NoError(t, err)
	require.NoError(t, c.Assign("t"))
	require.NoError(t, c.SeekToEnd("t"))
	go func() {
		time.Sleep(30 * time.Millisecond)
		b.Produce(ctx, Record{Topic: "t", Value: []byte("wake")})
	}()
	start := time.Now()
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Less(t, time.Since(start), 30*time.Second)

	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = c.Poll(cctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSeekToTimeAndPositions(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))
	base := time.UnixMilli(1_700_000_000_000)
	for i := 0; i < 100; i++ {
		_, err := b.Produce(ctx, Record{Topic: "t", Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)})
		require.NoError(t, err)
	}
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Assign("t"))
	pos, err := c.Position("t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(-1), pos)
	require.NoError(t, c.SeekToTime("t", base.Add(42500*time.Millisecond)))
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(43), recs[0].Offset)
	require.Equal(t, base.Add(43*time.Second).UnixMilli(), recs[0].Timestamp.UnixMilli())
	pos, err = c.Position("t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(100), pos)
	require.NoError(t, c.SeekToTime("t", base.Add(time.Hour)))
	pos, _ = c.Position("t", 0)
	require.Equal(t, int64(100), pos)
	require.NoError(t, c.SeekToStart("t"))
	pos, _ = c.Position("t", 0)
	require.Equal(t, int64(0), pos)
	c.Unassign("t")
	require.Empty(t, c.Assignment())
}

// Many producers and consumers on many partitions, under -race: every
// record is consumed once, in order per partition, never beyond the high
// watermark.
func TestManyProducersAndConsumers(t *testing.T) {
	for _, flush := range []log.FlushPolicy{log.Sync, log.None} {
		t.Run(flush.String(), func(t *testing.T) {
			b := openBroker(t, t.TempDir(), Options{Flush: flush})
			defer b.Close()
			ctx := context.Background()
			const parts, producers, perProducer = 6, 4, 500
			require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: parts}))

			var wg sync.WaitGroup
			seen := make([]map[string]bool, parts)
			for i := range seen {
				seen[i] = map[string]bool{}
			}
			var mu sync.Mutex
			total := atomic.Int64{}
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for cg := 0; cg < 2; cg++ { // two consumers, three partitions each
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 5 * time.Millisecond, AutoOffsetReset: ResetEarliest})
					if err != nil {
						t.Error(err)
						return
					}
					for p := cg * 3; p < cg*3+3; p++ {
						if err := c.Assign("t", int32(p)); err != nil {
							t.Error(err)
							return
						}
					}
					next := map[int32]int64{}
					for total.Load() < producers*perProducer && cctx.Err() == nil {
						recs, err := c.Poll(cctx)
						if err != nil && cctx.Err() == nil {
							t.Error(err)
							return
						}
						for _, r := range recs {
							part, _ := b.Partition("t", r.Partition)
							if r.Offset >= part.HighWatermark() {
								t.Errorf("read offset %d at or past the high watermark", r.Offset)
							}
							if r.Offset != next[r.Partition] {
								t.Errorf("partition %d: offset %d, expected %d", r.Partition, r.Offset, next[r.Partition])
							}
							next[r.Partition] = r.Offset + 1
							mu.Lock()
							if seen[r.Partition][string(r.Value)] {
								t.Errorf("duplicate %s", r.Value)
							}
							seen[r.Partition][string(r.Value)] = true
							mu.Unlock()
							total.Add(1)
						}
					}
				}()
			}
			var pw sync.WaitGroup
			for i := 0; i < producers; i++ {
				pw.Add(1)
				go func() {
					defer pw.Done()
					p, err := b.NewProducer(ProducerConfig{Linger: time.Millisecond})
					if err != nil {
						t.Error(err)
						return
					}
					for j := 0; j < perProducer; j++ {
						p.Produce(ctx, Record{Topic: "t", Key: []byte(fmt.Sprint(j % 17)), Value: []byte(fmt.Sprintf("p%d-%d", i, j))},
							func(_ RecordMetadata, err error) {
								if err != nil {
									t.Error(err)
								}
							})
					}
					if err := p.Close(); err != nil {
						t.Error(err)
					}
				}()
			}
			pw.Wait()
			wg.Wait()
			require.Equal(t, int64(producers*perProducer), total.Load())
		})
	}
}

func TestProducerSettings(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))

	// Compression: batches are written with the codec and read back.
	p, err := b.NewProducer(ProducerConfig{Compression: record.ZSTD})
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		p.Produce(ctx, Record{Topic: "t", Value: []byte(fmt.Sprintf("compressible %d compressible", i))}, nil)
	}
	require.NoError(t, p.Close())
	part, err := b.Partition("t", 0)
	require.NoError(t, err)
	buf, err := part.Log().Read(0, 1<<20)
	require.NoError(t, err)
	require.Equal(t, byte(record.ZSTD), buf[22]&7, "zstd in the batch attributes")
	require.Len(t, consumeAll(t, b, "t"), 100)

	// AcksNone: delivered at once with offset -1, written all the same.
	p, err = b.NewProducer(ProducerConfig{Acks: AcksNone, Linger: time.Hour})
	require.NoError(t, err)
	var md RecordMetadata
	p.Produce(ctx, Record{Topic: "t", Value: []byte("fire and forget")}, func(m RecordMetadata, err error) {
		require.NoError(t, err)
		md = m
	})
	require.Equal(t, int64(-1), md.Offset)
	require.NoError(t, p.Close())
	require.Equal(t, int64(101), part.HighWatermark())

	// DeliveryTimeout: a batch that waits longer than it fails.
	bn := openBroker(t, t.TempDir(), Options{Flush: log.None})
	defer bn.Close()
	require.NoError(t, bn.CreateTopic(ctx, "t", TopicConfig{}))
	p, err = bn.NewProducer(ProducerConfig{Linger: 50 * time.Millisecond, DeliveryTimeout: 10 * time.Millisecond})
	require.NoError(t, err)
	errc := make(chan error, 1)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("late")}, func(_ RecordMetadata, err error) { errc <- err })
	require.ErrorIs(t, <-errc, ErrDeliveryTimeout)
	require.ErrorIs(t, p.Close(), ErrDeliveryTimeout, "Close reports the failure too")
	npart, err := bn.Partition("t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), npart.HighWatermark(), "nothing written")

	// Under Sync, with Linger left at its default, a batch goes as soon
	// as its partition has no write in flight: delivered without a Flush
	// long before Linger, which a stalled linger loop would need.
	p, err = b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	delivered := make(chan RecordMetadata, 1)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("group commit")}, func(m RecordMetadata, err error) {
		require.NoError(t, err)
		delivered <- m
	})
	select {
	case m := <-delivered:
		require.Equal(t, int64(101), m.Offset)
	case <-time.After(30 * time.Second):
		t.Fatal("a record under Sync was not delivered")
	}
	require.NoError(t, p.Close())
	require.Equal(t, int64(102), part.HighWatermark())

	// Producing into a closed broker fails the record.
	p, err = b.NewProducer(ProducerConfig{Linger: -1})
	require.NoError(t, err)
	require.NoError(t, b.Close())
	p.Produce(ctx, Record{Topic: "t", Value: []byte("x")}, func(_ RecordMetadata, err error) { errc <- err })
	require.ErrorIs(t, <-errc, ErrClosed)
}

// An offset that retention (or DeleteRecords) removed is handled per
// AutoOffsetReset.
func TestOutOfRangeFollowsReset(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{SegmentBytes: 1024}))
	for i := 0; i < 100; i++ {
		_, err := b.Produce(ctx, Record{Topic: "t", Value: []byte(fmt.Sprintf("value %03d", i))})
		require.NoError(t, err)
	}
	part, _ := b.Partition("t", 0)
	require.NoError(t, part.Log().DeleteRecordsBefore(60))

	for _, tc := range []struct {
		reset OffsetReset
		first int64
	}{{ResetEarliest, 60}, {ResetLatest, -1}} {
		c, err := b.NewConsumer(ConsumerConfig{AutoOffsetReset: tc.reset, FetchMaxWait: time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, c.Assign("t"))
		require.NoError(t, c.Seek("t", 0, 10)) // deleted
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		if tc.first < 0 {
			require.Empty(t, recs)
			pos, _ := c.Position("t", 0)
			require.Equal(t, int64(100), pos)
		} else {
			require.Equal(t, tc.first, recs[0].Offset)
		}
		c.Close()
	}
}

// The broker applies retention in the background.
func TestBackgroundRetention(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{RetentionCheckInterval: 10 * time.Millisecond})
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{SegmentBytes: 1024, RetentionBytes: 4096}))
	for i := 0; i < 300; i++ {
		_, err := b.Produce(ctx, Record{Topic: "t", Value: make([]byte, 50)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		d, err := b.DescribeTopic("t")
		return err == nil && d.Partitions[0].StartOffset > 0 && d.Partitions[0].Size <= 4096+1024
	}, 10*time.Second, 10*time.Millisecond)
}
