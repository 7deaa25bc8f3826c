// Command kafkabench compares spool's Kafka protocol server
// (transport.Server on a spool.Broker, flush policy log.None) with franz-go's
// fake Kafka broker kfake (in memory, and with its data dir), side by side,
// in one run, driven by the same client: franz-go's kgo over loopback TCP,
// in this process.
//
//	cd bench && go run ./cmd/kafkabench [--runs 5] [--markdown]
//
// For every cell - record size x partitions x acks - each system, in a
// fresh broker, produces --records records (kgo's default batching, linger
// 10 ms; acks=all is idempotent, acks=1 is not) and waits for every
// acknowledgement, then a new client reads all of them back from the start. Then each system runs the latency
// test: 100 B records produced at each fixed --latency-rate (a
// comma-separated list) to one partition while a consumer polls it, with
// each --latency-acks (1, all), with kgo's default linger (10 ms, which then
// dominates the latency) and with none (--latency-lingers). Every run is repeated --runs times, the
// systems taking turns going first, and the tables show medians and
// spool/kfake ratios. See package kafkabench.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"time"

	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/bench/kafkabench"
)

type config struct {
	records         int
	runs            int
	dir             string
	markdown        bool
	verbose         bool
	sizes           []int
	partitions      []int
	acks            []kafkabench.Acks
	systems         []string
	latency         bool
	latencyRates    []float64
	latencyAcks     []kafkabench.Acks
	latencyDuration time.Duration
	latencyLingers  []time.Duration
}

func main() {
	var cfg config
	var sizes, partitions, acks, systems, lingers, latRates, latAcks string
	flag.IntVar(&cfg.records, "records", 1_000_000, "records produced and read back per cell, system and run")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per cell and system; the tables show the median")
	flag.StringVar(&cfg.dir, "dir", "", "directory for spool's data (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.BoolVar(&cfg.verbose, "verbose", false, "print every run to stderr")
	flag.StringVar(&sizes, "sizes", "100", "record value sizes in bytes, comma-separated (at least 16)")
	flag.StringVar(&partitions, "partitions", "6", "partitions of the topic, comma-separated")
	flag.StringVar(&acks, "acks", "1,all", "producer acks, comma-separated: 1, all")
	flag.StringVar(&systems, "systems", strings.Join(kafkabench.Systems, ","), "systems, comma-separated: "+strings.Join(kafkabench.Systems, ", "))
	flag.BoolVar(&cfg.latency, "latency", true, "run the latency test")
	flag.StringVar(&latRates, "latency-rate", "10000", "the latency test's rates, records/s, comma-separated")
	flag.StringVar(&latAcks, "latency-acks", "all", "the latency test's producer acks, comma-separated: 1, all")
	flag.DurationVar(&cfg.latencyDuration, "latency-duration", 5*time.Second, "how long each latency run produces")
	flag.StringVar(&lingers, "latency-lingers", "10ms,0s", "the producer's linger in the latency test, comma-separated (10ms is kgo's default)")
	flag.Parse()

	var err error
	if cfg.sizes, err = report.Ints(sizes, 16); err != nil {
		fatalf("--sizes: %v", err)
	}
	if cfg.partitions, err = report.Ints(partitions, 1); err != nil {
		fatalf("--partitions: %v", err)
	}
	if cfg.acks, err = parseAcks(acks); err != nil {
		fatalf("--acks: %v", err)
	}
	if cfg.latencyAcks, err = parseAcks(latAcks); err != nil {
		fatalf("--latency-acks: %v", err)
	}
	for r := range strings.SplitSeq(latRates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			fatalf("--latency-rate: %q is not a positive rate", r)
		}
		cfg.latencyRates = append(cfg.latencyRates, v)
	}
	for s := range strings.SplitSeq(systems, ",") {
		if !slices.Contains(kafkabench.Systems, s) {
			fatalf("--systems: unknown system %q", s)
		}
		cfg.systems = append(cfg.systems, s)
	}
	for l := range strings.SplitSeq(lingers, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(l))
		if err != nil || d < 0 {
			fatalf("--latency-lingers: %q is not a duration", l)
		}
		cfg.latencyLingers = append(cfg.latencyLingers, d)
	}
	if cfg.runs < 1 || cfg.records < 1 {
		fatalf("--runs and --records must be at least 1")
	}
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "kafkabench-")
		if err != nil {
			fatalf("%v", err)
		}
		defer os.RemoveAll(d)
		cfg.dir = d
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fatalf("%v", err)
	}
}

// parseAcks reads a comma-separated list of acks settings: 1 or all.
func parseAcks(s string) ([]kafkabench.Acks, error) {
	var out []kafkabench.Acks
	for a := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(a) {
		case "1":
			out = append(out, kafkabench.AcksLeader)
		case "all", "-1":
			out = append(out, kafkabench.AcksAll)
		default:
			return nil, fmt.Errorf("%q is not 1 or all", a)
		}
	}
	return out, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kafkabench: "+format+"\n", args...)
	os.Exit(1)
}

