package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// tiny makes logs that roll and index often.
func tiny() Options {
	return Options{SegmentBytes: 4096, IndexIntervalBytes: 128, IndexMaxBytes: 1024, CheckpointInterval: time.Hour}
}

func value(off int64) []byte {
	return []byte(fmt.Sprintf("value-%06d-%s", off, bytes.Repeat([]byte{'x'}, int(off%50))))
}

// appendN appends n records in batches of 1..maxBatch and returns the next
// offset.
func appendN(t testing.TB, l *Log, n int, maxBatch int, rng *rand.Rand) int64 {
	t.Helper()
	for n > 0 {
		k := min(n, 1+rng.IntN(maxBatch))
		next := l.EndOffset()
		recs := make([]record.Record, k)
		for i := range recs {
			recs[i] = record.Record{Key: []byte(fmt.Sprint(next + int64(i))), Value: value(next + int64(i)),
				Timestamp: time.UnixMilli(1_700_000_000_000 + next + int64(i))}
		}
		off, err := l.Append(recs...)
		require.NoError(t, err)
		require.Equal(t, next, off)
		n -= k
	}
	return l.EndOffset()
}

// readAll reads every committed record from offset, in reads of random
// sizes.
func readAll(t testing.TB, l *Log, from int64) []record.Record {
	return readAllBy(t, l, from, func() int { return 1 + rand.IntN(3000) })
}

func readAllBy(t testing.TB, l *Log, from int64, maxBytes func() int) []record.Record {
	t.Helper()
	var out []record.Record
	off := from
	for off < l.CommittedOffset() {
		buf, err := l.Read(off, maxBytes())
		require.NoError(t, err)
		require.NotEmpty(t, buf, "offset %d", off)
		for len(buf) > 0 {
			b, n, err := record.ParseBatch(buf)
			require.NoError(t, err)
			recs, err := b.Records()
			require.NoError(t, err)
			for _, r := range recs {
				if r.Offset >= off {
					out = append(out, r)
					off = r.Offset + 1
				}
			}
			// Compaction leaves batches whose last records are gone.
			off = max(off, b.NextOffset())
			buf = buf[n:]
		}
	}
	return out
}

func checkRecords(t testing.TB, recs []record.Record, from, to int64) {
	t.Helper()
	require.Len(t, recs, int(to-from))
	for i, r := range recs {
		require.Equal(t, from+int64(i), r.Offset)
		require.Equal(t, value(r.Offset), r.Value, "offset %d", r.Offset)
		require.Equal(t, int64(1_700_000_000_000)+r.Offset, r.Timestamp.UnixMilli())
	}
}

func TestAppendReadRollReopen(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None, Interval(5 * time.Millisecond)} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := tiny()
			opts.Flush = policy
			l, err := Open(dir, opts)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, 1))
			end := appendN(t, l, 2000, 20, rng)
			require.Greater(t, l.NumSegments(), 10)
			checkRecords(t, readAll(t, l, 0), 0, end)
			checkRecords(t, readAll(t, l, 777), 777, end)
			require.NoError(t, l.Close())
			require.ErrorIs(t, l.Close(), ErrClosed)
			_, err = l.Append(record.Record{Value: []byte("late")})
			require.ErrorIs(t, err, ErrClosed)

			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.True(t, info.Clean)
			require.Zero(t, info.BytesChecked)
			require.Equal(t, end, l.EndOffset())
			checkRecords(t, readAll(t, l, 0), 0, end)
			end = appendN(t, l, 500, 20, rng)
			checkRecords(t, readAll(t, l, 1990), 1990, end)
			require.NoError(t, l.Close())
		})
	}
}

func TestLockExcludesSecondOpen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	_, err = Open(dir, tiny())
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	l, err = Open(dir, tiny())
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestReadBounds(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 100, 10, rand.New(rand.NewPCG(2, 2)))
	_, err = l.Read(101, 100)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	_, err = l.Read(-1, 100)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	buf, err := l.Read(100, 100)
	require.NoError(t, err)
	require.Empty(t, buf)
	// The first batch comes whole even when larger than maxBytes.
	buf, err = l.Read(50, 1)
	require.NoError(t, err)
	b, n, err := record.ParseBatch(buf)
	require.NoError(t, err)
	require.Equal(t, len(buf), n)
	require.LessOrEqual(t, b.BaseOffset(), int64(50))
	require.GreaterOrEqual(t, b.LastOffset(), int64(50))
}

