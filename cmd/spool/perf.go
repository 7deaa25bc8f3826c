package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
)

// perfCommands are the subcommands of "spool perf".
var perfCommands = []subcommand{
	{"produce", "produce records and report throughput and latency, like kafka-producer-perf-test", runPerfProduce},
	{"consume", "consume records and report throughput, like kafka-consumer-perf-test", runPerfConsume},
}

// runPerf implements "spool perf": it dispatches to produce or consume.
func runPerf(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	return runSubcommand(ctx, "perf", "--topic T [flags]", "", perfCommands, args, stdout, stderr)
}

// mb is Kafka's perf tools' megabyte.
const mb = 1024 * 1024

// payloadPoolBytes bounds the memory of perf produce's random payloads.
const payloadPoolBytes = 64 << 20

// runPerfProduce implements "spool perf produce".
func runPerfProduce(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("perf produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf := addBrokerFlags(fs, withFlush)
	topic := fs.String("topic", "", "the `topic` to produce to (created with --partitions if it does not exist)")
	records := fs.Int64("records", 0, "how many records to produce")
	recordSize := fs.Int("record-size", 0, "the `bytes` of each record's value (random, no key)")
	partitions := fs.Int("partitions", 1, "the partition count of the topic if it is created (an existing topic must have as many)")
	var cfg spool.ProducerConfig
	acksFlag(fs, &cfg.Acks)
	linger := fs.Duration("linger", spool.DefaultLinger, "how long a batch waits for more records before it is written (linger.ms); 0: no wait")
	batchBytes := fs.Int("batch-bytes", spool.DefaultBatchBytes, "the `size` at which a batch is written without waiting out --linger (batch.size)")
	codecFlag(fs, &cfg.Compression, "the batches' `codec`: none, gzip, snappy, lz4 or zstd (default: the topic's; none does not override it)")
	throughput := fs.Float64("throughput", -1, "at most this many `records/s`; -1: no limit")
	interval := fs.Duration("reporting-interval", 5*time.Second, "how often to print progress")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool perf produce --topic T --records N --record-size B [flags]\n\n")
		fmt.Fprintf(fs.Output(), "Produces N records of B random bytes with a Producer, like kafka-producer-perf-test.\n")
		fmt.Fprintf(fs.Output(), "Prints progress every --reporting-interval, then a summary: records/s, MB/s, and\n")
		fmt.Fprintf(fs.Output(), "the average and percentiles of the latency from Produce to the delivery callback.\n")
		fmt.Fprintf(fs.Output(), "Exits 1 if any record failed.\n\nFlags:\n")
		printFlags(fs)
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	switch {
	case *topic == "":
		return usageError(fs, "--topic is required")
	case *records <= 0:
		return usageError(fs, "--records must be positive")
	case *recordSize <= 0:
		return usageError(fs, "--record-size must be positive")
	case *partitions < 1 || *partitions > 1<<31-1:
		return usageError(fs, "--partitions must be at least 1")
	case *batchBytes <= 0:
		return usageError(fs, "--batch-bytes must be positive")
	case *linger < 0:
		return usageError(fs, "--linger must not be negative")
	case *interval <= 0:
		return usageError(fs, "--reporting-interval must be positive")
	}
	cfg.Linger = lingerConfig(*linger)
	cfg.BatchBytes = *batchBytes

	b, ok := bf.open("spool perf produce", useOrCreate, stderr)
	if !ok {
		return exitProblem
	}
	if d, err := b.DescribeTopic(*topic); err == nil && setFlags(fs)["partitions"] && len(d.Partitions) != *partitions {
		// --partitions only sizes a topic this creates: rather than
		// ignore it, say that the topic measured is not the one asked for.
		code := usageError(fs, "--partitions %d: --topic %s exists, with %d partitions; drop --partitions, or name a new --topic",
			*partitions, *topic, len(d.Partitions))
		return closeBroker("spool perf produce", b, code, stderr)
	} else if errors.Is(err, spool.ErrUnknownTopic) {
		err = b.CreateTopic(ctx, *topic, spool.TopicConfig{Partitions: int32(*partitions)})
		if err != nil {
			fmt.Fprintf(stderr, "spool perf produce: %v\n", err)
			return closeBroker("spool perf produce", b, exitProblem, stderr)
		}
	} else if err != nil {
		fmt.Fprintf(stderr, "spool perf produce: %v\n", err)
		return closeBroker("spool perf produce", b, exitProblem, stderr)
	}
	p, err := b.NewProducer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "spool perf produce: %v\n", err)
		return closeBroker("spool perf produce", b, exitProblem, stderr)
	}
	payloads := randomPayloads(*records, *recordSize)

	st := &produceStats{start: time.Now(), recordSize: *recordSize, stderr: stderr}
	st.windowStart = st.start
	stopReports := reportEvery(*interval, func() { st.printWindow(stdout) })
	var sent int64
	for ; sent < *records && ctx.Err() == nil; sent++ {
		if *throughput > 0 {
			throttle(ctx, st.start, sent, *throughput)
		}
		start := st.now()
		// Not ctx: on a signal, what was produced is delivered and counted.
		p.Produce(context.Background(), spool.Record{Topic: *topic, Value: payloads[sent%int64(len(payloads))]},
			func(_ spool.RecordMetadata, err error) { st.done(start, err) })
	}
	code := exitOK
	if err := p.Close(); err != nil { // flushes: waits for every callback
		fmt.Fprintf(stderr, "spool perf produce: close producer: %v\n", err)
		code = exitProblem
	}
	elapsed := time.Since(st.start)
	stopReports()
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "spool perf produce: interrupted after %d of %d records\n", sent, *records)
	}
	if st.printTotal(stdout, elapsed) > 0 {
		code = exitProblem
	}
	return closeBroker("spool perf produce", b, code, stderr)
}

