package transport

import (
	"context"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnLog writes transactions straight into a partition (no coordinator
// exists yet): what a transactional producer's batches and its
// coordinator's markers leave in the log.
type txnLog struct {
	t    testing.TB
	p    *partition.Partition
	seqs map[int64]int32
}

func (l *txnLog) plain(value string) int64 {
	l.t.Helper()
	off, err := l.p.Append(record.Record{Value: []byte(value)})
	require.NoError(l.t, err)
	return off
}

func (l *txnLog) txn(pid int64, values ...string) int64 {
	l.t.Helper()
	recs := make([]record.Record, len(values))
	for i, v := range values {
		recs[i] = record.Record{Value: []byte(v)}
	}
	b, err := record.NewBatch(recs, record.BatchOptions{
		Producer: &record.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: l.seqs[pid]}, Transactional: true, Now: time.Now(),
	})
	require.NoError(l.t, err)
	l.seqs[pid] += int32(len(values))
	off, _, err := l.p.AppendProduced(b)
	require.NoError(l.t, err)
	return off
}

func (l *txnLog) end(pid int64, commit bool) int64 {
	l.t.Helper()
	b, err := partition.MarkerBatch(pid, 0, commit, 3)
	require.NoError(l.t, err)
	off, _, err := l.p.AppendProduced(b)
	require.NoError(l.t, err)
	return off
}

// consumeValues reads the topic from the start with a franz-go consumer at
// the given isolation level until it has want values, and returns them in
// order. Control records must never come out.
func consumeValues(t *testing.T, addr, topic string, level kgo.IsolationLevel, want int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %q so far", got)
		for _, e := range fs.Errors() {
			require.NoError(t, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			require.False(t, r.Attrs.IsControl(), "a control record was delivered")
			got = append(got, string(r.Value))
		})
	}
	return got
}

// TestReadCommittedWithFranzGo: committed, aborted, open and interleaved
// transactions in one partition, read through a real server by franz-go at
// read_committed (exactly the committed records, nothing past the open
// transaction) and at read_uncommitted (every data record); the raw Fetch
// answers carry the LSO and, at read_committed only, the aborted
// transactions; ListOffsets latest at read_committed is the LSO.
func TestReadCommittedWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "txn"
	fetchCreate(t, b, topic, 1)
	p, err := b.Partition(topic, 0)
	require.NoError(t, err)
	l := &txnLog{t: t, p: p, seqs: map[int64]int32{}}

	l.plain("p0")
	l.txn(100, "c1", "c2")
	a1 := l.txn(200, "a1")
	l.plain("p1")
	l.txn(100, "c3")
	l.txn(200, "a2")
	l.end(200, false)
	l.end(100, true)
	l.plain("p2")
	open := l.txn(300, "o1")
	l.plain("p3")
	l.txn(100, "c4")
	l.end(100, true)
	require.Equal(t, open, p.LastStableOffset())

	committed := []string{"p0", "c1", "c2", "p1", "c3", "p2"}
	all := []string{"p0", "c1", "c2", "a1", "p1", "c3", "a2", "p2", "o1", "p3", "c4"}
	require.Equal(t, committed, consumeValues(t, addr, topic, kgo.ReadCommitted(), len(committed)))
	require.Equal(t, all, consumeValues(t, addr, topic, kgo.ReadUncommitted(), len(all)))

	// The wire: LSO in both, aborted transactions at read_committed only,
	// and no read_committed batch at or past the LSO.
	c := fetchDial(t, addr)
	for _, level := range []int8{0, 1} {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.IsolationLevel, req.SessionEpoch = -1, 1<<20, level, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := fetchDo[*kmsg.FetchResponse](t, c, 11, req)
		part := resp.Topics[0].Partitions[0]
		require.Equal(t, errNone, part.ErrorCode)
		require.Equal(t, open, part.LastStableOffset)
		require.Equal(t, p.HighWatermark(), part.HighWatermark)
		last := int64(-1)
		for rest := part.RecordBatches; len(rest) > 0; {
			bt, n, err := record.ParseBatch(rest)
			require.NoError(t, err)
			last = bt.NextOffset()
			rest = rest[n:]
		}
		if level == 1 {
			require.Equal(t, []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: 200, FirstOffset: a1}}, part.AbortedTransactions)
			require.LessOrEqual(t, last, open, "read_committed stops at the LSO")
		} else {
			require.Nil(t, part.AbortedTransactions)
			require.Equal(t, p.HighWatermark(), last)
		}
	}

	// ListOffsets latest: the LSO at read_committed, the HW otherwise.
	for _, tc := range []struct {
		level int8
		want  int64
	}{{1, open}, {0, p.HighWatermark()}} {
		lr := listReq(topic, -1, 0, listLatest)
		lr.IsolationLevel = tc.level
		resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, 5, lr)
		require.Equal(t, tc.want, resp.Topics[0].Partitions[0].Offset, "isolation level %d", tc.level)
	}

	// DescribeProducers shows the open transaction and the coordinator
	// epoch of the markers.
	dp := kmsg.NewPtrDescribeProducersRequest()
	dp.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: topic, Partitions: []int32{0}}}
	dresp := fetchDo[*kmsg.DescribeProducersResponse](t, c, 0, dp)
	byID := map[int64]kmsg.DescribeProducersResponseTopicPartitionActiveProducer{}
	for _, ap := range dresp.Topics[0].Partitions[0].ActiveProducers {
		byID[ap.ProducerID] = ap
	}
	require.Equal(t, open, byID[300].CurrentTxnStartOffset)
	require.Equal(t, int32(-1), byID[300].CoordinatorEpoch)
	require.Equal(t, int64(-1), byID[200].CurrentTxnStartOffset)
	require.Equal(t, int32(3), byID[200].CoordinatorEpoch)

	// Aborting the open transaction moves the LSO to the end: the rest of
	// the committed records appear, o1 never.
	l.end(300, false)
	require.Equal(t, p.HighWatermark(), p.LastStableOffset())
	committed = append(committed, "p3", "c4")
	require.Equal(t, committed, consumeValues(t, addr, topic, kgo.ReadCommitted(), len(committed)))
}