func TestReaderWaitsForData(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	r := l.NewReader(0)
	got := make(chan int64, 100)
	errc := make(chan error, 1)
	go func() {
		for {
			b, err := r.Next(context.Background())
			if err != nil {
				errc <- err
				return
			}
			for off := b.BaseOffset(); off <= b.LastOffset(); off++ {
				got <- off
			}
		}
	}()
	select {
	case off := <-got:
		t.Fatalf("read offset %d from an empty log", off)
	case <-time.After(50 * time.Millisecond):
	}
	for i := 0; i < 30; i++ {
		_, err := l.Append(record.Record{Value: []byte{byte(i)}})
		require.NoError(t, err)
		require.Equal(t, int64(i), <-got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r2 := l.NewReader(30)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = r2.Next(ctx)
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, l.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not wake on Close")
	}
}

func TestOffsetForTime(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	// Timestamps that go up and down within batches and across segments.
	rng := rand.New(rand.NewPCG(3, 3))
	var ts []int64
	for i := 0; i < 400; {
		k := 1 + rng.IntN(8)
		recs := make([]record.Record, k)
		for j := range recs {
			t0 := int64(1_000_000 + i*10 + rng.IntN(40) - 20)
			ts = append(ts, t0)
			recs[j] = record.Record{Timestamp: time.UnixMilli(t0), Value: []byte("v")}
			i++
		}
		_, err := l.Append(recs...)
		require.NoError(t, err)
	}
	for target := int64(999_950); target < 1_004_050; target += 7 {
		want, wantOK := int64(0), false
		for off, t0 := range ts {
			if t0 >= target {
				want, wantOK = int64(off), true
				break
			}
		}
		got, ok, err := l.OffsetForTime(time.UnixMilli(target))
		require.NoError(t, err)
		require.Equal(t, wantOK, ok, "ts %d", target)
		require.Equal(t, want, got, "ts %d", target)
	}
}

func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(4, 4))
	appendN(t, l, 1000, 1, rng) // one record per batch: truncation is exact
	segsBefore := l.NumSegments()
	end, err := l.Truncate(600)
	require.NoError(t, err)
	require.Equal(t, int64(600), end)
	require.Less(t, l.NumSegments(), segsBefore)
	checkRecords(t, readAll(t, l, 0), 0, 600)
	appendN(t, l, 100, 5, rng)
	checkRecords(t, readAll(t, l, 0), 0, 700)

	// Into a sealed segment, and all the way down.
	end, err = l.Truncate(10)
	require.NoError(t, err)
	require.Equal(t, int64(10), end)
	checkRecords(t, readAll(t, l, 0), 0, 10)
	end, err = l.Truncate(0)
	require.NoError(t, err)
	require.Equal(t, int64(0), end)
	require.Equal(t, 1, l.NumSegments())
	appendN(t, l, 50, 5, rng)
	require.NoError(t, l.Close())

	// And it all survives a reopen.
	l, err = Open(dir, tiny())
	require.NoError(t, err)
	checkRecords(t, readAll(t, l, 0), 0, 50)
	require.NoError(t, l.Close())
}

func TestDeleteRecordsBefore(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	appendN(t, l, 1000, 10, rand.New(rand.NewPCG(5, 5)))
	n := l.NumSegments()
	require.NoError(t, l.DeleteRecordsBefore(500))
	require.Equal(t, int64(500), l.StartOffset())
	require.Less(t, l.NumSegments(), n)
	_, err = l.Read(499, 100)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	checkRecords(t, readAll(t, l, 500), 500, 1000)
	require.ErrorIs(t, l.DeleteRecordsBefore(2000), ErrOffsetOutOfRange)
	require.NoError(t, l.DeleteRecordsBefore(100)) // backwards: no-op
	require.Equal(t, int64(500), l.StartOffset())
	require.NoError(t, l.Close())

	// The start offset is checkpointed, even after an unclean stop.
	require.NoError(t, os.Remove(filepath.Join(dir, CheckpointFile)))
	l, err = Open(dir, tiny())
	require.NoError(t, err)
	require.LessOrEqual(t, l.StartOffset(), int64(500))
	require.NoError(t, l.DeleteRecordsBefore(500))
	require.NoError(t, l.Close())
	l, err = Open(dir, tiny())
	require.NoError(t, err)
	require.Equal(t, int64(500), l.StartOffset())
	require.NoError(t, l.Close())
}

