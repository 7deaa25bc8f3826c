package log

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// fastTiny is tiny without an fsync per append.
func fastTiny() Options {
	o := tiny()
	o.Flush = None
	return o
}

// spanBytes reads a span both ways - through its *os.File at its position
// and through ReadAt - checks they agree, and returns the bytes.
func spanBytes(t *testing.T, sp *Span) []byte {
	t.Helper()
	if sp.Len() == 0 {
		require.Nil(t, sp.File())
		return nil
	}
	via := make([]byte, sp.Len())
	n, err := sp.ReadAt(via, 0)
	require.NoError(t, err)
	require.Equal(t, len(via), n)
	f := sp.File()
	require.NotNil(t, f)
	raw := make([]byte, sp.Len())
	_, err = f.ReadAt(raw, sp.Position())
	require.NoError(t, err)
	require.Equal(t, raw, via)
	return via
}

// A span is exactly what Read returns from the same segment: the same
// whole batches, the first one whole whatever maxBytes says.
func TestSpanMatchesRead(t *testing.T) {
	l, err := Open(t.TempDir(), fastTiny())
	require.NoError(t, err)
	defer l.Close()
	rng := rand.New(rand.NewPCG(40, 40))
	end := appendN(t, l, 2000, 7, rng)
	require.Greater(t, l.NumSegments(), 5)
	for i := 0; i < 500; i++ {
		off := rng.Int64N(end)
		maxBytes := rng.IntN(5000)
		sp, err := l.Span(off, maxBytes, l.CommittedOffset())
		require.NoError(t, err)
		got := spanBytes(t, &sp)
		require.NotEmpty(t, got)
		b, _, err := record.ParseBatch(got)
		require.NoError(t, err)
		require.Equal(t, b.BaseOffset(), sp.BaseOffset())
		require.LessOrEqual(t, b.BaseOffset(), off)
		require.GreaterOrEqual(t, b.LastOffset(), off)
		if len(got) > b.Size() {
			require.LessOrEqual(t, len(got), maxBytes, "only the first batch may pass maxBytes")
		}
		// Read may continue into the next segment; the span stops at the
		// end of its own. Up to there they agree.
		want, err := l.Read(off, maxBytes)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(want, got), "offset %d max %d", off, maxBytes)
		for p := got; len(p) > 0; {
			b, n, err := record.ParseBatch(p)
			require.NoError(t, err)
			require.NoError(t, b.Verify())
			p = p[n:]
		}
		sp.Release()
		sp.Release() // twice is harmless
		require.Zero(t, sp.Len())
	}
}

// Walking a log span by span yields every record once, in order.
func TestSpanWalksTheLog(t *testing.T) {
	l, err := Open(t.TempDir(), fastTiny())
	require.NoError(t, err)
	defer l.Close()
	end := appendN(t, l, 1500, 9, rand.New(rand.NewPCG(41, 41)))
	next := int64(0)
	for next < end {
		sp, err := l.Span(next, 1000, end)
		require.NoError(t, err)
		buf := spanBytes(t, &sp)
		sp.Release()
		require.NotEmpty(t, buf)
		for len(buf) > 0 {
			b, n, err := record.ParseBatch(buf)
			require.NoError(t, err)
			recs, err := b.Records()
			require.NoError(t, err)
			for _, r := range recs {
				if r.Offset < next {
					continue
				}
				require.Equal(t, next, r.Offset)
				require.Equal(t, value(r.Offset), r.Value)
				next++
			}
			buf = buf[n:]
		}
	}
}

// A limit below the committed offset cuts the span before the batch that
// reaches it; reading at the limit is empty, past it out of range.
func TestSpanLimit(t *testing.T) {
	l, err := Open(t.TempDir(), fastTiny())
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 10; i++ {
		_, err := l.Append(record.Record{Value: []byte("a")}, record.Record{Value: []byte("b")})
		require.NoError(t, err)
	}
	// Up to 7: batches [0,1] [2,3] [4,5]; [6,7] ends at 7 >= limit.
	sp, err := l.Span(0, 1<<20, 7)
	require.NoError(t, err)
	want, err := l.ReadUpTo(nil, 0, 1<<20, 7)
	require.NoError(t, err)
	require.Equal(t, want, spanBytes(t, &sp))
	sp.Release()

	// The limit inside a batch: nothing whole below it from offset 6.
	sp, err = l.Span(6, 1<<20, 7)
	require.NoError(t, err)
	require.Zero(t, sp.Len())
	require.Equal(t, int64(-1), sp.BaseOffset())

	sp, err = l.Span(7, 1<<20, 7)
	require.NoError(t, err)
	require.Zero(t, sp.Len())
	_, err = l.Span(8, 1<<20, 7)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	_, err = l.Span(21, 1<<20, 100) // limit is capped at the end offset
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	sp, err = l.Span(20, 1<<20, 100)
	require.NoError(t, err)
	require.Zero(t, sp.Len())

	require.NoError(t, l.DeleteRecordsBefore(4))
	_, err = l.Span(3, 1<<20, 20)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
}

