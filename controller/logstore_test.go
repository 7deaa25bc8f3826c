package controller

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// The conformance tests below are what hashicorp/raft expects of a
// LogStore, as its InmemStore behaves and raft-boltdb's tests check (first
// and last index, get, store, store batch, delete range), with what Raft's
// call sites need besides: ErrLogNotFound itself (replication compares it
// with ==), the two shapes of DeleteRange, a restart after everything was
// deleted (MonotonicLogStore), durability across a reopen.

// testEntry is entry index of term: every field set from the index, so a
// reader can tell a right entry from a wrong one.
func testEntry(index, term uint64) *raft.Log {
	e := &raft.Log{
		Index: index,
		Term:  term,
		Type:  raft.LogType(index % 6),
		Data:  []byte(fmt.Sprintf("entry %d of term %d|%s", index, term, bytes.Repeat([]byte{'d'}, int(index%37)))),
	}
	switch index % 4 {
	case 0:
		e.Data = nil
	case 1:
		e.Extensions = []byte(fmt.Sprintf("ext-%d", index))
	case 2:
		e.Extensions = []byte{}
	}
	if index%5 != 0 {
		e.AppendedAt = time.Unix(1_700_000_000+int64(index), int64(index*7919%1_000_000_000))
	}
	return e
}

func testEntries(from, to, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, testEntry(i, term))
	}
	return out
}

// requireEntry checks got is want, field by field: nil and empty Data and
// Extensions are told apart, AppendedAt to the nanosecond.
func requireEntry(t testing.TB, want, got *raft.Log) {
	t.Helper()
	require.Equal(t, want.Index, got.Index)
	require.Equal(t, want.Term, got.Term, "index %d", want.Index)
	require.Equal(t, want.Type, got.Type, "index %d", want.Index)
	require.Equal(t, want.Data, got.Data, "index %d", want.Index)
	require.Equal(t, want.Data == nil, got.Data == nil, "index %d: nil Data", want.Index)
	require.Equal(t, want.Extensions, got.Extensions, "index %d", want.Index)
	require.Equal(t, want.Extensions == nil, got.Extensions == nil, "index %d: nil Extensions", want.Index)
	require.True(t, want.AppendedAt.Equal(got.AppendedAt), "index %d: AppendedAt %v, want %v", want.Index, got.AppendedAt, want.AppendedAt)
}

func openTestStore(t testing.TB, dir string) *LogStore {
	t.Helper()
	s, err := OpenLogStore(dir, LogStoreOptions{SegmentBytes: 8 << 10})
	require.NoError(t, err)
	return s
}

// requireRange checks the store holds exactly want's entries.
func requireRange(t testing.TB, s *LogStore, want []*raft.Log) {
	t.Helper()
	first, err := s.FirstIndex()
	require.NoError(t, err)
	last, err := s.LastIndex()
	require.NoError(t, err)
	if len(want) == 0 {
		require.Zero(t, first)
		require.Zero(t, last)
		return
	}
	require.Equal(t, want[0].Index, first, "first index")
	require.Equal(t, want[len(want)-1].Index, last, "last index")
	for _, w := range want {
		var got raft.Log
		require.NoError(t, s.GetLog(w.Index, &got))
		requireEntry(t, w, &got)
	}
	var l raft.Log
	require.Same(t, raft.ErrLogNotFound, s.GetLog(first-1, &l))
	require.Same(t, raft.ErrLogNotFound, s.GetLog(last+1, &l))
}

// reopen closes s and opens its directory again, with an empty cache:
// reads come from the files.
func reopen(t testing.TB, s *LogStore) *LogStore {
	t.Helper()
	dir := s.Dir()
	require.NoError(t, s.Close())
	return openTestStore(t, dir)
}

func TestLogStoreEmpty(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	requireRange(t, s, nil)
	var l raft.Log
	for _, i := range []uint64{0, 1, 2, math.MaxUint64} {
		require.Same(t, raft.ErrLogNotFound, s.GetLog(i, &l), "index %d", i)
	}
	require.True(t, s.IsMonotonic())
	require.NoError(t, s.StoreLogs(nil))
	require.NoError(t, s.DeleteRange(1, 10), "nothing to delete")
	requireRange(t, s, nil)
}

