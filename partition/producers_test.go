package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// producerBatchOf encodes n records of an idempotent producer, values
// "pid/seq".
func producerBatchOf(t testing.TB, pid int64, epoch int16, seq int32, n int) record.Batch {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: time.UnixMilli(1_700_000_000_000), Value: fmt.Appendf(nil, "%d/%d", pid, int64(seq)+int64(i))}
	}
	b, err := record.NewBatch(recs, record.BatchOptions{Producer: &record.ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: seq}})
	require.NoError(t, err)
	return b
}

func openTestPartition(t testing.TB, dir string, lo log.Options) *Partition {
	t.Helper()
	p, err := Open(dir, "t", 0, Options{Log: lo})
	require.NoError(t, err)
	return p
}

// forgetProducers drops the in-memory state so that the next use loads it
// from the snapshots and the log.
func forgetProducers(p *Partition) {
	p.producers.mu.Lock()
	p.producers.st = nil
	p.producers.mu.Unlock()
}

func TestProducerSequenceChecks(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	type step struct {
		pid      int64
		epoch    int16
		seq      int32
		n        int
		err      error
		dup      bool
		base     int64 // expected when err is nil
		describe string
	}
	steps := []step{
		{1, 0, 5, 1, ErrUnknownProducerID, false, 0, "unknown producer, sequence not 0"},
		{1, 0, 0, 3, nil, false, 0, "unknown producer starts at 0"},
		{1, 0, 3, 2, nil, false, 3, "next in sequence"},
		{1, 0, 0, 3, nil, true, 0, "retry of the first batch"},
		{1, 0, 3, 2, nil, true, 3, "retry of the second batch"},
		{1, 0, 3, 1, ErrOutOfOrderSequence, false, 0, "overlapping range that is no batch"},
		{1, 0, 6, 1, ErrOutOfOrderSequence, false, 0, "gap"},
		{1, 0, 4, 1, ErrOutOfOrderSequence, false, 0, "inside the last batch"},
		{2, 3, 0, 1, nil, false, 5, "another producer"},
		{1, 1, 5, 1, ErrOutOfOrderSequence, false, 0, "new epoch must start at 0"},
		{1, 1, 0, 1, nil, false, 6, "new epoch at 0"},
		{1, 0, 5, 1, ErrInvalidProducerEpoch, false, 0, "older epoch is fenced"},
		{1, 0, 0, 3, ErrInvalidProducerEpoch, false, 0, "a retry from the old epoch is fenced too"},
		{1, 1, 0, 1, nil, true, 6, "retry in the new epoch"},
		{1, 1, 1, 1, nil, false, 7, "continues"},
	}
	for _, s := range steps {
		end := p.EndOffset()
		base, dup, err := p.AppendProduced(producerBatchOf(t, s.pid, s.epoch, s.seq, s.n))
		if s.err != nil {
			require.ErrorIs(t, err, s.err, s.describe)
			require.Equal(t, end, p.EndOffset(), "%s: nothing written", s.describe)
			continue
		}
		require.NoError(t, err, s.describe)
		require.Equal(t, s.dup, dup, s.describe)
		require.Equal(t, s.base, base, s.describe)
		if dup {
			require.Equal(t, end, p.EndOffset(), "%s: nothing written", s.describe)
		}
	}
	// A batch without a producer id is never checked.
	b, err := record.NewBatch([]record.Record{{Value: []byte("x")}}, record.BatchOptions{})
	require.NoError(t, err)
	base, dup, err := p.AppendProduced(b)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(8), base)
}

// Only the last five batches are remembered.
func TestProducerWindow(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	for i := range int32(7) {
		_, dup, err := p.AppendProduced(producerBatchOf(t, 9, 0, i, 1))
		require.NoError(t, err)
		require.False(t, dup)
	}
	for i := int32(2); i < 7; i++ {
		base, dup, err := p.AppendProduced(producerBatchOf(t, 9, 0, i, 1))
		require.NoError(t, err)
		require.True(t, dup)
		require.Equal(t, int64(i), base)
	}
	_, _, err := p.AppendProduced(producerBatchOf(t, 9, 0, 1, 1))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	require.Equal(t, int64(7), p.EndOffset())
}

