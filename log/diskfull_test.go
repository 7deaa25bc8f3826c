package log

import (
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// freeSpace is an Injector for a disk with free bytes left, as fallocate
// sees it: an allocation fails with ENOSPC when it would grow its file by
// more than free bytes. Allocating what a file already holds takes no
// space, as on a real file system. Writes are not limited.
func freeSpace(free int64) vfs.Injector {
	var d tightDisk
	d.free.Store(free)
	return d.inject
}

// tightDisk is freeSpace with a free space that can change.
type tightDisk struct{ free atomic.Int64 }

func (d *tightDisk) inject(op vfs.Op, path string, n int) (int, error) {
	if op != vfs.OpAllocate {
		return n, nil
	}
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	if int64(n)-size > d.free.Load() {
		return 0, vfs.ErrNoSpace
	}
	return n, nil
}

// roomyIndexes are options whose index growth steps (4 KiB first) are far
// more than a small segment's entries need.
func roomyIndexes() Options {
	return Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 128, IndexMaxBytes: 64 << 10, CheckpointInterval: time.Hour}
}

// Reopening a log on a disk with less free space than an index growth step
// works: opening allocates nothing, and the index entries recovery
// rebuilds take what they need - after a clean close (which trimmed the
// indexes), and after a crash that left the active segment's index damaged
// (so it is made afresh). Lookups agree with a scan, and appends go on
// while there is room. When there is none, an append that must grow an
// index fails with ENOSPC having written nothing, and the log stays
// writable: once there is room the next append succeeds, without a reopen.
func TestReopenOnFullDisk(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "clean close", true: "crash, damaged index"}[crash]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := roomyIndexes()
			l, err := Open(dir, opts)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(31, 31))
			end := appendN(t, l, 1500, 5, rng)
			require.Greater(t, l.NumSegments(), 2)
			if crash {
				require.NoError(t, l.Crash(false))
				require.NoError(t, os.Truncate(lastSegmentFile(t, dir, segment.IndexSuffix), 13))
			} else {
				require.NoError(t, l.Close()) // trims every index to its entries
			}

			var disk tightDisk
			disk.free.Store(1 << 10) // less than a step
			opts.fs = vfs.NewFaultFS(vfs.Default, disk.inject)
			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err, "reopening must not need an index growth step")
			require.Equal(t, !crash, info.Clean)
			recs := readAll(t, l, 0)
			checkRecords(t, recs, 0, end)
			checkLookupsMatchScan(t, l, recs)
			segs := l.NumSegments()
			for l.NumSegments() < segs+2 {
				_, err = l.Append(record.Record{Value: value(end), Timestamp: time.UnixMilli(1_700_000_000_000 + end)})
				require.NoError(t, err, "a little room is enough to go on, and to roll")
				end++
			}

			disk.free.Store(0)
			endSize := func() int64 {
				st, err := os.Stat(lastSegmentFile(t, dir, segment.LogSuffix))
				require.NoError(t, err)
				return st.Size()
			}
			var r record.Record
			for i := 0; ; i++ {
				// Appends go on while the indexes have room for what
				// they may add; one that needs them to grow fails.
				require.Less(t, i, 100, "an append must need the indexes to grow")
				size := endSize()
				r = record.Record{Value: value(end), Timestamp: time.UnixMilli(1_700_000_000_000 + end)}
				if _, err = l.Append(r); err == nil {
					end++
					continue
				}
				require.ErrorIs(t, err, vfs.ErrNoSpace, "no room to grow the indexes for the append")
				require.NotErrorIs(t, err, ErrFailed, "nothing was written: the log is not failed")
				require.Equal(t, end, l.EndOffset())
				require.Equal(t, size, endSize(), "nothing was written")
				break
			}
			disk.free.Store(1 << 10)
			_, err = l.Append(r)
			require.NoError(t, err)
			end++
			require.NoError(t, l.Close())

			l, err = Open(dir, roomyIndexes())
			require.NoError(t, err)
			recs = readAll(t, l, 0)
			checkRecords(t, recs, 0, end)
			checkLookupsMatchScan(t, l, recs)
			require.NoError(t, l.Close())
		})
	}
}