// TestReadCommittedInProcess: the in-process consumer at ReadCommitted
// filters the same way, and ReadUncommitted returns every data record;
// markers never come out.
func TestReadCommittedInProcess(t *testing.T) {
	b, err := spool.Open(t.TempDir(), fetchOpts)
	require.NoError(t, err)
	defer b.Close()
	const topic = "txn"
	fetchCreate(t, b, topic, 1)
	p, err := b.Partition(topic, 0)
	require.NoError(t, err)
	l := &txnLog{t: t, p: p, seqs: map[int64]int32{}}
	l.plain("p0")
	l.txn(1, "a1")
	l.txn(2, "c1")
	l.txn(1, "a2")
	l.end(1, false)
	l.end(2, true)
	l.txn(3, "o1")
	l.plain("p1")

	read := func(level spool.IsolationLevel, want int) []string {
		c, err := b.NewConsumer(spool.ConsumerConfig{IsolationLevel: level, AutoOffsetReset: spool.ResetEarliest, FetchMaxWait: 50 * time.Millisecond})
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.Assign(topic))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var got []string
		for len(got) < want {
			recs, err := c.Poll(ctx)
			require.NoError(t, err, "got %q", got)
			for _, r := range recs {
				got = append(got, string(r.Value))
			}
		}
		return got
	}
	require.Equal(t, []string{"p0", "c1"}, read(spool.ReadCommitted, 2))
	require.Equal(t, []string{"p0", "a1", "c1", "a2", "o1", "p1"}, read(spool.ReadUncommitted, 6))

	// "Latest" at read_committed is the LSO.
	c, err := b.NewConsumer(spool.ConsumerConfig{IsolationLevel: spool.ReadCommitted})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign(topic))
	require.NoError(t, c.SeekToEnd(topic))
	pos, err := c.Position(topic, 0)
	require.NoError(t, err)
	require.Equal(t, p.LastStableOffset(), pos)

	l.end(3, true)
	require.Equal(t, []string{"p0", "c1", "o1", "p1"}, read(spool.ReadCommitted, 4))
}
