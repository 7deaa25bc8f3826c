package log

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// modelRecord is what the model of a compacted log remembers of an append.
type modelRecord struct {
	off   int64
	key   []byte // nil: no key
	value []byte // nil: a tombstone (when key != nil)
	ts    int64
}

type compactModel struct {
	recs      []modelRecord
	lastClean int64 // the clock at the last Clean, Unix ms
}

func compactOptions(clock *time.Time) Options {
	return Options{
		SegmentBytes:       2048,
		IndexIntervalBytes: 128,
		IndexMaxBytes:      1024,
		Cleanup:            Compact,
		DeleteRetention:    time.Hour,
		CleanerBufferBytes: 1024, // 32 slots: multi-pass cleaning with 40 keys
		CheckpointInterval: time.Hour,
		now:                func() time.Time { return *clock },
	}
}

// check compares the log with the model: every record present is one that
// was appended, unchanged, at its offset; keyless records and each key's
// latest record are all present (a tombstone may go once DeleteRetention
// has passed); below the cleaner offset nothing superseded remains.
func (m *compactModel) check(t *testing.T, l *Log, retention time.Duration) {
	t.Helper()
	got := readAllBy(t, l, l.StartOffset(), func() int { return 1 << 20 })
	byOff := map[int64]modelRecord{}
	latest := map[string]int64{}
	for _, r := range m.recs {
		byOff[r.off] = r
		if r.key != nil {
			latest[string(r.key)] = r.off
		}
	}
	present := map[int64]bool{}
	var prev int64 = -1
	for _, r := range got {
		require.Greater(t, r.Offset, prev, "offsets increase")
		prev = r.Offset
		want, ok := byOff[r.Offset]
		require.True(t, ok, "offset %d was never appended", r.Offset)
		require.Equal(t, want.key, r.Key, "offset %d key", r.Offset)
		require.Equal(t, want.value, r.Value, "offset %d value", r.Offset)
		require.Equal(t, want.ts, r.Timestamp.UnixMilli(), "offset %d timestamp", r.Offset)
		present[r.Offset] = true
	}
	cleanerOffset := l.CleanerOffset()
	for _, r := range m.recs {
		switch {
		case r.key == nil:
			require.True(t, present[r.off], "keyless record at %d lost", r.off)
		case latest[string(r.key)] == r.off:
			if !present[r.off] {
				require.Nil(t, r.value, "the latest value of %q (offset %d) lost", r.key, r.off)
				require.Less(t, r.ts, m.lastClean-retention.Milliseconds(), "tombstone at %d removed before DeleteRetention", r.off)
			}
		case present[r.off] && r.off < cleanerOffset:
			// Superseded and in the clean part: must be superseded only
			// by a record at or past the cleaner offset.
			require.GreaterOrEqual(t, latestBelow(m.recs, r.key, cleanerOffset), r.off,
				"superseded record %d of %q survived cleaning to %d", r.off, r.key, cleanerOffset)
			require.Equal(t, r.off, latestBelow(m.recs, r.key, cleanerOffset),
				"superseded record %d of %q survived cleaning to %d", r.off, r.key, cleanerOffset)
		}
	}
}

// latestBelow is key's latest offset below limit.
func latestBelow(recs []modelRecord, key []byte, limit int64) int64 {
	best := int64(-1)
	for _, r := range recs {
		if r.off < limit && string(r.key) == string(key) {
			best = r.off
		}
	}
	return best
}

// appendRandom appends a batch of 1..5 records over 40 keys, some keyless,
// some tombstones.
func (m *compactModel) appendRandom(t *testing.T, l *Log, rng *rand.Rand, now time.Time) {
	t.Helper()
	n := 1 + rng.IntN(5)
	recs := make([]record.Record, n)
	for i := range recs {
		r := record.Record{Timestamp: now}
		switch x := rng.IntN(20); {
		case x == 0:
			r.Value = []byte(fmt.Sprintf("keyless-%d", rng.IntN(1000)))
		case x == 1:
			r.Key = []byte(fmt.Sprintf("key-%02d", rng.IntN(40)))
		default:
			r.Key = []byte(fmt.Sprintf("key-%02d", rng.IntN(40)))
			r.Value = []byte(fmt.Sprintf("value-%d-%s", rng.IntN(1e6), strings.Repeat("v", rng.IntN(60))))
		}
		recs[i] = r
	}
	off, err := l.Append(recs...)
	require.NoError(t, err)
	for i, r := range recs {
		m.recs = append(m.recs, modelRecord{off: off + int64(i), key: r.Key, value: r.Value, ts: now.UnixMilli()})
	}
}