// A full disk while an active segment's index must grow (issue 16, item 2:
// index files grow in steps): the append fails with ENOSPC before anything
// is written - no partial batch, no fault on a mapped page - the log stays
// writable and every acknowledged record readable, and the same append
// succeeds once there is room. A crash then loses nothing acknowledged.
func TestFullDiskWhileGrowingIndex(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			// One segment, an index entry per batch or two: the indexes
			// outgrow their first 4 KiB step after a few hundred batches.
			opts := Options{SegmentBytes: 1 << 30, IndexIntervalBytes: 64, Flush: policy, CheckpointInterval: time.Hour}
			opts.fs = vfs.NewFaultFS(vfs.Default, sw.Inject)
			l, err := Open(dir, opts)
			require.NoError(t, err)
			sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
			logPath := lastSegmentFile(t, dir, segment.LogSuffix)
			var end int64
			for err == nil {
				st, serr := os.Stat(logPath)
				require.NoError(t, serr)
				r := record.Record{Value: value(end), Timestamp: time.UnixMilli(1_700_000_000_000 + end)}
				_, err = l.Append(r)
				if err == nil {
					end++
					require.Less(t, end, int64(10_000), "the indexes never needed to grow")
					continue
				}
				require.ErrorIs(t, err, vfs.ErrNoSpace)
				require.NotErrorIs(t, err, ErrFailed)
				after, serr := os.Stat(logPath)
				require.NoError(t, serr)
				require.Equal(t, st.Size(), after.Size(), "nothing was written to the log")
			}
			require.Greater(t, end, int64(100))
			require.Equal(t, end, l.EndOffset())
			require.Equal(t, 1, l.NumSegments())
			recs := readAll(t, l, 0)
			checkRecords(t, recs, 0, end)
			checkLookupsMatchScan(t, l, recs)
			_, err = l.Append(record.Record{Value: value(end), Timestamp: time.UnixMilli(1_700_000_000_000 + end)})
			require.ErrorIs(t, err, vfs.ErrNoSpace, "still full")

			sw.Reset()
			for range 500 {
				_, err = l.Append(record.Record{Value: value(end), Timestamp: time.UnixMilli(1_700_000_000_000 + end)})
				require.NoError(t, err)
				end++
			}
			if policy == None {
				require.NoError(t, l.Sync())
			}
			require.NoError(t, l.Crash(false))

			l, info, err := OpenWithInfo(dir, Options{SegmentBytes: 1 << 30, IndexIntervalBytes: 64, CheckpointInterval: time.Hour})
			require.NoError(t, err)
			require.False(t, info.Clean)
			recs = readAll(t, l, 0)
			checkRecords(t, recs, 0, end)
			checkLookupsMatchScan(t, l, recs)
			require.NoError(t, l.Close())
		})
	}
}

// The case of the report: the disk fills, a roll fails to allocate the
// next segment's indexes (the full segment has been sealed and its
// indexes trimmed), the process dies. Freeing less space than an index
// growth step is enough to recover: every acknowledged record is back.
func TestRecoveryAfterFailedRollOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	var sw vfs.Switch
	opts := roomyIndexes()
	opts.fs = vfs.NewFaultFS(vfs.Default, sw.Inject)
	l, err := Open(dir, opts)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(32, 32))
	end := appendN(t, l, 300, 5, rng)
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	for err == nil {
		_, err = l.Append(record.Record{Value: value(l.EndOffset()), Timestamp: time.UnixMilli(1_700_000_000_000 + l.EndOffset())})
		if err == nil {
			end++
		}
	}
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, vfs.ErrNoSpace)
	require.NoError(t, l.Crash(false))

	opts.fs = vfs.NewFaultFS(vfs.Default, freeSpace(1<<10))
	l, err = Open(dir, opts)
	require.NoError(t, err, "recovery must not need an index growth step")
	recs := readAll(t, l, 0)
	checkRecords(t, recs, 0, end)
	checkLookupsMatchScan(t, l, recs)
	require.NoError(t, l.Close())
}
