package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

var small = Options{IndexIntervalBytes: 256, IndexMaxBytes: 64 << 10}

// batchAt encodes n records with base offset off and timestamps ts, ts+1, ...
func batchAt(t testing.TB, off int64, n int, ts int64, valueSize int) record.Batch {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{
			Timestamp: time.UnixMilli(ts + int64(i)),
			Key:       []byte(fmt.Sprintf("k%d", off+int64(i))),
			Value:     bytes.Repeat([]byte{byte(off + int64(i))}, valueSize),
		}
	}
	b, err := record.NewBatch(recs, record.BatchOptions{})
	require.NoError(t, err)
	b.SetBaseOffset(off)
	return b
}

type written struct {
	h Header
	b []byte
}

// fill appends batches of random shapes starting at base and returns them.
func fill(t *testing.T, s *Segment, base int64, count int, rng *rand.Rand) []written {
	t.Helper()
	var out []written
	off := base
	ts := int64(1_700_000_000_000)
	for i := 0; i < count; i++ {
		n := 1 + rng.IntN(5)
		// Timestamps wander, as create times do, but rise overall.
		ts += int64(rng.IntN(100)) - 30
		b := batchAt(t, off, n, ts, rng.IntN(300))
		require.NoError(t, s.Fits(b, 1<<30))
		pos, err := s.Append(b)
		require.NoError(t, err)
		out = append(out, written{h: Header{Position: pos, BaseOffset: off, LastOffset: b.LastOffset(), Size: b.Size(), MaxTimestamp: b.MaxTimestamp()}, b: append([]byte(nil), b.Bytes()...)})
		off = b.NextOffset()
		if rng.IntN(10) == 0 {
			off += int64(rng.IntN(3)) // gaps, as compaction leaves
		}
	}
	s.Commit(s.Size())
	return out
}

// linearFind is the reference for Find: the first batch with last offset >=
// target.
func linearFind(ws []written, target int64) (Header, bool) {
	for _, w := range ws {
		if w.h.LastOffset >= target {
			return w.h, true
		}
	}
	return Header{}, false
}

func linearFindTime(ws []written, ts int64) (Header, bool) {
	for _, w := range ws {
		if w.h.MaxTimestamp >= ts {
			return w.h, true
		}
	}
	return Header{}, false
}

func checkLookups(t *testing.T, s *Segment, ws []written) {
	t.Helper()
	last := ws[len(ws)-1].h
	for target := ws[0].h.BaseOffset - 2; target <= last.LastOffset+2; target++ {
		want, ok := linearFind(ws, target)
		got, err := s.Find(target, s.Committed())
		if !ok {
			require.ErrorIs(t, err, io.EOF, "target %d", target)
			continue
		}
		require.NoError(t, err, "target %d", target)
		require.Equal(t, want.Position, got.Position, "target %d", target)
		require.Equal(t, want.LastOffset, got.LastOffset, "target %d", target)
	}
	for _, w := range ws {
		for _, ts := range []int64{w.h.MaxTimestamp - 1, w.h.MaxTimestamp, w.h.MaxTimestamp + 1} {
			want, ok := linearFindTime(ws, ts)
			got, err := s.FindTime(ts, s.Committed())
			if !ok {
				require.ErrorIs(t, err, io.EOF)
				continue
			}
			require.NoError(t, err, "ts %d", ts)
			require.Equal(t, want.Position, got.Position, "ts %d", ts)
		}
	}
	next, err := s.NextOffset()
	require.NoError(t, err)
	require.Equal(t, last.NextOffset(), next)
	maxTS, err := s.MaxTimestamp()
	require.NoError(t, err)
	var want int64 = -1
	for _, w := range ws {
		want = max(want, w.h.MaxTimestamp)
	}
	require.Equal(t, want, maxTS)
}