// A randomized model test: after any sequence of writes, tombstones,
// rolls, cleanings and reopens, the log holds exactly the latest value per
// key (tombstones until DeleteRetention), every keyless record, all with
// their original offsets and timestamps.
func TestCompactionModel(t *testing.T) {
	for seed := uint64(0); seed < 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			dir := t.TempDir()
			clock := time.UnixMilli(1_700_000_000_000)
			opts := compactOptions(&clock)
			l, err := Open(dir, opts)
			require.NoError(t, err)
			m := &compactModel{}
			for step := 0; step < 400; step++ {
				clock = clock.Add(time.Duration(rng.IntN(120)) * time.Second)
				switch x := rng.IntN(100); {
				case x < 85:
					m.appendRandom(t, l, rng, clock)
				case x < 88:
					require.NoError(t, l.Roll())
				case x < 97:
					st, err := l.Clean(rng.IntN(2) == 0)
					require.NoError(t, err)
					if st.Cleaned {
						m.lastClean = clock.UnixMilli()
						require.LessOrEqual(t, st.MapBytes, int64(opts.CleanerBufferBytes))
					}
					m.check(t, l, opts.DeleteRetention)
				case x < 99:
					require.NoError(t, l.Close())
					l, err = Open(dir, opts)
					require.NoError(t, err)
				default:
					l.abandon()
					l, err = Open(dir, opts)
					require.NoError(t, err)
				}
			}
			// Clean until nothing is dirty, then everything below the
			// active segment is compacted.
			require.NoError(t, l.Roll())
			for i := 0; i < 50; i++ {
				st, err := l.Clean(true)
				require.NoError(t, err)
				m.lastClean = clock.UnixMilli()
				if !st.Cleaned || st.CleanedTo >= l.segments()[len(l.segments())-1].Base() {
					break
				}
			}
			m.check(t, l, opts.DeleteRetention)
			require.Equal(t, l.segments()[len(l.segments())-1].Base(), l.CleanerOffset())
			require.NoError(t, l.Close())
		})
	}
}

func TestTombstonesLastDeleteRetention(t *testing.T) {
	clock := time.UnixMilli(1_700_000_000_000)
	opts := compactOptions(&clock)
	opts.CleanerBufferBytes = 1 << 20
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Append(record.Record{Key: []byte("k"), Value: []byte("v1"), Timestamp: clock})
	require.NoError(t, err)
	_, err = l.Append(record.Record{Key: []byte("k"), Timestamp: clock}) // tombstone
	require.NoError(t, err)
	_, err = l.Append(record.Record{Key: []byte("other"), Value: []byte("x"), Timestamp: clock})
	require.NoError(t, err)
	require.NoError(t, l.Roll())

	clock = clock.Add(30 * time.Minute)
	_, err = l.Clean(true)
	require.NoError(t, err)
	recs := readAll(t, l, l.StartOffset())
	require.Len(t, recs, 2, "v1 superseded; the tombstone stays")
	require.Equal(t, int64(1), recs[0].Offset)
	require.Nil(t, recs[0].Value)

	clock = clock.Add(31 * time.Minute)
	_, err = l.Append(record.Record{Key: []byte("z"), Value: []byte("z"), Timestamp: clock})
	require.NoError(t, err)
	require.NoError(t, l.Roll())
	_, err = l.Clean(true)
	require.NoError(t, err)
	recs = readAll(t, l, l.StartOffset())
	require.Len(t, recs, 2, "the tombstone is gone after DeleteRetention")
	require.Equal(t, []byte("other"), recs[0].Key)
}

// A log is cleaned only when due: by its dirty ratio or MaxCompactionLag.
func TestCleanWhenDue(t *testing.T) {
	clock := time.UnixMilli(1_700_000_000_000)
	opts := compactOptions(&clock)
	opts.MinCleanableDirtyRatio = 0.9
	opts.MaxCompactionLag = time.Hour
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	m := &compactModel{}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 100; i++ {
		m.appendRandom(t, l, rng, clock)
	}
	require.NoError(t, l.Roll())
	st, err := l.Clean(false)
	require.NoError(t, err)
	require.True(t, st.Cleaned, "everything dirty: ratio 1")
	for i := 0; i < 10; i++ {
		m.appendRandom(t, l, rng, clock)
	}
	require.NoError(t, l.Roll())
	st, err = l.Clean(false)
	require.NoError(t, err)
	require.False(t, st.Cleaned, "dirty ratio %.2f below 0.9", st.DirtyRatio)
	clock = clock.Add(2 * time.Hour)
	st, err = l.Clean(false)
	require.NoError(t, err)
	require.True(t, st.Cleaned, "MaxCompactionLag passed")

	// A delete-only log is never compacted.
	d, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer d.Close()
	st, err = d.Clean(true)
	require.NoError(t, err)
	require.False(t, st.Cleaned)
}

