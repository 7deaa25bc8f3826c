package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistogramBuckets(t *testing.T) {
	// Buckets tile the values: each starts right after the one before.
	next := uint64(0)
	for i := range histBuckets {
		lo, hi := histRange(i)
		require.Equal(t, next, lo, "bucket %d", i)
		require.GreaterOrEqual(t, hi, lo)
		require.Equal(t, i, histIndex(lo))
		require.Equal(t, i, histIndex(hi))
		if i >= histLinear {
			require.Less(t, hi-lo, lo>>histSubBits, "bucket %d is too wide", i)
		}
		next = hi + 1
	}
	require.Equal(t, uint64(0), next, "the last bucket ends at 2^64-1")
	require.Equal(t, histBuckets-1, histIndex(math.MaxUint64))
}

// TestHistogramPercentiles checks the histogram against percentiles of the
// sorted values.
func TestHistogramPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 10, 999, 100_000} {
		var h histogram
		vals := make([]uint64, n)
		var sum uint64
		for i := range vals {
			vals[i] = uint64(rng.ExpFloat64() * 5000) // µs, a long tail
			if i%100 == 7 {
				vals[i] *= 1000
			}
			h.record(time.Duration(vals[i]) * time.Microsecond)
			sum += vals[i]
		}
		slices.Sort(vals)
		for _, p := range []float64{0, 1, 50, 90, 95, 99, 99.9, 100} {
			rank := int(math.Ceil(p / 100 * float64(n)))
			want := float64(vals[max(rank, 1)-1])
			got := float64(h.percentile(p).Microseconds())
			require.InDelta(t, want, got, want/(1<<histSubBits)+1, "n=%d p%v", n, p)
		}
		require.Equal(t, time.Duration(vals[n-1])*time.Microsecond, h.percentile(100))
		require.InDelta(t, float64(sum)/float64(n), float64(h.mean())/1e3, 0.01)
	}
	var empty histogram
	require.Zero(t, empty.percentile(99))
	require.Zero(t, empty.mean())
}
