package partition

import (
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// keyedTxnBatch is a transactional batch of one keyed record.
func keyedTxnBatch(t *testing.T, pid int64, seq int32, key, value string) record.Batch {
	t.Helper()
	b, err := record.NewBatch([]record.Record{{Key: []byte(key), Value: []byte(value), Timestamp: time.Now()}},
		record.BatchOptions{Producer: &record.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: seq}, Transactional: true})
	require.NoError(t, err)
	return b
}

// logView reads every batch of the log: the values a read_committed
// reader keeps (by the partition's aborted transactions), and the markers.
func logView(t *testing.T, p *Partition) (committed []string, markers int, aborted int) {
	t.Helper()
	pending := map[int64][]int64{}
	for off := p.StartOffset(); off < p.LastStableOffset(); {
		res, err := p.FetchCommitted(t.Context(), off, 0, 1<<20, 0)
		require.NoError(t, err)
		require.NotEmpty(t, res.Batches)
		for _, a := range res.AbortedTxns {
			if f := pending[a.ProducerID]; len(f) == 0 || f[len(f)-1] != a.FirstOffset {
				pending[a.ProducerID] = append(pending[a.ProducerID], a.FirstOffset)
			}
		}
		for rest := res.Batches; len(rest) > 0; {
			b, n, err := record.ParseBatch(rest)
			require.NoError(t, err)
			rest = rest[n:]
			if b.NextOffset() <= off {
				continue
			}
			off = b.NextOffset()
			if b.IsControl() {
				markers++
				if f := pending[b.ProducerID()]; len(f) > 0 {
					pending[b.ProducerID()] = f[1:]
				}
				continue
			}
			if f := pending[b.ProducerID()]; b.IsTransactional() && len(f) > 0 && b.BaseOffset() >= f[0] {
				aborted++
				continue
			}
			recs, err := b.Records()
			require.NoError(t, err)
			for _, r := range recs {
				committed = append(committed, string(r.Key)+"="+string(r.Value))
			}
		}
	}
	return committed, markers, aborted
}

// TestCompactionAndTransactions: the cleaner keeps every marker, drops
// aborted records (which never shadow committed ones), and cleans nothing
// at or past the last stable offset; what read_committed sees is the same
// before and after, up to the keys compaction may drop.
func TestCompactionAndTransactions(t *testing.T) {
	p, err := Open(t.TempDir(), "t", 0, Options{Log: log.Options{SegmentBytes: 300, Flush: log.None, Cleanup: log.Compact}})
	require.NoError(t, err)
	defer p.Close()
	app := func(b record.Batch) int64 {
		base, _, err := p.AppendProduced(b)
		require.NoError(t, err)
		return base
	}
	app(keyedTxnBatch(t, 1, 0, "k", "committed"))
	app(markerOf(t, 1, 0, true, 0))
	app(keyedTxnBatch(t, 2, 0, "k", "aborted"))
	app(markerOf(t, 2, 0, false, 0))
	for i := range 6 {
		_, err := p.Append(record.Record{Key: []byte("pad"), Value: []byte{byte('0' + i)}})
		require.NoError(t, err)
	}
	open := app(keyedTxnBatch(t, 3, 0, "k", "open"))
	for i := range 6 {
		_, err := p.Append(record.Record{Key: []byte("late"), Value: []byte{byte('0' + i)}})
		require.NoError(t, err)
	}
	require.NoError(t, p.Log().Roll())
	require.Equal(t, open, p.LastStableOffset())

	before, markers, aborted := logView(t, p)
	require.Equal(t, 2, markers)
	require.Equal(t, 1, aborted)
	st, err := p.Log().Clean(true)
	require.NoError(t, err)
	require.True(t, st.Cleaned)
	require.LessOrEqual(t, st.CleanedTo, open, "nothing at or past the LSO is cleaned")

	after, markers, aborted := logView(t, p)
	require.Equal(t, 2, markers, "markers are kept")
	require.Zero(t, aborted, "aborted records are gone")
	require.Contains(t, after, "k=committed", "the aborted record did not shadow the committed one")
	require.Contains(t, after, "pad=5")
	require.NotContains(t, after, "pad=0")
	require.Subset(t, before, after)

	// Past the LSO everything is as written: all six "late" records.
	n := 0
	for _, kv := range after {
		if len(kv) > 4 && kv[:5] == "late=" {
			n++
		}
	}
	require.Zero(t, n, "read_committed stops at the open transaction")
	recs := 0
	for off := open; off < p.EndOffset(); {
		data, err := p.Log().Read(off, 1<<20)
		require.NoError(t, err)
		for rest := data; len(rest) > 0; {
			b, m, err := record.ParseBatch(rest)
			require.NoError(t, err)
			recs += int(b.NumRecords())
			off = b.NextOffset()
			rest = rest[m:]
		}
	}
	require.Equal(t, 7, recs, "the open transaction and what follows are untouched")
}
