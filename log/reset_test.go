package log

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if _, s, ok := segment.ParseFileName(e.Name()); ok && s == segment.LogSuffix {
			out = append(out, e.Name())
		}
	}
	return out
}

// Reset empties the log and starts it at an offset past its end; the new
// start holds across a clean and an unclean reopen.
func TestReset(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := tiny()
			opts.Flush = policy
			l, err := Open(dir, opts)
			require.NoError(t, err)
			end := appendN(t, l, 300, 7, rand.New(rand.NewPCG(3, 3)))
			require.Greater(t, l.NumSegments(), 3)
			r := l.NewReader(10)

			// Not past the end: refused, nothing changes.
			for _, off := range []int64{-1, 0, 10, end} {
				err := l.Reset(off)
				require.ErrorIs(t, err, ErrOffsetOutOfRange, "reset to %d", off)
			}
			require.Equal(t, end, l.EndOffset())
			require.Len(t, readAll(t, l, 0), int(end))

			const at = 1000
			require.NoError(t, l.Reset(at))
			require.Equal(t, int64(at), l.StartOffset())
			require.Equal(t, int64(at), l.EndOffset())
			require.Equal(t, int64(at), l.CommittedOffset())
			require.Equal(t, 1, l.NumSegments())
			require.Equal(t, []string{segment.FileName(at, segment.LogSuffix)}, segmentFiles(t, dir))
			_, err = l.Read(0, 1000)
			require.ErrorIs(t, err, ErrOffsetOutOfRange)
			_, err = r.Next(t.Context())
			require.ErrorIs(t, err, ErrOffsetOutOfRange, "a reader below the new start")

			off, err := l.Append(record.Record{Value: []byte("after")})
			require.NoError(t, err)
			require.Equal(t, int64(at), off)
			require.NoError(t, l.Close())

			for _, clean := range []bool{true, false} {
				l, err = Open(dir, opts)
				require.NoError(t, err)
				require.Equal(t, int64(at), l.StartOffset())
				require.Equal(t, int64(at+1), l.EndOffset())
				recs := readAll(t, l, at)
				require.Len(t, recs, 1)
				require.Equal(t, "after", string(recs[0].Value))
				if clean {
					require.NoError(t, l.Close())
				} else {
					l.abandon()
				}
			}
		})
	}
}

// A crash after Reset wrote its checkpoint but before the old segments were
// deleted leaves them below the start offset: Open deletes them.
func TestResetCrashBeforeDeletingOldSegments(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	appendN(t, l, 200, 5, rand.New(rand.NewPCG(4, 4)))
	require.NoError(t, l.Close())
	saved := t.TempDir()
	for _, name := range segmentFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(saved, name), b, 0o644))
	}

	l, err = Open(dir, tiny())
	require.NoError(t, err)
	require.NoError(t, l.Reset(5000))
	l.abandon()
	// Put the old segments back, as if the deletes never happened.
	for _, name := range segmentFiles(t, saved) {
		b, err := os.ReadFile(filepath.Join(saved, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}

	l, err = Open(dir, tiny())
	require.NoError(t, err)
	defer l.Close()
	require.Equal(t, int64(5000), l.StartOffset())
	require.Equal(t, int64(5000), l.EndOffset())
	require.Equal(t, []string{segment.FileName(5000, segment.LogSuffix)}, segmentFiles(t, dir))
}

// A Reset that fails part way - the checkpoint, the segment, the directory
// fsync or a delete - fails the log, and a reopen finds the old log whole,
// the old log emptied at its end (the new start took effect; the replica
// fetches again and resets) or the new start: never a hole between old
// records and new offsets.
func TestResetFaults(t *testing.T) {
	cases := map[string]func(*vfs.Switch){
		"checkpoint write": func(sw *vfs.Switch) {
			sw.FailAfter(vfs.OpRename, func(p string) bool { return filepath.Base(p) == CheckpointFile+".tmp" }, 0, vfs.ErrIO, -1)
		},
		"segment create": func(sw *vfs.Switch) {
			sw.FailAfter(vfs.OpOpen, func(p string) bool { return filepath.Base(p) == segment.FileName(9000, segment.LogSuffix) }, 0, vfs.ErrNoSpace, -1)
		},
		"directory fsync":    func(sw *vfs.Switch) { sw.FailAfter(vfs.OpSyncDir, nil, 0, vfs.ErrIO, -1) },
		"old segment delete": func(sw *vfs.Switch) { sw.FailAfter(vfs.OpRemove, nil, 0, vfs.ErrIO, -1) },
		"final checkpoint": func(sw *vfs.Switch) {
			sw.FailAfter(vfs.OpRename, func(p string) bool { return filepath.Base(p) == CheckpointFile+".tmp" }, 1, vfs.ErrIO, -1)
		},
	}
	outcomes := map[string]bool{}
	for name, arm := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			l := faultLog(t, dir, &sw, Sync)
			end := appendN(t, l, 100, 5, rand.New(rand.NewPCG(5, 5)))
			want := readAll(t, l, 0)
			arm(&sw)
			err := l.Reset(9000)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrFailed), "%v", err)
			sw.Reset()
			l.abandon()

			l, err = Open(dir, tiny())
			require.NoError(t, err)
			defer l.Close()
			switch start := l.StartOffset(); {
			case start == 9000:
				require.Equal(t, int64(9000), l.EndOffset())
				require.Equal(t, []string{segment.FileName(9000, segment.LogSuffix)}, segmentFiles(t, dir))
				outcomes["new start"] = true
			case start == end:
				require.Equal(t, end, l.EndOffset())
				require.Len(t, segmentFiles(t, dir), 1)
				outcomes["emptied"] = true
			default:
				require.Equal(t, int64(0), start)
				require.Equal(t, end, l.EndOffset())
				require.Equal(t, want, readAll(t, l, 0))
				outcomes["old log"] = true
			}
		})
	}
	t.Logf("outcomes: %v", outcomes)
}

