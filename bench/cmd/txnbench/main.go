// Command txnbench measures what Kafka transactions cost a producer on
// spool: franz-go's kgo producing 100-byte records idempotently without
// transactions, and transactionally with a commit every --interval (100
// ms) and every --every (1,000) records, to the same broker in the same
// run; then a consumer reading the transactional data at read_uncommitted
// and at read_committed.
//
//	cd bench && go run ./cmd/txnbench [--runs 5] [--markdown]
//
// The broker is spool's Kafka protocol server in this process
// (transport.Server on a spool.Broker with flush policy log.None, as in
// kafkabench), a fresh one in a fresh directory for every run; or, with
// --addr, a broker already running there (`spool serve`), the same one for
// every run. Every mode of every run produces --records records to a topic
// of its own; the modes take turns going first, run by run. The tables
// show medians over the runs and each transactional mode's rate as a
// ratio of the idempotent one's. See README.md.
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
	"syscall"
	"time"

	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/bench/kafkabench"
	"github.com/twmb/franz-go/pkg/kgo"
)

type config struct {
	records    int
	runs       int
	size       int
	partitions int
	interval   time.Duration
	every      int
	consume    bool
	addr       string
	dir        string
	markdown   bool
	verbose    bool
}

func main() {
	var cfg config
	flag.IntVar(&cfg.records, "records", 1_000_000, "records produced per mode and run")
	flag.IntVar(&cfg.runs, "runs", 5, "runs; the tables show the median")
	flag.IntVar(&cfg.size, "size", 100, "record value size in bytes (at least 16)")
	flag.IntVar(&cfg.partitions, "partitions", 6, "partitions of each topic")
	flag.DurationVar(&cfg.interval, "interval", 100*time.Millisecond, "the time-based mode commits once a transaction is this old")
	flag.IntVar(&cfg.every, "every", 1000, "the count-based mode commits after this many records")
	flag.BoolVar(&cfg.consume, "consume", true, "also read the time-based mode's topic at read_uncommitted and read_committed")
	flag.StringVar(&cfg.addr, "addr", "", "a running broker to measure (host:port, e.g. a spool serve); default: spool in this process, fresh for every run")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the in-process broker's data (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.BoolVar(&cfg.verbose, "verbose", false, "print every run to stderr")
	flag.Parse()
	if cfg.records < 1 || cfg.runs < 1 || cfg.size < 16 || cfg.partitions < 1 || cfg.interval <= 0 || cfg.every < 1 {
		fatalf("--records, --runs, --partitions and --every must be at least 1, --size at least 16, --interval positive")
	}
	if cfg.addr == "" {
		if cfg.dir == "" {
			d, err := os.MkdirTemp("", "txnbench-")
			if err != nil {
				fatalf("%v", err)
			}
			defer os.RemoveAll(d)
			cfg.dir = d
		} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
			fatalf("%v", err)
		}
	}
	if err := run(cfg, os.Stdout); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "txnbench: "+format+"\n", args...)
	os.Exit(1)
}

// mode is one way of producing: idempotent (no commits) or transactional
// with a commit policy.
type mode struct {
	name    string
	commits kafkabench.Commits // zero: idempotent, no transactions
}

// produced is one mode's run.
type produced struct {
	took time.Duration
	txns int
}