type cell struct {
	size, partitions int
	acks             kafkabench.Acks
}

// result is one system's run in one cell.
type result struct {
	produce, consume time.Duration
}

func run(cfg config, out io.Writer) error {
	ctx := context.Background()
	fmt.Fprintf(out, "kafkabench: %s %s/%s, GOMAXPROCS=%d, %d runs (median), %d records per cell, load average %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.runs, cfg.records, report.LoadAvg())
	fmt.Fprintf(out, "client: franz-go kgo (linger 10 ms, no compression; acks=all idempotent, acks=1 not); spool: log.None; kfake: in memory; kfake-disk: DataDir, no SyncWrites\n")
	start := time.Now()
	var cells []cell
	for _, size := range cfg.sizes {
		for _, p := range cfg.partitions {
			for _, a := range cfg.acks {
				cells = append(cells, cell{size, p, a})
			}
		}
	}
	rows := make([][]result, len(cells)) // [cell][system] medians
	for i, c := range cells {
		runs := make([][]result, len(cfg.systems))
		for r := range cfg.runs {
			for k := range cfg.systems {
				j := (k + r + i) % len(cfg.systems) // take turns going first
				sys := cfg.systems[j]
				dir := filepath.Join(cfg.dir, fmt.Sprintf("size%d-p%d-acks%v-run%d-%s", c.size, c.partitions, c.acks, r, sys))
				res, err := throughput(ctx, sys, dir, c, cfg.records)
				if rerr := os.RemoveAll(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("%s, size %d, %d partitions, acks=%v: %w", sys, c.size, c.partitions, c.acks, err)
				}
				if cfg.verbose {
					fmt.Fprintf(os.Stderr, "size=%d partitions=%d acks=%v run=%d %-10s produce %9.0f rec/s (%v)  consume %9.0f rec/s (%v)  load %s\n",
						c.size, c.partitions, c.acks, r, sys, rate(cfg.records, res.produce), res.produce.Round(time.Millisecond),
						rate(cfg.records, res.consume), res.consume.Round(time.Millisecond), report.LoadAvg())
				}
				runs[j] = append(runs[j], res)
			}
		}
		rows[i] = make([]result, len(cfg.systems))
		for j := range cfg.systems {
			rows[i][j] = result{
				produce: median(runs[j], func(r result) time.Duration { return r.produce }),
				consume: median(runs[j], func(r result) time.Duration { return r.consume }),
			}
		}
	}
	printThroughput(out, cfg, cells, rows)

	if cfg.latency {
		var cells []latencyCell
		for _, r := range cfg.latencyRates {
			for _, a := range cfg.latencyAcks {
				for _, l := range cfg.latencyLingers {
					cells = append(cells, latencyCell{rate: r, acks: a, linger: l})
				}
			}
		}
		lat := make([][][]kafkabench.LatencyResult, len(cells)) // [cell][system][run]
		for ci, lc := range cells {
			n := max(1, int(lc.rate*cfg.latencyDuration.Seconds()))
			lat[ci] = make([][]kafkabench.LatencyResult, len(cfg.systems))
			for r := range cfg.runs {
				for k := range cfg.systems {
					j := (k + r) % len(cfg.systems)
					sys := cfg.systems[j]
					dir := filepath.Join(cfg.dir, fmt.Sprintf("latency-%d-run%d-%s", ci, r, sys))
					res, err := latency(ctx, sys, dir, n, lc)
					if rerr := os.RemoveAll(dir); err == nil {
						err = rerr
					}
					if err != nil {
						return fmt.Errorf("%s, latency: %w", sys, err)
					}
					if cfg.verbose {
						fmt.Fprintf(os.Stderr, "latency rate=%.0f acks=%v linger=%v run=%d %-6s achieved %.0f rec/s: p50 %v p99 %v p99.9 %v max %v; ack p50 %v p99 %v  load %s\n",
							lc.rate, lc.acks, lc.linger, r, sys, res.Achieved, pct(res.Latencies, 0.5), pct(res.Latencies, 0.99), pct(res.Latencies, 0.999),
							res.Latencies[len(res.Latencies)-1], pct(res.Acks, 0.5), pct(res.Acks, 0.99), report.LoadAvg())
					}
					lat[ci][j] = append(lat[ci][j], res)
				}
			}
		}
		printLatency(out, cfg, cells, lat)
	}
	fmt.Fprintf(out, "total time %v, load average %s\n", time.Since(start).Round(time.Second), report.LoadAvg())
	return nil
}

// throughput starts a fresh broker, creates the topic, produces the
// records and reads them back.
func throughput(ctx context.Context, sys, dir string, c cell, records int) (res result, err error) {
	syscall.Sync() // no write-back inherited from the previous run
	runtime.GC()
	t, err := kafkabench.Start(sys, dir)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := t.Close(); err == nil {
			err = cerr
		}
	}()
	if err := t.CreateTopic(ctx, "bench", int32(c.partitions)); err != nil {
		return res, err
	}
	if res.produce, err = kafkabench.Produce(ctx, t, "bench", records, c.size, c.acks); err != nil {
		return res, fmt.Errorf("produce: %w", err)
	}
	runtime.GC()
	if res.consume, err = kafkabench.Consume(ctx, t, "bench", records, c.size); err != nil {
		return res, fmt.Errorf("consume: %w", err)
	}
	return res, nil
}