// Every field of raft.Log comes back as it went in, from the cache of what
// was just stored and from the files after a reopen.
func TestLogStoreRoundTrip(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	want := testEntries(1, 40, 3)
	want[7].Term = 3
	want[9].AppendedAt = time.Unix(0, 0)                        // the epoch itself
	want[10].AppendedAt = time.UnixMilli(1_700_000_000_123)     // whole milliseconds: no "ns" header
	want[11].AppendedAt = time.Unix(1_700_000_000, 999_999_999) // the last nanosecond
	want[12].Data = []byte{}
	want[13].Type = raft.LogType(255)
	require.NoError(t, s.StoreLog(want[0]))
	require.NoError(t, s.StoreLogs(want[1:]))
	requireRange(t, s, want)
	s = reopen(t, s)
	defer s.Close()
	requireRange(t, s, want)
}

// StoreLogs writes one batch per run of entries of one term, with the term
// in the batch's partitionLeaderEpoch, and cuts a long run at about 1 MiB.
func TestLogStoreBatchesByTerm(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenLogStore(dir, LogStoreOptions{})
	require.NoError(t, err)
	var logs []*raft.Log
	for i, term := range []uint64{1, 1, 1, 2, 2, 5, 5, 5, 5} {
		logs = append(logs, testEntry(uint64(i+1), term))
	}
	require.NoError(t, s.StoreLogs(logs))
	big := testEntries(10, 29, 6)
	for _, e := range big {
		e.Data = bytes.Repeat([]byte{byte(e.Index)}, 200<<10)
	}
	require.NoError(t, s.StoreLogs(big))

	type batch struct {
		base, last int64
		epoch      int32
	}
	var got []batch
	for off := int64(0); off < s.log.EndOffset(); {
		buf, err := s.log.Read(off, 1)
		require.NoError(t, err)
		b, _, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		got = append(got, batch{b.BaseOffset(), b.LastOffset(), b.PartitionLeaderEpoch()})
		off = b.NextOffset()
	}
	require.Equal(t, []batch{{0, 2, 1}, {3, 4, 2}, {5, 8, 5}, {9, 13, 6}, {14, 18, 6}, {19, 23, 6}, {24, 28, 6}}, got)
	requireRange(t, s, append(logs, big...))
	require.NoError(t, s.Close())
}

// What cannot be stored is refused with a typed error, and nothing of the
// call is written - not even the valid entries before the bad one.
func TestLogStoreRefusesBadEntries(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenLogStore(dir, LogStoreOptions{SegmentBytes: 64 << 10})
	require.NoError(t, err)
	defer s.Close()
	base := testEntries(1, 5, 1)
	require.NoError(t, s.StoreLogs(base))

	bigTerm := testEntries(6, 8, 2)
	bigTerm[2].Term = math.MaxInt32 + 1
	early := testEntries(6, 8, 2)
	early[1].AppendedAt = time.Unix(-5, 0)
	huge := testEntries(6, 8, 2)
	huge[2].Data = make([]byte, 64<<10)
	skipped := testEntries(6, 8, 2)
	skipped[2].Index = 10
	cases := map[string]struct {
		logs []*raft.Log
		want error
	}{
		"term past int32":      {bigTerm, ErrBadEntry},
		"appended before 1970": {early, ErrBadEntry},
		"larger than segment":  {huge, ErrBadEntry},
		"index 0 on top":       {[]*raft.Log{testEntry(0, 2)}, ErrBadEntry},
		"gap after the last":   {testEntries(7, 9, 2), ErrLogGap},
		"overlap":              {testEntries(5, 9, 2), ErrLogGap},
		"skip inside the call": {skipped, ErrLogGap},
		"repeat inside":        {[]*raft.Log{testEntry(6, 2), testEntry(6, 2)}, ErrLogGap},
	}
	end := s.log.EndOffset()
	for name, c := range cases {
		require.ErrorIs(t, s.StoreLogs(c.logs), c.want, name)
		require.Equal(t, end, s.log.EndOffset(), "%s: nothing written", name)
		requireRange(t, s, base)
	}
	// Term 2^31-1 is the largest that fits.
	ok := testEntries(6, 6, math.MaxInt32)
	require.NoError(t, s.StoreLogs(ok))
	var got raft.Log
	require.NoError(t, s.GetLog(6, &got))
	require.Equal(t, uint64(math.MaxInt32), got.Term)

	empty, err := OpenLogStore(t.TempDir(), LogStoreOptions{})
	require.NoError(t, err)
	defer empty.Close()
	require.ErrorIs(t, empty.StoreLogs([]*raft.Log{testEntry(0, 1)}), ErrBadEntry)
	requireRange(t, empty, nil)
}