// A span keeps its segment's file readable after retention deletes the
// segment; Release lets it go.
func TestSpanOutlivesRetention(t *testing.T) {
	opts := fastTiny()
	opts.RetentionBytes = 8 << 10
	opts.RetentionTime = Unlimited
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	rng := rand.New(rand.NewPCG(42, 42))
	appendN(t, l, 300, 3, rng)
	sp, err := l.Span(0, 1<<20, l.CommittedOffset())
	require.NoError(t, err)
	before := spanBytes(t, &sp)
	appendN(t, l, 1000, 3, rng)
	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Positive(t, n)
	require.Positive(t, l.StartOffset())
	require.Equal(t, before, spanBytes(t, &sp))
	sp.Release()

	_, err = l.Span(0, 100, l.CommittedOffset())
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
}

func TestSpanReadAtBounds(t *testing.T) {
	l, err := Open(t.TempDir(), fastTiny())
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Append(record.Record{Value: []byte("hello")})
	require.NoError(t, err)
	sp, err := l.Span(0, 0, 1)
	require.NoError(t, err)
	defer sp.Release()
	all := spanBytes(t, &sp)
	buf := make([]byte, 10)
	n, err := sp.ReadAt(buf, sp.Len()-4)
	require.Equal(t, 4, n)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, all[len(all)-4:], buf[:4])
	_, err = sp.ReadAt(buf, sp.Len())
	require.ErrorIs(t, err, io.EOF)
	_, err = sp.ReadAt(buf, -1)
	require.Error(t, err)
	require.Equal(t, all, readSection(t, &sp))
}

func readSection(t *testing.T, sp *Span) []byte {
	b, err := io.ReadAll(io.NewSectionReader(sp, 0, sp.Len()))
	require.NoError(t, err)
	return b
}

func TestSpanClosedLog(t *testing.T) {
	l, err := Open(t.TempDir(), fastTiny())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	_, err = l.Span(0, 100, 0)
	require.ErrorIs(t, err, ErrClosed)
}

// Large spans over batches of very different sizes, and over a compacted
// log full of offset gaps: the index search for the span's end finds what
// Read finds.
func TestSpanEndSearch(t *testing.T) {
	for _, compact := range []bool{false, true} {
		opts := Options{SegmentBytes: 2 << 20, IndexIntervalBytes: 512, CheckpointInterval: time.Hour, Flush: None}
		if compact {
			opts.Cleanup = Compact
			opts.MinCleanableDirtyRatio = 0.01
		}
		l, err := Open(t.TempDir(), opts)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(43, 43))
		for l.Size() < 3<<20 {
			recs := make([]record.Record, 1+rng.IntN(60))
			for i := range recs {
				recs[i] = record.Record{Key: []byte(fmt.Sprint(rng.IntN(500))), Value: bytes.Repeat([]byte{'v'}, rng.IntN(2000))}
			}
			_, err := l.Append(recs...)
			require.NoError(t, err)
		}
		if compact {
			_, err := l.Clean(true)
			require.NoError(t, err)
		}
		end := l.CommittedOffset()
		for i := 0; i < 200; i++ {
			off := rng.Int64N(end)
			maxBytes := rng.IntN(1 << 20)
			if i%10 == 0 {
				maxBytes = rng.IntN(300)
			}
			limit := end
			if i%7 == 0 {
				limit = off + rng.Int64N(end-off) + 1
			}
			sp, err := l.Span(off, maxBytes, limit)
			require.NoError(t, err)
			got := spanBytes(t, &sp)
			sp.Release()
			want, err := l.ReadUpTo(nil, off, maxBytes, limit)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(want, got), "compact %v offset %d max %d limit %d", compact, off, maxBytes, limit)
			if len(got) == 0 {
				continue
			}
			// The span stops only at maxBytes, limit or its segment's end.
			bs := batchesIn(t, got)
			if len(want) > len(got) {
				next, _, err := record.ParseBatch(want[len(got):])
				require.NoError(t, err)
				if len(got)+next.Size() <= maxBytes {
					// the next batch would fit: it must be in the next segment
					require.NotEqual(t, segmentOf(l, bs[len(bs)-1].BaseOffset()), segmentOf(l, next.BaseOffset()))
				}
			}
		}
		require.NoError(t, l.Close())
	}
}

func batchesIn(t *testing.T, buf []byte) []record.Batch {
	var out []record.Batch
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		out = append(out, b)
		buf = buf[n:]
	}
	return out
}

func segmentOf(l *Log, offset int64) int64 {
	var base int64 = -1
	for _, s := range l.segments() {
		if s.Base() <= offset {
			base = s.Base()
		}
	}
	return base
}