// randomPayloads returns a pool of random values to produce: enough of them
// that consecutive batches differ, few enough to stay within
// payloadPoolBytes.
func randomPayloads(records int64, size int) [][]byte {
	n := int(min(records, 1024, max(payloadPoolBytes/int64(size), 1)))
	rng := rand.NewChaCha8([32]byte{'s', 'p', 'o', 'o', 'l'})
	pool := make([][]byte, n)
	for i := range pool {
		pool[i] = make([]byte, size)
		rng.Read(pool[i])
	}
	return pool
}

// throttle sleeps while more than sent records in elapsed time would go
// over rate records/s, as Kafka's ThroughputThrottler does.
func throttle(ctx context.Context, start time.Time, sent int64, rate float64) {
	ahead := time.Duration(float64(sent)/rate*float64(time.Second)) - time.Since(start)
	if ahead < time.Millisecond {
		return // sleeping less is not precise: catch up later
	}
	t := time.NewTimer(ahead)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// reportEvery calls report every interval on a goroutine of its own until
// the returned function is called; that function waits for the goroutine
// to end.
func reportEvery(interval time.Duration, report func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				report()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// produceStats gathers perf produce's results from the delivery callbacks,
// as Kafka's perf test's Stats: the whole run, and the window since the
// last progress line.
type produceStats struct {
	start      time.Time
	recordSize int
	stderr     io.Writer

	mu          sync.Mutex
	hist        histogram // every delivered record's latency
	failed      int64
	windowStart time.Time
	window      int64         // records delivered in the window
	windowSum   time.Duration // their total latency
	windowMax   time.Duration
}

// maxShownErrors is how many failures perf produce prints; it counts the rest.
const maxShownErrors = 10

// now is the time since the start of the run, from the monotonic clock
// alone: reading it is cheaper than time.Now, which also reads the wall
// clock, and it is read twice a record.
func (st *produceStats) now() time.Duration { return time.Since(st.start) }

// done records a record's delivery, or its failure. start is the now of
// its Produce call.
func (st *produceStats) done(start time.Duration, err error) {
	lat := st.now() - start
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.failed++
		if st.failed <= maxShownErrors {
			fmt.Fprintf(st.stderr, "spool perf produce: %v\n", err)
		}
		return
	}
	st.hist.record(lat)
	st.window++
	st.windowSum += lat
	st.windowMax = max(st.windowMax, lat)
}

// printWindow prints the progress line of the window and starts a new one.
func (st *produceStats) printWindow(w io.Writer) {
	st.mu.Lock()
	now := time.Now()
	n, sum, mx, elapsed := st.window, st.windowSum, st.windowMax, now.Sub(st.windowStart)
	st.window, st.windowSum, st.windowMax, st.windowStart = 0, 0, 0, now
	st.mu.Unlock()
	var avg time.Duration
	if n > 0 {
		avg = sum / time.Duration(n)
	}
	rate := float64(n) / elapsed.Seconds()
	fmt.Fprintf(w, "%d records sent, %.1f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency.\n",
		n, rate, rate*float64(st.recordSize)/mb, ms(avg), ms(mx))
}

// printTotal prints the summary line of the run and returns how many
// records failed.
func (st *produceStats) printTotal(w io.Writer, elapsed time.Duration) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := &st.hist
	rate := float64(h.total) / elapsed.Seconds()
	fmt.Fprintf(w, "%d records sent, %.1f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms p50, %.2f ms p95, %.2f ms p99, %.2f ms p99.9, %.2f ms max latency.\n",
		h.total, rate, rate*float64(st.recordSize)/mb, ms(h.mean()),
		ms(h.percentile(50)), ms(h.percentile(95)), ms(h.percentile(99)), ms(h.percentile(99.9)), ms(time.Duration(h.max)*time.Microsecond))
	if st.failed > 0 {
		fmt.Fprintf(st.stderr, "spool perf produce: %d records failed\n", st.failed)
	}
	return st.failed
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runPerfConsume implements "spool perf consume".
func runPerfConsume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("perf consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf := addBrokerFlags(fs, withoutFlush) // it only reads
	topic := fs.String("topic", "", "the `topic` to read")
	records := fs.Int64("records", 0, "how many records to read (default: all those below the high watermarks at the start)")
	fetchMaxBytes := fs.Int("fetch-max-bytes", spool.DefaultFetchMaxBytes, "the most `bytes` of batches one Poll reads (fetch.max.bytes)")
	partitionFetchBytes := fs.Int("max-partition-fetch-bytes", spool.DefaultMaxPartitionFetchBytes, "the most `bytes` one Poll reads from one partition (max.partition.fetch.bytes)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up once this long passes without a new record")
	interval := fs.Duration("reporting-interval", 5*time.Second, "how often to print progress")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool perf consume --topic T [flags]\n\n")
		fmt.Fprintf(fs.Output(), "Reads a topic's records from the start of every partition with a Consumer, like\n")
		fmt.Fprintf(fs.Output(), "kafka-consumer-perf-test, and prints progress every --reporting-interval, then a\n")
		fmt.Fprintf(fs.Output(), "summary: records, MB, elapsed time, records/s and MB/s (of keys and values).\n")
		fmt.Fprintf(fs.Output(), "Exits 1 if --timeout passes before --records are read.\n\nFlags:\n")
		printFlags(fs)
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	switch {
	case *topic == "":
		return usageError(fs, "--topic is required")
	case *records < 0:
		return usageError(fs, "--records must not be negative")
	case *fetchMaxBytes <= 0 || *partitionFetchBytes <= 0:
		return usageError(fs, "--fetch-max-bytes and --max-partition-fetch-bytes must be positive")
	case *timeout <= 0:
		return usageError(fs, "--timeout must be positive")
	case *interval <= 0:
		return usageError(fs, "--reporting-interval must be positive")
	}

	b, ok := bf.open("spool perf consume", useExisting, stderr)
	if !ok {
		return exitProblem
	}
	code := perfConsume(ctx, b, *topic, *records, spool.ConsumerConfig{
		FetchMaxBytes: *fetchMaxBytes, MaxPartitionFetchBytes: *partitionFetchBytes, AutoOffsetReset: spool.ResetEarliest,
	}, *timeout, *interval, stdout, stderr)
	return closeBroker("spool perf consume", b, code, stderr)
}

// perfConsume reads want records (0: up to the high watermarks) from the
// start of every partition of topic and reports, returning the exit status.
func perfConsume(ctx context.Context, b *spool.Broker, topic string, want int64, cfg spool.ConsumerConfig,
	timeout, interval time.Duration, stdout, stderr io.Writer) int {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		fmt.Fprintf(stderr, "spool perf consume: %v\n", err)
		return exitProblem
	}
	if want == 0 {
		for _, p := range d.Partitions {
			want += p.HighWatermark - p.StartOffset
		}
	}
	c, err := b.NewConsumer(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "spool perf consume: %v\n", err)
		return exitProblem
	}
	defer c.Close()
	if err := c.Assign(topic); err != nil {
		fmt.Fprintf(stderr, "spool perf consume: %v\n", err)
		return exitProblem
	}
	if err := c.SeekToStart(topic); err != nil {
		fmt.Fprintf(stderr, "spool perf consume: %v\n", err)
		return exitProblem
	}

	var count, bytes atomic.Int64 // read by the reporter
	start := time.Now()
	windowStart, windowCount, windowBytes := start, int64(0), int64(0)
	stopReports := reportEvery(interval, func() {
		now, n, nb := time.Now(), count.Load(), bytes.Load()
		secs := now.Sub(windowStart).Seconds()
		fmt.Fprintf(stdout, "%d records consumed, %.1f records/sec (%.2f MB/sec)\n",
			n-windowCount, float64(n-windowCount)/secs, float64(nb-windowBytes)/mb/secs)
		windowStart, windowCount, windowBytes = now, n, nb
	})
	code := exitOK
	last := start
	for count.Load() < want {
		pollCtx, cancel := context.WithDeadline(ctx, last.Add(timeout))
		recs, err := c.Poll(pollCtx)
		cancel()
		recs = recs[:min(int64(len(recs)), want-count.Load())]
		var nb int64
		for _, r := range recs {
			nb += int64(len(r.Key) + len(r.Value))
		}
		count.Add(int64(len(recs)))
		bytes.Add(nb)
		if len(recs) > 0 {
			last = time.Now()
		}
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "spool perf consume: interrupted after %d of %d records\n", count.Load(), want)
			break
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(stderr, "spool perf consume: %v\n", err)
			code = exitProblem
			break
		}
		if len(recs) == 0 && time.Since(last) >= timeout {
			fmt.Fprintf(stderr, "spool perf consume: no record for %v: stopping after %d of %d records\n", timeout, count.Load(), want)
			code = exitProblem
			break
		}
	}
	elapsed := time.Since(start)
	stopReports()
	n, nb := count.Load(), bytes.Load()
	fmt.Fprintf(stdout, "%d records consumed (%.2f MB) in %.2f s, %.1f records/sec (%.2f MB/sec)\n",
		n, float64(nb)/mb, elapsed.Seconds(), float64(n)/elapsed.Seconds(), float64(nb)/mb/elapsed.Seconds())
	return code
}
