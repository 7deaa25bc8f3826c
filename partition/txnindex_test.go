package partition

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// txnScenario writes, with segments of a few batches so that transactions
// span segments:
//
//	pid 1: txn batches, ABORT          (aborted, spans segments)
//	pid 2: txn batches, COMMIT         (committed)
//	pid 3: txn batch, ABORT            (aborted while pid 4's is open)
//	pid 4: txn batch, left open
//
// It returns the offsets of interest.
type txnOffsets struct {
	first1, first2, abort1, first3, abort3, first4 int64
}

func txnScenario(t *testing.T, p *Partition) txnOffsets {
	t.Helper()
	var o txnOffsets
	app := func(b record.Batch) int64 {
		t.Helper()
		base, _, err := p.AppendProduced(b)
		require.NoError(t, err)
		return base
	}
	o.first1 = app(txnBatchOf(t, 1, 0, 0, 5))
	o.first2 = app(txnBatchOf(t, 2, 0, 0, 5))
	appendValues(t, p, 3)
	app(txnBatchOf(t, 1, 0, 5, 5))
	o.abort1 = app(markerOf(t, 1, 0, false, 0))
	app(txnBatchOf(t, 2, 0, 5, 5))
	app(markerOf(t, 2, 0, true, 0))
	o.first4 = app(txnBatchOf(t, 4, 0, 0, 2))
	o.first3 = app(txnBatchOf(t, 3, 0, 0, 2))
	o.abort3 = app(markerOf(t, 3, 0, false, 0))
	appendValues(t, p, 2)
	return o
}

// txnIndexFiles reads every .txnindex in dir, by name.
func txnIndexFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), segment.TxnIndexSuffix) {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			out[e.Name()] = data
		}
	}
	return out
}

func smallSegments() Options {
	return Options{Log: log.Options{SegmentBytes: 400, Flush: log.None}}
}

func TestAbortedTxnIndex(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, "t", 0, smallSegments())
	require.NoError(t, err)
	o := txnScenario(t, p)
	require.Greater(t, p.Log().NumSegments(), 3, "the scenario must span segments")

	require.Equal(t, o.first4, p.LastStableOffset(), "the open transaction pins the LSO")
	all, err := p.AbortedTransactions(0, p.EndOffset())
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{
		{ProducerID: 1, FirstOffset: o.first1, LastOffset: o.abort1},
		{ProducerID: 3, FirstOffset: o.first3, LastOffset: o.abort3},
	}, all)

	// Kafka's range rule: marker at or after from, first offset before upTo.
	got, err := p.AbortedTransactions(o.abort1+1, p.EndOffset())
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{{ProducerID: 3, FirstOffset: o.first3, LastOffset: o.abort3}}, got)
	got, err = p.AbortedTransactions(0, o.first3)
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{{ProducerID: 1, FirstOffset: o.first1, LastOffset: o.abort1}}, got)
	got, err = p.AbortedTransactions(o.abort1, o.first1+1)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// Each entry sits in the segment of its marker, with Kafka's
	// lastStableOffset: pid 1's abort came while pid 2's transaction was
	// open, pid 3's while pid 4's was.
	files := txnIndexFiles(t, dir)
	require.Equal(t, p.Log().NumSegments(), len(files), "every segment has a .txnindex")
	var entries []segment.AbortedTxn
	for name, data := range files {
		es, err := segment.ParseTxnIndex(data)
		require.NoError(t, err, name)
		base, _, _ := segment.ParseFileName(name)
		for _, e := range es {
			require.GreaterOrEqual(t, e.LastOffset, base)
		}
		entries = append(entries, es...)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].LastOffset < entries[j].LastOffset })
	require.Equal(t, []segment.AbortedTxn{
		{ProducerID: 1, FirstOffset: o.first1, LastOffset: o.abort1, LastStableOffset: o.first2},
		{ProducerID: 3, FirstOffset: o.first3, LastOffset: o.abort3, LastStableOffset: o.first4},
	}, entries)
	require.NoError(t, p.Close())
}

