package log

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// lastSegmentFile is the path of the last segment's file with suffix.
func lastSegmentFile(t *testing.T, dir, suffix string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var last int64 = -1
	for _, e := range entries {
		if b, s, ok := segment.ParseFileName(e.Name()); ok && s == segment.LogSuffix && b > last {
			last = b
		}
	}
	require.GreaterOrEqual(t, last, int64(0))
	return filepath.Join(dir, segment.FileName(last, suffix))
}

// checkLookupsMatchScan compares every offset and timestamp lookup with a
// linear scan of the records.
func checkLookupsMatchScan(t *testing.T, l *Log, recs []record.Record) {
	t.Helper()
	for i := 0; i < len(recs); i += 1 + i%7 {
		buf, err := l.Read(recs[i].Offset, 1)
		require.NoError(t, err)
		b, _, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.LessOrEqual(t, b.BaseOffset(), recs[i].Offset)
		require.GreaterOrEqual(t, b.LastOffset(), recs[i].Offset)
	}
	for i := 0; i < len(recs); i += 1 + i%5 {
		ts := recs[i].Timestamp
		want := int64(-1)
		for _, r := range recs {
			if !r.Timestamp.Before(ts) {
				want = r.Offset
				break
			}
		}
		got, ok, err := l.OffsetForTime(ts)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, got, "timestamp %v", ts)
	}
}

// After a crash, garbage or a partial batch at the end of the last segment
// and damage to its index files are repaired: the log recovers to the last
// valid batch, and lookups agree with a scan.
func TestTornTailAndDamagedIndexes(t *testing.T) {
	for round := 0; round < 30; round++ {
		rng := rand.New(rand.NewPCG(11, uint64(round)))
		dir := t.TempDir()
		l, err := Open(dir, tiny())
		require.NoError(t, err)
		end := appendN(t, l, 300+rng.IntN(300), 8, rng)
		require.NoError(t, l.Sync())
		end = appendN(t, l, 50+rng.IntN(100), 8, rng) // past the recovery point
		l.abandon()

		logFile := lastSegmentFile(t, dir, segment.LogSuffix)
		f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		switch rng.IntN(3) {
		case 0: // a partial batch
			b, err := record.NewBatch([]record.Record{{Value: make([]byte, 300)}}, record.BatchOptions{})
			require.NoError(t, err)
			b.SetBaseOffset(end)
			_, err = f.Write(b.Bytes()[:rng.IntN(b.Size())])
			require.NoError(t, err)
		case 1: // random garbage
			junk := make([]byte, 1+rng.IntN(3000))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			_, err = f.Write(junk)
			require.NoError(t, err)
		case 2: // zeroes: allocated but never written
			_, err = f.Write(make([]byte, 1+rng.IntN(8192)))
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
			p := lastSegmentFile(t, dir, suffix)
			switch rng.IntN(4) {
			case 0:
				require.NoError(t, os.Truncate(p, int64(rng.IntN(64))))
			case 1:
				junk := make([]byte, 1+rng.IntN(1024))
				for i := range junk {
					junk[i] = byte(rng.Uint32())
				}
				require.NoError(t, os.WriteFile(p, junk, 0o644))
			case 2:
				st, err := os.Stat(p)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, make([]byte, st.Size()), 0o644))
			case 3:
				require.NoError(t, os.Remove(p))
			}
		}

		l, info, err := OpenWithInfo(dir, tiny())
		require.NoError(t, err, "round %d", round)
		require.False(t, info.Clean)
		require.Equal(t, end, l.EndOffset(), "round %d", round)
		recs := readAll(t, l, 0)
		checkRecords(t, recs, 0, end)
		checkLookupsMatchScan(t, l, recs)
		// And the log goes on.
		end = appendN(t, l, 20, 4, rng)
		require.NoError(t, l.Close())
		l, err = Open(dir, tiny())
		require.NoError(t, err)
		checkRecords(t, readAll(t, l, 0), 0, end)
		require.NoError(t, l.Close())
	}
}