func TestSequenceWrapAround(t *testing.T) {
	require.Equal(t, int32(1), lastSequence(math.MaxInt32-1, 3))
	require.Equal(t, int32(math.MaxInt32), lastSequence(math.MaxInt32-2, 2))
	require.Equal(t, int32(math.MaxInt32-1), firstSequence(1, 3))
	require.Equal(t, int32(5), firstSequence(7, 2))
	require.Equal(t, int32(0), nextSequence(math.MaxInt32))

	e := &producerEntry{epoch: 0, batches: []producerBatch{{firstSeq: math.MaxInt32 - 1, lastSeq: math.MaxInt32, firstOffset: 10, lastOffset: 11}}}
	dup, err := e.check(0, 0, 4)
	require.NoError(t, err)
	require.Nil(t, dup)
	_, err = e.check(0, 1, 4)
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	dup, err = e.check(0, math.MaxInt32-1, math.MaxInt32)
	require.NoError(t, err)
	require.Equal(t, int64(10), dup.firstOffset)
}

// Concurrent producers, each retrying at random and from several
// goroutines at once: every record lands exactly once, in sequence order.
func TestProducerConcurrentRetries(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.Sync})
	defer p.Close()
	const producers, batches = 4, 40
	var wg sync.WaitGroup
	for pid := int64(0); pid < producers; pid++ {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(pid), 1))
			seq := int32(0)
			for range batches {
				n := 1 + r.IntN(3)
				// Send the batch from two goroutines at once, then retry
				// it: exactly one of all the sends is written.
				var inner sync.WaitGroup
				bases := make([]int64, 3)
				for k := range 2 {
					inner.Go(func() {
						base, _, err := p.AppendProduced(producerBatchOf(t, pid, 0, seq, n))
						require.NoError(t, err)
						bases[k] = base
					})
				}
				inner.Wait()
				base, dup, err := p.AppendProduced(producerBatchOf(t, pid, 0, seq, n))
				require.NoError(t, err)
				require.True(t, dup)
				bases[2] = base
				require.Equal(t, bases[0], bases[1])
				require.Equal(t, bases[0], bases[2])
				seq += int32(n)
			}
		})
	}
	wg.Wait()
	checkExactlyOnce(t, p)
}

// checkExactlyOnce reads the partition and checks that each producer's
// records "pid/seq" appear once each, in order, without gaps.
func checkExactlyOnce(t *testing.T, p *Partition) map[int64]int64 {
	t.Helper()
	next := map[int64]int64{}
	out, err := p.Log().Read(p.StartOffset(), math.MaxInt32)
	require.NoError(t, err)
	for len(out) > 0 {
		b, n, err := record.ParseBatch(out)
		require.NoError(t, err)
		out = out[n:]
		recs, err := b.Records()
		require.NoError(t, err)
		for _, r := range recs {
			var pid, seq int64
			_, err := fmt.Sscanf(string(r.Value), "%d/%d", &pid, &seq)
			require.NoError(t, err)
			require.Equal(t, next[pid], seq, "producer %d", pid)
			next[pid]++
		}
	}
	return next
}

// The state outlives the process: after a reopen, retries of the last
// batches are still recognised.
func TestProducerStateSurvivesReopen(t *testing.T) {
	for _, name := range []string{"clean close", "close after snapshot", "no close"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := openTestPartition(t, dir, log.Options{Flush: log.Sync})
			for i := range int32(8) {
				_, _, err := p.AppendProduced(producerBatchOf(t, 4, 2, 2*i, 2))
				require.NoError(t, err)
			}
			switch name {
			case "close after snapshot":
				require.NoError(t, p.SnapshotProducers())
				fallthrough
			case "clean close":
				require.NoError(t, p.Close())
			case "no close":
				// As after a crash: the log is reopened without its
				// Close (the lock is released by hand).
				forgetProducers(p)
				require.NoError(t, p.Close())
				require.NoError(t, os.Remove(filepath.Join(dir, log.CheckpointFile)))
			}
			p = openTestPartition(t, dir, log.Options{Flush: log.Sync})
			defer p.Close()
			for i := int32(3); i < 8; i++ {
				base, dup, err := p.AppendProduced(producerBatchOf(t, 4, 2, 2*i, 2))
				require.NoError(t, err)
				require.True(t, dup, "batch %d", i)
				require.Equal(t, int64(2*i), base)
			}
			_, _, err := p.AppendProduced(producerBatchOf(t, 4, 2, 17, 1))
			require.ErrorIs(t, err, ErrOutOfOrderSequence)
			base, dup, err := p.AppendProduced(producerBatchOf(t, 4, 2, 16, 1))
			require.NoError(t, err)
			require.False(t, dup)
			require.Equal(t, int64(16), base)
			checkExactlyOnce(t, p)
		})
	}
}