// A head deletion (after a snapshot) moves FirstIndex, inside a batch too,
// and holds across a reopen.
func TestLogStoreDeleteHead(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	want := testEntries(1, 300, 1)
	for i := 0; i < len(want); i += 7 {
		require.NoError(t, s.StoreLogs(want[i:min(i+7, len(want))]))
	}
	require.NoError(t, s.DeleteRange(1, 40)) // 41 is inside a batch (36..42)
	requireRange(t, s, want[40:])
	require.NoError(t, s.DeleteRange(41, 41))
	require.NoError(t, s.DeleteRange(1, 200)) // reaching below the first is fine
	requireRange(t, s, want[200:])
	require.NoError(t, s.DeleteRange(5, 150), "below the first: nothing to do")
	requireRange(t, s, want[200:])
	s = reopen(t, s)
	requireRange(t, s, want[200:])
	require.NoError(t, s.StoreLogs(testEntries(301, 305, 2)))
	requireRange(t, s, append(want[200:], testEntries(301, 305, 2)...))
	require.NoError(t, s.Close())
}

// A tail deletion (a conflicting suffix) cuts at any entry: on a batch
// boundary, inside a batch, inside the batch the head deletion also cut;
// new entries of a later term follow, and it all holds across a reopen.
func TestLogStoreDeleteTail(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	want := testEntries(1, 100, 1)
	for i := 0; i < len(want); i += 10 {
		require.NoError(t, s.StoreLogs(want[i:i+10])) // batches 1-10, 11-20, ...
	}
	require.NoError(t, s.DeleteRange(91, 100)) // a boundary
	requireRange(t, s, want[:90])
	require.NoError(t, s.DeleteRange(86, 95)) // inside the batch 81-90, reaching past the last
	requireRange(t, s, want[:85])
	require.NoFileExists(t, filepath.Join(s.Dir(), truncateFile))
	next := testEntries(86, 95, 2)
	require.NoError(t, s.StoreLogs(next))
	want = append(want[:85], next...)
	requireRange(t, s, want)

	require.NoError(t, s.DeleteRange(1, 63)) // the start inside the batch 61-70
	require.NoError(t, s.DeleteRange(66, 200))
	requireRange(t, s, want[63:65])
	s = reopen(t, s)
	requireRange(t, s, want[63:65])
	require.NoError(t, s.StoreLogs(testEntries(66, 70, 3)))
	requireRange(t, s, append(want[63:65], testEntries(66, 70, 3)...))
	require.NoError(t, s.DeleteRange(1000, 2000), "past the last: nothing to do")
	require.NoError(t, s.Close())
}