// Damage inside acknowledged data - valid batches follow it - is not
// silently cut under Sync: Open refuses, naming the file and position. Under
// None it is cut, as Kafka does, and reported.
func TestDamageInsideTheTailIsRefusedUnderSync(t *testing.T) {
	build := func(t *testing.T) (string, int64) {
		dir := t.TempDir()
		l, err := Open(dir, Options{CheckpointInterval: time.Hour})
		require.NoError(t, err)
		end := appendN(t, l, 200, 4, rand.New(rand.NewPCG(12, 12)))
		l.abandon()
		p := lastSegmentFile(t, dir, segment.LogSuffix)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		data[len(data)/2] ^= 0x01
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return dir, end
	}

	dir, _ := build(t)
	_, err := Open(dir, Options{})
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *segment.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), lastSegmentFile(t, dir, segment.LogSuffix))
	// Nothing was cut.
	st, err := os.Stat(lastSegmentFile(t, dir, segment.LogSuffix))
	require.NoError(t, err)
	require.Greater(t, st.Size(), ce.Position+1000)

	dir, end := build(t)
	l, info, err := OpenWithInfo(dir, Options{Flush: None})
	require.NoError(t, err)
	require.Greater(t, info.TruncatedBytes, int64(0))
	require.Less(t, l.EndOffset(), end)
	checkRecords(t, readAll(t, l, 0), 0, l.EndOffset())
	require.NoError(t, l.Close())
}

// A reopen after a clean close checks nothing; after a crash it checks only
// what lies past the recovery point.
func TestRecoveryScansOnlyTheUnflushedTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20, CheckpointInterval: time.Hour}
	l, err := Open(dir, opts)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(13, 13))
	appendN(t, l, 20000, 50, rng) // several segments
	require.NoError(t, l.Sync())  // recovery point here
	size := l.Size()
	end := appendN(t, l, 100, 10, rng)
	tail := l.Size() - size
	l.abandon()

	l, info, err := OpenWithInfo(dir, opts)
	require.NoError(t, err)
	require.False(t, info.Clean)
	require.Equal(t, 1, info.SegmentsChecked)
	require.LessOrEqual(t, info.BytesChecked, tail+int64(segment.DefaultIndexIntervalBytes)+2000,
		"checked from the last index entry before the recovery point")
	require.Equal(t, end, l.EndOffset())
	require.NoError(t, l.Close())

	l, info, err = OpenWithInfo(dir, opts)
	require.NoError(t, err)
	require.True(t, info.Clean)
	require.Zero(t, info.SegmentsChecked)
	require.NoError(t, l.Close())
}

// A damaged or missing checkpoint means "check everything", never trust.
func TestDamagedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	end := appendN(t, l, 500, 5, rand.New(rand.NewPCG(14, 14)))
	require.NoError(t, l.Close())
	p := filepath.Join(dir, CheckpointFile)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	data[len("spool-log-checkpoint 1\nrecovery-point ")] ^= 1
	require.NoError(t, os.WriteFile(p, data, 0o644))

	l, info, err := OpenWithInfo(dir, tiny())
	require.NoError(t, err)
	require.False(t, info.Clean)
	require.Equal(t, l.NumSegments(), info.SegmentsChecked)
	checkRecords(t, readAll(t, l, 0), 0, end)
	require.NoError(t, l.Close())

	_, err = ParseCheckpoint([]byte("junk"))
	require.ErrorIs(t, err, ErrBadCheckpoint)
	c := Checkpoint{RecoveryPoint: RecoveryPoint{Offset: 5, SegmentBase: 3, Position: 99}, StartOffset: 2, CleanShutdown: true}
	got, err := ParseCheckpoint(c.encode())
	require.NoError(t, err)
	require.Equal(t, c, got)
}

// faultLog opens a log over a file layer whose faults the test switches on.
func faultLog(t *testing.T, dir string, sw *vfs.Switch, policy FlushPolicy) *Log {
	t.Helper()
	opts := tiny()
	opts.Flush = policy
	opts.fs = vfs.NewFaultFS(vfs.Default, sw.Inject)
	l, err := Open(dir, opts)
	require.NoError(t, err)
	return l
}

func isLog(p string) bool { return filepath.Ext(p) == segment.LogSuffix }

// A failed fsync fails the append and the log: no later write is accepted
// and no later fsync trusted until the log is reopened, and reopening loses
// nothing that was acknowledged.
func TestFsyncFailure(t *testing.T) {
	dir := t.TempDir()
	var sw vfs.Switch
	l := faultLog(t, dir, &sw, Sync)
	end := appendN(t, l, 200, 5, rand.New(rand.NewPCG(15, 15)))

	sw.FailAfter(vfs.OpSync, isLog, 0, vfs.ErrIO, 1) // one failure, then healthy
	_, err := l.Append(record.Record{Value: []byte("lost?")})
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, vfs.ErrIO)

	// The disk "works" again, but the log does not believe it.
	_, err = l.Append(record.Record{Value: []byte("after")})
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, l.Sync(), ErrFailed)
	require.ErrorIs(t, l.Roll(), ErrFailed)
	_, err = l.Truncate(0)
	require.ErrorIs(t, err, ErrFailed)
	require.Equal(t, end, l.CommittedOffset(), "the unsynced append was never visible")
	require.NoError(t, l.Close()) // closes, without a clean mark

	l, info, err := OpenWithInfo(dir, tiny())
	require.NoError(t, err)
	require.False(t, info.Clean)
	recs := readAll(t, l, 0)
	checkRecords(t, recs[:end], 0, end)
	require.LessOrEqual(t, len(recs), int(end)+1)
	require.NoError(t, l.Close())
}