func TestAppendFindReadReopen(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 1))
	s, err := Create(dir, 100, small)
	require.NoError(t, err)
	ws := fill(t, s, 100, 300, rng)
	checkLookups(t, s, ws)

	// Read: whole batches, at least one, up to maxBytes.
	for _, maxBytes := range []int{1, 100, 1000, 5000, 1 << 20} {
		out, first, err := s.Read(nil, ws[10].h.BaseOffset, maxBytes, s.Committed())
		require.NoError(t, err)
		require.Equal(t, ws[10].h.Position, first.Position)
		require.GreaterOrEqual(t, len(out), ws[10].h.Size)
		require.True(t, len(out) <= maxBytes || len(out) == ws[10].h.Size)
		var i = 10
		for p := 0; p < len(out); i++ {
			b, n, err := record.ParseBatch(out[p:])
			require.NoError(t, err)
			require.NoError(t, b.Verify())
			require.Equal(t, ws[i].b, b.Bytes())
			p += n
		}
		pos, n, _, err := s.Span(ws[10].h.BaseOffset, maxBytes, s.Committed())
		require.NoError(t, err)
		require.Equal(t, ws[10].h.Position, pos)
		require.Equal(t, int64(len(out)), n)
	}
	// Readers see no further than the committed size.
	_, _, err = s.Read(nil, ws[len(ws)-1].h.BaseOffset, 100, ws[len(ws)-1].h.Position)
	require.ErrorIs(t, err, io.EOF)

	// Seal and reopen read-only: the indexes load lazily and agree.
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close(true))
	st, err := os.Stat(filepath.Join(dir, FileName(100, IndexSuffix)))
	require.NoError(t, err)
	require.Less(t, st.Size(), int64(small.IndexMaxBytes), "trimmed")
	require.Zero(t, st.Size()%8)

	s, err = Open(dir, 100, small, false)
	require.NoError(t, err)
	checkLookups(t, s, ws)
	require.NoError(t, s.Close(true))
}

func TestCleanCloseAndResume(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(2, 2))
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 100, rng)
	require.NoError(t, s.PrepareCleanClose())
	require.NoError(t, s.Close(true))

	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	require.NoError(t, s.Resume())
	checkLookups(t, s, ws)
	ws = append(ws, fill(t, s, ws[len(ws)-1].h.NextOffset(), 50, rng)...)
	checkLookups(t, s, ws)
	require.NoError(t, s.Close(false))
}

func TestRecoverTornTail(t *testing.T) {
	for round := 0; round < 20; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(3, uint64(round)))
			s, err := Create(dir, 0, small)
			require.NoError(t, err)
			ws := fill(t, s, 0, 50+rng.IntN(50), rng)
			good := s.Size()
			require.NoError(t, s.Close(false))

			// Tear the tail: a prefix of a real batch, or garbage.
			p := filepath.Join(dir, FileName(0, LogSuffix))
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			next := ws[len(ws)-1].h.NextOffset()
			switch round % 3 {
			case 0:
				b := batchAt(t, next, 3, 1, 50)
				_, err = f.Write(b.Bytes()[:1+rng.IntN(b.Size()-1)])
			case 1:
				junk := make([]byte, 1+rng.IntN(2000))
				for i := range junk {
					junk[i] = byte(rng.Uint32())
				}
				_, err = f.Write(junk)
			case 2:
				_, err = f.Write(make([]byte, 1+rng.IntN(5000)))
			}
			require.NoError(t, err)
			require.NoError(t, f.Close())
			// And damage the index past the recovery start.
			ip := filepath.Join(dir, FileName(0, IndexSuffix))
			switch round % 4 {
			case 0:
				require.NoError(t, os.Remove(ip))
			case 1:
				require.NoError(t, os.WriteFile(ip, []byte("garbage!!"), 0o644))
			case 2:
				require.NoError(t, os.Truncate(ip, 4))
			}

			s, err = Open(dir, 0, small, true)
			require.NoError(t, err)
			res, err := s.Recover(0)
			require.NoError(t, err)
			require.Error(t, res.Err)
			require.False(t, res.DataAfter)
			require.Equal(t, good, res.ValidSize)
			require.NoError(t, s.DropTail())
			checkLookups(t, s, ws)
			require.NoError(t, s.Close(false))
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, good, st.Size())
		})
	}
}