// After Raft deletes everything (it installed a snapshot, and the store is
// monotonic), the next StoreLogs starts the log where it says: past the old
// end, at it, or below it.
func TestLogStoreDeleteAllThenStoreElsewhere(t *testing.T) {
	for name, at := range map[string]uint64{"past the end": 500, "at the end": 101, "below the end": 60, "at one": 1} {
		t.Run(name, func(t *testing.T) {
			s := openTestStore(t, t.TempDir())
			require.NoError(t, s.StoreLogs(testEntries(1, 100, 1)))
			require.NoError(t, s.DeleteRange(1, 30))
			require.NoError(t, s.DeleteRange(31, 100))
			requireRange(t, s, nil)
			s = reopen(t, s)
			requireRange(t, s, nil)

			want := testEntries(at, at+9, 4)
			require.NoError(t, s.StoreLogs(want))
			requireRange(t, s, want)
			require.Equal(t, int64(at-1), s.log.StartOffset(), "index = offset + 1")
			s = reopen(t, s)
			requireRange(t, s, want)
			require.ErrorIs(t, s.StoreLogs(testEntries(at, at, 4)), ErrLogGap, "not empty any more")
			require.NoError(t, s.Close())
		})
	}
}

// DeleteRange comes in two shapes; a hole in the middle and a reversed
// range are refused, changing nothing.
func TestLogStoreDeleteRangeShapes(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	want := testEntries(1, 50, 1)
	require.NoError(t, s.StoreLogs(want))
	require.ErrorIs(t, s.DeleteRange(10, 20), ErrBadDeleteRange)
	require.ErrorIs(t, s.DeleteRange(2, 49), ErrBadDeleteRange)
	require.ErrorIs(t, s.DeleteRange(30, 20), ErrBadDeleteRange)
	requireRange(t, s, want)
}

// Raft alone deletes entries: the log's retention, by age or size, never
// does, however old the entries' timestamps.
func TestLogStoreRetentionDeletesNothing(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	want := testEntries(1, 200, 1)
	for _, e := range want {
		e.AppendedAt = time.Now().Add(-400 * 24 * time.Hour)
		e.Data = make([]byte, 500)
	}
	for i := 0; i < len(want); i += 10 {
		require.NoError(t, s.StoreLogs(want[i:i+10]))
	}
	require.Greater(t, s.log.NumSegments(), 5)
	n, err := s.log.ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n)
	requireRange(t, s, want)
}

// Writes after Close fail, as do reads.
func TestLogStoreClosed(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	require.NoError(t, s.StoreLogs(testEntries(1, 3, 1)))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Close(), log.ErrClosed)
	require.ErrorIs(t, s.StoreLogs(testEntries(4, 4, 1)), log.ErrClosed)
	require.ErrorIs(t, s.DeleteRange(1, 1), log.ErrClosed)
	var l raft.Log
	require.ErrorIs(t, s.GetLog(1, &l), log.ErrClosed)
	_, err := s.LastIndex()
	require.ErrorIs(t, err, log.ErrClosed)
}

// Readers running beside the writer - stores, cuts inside batches, head
// deletions, restarts of the log - only ever get an entry that is right for
// the index they asked (every field derives from index and term) or
// ErrLogNotFound.
func TestLogStoreConcurrentReaders(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, found atomic.Int64
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last == 0 {
					continue
				}
				for i := first; i <= last && !stop.Load(); i++ {
					var got raft.Log
					err := s.GetLog(i, &got)
					reads.Add(1)
					if err == raft.ErrLogNotFound {
						continue
					}
					if err != nil {
						t.Errorf("GetLog(%d): %v", i, err)
						return
					}
					found.Add(1)
					want := testEntry(i, got.Term)
					if got.Index != i || !bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
						got.Type != want.Type || !got.AppendedAt.Equal(want.AppendedAt) {
						t.Errorf("GetLog(%d) = index %d term %d data %q: not the entry of that index and term", i, got.Index, got.Term, got.Data)
						return
					}
				}
			}
		}()
	}
	term, next := uint64(1), uint64(1)
	for round := 0; round < 300 && !t.Failed(); round++ {
		switch {
		case round%50 == 49:
			last, _ := s.LastIndex()
			first, _ := s.FirstIndex()
			require.NoError(t, s.DeleteRange(first, last))
			next = max(1, next-uint64(round%40)) // start again below the old end
		case round%7 == 6 && next > 10:
			first, _ := s.FirstIndex()
			cut := next - 1 - uint64(round%9)
			if cut > first {
				require.NoError(t, s.DeleteRange(cut, next-1))
				next = cut
				term++
			}
		case round%11 == 10 && next > 20:
			first, _ := s.FirstIndex()
			if next-10 > first {
				require.NoError(t, s.DeleteRange(first, next-10))
			}
		}
		n := uint64(1 + round%6)
		require.NoError(t, s.StoreLogs(testEntries(next, next+n-1, term)))
		next += n
	}
	stop.Store(true)
	wg.Wait()
	require.Positive(t, found.Load())
	t.Logf("%d reads, %d found", reads.Load(), found.Load())
}