// stateOf copies the state for comparison.
func stateOf(t *testing.T, p *Partition) map[int64][]producerBatch {
	t.Helper()
	st, err := p.producerState()
	require.NoError(t, err)
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[int64][]producerBatch{}
	for pid, e := range st.producers {
		out[pid] = append([]producerBatch(nil), e.batches...)
	}
	return out
}

func TestProducerSnapshotLoad(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None})
	defer p.Close()
	for i := range int32(6) {
		for pid := int64(0); pid < 3; pid++ {
			_, _, err := p.AppendProduced(producerBatchOf(t, pid, 0, i, 1))
			require.NoError(t, err)
		}
	}
	require.NoError(t, p.SnapshotProducers())
	snapAt := p.EndOffset()
	require.FileExists(t, filepath.Join(dir, snapshotName(snapAt)))
	for i := int32(6); i < 8; i++ {
		_, _, err := p.AppendProduced(producerBatchOf(t, 7, 0, i-6, 1))
		require.NoError(t, err)
	}
	want := stateOf(t, p)
	require.Len(t, want, 4)

	t.Run("snapshot and replay", func(t *testing.T) {
		forgetProducers(p)
		require.Equal(t, want, stateOf(t, p))
	})
	t.Run("the snapshot is used", func(t *testing.T) {
		// A producer only the snapshot knows proves it was read.
		st, err := p.producerState()
		require.NoError(t, err)
		st.mu.Lock()
		st.producers[99] = &producerEntry{epoch: 1, batches: []producerBatch{{0, 0, 3, 3}}}
		st.changed = true
		st.mu.Unlock()
		require.NoError(t, p.SnapshotProducers())
		forgetProducers(p)
		got := stateOf(t, p)
		require.Equal(t, []producerBatch{{0, 0, 3, 3}}, got[99])
		st, err = p.producerState()
		require.NoError(t, err)
		st.mu.Lock()
		delete(st.producers, 99)
		st.changed = true
		st.mu.Unlock()
		require.NoError(t, p.SnapshotProducers())
	})
	t.Run("damaged snapshot", func(t *testing.T) {
		offsets, err := listSnapshots(dir)
		require.NoError(t, err)
		require.NotEmpty(t, offsets)
		for _, off := range offsets {
			path := filepath.Join(dir, snapshotName(off))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data[len(data)-1] ^= 0x40
			require.NoError(t, os.WriteFile(path, data, 0o644))
		}
		forgetProducers(p)
		require.Equal(t, want, stateOf(t, p), "rebuilt from the whole log")
		offsets, err = listSnapshots(dir)
		require.NoError(t, err)
		require.Empty(t, offsets, "damaged snapshots are deleted")
	})
	t.Run("snapshot beyond the log end", func(t *testing.T) {
		// As after a crash that lost the tail the snapshot describes.
		fake := map[int64]*producerEntry{5: {epoch: 0, batches: []producerBatch{{0, 0, 1000, 1000}}}}
		path := filepath.Join(dir, snapshotName(p.EndOffset()+10))
		require.NoError(t, os.WriteFile(path, encodeProducerSnapshot(fake), 0o644))
		forgetProducers(p)
		require.Equal(t, want, stateOf(t, p))
		require.NoFileExists(t, path)
	})
}

