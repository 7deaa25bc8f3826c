package txn

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// logStore is a Store over real logs, one per StateTopic partition, as
// the broker keeps them: each Append is one Kafka record batch, durable
// (FlushPolicy Sync) when it returns.
type logStore struct{ logs []*log.Log }

func (s *logStore) Append(_ context.Context, partition, _ int32, recs []record.Record) error {
	_, err := s.logs[partition].Append(recs...)
	return err
}

// logRecords reads a log's records from its start, batch by batch, as
// Kafka-format batches parsed and CRC-checked by package record.
func logRecords(l *log.Log) iter.Seq2[*record.Record, error] {
	return func(yield func(*record.Record, error) bool) {
		var it record.Iterator
		for off := l.StartOffset(); off < l.EndOffset(); {
			buf, err := l.Read(off, 1<<20)
			if err != nil {
				yield(nil, err)
				return
			}
			for len(buf) > 0 {
				b, n, err := record.ParseBatch(buf)
				if err != nil {
					yield(nil, err)
					return
				}
				buf = buf[n:]
				for it.Reset(b); it.Next(); {
					if !yield(it.Record(), nil) {
						return
					}
				}
				if err := it.Err(); err != nil {
					yield(nil, err)
					return
				}
				off = b.NextOffset()
			}
		}
	}
}

// The coordinator's records round-trip through real log segments: a
// coordinator writes to logs in a directory, stops before its markers are
// written, the logs are closed and reopened, and a new coordinator loads
// them at a newer coordinator epoch, finishes the decided transaction,
// keeps the open one and recognises a retried KIP-360 InitProducerId.
func TestStateRoundTripsThroughLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const parts = 2
	openLogs := func() *logStore {
		s := &logStore{}
		for p := range parts {
			l, err := log.Open(dir+"/"+StateTopic+"-"+string(rune('0'+p)), log.Options{})
			require.NoError(t, err)
			s.logs = append(s.logs, l)
		}
		return s
	}
	clock := &fakeClock{now: time.UnixMilli(1_700_000_000_000)}
	nextPID := int64(500)
	open := func(s *logStore, m MarkerWriter, epoch int32) *Coordinator {
		c, err := NewCoordinator(Config{
			Partitions: parts, Store: s, Markers: m, ManualTick: true, Now: clock.Now,
			MarkerRetryBackoff: time.Millisecond,
			NewProducerID:      func(context.Context) (int64, error) { nextPID++; return nextPID, nil },
		})
		require.NoError(t, err)
		for p := range int32(parts) {
			require.NoError(t, c.Load(ctx, p, epoch, logRecords(s.logs[p])))
		}
		return c
	}

	store := openLogs()
	down := &fakeMarkers{}
	down.setErr(func(int, TopicPartition) error { return errTransient })
	c := open(store, down, 1)
	pa, ea, err := c.InitProducerID(ctx, "committer", time.Minute, -1, -1)
	require.NoError(t, err)
	_, err = c.AddPartitions(ctx, "committer", pa, ea, []TopicPartition{tp("out", 0), tp("out", 1)})
	require.NoError(t, err)
	require.NoError(t, c.AddOffsets(ctx, "committer", pa, ea, "group"))
	require.NoError(t, c.EndTxn(ctx, "committer", pa, ea, true))
	pb, eb, err := c.InitProducerID(ctx, "open", 30*time.Second, -1, -1)
	require.NoError(t, err)
	_, err = c.AddPartitions(ctx, "open", pb, eb, []TopicPartition{tp("out", 2)})
	require.NoError(t, err)
	pc, ec, err := c.InitProducerID(ctx, "recovering", time.Minute, -1, -1)
	require.NoError(t, err)
	pc2, ec2, err := c.InitProducerID(ctx, "recovering", time.Minute, pc, ec)
	require.NoError(t, err)
	before := c.Describe([]string{"committer", "open", "recovering"})
	c.Close()
	for _, l := range store.logs {
		require.NoError(t, l.Close())
	}

	store = openLogs()
	t.Cleanup(func() {
		for _, l := range store.logs {
			l.Close()
		}
	})
	up := &fakeMarkers{}
	c = open(store, up, 2)
	defer c.Close()
	after := c.Describe([]string{"committer", "open", "recovering"})
	require.Equal(t, before[1:], after[1:], "the open transaction and the bumped id come back as they were")

	h := &harness{c: c}
	h.waitState(t, "committer", CompleteCommit)
	group := TopicPartition{OffsetsTopic, PartitionFor("group", 50)}
	require.Equal(t, []markerCall{{pid: pa, epoch: ea, commit: true, coordinatorEpoch: 2,
		partitions: []TopicPartition{group, tp("out", 0), tp("out", 1)}}}, up.snapshot())

	pc3, ec3, err := c.InitProducerID(ctx, "recovering", time.Minute, pc, ec)
	require.NoError(t, err, "a retried KIP-360 bump after the restart")
	require.Equal(t, [2]int64{pc2, int64(ec2)}, [2]int64{pc3, int64(ec3)})
	require.NoError(t, c.EndTxn(ctx, "open", pb, eb, false))
	h.waitState(t, "open", CompleteAbort)
}