// TestTxnIndexRebuilt: a deleted, torn or damaged index is rebuilt from
// the log when the partition opens, to the same bytes.
func TestTxnIndexRebuilt(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, "t", 0, smallSegments())
	require.NoError(t, err)
	o := txnScenario(t, p)
	require.NoError(t, p.Close())
	want := txnIndexFiles(t, dir)
	var withEntries []string
	for name, data := range want {
		if len(data) > 0 {
			withEntries = append(withEntries, name)
		}
	}
	require.Len(t, withEntries, 2)

	damage := map[string]func(path string){
		"deleted": func(path string) { require.NoError(t, os.Remove(path)) },
		"torn": func(path string) {
			require.NoError(t, os.Truncate(path, segment.TxnIndexEntrySize-3))
		},
		"bad version": func(path string) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data[1] ^= 1
			require.NoError(t, os.WriteFile(path, data, 0o644))
		},
		"empty segment index deleted": nil,
	}
	for what, hurt := range damage {
		t.Run(what, func(t *testing.T) {
			if hurt == nil {
				for name, data := range want {
					if len(data) == 0 {
						require.NoError(t, os.Remove(filepath.Join(dir, name)))
						break
					}
				}
			} else {
				for _, name := range withEntries {
					hurt(filepath.Join(dir, name))
				}
			}
			p, err := Open(dir, "t", 0, smallSegments())
			require.NoError(t, err)
			require.Equal(t, want, txnIndexFiles(t, dir))
			require.Equal(t, o.first4, p.LastStableOffset())
			require.NoError(t, p.Close())
		})
	}
}

// TestTxnIndexFollowsTheLog: truncation cuts the index, retention deletes
// it with its segment.
func TestTxnIndexFollowsTheLog(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, "t", 0, smallSegments())
	require.NoError(t, err)
	defer p.Close()
	o := txnScenario(t, p)

	_, err = p.TruncateTo(o.abort3)
	require.NoError(t, err)
	got, err := p.AbortedTransactions(0, p.EndOffset())
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{{ProducerID: 1, FirstOffset: o.first1, LastOffset: o.abort1}}, got,
		"the marker truncated away takes its entry")
	require.Equal(t, o.first4, p.LastStableOffset(), "pid 3's transaction is open again, after pid 4's")
	infos, err := p.Producers()
	require.NoError(t, err)
	open := map[int64]int64{}
	for _, in := range infos {
		open[in.ID] = in.CurrentTxnStartOffset
	}
	require.Equal(t, o.first3, open[3])

	// Abort it again, then delete everything below pid 1's marker.
	_, _, err = p.AppendProduced(markerOf(t, 3, 0, false, 0))
	require.NoError(t, err)
	require.NoError(t, p.Log().DeleteRecordsBefore(o.abort1+1))
	files := txnIndexFiles(t, dir)
	require.Equal(t, p.Log().NumSegments(), len(files), "deleted segments took their indexes")
	got, err = p.AbortedTransactions(p.StartOffset(), p.EndOffset())
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, int64(3), got[0].ProducerID)
}

// TestTxnFollowerMatchesLeader copies a leader's log, transactions and
// markers included, to a follower: the follower's indexes are the same
// bytes, and once it leads, its open transactions and LSO are the
// leader's.
func TestTxnFollowerMatchesLeader(t *testing.T) {
	o := Options{Log: log.Options{SegmentBytes: 400, Flush: log.None}, Replicated: true}
	ldir, fdir := t.TempDir(), t.TempDir()
	leader, err := Open(ldir, "t", 0, o)
	require.NoError(t, err)
	defer leader.Close()
	follower, err := Open(fdir, "t", 0, o)
	require.NoError(t, err)
	defer follower.Close()
	require.NoError(t, leader.BecomeLeader(1))
	require.NoError(t, follower.BecomeFollower(1))
	offs := txnScenario(t, leader)
	leader.SetHighWatermark(leader.EndOffset())

	for follower.EndOffset() < leader.EndOffset() {
		data, err := leader.Log().Read(follower.EndOffset(), 1<<20)
		require.NoError(t, err)
		_, err = follower.AppendReplica(data)
		require.NoError(t, err)
	}
	follower.SetHighWatermark(leader.HighWatermark())
	require.Equal(t, txnIndexFiles(t, ldir), txnIndexFiles(t, fdir))
	require.Equal(t, offs.first4, follower.LastStableOffset())

	require.NoError(t, follower.BecomeLeader(2))
	require.Equal(t, offs.first4, follower.LastStableOffset())
	_, _, err = follower.AppendProduced(producerBatchOf(t, 4, 0, 2, 1))
	require.ErrorIs(t, err, ErrInvalidTxnState, "the new leader knows pid 4's transaction is open")
	base, _, err := follower.AppendProduced(markerOf(t, 4, 0, false, 1))
	require.NoError(t, err)
	follower.SetHighWatermark(follower.EndOffset())
	require.Equal(t, follower.HighWatermark(), follower.LastStableOffset())
	got, err := follower.AbortedTransactions(base, base+1)
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{{ProducerID: 4, FirstOffset: offs.first4, LastOffset: base}}, got)
}