// Recovery from a position keeps the index entries before it.
func TestRecoverFromPosition(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(4, 4))
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 200, rng)
	require.NoError(t, s.Close(false))

	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	mid := ws[150].h.Position
	res, err := s.Recover(mid)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Greater(t, res.From, int64(0))
	require.LessOrEqual(t, res.From, mid)
	require.Less(t, res.Batches, 100, "checked only the tail")
	checkLookups(t, s, ws)
	require.NoError(t, s.Close(false))
}

func TestRecoverFindsDamageInside(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 5))
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 100, rng)
	require.NoError(t, s.Close(false))
	p := filepath.Join(dir, FileName(0, LogSuffix))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	victim := ws[40].h
	data[victim.Position+int64(victim.Size)-3] ^= 0x10
	require.NoError(t, os.WriteFile(p, data, 0o644))

	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	res, err := s.Recover(0)
	require.NoError(t, err)
	require.ErrorIs(t, res.Err, record.ErrCorrupt)
	require.True(t, res.DataAfter)
	require.Equal(t, victim.Position, res.ValidSize)
	require.NoError(t, s.Close(false))
}

// Offsets that go backwards are caught even when every CRC is right,
// because the base offset is outside the CRC.
func TestRecoverCatchesOffsetsGoingBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	for i := int64(0); i < 10; i++ {
		_, err := s.Append(batchAt(t, i*2, 2, 1000, 10))
		require.NoError(t, err)
	}
	bad := batchAt(t, 5, 1, 1000, 10)
	_, err = s.Append(bad)
	require.NoError(t, err)
	require.NoError(t, s.Close(false))
	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	res, err := s.Recover(0)
	require.NoError(t, err)
	require.ErrorIs(t, res.Err, record.ErrCorrupt)
	require.Equal(t, 10, res.Batches)
	require.NoError(t, s.Close(false))
}

func TestDamagedSealedIndexIsRebuilt(t *testing.T) {
	damage := map[string]func(t *testing.T, p string){
		"missing":   func(t *testing.T, p string) { require.NoError(t, os.Remove(p)) },
		"truncated": func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, 3)) },
		"zeroes": func(t *testing.T, p string) {
			st, _ := os.Stat(p)
			require.NoError(t, os.WriteFile(p, make([]byte, st.Size()), 0o644))
		},
		"garbage": func(t *testing.T, p string) {
			st, _ := os.Stat(p)
			b := make([]byte, st.Size())
			for i := range b {
				b[i] = byte(i * 7)
			}
			require.NoError(t, os.WriteFile(p, b, 0o644))
		},
		// In order and whole, but pointing at the wrong batches: only
		// checking headers can catch this.
		"shifted": func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			for i := 0; i+8 <= len(b); i += 8 {
				b[i+7] += 1
			}
			require.NoError(t, os.WriteFile(p, b, 0o644))
		},
	}
	for name, fn := range damage {
		for _, which := range []string{IndexSuffix, TimeIndexSuffix} {
			t.Run(name+which, func(t *testing.T) {
				dir := t.TempDir()
				rng := rand.New(rand.NewPCG(6, 6))
				s, err := Create(dir, 0, small)
				require.NoError(t, err)
				ws := fill(t, s, 0, 200, rng)
				require.NoError(t, s.Seal())
				require.NoError(t, s.Close(true))
				fn(t, filepath.Join(dir, FileName(0, which)))

				s, err = Open(dir, 0, small, false)
				require.NoError(t, err)
				checkLookups(t, s, ws)
				require.NoError(t, s.Close(true))

				// The rebuilt files are valid: a second open trusts them.
				s, err = Open(dir, 0, small, false)
				require.NoError(t, err)
				ix, err := s.indexes()
				require.NoError(t, err)
				require.Greater(t, ix.off.Len(), 10)
				checkLookups(t, s, ws)
				require.NoError(t, s.Close(true))
			})
		}
	}
}