// After a truncation the state is rebuilt from what the log still holds.
func TestProducerResetAfterTruncate(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None})
	defer p.Close()
	for i := range int32(6) {
		_, _, err := p.AppendProduced(producerBatchOf(t, 1, 0, i, 1))
		require.NoError(t, err)
	}
	require.NoError(t, p.SnapshotProducers())
	_, err := p.Log().Truncate(3)
	require.NoError(t, err)
	require.NoError(t, p.ResetProducers())
	offsets, err := listSnapshots(dir)
	require.NoError(t, err)
	require.Empty(t, offsets, "the snapshot at 6 describes truncated data")
	// Offset 3 onwards is gone: sequence 3 is next again, and 4 a gap.
	_, _, err = p.AppendProduced(producerBatchOf(t, 1, 0, 4, 1))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	base, dup, err := p.AppendProduced(producerBatchOf(t, 1, 0, 3, 1))
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, int64(3), base)
}

// A roll takes a snapshot; only the latest two are kept.
func TestProducerSnapshotAtRoll(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None, SegmentBytes: 1024})
	defer p.Close()
	for i := range int32(200) {
		_, _, err := p.AppendProduced(producerBatchOf(t, 1, 0, i, 1))
		require.NoError(t, err)
	}
	require.Greater(t, p.Log().NumSegments(), 5)
	offsets, err := listSnapshots(dir)
	require.NoError(t, err)
	require.Len(t, offsets, snapshotsKept)
	require.Greater(t, offsets[1], int64(150))
}

// log.Open removes files named like segment files whose segment does not
// exist; a snapshot is named by an offset, not a segment. This checks
// snapshots outlive a reopen.
func TestProducerSnapshotSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None})
	for i := range int32(3) {
		_, _, err := p.AppendProduced(producerBatchOf(t, 1, 0, i, 1))
		require.NoError(t, err)
	}
	require.NoError(t, p.SnapshotProducers())
	require.NoError(t, p.Close())
	p = openTestPartition(t, dir, log.Options{Flush: log.None})
	defer p.Close()
	_, err := os.Stat(filepath.Join(dir, snapshotName(3)))
	require.NoError(t, err, "the snapshot outlives a reopen")
	forgetProducers(p)
	require.Len(t, stateOf(t, p)[1], 3)
}

func TestProducerExpiry(t *testing.T) {
	p := openTestPartition(t, t.TempDir(), log.Options{Flush: log.None})
	defer p.Close()
	now := time.Now()
	st, err := p.producerState()
	require.NoError(t, err)
	st.now = func() time.Time { return now }
	for pid := int64(1); pid <= 2; pid++ {
		_, _, err := p.AppendProduced(producerBatchOf(t, pid, 0, 0, 1))
		require.NoError(t, err)
	}
	now = now.Add(DefaultProducerIDExpiration - time.Hour)
	_, _, err = p.AppendProduced(producerBatchOf(t, 2, 0, 1, 1)) // 2 stays active
	require.NoError(t, err)
	now = now.Add(2 * time.Hour)
	_, _, err = p.AppendProduced(producerBatchOf(t, 1, 0, 1, 1))
	require.ErrorIs(t, err, ErrUnknownProducerID, "producer 1 expired")
	_, _, err = p.AppendProduced(producerBatchOf(t, 2, 0, 2, 1))
	require.NoError(t, err)
	// A forgotten producer starts again at sequence 0 (after KIP-360 its
	// client resets).
	_, dup, err := p.AppendProduced(producerBatchOf(t, 1, 1, 0, 1))
	require.NoError(t, err)
	require.False(t, dup)
}