func TestRetention(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000 + 10_000)
	opts := tiny()
	opts.now = func() time.Time { return now }
	opts.RetentionTime = 5 * time.Second
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	end := appendN(t, l, 1000, 10, rand.New(rand.NewPCG(6, 6)))
	// Records are stamped 1_700_000_000_000 + offset: those older than
	// now-5s are offsets below 5000 - all of them; only the active segment
	// survives, as it is never deleted.
	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Greater(t, n, 0)
	require.Equal(t, 1, l.NumSegments())
	require.Greater(t, l.StartOffset(), int64(0))
	checkRecords(t, readAll(t, l, l.StartOffset()), l.StartOffset(), end)

	// By size.
	l2, err := Open(t.TempDir(), Options{SegmentBytes: 4096, RetentionBytes: 20_000, RetentionTime: Unlimited})
	require.NoError(t, err)
	defer l2.Close()
	appendN(t, l2, 3000, 10, rand.New(rand.NewPCG(7, 7)))
	before := l2.Size()
	_, err = l2.ApplyRetention()
	require.NoError(t, err)
	require.Less(t, l2.Size(), before)
	require.GreaterOrEqual(t, l2.Size(), int64(20_000)-4096)
	require.LessOrEqual(t, l2.Size(), int64(20_000)+4096)
}

// TestAppendSmallAndLargeBatches mixes batches that Append encodes into the
// log's own buffer (small, uncompressed) with batches it encodes into a
// pooled one (large, or with headers past the estimate), under each flush
// policy: every record reads back as appended, so no append's bytes were
// overwritten by the next one's encoding, and both paths refuse a batch over
// MaxMessageBytes having written nothing.
func TestAppendSmallAndLargeBatches(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None} {
		t.Run(policy.String(), func(t *testing.T) {
			l, err := Open(t.TempDir(), Options{Flush: policy, MaxMessageBytes: 2000})
			require.NoError(t, err)
			defer l.Close()
			var want []record.Record
			add := func(recs ...record.Record) {
				t.Helper()
				off, err := l.Append(recs...)
				require.NoError(t, err)
				require.Equal(t, int64(len(want)), off)
				want = append(want, recs...)
			}
			rec := func(k, size int) record.Record {
				return record.Record{Key: []byte(fmt.Sprint("key-", k)), Value: bytes.Repeat([]byte{byte('a' + k%26)}, size)}
			}
			add(rec(0, 100))
			add(rec(1, 10), rec(2, 20))
			add(rec(3, 700), rec(4, 700), rec(5, 10)) // keys and values past half of smallBatch
			add(rec(6, 100))
			big := rec(7, 10)
			big.Headers = []record.Header{{Key: "h", Value: make([]byte, 1300)}} // small by the estimate
			add(big)
			add(rec(8, 100))

			for _, recs := range [][]record.Record{
				{rec(9, 1990)},                 // one small-path record over MaxMessageBytes
				{rec(10, 1100), rec(11, 1100)}, // a large-path batch over it
			} {
				_, err := l.Append(recs...)
				require.ErrorIs(t, err, record.ErrRecordTooLarge)
				require.Equal(t, int64(len(want)), l.EndOffset(), "nothing written")
			}
			add(rec(12, 100))

			got := readAll(t, l, 0)
			require.Len(t, got, len(want))
			for i, r := range got {
				require.Equal(t, int64(i), r.Offset)
				require.Equal(t, want[i].Key, r.Key, "offset %d", i)
				require.Equal(t, want[i].Value, r.Value, "offset %d", i)
				require.Equal(t, len(want[i].Headers), len(r.Headers), "offset %d", i)
			}
		})
	}
}

