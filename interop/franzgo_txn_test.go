package interop

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoReadValues reads topic from the start at an isolation level until n
// records came, then half a second more, and returns their values in the
// order read (by partition, then offset).
func kgoReadValues(t *testing.T, ctx context.Context, s *server, topic string, iso kgo.IsolationLevel, n int) map[int32][]string {
	t.Helper()
	cl := kgoClient(t, s, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	got := map[int32][]string{}
	count := 0
	var quiet time.Time
	for quiet.IsZero() || time.Now().Before(quiet) {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, count, n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) {
			if pctx.Err() == nil {
				t.Errorf("fetch %s-%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			count++
		})
		if count >= n && quiet.IsZero() {
			quiet = time.Now().Add(500 * time.Millisecond)
		}
	}
	return got
}

// TestFranzGoTransactionsAdmin: a franz-go transactional producer against
// spool serve, watched through kadm's transaction APIs, as an operator
// looking for a hanging transaction does (kafka-transactions.sh
// describe, list and find-hanging).
//
//   - While a transaction is open, DescribeTransactions shows it Ongoing
//     with the producer's id and epoch, its timeout, its start time and its
//     partitions; ListTransactions lists it under the state and producer
//     filters that match it and not under those that do not; and
//     DescribeProducers on each partition's leader shows the producer with
//     the offset of its transaction's first record (CurrentTxnStartOffset)
//     and its last sequence. An unknown id is TRANSACTIONAL_ID_NOT_FOUND.
//   - After the commit: CompleteCommit, no partitions, no open
//     transaction on the partitions (CurrentTxnStartOffset -1) and the
//     coordinator epoch of the marker.
//   - An aborted transaction the same way, ending CompleteAbort; a
//     read_committed consumer gets the plain and the committed records and
//     a read_uncommitted one everything.
func TestFranzGoTransactionsAdmin(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 90*time.Second)
	const topic, id = "kgo-txn", "kgo-txn-1"
	admCl := kgoClient(t, s)
	adm := kadm.NewClient(admCl)
	kadmCreate(t, ctx, adm, topic, 2, nil)

	// Four plain records on partition 0 first, so the transaction's first
	// offset there is 4; on partition 1 it is 0.
	plain := kgoClient(t, s, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 4 {
		require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "plain-%d", i)}).FirstErr())
	}

	p := kgoClient(t, s, kgo.TransactionalID(id), kgo.TransactionTimeout(30*time.Second),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// txn produces per[i] records to partition i in one transaction and
	// returns the offset of the first record on each partition.
	sent := map[int32]int32{} // records the producer sent to each partition
	txn := func(prefix string, per ...int) map[int32]int64 {
		t.Helper()
		require.NoError(t, p.BeginTransaction())
		first := map[int32]int64{}
		for part, n := range per {
			for i := range n {
				r := &kgo.Record{Partition: int32(part), Value: fmt.Appendf(nil, "%s-%d-%d", prefix, part, i)}
				require.NoError(t, p.ProduceSync(ctx, r).FirstErr())
				sent[int32(part)]++
				if i == 0 {
					first[int32(part)] = r.Offset
				}
			}
		}
		return first
	}
	parts := kadm.TopicsSet{topic: {0: {}, 1: {}}}
	// open checks the admin views of the open transaction.
	open := func(before time.Time, first map[int32]int64) {
		t.Helper()
		pid, epoch, err := p.ProducerID(ctx)
		require.NoError(t, err)
		described, err := adm.DescribeTransactions(ctx, id, "kgo-txn-unknown")
		require.NoError(t, err)
		d := described[id]
		require.NoError(t, d.Err)
		require.Equal(t, "Ongoing", d.State)
		require.Equal(t, pid, d.ProducerID)
		require.Equal(t, epoch, d.ProducerEpoch)
		require.Equal(t, int32(30_000), d.TimeoutMillis)
		require.GreaterOrEqual(t, d.StartTimestamp, before.UnixMilli()-1)
		require.LessOrEqual(t, d.StartTimestamp, time.Now().UnixMilli())
		require.Equal(t, parts, d.Topics)
		require.ErrorIs(t, described["kgo-txn-unknown"].Err, kerr.TransactionalIDNotFound)

		for _, f := range []struct {
			pids   []int64
			states []string
			listed bool
		}{
			{nil, nil, true},
			{nil, []string{"Ongoing"}, true},
			{[]int64{pid}, []string{"Ongoing", "Empty"}, true},
			{nil, []string{"CompleteCommit", "CompleteAbort"}, false},
			{[]int64{pid + 1}, nil, false},
		} {
			listed, err := adm.ListTransactions(ctx, f.pids, f.states)
			require.NoError(t, err)
			if !f.listed {
				require.NotContains(t, listed, id, "producer ids %v, states %v", f.pids, f.states)
				continue
			}
			require.Equal(t, kadm.ListedTransaction{Coordinator: 1, TxnID: id, ProducerID: pid, State: "Ongoing"}, listed[id],
				"producer ids %v, states %v", f.pids, f.states)
		}

		producers, err := adm.DescribeProducers(ctx, parts)
		require.NoError(t, err)
		for part := range int32(2) {
			dp := producers[topic].Partitions[part]
			require.NoError(t, dp.Err, "%s-%d: %s", topic, part, dp.ErrMessage)
			pr, ok := dp.ActiveProducers[pid]
			require.True(t, ok, "%s-%d lists producer %d: %+v", topic, part, pid, dp.ActiveProducers)
			require.Equal(t, epoch, pr.ProducerEpoch)
			require.Equal(t, first[part], pr.CurrentTxnStartOffset, "%s-%d: the open transaction's first offset", topic, part)
			require.Equal(t, sent[part]-1, pr.LastSequence, "%s-%d: one sequence number a record", topic, part)
			require.Positive(t, pr.LastTimestamp)
		}
	}
	// ended waits for the transaction's markers (EndTxn is answered once
	// the decision is logged) and checks the admin views of the ended
	// transaction.
	ended := func(state string) {
		t.Helper()
		pid, _, err := p.ProducerID(ctx)
		require.NoError(t, err)
		var d kadm.DescribedTransaction
		require.NoError(t, waitFor(ctx, state, func() bool {
			described, err := adm.DescribeTransactions(ctx, id)
			require.NoError(t, err)
			d = described[id]
			require.NoError(t, d.Err)
			return d.State == state
		}), "state %s", d.State)
		require.Empty(t, d.Topics)
		listed, err := adm.ListTransactions(ctx, nil, []string{state})
		require.NoError(t, err)
		require.Equal(t, state, listed[id].State)
		producers, err := adm.DescribeProducers(ctx, parts)
		require.NoError(t, err)
		for part := range int32(2) {
			pr, ok := producers[topic].Partitions[part].ActiveProducers[pid]
			require.True(t, ok, "%s-%d lists producer %d", topic, part, pid)
			require.Equal(t, int64(-1), pr.CurrentTxnStartOffset, "%s-%d: no open transaction", topic, part)
			require.GreaterOrEqual(t, pr.CoordinatorEpoch, int32(0), "%s-%d: the marker's coordinator epoch", topic, part)
		}
	}

	before := time.Now()
	first := txn("commit", 3, 2)
	require.Equal(t, map[int32]int64{0: 4, 1: 0}, first)
	open(before, first)
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))
	ended("CompleteCommit")

	before = time.Now()
	first = txn("abort", 2, 2)
	// Each partition's commit marker took an offset after its records.
	require.Equal(t, map[int32]int64{0: 8, 1: 3}, first)
	open(before, first)
	require.NoError(t, p.EndTransaction(ctx, kgo.TryAbort))
	ended("CompleteAbort")

	committed := map[int32][]string{
		0: {"plain-0", "plain-1", "plain-2", "plain-3", "commit-0-0", "commit-0-1", "commit-0-2"},
		1: {"commit-1-0", "commit-1-1"},
	}
	require.Equal(t, committed, kgoReadValues(t, ctx, s, topic, kgo.ReadCommitted(), 9))
	all := map[int32][]string{
		0: slices.Concat(committed[0], []string{"abort-0-0", "abort-0-1"}),
		1: slices.Concat(committed[1], []string{"abort-1-0", "abort-1-1"}),
	}
	require.Equal(t, all, kgoReadValues(t, ctx, s, topic, kgo.ReadUncommitted(), 13))
}

