package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/bench/internal/report"
)

// latencyRow is spool's produce-to-consume latency in one cell: the median
// over the runs of each statistic.
type latencyRow struct {
	policy   string
	fraction float64 // of the measured publish rate (0: a fixed --latency-rate)
	target   float64 // records/s asked for
	achieved float64 // records/s the producer kept up
	cpu      float64 // cores busy
	records  int
	p50      time.Duration
	p99      time.Duration
	p999     time.Duration
	max      time.Duration
	ackP50   time.Duration // Produce to the callback
	ackP99   time.Duration
}

// latencyRun is one run's latencies, sorted.
type latencyRun struct {
	achieved float64
	cpu      float64 // cores busy (process CPU time / wall time) while producing
	lat      []time.Duration
	ack      []time.Duration
}

// measureLatency runs spool's latency test --runs times at rate records/s
// and returns the median of each statistic.
func measureLatency(ctx context.Context, cfg config, c cell, rate float64) (latencyRow, error) {
	var runs []latencyRun
	for r := range cfg.runs {
		dir := filepath.Join(cfg.dir, fmt.Sprintf("latency-%s-run%d", c.policy, r))
		if err := os.RemoveAll(dir); err != nil {
			return latencyRow{}, err
		}
		syscall.Sync()
		var lr latencyRun
		var err error
		pprof.Do(ctx, pprof.Labels("system", "spool-latency"), func(ctx context.Context) {
			lr, err = latencyOnce(ctx, dir, c, rate, cfg.latencyDuration)
		})
		if rerr := os.RemoveAll(dir); err == nil {
			err = rerr
		}
		if err != nil {
			return latencyRow{}, err
		}
		if cfg.verbose {
			fmt.Fprintf(os.Stderr, "latency flush=%s run=%d target %.0f rec/s achieved %.0f, %.2f cores busy: p50 %v p99 %v p99.9 %v max %v; ack p50 %v p99 %v\n",
				c.policy, r, rate, lr.achieved, lr.cpu, pct(lr.lat, 0.50), pct(lr.lat, 0.99), pct(lr.lat, 0.999), lr.lat[len(lr.lat)-1],
				pct(lr.ack, 0.50), pct(lr.ack, 0.99))
		}
		runs = append(runs, lr)
	}
	med := func(f func(latencyRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ach := make([]float64, len(runs))
	for i, r := range runs {
		ach[i] = r.achieved
	}
	slices.Sort(ach)
	cpu := make([]float64, len(runs))
	for i, r := range runs {
		cpu[i] = r.cpu
	}
	slices.Sort(cpu)
	return latencyRow{
		policy:   c.policy,
		target:   rate,
		achieved: ach[len(ach)/2],
		cpu:      cpu[len(cpu)/2],
		records:  len(runs[0].lat),
		p50:      med(func(r latencyRun) time.Duration { return pct(r.lat, 0.50) }),
		p99:      med(func(r latencyRun) time.Duration { return pct(r.lat, 0.99) }),
		p999:     med(func(r latencyRun) time.Duration { return pct(r.lat, 0.999) }),
		max:      med(func(r latencyRun) time.Duration { return r.lat[len(r.lat)-1] }),
		ackP50:   med(func(r latencyRun) time.Duration { return pct(r.ack, 0.50) }),
		ackP99:   med(func(r latencyRun) time.Duration { return pct(r.ack, 0.99) }),
	}, nil
}

// latencyOnce produces at a fixed rate for d, each value carrying the time
// of its Produce call, while a consumer polls the partition; the latency of
// a record is the time Poll returned it minus that timestamp.
func latencyOnce(ctx context.Context, dir string, c cell, rate float64, d time.Duration) (lr latencyRun, err error) {
	b, err := openSpool(ctx, dir, c, 1)
	if err != nil {
		return lr, err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return lr, err
	}
	defer p.Close()
	cons, err := b.NewConsumer(spool.ConsumerConfig{})
	if err != nil {
		return lr, err
	}
	defer cons.Close()
	if err := cons.Assign(topicName); err != nil {
		return lr, err
	}
	if err := cons.SeekToStart(topicName); err != nil {
		return lr, err
	}
	n := max(1, int(rate*d.Seconds()))

	cctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	type consumed struct {
		lat []time.Duration
		err error
	}
	done := make(chan consumed, 1)
	go func() {
		lat := make([]time.Duration, 0, n)
		for len(lat) < n {
			recs, err := cons.Poll(cctx)
			now := time.Now().UnixNano()
			if err != nil {
				done <- consumed{lat, fmt.Errorf("poll after %d records: %w", len(lat), err)}
				return
			}
			for _, r := range recs {
				if err := checkValue(r.Value, len(lat), c.size); err != nil {
					done <- consumed{lat, err}
					return
				}
				lat = append(lat, time.Duration(now-int64(binary.BigEndian.Uint64(r.Value[8:]))))
			}
		}
		done <- consumed{lat, nil}
	}()

	// Produce at rate: every pass sends the records due by now, then
	// sleeps briefly.
	src := newValueSource(c.size)
	val := make([]byte, c.size)
	var a acks
	// The acknowledgement latency too (Produce to the callback), to tell
	// the producer's and the log's part from the consumer's: the callback
	// finds the record's produce time by its offset (one partition, fresh).
	sent := make([]int64, n)
	acked := make([]time.Duration, n)
	cb := func(md spool.RecordMetadata, err error) {
		if err == nil && md.Offset >= 0 && md.Offset < int64(n) {
			acked[md.Offset] = time.Duration(time.Now().UnixNano() - sent[md.Offset])
		}
		a.callback(md, err)
	}
	ru0 := cpuTime()
	start := time.Now()
	for i := 0; i < n; {
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		for ; i < due; i++ {
			src.fill(val, i)
			now := time.Now().UnixNano()
			sent[i] = now
			binary.BigEndian.PutUint64(val[8:], uint64(now))
			p.Produce(ctx, spool.Record{Topic: topicName, Value: val}, cb)
		}
		time.Sleep(50 * time.Microsecond)
	}
	wall := time.Since(start)
	lr.achieved = float64(n) / wall.Seconds()
	lr.cpu = (cpuTime() - ru0).Seconds() / wall.Seconds()
	if err := p.Flush(cctx); err != nil {
		return lr, err
	}
	if err := a.err(); err != nil {
		return lr, fmt.Errorf("produce: %w", err)
	}
	res := <-done
	if res.err != nil {
		return lr, res.err
	}
	slices.Sort(res.lat)
	lr.lat = res.lat
	slices.Sort(acked)
	lr.ack = acked
	return lr, nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pct is the q-quantile of sorted (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// fsyncStats is the latency of fsync on the file system under dir.
type fsyncStats struct {
	n             int
	p50, p99, max time.Duration
	p999          time.Duration
}

// measureFsync appends 4 KiB and fsyncs, n times, in a file in dir.
func measureFsync(dir string, n int) (fsyncStats, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return fsyncStats{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		if _, err := f.Write(buf); err != nil {
			return fsyncStats{}, err
		}
		t := time.Now()
		if err := f.Sync(); err != nil {
			return fsyncStats{}, err
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	return fsyncStats{n: n, p50: pct(lat, 0.5), p99: pct(lat, 0.99), p999: pct(lat, 0.999), max: lat[n-1]}, nil
}

func printLatency(out io.Writer, cfg config, rows []latencyRow, fs fsyncStats) {
	at := "at fractions of the publish rate measured above"
	if cfg.latencyRate > 0 {
		at = fmt.Sprintf("at %.0f records/s", cfg.latencyRate)
	}
	fmt.Fprintf(out, "spool produce-to-consume latency, 128 B records, one partition, default producer and consumer, %s (%v per run, median of %d runs)\n",
		at, cfg.latencyDuration, cfg.runs)
	header := []string{"flush", "of max", "target rec/s", "achieved rec/s", "cores busy", "records", "p50", "p99", "p99.9", "max", "target p99", "ack p50", "ack p99"}
	var lines [][]string
	for _, r := range rows {
		target := "<= 5ms"
		if r.policy == "sync" {
			target = fmt.Sprintf("<= %v (fsync p99 + 2ms)", ms(fs.p99+2*time.Millisecond))
		}
		of := "-"
		if r.fraction > 0 {
			of = fmt.Sprintf("%.0f%%", 100*r.fraction)
		}
		lines = append(lines, []string{policyName(r.policy, "spool"), of,
			fmt.Sprintf("%.0f", r.target), fmt.Sprintf("%.0f", r.achieved), fmt.Sprintf("%.2f", r.cpu), fmt.Sprint(r.records),
			ms(r.p50), ms(r.p99), ms(r.p999), ms(r.max), target, ms(r.ackP50), ms(r.ackP99)})
	}
	report.Table(out, cfg.markdown, header, lines)
	fmt.Fprintf(out, "fsync of 4 KiB appends on the same file system (%d fsyncs): p50 %v, p99 %v, p99.9 %v, max %v\n",
		fs.n, ms(fs.p50), ms(fs.p99), ms(fs.p999), ms(fs.max))
}

// ms formats a duration in milliseconds with three decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
