package log

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// A checkpoint of a log that has not changed since the last one flushed
// and recorded everything does no I/O: an idle broker with many partitions
// must not fsync every one of them every CheckpointInterval. Any change -
// an append, a truncation (even back to the same end), a Reset, a new start
// offset - makes the next checkpoint flush again, and what it records is
// what a crash recovers.
func TestIdleCheckpointDoesNoIO(t *testing.T) {
	for _, flush := range []FlushPolicy{Sync, None} {
		t.Run(flush.String(), func(t *testing.T) {
			dir := t.TempDir()
			var ops atomic.Int64 // syncs, renames and directory syncs
			opts := tiny()
			opts.Flush = flush
			opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, _ string, n int) (int, error) {
				if op == vfs.OpSync || op == vfs.OpRename || op == vfs.OpSyncDir {
					ops.Add(1)
				}
				return n, nil
			})
			l, err := Open(dir, opts)
			require.NoError(t, err)
			checkpoint := func() int64 {
				t.Helper()
				before := ops.Load()
				require.NoError(t, l.checkpoint())
				return ops.Load() - before
			}
			recorded := func() RecoveryPoint {
				t.Helper()
				cp, err := readCheckpoint(vfs.Default, dir)
				require.NoError(t, err)
				return cp.RecoveryPoint
			}

			require.Zero(t, checkpoint(), "a just-opened log was flushed by Open")

			rng := rand.New(rand.NewPCG(7, 7))
			end := appendN(t, l, 40, 3, rng)
			require.NotZero(t, checkpoint())
			require.Equal(t, end, recorded().Offset)
			require.Zero(t, checkpoint(), "nothing changed since the last checkpoint")
			require.Zero(t, checkpoint())

			// Appends after the checkpoint, cut off again: the log is back
			// at the recorded end, size and recovery point, but the cut
			// is not durable until a flush - without one, a crash could
			// bring the cut records back.
			size := l.active.Size()
			appendN(t, l, 3, 1, rng)
			_, err = l.Truncate(end)
			require.NoError(t, err)
			require.Equal(t, end, l.EndOffset())
			require.Equal(t, size, l.active.Size())
			require.Equal(t, end, l.rp.Offset)
			require.NotZero(t, checkpoint(), "a truncation changes what is on disk")
			require.Zero(t, checkpoint())

			// A truncation below the recovery point.
			_, err = l.Truncate(end - 2)
			require.NoError(t, err)
			end = appendN(t, l, 2, 1, rng)
			require.NotZero(t, checkpoint())
			require.Zero(t, checkpoint())

			// A new start offset.
			require.NoError(t, l.DeleteRecordsBefore(l.EndOffset()-5))
			require.NotZero(t, checkpoint())
			require.Zero(t, checkpoint())

			// A roll.
			end = appendN(t, l, 200, 5, rng)
			require.NotZero(t, checkpoint())
			require.Equal(t, end, recorded().Offset)
			require.Zero(t, checkpoint())

			// A Reset makes a new segment.
			require.NoError(t, l.Reset(end+10))
			require.NotZero(t, checkpoint())
			require.Zero(t, checkpoint())
			end = appendN(t, l, 30, 3, rng)
			require.NotZero(t, checkpoint())
			require.Zero(t, checkpoint())

			// What the skipped checkpoints left recorded is what a crash
			// recovers.
			require.NoError(t, l.Crash(true))
			l, err = Open(dir, tiny())
			require.NoError(t, err)
			defer l.Close()
			require.Equal(t, end, l.EndOffset())
			checkRecords(t, readAll(t, l, end-30), end-30, end)
		})
	}
}