// RetentionLimit (a replicated partition's high watermark) bounds retention
// and DeleteRecordsBefore: nothing at or past it is deleted, however far
// over its size the log is.
func TestRetentionLimit(t *testing.T) {
	var limit atomic.Int64
	opts := tiny()
	opts.RetentionBytes = 1 // everything sealed is over the limit
	opts.RetentionTime = Unlimited
	opts.RetentionLimit = limit.Load
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	end := appendN(t, l, 400, 5, rand.New(rand.NewPCG(6, 6)))
	require.Greater(t, l.NumSegments(), 5)

	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n, "limit 0: nothing may go")
	require.ErrorIs(t, l.DeleteRecordsBefore(1), ErrOffsetOutOfRange)
	require.Equal(t, int64(0), l.StartOffset())

	limit.Store(end / 2)
	n, err = l.ApplyRetention()
	require.NoError(t, err)
	require.Positive(t, n)
	require.LessOrEqual(t, l.StartOffset(), end/2)
	require.ErrorIs(t, l.DeleteRecordsBefore(end/2+1), ErrOffsetOutOfRange)
	require.NoError(t, l.DeleteRecordsBefore(end/2))
	require.Equal(t, end/2, l.StartOffset())
	recs := readAll(t, l, end/2)
	require.Len(t, recs, int(end-end/2))
}

// Segments whose records carry no timestamp (message format v0 producers
// send none) expire by their file's modification time, as in Kafka;
// without it they were kept forever.
func TestRetentionWithoutTimestamps(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	opts := tiny()
	opts.RetentionTime = time.Hour
	opts.now = func() time.Time { return now }
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 200; i++ {
		b, err := record.NewBatch([]record.Record{{Value: make([]byte, 100)}}, record.BatchOptions{})
		require.NoError(t, err)
		require.Equal(t, record.NoTimestamp, b.MaxTimestamp())
		_, err = l.AppendBatch(b)
		require.NoError(t, err)
	}
	segs := l.NumSegments()
	require.Greater(t, segs, 3)
	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n, "files written just now are not an hour old")

	old := now.Add(-2 * time.Hour)
	names := segmentFiles(t, dir)
	for _, name := range names[:2] {
		require.NoError(t, os.Chtimes(filepath.Join(dir, name), old, old))
	}
	n, err = l.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 2, n, "the two segments last written two hours ago")
	require.Equal(t, segs-2, l.NumSegments())
}

// An append waiting for its fsync while Reset empties the log is told its
// records are gone, not that they are durable (found in review: Reset's
// new durable offset covered it).
func TestResetFailsWaitingAppends(t *testing.T) {
	var armed atomic.Bool
	blocked := make(chan struct{})
	release := make(chan struct{})
	opts := tiny()
	opts.Flush = Sync
	opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, p string, n int) (int, error) {
		if op == vfs.OpSync && strings.HasSuffix(p, segment.LogSuffix) && armed.CompareAndSwap(true, false) {
			close(blocked)
			<-release
		}
		return 0, nil
	})
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Append(record.Record{Value: []byte("durable")})
	require.NoError(t, err)

	armed.Store(true)
	aErr := make(chan error, 1)
	go func() { _, err := l.Append(record.Record{Value: []byte("A")}); aErr <- err }()
	<-blocked // A runs the fsync and is held there
	bErr := make(chan error, 1)
	go func() { _, err := l.Append(record.Record{Value: []byte("B")}); bErr <- err }()
	for l.EndOffset() < 3 {
		time.Sleep(time.Millisecond) // B written, waiting for the next fsync
	}
	require.NoError(t, l.Reset(1000))
	select {
	case err := <-bErr:
		require.ErrorIs(t, err, errTruncatedWhileWaiting)
	case <-time.After(10 * time.Second):
		t.Fatal("B still waiting after Reset")
	}
	close(release)
	<-aErr // its fsync covered it, or it too learns of the Reset
	require.Equal(t, int64(1000), l.EndOffset())
}

