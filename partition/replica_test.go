package partition

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

func replicated(flush log.FlushPolicy) Options {
	o := opts(flush)
	o.Replicated = true
	return o
}

func appendValues(t *testing.T, p *Partition, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := p.Append(record.Record{Value: []byte{byte(i)}})
		require.NoError(t, err)
	}
}

// TestReplicatedLeaderAndFollower copies a leader's log to a follower
// through AppendReplica across two epochs and checks the copy, the epoch
// caches and the high-watermark bound on fetches.
func TestReplicatedLeaderAndFollower(t *testing.T) {
	leader, err := Open(t.TempDir(), "t", 0, replicated(log.Sync))
	require.NoError(t, err)
	defer leader.Close()
	follower, err := Open(t.TempDir(), "t", 0, replicated(log.Sync))
	require.NoError(t, err)
	defer follower.Close()
	require.Equal(t, int32(-1), leader.LeaderEpoch())
	require.Empty(t, leader.Epochs().Entries(), "a replicated partition starts no epoch itself")

	require.NoError(t, leader.BecomeLeader(1))
	require.NoError(t, follower.BecomeFollower(1))
	appendValues(t, leader, 5)
	require.NoError(t, leader.BecomeLeader(4))
	appendValues(t, leader, 5)
	require.Error(t, leader.BecomeLeader(3), "epochs never go back")

	// Nothing is visible to consumers before the high watermark moves.
	res, err := leader.Fetch(context.Background(), 0, 0, 1<<20, 0)
	require.NoError(t, err)
	require.Empty(t, res.Batches)
	require.Equal(t, int64(0), res.HighWatermark)
	// An offset written but not committed is not out of range: it waits.
	res, err = leader.Fetch(context.Background(), 7, 0, 1<<20, 0)
	require.NoError(t, err)
	require.Empty(t, res.Batches)
	_, err = leader.Fetch(context.Background(), 11, 0, 1<<20, 0)
	require.ErrorIs(t, err, log.ErrOffsetOutOfRange)

	data, err := leader.Log().ReadUpTo(nil, 0, 1<<20, leader.EndOffset())
	require.NoError(t, err)
	end, err := follower.AppendReplica(data)
	require.NoError(t, err)
	require.Equal(t, int64(10), end)
	got, err := follower.Log().ReadUpTo(nil, 0, 1<<20, end)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	require.Equal(t, []EpochEntry{{1, 0}, {4, 5}}, follower.Epochs().Entries())
	require.Equal(t, leader.Epochs().Entries(), follower.Epochs().Entries())

	// A fetch waiting at the high watermark wakes when it moves.
	done := make(chan FetchResult, 1)
	go func() {
		r, _ := follower.Fetch(context.Background(), 0, 1, 1<<20, time.Minute)
		done <- r
	}()
	time.Sleep(10 * time.Millisecond)
	follower.SetHighWatermark(5)
	select {
	case r := <-done:
		require.Equal(t, int64(5), r.HighWatermark)
		n := 0
		for buf := r.Batches; len(buf) > 0; {
			b, sz, err := record.ParseBatch(buf)
			require.NoError(t, err)
			require.Less(t, b.LastOffset(), int64(5))
			n += int(b.NumRecords())
			buf = buf[sz:]
		}
		require.Equal(t, 5, n)
	case <-time.After(10 * time.Second):
		t.Fatal("fetch did not wake on the high watermark")
	}

	// Epoch queries as a leader answers them.
	e, off := leader.EndOffsetForEpoch(1)
	require.Equal(t, int32(1), e)
	require.Equal(t, int64(5), off)
	e, off = leader.EndOffsetForEpoch(3)
	require.Equal(t, int32(1), e)
	require.Equal(t, int64(5), off)
	e, off = leader.EndOffsetForEpoch(4)
	require.Equal(t, int32(4), e)
	require.Equal(t, int64(10), off)

	// Truncation drops the epoch that began past the cut and the high
	// watermark with it.
	follower.SetHighWatermark(10)
	end, err = follower.TruncateTo(5)
	require.NoError(t, err)
	require.Equal(t, int64(5), end)
	require.Equal(t, []EpochEntry{{1, 0}}, follower.Epochs().Entries())
	require.Equal(t, int64(5), follower.HighWatermark())

	// A batch that does not follow on is refused, the log unchanged.
	_, err = follower.AppendReplica(data)
	require.ErrorIs(t, err, log.ErrOffsetMismatch)
	require.Equal(t, int64(5), follower.EndOffset())
	_, err = follower.AppendReplica([]byte("not a batch at all, but long enough to look at its header bytes......"))
	require.Error(t, err)
	require.Equal(t, int64(5), follower.EndOffset())
}