// Reopening a log closed cleanly, and closing it again unchanged, syncs
// nothing at all - no segment file, no checkpoint, no directory: the clean
// close synced the files and recorded them, and they are as it left them,
// so Open keeps the clean mark (it is replaced only before the first
// change) and Close has nothing to record. A change is synced by Close,
// and what was appended is there after another reopen.
func TestCleanReopenSyncsNothing(t *testing.T) {
	for _, flush := range []FlushPolicy{Sync, None} {
		t.Run(flush.String(), func(t *testing.T) {
			dir := t.TempDir()
			var segmentSyncs, otherSyncs atomic.Int64
			opts := tiny()
			opts.Flush = flush
			opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, path string, n int) (int, error) {
				switch op {
				case vfs.OpSync:
					if _, _, ok := segment.ParseFileName(filepath.Base(path)); ok {
						segmentSyncs.Add(1)
					} else {
						otherSyncs.Add(1)
					}
				case vfs.OpSyncDir, vfs.OpWrite, vfs.OpRename:
					otherSyncs.Add(1)
				}
				return n, nil
			})
			l, err := Open(dir, opts)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, 3))
			end := appendN(t, l, 100, 3, rng)
			require.Greater(t, l.NumSegments(), 1)
			require.NoError(t, l.Close())
			closed, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
			require.NoError(t, err)

			for round := range 3 {
				segmentSyncs.Store(0)
				otherSyncs.Store(0)
				l, info, err := OpenWithInfo(dir, opts)
				require.NoError(t, err)
				require.True(t, info.Clean)
				require.Equal(t, end, l.EndOffset())
				require.Zero(t, segmentSyncs.Load(), "round %d: Open synced segment files of a clean log", round)
				require.Zero(t, otherSyncs.Load(), "round %d: Open wrote or synced the checkpoint or directory", round)
				require.NoError(t, l.Close())
				require.Zero(t, segmentSyncs.Load(), "round %d: Close synced segment files of an unchanged log", round)
				require.Zero(t, otherSyncs.Load(), "round %d: Close wrote or synced the checkpoint or directory", round)
				got, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
				require.NoError(t, err)
				require.Equal(t, closed, got, "round %d: the clean close's checkpoint is kept", round)
			}

			// A change is synced at Close, and survives.
			l, err = Open(dir, opts)
			require.NoError(t, err)
			segmentSyncs.Store(0)
			end = appendN(t, l, 5, 1, rng)
			require.NoError(t, l.Close())
			require.NotZero(t, segmentSyncs.Load())
			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.True(t, info.Clean)
			require.Equal(t, end, l.EndOffset())
			require.NoError(t, l.Close())
		})
	}
}

// TestCrashReopenDefersTheFlush: under None and Interval, a log opened
// after a crash recovers its tail without an fsync, a checkpoint write or
// a directory sync - the checkpoint on disk already says "not closed
// cleanly", and its recovery point is still true. The next checkpoint
// makes the recovered tail durable and records it; until then an unclean
// restart checks it again, and a power loss (Crash dropping what no fsync
// covered) can take only what lies past the old recovery point. Under
// Sync, open flushes at once as before.
func TestCrashReopenDefersTheFlush(t *testing.T) {
	for _, flush := range []FlushPolicy{None, Interval(time.Hour), Sync} {
		t.Run(flush.String(), func(t *testing.T) {
			dir := t.TempDir()
			var segmentSyncs, otherWrites atomic.Int64
			opts := tiny()
			opts.Flush = flush
			opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, path string, n int) (int, error) {
				switch op {
				case vfs.OpSync:
					if _, _, ok := segment.ParseFileName(filepath.Base(path)); ok {
						segmentSyncs.Add(1)
					} else {
						otherWrites.Add(1)
					}
				case vfs.OpSyncDir, vfs.OpRename:
					otherWrites.Add(1)
				}
				return n, nil
			})
			l, err := Open(dir, opts)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(4, 4))
			flushed := appendN(t, l, 50, 3, rng)
			require.NoError(t, l.checkpoint())
			end := appendN(t, l, 150, 3, rng)
			require.Greater(t, l.NumSegments(), 2)
			require.NoError(t, l.Crash(false)) // a process kill: the page cache keeps it all

			segmentSyncs.Store(0)
			otherWrites.Store(0)
			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.False(t, info.Clean)
			require.NotZero(t, info.SegmentsChecked)
			require.Equal(t, end, l.EndOffset())
			checkRecords(t, readAll(t, l, 0), 0, end)
			if flush == Sync {
				require.NotZero(t, segmentSyncs.Load(), "under Sync open makes the recovered tail durable")
				require.NoError(t, l.Close())
				return
			}
			require.Zero(t, segmentSyncs.Load(), "open after a crash synced segment files")
			require.Zero(t, otherWrites.Load(), "open after a crash rewrote the checkpoint or synced the directory")

			// A power loss before the next checkpoint: only what lies
			// past the old recovery point may go, and the next open
			// checks again.
			require.NoError(t, l.Crash(true))
			l, info, err = OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.False(t, info.Clean)
			got := l.EndOffset()
			require.GreaterOrEqual(t, got, flushed)
			checkRecords(t, readAll(t, l, 0), 0, got)

			// The next checkpoint flushes the recovered tail and moves the
			// recovery point: a power loss after it loses nothing.
			end = appendN(t, l, 20, 3, rng)
			segmentSyncs.Store(0)
			require.NoError(t, l.checkpoint())
			require.NotZero(t, segmentSyncs.Load())
			require.NoError(t, l.Crash(true))
			l, err = Open(dir, opts)
			require.NoError(t, err)
			require.Equal(t, end, l.EndOffset())
			checkRecords(t, readAll(t, l, 0), 0, end)
			require.NoError(t, l.Close())
		})
	}
}
