package log

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// damageAt flips a bit in the last byte of the batch holding offset, in
// place, while the log has the file open: it sees the change through the
// page cache, as it would see bit rot or a stray write.
func damageAt(t *testing.T, dir string, offset int64) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+segment.LogSuffix))
	require.NoError(t, err)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for pos := 0; pos < len(data); {
			b, n, err := record.ParseBatch(data[pos:])
			require.NoError(t, err)
			if b.BaseOffset() <= offset && offset <= b.LastOffset() {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte{data[pos+n-1] ^ 0x01}, int64(pos+n-1))
				require.NoError(t, err)
				require.NoError(t, f.Close())
				return
			}
			pos += n
		}
	}
	t.Fatalf("no batch holds offset %d", offset)
}

// appendFives appends n batches of five records: offsets 5i..5i+4.
func appendFives(t *testing.T, l *Log, n int) {
	t.Helper()
	for range n {
		recs := make([]record.Record, 5)
		for i := range recs {
			recs[i] = record.Record{Value: value(l.EndOffset() + int64(i))}
		}
		_, err := l.Append(recs...)
		require.NoError(t, err)
	}
}

// A span is checked before it is sent: one that reaches a damaged batch
// is cut to the batches before it; one that begins with it is an error
// naming the file and position, and holds nothing. The damage is counted
// once, reported by Damage, and forgotten once truncated away.
func TestSpanVerify(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Flush: None})
	require.NoError(t, err)
	defer l.Close()
	appendFives(t, l, 10) // one segment, offsets 0..49
	damageAt(t, dir, 32)  // the batch 30..34

	sp, err := l.Span(10, 1<<20, l.CommittedOffset())
	require.NoError(t, err)
	full := sp.Len()
	err = sp.Verify()
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *segment.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, filepath.Join(dir, segment.FileName(0, segment.LogSuffix)), ce.Path)
	require.Less(t, sp.Len(), full)
	buf := spanBytes(t, &sp)
	var next int64 = 10
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		require.Equal(t, next, b.BaseOffset())
		next = b.NextOffset()
		buf = buf[n:]
	}
	require.EqualValues(t, 30, next, "the batches before the damaged one, all of them")
	sp.Release()

	for _, at := range []int64{30, 34} {
		sp, err = l.Span(at, 1<<20, l.CommittedOffset())
		require.NoError(t, err)
		err = sp.Verify()
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, "offset 30")
		require.Zero(t, sp.Len())
		require.Nil(t, sp.File(), "released")
		sp.Release()
	}
	sp, err = l.Span(35, 1<<20, l.CommittedOffset())
	require.NoError(t, err)
	require.NoError(t, sp.Verify(), "past the damage")
	sp.Release()

	require.EqualValues(t, 1, l.Stats().CorruptBatches, "found four times, counted once")
	off, ok := l.Damage()
	require.True(t, ok)
	require.EqualValues(t, 30, off)

	// Read agrees: the batches before, then the error.
	out, err := l.Read(20, 1<<20)
	require.NoError(t, err)
	require.Len(t, batchesIn(t, out), 2) // each was verified by Read
	_, err = l.Read(31, 1<<20)
	require.ErrorIs(t, err, ErrCorrupt)
	require.EqualValues(t, 1, l.Stats().CorruptBatches)

	// Cutting the log there removes the damage; what is written there next
	// is new.
	end, err := l.Truncate(off)
	require.NoError(t, err)
	require.EqualValues(t, 30, end)
	_, ok = l.Damage()
	require.False(t, ok)
	appendFives(t, l, 4)
	out, err = l.Read(0, 1<<20)
	require.NoError(t, err)
	require.Len(t, batchesIn(t, out), 10)
	_, ok = l.Damage()
	require.False(t, ok)
}