// The snapshot is Kafka's ProducerSnapshot v1, byte for byte.
func TestProducerSnapshotLayout(t *testing.T) {
	state := map[int64]*producerEntry{
		7: {epoch: 3, lastSeen: 1234, batches: []producerBatch{{0, 4, 10, 14}, {5, 5, 20, 20}}},
	}
	data := encodeProducerSnapshot(state)
	require.Len(t, data, 10+2*46)
	require.Equal(t, uint16(1), binary.BigEndian.Uint16(data))
	require.Equal(t, crc32.Checksum(data[6:], crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(data[2:]))
	require.Equal(t, uint32(2), binary.BigEndian.Uint32(data[6:]))
	e := data[10+46:] // the latest batch, which Kafka's reader keeps
	require.Equal(t, uint64(7), binary.BigEndian.Uint64(e))
	require.Equal(t, uint16(3), binary.BigEndian.Uint16(e[8:]))
	require.Equal(t, uint32(5), binary.BigEndian.Uint32(e[10:]))  // last sequence
	require.Equal(t, uint64(20), binary.BigEndian.Uint64(e[14:])) // last offset
	require.Equal(t, uint32(0), binary.BigEndian.Uint32(e[22:]))  // offset delta
	require.Equal(t, uint64(1234), binary.BigEndian.Uint64(e[26:]))
	require.Equal(t, int32(-1), int32(binary.BigEndian.Uint32(e[34:])))
	require.Equal(t, int64(-1), int64(binary.BigEndian.Uint64(e[38:])))

	got := map[int64]*producerEntry{}
	require.NoError(t, decodeProducerSnapshot(data, got))
	require.Equal(t, state[7].batches, got[7].batches)
	require.Equal(t, int16(3), got[7].epoch)

	require.NoError(t, VerifyProducerSnapshot(data))
	for _, bad := range [][]byte{nil, data[:9], data[:len(data)-1], append([]byte{0, 2}, data[2:]...)} {
		require.ErrorIs(t, decodeProducerSnapshot(bad, map[int64]*producerEntry{}), ErrBadProducerSnapshot)
		require.ErrorIs(t, VerifyProducerSnapshot(bad), ErrBadProducerSnapshot)
	}
}

func FuzzProducerSnapshot(f *testing.F) {
	f.Add(encodeProducerSnapshot(nil))
	f.Add(encodeProducerSnapshot(map[int64]*producerEntry{
		1: {epoch: 0, batches: []producerBatch{{0, 9, 0, 9}}},
		2: {epoch: 5, batches: []producerBatch{{math.MaxInt32 - 1, 1, 100, 103}}},
	}))
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		state := map[int64]*producerEntry{}
		if err := decodeProducerSnapshot(data, state); err != nil {
			require.ErrorIs(t, err, ErrBadProducerSnapshot)
			return
		}
		again := map[int64]*producerEntry{}
		require.NoError(t, decodeProducerSnapshot(encodeProducerSnapshot(state), again))
		for pid, e := range state {
			require.LessOrEqual(t, len(e.batches), producerWindow)
			require.Equal(t, e.batches, again[pid].batches)
		}
	})
}

// Snapshots below the log start describe records that are gone (a crash
// inside StartAt can leave them): Open deletes them, so a retry can never
// be answered with offsets below the log start.
func TestProducerSnapshotsBelowStartDropped(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None, SegmentBytes: 1024})
	for i := range int32(40) {
		_, _, err := p.AppendProduced(producerBatchOf(t, 1, 0, i, 1))
		require.NoError(t, err)
	}
	require.NoError(t, p.Log().DeleteRecordsBefore(30))
	require.NoError(t, p.Close())
	fake := map[int64]*producerEntry{77: {epoch: 0, batches: []producerBatch{{0, 0, 5, 5}}}}
	below := filepath.Join(dir, snapshotName(12))
	require.NoError(t, os.WriteFile(below, encodeProducerSnapshot(fake), 0o644))

	p = openTestPartition(t, dir, log.Options{Flush: log.None, SegmentBytes: 1024})
	defer p.Close()
	require.NoFileExists(t, below)
	offsets, err := listSnapshots(dir)
	require.NoError(t, err)
	for _, off := range offsets {
		require.GreaterOrEqual(t, off, p.StartOffset())
	}
	// Producer 1 goes on where it was.
	base, dup, err := p.AppendProduced(producerBatchOf(t, 1, 0, 39, 1))
	require.NoError(t, err)
	require.True(t, dup, "a retry of the last batch")
	require.Equal(t, int64(39), base)
}