func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 100, rng)

	cut := ws[60].h
	next, err := s.Truncate(cut.BaseOffset + (cut.LastOffset-cut.BaseOffset)/2)
	require.NoError(t, err)
	require.Equal(t, cut.BaseOffset, next, "the batch holding the offset goes whole")
	require.Equal(t, cut.Position, s.Size())
	checkLookups(t, s, ws[:60])

	// Appending again after truncation indexes correctly.
	more := fill(t, s, next, 40, rng)
	checkLookups(t, s, append(ws[:60:60], more...))

	next, err = s.Truncate(0)
	require.NoError(t, err)
	require.Equal(t, int64(0), next)
	require.Equal(t, int64(0), s.Size())
	require.NoError(t, s.Close(false))
}

func TestFailedWriteLeavesWholeBatches(t *testing.T) {
	dir := t.TempDir()
	var sw vfs.Switch
	opts := small
	opts.FS = vfs.NewFaultFS(vfs.Default, sw.Inject)
	s, err := Create(dir, 0, opts)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(8, 8))
	ws := fill(t, s, 0, 20, rng)
	size := s.Size()
	sw.TearWrite(nil, -1, vfs.ErrNoSpace, 1)
	_, err = s.Append(batchAt(t, ws[len(ws)-1].h.NextOffset(), 3, 5, 100))
	require.ErrorIs(t, err, vfs.ErrNoSpace)
	require.Equal(t, size, s.Size())
	st, err := os.Stat(s.Path())
	require.NoError(t, err)
	require.Equal(t, size, st.Size(), "the torn bytes were cut off")
	checkLookups(t, s, ws)
	require.NoError(t, s.Close(false))
}

func TestReadersOutliveDelete(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 20, rand.New(rand.NewPCG(9, 9)))
	require.True(t, s.Acquire())
	require.NoError(t, s.Delete())
	_, err = os.Stat(s.Path())
	require.True(t, errors.Is(err, os.ErrNotExist))
	out, _, err := s.Read(nil, 0, 1<<20, s.Committed())
	require.NoError(t, err)
	require.Equal(t, ws[0].b, out[:ws[0].h.Size])
	s.Release()
	require.False(t, s.Acquire())
}

func TestFileNames(t *testing.T) {
	require.Equal(t, "00000000000000000042.log", FileName(42, LogSuffix))
	base, suf, ok := ParseFileName("00000000000000368769.timeindex")
	require.True(t, ok)
	require.Equal(t, int64(368769), base)
	require.Equal(t, ".timeindex", suf)
	for _, bad := range []string{"42.log", "0000000000000000004x.log", "-0000000000000000001.log", "+0000000000000000042.log", "00000000000000000042", "99999999999999999999.log"} {
		_, _, ok := ParseFileName(bad)
		require.False(t, ok, bad)
	}
}

// An entry in the middle of the index that is in order but wrong passes the
// checks made on load; the lookup that lands on it notices and rebuilds.
func TestWrongMiddleEntryIsNoticedOnLookup(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 300, rand.New(rand.NewPCG(10, 10)))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close(true))

	p := filepath.Join(dir, FileName(0, IndexSuffix))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	mid := (len(b) / 8 / 2) * 8
	b[mid+7]++ // position off by one; still ordered
	require.NoError(t, os.WriteFile(p, b, 0o644))

	s, err = Open(dir, 0, small, false)
	require.NoError(t, err)
	old, err := s.indexes()
	require.NoError(t, err)
	checkLookups(t, s, ws)
	now, err := s.indexes()
	require.NoError(t, err)
	require.NotSame(t, old, now, "rebuilt")
	require.NoError(t, s.Close(true))
	fixed, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NotEqual(t, b, fixed)
}

// Damage to a batch header in a sealed segment makes lookups past it fail
// with a CorruptError naming the file and position.
func TestCorruptHeaderInSealedSegment(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	ws := fill(t, s, 0, 100, rand.New(rand.NewPCG(11, 11)))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close(true))
	require.NoError(t, os.Remove(filepath.Join(dir, FileName(0, IndexSuffix))))
	p := filepath.Join(dir, FileName(0, LogSuffix))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	victim := ws[50].h
	data[victim.Position+16] = 7 // magic
	require.NoError(t, os.WriteFile(p, data, 0o644))

	s, err = Open(dir, 0, small, false)
	require.NoError(t, err)
	_, err = s.Find(ws[80].h.BaseOffset, s.Committed())
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, p, ce.Path)
	require.Equal(t, victim.Position, ce.Position)
	require.Contains(t, err.Error(), p)
	require.NoError(t, s.Close(true))
}

