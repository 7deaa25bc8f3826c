package partition

import (
	"fmt"

	"math/rand/v2"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// txnBatchOf encodes n records of a transactional producer.
func txnBatchOf(t testing.TB, pid int64, epoch int16, seq int32, n int) record.Batch {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: time.UnixMilli(1_700_000_000_000), Value: fmt.Appendf(nil, "txn %d/%d", pid, int64(seq)+int64(i))}
	}
	b, err := record.NewBatch(recs, record.BatchOptions{Producer: &record.ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: seq}, Transactional: true})
	require.NoError(t, err)
	return b
}

func markerOf(t testing.TB, pid int64, epoch int16, commit bool, coordEpoch int32) record.Batch {
	t.Helper()
	b, err := MarkerBatch(pid, epoch, commit, coordEpoch)
	require.NoError(t, err)
	return b
}

// TestTxnAppendChecks walks one producer through the transaction rules of
// txn.go, each refusal leaving the log as it was.
func TestTxnAppendChecks(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	type step struct {
		batch    record.Batch
		err      error
		base     int64 // when err is nil
		dup      bool
		lso      int64 // after the step
		describe string
	}
	steps := []step{
		{txnBatchOf(t, 1, 0, 0, 2), nil, 0, false, 0, "first transactional batch opens a transaction"},
		{producerBatchOf(t, 1, 0, 2, 1), ErrInvalidTxnState, 0, false, 0, "non-transactional batch inside the transaction"},
		{producerBatchOf(t, 2, 0, 0, 1), nil, 2, false, 0, "another producer, not transactional"},
		{txnBatchOf(t, 1, 0, 0, 2), nil, 0, true, 0, "a retried transactional batch is a duplicate"},
		{txnBatchOf(t, 1, 0, 2, 1), nil, 3, false, 0, "the transaction goes on"},
		{markerOf(t, 1, 0, true, 5), nil, 4, false, 5, "COMMIT ends it"},
		{markerOf(t, 1, 0, true, 4), ErrTransactionCoordinatorFenced, 0, false, 5, "marker from an older coordinator"},
		{producerBatchOf(t, 1, 0, 3, 1), nil, 5, false, 6, "non-transactional after the commit"},
		{markerOf(t, 1, 1, false, 5), nil, 6, false, 7, "marker with a newer epoch and no transaction: legal, bumps the epoch"},
		{producerBatchOf(t, 1, 0, 4, 1), ErrInvalidProducerEpoch, 0, false, 7, "the old epoch is fenced"},
		{markerOf(t, 1, 0, false, 6), ErrInvalidProducerEpoch, 0, false, 7, "so is its marker"},
		{txnBatchOf(t, 1, 1, 0, 1), nil, 7, false, 7, "new epoch starts at sequence 0"},
		{txnBatchOf(t, 3, 0, 0, 1), nil, 8, false, 7, "a second open transaction"},
		{markerOf(t, 1, 1, false, 6), nil, 9, false, 8, "ABORT of the first: the second still pins the LSO"},
		{markerOf(t, 9, 0, true, 1), nil, 10, false, 8, "marker for a producer with nothing here"},
		{markerOf(t, 3, 0, true, 0), nil, 11, false, 12, "COMMIT of the second"},
	}
	for _, s := range steps {
		end := p.EndOffset()
		base, dup, err := p.AppendProduced(s.batch)
		if s.err != nil {
			require.ErrorIs(t, err, s.err, s.describe)
			require.Equal(t, end, p.EndOffset(), "%s: nothing written", s.describe)
		} else {
			require.NoError(t, err, s.describe)
			require.Equal(t, s.base, base, s.describe)
			require.Equal(t, s.dup, dup, s.describe)
		}
		require.Equal(t, s.lso, p.LastStableOffset(), s.describe)
	}

	// A control batch that is no end transaction marker.
	bad, err := record.NewBatch([]record.Record{{Key: []byte{0, 0, 0, 3}, Value: []byte{0, 0, 0, 0, 0, 0}}},
		record.BatchOptions{Producer: &record.ProducerInfo{ID: 1, Epoch: 1, BaseSequence: -1}, Transactional: true})
	require.NoError(t, err)
	raw := append([]byte(nil), bad.Bytes()...)
	raw[22] |= 0x20 // control bit; the CRC no longer matches, so fix it
	bad, _, err = record.ParseBatch(raw)
	require.NoError(t, err)
	fixCRC(bad)
	end := p.EndOffset()
	_, _, err = p.AppendProduced(bad)
	require.ErrorIs(t, err, record.ErrBadControlRecord)
	require.Equal(t, end, p.EndOffset())

	infos, err := p.Producers()
	require.NoError(t, err)
	byID := map[int64]ProducerInfo{}
	for _, in := range infos {
		byID[in.ID] = in
	}
	require.Equal(t, int32(6), byID[1].CoordinatorEpoch)
	require.Equal(t, int16(1), byID[1].Epoch)
	require.Equal(t, int64(-1), byID[1].CurrentTxnStartOffset)
	require.Equal(t, int32(1), byID[9].CoordinatorEpoch, "a producer known by its marker is listed")
	require.Equal(t, int64(-1), byID[9].LastOffset)
	require.Equal(t, int32(-1), byID[2].CoordinatorEpoch)
}

