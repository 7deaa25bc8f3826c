package main

import (
	"math/bits"
	"time"
)

// histogram counts latencies in microseconds in log-linear buckets, as
// HdrHistogram does, so that percentiles of any number of records come
// from a fixed 30 KiB: values below 128 µs have a bucket each; above, every
// power of two is split into 64 buckets, so a percentile is off by less
// than 1/64 (1.6 %) of its value.
//
//	value v               bucket index
//	[0, 128)              v
//	[2^k, 2^(k+1)), k≥7   (k-6)*64 + v>>(k-6)
//
// The zero value is an empty histogram. Not safe for concurrent use.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
	max    uint64 // µs, exact
	sum    uint64 // µs, for the mean
}

const (
	histSubBits = 6 // 2^6 buckets per power of two above 2^(histSubBits+1)
	histLinear  = 1 << (histSubBits + 1)
	histBuckets = (64 - histSubBits + 1) << histSubBits // up to v = 2^64-1
)

// histIndex is the bucket of value v.
func histIndex(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [64, 128)
	return shift<<histSubBits + int(v>>shift)
}

// histRange is the range of values [lo, hi] of bucket i.
func histRange(i int) (lo, hi uint64) {
	if i < histLinear {
		return uint64(i), uint64(i)
	}
	shift := i>>histSubBits - 1
	m := uint64(i&(1<<histSubBits-1) | 1<<histSubBits)
	return m << shift, (m+1)<<shift - 1
}

// record adds a latency.
func (h *histogram) record(d time.Duration) {
	v := uint64(max(d.Microseconds(), 0))
	h.counts[histIndex(v)]++
	h.total++
	h.sum += v
	h.max = max(h.max, v)
}

// percentile returns the latency below or at which p percent of the
// recorded ones are: the middle of the bucket holding that rank, never more
// than the largest recorded value. Zero when nothing is recorded.
func (h *histogram) percentile(p float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(p / 100 * float64(h.total))
	if float64(rank) < p/100*float64(h.total) {
		rank++ // the ceiling: the rank-th smallest value
	}
	rank = max(rank, 1)
	if rank >= h.total {
		return time.Duration(h.max) * time.Microsecond
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histRange(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max)) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// mean is the average recorded latency.
func (h *histogram) mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(float64(h.sum)/float64(h.total)*1000) * time.Nanosecond
}
