// Package measure holds the switch benchmarks use to measure what spool's
// own counting costs: with Off set, the broker, the producer, the consumer
// and the Kafka server skip their counters, histograms and the clock reads
// that feed them. Never set outside a benchmark: Stats would be wrong.
package measure

import "sync/atomic"

// Off turns counting off.
var Off atomic.Bool

// On reports whether counting is on.
func On() bool { return !Off.Load() }
