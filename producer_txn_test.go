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

// readIsolated reads every record of topic from the start at an isolation
// level, until two polls in a row find nothing, and returns the values.
func readIsolated(t testing.TB, b *Broker, topic string, level IsolationLevel) []string {
	t.Helper()
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 10 * time.Millisecond, AutoOffsetReset: ResetEarliest, IsolationLevel: level})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign(topic))
	var out []string
	for empty := 0; empty < 2; {
		recs, err := c.Poll(context.Background())
		require.NoError(t, err)
		if len(recs) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// produceTxn produces values prefix-0..n-1 to topic and flushes; every record
// must be delivered.
func produceTxn(t testing.TB, p *Producer, topic, prefix string, n int) {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	for i := range n {
		v := fmt.Sprintf("%s-%d", prefix, i)
		p.Produce(context.Background(), Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(_ RecordMetadata, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	require.NoError(t, p.Flush(context.Background()))
	require.Empty(t, errs)
}

func countPrefix(vals []string, prefix string) int {
	n := 0
	for _, v := range vals {
		if len(v) > len(prefix) && v[:len(prefix)+1] == prefix+"-" {
			n++
		}
	}
	return n
}

func txnBroker(t *testing.T) *Broker {
	t.Helper()
	b := openBroker(t, t.TempDir(), Options{TransactionStatePartitions: 3, OffsetsTopicPartitions: 3})
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.CreateTopic(context.Background(), "out", TopicConfig{Partitions: 3}))
	return b
}

func TestTransactionalProducerCommitAndAbort(t *testing.T) {
	b := txnBroker(t)
	ctx := context.Background()
	p, err := b.NewProducer(ProducerConfig{TransactionalID: "tx", Linger: time.Millisecond})
	require.NoError(t, err)
	defer p.Close()

	require.NoError(t, p.BeginTransaction())
	produceTxn(t, p, "out", "one", 30)
	// Before the commit: written, but nothing of it is stable.
	require.Equal(t, 30, countPrefix(readIsolated(t, b, "out", ReadUncommitted), "one"))
	require.Empty(t, readIsolated(t, b, "out", ReadCommitted), "an open transaction is not read read_committed")
	require.NoError(t, p.CommitTransaction(ctx))
	// Commit returns once the markers are written: readable at once.
	require.Equal(t, 30, countPrefix(readIsolated(t, b, "out", ReadCommitted), "one"))

	require.NoError(t, p.BeginTransaction())
	produceTxn(t, p, "out", "two", 20)
	require.NoError(t, p.AbortTransaction(ctx))

	require.NoError(t, p.BeginTransaction())
	produceTxn(t, p, "out", "three", 10)
	require.NoError(t, p.CommitTransaction(ctx))

	// An empty transaction commits without the coordinator.
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.CommitTransaction(ctx))

	committed := readIsolated(t, b, "out", ReadCommitted)
	require.Equal(t, 30, countPrefix(committed, "one"))
	require.Equal(t, 0, countPrefix(committed, "two"), "nothing of the aborted transaction")
	require.Equal(t, 10, countPrefix(committed, "three"))
	require.Len(t, committed, 40)
	all := readIsolated(t, b, "out", ReadUncommitted)
	require.Equal(t, 20, countPrefix(all, "two"), "the aborted records are in the log")
	for n := range int32(3) {
		part, err := b.Partition("out", n)
		require.NoError(t, err)
		require.Equal(t, part.HighWatermark(), part.LastStableOffset(), "partition %d: no transaction open", n)
	}

	d := b.Transactions().Describe([]string{"tx"})[0]
	require.NoError(t, d.Err)
	require.Equal(t, "CompleteCommit", d.State.String())
}

func TestTransactionalProducerStateErrors(t *testing.T) {
	b := txnBroker(t)
	ctx := context.Background()

	_, err := b.NewProducer(ProducerConfig{TransactionalID: "x", Acks: AcksLeader})
	require.ErrorIs(t, err, ErrInvalidConfig, "transactions need acks=all")
	_, err = b.NewProducer(ProducerConfig{Idempotent: true, Acks: AcksNone})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = b.NewProducer(ProducerConfig{TransactionalID: "x", TransactionTimeout: time.Hour})
	require.Error(t, err, "a timeout over TransactionMaxTimeout is refused")

	plain, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	defer plain.Close()
	require.ErrorIs(t, plain.BeginTransaction(), ErrNotTransactional)
	require.ErrorIs(t, plain.CommitTransaction(ctx), ErrNotTransactional)
	require.ErrorIs(t, plain.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{{Topic: "out"}: 1}, GroupMetadata{GroupID: "g"}), ErrNotTransactional)

	p, err := b.NewProducer(ProducerConfig{TransactionalID: "x", Partitioner: partition.ManualPartitioner()})
	require.NoError(t, err)
	defer p.Close()
	_, err = produceSync(p, Record{Topic: "out", Value: []byte("outside")})
	require.ErrorIs(t, err, ErrTransactionState, "Produce outside a transaction")
	require.ErrorIs(t, p.CommitTransaction(ctx), ErrTransactionState)
	require.ErrorIs(t, p.AbortTransaction(ctx), ErrTransactionState)
	require.NoError(t, p.BeginTransaction())
	require.ErrorIs(t, p.BeginTransaction(), ErrTransactionState, "one transaction at a time")
	_, err = produceSync(p, Record{Topic: "out", Partition: 9, Value: []byte("v")})
	require.ErrorIs(t, err, ErrUnknownPartition)
	require.NoError(t, p.AbortTransaction(ctx))
	require.Empty(t, readIsolated(t, b, "out", ReadUncommitted), "nothing written by the refused calls")
}

// A second producer with the same transactional id fences the first: its
// open transaction is aborted, and everything it tries next fails with
// ErrProducerFenced, writing nothing visible.
func TestTransactionalProducerZombieFenced(t *testing.T) {
	b := txnBroker(t)
	ctx := context.Background()
	old, err := b.NewProducer(ProducerConfig{TransactionalID: "z", Linger: time.Millisecond})
	require.NoError(t, err)
	defer old.Close()
	require.NoError(t, old.BeginTransaction())
	produceTxn(t, old, "out", "first", 5)
	require.NoError(t, old.CommitTransaction(ctx))
	require.NoError(t, old.BeginTransaction())
	produceTxn(t, old, "out", "zombie", 5)

	successor, err := b.NewProducer(ProducerConfig{TransactionalID: "z", Linger: time.Millisecond})
	require.NoError(t, err)
	defer successor.Close()
	require.NoError(t, successor.BeginTransaction())
	produceTxn(t, successor, "out", "successor", 5)
	require.NoError(t, successor.CommitTransaction(ctx))

	err = old.CommitTransaction(ctx)
	require.ErrorIs(t, err, ErrProducerFenced)
	_, err = produceSync(old, Record{Topic: "out", Value: []byte("zombie-late")})
	require.ErrorIs(t, err, ErrProducerFenced)
	require.ErrorIs(t, old.BeginTransaction(), ErrProducerFenced)

	committed := readIsolated(t, b, "out", ReadCommitted)
	require.Equal(t, 5, countPrefix(committed, "first"))
	require.Equal(t, 5, countPrefix(committed, "successor"))
	require.Equal(t, 0, countPrefix(committed, "zombie"), "the fenced instance's transaction was aborted")
	require.NotContains(t, readIsolated(t, b, "out", ReadUncommitted), "zombie-late")
}

// A transaction left open past its timeout is aborted by the coordinator:
// the last stable offset moves on, and the producer is fenced.
func TestTransactionalProducerTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: waits for the coordinator's timeout sweep (up to 10 s)")
	}
	b := txnBroker(t)
	ctx := context.Background()
	p, err := b.NewProducer(ProducerConfig{TransactionalID: "slow", TransactionTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.BeginTransaction())
	md, err := produceSync(p, Record{Topic: "out", Partition: 1, Value: []byte("abandoned")})
	require.NoError(t, err)
	part, err := b.Partition("out", md.Partition)
	require.NoError(t, err)
	require.Equal(t, md.Offset, part.LastStableOffset(), "the open transaction holds the LSO")
	require.Eventually(t, func() bool { return part.LastStableOffset() == part.HighWatermark() },
		20*time.Second, 20*time.Millisecond, "the coordinator aborts the transaction at its timeout")
	require.ErrorIs(t, p.CommitTransaction(ctx), ErrProducerFenced)
	require.Empty(t, readIsolated(t, b, "out", ReadCommitted))
}