// TestAppendStampsRecordsWithoutTimestamp: records without a timestamp get
// the clock's time and those with one keep theirs, and a small append whose
// records all carry a timestamp does not read the clock at all.
func TestAppendStampsRecordsWithoutTimestamp(t *testing.T) {
	opts := tiny()
	opts.Flush = None
	opts.RetentionCheckInterval = time.Hour // no background job reads the clock meanwhile
	var reads atomic.Int32
	now := time.UnixMilli(1_800_000_000_000)
	opts.now = func() time.Time { reads.Add(1); return now }
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	reads.Store(0)
	own := time.UnixMilli(1_700_000_000_000)

	_, err = l.Append(record.Record{Value: []byte("a"), Timestamp: own}, record.Record{Value: []byte("b"), Timestamp: own.Add(time.Second)})
	require.NoError(t, err)
	require.Zero(t, reads.Load(), "every record has a timestamp")
	_, err = l.Append(record.Record{Value: []byte("c"), Timestamp: own}, record.Record{Value: []byte("d")})
	require.NoError(t, err)
	require.Equal(t, int32(1), reads.Load())
	_, err = l.Append(record.Record{Value: []byte("e")})
	require.NoError(t, err)

	got := readAll(t, l, 0)
	require.Len(t, got, 5)
	for i, want := range []time.Time{own, own.Add(time.Second), own, now, now} {
		require.Equal(t, want.UnixMilli(), got[i].Timestamp.UnixMilli(), "offset %d", i)
	}
}

func TestAppendBatchRejectsMalformed(t *testing.T) {
	dir := t.TempDir()
	opts := tiny()
	opts.MaxMessageBytes = 2000
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	good := func() []byte {
		b, err := record.NewBatch([]record.Record{{Value: []byte("a")}, {Value: []byte("b")}}, record.BatchOptions{})
		require.NoError(t, err)
		return append([]byte(nil), b.Bytes()...)
	}
	restamp := func(raw []byte) {
		b, _, _ := record.ParseBatch(raw)
		c := b.ComputeCRC()
		raw[17], raw[18], raw[19], raw[20] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	}
	cases := map[string]func([]byte) []byte{
		"bad crc":   func(r []byte) []byte { r[len(r)-1] ^= 1; return r },
		"bad magic": func(r []byte) []byte { r[16] = 1; return r },
		"count mismatch": func(r []byte) []byte {
			r[60] = 3
			restamp(r)
			return r
		},
		"delta mismatch": func(r []byte) []byte {
			r[26] = 5
			restamp(r)
			return r
		},
		"record length": func(r []byte) []byte {
			r[61] = 0x7e // first record's length varint: 63, far past the batch
			restamp(r)
			return r
		},
		"record offset delta": func(r []byte) []byte {
			// The second record claims delta 0 again (count and last
			// delta agree, so only the record walk sees it).
			i := 61 + 1 + int(r[61]>>1) // start of record 2
			r[i+3] = 0                  // its offset delta varint (length, attrs, ts delta first)
			restamp(r)
			return r
		},
		"too large": func(r []byte) []byte {
			b, err := record.NewBatch([]record.Record{{Value: make([]byte, 3000)}}, record.BatchOptions{})
			require.NoError(t, err)
			return b.Bytes()
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			raw := edit(good())
			b, _, err := record.ParseBatch(raw)
			if err == nil {
				_, err = l.AppendBatch(b)
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, record.ErrRecordTooLarge), "%v", err)
			require.Equal(t, int64(0), l.EndOffset(), "nothing written")
		})
	}
	_, err = l.AppendBatch(record.Batch{})
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = l.Append()
	require.Error(t, err)

	off, err := l.AppendBatch(mustParse(t, good()))
	require.NoError(t, err)
	require.Equal(t, int64(0), off)
	require.Equal(t, int64(2), l.EndOffset())
}

func mustParse(t testing.TB, raw []byte) record.Batch {
	b, _, err := record.ParseBatch(raw)
	require.NoError(t, err)
	return b
}

func TestOffsetOverflow(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	// Jump the end offset near the top, as a follower truncated to a huge
	// offset would: an empty log truncated "up" keeps its end, so build it.
	l.mu.Lock()
	l.next.Store(1<<63 - 3)
	l.mu.Unlock()
	_, err = l.Append(record.Record{}, record.Record{}, record.Record{}, record.Record{})
	require.ErrorIs(t, err, ErrOffsetOverflow)
}