// TestTxnOpenShownByProducers: DescribeProducers' view of an open
// transaction.
func TestTxnOpenShownByProducers(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	appendValues(t, p, 3)
	_, _, err := p.AppendProduced(txnBatchOf(t, 4, 2, 0, 2))
	require.NoError(t, err)
	infos, err := p.Producers()
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, int64(3), infos[0].CurrentTxnStartOffset)
	require.Equal(t, int32(-1), infos[0].CoordinatorEpoch)
	require.Equal(t, int64(3), p.LastStableOffset())
	require.Equal(t, int64(5), p.HighWatermark())
}

// txnModel is the naive reference for the last stable offset: every
// transaction's first offset and marker, and the high watermark.
type txnModel struct {
	open map[int64]int64 // pid -> first offset
	done []doneTxn
}

func (m *txnModel) lso(hw int64) int64 {
	lso := hw
	for _, f := range m.open {
		lso = min(lso, f)
	}
	for _, d := range m.done {
		if d.marker >= hw {
			lso = min(lso, d.first)
		}
	}
	return lso
}

// TestLastStableOffsetProperty appends random interleavings of
// transactional, idempotent and plain batches and markers from several
// producers, on a standalone partition (HW = end) and on a replicated one
// whose high watermark trails at random, and checks the last stable offset
// after every step against the naive model: never past the high
// watermark, never past an open transaction's first offset, never past an
// ended transaction whose marker is not below the high watermark - and no
// lower than that either.
func TestLastStableOffsetProperty(t *testing.T) {
	for _, replicatedP := range []bool{false, true} {
		t.Run(fmt.Sprintf("replicated=%v", replicatedP), func(t *testing.T) {
			for seed := range uint64(8) {
				rng := rand.New(rand.NewPCG(seed, 99))
				o := Options{Log: log.Options{Flush: log.None}, Replicated: replicatedP}
				p, err := Open(t.TempDir(), "t", 0, o)
				require.NoError(t, err)
				if replicatedP {
					require.NoError(t, p.BecomeLeader(0))
				}
				m := &txnModel{open: map[int64]int64{}}
				seqs := map[int64]int32{}
				hw := int64(0)
				for range 300 {
					pid := int64(rng.IntN(4))
					switch r := rng.IntN(10); {
					case r < 5:
						n := 1 + rng.IntN(3)
						base, _, err := p.AppendProduced(txnBatchOf(t, pid, 0, seqs[pid], n))
						require.NoError(t, err)
						seqs[pid] += int32(n)
						if _, ok := m.open[pid]; !ok {
							m.open[pid] = base
						}
					case r < 8:
						base, _, err := p.AppendProduced(markerOf(t, pid, 0, rng.IntN(2) == 0, 0))
						require.NoError(t, err)
						if f, ok := m.open[pid]; ok {
							m.done = append(m.done, doneTxn{first: f, marker: base})
							delete(m.open, pid)
						}
					case r < 9:
						appendValues(t, p, 1)
					default:
						if _, ok := m.open[pid]; ok {
							_, _, err := p.AppendProduced(producerBatchOf(t, pid, 0, seqs[pid], 1))
							require.ErrorIs(t, err, ErrInvalidTxnState)
						}
					}
					if replicatedP && rng.IntN(3) == 0 {
						hw += rng.Int64N(p.EndOffset() - hw + 1)
						p.SetHighWatermark(hw)
					}
					if !replicatedP {
						hw = p.HighWatermark()
					}
					require.Equal(t, hw, p.HighWatermark())
					lso := p.LastStableOffset()
					require.LessOrEqual(t, lso, hw)
					for _, f := range m.open {
						require.LessOrEqual(t, lso, f, "LSO passed an open transaction")
					}
					require.Equal(t, m.lso(hw), lso)
				}
				require.NoError(t, p.Close())
			}
		})
	}
}

func fixCRC(b record.Batch) {
	raw := b.Bytes()
	c := b.ComputeCRC()
	raw[17], raw[18], raw[19], raw[20] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}