// A crash at each step of swapping cleaned segments in: the reopened log
// holds the old segments or the new ones, never a lost key, and no debris.
func TestCrashDuringSwap(t *testing.T) {
	for step := 0; ; step++ {
		clock := time.UnixMilli(1_700_000_000_000)
		dir := t.TempDir()
		opts := compactOptions(&clock)
		opts.CleanerBufferBytes = 1 << 20
		var mu sync.Mutex
		counting, failed := false, false
		n := 0
		opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, path string, size int) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if op == vfs.OpRename && strings.Contains(path, string(filepath.Separator)+cleaningDir+string(filepath.Separator)) {
				counting = true
			}
			if !counting || failed || (op != vfs.OpRename && op != vfs.OpRemove && op != vfs.OpSyncDir) {
				return size, nil
			}
			if n == step {
				failed = true
				return 0, vfs.ErrIO
			}
			n++
			return size, nil
		})
		l, err := Open(dir, opts)
		require.NoError(t, err)
		m := &compactModel{}
		rng := rand.New(rand.NewPCG(7, uint64(step)))
		for i := 0; i < 30; i++ { // a few segments, each swapped in turn
			m.appendRandom(t, l, rng, clock)
		}
		require.NoError(t, l.Roll())
		_, err = l.Clean(true)
		mu.Lock()
		crashed := failed
		mu.Unlock()
		if !crashed {
			require.NoError(t, err)
			l.abandon()
			t.Logf("the swap has %d steps; each was crashed", step)
			break
		}
		require.Error(t, err, "step %d", step)
		l.abandon() // the process dies here

		healthy := compactOptions(&clock)
		healthy.CleanerBufferBytes = 1 << 20
		l, err = Open(dir, healthy)
		require.NoError(t, err, "step %d", step)
		m.check(t, l, healthy.DeleteRetention)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			require.False(t, strings.HasSuffix(e.Name(), swapSuffix) || e.Name() == cleaningDir, "step %d left %s", step, e.Name())
		}
		// And cleaning works again.
		_, err = l.Clean(true)
		require.NoError(t, err)
		m.lastClean = clock.UnixMilli()
		m.check(t, l, healthy.DeleteRetention)
		require.NoError(t, l.Close())
		if step > 400 {
			t.Fatal("the swap never completed")
		}
	}
}

// Readers keep reading while segments are cleaned and swapped under them.
func TestReadersDuringCompaction(t *testing.T) {
	clock := time.UnixMilli(1_700_000_000_000)
	opts := compactOptions(&clock)
	opts.Flush = None
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	m := &compactModel{}
	rng := rand.New(rand.NewPCG(8, 8))
	var cmu sync.Mutex
	for i := 0; i < 300; i++ {
		m.appendRandom(t, l, rng, clock)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var it record.Iterator
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := l.StartOffset()
				for off < l.CommittedOffset() {
					buf, err := l.Read(off, 1500)
					if err != nil {
						if !errors.Is(err, ErrOffsetOutOfRange) {
							t.Error(err)
						}
						break
					}
					if len(buf) == 0 {
						break
					}
					for len(buf) > 0 {
						b, n, err := record.ParseBatch(buf)
						if err != nil {
							t.Error(err)
							return
						}
						for it.Reset(b); it.Next(); {
						}
						if it.Err() != nil {
							t.Error(it.Err())
							return
						}
						off = b.NextOffset()
						buf = buf[n:]
					}
				}
			}
		}()
	}
	for i := 0; i < 30; i++ {
		cmu.Lock()
		for j := 0; j < 20; j++ {
			m.appendRandom(t, l, rng, clock)
		}
		cmu.Unlock()
		_, err := l.Clean(true)
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	m.lastClean = clock.UnixMilli()
	m.check(t, l, opts.DeleteRetention)
}