func TestConcurrentAppendersAndReaders(t *testing.T) {
	for _, policy := range []FlushPolicy{Sync, None} {
		t.Run(policy.String(), func(t *testing.T) {
			opts := tiny()
			opts.Flush = policy
			l, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			const writers, perWriter = 4, 300
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var readers sync.WaitGroup
			for r := 0; r < 3; r++ {
				readers.Add(1)
				go func() {
					defer readers.Done()
					rd := l.NewReader(0)
					var next int64
					for next < writers*perWriter {
						b, err := rd.Next(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if b.BaseOffset() != next {
							t.Errorf("batch at %d, expected %d", b.BaseOffset(), next)
							return
						}
						if err := b.Verify(); err != nil {
							t.Error(err)
							return
						}
						if b.NextOffset() > l.CommittedOffset() {
							t.Errorf("read %d beyond committed %d", b.NextOffset(), l.CommittedOffset())
						}
						next = b.NextOffset()
					}
				}()
			}
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perWriter; i++ {
						if _, err := l.Append(record.Record{Value: []byte(fmt.Sprintf("w%d-%d", w, i))}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			readers.Wait()
			require.Equal(t, int64(writers*perWriter), l.EndOffset())
			require.NoError(t, l.Close())
		})
	}
}

func TestCorruptionIsReportedNotReturned(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, tiny())
	require.NoError(t, err)
	appendN(t, l, 500, 5, rand.New(rand.NewPCG(8, 8)))
	require.NoError(t, l.Close())

	// Flip a bit inside a record of the first (sealed) segment.
	p := filepath.Join(dir, segment.FileName(0, segment.LogSuffix))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	data[300] ^= 0x04
	require.NoError(t, os.WriteFile(p, data, 0o644))

	l, err = Open(dir, tiny())
	require.NoError(t, err) // sealed before the recovery point: not scanned
	defer l.Close()
	var ce *segment.CorruptError
	found := false
	for off := int64(0); off < 30; off++ {
		buf, err := l.Read(off, 200)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorAs(t, err, &ce)
			require.Equal(t, p, ce.Path)
			require.LessOrEqual(t, ce.Position, int64(300))
			require.Contains(t, err.Error(), p)
			require.Empty(t, buf)
			found = true
		}
	}
	require.True(t, found, "the damaged batch was never reported")
}

func TestReadUpTo(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 10; i++ {
		_, err := l.Append(record.Record{Value: []byte("a")}, record.Record{Value: []byte("b")})
		require.NoError(t, err)
	}
	// Up to 7: batches [0,1] [2,3] [4,5]; [6,7] ends at 7 >= limit.
	buf, err := l.ReadUpTo(nil, 0, 1<<20, 7)
	require.NoError(t, err)
	var last int64 = -1
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		last = b.LastOffset()
		buf = buf[n:]
	}
	require.Equal(t, int64(5), last)
	_, err = l.ReadUpTo(nil, 8, 1<<20, 7)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
}

func TestReaderAfterTruncate(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 100, 1, rand.New(rand.NewPCG(20, 20)))
	r := l.NewReader(90)
	b, err := r.Next(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(90), b.BaseOffset())
	require.Equal(t, int64(91), r.Offset())
	_, err = l.Truncate(50)
	require.NoError(t, err)
	_, err = r.Next(context.Background())
	require.ErrorIs(t, err, ErrOffsetOutOfRange)

	r = l.NewReader(40)
	b, err = r.Next(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(40), b.BaseOffset())
}

func TestParseFlushPolicy(t *testing.T) {
	for _, s := range []string{"sync", "none", "interval:250ms"} {
		p, err := ParseFlushPolicy(s)
		require.NoError(t, err)
		require.Equal(t, s, p.String())
	}
	for _, s := range []string{"sometimes", "interval:", "interval:-1s", "interval:x"} {
		_, err := ParseFlushPolicy(s)
		require.Error(t, err, s)
	}
}

func TestOptionsValidated(t *testing.T) {
	for name, o := range map[string]Options{
		"segment too small": {SegmentBytes: 10},
		"segment too large": {SegmentBytes: 1 << 32},
		"index too small":   {IndexMaxBytes: 8},
		"bad interval":      {Flush: Interval(0)},
		"message too small": {MaxMessageBytes: 10},
		"bad codec":         {Compression: 9},
	} {
		_, err := Open(t.TempDir(), o)
		require.Error(t, err, name)
	}
}