// TestFranzGoAbortHangingTransaction: an operator's abort of a hanging
// transaction (KIP-664, kafka-transactions.sh find-hanging and abort). A
// transactional producer opens a transaction, writes to a partition and
// vanishes before its (long) timeout; plain records written after it stay
// invisible at read_committed, because the open transaction holds the last
// stable offset. DescribeProducers on the partition shows the producer and
// its transaction's first offset; kadm's WriteTxnMarkers, sent to the
// leader with that producer's id and epoch and coordinator epoch 0 (none
// was written yet), aborts it there: the transaction's records never show
// up and the plain records after them become readable at read_committed.
// A new instance with the transactional id then takes over and commits.
func TestFranzGoAbortHangingTransaction(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	const topic = "kgo-hanging"
	adm := kadm.NewClient(kgoClient(t, s))
	kadmCreate(t, ctx, adm, topic, 1, nil)
	plain := kgoClient(t, s, kgo.DefaultProduceTopic(topic))
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr())

	hanging, err := kgo.NewClient(kgo.SeedBrokers(s.Addr), kgo.TransactionalID("kgo-hanging"),
		kgo.TransactionTimeout(10*time.Minute), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	require.NoError(t, hanging.BeginTransaction())
	require.NoError(t, hanging.ProduceSync(ctx, &kgo.Record{Value: []byte("hanging-0")}, &kgo.Record{Value: []byte("hanging-1")}).FirstErr())
	pid, epoch, err := hanging.ProducerID(ctx)
	require.NoError(t, err)
	hanging.Close() // no EndTransaction: the transaction hangs

	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr())
	require.Equal(t, map[int32][]string{0: {"before"}}, kgoReadValues(t, ctx, s, topic, kgo.ReadCommitted(), 1),
		"the open transaction holds read_committed readers")

	parts := kadm.TopicsSet{topic: {0: {}}}
	producers, err := adm.DescribeProducers(ctx, parts)
	require.NoError(t, err)
	pr, ok := producers[topic].Partitions[0].ActiveProducers[pid]
	require.True(t, ok, "producer %d listed: %+v", pid, producers[topic].Partitions[0].ActiveProducers)
	require.Equal(t, int64(1), pr.CurrentTxnStartOffset)
	require.Equal(t, int32(-1), pr.CoordinatorEpoch, "no marker yet")
	require.Equal(t, epoch, pr.ProducerEpoch)

	resp, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: pid, ProducerEpoch: pr.ProducerEpoch,
		Commit: false, CoordinatorEpoch: max(pr.CoordinatorEpoch, 0), Topics: parts})
	require.NoError(t, err)
	require.Contains(t, resp[pid].Topics[topic].Partitions, int32(0))
	require.NoError(t, resp[pid].Topics[topic].Partitions[0].Err)

	producers, err = adm.DescribeProducers(ctx, parts)
	require.NoError(t, err)
	require.Equal(t, int64(-1), producers[topic].Partitions[0].ActiveProducers[pid].CurrentTxnStartOffset)
	require.Equal(t, map[int32][]string{0: {"before", "after"}}, kgoReadValues(t, ctx, s, topic, kgo.ReadCommitted(), 2))
	require.Equal(t, map[int32][]string{0: {"before", "hanging-0", "hanging-1", "after"}},
		kgoReadValues(t, ctx, s, topic, kgo.ReadUncommitted(), 4))

	// The coordinator still has the transaction open. A new instance with
	// the same transactional id fences it (the coordinator aborts it
	// again, at the next epoch, writing a second abort marker) and then
	// commits a transaction of its own.
	again := kgoClient(t, s, kgo.TransactionalID("kgo-hanging"), kgo.DefaultProduceTopic(topic))
	require.NoError(t, again.BeginTransaction())
	require.NoError(t, again.ProduceSync(ctx, &kgo.Record{Value: []byte("again")}).FirstErr())
	require.NoError(t, again.EndTransaction(ctx, kgo.TryCommit))
	require.Equal(t, map[int32][]string{0: {"before", "after", "again"}}, kgoReadValues(t, ctx, s, topic, kgo.ReadCommitted(), 3))
}
