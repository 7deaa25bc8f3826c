package transport

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnBrokerOptions keep __transaction_state and __consumer_offsets small
// for tests.
var txnBrokerOptions = spool.Options{TransactionStatePartitions: 3, OffsetsTopicPartitions: 3}

// readAll reads a topic from the start at an isolation level until want
// records came or a quiet second passed, and returns their values.
func readAll(t *testing.T, addr, topic string, committed bool, want int) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []string
	for len(out) < want {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)); n++ })
		if n == 0 && ctx.Err() != nil && len(out) >= want {
			break
		}
		if n == 0 && ctx.Err() != nil {
			// nothing more within a second
			break
		}
	}
	return out
}

// franz-go's transactional producer against a standalone broker: a
// committed transaction is read read_committed, an aborted one only
// read_uncommitted, and a transaction left open holds read_committed
// readers at its first offset until it ends.
func TestTransactionsFranzGo(t *testing.T) {
	b, _, addr := testServer(t, txnBrokerOptions, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, b.CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 2}))

	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer p.Close()
	send := func(vals ...string) {
		for _, v := range vals {
			require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}).FirstErr())
		}
	}
	require.NoError(t, p.BeginTransaction())
	send("c1", "c2", "c3")
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, p.BeginTransaction())
	send("a1", "a2")
	require.NoError(t, p.EndTransaction(ctx, kgo.TryAbort))
	require.NoError(t, p.BeginTransaction())
	send("c4")
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))

	require.ElementsMatch(t, []string{"c1", "c2", "c3", "c4"}, readAll(t, addr, "t", true, 4))
	require.ElementsMatch(t, []string{"c1", "c2", "c3", "a1", "a2", "c4"}, readAll(t, addr, "t", false, 6))

	// An open transaction: read_committed stops before it, and its
	// records appear once it commits.
	require.NoError(t, p.BeginTransaction())
	send("o1", "o2")
	require.ElementsMatch(t, []string{"c1", "c2", "c3", "c4"}, readAll(t, addr, "t", true, 5))
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))
	require.ElementsMatch(t, []string{"c1", "c2", "c3", "c4", "o1", "o2"}, readAll(t, addr, "t", true, 6))

	// DescribeTransactions and ListTransactions see the id.
	// (EndTxn answers once PrepareCommit is durable; the markers and
	// CompleteCommit follow.)
	dreq := kmsg.NewPtrDescribeTransactionsRequest()
	dreq.TransactionalIDs = []string{"tx-1", "nope"}
	var dresp *kmsg.DescribeTransactionsResponse
	require.Eventually(t, func() bool {
		dresp, err = dreq.RequestWith(ctx, p)
		require.NoError(t, err)
		require.Len(t, dresp.TransactionStates, 2)
		return dresp.TransactionStates[0].State == "CompleteCommit"
	}, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, dresp.TransactionStates[0].ErrorCode)
	require.Equal(t, kerr.TransactionalIDNotFound.Code, dresp.TransactionStates[1].ErrorCode)
	lreq := kmsg.NewPtrListTransactionsRequest()
	lresp, err := lreq.RequestWith(ctx, p)
	require.NoError(t, err)
	require.Len(t, lresp.TransactionStates, 1)
	require.Equal(t, "tx-1", lresp.TransactionStates[0].TransactionalID)
}

// A second instance with the same transactional id fences the first: the
// zombie's open transaction is aborted, its later writes and its commit
// are refused (PRODUCER_FENCED), and nothing it wrote is read committed.
func TestTransactionsZombieFenced(t *testing.T) {
	b, _, addr := testServer(t, txnBrokerOptions, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, b.CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 1}))

	zombie, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("same"), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer zombie.Close()
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie-1")}).FirstErr())

	fresh, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("same"), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer fresh.Close()
	require.NoError(t, fresh.BeginTransaction())
	require.NoError(t, fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("fresh-1")}).FirstErr())

	err = zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie-2")}).FirstErr()
	if err == nil {
		err = zombie.EndTransaction(ctx, kgo.TryCommit)
	}
	require.Error(t, err, "the zombie cannot write or commit")
	require.True(t, errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch), "%v", err)

	require.NoError(t, fresh.EndTransaction(ctx, kgo.TryCommit))
	require.Equal(t, []string{"fresh-1"}, readAll(t, addr, "t", true, 1))
}