// Readers keep reading while retention deletes segments under them and
// while appends roll new ones.
func TestReadersDuringRetention(t *testing.T) {
	opts := tiny()
	opts.RetentionBytes = 16 << 10
	opts.RetentionTime = Unlimited
	opts.Flush = None
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := l.StartOffset()
				buf, err := l.Read(start, 4096)
				if err != nil {
					if errors.Is(err, ErrOffsetOutOfRange) {
						continue // retention moved the start past us
					}
					t.Error(err)
					return
				}
				for len(buf) > 0 {
					b, n, err := record.ParseBatch(buf)
					if err != nil || b.Verify() != nil {
						t.Errorf("bad batch: %v", err)
						return
					}
					buf = buf[n:]
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(21, 21))
	for i := 0; i < 50; i++ {
		appendN(t, l, 100, 5, rng)
		_, err := l.ApplyRetention()
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	require.LessOrEqual(t, l.Size(), int64(16<<10)+8192)
}

// Sync, retention and Close may race; none may deadlock or fail.
func TestCloseRacesBackgroundWork(t *testing.T) {
	for i := 0; i < 20; i++ {
		l, err := Open(t.TempDir(), tiny())
		require.NoError(t, err)
		appendN(t, l, 200, 5, rand.New(rand.NewPCG(30, uint64(i))))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = l.Sync() }()
		go func() { defer wg.Done(); _, _ = l.ApplyRetention() }()
		require.NoError(t, l.Close())
		wg.Wait()
	}
}

func TestLeaderEpochStampedAndTrustedAppend(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Append(record.Record{Value: []byte("a")})
	require.NoError(t, err)
	l.SetLeaderEpoch(7)
	b, err := record.NewBatch([]record.Record{{Value: []byte("b")}}, record.BatchOptions{})
	require.NoError(t, err)
	off, err := l.AppendTrusted(b)
	require.NoError(t, err)
	require.Equal(t, int64(1), off)

	buf, err := l.Read(0, 1<<20)
	require.NoError(t, err)
	first := mustParse(t, buf)
	require.Equal(t, int32(-1), first.PartitionLeaderEpoch())
	second := mustParse(t, buf[first.Size():])
	require.Equal(t, int32(7), second.PartitionLeaderEpoch())
	require.NoError(t, second.Verify(), "the epoch is outside the CRC")

	// A trusted append still refuses a header that does not check out.
	raw := append([]byte(nil), b.Bytes()...)
	raw[60] = 20 // 20 records in a batch whose offsets span one

	bad, _, err := record.ParseBatch(raw)
	require.NoError(t, err)
	_, err = l.AppendTrusted(bad)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = l.AppendTrusted(record.Batch{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, int64(2), l.EndOffset())
}

func TestRollIfOld(t *testing.T) {
	now := time.Now()
	opts := tiny()
	opts.SegmentAge = time.Hour
	opts.now = func() time.Time { return now }
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	rolled, err := l.RollIfOld()
	require.NoError(t, err)
	require.False(t, rolled, "empty segment")
	_, err = l.Append(record.Record{Value: []byte("x"), Timestamp: now})
	require.NoError(t, err)
	rolled, err = l.RollIfOld()
	require.NoError(t, err)
	require.False(t, rolled)
	now = now.Add(2 * time.Hour)
	rolled, err = l.RollIfOld()
	require.NoError(t, err)
	require.True(t, rolled)
	require.Equal(t, 2, l.NumSegments())
}

// A log opened with DirLocked takes no lock of its own - no .lock file, no
// descriptor on one - since its caller's lock keeps other processes out;
// one opened alone still locks (TestLockExcludesSecondOpen).
func TestDirLockedTakesNoLock(t *testing.T) {
	dir := t.TempDir()
	opts := tiny()
	opts.DirLocked = true
	l, err := Open(dir, opts)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, lockFile))
	require.ErrorIs(t, err, os.ErrNotExist, "no lock file")
	_, err = l.Append(record.Record{Value: []byte("v")})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	l, err = Open(dir, tiny())
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, lockFile))
	require.NoError(t, err, "a log opened alone locks")
	_, err = Open(dir, tiny())
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
}