// A full disk mid-write: the append fails, the partial bytes are cut, the
// log refuses writes; on reopen every acknowledged record is there and no
// partial batch.
func TestDiskFullDuringWrite(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			l := faultLog(t, dir, &sw, policy)
			end := appendN(t, l, 100, 5, rand.New(rand.NewPCG(16, 16)))
			sw.TearWrite(isLog, -1, vfs.ErrNoSpace, -1)
			_, err := l.Append(record.Record{Value: make([]byte, 500)})
			require.ErrorIs(t, err, vfs.ErrNoSpace)
			_, err = l.Append(record.Record{Value: []byte("x")})
			require.ErrorIs(t, err, ErrFailed)
			sw.Reset()
			require.NoError(t, l.Close())

			l, err = Open(dir, tiny())
			require.NoError(t, err)
			require.Equal(t, end, l.EndOffset())
			checkRecords(t, readAll(t, l, 0), 0, end)
			require.NoError(t, l.Close())
		})
	}
}

// A full disk when a roll preallocates the next segment's indexes, and a
// failed directory fsync after the roll: both fail the append cleanly.
func TestFaultsDuringRoll(t *testing.T) {
	cases := map[string]func(*vfs.Switch){
		"index allocation": func(sw *vfs.Switch) { sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1) },
		"directory fsync":  func(sw *vfs.Switch) { sw.FailAfter(vfs.OpSyncDir, nil, 0, vfs.ErrIO, -1) },
		"checkpoint write": func(sw *vfs.Switch) {
			sw.FailAfter(vfs.OpRename, func(p string) bool { return filepath.Base(p) == CheckpointFile+".tmp" }, 0, vfs.ErrIO, -1)
		},
	}
	for name, arm := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var sw vfs.Switch
			l := faultLog(t, dir, &sw, Sync)
			rng := rand.New(rand.NewPCG(17, 17))
			end := appendN(t, l, 50, 5, rng)
			arm(&sw)
			var err error
			for i := 0; i < 1000 && err == nil; i++ {
				_, err = l.Append(record.Record{Value: make([]byte, 200)})
				if err == nil {
					end++
				}
				if name == "checkpoint write" {
					// The checkpoint after a roll runs in the background.
					time.Sleep(time.Millisecond)
				}
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrFailed), "%v", err)
			sw.Reset()
			require.NoError(t, l.Close())
			l, err = Open(dir, tiny())
			require.NoError(t, err)
			recs := readAll(t, l, 0)
			require.GreaterOrEqual(t, int64(len(recs)), end)
			require.NoError(t, l.Close())
		})
	}
}

// Garbage appended to the active segment after a clean close is found and
// cut, not kept to be half-overwritten by later appends (found by spool
// check's tests).
func TestGarbageAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20}
	l, err := Open(dir, opts)
	require.NoError(t, err)
	end := appendN(t, l, 3, 3, rand.New(rand.NewPCG(40, 40)))
	require.NoError(t, l.Close())
	p := lastSegmentFile(t, dir, segment.LogSuffix)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	junk := make([]byte, 180)
	for i := range junk {
		junk[i] = byte(i*37 + 11)
	}
	_, err = f.Write(junk)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l, info, err := OpenWithInfo(dir, opts)
	require.NoError(t, err)
	require.Equal(t, int64(180), info.TruncatedBytes)
	require.Equal(t, end, l.EndOffset())
	_, err = l.Append(record.Record{Value: []byte("after")})
	require.NoError(t, err)
	require.NoError(t, l.Roll())
	_, err = l.Append(record.Record{Value: []byte("next")})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l, err = Open(dir, opts)
	require.NoError(t, err)
	recs := readAll(t, l, 0)
	require.Len(t, recs, int(end)+2)
	require.NoError(t, l.Close())
}

// Flushed data that has vanished (a file cut short behind the log's back)
// is not papered over by reusing its offsets.
func TestFlushedDataMissingIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	require.NoError(t, err)
	appendN(t, l, 100, 5, rand.New(rand.NewPCG(41, 41)))
	require.NoError(t, l.Sync())
	l.abandon()
	p := lastSegmentFile(t, dir, segment.LogSuffix)
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(p, st.Size()/2))
	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "flushed")
}