// A producer that begins a transaction and vanishes is aborted once its
// timeout passes: read_committed readers move past it.
func TestTransactionsTimeoutAbort(t *testing.T) {
	b, _, addr := testServer(t, txnBrokerOptions, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, b.CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 1}))

	gone, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("gone"), kgo.DefaultProduceTopic("t"),
		kgo.TransactionTimeout(time.Second))
	require.NoError(t, err)
	require.NoError(t, gone.BeginTransaction())
	require.NoError(t, gone.ProduceSync(ctx, &kgo.Record{Value: []byte("lost")}).FirstErr())
	gone.Close() // no EndTransaction

	plain, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer plain.Close()
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr())
	p, err := b.Partition("t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), p.LastStableOffset(), "the open transaction holds the LSO")
	// The coordinator's sweep runs every 10 s (Kafka's default).
	require.Eventually(t, func() bool { return p.LastStableOffset() == p.EndOffset() }, 30*time.Second, 100*time.Millisecond,
		"the timed-out transaction is aborted and the LSO moves on")
	require.Equal(t, []string{"after"}, readAll(t, addr, "t", true, 1))
}

var _ = strconv.Itoa

// Bad input around transactions, each refused with Kafka's code and
// nothing appended: a transactional batch for a partition the producer did
// not add to its transaction (KIP-890 part 1), one from a producer id the
// coordinator never gave out, a transactional batch whose sequence leaves
// a gap, a marker from an older coordinator epoch and one from an older
// producer epoch (WriteTxnMarkers).
func TestTransactionsBadInput(t *testing.T) {
	b, _, addr := testServer(t, txnBrokerOptions, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 2}))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()

	// A producer with a transaction on t-0 only.
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("bad"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("ok")}).FirstErr())
	dreq := kmsg.NewPtrDescribeTransactionsRequest()
	dreq.TransactionalIDs = []string{"bad"}
	dresp, err := dreq.RequestWith(ctx, cl)
	require.NoError(t, err)
	pid, epoch := dresp.TransactionStates[0].ProducerID, dresp.TransactionStates[0].ProducerEpoch

	end := func(n int32) int64 {
		part, err := b.Partition("t", n)
		require.NoError(t, err)
		return part.EndOffset()
	}
	raw := prodDial(t, addr)
	produce := func(version int16, n int32, pid int64, epoch int16, seq int32) int16 {
		bt, err := record.NewBatch([]record.Record{{Value: []byte("x")}},
			record.BatchOptions{Producer: &record.ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: seq}, Transactional: true})
		require.NoError(t, err)
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		id := "bad"
		req.TransactionID, req.Acks, req.TimeoutMillis = &id, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = n, bt.Bytes()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := prodCall[*kmsg.ProduceResponse](t, raw, 1, req)
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	before0, before1 := end(0), end(1)
	require.Equal(t, errInvalidTxnState, produce(10, 1, pid, epoch, 0), "t-1 is not in the transaction (Produce v10)")
	require.Equal(t, errTransactionAbortable, produce(11, 1, pid, epoch, 0), "t-1 is not in the transaction (Produce v11)")
	require.Equal(t, errInvalidTxnState, produce(9, 0, pid+1000, 0, 0), "a producer id of another transactional id")
	require.Equal(t, errOutOfOrderSequenceNumber, produce(9, 0, pid, epoch, 5), "a gap in the transaction's sequences")
	require.Equal(t, before1, end(1), "nothing appended to t-1")
	require.Equal(t, before0, end(0), "nothing appended to t-0")

	// Markers from the past: an older coordinator epoch, an older
	// producer epoch.
	marker := func(pe int16, ce int32) int16 {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = pid, pe, true, ce
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = "t", []int32{0}
		m.Topics = append(m.Topics, mt)
		req.Markers = append(req.Markers, m)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp.Markers[0].Topics[0].Partitions[0].ErrorCode
	}
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit)) // markers at coordinator epoch 0
	require.Eventually(t, func() bool {
		part, _ := b.Partition("t", 0)
		return part.LastStableOffset() == part.EndOffset()
	}, 10*time.Second, 10*time.Millisecond)
	// A second instance: epoch+1, a transaction open on t-0.
	p.Close()
	p2, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("bad"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer p2.Close()
	require.NoError(t, p2.BeginTransaction())
	require.NoError(t, p2.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("next")}).FirstErr())
	ended := end(0)
	require.Equal(t, errInvalidProducerEpoch, marker(epoch, 0), "an older producer epoch")
	require.Equal(t, errTransactionCoordinatorFenced, marker(epoch+1, -1), "an older coordinator epoch")
	require.Equal(t, ended, end(0), "no marker appended")
	require.NoError(t, p2.EndTransaction(ctx, kgo.TryAbort))
}