// TestReplicatedReopenKeepsEpochs reopens a replicated partition: the epoch
// cache survives, no epoch is started by Open, and the log's epochs may be
// newer than anything the broker has been told yet.
func TestReplicatedReopenKeepsEpochs(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, "t", 0, replicated(log.None))
	require.NoError(t, err)
	require.NoError(t, p.BecomeLeader(7))
	appendValues(t, p, 3)
	require.NoError(t, p.Close())

	p, err = Open(dir, "t", 0, replicated(log.None))
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, []EpochEntry{{7, 0}}, p.Epochs().Entries())
	require.Equal(t, int32(-1), p.LeaderEpoch())
	require.Equal(t, int64(0), p.HighWatermark(), "the high watermark is relearned from the leader")
}

// TestHighWatermarkCheckpoint: a replicated partition records its high
// watermark (written shortly after it moves, and at close) and starts from
// it after a restart, never past its log; a truncation lowers the record at
// once.
func TestHighWatermarkCheckpoint(t *testing.T) {
	dir := t.TempDir()
	o := replicated(log.None)
	o.HighWatermarkCheckpointInterval = time.Millisecond
	p, err := Open(dir, "t", 0, o)
	require.NoError(t, err)
	require.NoError(t, p.BecomeLeader(1))
	appendValues(t, p, 10)
	p.SetHighWatermark(8)
	require.Eventually(t, func() bool {
		hw, ok := p.hwFile.read()
		return ok && hw == 8
	}, 5*time.Second, time.Millisecond, "written in the background")
	p.SetHighWatermark(9)
	require.NoError(t, p.Close())

	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	require.Equal(t, int64(9), p.HighWatermark(), "written at close")
	_, err = p.TruncateTo(4)
	require.NoError(t, err)
	require.NoError(t, p.Crash(false)) // no close: only what was written counts
	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, int64(4), p.HighWatermark(), "the truncation lowered the record")

	// A damaged record is ignored: the partition starts from its log start.
	require.NoError(t, os.WriteFile(filepath.Join(dir, HighWatermarkFile), []byte("0\n1\nother 0 7\n"), 0o644))
	c := newHWCheckpoint(dir, "t", 0, 0)
	_, ok := c.read()
	require.False(t, ok)
	_, err = ReadHighWatermark(dir, "t", 0)
	require.ErrorIs(t, err, ErrBadHighWatermarkFile)
	for _, bad := range []string{"", "1\n1\nt 0 7\n", "0\n1\nt 1 7\n", "0\n1\nt 0 -7\n", "0\n2\nt 0 7\nt 0 8\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, HighWatermarkFile), []byte(bad), 0o644))
		_, err = ReadHighWatermark(dir, "t", 0)
		require.ErrorIs(t, err, ErrBadHighWatermarkFile, "%q", bad)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, HighWatermarkFile), []byte("0\n1\nt 0 7\n"), 0o644))
	hw, err := ReadHighWatermark(dir, "t", 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), hw)
	_, err = ReadHighWatermark(t.TempDir(), "t", 0)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A replicated partition's retention never deletes past its high
// watermark (its followers may not have those records yet), and StartAt
// empties it at an offset past its end with the epoch cache, producer
// snapshots and high watermark following.
func TestReplicatedRetentionAndStartAt(t *testing.T) {
	dir := t.TempDir()
	o := replicated(log.Sync)
	o.Log.SegmentBytes = 1024
	o.Log.RetentionBytes = 1
	o.Log.RetentionCheckInterval = -1
	p, err := Open(dir, "t", 0, o)
	require.NoError(t, err)
	require.NoError(t, p.BecomeLeader(2))
	for i := 0; i < 300; i++ {
		_, err := p.Append(record.Record{Value: bytes.Repeat([]byte{byte(i)}, 20)})
		require.NoError(t, err)
	}
	require.Greater(t, p.Log().NumSegments(), 3)
	n, err := p.Log().ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n, "high watermark 0: nothing may go")
	p.SetHighWatermark(150)
	_, err = p.Log().ApplyRetention()
	require.NoError(t, err)
	require.Positive(t, p.StartOffset())
	require.LessOrEqual(t, p.StartOffset(), int64(150))

	// A producer snapshot of the old log (its content does not matter
	// here) must go with it.
	require.NoError(t, os.WriteFile(filepath.Join(dir, snapshotName(200)), []byte("x"), 0o644))
	require.ErrorIs(t, p.StartAt(300), log.ErrOffsetOutOfRange, "not past the end")
	require.NoError(t, p.StartAt(1000))
	require.Equal(t, int64(1000), p.StartOffset())
	require.Equal(t, int64(1000), p.EndOffset())
	require.Equal(t, int64(1000), p.HighWatermark())
	require.Empty(t, p.Epochs().Entries())
	snaps, err := listSnapshots(dir)
	require.NoError(t, err)
	require.Empty(t, snaps)
	require.NoError(t, p.Close())

	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, int64(1000), p.StartOffset())
	require.Equal(t, int64(1000), p.HighWatermark())
	require.Empty(t, p.Epochs().Entries())
}