// An empty log (everything deleted: the start offset is the end) may start
// again anywhere, below its old end too - what a Raft log needs after
// installing a snapshot that ends below entries it held - and the new start
// holds across a clean and an unclean reopen. A log that holds records still
// refuses any offset not past its end (TestReset).
func TestResetEmptyLogBelowItsEnd(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	end := appendN(t, l, 300, 7, rand.New(rand.NewPCG(10, 10)))
	require.Greater(t, l.NumSegments(), 3)
	require.ErrorIs(t, l.Reset(10), ErrOffsetOutOfRange, "records are still readable")
	require.NoError(t, l.DeleteRecordsBefore(end))

	require.ErrorIs(t, l.Reset(-1), ErrOffsetOutOfRange)
	require.NoError(t, l.Reset(end), "already empty there")
	require.Equal(t, end, l.StartOffset())
	const at = 10
	require.NoError(t, l.Reset(at))
	require.Equal(t, int64(at), l.StartOffset())
	require.Equal(t, int64(at), l.EndOffset())
	require.Equal(t, int64(at), l.CommittedOffset())
	require.Equal(t, []string{segment.FileName(at, segment.LogSuffix)}, segmentFiles(t, dir))
	off, err := l.Append(record.Record{Value: []byte("after")})
	require.NoError(t, err)
	require.Equal(t, int64(at), off)
	require.NoError(t, l.Close())

	for _, clean := range []bool{true, false} {
		l, err = Open(dir, tiny())
		require.NoError(t, err)
		require.Equal(t, int64(at), l.StartOffset())
		require.Equal(t, int64(at+1), l.EndOffset())
		recs := readAll(t, l, at)
		require.Len(t, recs, 1)
		require.Equal(t, "after", string(recs[0].Value))
		if clean {
			require.NoError(t, l.Close())
		} else {
			l.abandon()
		}
	}
}

// A Reset below the end that fails part way - either checkpoint, a delete,
// a directory fsync, the new segment - fails the log, and a reopen finds it
// empty, at its old end or at the new start, with no old record back.
func TestResetBelowEndFaults(t *testing.T) {
	isCheckpoint := func(p string) bool { return filepath.Base(p) == CheckpointFile+".tmp" }
	const at = 10
	cases := map[string]func(*vfs.Switch){
		"first checkpoint":   func(sw *vfs.Switch) { sw.FailAfter(vfs.OpRename, isCheckpoint, 0, vfs.ErrIO, -1) },
		"old segment delete": func(sw *vfs.Switch) { sw.FailAfter(vfs.OpRemove, isLog, 0, vfs.ErrIO, -1) },
		"directory fsync":    func(sw *vfs.Switch) { sw.FailAfter(vfs.OpSyncDir, nil, 0, vfs.ErrIO, -1) },
		"second checkpoint":  func(sw *vfs.Switch) { sw.FailAfter(vfs.OpRename, isCheckpoint, 1, vfs.ErrIO, -1) },
		"segment create": func(sw *vfs.Switch) {
			sw.FailAfter(vfs.OpOpen, func(p string) bool { return filepath.Base(p) == segment.FileName(at, segment.LogSuffix) }, 0, vfs.ErrNoSpace, -1)
		},
		"last directory sync": func(sw *vfs.Switch) { sw.FailAfter(vfs.OpSyncDir, nil, 1, vfs.ErrIO, -1) },
	}
	outcomes := map[string]bool{}
	for name, arm := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			l := faultLog(t, dir, &sw, Sync)
			end := appendN(t, l, 300, 5, rand.New(rand.NewPCG(11, 11)))
			require.Greater(t, l.NumSegments(), 3)
			require.NoError(t, l.DeleteRecordsBefore(end))
			arm(&sw)
			err := l.Reset(at)
			require.ErrorIs(t, err, ErrFailed)
			sw.Reset()
			l.abandon()

			l, err = Open(dir, tiny())
			require.NoError(t, err)
			defer l.Close()
			start := l.StartOffset()
			require.Equal(t, start, l.EndOffset(), "empty")
			require.Contains(t, []int64{at, end}, start)
			outcomes[fmt.Sprint(start)] = true
			for _, off := range []int64{0, at, end - 1} {
				buf, err := l.Read(off, 100)
				if off == start {
					require.NoError(t, err)
					require.Empty(t, buf)
				} else {
					require.ErrorIs(t, err, ErrOffsetOutOfRange, "offset %d", off)
				}
			}
			off, err := l.Append(record.Record{Value: []byte("next")})
			require.NoError(t, err)
			require.Equal(t, start, off)
		})
	}
	t.Logf("outcomes (start offsets): %v", outcomes)
}
