package stats

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	h.Observe(-time.Second)           // counts as zero: first bucket
	h.Observe(100 * time.Microsecond) // on the bound: that bucket
	h.Observe(101 * time.Microsecond) // just above: the next
	h.Observe(2 * time.Second)
	h.Observe(time.Hour) // +Inf
	s := h.Snapshot()
	require.EqualValues(t, 5, s.Count)
	require.Equal(t, 2*time.Second+time.Hour+201*time.Microsecond, s.Sum)
	require.Len(t, s.Counts, len(Bounds())+1)
	require.EqualValues(t, 2, s.Counts[0])
	require.EqualValues(t, 1, s.Counts[1])
	require.EqualValues(t, 1, s.Counts[13]) // (1, 2.5]
	require.EqualValues(t, 1, s.Counts[len(Bounds())])
	cum := s.Cumulative()
	require.EqualValues(t, 2, cum[0])
	require.EqualValues(t, 4, cum[len(cum)-1]) // +Inf is not among the bounds
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	require.Zero(t, h.Snapshot().Quantile(0.99))
	for range 90 {
		h.Observe(time.Millisecond) // (0.0005, 0.001]
	}
	for range 10 {
		h.Observe(40 * time.Millisecond) // (0.025, 0.05]
	}
	s := h.Snapshot()
	require.InDelta(t, 0.001, s.Quantile(0.5).Seconds(), 0.0005)
	p99 := s.Quantile(0.99)
	require.Greater(t, p99, 25*time.Millisecond)
	require.LessOrEqual(t, p99, 50*time.Millisecond)
	require.Equal(t, (90*time.Millisecond+400*time.Millisecond)/100, s.Mean())
	require.Equal(t, s.Quantile(1), s.Quantile(7), "above 1 counts as 1")
	require.Zero(t, s.Quantile(math.NaN()))
	require.Zero(t, s.Quantile(-1))
}

func TestHistogramConcurrent(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Observe(time.Duration(i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 8000, h.Snapshot().Count)
}
