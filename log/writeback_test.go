package log

import (
	"bytes"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// TestWritebackFollowsTheActiveSegment: under None and Interval, every
// writebackBytes appended to the active segment hand what was written to
// the kernel to write back (the writeback job), so that the fsync after a
// roll finds little dirty; under Sync, where every append is fsynced,
// there is no such job. The records read back whole either way.
func TestWritebackFollowsTheActiveSegment(t *testing.T) {
	for _, flush := range []FlushPolicy{None, Interval(time.Hour), Sync} {
		t.Run(flush.String(), func(t *testing.T) {
			opts := Options{Flush: flush, SegmentBytes: 64 << 20, CheckpointInterval: time.Hour}
			l, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			defer l.Close()
			val := bytes.Repeat([]byte{'w'}, 64<<10)
			const n = 3*writebackBytes/(64<<10) + 4
			for i := range n {
				_, err := l.Append(record.Record{Key: []byte{byte(i)}, Value: val})
				require.NoError(t, err)
			}
			pos := func() int64 {
				l.mu.Lock()
				defer l.mu.Unlock()
				if l.wbSeg != l.active {
					return 0
				}
				return l.wbPos
			}
			if flush == Sync {
				require.Zero(t, pos(), "no writeback hints under Sync")
			} else {
				require.Eventually(t, func() bool { return pos() >= 2*writebackBytes }, 30*time.Second, time.Millisecond,
					"writeback reached %d of %d bytes", pos(), l.active.Size())
				require.LessOrEqual(t, pos(), l.active.Size())
			}
			off := int64(0)
			for off < l.EndOffset() {
				buf, err := l.Read(off, 1<<20)
				require.NoError(t, err)
				b, _, err := record.ParseBatch(buf)
				require.NoError(t, err)
				recs, err := b.Records()
				require.NoError(t, err)
				for _, r := range recs {
					require.Equal(t, val, r.Value)
				}
				off = b.NextOffset()
			}
			require.Equal(t, int64(n), off)
		})
	}
}
