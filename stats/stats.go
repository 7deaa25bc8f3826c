// Package stats holds the few measuring instruments spool's packages share,
// without a metrics library: a latency histogram safe for concurrent use
// and the plain snapshot it is read as.
//
// spool's types expose what they measure as Stats() snapshots built from
// these. Package spoolprom turns them into Prometheus metrics at scrape
// time; an embedder that does not use Prometheus reads the snapshots
// directly.
//
// A Histogram has fixed buckets: upper bounds in seconds, spaced by a
// factor of about 2.5 from 100 µs to 60 s (the last bucket, +Inf, is
// implied), chosen to span an fsync on a fast disk to a long-poll fetch.
// Observe is one atomic add per counter it touches:
//
//	bounds:  0.0001 0.00025 0.0005 0.001 ... 30 60 +Inf
//	counts:  [n0]   [n1]    [n2]   [n3]  ... [..] [..] [n_inf]   (not cumulative)
//	sum:     total seconds observed (nanoseconds inside)
package stats

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// bounds are the histograms' bucket upper bounds, in seconds.
var bounds = [...]float64{
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 30, 60,
}

// Bounds returns the histograms' bucket upper bounds, in seconds,
// ascending; +Inf is implied after the last.
func Bounds() []float64 { return slices.Clone(bounds[:]) }

// boundsNanos are bounds in nanoseconds, for Observe's search.
var boundsNanos = func() (out [len(bounds)]int64) {
	for i, b := range bounds {
		out[i] = int64(math.Round(b * 1e9))
	}
	return out
}()

// Histogram counts durations into Bounds' buckets. The zero value is ready
// to use; it is safe for concurrent use and must not be copied after
// first use.
type Histogram struct {
	counts [len(bounds) + 1]atomic.Uint64 // the last is +Inf
	sum    atomic.Int64                   // nanoseconds
}

// Observe records one duration. A negative one counts as zero.
func (h *Histogram) Observe(d time.Duration) {
	n := int64(d)
	if n < 0 {
		n = 0
	}
	i := 0
	for i < len(boundsNanos) && n > boundsNanos[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(n)
}

// Since records the time since start.
func (h *Histogram) Since(start time.Time) { h.Observe(time.Since(start)) }

// Snapshot reads the histogram. Observations made while it reads may be
// counted in Count but not yet in Sum, or the reverse; each field is
// exact.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		c := h.counts[i].Load()
		s.Counts[i] = c
		s.Count += c
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// HistogramSnapshot is a histogram read at one time.
type HistogramSnapshot struct {
	// Count is how many durations were observed; Sum their total.
	Count uint64
	Sum   time.Duration
	// Counts[i] is how many were at most Bounds()[i] seconds and more
	// than Bounds()[i-1]; the last, Counts[len(Bounds())], those above
	// every bound. Not cumulative.
	Counts []uint64
}

// Cumulative returns the counts of observations at most Bounds()[i], for
// each bound: the form Prometheus histograms take.
func (s HistogramSnapshot) Cumulative() []uint64 {
	out := make([]uint64, len(bounds))
	var run uint64
	for i := range bounds {
		if i < len(s.Counts) {
			run += s.Counts[i]
		}
		out[i] = run
	}
	return out
}

// Quantile estimates the q-quantile (0 < q ≤ 1; above 1 counts as 1) by
// interpolating inside the bucket it falls in, as Prometheus'
// histogram_quantile does. Zero without observations or for q ≤ 0 (or
// NaN); the largest finite bound when it falls in +Inf.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || !(q > 0) {
		return 0
	}
	q = min(q, 1)
	rank := q * float64(s.Count)
	var run float64
	for i, c := range s.Counts {
		prev := run
		run += float64(c)
		if run < rank || c == 0 {
			continue
		}
		if i >= len(bounds) {
			return seconds(bounds[len(bounds)-1])
		}
		lo := 0.0
		if i > 0 {
			lo = bounds[i-1]
		}
		return seconds(lo + (bounds[i]-lo)*(rank-prev)/float64(c))
	}
	return seconds(bounds[len(bounds)-1])
}

// Mean is Sum / Count; zero without observations.
func (s HistogramSnapshot) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