func run(cfg config, out io.Writer) error {
	ctx := context.Background()
	modes := []mode{
		{name: "idempotent"},
		{name: fmt.Sprintf("txn, commit every %v", cfg.interval), commits: kafkabench.Commits{Interval: cfg.interval}},
		{name: fmt.Sprintf("txn, commit every %d records", cfg.every), commits: kafkabench.Commits{Every: cfg.every}},
	}
	levels := []struct {
		name string
		opt  kgo.IsolationLevel
	}{{"read_uncommitted", kgo.ReadUncommitted()}, {"read_committed", kgo.ReadCommitted()}}
	target := "spool in process (log.None), fresh each run"
	if cfg.addr != "" {
		target = "the broker at " + cfg.addr
	}
	fmt.Fprintf(out, "txnbench: %s %s/%s, GOMAXPROCS=%d, %d runs (median), %d records of %d B per mode and run, %d partitions, load average %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.runs, cfg.records, cfg.size, cfg.partitions, report.LoadAvg())
	fmt.Fprintf(out, "client: franz-go kgo (linger 10 ms, no compression, acks=all, idempotent); broker: %s\n", target)
	start := time.Now()

	prod := make([][]produced, len(modes))       // [mode][run]
	cons := make([][]time.Duration, len(levels)) // [level][run]
	for r := range cfg.runs {
		if err := oneRun(ctx, cfg, r, modes, levels, prod, cons); err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
	}

	rate := func(d time.Duration) float64 { return float64(cfg.records) / d.Seconds() }
	base := median(prod[0], func(p produced) float64 { return rate(p.took) })
	var lines [][]string
	for m, md := range modes {
		recs := median(prod[m], func(p produced) float64 { return rate(p.took) })
		line := []string{md.name, fmt.Sprintf("%.0f", recs), fmt.Sprintf("%.1f", recs*float64(cfg.size)/1e6)}
		if m == 0 {
			line = append(line, "", "", "")
		} else {
			// The ratio of the medians, and the median of each run's
			// ratio to the idempotent mode of the same run.
			perRun := make([]float64, cfg.runs)
			for r := range cfg.runs {
				perRun[r] = prod[0][r].took.Seconds() / prod[m][r].took.Seconds()
			}
			line = append(line,
				fmt.Sprintf("%.0f", median(prod[m], func(p produced) float64 { return float64(p.txns) / p.took.Seconds() })),
				fmt.Sprintf("%.2fx", recs/base),
				fmt.Sprintf("%.2fx", median(perRun, func(f float64) float64 { return f })))
		}
		lines = append(lines, line)
	}
	report.Table(out, cfg.markdown, []string{"producer", "rec/s", "MB/s", "commits/s", "÷ idempotent (medians)", "÷ idempotent (median of runs)"}, lines)

	if cfg.consume {
		fmt.Fprintf(out, "consume: a new kgo client reads the %q topic from the start to its end\n", modes[1].name)
		lines = nil
		ru := median(cons[0], func(d time.Duration) float64 { return rate(d) })
		for l, lv := range levels {
			recs := median(cons[l], func(d time.Duration) float64 { return rate(d) })
			line := []string{lv.name, fmt.Sprintf("%.0f", recs), fmt.Sprintf("%.1f", recs*float64(cfg.size)/1e6)}
			if l == 0 {
				line = append(line, "", "")
			} else {
				perRun := make([]float64, cfg.runs)
				for r := range cfg.runs {
					perRun[r] = cons[0][r].Seconds() / cons[l][r].Seconds()
				}
				line = append(line, fmt.Sprintf("%.2fx", recs/ru), fmt.Sprintf("%.2fx", median(perRun, func(f float64) float64 { return f })))
			}
			lines = append(lines, line)
		}
		report.Table(out, cfg.markdown, []string{"isolation", "rec/s", "MB/s", "÷ read_uncommitted (medians)", "÷ read_uncommitted (median of runs)"}, lines)
	}
	fmt.Fprintf(out, "total time %v, load average %s\n", time.Since(start).Round(time.Second), report.LoadAvg())
	return nil
}

// oneRun runs every mode once (and the consumers), the modes in an order
// rotated by the run's number, and appends the results.
func oneRun(ctx context.Context, cfg config, r int, modes []mode, levels []struct {
	name string
	opt  kgo.IsolationLevel
}, prod [][]produced, cons [][]time.Duration) (err error) {
	syscall.Sync() // no write-back inherited from the previous run
	runtime.GC()
	var t *kafkabench.Target
	if cfg.addr != "" {
		t = kafkabench.Dial("spool", cfg.addr)
	} else {
		dir := filepath.Join(cfg.dir, fmt.Sprintf("run%d", r))
		if t, err = kafkabench.Start("spool", dir); err != nil {
			return err
		}
		defer func() {
			if cerr := t.Close(); err == nil {
				err = cerr
			}
			if rerr := os.RemoveAll(dir); err == nil {
				err = rerr
			}
		}()
	}
	// Topic names unique across runs, for a broker that outlives them.
	stamp := time.Now().UnixNano()
	topic := func(m int) string { return fmt.Sprintf("txnbench-%d-r%d-m%d", stamp, r, m) }
	for k := range modes {
		m := (k + r) % len(modes)
		if err := t.CreateTopic(ctx, topic(m), int32(cfg.partitions)); err != nil {
			return err
		}
		runtime.GC()
		var p produced
		if modes[m].commits == (kafkabench.Commits{}) {
			p.took, err = kafkabench.Produce(ctx, t, topic(m), cfg.records, cfg.size, kafkabench.AcksAll)
		} else {
			var res kafkabench.TxnResult
			res, err = kafkabench.ProduceTxn(ctx, t, topic(m), fmt.Sprintf("txnbench-%d-r%d-m%d", stamp, r, m), cfg.records, cfg.size, modes[m].commits)
			p.took, p.txns = res.Took, res.Transactions
		}
		if err != nil {
			return fmt.Errorf("%s: %w", modes[m].name, err)
		}
		if cfg.verbose {
			fmt.Fprintf(os.Stderr, "run %d %-32s %9.0f rec/s (%v, %d commits)  load %s\n", r, modes[m].name,
				float64(cfg.records)/p.took.Seconds(), p.took.Round(time.Millisecond), p.txns, report.LoadAvg())
		}
		prod[m] = append(prod[m], p)
	}
	if !cfg.consume {
		return nil
	}
	for k := range levels {
		l := (k + r) % len(levels)
		runtime.GC()
		took, err := kafkabench.Consume(ctx, t, topic(1), cfg.records, cfg.size, kgo.FetchIsolationLevel(levels[l].opt))
		if err != nil {
			return fmt.Errorf("consume %s: %w", levels[l].name, err)
		}
		if cfg.verbose {
			fmt.Fprintf(os.Stderr, "run %d consume %-16s %9.0f rec/s (%v)  load %s\n", r, levels[l].name,
				float64(cfg.records)/took.Seconds(), took.Round(time.Millisecond), report.LoadAvg())
		}
		cons[l] = append(cons[l], took)
	}
	return nil
}

func median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.SortFunc(v, cmp.Compare)
	return v[len(v)/2]
}
