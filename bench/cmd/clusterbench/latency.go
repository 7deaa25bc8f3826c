package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latencyResult is one latency run.
type latencyResult struct {
	lat      []time.Duration // Produce call to the consumer's poll returning the record, sorted
	acks     []time.Duration // Produce call to the acknowledgement, sorted
	achieved float64         // records/s the producer kept up
	cores    float64         // CPU time of the nodes and this process over wall time
}

// latency produces n records of size bytes to topic at rate records/s,
// each stamped with the time of its Produce call (acks=all, idempotent,
// the producer lingering linger), while a consumer client of this process
// reads the topic from the start; a record's latency is the time the
// consumer's poll returned it minus its stamp. A consumer sees a record
// only once the high watermark passed it, that is once every in-sync
// replica has it, so this is the latency of replication too.
func latency(ctx context.Context, c *cluster, topic string, partitions, n, size int, rate float64, linger time.Duration) (latencyResult, error) {
	var res latencyResult
	cons, err := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return res, err
	}
	defer cons.Close()
	prod, err := c.client(kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(linger))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	// Warm up, not timed: the producer's id, metadata and connection, and
	// the consumer's fetch position on every partition - a record in each,
	// read back - so that no partition starts late.
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return res, fmt.Errorf("warm-up produce: %w", err)
	}
	if err := warmPartitions(ctx, c, topic, partitions); err != nil {
		return res, err
	}
	for seen := map[int32]bool{}; len(seen) < partitions; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("warm-up consume: %w", err)
		}
		if fs.IsClientClosed() {
			return res, kgo.ErrClientClosed
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == "warm-up-partition" {
				seen[r.Partition] = true
			}
		})
	}

	type consumed struct {
		lat []time.Duration
		err error
	}
	done := make(chan consumed, 1)
	go func() {
		lat := make([]time.Duration, 0, n)
		for len(lat) < n {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			if err := ctx.Err(); err != nil {
				done <- consumed{err: fmt.Errorf("consumer after %d of %d records: %w", len(lat), n, err)}
				return
			}
			if fs.IsClientClosed() {
				done <- consumed{err: kgo.ErrClientClosed}
				return
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err) })
			if ferr != nil {
				done <- consumed{err: ferr}
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				if len(r.Value) == size {
					lat = append(lat, now.Sub(stamp(r.Value)))
				}
			})
		}
		done <- consumed{lat: lat}
	}()

	vals := newValues(size)
	var mu sync.Mutex
	acks := make([]time.Duration, 0, n)
	var failed atomic.Pointer[error]
	cpu0, self0 := c.cpuTime(), selfCPU()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		sent := time.Now()
		prod.Produce(ctx, &kgo.Record{Value: vals.value(i, sent)}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			d := time.Since(sent)
			mu.Lock()
			acks = append(acks, d)
			mu.Unlock()
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return res, err
	}
	res.achieved = float64(n) / time.Since(start).Seconds()
	if p := failed.Load(); p != nil {
		return res, *p
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var cr consumed
	select {
	case cr = <-done:
	case <-cctx.Done():
		cons.Close() // ends the consumer's poll
		return res, fmt.Errorf("consumer: not every record read 30s after the last was acknowledged")
	}
	wall := time.Since(start)
	res.cores = (c.cpuTime() - cpu0 + selfCPU() - self0).Seconds() / wall.Seconds()
	if cr.err != nil {
		return res, cr.err
	}
	slices.Sort(cr.lat)
	slices.Sort(acks)
	res.lat, res.acks = cr.lat, acks
	return res, nil
}

// warmPartitions produces a record "warm-up-partition" to each of the
// topic's partitions.
func warmPartitions(ctx context.Context, c *cluster, topic string, partitions int) error {
	cl, err := c.client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p := range partitions {
		recs = append(recs, &kgo.Record{Partition: int32(p), Value: []byte("warm-up-partition")})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("warm-up produce to every partition: %w", err)
	}
	return nil
}

// percentile returns the p-quantile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
