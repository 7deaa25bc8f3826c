package log

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReconfigureRetention(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000 + 10_000)
	opts := tiny()
	opts.now = func() time.Time { return now }
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	end := appendN(t, l, 1000, 10, rand.New(rand.NewPCG(1, 1)))
	segs := l.NumSegments()
	require.Greater(t, segs, 2)

	// The default retention (7 days) keeps everything.
	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n)

	o := tiny()
	o.RetentionTime = 5 * time.Second
	require.NoError(t, l.Reconfigure(o))
	n, err = l.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, segs-1, n)
	checkRecords(t, readAll(t, l, l.StartOffset()), l.StartOffset(), end)

	// Unlimited again: nothing more goes.
	o.RetentionTime = Unlimited
	require.NoError(t, l.Reconfigure(o))
	appendN(t, l, 500, 10, rand.New(rand.NewPCG(2, 2)))
	n, err = l.ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestReconfigureSegmentBytes(t *testing.T) {
	l, err := Open(t.TempDir(), Options{RetentionTime: Unlimited})
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 300, 10, rand.New(rand.NewPCG(3, 3)))
	require.Equal(t, 1, l.NumSegments())

	require.NoError(t, l.Reconfigure(Options{SegmentBytes: 2048}))
	end := appendN(t, l, 300, 10, rand.New(rand.NewPCG(4, 4)))
	require.Greater(t, l.NumSegments(), 3)
	checkRecords(t, readAll(t, l, 0), 0, end)
}

func TestReconfigureRejectsBadSettings(t *testing.T) {
	l, err := Open(t.TempDir(), tiny())
	require.NoError(t, err)
	for _, o := range []Options{
		{SegmentBytes: 10},
		{SegmentBytes: maxSegmentBytes + 1},
		{MinCleanableDirtyRatio: 1.5},
	} {
		require.Error(t, o.Check())
		require.Error(t, l.Reconfigure(o))
	}
	// Nothing changed: the segment size is still tiny's.
	appendN(t, l, 300, 10, rand.New(rand.NewPCG(5, 5)))
	require.Greater(t, l.NumSegments(), 2)
	require.NoError(t, tiny().Check())

	require.NoError(t, l.Close())
	require.ErrorIs(t, l.Reconfigure(tiny()), ErrClosed)
}

// Reconfigure runs while appends, retention, rolls and cleaning do; the
// race detector checks the locking.
func TestReconfigureConcurrent(t *testing.T) {
	opts := tiny()
	opts.Cleanup = CompactDelete
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.ApplyRetention(); err != nil {
				t.Error(err)
			}
			if _, err := l.RollIfOld(); err != nil {
				t.Error(err)
			}
			if _, err := l.Clean(true); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o := tiny()
			o.SegmentBytes = int64(2048 + i%4*1024)
			o.RetentionBytes = int64(50_000 + i%3*10_000)
			o.SegmentAge = time.Hour
			o.DeleteRetention = time.Duration(1+i%5) * time.Second
			o.MinCleanableDirtyRatio = 0.1 + float64(i%5)/10
			if err := l.Reconfigure(o); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	appendN(t, l, 3000, 10, rand.New(rand.NewPCG(6, 6)))
	close(stop)
	wg.Wait()
}