// SendOffsetsToTransaction: offsets committed in a transaction are
// invisible until it commits and dropped if it aborts; a member of an old
// generation is refused and the transaction must be aborted.
func TestSendOffsetsToTransaction(t *testing.T) {
	b := txnBroker(t)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "in", TopicConfig{Partitions: 1}))
	c, err := b.NewConsumer(ConsumerConfig{Group: "g", Topics: []string{"in"}, AutoCommit: Disabled,
		IsolationLevel: ReadCommitted, FetchMaxWait: 10 * time.Millisecond, AutoOffsetReset: ResetEarliest})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Poll(ctx) // joins
	require.NoError(t, err)
	md := c.GroupMetadata()
	require.Equal(t, "g", md.GroupID)
	require.NotEmpty(t, md.MemberID)
	require.GreaterOrEqual(t, md.Generation, int32(1))

	p, err := b.NewProducer(ProducerConfig{TransactionalID: "offsets"})
	require.NoError(t, err)
	defer p.Close()
	tp := TopicPartition{Topic: "in", Partition: 0}
	committed := func() int64 {
		got, err := b.Groups().FetchOffsets("g", []TopicPartition{tp})
		require.NoError(t, err)
		if o, ok := got[tp]; ok {
			return o.Offset
		}
		return -1
	}

	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{tp: 7}, md))
	require.Equal(t, int64(-1), committed(), "pending until the transaction commits")
	unstable, err := b.Groups().UnstableOffsets("g", nil)
	require.NoError(t, err)
	require.Equal(t, []TopicPartition{tp}, unstable)
	require.NoError(t, p.CommitTransaction(ctx))
	require.Equal(t, int64(7), committed())

	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{tp: 9}, md))
	require.NoError(t, p.AbortTransaction(ctx))
	require.Equal(t, int64(7), committed(), "an aborted transaction's offsets are dropped")

	stale := md
	stale.Generation--
	require.NoError(t, p.BeginTransaction())
	err = p.SendOffsetsToTransaction(ctx, map[TopicPartition]int64{tp: 11}, stale)
	require.Error(t, err, "a member of an old generation is fenced (KIP-447)")
	require.ErrorIs(t, p.CommitTransaction(ctx), ErrTransactionAbortable)
	require.NoError(t, p.AbortTransaction(ctx))
	require.Equal(t, int64(7), committed())
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.CommitTransaction(ctx), "the producer carries on after the abort")
}