// Batches larger than the verifier's buffer are checksummed in pieces; a
// flipped bit in one is found.
func TestRecoverLargeBatch(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, small)
	require.NoError(t, err)
	_, err = s.Append(batchAt(t, 0, 2, 1000, 10))
	require.NoError(t, err)
	big := batchAt(t, 2, 3, 1000, 1<<20)
	require.Greater(t, big.Size(), verifyBufSize)
	pos, err := s.Append(big)
	require.NoError(t, err)
	_, err = s.Append(batchAt(t, 5, 2, 1000, 10))
	require.NoError(t, err)
	size := s.Size()
	require.NoError(t, s.Close(false))

	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	res, err := s.Recover(0)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Equal(t, 3, res.Batches)
	require.Equal(t, size, res.ValidSize)
	require.NoError(t, s.Close(false))

	p := filepath.Join(dir, FileName(0, LogSuffix))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	data[pos+int64(big.Size())-10] ^= 1
	require.NoError(t, os.WriteFile(p, data, 0o644))
	s, err = Open(dir, 0, small, true)
	require.NoError(t, err)
	res, err = s.Recover(0)
	require.NoError(t, err)
	require.ErrorIs(t, res.Err, record.ErrCorrupt)
	require.Equal(t, pos, res.ValidSize)
	require.True(t, res.DataAfter)
	require.NoError(t, s.Close(false))
}

// A full disk when an index must grow fails the append before anything is
// written: the .log, the indexes and what readers see are as they were,
// and the same batch appends once there is room. A new segment takes a
// first growth step of each index, not its maximum.
func TestFullDiskWhileGrowingIndex(t *testing.T) {
	dir := t.TempDir()
	var sw vfs.Switch
	opts := Options{IndexIntervalBytes: 1, IndexMaxBytes: 1 << 20} // an entry per batch
	opts.FS = vfs.NewFaultFS(vfs.Default, sw.Inject)
	s, err := Create(dir, 0, opts)
	require.NoError(t, err)
	for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
		st, err := os.Stat(filepath.Join(dir, FileName(0, suffix)))
		require.NoError(t, err)
		require.LessOrEqual(t, st.Size(), int64(4<<10), suffix)
		require.Greater(t, st.Size(), int64(0), suffix)
	}
	sw.FailAfter(vfs.OpAllocate, nil, 0, vfs.ErrNoSpace, -1)
	var ws []written
	off, ts := int64(0), int64(1_700_000_000_000)
	for {
		b := batchAt(t, off, 2, ts, 10)
		require.NoError(t, s.Fits(b, 1<<30))
		size := s.Size()
		pos, err := s.Append(b)
		if err != nil {
			require.ErrorIs(t, err, vfs.ErrNoSpace)
			require.Equal(t, size, s.Size())
			st, serr := os.Stat(s.Path())
			require.NoError(t, serr)
			require.Equal(t, size, st.Size(), "nothing was written")
			next, nerr := s.NextOffset()
			require.NoError(t, nerr)
			require.Equal(t, off, next)
			break
		}
		require.Less(t, len(ws), 10_000, "the indexes never needed to grow")
		ws = append(ws, written{h: Header{Position: pos, BaseOffset: off, LastOffset: b.LastOffset(), Size: b.Size(), MaxTimestamp: b.MaxTimestamp()}, b: append([]byte(nil), b.Bytes()...)})
		s.Commit(s.Size())
		off, ts = b.NextOffset(), ts+2
	}
	checkLookups(t, s, ws)
	sw.Reset()
	b := batchAt(t, off, 2, ts, 10)
	pos, err := s.Append(b)
	require.NoError(t, err)
	ws = append(ws, written{h: Header{Position: pos, BaseOffset: off, LastOffset: b.LastOffset(), Size: b.Size(), MaxTimestamp: b.MaxTimestamp()}, b: append([]byte(nil), b.Bytes()...)})
	s.Commit(s.Size())
	checkLookups(t, s, ws)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close(true))
}
