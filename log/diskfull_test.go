package log

import (
	"math/rand/v2"
	"os"
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
// space, as on a real file system.
func freeSpace(free int64) vfs.Injector {
	return func(op vfs.Op, path string, n int) (int, error) {
		if op != vfs.OpAllocate {
			return n, nil
		}
		var size int64
		if st, err := os.Stat(path); err == nil {
			size = st.Size()
		}
		if int64(n)-size > free {
			return 0, vfs.ErrNoSpace
		}
		return n, nil
	}
}

// roomyIndexes are options whose full index preallocation (2 x 64 KiB) is
// far more than a small segment's entries need.
func roomyIndexes() Options {
	return Options{SegmentBytes: 16 << 10, IndexIntervalBytes: 128, IndexMaxBytes: 64 << 10, CheckpointInterval: time.Hour}
}

// Reopening a log on a disk with less free space than a segment's full
// index preallocation works: the reopened segments' indexes take what their
// data needs - after a clean close (which trimmed them), and after a crash
// that left the active segment's index damaged (so it is made afresh).
// Lookups agree with a scan; appends go on until the active segment would
// roll, which needs the full preallocation and fails cleanly.
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

			opts.fs = vfs.NewFaultFS(vfs.Default, freeSpace(8<<10))
			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err, "reopening must not need a full index preallocation")
			require.Equal(t, !crash, info.Clean)
			recs := readAll(t, l, 0)
			checkRecords(t, recs, 0, end)
			checkLookupsMatchScan(t, l, recs)
			for err == nil {
				_, err = l.Append(record.Record{Value: value(l.EndOffset()), Timestamp: time.UnixMilli(1_700_000_000_000 + l.EndOffset())})
				if err == nil {
					end++
				}
			}
			require.ErrorIs(t, err, vfs.ErrNoSpace, "the roll to a new segment needs the full preallocation")
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

// The case of the report: the disk fills, a roll fails to preallocate the
// next segment's indexes (the full segment has been sealed and its
// indexes trimmed), the process dies. Freeing less space than a full index
// preallocation is enough to recover: every acknowledged record is back.
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

	opts.fs = vfs.NewFaultFS(vfs.Default, freeSpace(8<<10))
	l, err = Open(dir, opts)
	require.NoError(t, err, "recovery must not need a full index preallocation")
	recs := readAll(t, l, 0)
	checkRecords(t, recs, 0, end)
	checkLookupsMatchScan(t, l, recs)
	require.NoError(t, l.Close())
}