// A transactional producer's open transaction survives neither its
// broker's crash nor a restart: the next instance's NewProducer fences it
// and the coordinator aborts it, from the state reloaded from the log.
func TestTransactionalProducerAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := openBroker(t, dir, Options{TransactionStatePartitions: 3, Flush: log.Sync})
	require.NoError(t, b.CreateTopic(ctx, "out", TopicConfig{Partitions: 2}))
	p, err := b.NewProducer(ProducerConfig{TransactionalID: "r"})
	require.NoError(t, err)
	require.NoError(t, p.BeginTransaction())
	produceTxn(t, p, "out", "kept", 4)
	require.NoError(t, p.CommitTransaction(ctx))
	require.NoError(t, p.BeginTransaction())
	produceTxn(t, p, "out", "cut", 4)
	crashBroker(t, b) // the transaction is left open
	b = openBroker(t, dir, Options{TransactionStatePartitions: 3, Flush: log.Sync})
	defer b.Close()
	require.Empty(t, countPrefix(readIsolated(t, b, "out", ReadCommitted), "cut"))
	p2, err := b.NewProducer(ProducerConfig{TransactionalID: "r"})
	require.NoError(t, err)
	defer p2.Close()
	require.NoError(t, p2.BeginTransaction())
	produceTxn(t, p2, "out", "next", 4)
	require.NoError(t, p2.CommitTransaction(ctx))
	committed := readIsolated(t, b, "out", ReadCommitted)
	require.Equal(t, 4, countPrefix(committed, "kept"))
	require.Equal(t, 0, countPrefix(committed, "cut"))
	require.Equal(t, 4, countPrefix(committed, "next"))
	for n := range int32(2) {
		part, err := b.Partition("out", n)
		require.NoError(t, err)
		require.Equal(t, part.HighWatermark(), part.LastStableOffset())
	}
}

// An idempotent producer's batches carry its producer id and sequences:
// the partition knows the producer, and a leader crash under load neither
// loses an acknowledged record nor writes one twice.
func TestIdempotentProducerThroughLeaderCrash(t *testing.T) {
	_, bs, _ := threeNodes(t, log.Sync)
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "i", TopicConfig{Partitions: 2, ReplicationFactor: 3, MinInSyncReplicas: 2}))
	p, err := bs[0].NewProducer(ProducerConfig{Idempotent: true, Linger: time.Millisecond, RetryBackoff: 10 * time.Millisecond})
	require.NoError(t, err)
	defer p.Close()

	var mu sync.Mutex
	acked := map[string]RecordMetadata{}
	var failed int
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				require.NoError(t, p.Flush(ctx))
				return
			default:
			}
			v := fmt.Sprint("v", i)
			p.Produce(ctx, Record{Topic: "i", Key: []byte(v), Value: []byte(v)}, func(md RecordMetadata, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked[v] = md
			})
			if i%64 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	d, err := bs[0].DescribeTopic("i")
	require.NoError(t, err)
	victim := d.Partitions[0].Leader
	if victim == 1 {
		victim = d.Partitions[1].Leader
	}
	crashNode(t, bs[victim-1])
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acknowledged, %d failed", len(acked), failed)
	require.NotEmpty(t, acked)
	seen := map[string]int{}
	for _, v := range readIsolated(t, bs[0], "i", ReadUncommitted) {
		seen[v]++
	}
	for v, n := range seen {
		require.Equal(t, 1, n, "%s written %d times", v, n)
	}
	for v := range acked {
		require.Equal(t, 1, seen[v], "acknowledged %s is in the log once", v)
	}
}

func TestIdempotentProducerStampsBatches(t *testing.T) {
	b := txnBroker(t)
	p, err := b.NewProducer(ProducerConfig{Idempotent: true, Linger: -1, Partitioner: partition.ManualPartitioner()})
	require.NoError(t, err)
	defer p.Close()
	for i := range 5 {
		_, err := produceSync(p, Record{Topic: "out", Partition: 2, Value: []byte(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	part, err := b.Partition("out", 2)
	require.NoError(t, err)
	prods, err := part.Producers()
	require.NoError(t, err)
	require.Len(t, prods, 1)
	require.Equal(t, int32(4), prods[0].LastSequence, "five one-record batches, sequences 0-4")
}