// latencyCell is one setting of the latency test.
type latencyCell struct {
	rate   float64
	acks   kafkabench.Acks
	linger time.Duration
}

func latency(ctx context.Context, sys, dir string, n int, lc latencyCell) (res kafkabench.LatencyResult, err error) {
	syscall.Sync()
	runtime.GC()
	t, err := kafkabench.Start(sys, dir)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := t.Close(); err == nil {
			err = cerr
		}
	}()
	if err := t.CreateTopic(ctx, "latency", 1); err != nil {
		return res, err
	}
	return kafkabench.Latency(ctx, t, "latency", n, 100, lc.rate, lc.linger, lc.acks)
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func pct(sorted []time.Duration, p float64) time.Duration {
	return kafkabench.Percentile(sorted, p).Round(time.Microsecond)
}

func median[T any](rs []T, f func(T) time.Duration) time.Duration {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func medianFloat[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.SortFunc(v, cmp.Compare)
	return v[len(v)/2]
}

func printThroughput(out io.Writer, cfg config, cells []cell, rows [][]result) {
	header := []string{"size", "partitions", "acks", "system", "produce rec/s", "produce MB/s", "consume rec/s", "consume MB/s", "spool/system produce", "spool/system consume"}
	sp := slices.Index(cfg.systems, "spool")
	var lines [][]string
	for i, c := range cells {
		for j, sys := range cfg.systems {
			r := rows[i][j]
			p, cons := rate(cfg.records, r.produce), rate(cfg.records, r.consume)
			line := []string{report.SizeName(c.size), strconv.Itoa(c.partitions), c.acks.String(), sys,
				fmt.Sprintf("%.0f", p), fmt.Sprintf("%.1f", p*float64(c.size)/1e6),
				fmt.Sprintf("%.0f", cons), fmt.Sprintf("%.1f", cons*float64(c.size)/1e6)}
			if sp >= 0 && j != sp {
				// Time ratio other/spool = rate ratio spool/other.
				line = append(line,
					fmt.Sprintf("%.2fx", r.produce.Seconds()/rows[i][sp].produce.Seconds()),
					fmt.Sprintf("%.2fx", r.consume.Seconds()/rows[i][sp].consume.Seconds()))
			} else {
				line = append(line, "", "")
			}
			lines = append(lines, line)
		}
	}
	report.Table(out, cfg.markdown, header, lines)
}

func printLatency(out io.Writer, cfg config, cells []latencyCell, lat [][][]kafkabench.LatencyResult) {
	fmt.Fprintf(out, "produce-to-consume latency: 100 B records for %v at each rate to one partition, median of %d runs\n",
		cfg.latencyDuration, cfg.runs)
	header := []string{"rate", "acks", "linger", "system", "achieved rec/s", "p50", "p99", "p99.9", "max", "ack p50", "ack p99", "spool/kfake p50", "spool/kfake p99"}
	type row struct{ p50, p99, p999, max, ackP50, ackP99 time.Duration }
	sp, kf := slices.Index(cfg.systems, "spool"), slices.Index(cfg.systems, "kfake")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	l := func(p float64) func(kafkabench.LatencyResult) time.Duration {
		return func(r kafkabench.LatencyResult) time.Duration { return kafkabench.Percentile(r.Latencies, p) }
	}
	a := func(p float64) func(kafkabench.LatencyResult) time.Duration {
		return func(r kafkabench.LatencyResult) time.Duration { return kafkabench.Percentile(r.Acks, p) }
	}
	var lines [][]string
	for ci, lc := range cells {
		rows := make([]row, len(cfg.systems))
		for j, rs := range lat[ci] {
			rows[j] = row{median(rs, l(0.5)), median(rs, l(0.99)), median(rs, l(0.999)), median(rs, l(1)),
				median(rs, a(0.5)), median(rs, a(0.99))}
		}
		for j, sys := range cfg.systems {
			r := rows[j]
			line := []string{fmt.Sprintf("%.0f", lc.rate), lc.acks.String(), lc.linger.String(), sys,
				fmt.Sprintf("%.0f", medianFloat(lat[ci][j], func(r kafkabench.LatencyResult) float64 { return r.Achieved })),
				ms(r.p50), ms(r.p99), ms(r.p999), ms(r.max), ms(r.ackP50), ms(r.ackP99)}
			if j == sp && kf >= 0 {
				line = append(line, fmt.Sprintf("%.2fx", r.p50.Seconds()/rows[kf].p50.Seconds()),
					fmt.Sprintf("%.2fx", r.p99.Seconds()/rows[kf].p99.Seconds()))
			} else {
				line = append(line, "", "")
			}
			lines = append(lines, line)
		}
	}
	report.Table(out, cfg.markdown, header, lines)
}