// Producers reports each active idempotent producer's latest epoch, last
// sequence and offset, and when it last appended - after a reload from
// the snapshot and the log too - and leaves out producers that expired or
// whose batches retention removed, without forgetting them itself.
func TestProducersListsActiveProducers(t *testing.T) {
	dir := t.TempDir()
	p := openTestPartition(t, dir, log.Options{Flush: log.None})
	defer p.Close()
	got, err := p.Producers()
	require.NoError(t, err)
	require.Empty(t, got, "a partition without idempotent producers")

	now := time.Now().Truncate(time.Millisecond)
	st, err := p.producerState()
	require.NoError(t, err)
	st.now = func() time.Time { return now }
	_, err = p.Append(record.Record{Value: []byte("no producer id")}) // offset 0
	require.NoError(t, err)
	for _, b := range []struct {
		pid   int64
		epoch int16
		seq   int32
		n     int
	}{{7, 0, 0, 3}, {3, 2, 0, 1}, {7, 0, 3, 2}, {3, 2, 1, 4}} {
		_, _, err := p.AppendProduced(producerBatchOf(t, b.pid, b.epoch, b.seq, b.n))
		require.NoError(t, err)
	}
	want := []ProducerInfo{
		{ID: 3, Epoch: 2, LastSequence: 4, LastOffset: 10, LastTimestamp: now.UnixMilli(), CoordinatorEpoch: -1, CurrentTxnStartOffset: -1},
		{ID: 7, Epoch: 0, LastSequence: 4, LastOffset: 6, LastTimestamp: now.UnixMilli(), CoordinatorEpoch: -1, CurrentTxnStartOffset: -1},
	}
	got, err = p.Producers()
	require.NoError(t, err)
	require.Equal(t, want, got)

	// A retry changes nothing; a refused batch changes nothing.
	_, dup, err := p.AppendProduced(producerBatchOf(t, 7, 0, 3, 2))
	require.NoError(t, err)
	require.True(t, dup)
	_, _, err = p.AppendProduced(producerBatchOf(t, 7, 0, 9, 1))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	got, err = p.Producers()
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Reloaded from the snapshot and the log: a producer whose batch is
	// replayed from the log counts from the batch's timestamp.
	require.NoError(t, p.SnapshotProducers())
	replayed := now.Add(-time.Hour).UnixMilli()
	b, err := record.NewBatch([]record.Record{{Timestamp: time.UnixMilli(replayed), Value: []byte("x")}},
		record.BatchOptions{Producer: &record.ProducerInfo{ID: 11, Epoch: 1, BaseSequence: 0}})
	require.NoError(t, err)
	_, _, err = p.AppendProduced(b) // offset 11, after the snapshot
	require.NoError(t, err)
	forgetProducers(p)
	got, err = p.Producers()
	require.NoError(t, err)
	want = append(want, ProducerInfo{ID: 11, Epoch: 1, LastSequence: 0, LastOffset: 11, LastTimestamp: replayed, CoordinatorEpoch: -1, CurrentTxnStartOffset: -1})
	require.Equal(t, want, got)

	// An expired producer is left out, but the listing forgets nobody:
	// the next append expires it itself.
	st, err = p.producerState()
	require.NoError(t, err)
	now = time.UnixMilli(replayed).Add(DefaultProducerIDExpiration - time.Minute)
	st.now = func() time.Time { return now }
	got, err = p.Producers()
	require.NoError(t, err)
	require.Equal(t, want, got, "nobody has expired yet")
	now = now.Add(30 * time.Minute)
	got, err = p.Producers()
	require.NoError(t, err)
	require.Equal(t, want[:2], got, "producer 11 expired")
	st.mu.Lock()
	require.Len(t, st.producers, 3, "listing forgets nobody")
	st.mu.Unlock()

	// Retention removing every batch of a producer leaves it out too.
	require.NoError(t, p.Log().DeleteRecordsBefore(7))
	got, err = p.Producers()
	require.NoError(t, err)
	require.Equal(t, want[:1], got, "producer 7's batches are below the log start")
}
