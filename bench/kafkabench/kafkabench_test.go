package kafkabench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The benchmarks run every workload on both systems, one sub-benchmark per
// system and setting, so that one invocation compares them:
//
//	cd bench && go test -run XXX -bench . -count 3 ./kafkabench
//
// Each reports records/s and MB/s (record values only, 10^6 bytes) from the
// timed part alone; cmd/kafkabench runs the same workloads as one matrix
// and prints medians and spool/kfake ratios.

var (
	benchSizes      = []int{100, 1024}
	benchPartitions = []int32{1, 6}
	benchAcks       = []Acks{AcksAll, AcksLeader}
)

// LatencyRate is the latency benchmark's fixed, moderate rate (records/s).
const LatencyRate = 10_000

func start(b *testing.B, system string, partitions int32) *Target {
	b.Helper()
	t, err := Start(system, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := t.Close(); err != nil {
			b.Error(err)
		}
	})
	if err := t.CreateTopic(context.Background(), "bench", partitions); err != nil {
		b.Fatal(err)
	}
	return t
}

func report(b *testing.B, n, size int, took time.Duration) {
	b.ReportMetric(float64(n)/took.Seconds(), "records/s")
	b.ReportMetric(float64(n*size)/took.Seconds()/1e6, "MB/s")
}

// BenchmarkProduce produces b.N records and waits for every
// acknowledgement.
func BenchmarkProduce(b *testing.B) {
	for _, size := range benchSizes {
		for _, parts := range benchPartitions {
			for _, acks := range benchAcks {
				for _, sys := range Systems {
					b.Run(fmt.Sprintf("size=%d/partitions=%d/acks=%v/system=%s", size, parts, acks, sys), func(b *testing.B) {
						t := start(b, sys, parts)
						b.ResetTimer()
						took, err := Produce(context.Background(), t, "bench", b.N, size, acks)
						b.StopTimer()
						if err != nil {
							b.Fatal(err)
						}
						report(b, b.N, size, took)
					})
				}
			}
		}
	}
}

// BenchmarkConsume reads back b.N records produced (untimed) before.
func BenchmarkConsume(b *testing.B) {
	for _, size := range benchSizes {
		for _, parts := range benchPartitions {
			for _, sys := range Systems {
				b.Run(fmt.Sprintf("size=%d/partitions=%d/system=%s", size, parts, sys), func(b *testing.B) {
					t := start(b, sys, parts)
					ctx := context.Background()
					if _, err := Produce(ctx, t, "bench", b.N, size, AcksAll); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					took, err := Consume(ctx, t, "bench", b.N, size)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					report(b, b.N, size, took)
				})
			}
		}
	}
}

// BenchmarkLatency produces b.N records of 100 B at LatencyRate records/s
// to one partition while a consumer polls it, and reports the
// produce-to-consume latency percentiles, with kgo's default linger (10 ms)
// and with none.
func BenchmarkLatency(b *testing.B) {
	for _, linger := range []time.Duration{DefaultLinger, 0} {
		for _, sys := range Systems {
			b.Run(fmt.Sprintf("linger=%v/system=%s", linger, sys), func(b *testing.B) {
				benchLatency(b, sys, linger)
			})
		}
	}
}

func benchLatency(b *testing.B, sys string, linger time.Duration) {
	t := start(b, sys, 1)
	b.ResetTimer()
	res, err := Latency(context.Background(), t, "bench", b.N, 100, LatencyRate, linger, AcksAll)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(Percentile(res.Latencies, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(Percentile(res.Latencies, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(Percentile(res.Acks, 0.99).Microseconds())/1000, "ack-p99-ms")
	b.ReportMetric(res.Achieved, "records/s")
}