// A truncation inside a batch is done in steps; a crash between any two
// leaves the truncation file, and OpenLogStore finishes the cut from it:
// the entries before the cut are all there, none after, the log start is
// where it was, and the file is gone. Each state a crash can leave is made
// here by hand: the file alone, the file and the log cut back to the
// batch's start, the file and the log already refilled.
func TestLogStoreFinishesInterruptedTruncation(t *testing.T) {
	for _, headCut := range []bool{false, true} {
		for _, state := range []string{"not cut", "cut to the batch start", "refilled"} {
			t.Run(fmt.Sprintf("%s, head cut %t", state, headCut), func(t *testing.T) {
				dir := t.TempDir()
				s := openTestStore(t, dir)
				want := testEntries(1, 30, 1)
				require.NoError(t, s.StoreLogs(want[:10]))
				require.NoError(t, s.StoreLogs(want[10:20])) // the batch 11..20 is cut at 16
				require.NoError(t, s.StoreLogs(want[20:]))
				first := uint64(1)
				if headCut {
					require.NoError(t, s.DeleteRange(1, 12)) // the start inside the same batch
					first = 13
				}
				buf, err := s.log.Read(15, 1)
				require.NoError(t, err)
				b, _, err := record.ParseBatch(buf)
				require.NoError(t, err)
				tr, err := s.keptPrefix(b, 15)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, truncateFile), tr.encode(), 0o644))
				switch state {
				case "cut to the batch start":
					_, err := s.log.Truncate(15)
					require.NoError(t, err)
					require.Equal(t, int64(10), s.log.EndOffset())
				case "refilled":
					_, err := s.log.Truncate(15)
					require.NoError(t, err)
					_, err = s.log.AppendTrusted(tr.kept)
					require.NoError(t, err)
				}
				require.NoError(t, s.log.Close()) // as the crash left it

				s = openTestStore(t, dir)
				requireRange(t, s, want[first-1:15])
				require.NoFileExists(t, filepath.Join(dir, truncateFile))
				require.NoError(t, s.StoreLogs(testEntries(16, 18, 2)))
				s = reopen(t, s)
				requireRange(t, s, append(want[first-1:15], testEntries(16, 18, 2)...))
				require.NoError(t, s.Close())
			})
		}
	}
}

// A damaged truncation file is not guessed at: OpenLogStore refuses,
// naming it.
func TestLogStoreRefusesDamagedTruncationFile(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	require.NoError(t, s.StoreLogs(testEntries(1, 10, 1)))
	buf, err := s.log.Read(5, 1)
	require.NoError(t, err)
	b, _, err := record.ParseBatch(buf)
	require.NoError(t, err)
	tr, err := s.keptPrefix(b, 5)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	data := tr.encode()
	data[20] ^= 1
	path := filepath.Join(dir, truncateFile)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	_, err = OpenLogStore(dir, LogStoreOptions{})
	require.ErrorIs(t, err, record.ErrCorrupt)
	require.ErrorContains(t, err, path)
}

// Bad options and a directory another store has open are refused.
func TestOpenLogStoreRefuses(t *testing.T) {
	_, err := OpenLogStore(t.TempDir(), LogStoreOptions{SegmentBytes: 10})
	require.ErrorContains(t, err, "SegmentBytes")
	dir := t.TempDir()
	s := openTestStore(t, dir)
	defer s.Close()
	_, err = OpenLogStore(dir, LogStoreOptions{})
	require.ErrorIs(t, err, log.ErrLocked)
}