// TestTxnOpenSurvivesRestart: an open transaction is in the producer
// snapshot (CurrentTxnFirstOffset) after a clean close, and replayed from
// the log after a crash; the LSO stays pinned until the ABORT, which moves
// it and indexes the transaction.
func TestTxnOpenSurvivesRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "close"
		if crash {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Log: log.Options{Flush: log.Sync}}
			p, err := Open(dir, "t", 0, o)
			require.NoError(t, err)
			appendValues(t, p, 2)
			first, _, err := p.AppendProduced(txnBatchOf(t, 5, 1, 0, 3))
			require.NoError(t, err)
			appendValues(t, p, 2)
			_, _, err = p.AppendProduced(markerOf(t, 6, 0, true, 7)) // marker-only producer
			require.NoError(t, err)
			require.Equal(t, first, p.LastStableOffset())
			if crash {
				require.NoError(t, p.Crash(true))
			} else {
				require.NoError(t, p.Close())
				snaps, err := listSnapshots(dir)
				require.NoError(t, err)
				require.NotEmpty(t, snaps)
				data, err := os.ReadFile(filepath.Join(dir, snapshotName(snaps[len(snaps)-1])))
				require.NoError(t, err)
				m := map[int64]*producerEntry{}
				require.NoError(t, decodeProducerSnapshot(data, m))
				require.True(t, m[5].inTxn)
				require.Equal(t, first, m[5].txnFirst)
				require.Equal(t, int32(7), m[6].coordinatorEpoch())
			}
			p, err = Open(dir, "t", 0, o)
			require.NoError(t, err)
			defer p.Close()
			require.Equal(t, first, p.LastStableOffset(), "the LSO is still pinned")
			_, _, err = p.AppendProduced(markerOf(t, 6, 0, true, 6))
			require.ErrorIs(t, err, ErrTransactionCoordinatorFenced, "the coordinator epoch survived")
			base, _, err := p.AppendProduced(markerOf(t, 5, 1, false, 0))
			require.NoError(t, err)
			require.Equal(t, p.HighWatermark(), p.LastStableOffset())
			got, err := p.AbortedTransactions(0, p.EndOffset())
			require.NoError(t, err)
			require.Equal(t, []AbortedTxn{{ProducerID: 5, FirstOffset: first, LastOffset: base}}, got)
		})
	}
}

// TestTxnProducerNeverExpires: a producer with an open transaction is
// kept past the expiration; one without is forgotten.
func TestTxnProducerNeverExpires(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	_, _, err := p.AppendProduced(txnBatchOf(t, 1, 0, 0, 1))
	require.NoError(t, err)
	_, _, err = p.AppendProduced(producerBatchOf(t, 2, 0, 0, 1))
	require.NoError(t, err)
	st, err := p.producerState()
	require.NoError(t, err)
	st.mu.Lock()
	st.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	st.lastExpiry = time.Time{}
	st.expireLocked()
	_, kept1 := st.producers[1]
	_, kept2 := st.producers[2]
	st.mu.Unlock()
	require.True(t, kept1, "open transaction: never expires")
	require.False(t, kept2)
	require.Equal(t, int64(0), p.LastStableOffset())
}
