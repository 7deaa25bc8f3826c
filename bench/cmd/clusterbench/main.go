// Command clusterbench measures a cluster of three `spool serve` processes
// on this machine (each a controller quorum voter and a broker), driven by
// franz-go's kgo from this process over loopback TCP:
//
//   - throughput: one producer of 100 B records (kgo's defaults: acks=all,
//     idempotent, linger 10 ms; compression off) to a 6-partition topic of
//     replication factor 3 with min.insync.replicas 2, then to one of
//     replication factor 1, on the same processes; records/s, CPU per
//     record and the ratio RF3/RF1, under each --flush policy of the nodes;
//   - latency: produce-to-consume latency on an RF3 topic at half the RF3
//     rate just measured (a rate-limited producer, a consumer in this
//     process stamping receipt), with kgo's default linger and with none;
//   - failover: producers write continuously to a one-partition RF3 topic;
//     the partition's leader is killed (SIGKILL) and the time to each
//     producer's first acks=all acknowledgement from the successor is
//     measured, --failover-kills times, the killed node restarted and back
//     in the ISR in between. The producers are kgo with its defaults and kgo
//     set to refresh metadata and retry as the Java client does, and the
//     time is split into detection (the controller fences the victim),
//     election (a survivor's metadata names the new leader) and the
//     client's part;
//   - reassign: a one-partition RF3 topic filled to 1 GiB moves, while a
//     producer keeps writing, from its leader to a fourth node (a broker
//     only); the time the move takes, the producer's rate during it against
//     before, and every acknowledged record read back from the new replica.
//
// Every throughput and latency run starts a fresh cluster; the tables show
// medians of --runs runs.
//
//	cd bench && go run ./cmd/clusterbench [--runs 3] [--markdown]
//
// The spool binary is built from the parent module (or taken from --bin,
// or $SPOOL_BIN). The three nodes and the client share this machine's
// CPUs, so the results measure CPU cost as much as replication. See the
// bench README.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spoolmq/spool/bench/internal/report"
)

type config struct {
	bin        string
	runs       int
	dir        string
	markdown   bool
	verbose    bool
	tests      []string
	policies   []string
	records    int
	size       int
	partitions int

	latencyFraction float64
	latencyRate     float64
	latencyDuration time.Duration
	latencyLingers  []time.Duration

	failover       failoverConfig
	reassign       reassignConfig
	failoverFlush  string
	sessionTimeout time.Duration
	nodeLogLevel   string

	// warnings are what went wrong without spoiling a measurement (a node
	// that would not stop); the run keeps its directory for them.
	warnings *[]string
}

// nodeFlags are the flags every node gets besides --flush.
func (cfg config) nodeFlags() []string {
	if cfg.nodeLogLevel != "" {
		return []string{"--log-level", cfg.nodeLogLevel}
	}
	return nil
}

// warn reports a problem that does not spoil the measurement, on stderr
// at once and in the output at the end.
func (cfg config) warn(err error) {
	fmt.Fprintf(os.Stderr, "clusterbench: warning: %v\n", err)
	*cfg.warnings = append(*cfg.warnings, err.Error())
}

var allTests = []string{"throughput", "latency", "failover", "reassign"}

func main() {
	var cfg config
	var tests, policies, lingers string
	flag.StringVar(&cfg.bin, "bin", os.Getenv("SPOOL_BIN"), "the spool binary (default $SPOOL_BIN, else built from the parent module)")
	flag.IntVar(&cfg.runs, "runs", 3, "throughput and latency runs per cell, each on a fresh cluster; the tables show the median")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the nodes' data and logs (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.BoolVar(&cfg.verbose, "verbose", false, "print every run and kill to stderr")
	flag.StringVar(&tests, "tests", strings.Join(allTests, ","), "tests to run, comma-separated: "+strings.Join(allTests, ", "))
	flag.StringVar(&policies, "policies", "none,sync", "the nodes' --flush policies for throughput and latency, comma-separated")
	flag.IntVar(&cfg.records, "records", 1_000_000, "records per topic and throughput run")
	flag.IntVar(&cfg.size, "size", 100, "record value size in bytes (at least 16)")
	flag.IntVar(&cfg.partitions, "partitions", 6, "partitions of the throughput and latency topics")
	flag.Float64Var(&cfg.latencyFraction, "latency-fraction", 0.5, "the latency test's rate as a fraction of the median RF3 rate measured")
	flag.Float64Var(&cfg.latencyRate, "latency-rate", 0, "the latency test's rate in records/s instead (needed without the throughput test)")
	flag.DurationVar(&cfg.latencyDuration, "latency-duration", 5*time.Second, "how long each latency run produces")
	flag.StringVar(&lingers, "latency-lingers", "10ms,0s", "the latency producer's linger, comma-separated (10ms is kgo's default)")
	flag.IntVar(&cfg.failover.kills, "failover-kills", 30, "leaders killed in the failover test")
	flag.IntVar(&cfg.failover.partitions, "failover-partitions", 3, "partitions of the failover topic")
	flag.IntVar(&cfg.failover.controllerEvery, "failover-controller-every", 3, "make every N-th kill that of the active controller (0: none on purpose)")
	flag.Float64Var(&cfg.failover.rate, "failover-rate", 1500, "each failover producer's records/s, over the topic's 3 partitions")
	flag.DurationVar(&cfg.failover.settle, "failover-settle", time.Second, "pause after a killed node is back in the ISR, before the next kill")
	flag.StringVar(&cfg.failoverFlush, "failover-flush", "sync", "the nodes' --flush policy in the failover test")
	flag.StringVar(&cfg.nodeLogLevel, "node-log-level", "", "the nodes' --log-level (default: theirs, info); their logs are in --dir")
	flag.StringVar(&cfg.failover.clientLog, "failover-client-log", "", "write the failover producers' kgo debug log to this `file`")
	flag.IntVar(&cfg.reassign.runs, "reassign-runs", 3, "runs of the reassign test, each on a fresh cluster")
	flag.Int64Var(&cfg.reassign.bytes, "reassign-bytes", 1<<30, "the reassign test's partition size, in bytes of values, when the move starts")
	flag.IntVar(&cfg.reassign.size, "reassign-size", 1024, "the reassign test's record value size in bytes (at least 16)")
	flag.Float64Var(&cfg.reassign.rate, "reassign-rate", 0, "the reassign test's producer rate in MB/s of values (0: as fast as the cluster acknowledges)")
	flag.DurationVar(&cfg.reassign.window, "reassign-window", 10*time.Second, "the reassign test's measure of the producer before the move: its last this long")
	flag.DurationVar(&cfg.reassign.timeout, "reassign-timeout", 15*time.Minute, "the longest the reassign test waits for the move to complete")
	flag.StringVar(&cfg.reassign.flush, "reassign-flush", "none", "the nodes' --flush policy in the reassign test")
	flag.DurationVar(&cfg.sessionTimeout, "session-timeout", 0, "the nodes' --session-timeout (default: not passed, spool serve's default of 2s)")
	flag.Parse()

	for t := range strings.SplitSeq(tests, ",") {
		if !slices.Contains(allTests, t) {
			fatalf("--tests: unknown test %q", t)
		}
		cfg.tests = append(cfg.tests, t)
	}
	cfg.policies = strings.Split(policies, ",")
	for l := range strings.SplitSeq(lingers, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(l))
		if err != nil || d < 0 {
			fatalf("--latency-lingers: %q is not a duration", l)
		}
		cfg.latencyLingers = append(cfg.latencyLingers, d)
	}
	switch {
	case cfg.runs < 1 || cfg.records < 1 || cfg.partitions < 1 || cfg.failover.kills < 1:
		fatalf("--runs, --records, --partitions and --failover-kills must be at least 1")
	case cfg.failover.partitions < 1:
		fatalf("--failover-partitions must be at least 1")
	case cfg.failover.controllerEvery < 0:
		fatalf("--failover-controller-every must not be negative")
	case cfg.size < 16 || cfg.reassign.size < 16:
		fatalf("--size and --reassign-size must be at least 16")
	case cfg.reassign.runs < 1 || cfg.reassign.bytes < int64(cfg.reassign.size) || cfg.reassign.rate < 0 || cfg.reassign.window <= 0 || cfg.reassign.timeout <= 0:
		fatalf("--reassign-runs must be at least 1, --reassign-bytes at least a record, --reassign-window and --reassign-timeout positive, --reassign-rate not negative")
	case cfg.failover.rate <= 0 || cfg.latencyFraction <= 0 || cfg.latencyRate < 0:
		fatalf("--failover-rate and --latency-fraction must be positive, --latency-rate not negative")
	case slices.Contains(cfg.tests, "latency") && !slices.Contains(cfg.tests, "throughput") && cfg.latencyRate == 0:
		fatalf("the latency test without the throughput test needs --latency-rate")
	}
	cfg.failover.size = cfg.size
	cfg.warnings = new([]string)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	keep := cfg.dir != ""
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "clusterbench-")
		if err != nil {
			fatalf("%v", err)
		}
		cfg.dir = d
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	err := prepareBinary(ctx, &cfg)
	if err == nil {
		err = run(ctx, cfg, os.Stdout)
	}
	if len(*cfg.warnings) > 0 && !keep {
		fmt.Fprintf(os.Stderr, "clusterbench: keeping %s for the warnings\n", cfg.dir)
		keep = true
	}
	if !keep {
		os.RemoveAll(cfg.dir)
	}
	if err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clusterbench: "+format+"\n", args...)
	os.Exit(1)
}

// prepareBinary builds spool from the parent module unless cfg.bin names
// a binary.
func prepareBinary(ctx context.Context, cfg *config) error {
	if cfg.bin != "" {
		if _, err := os.Stat(cfg.bin); err != nil {
			return fmt.Errorf("--bin: %w", err)
		}
		return nil
	}
	cfg.bin = filepath.Join(cfg.dir, "spool")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", cfg.bin, "github.com/spoolmq/spool/cmd/spool")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building spool (run from the bench module, or pass --bin): %w", err)
	}
	return nil
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	start := time.Now()
	fmt.Fprintf(out, "clusterbench: %s %s/%s, %d CPUs shared by the 3 nodes and the client, %d runs (median), load average %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cfg.runs, report.LoadAvg())
	fmt.Fprintf(out, "nodes: 3 spool serve processes (combined controller+broker) on 127.0.0.1; client: franz-go kgo in this process (acks=all, idempotent, linger 10 ms unless said, no compression)\n")
	var progress io.Writer = io.Discard
	if cfg.verbose {
		progress = os.Stderr
	}
	rf3Rates := map[string]float64{}
	if slices.Contains(cfg.tests, "throughput") {
		rows, err := runThroughput(ctx, cfg, progress)
		if err != nil {
			return err
		}
		printThroughput(out, cfg, rows)
		for _, r := range rows {
			rf3Rates[r.policy] = r.rates[0]
		}
	}
	if slices.Contains(cfg.tests, "latency") {
		rows, err := runLatency(ctx, cfg, rf3Rates, progress)
		if err != nil {
			return err
		}
		printLatency(out, cfg, rows)
	}
	if slices.Contains(cfg.tests, "failover") {
		extra := append([]string{"--flush", cfg.failoverFlush}, cfg.nodeFlags()...)
		if cfg.sessionTimeout > 0 {
			extra = append(extra, "--session-timeout", cfg.sessionTimeout.String())
		}
		dir := filepath.Join(cfg.dir, "failover")
		c, err := newCluster(ctx, cfg.bin, dir, 3, extra...)
		if err != nil {
			return fmt.Errorf("failover: %w", err)
		}
		res, recordErrs, err := failover(ctx, c, cfg.failover, progress)
		cfg.stopCluster(c, err, "failover")
		if err != nil {
			return fmt.Errorf("failover: %w (node logs in %s)", err, dir)
		}
		printFailover(out, cfg, res, recordErrs)
	}
	if slices.Contains(cfg.tests, "reassign") {
		res, err := runReassign(ctx, cfg, progress)
		if err != nil {
			return err
		}
		printReassign(out, cfg, res)
	}
	for _, w := range *cfg.warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	fmt.Fprintf(out, "total time %v, load average %s\n", time.Since(start).Round(time.Second), report.LoadAvg())
	return nil
}

// throughputRow is one flush policy's medians.
type throughputRow struct {
	policy     string
	rates      []float64 // per topic of throughputTopics, records/s
	clusterCPU []float64 // cores the nodes kept busy
	nodeUs     []float64 // the nodes' CPU time per record, µs
	clientUs   []float64 // this process's CPU time per record, µs
	ratio      float64   // median of the runs' RF3/RF1
}

func runThroughput(ctx context.Context, cfg config, progress io.Writer) ([]throughputRow, error) {
	var rows []throughputRow
	for _, policy := range cfg.policies {
		runs := make([][]produceResult, len(throughputTopics))
		var ratios []float64
		for r := range cfg.runs {
			dir := filepath.Join(cfg.dir, fmt.Sprintf("throughput-%s-run%d", policy, r))
			res, err := throughputRun(ctx, cfg, dir, policy, r)
			if err != nil {
				return nil, fmt.Errorf("throughput, --flush %s, run %d: %w (node logs in %s)", policy, r+1, err, dir)
			}
			for i := range throughputTopics {
				runs[i] = append(runs[i], res[i])
			}
			ratios = append(ratios, res[0].rate(cfg.records)/res[1].rate(cfg.records))
			fmt.Fprintf(progress, "throughput flush=%s run=%d: rf3 %.0f rec/s, rf1 %.0f rec/s, ratio %.2f, load %s\n",
				policy, r+1, res[0].rate(cfg.records), res[1].rate(cfg.records), ratios[len(ratios)-1], report.LoadAvg())
		}
		row := throughputRow{policy: policy, ratio: medianOf(ratios)}
		for i := range throughputTopics {
			row.rates = append(row.rates, medianOf(mapf(runs[i], func(p produceResult) float64 { return p.rate(cfg.records) })))
			row.clusterCPU = append(row.clusterCPU, medianOf(mapf(runs[i], func(p produceResult) float64 { return p.clusterCPU.Seconds() / p.took.Seconds() })))
			row.nodeUs = append(row.nodeUs, medianOf(mapf(runs[i], func(p produceResult) float64 { return p.clusterCPU.Seconds() * 1e6 / float64(cfg.records) })))
			row.clientUs = append(row.clientUs, medianOf(mapf(runs[i], func(p produceResult) float64 { return p.clientCPU.Seconds() * 1e6 / float64(cfg.records) })))
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// throughputRun starts a cluster under policy, creates both topics and
// produces to each, the topics taking turns going first run by run.
func throughputRun(ctx context.Context, cfg config, dir, policy string, run int) ([]produceResult, error) {
	syscall.Sync() // no write-back inherited from the previous run
	c, err := newCluster(ctx, cfg.bin, dir, 3, append([]string{"--flush", policy}, cfg.nodeFlags()...)...)
	if err != nil {
		return nil, err
	}
	res, err := func() ([]produceResult, error) {
		for _, t := range throughputTopics {
			if err := c.createTopic(ctx, t.name, cfg.partitions, t.rf, t.minISR); err != nil {
				return nil, err
			}
		}
		res := make([]produceResult, len(throughputTopics))
		for k := range throughputTopics {
			i := (k + run) % len(throughputTopics)
			runtime.GC()
			r, err := produce(ctx, c, throughputTopics[i].name, cfg.records, cfg.size)
			if err != nil {
				return nil, fmt.Errorf("topic %s: %w", throughputTopics[i].name, err)
			}
			res[i] = r
		}
		return res, nil
	}()
	cfg.stopCluster(c, err, fmt.Sprintf("throughput, --flush %s, run %d", policy, run+1))
	return res, err
}

// stopCluster stops c after a run and removes the nodes' data, keeping
// their logs. A node that would not stop is a warning (it does not spoil
// what was measured); it and a failed run (err) keep the data too.
func (cfg config) stopCluster(c *cluster, err error, what string) {
	if serr := c.stop(); serr != nil {
		cfg.warn(fmt.Errorf("%s: %w", what, serr))
	} else if err == nil {
		for _, nd := range c.nodes {
			os.RemoveAll(nd.dir)
		}
	}
}

// latencyRow is the medians of one policy and linger.
type latencyRow struct {
	policy            string
	linger            time.Duration
	rate              float64
	runs              []latencyResult
	p50, p99, p999, m time.Duration
	ackP50, ackP99    time.Duration
	achieved, cores   float64
}

func runLatency(ctx context.Context, cfg config, rf3Rates map[string]float64, progress io.Writer) ([]latencyRow, error) {
	var rows []latencyRow
	for _, policy := range cfg.policies {
		rate := cfg.latencyRate
		if rate == 0 {
			rate = cfg.latencyFraction * rf3Rates[policy]
		}
		if rate <= 0 {
			return nil, fmt.Errorf("latency, --flush %s: no RF3 rate measured under that policy; pass --latency-rate", policy)
		}
		n := max(1, int(rate*cfg.latencyDuration.Seconds()))
		for _, linger := range cfg.latencyLingers {
			row := latencyRow{policy: policy, linger: linger, rate: rate}
			for r := range cfg.runs {
				dir := filepath.Join(cfg.dir, fmt.Sprintf("latency-%s-%v-run%d", policy, linger, r))
				res, err := latencyRun(ctx, cfg, dir, policy, n, rate, linger)
				if err != nil {
					return nil, fmt.Errorf("latency, --flush %s, linger %v, run %d: %w (node logs in %s)", policy, linger, r+1, err, dir)
				}
				fmt.Fprintf(progress, "latency flush=%s linger=%v run=%d: %.0f rec/s: p50 %v p99 %v p99.9 %v max %v; ack p50 %v p99 %v; %.2f cores, load %s\n",
					policy, linger, r+1, res.achieved, ms(percentile(res.lat, 0.5)), ms(percentile(res.lat, 0.99)),
					ms(percentile(res.lat, 0.999)), ms(percentile(res.lat, 1)), ms(percentile(res.acks, 0.5)),
					ms(percentile(res.acks, 0.99)), res.cores, report.LoadAvg())
				row.runs = append(row.runs, res)
			}
			pl := func(p float64) time.Duration {
				return medianDur(mapf(row.runs, func(r latencyResult) time.Duration { return percentile(r.lat, p) }))
			}
			pa := func(p float64) time.Duration {
				return medianDur(mapf(row.runs, func(r latencyResult) time.Duration { return percentile(r.acks, p) }))
			}
			row.p50, row.p99, row.p999, row.m = pl(0.5), pl(0.99), pl(0.999), pl(1)
			row.ackP50, row.ackP99 = pa(0.5), pa(0.99)
			row.achieved = medianOf(mapf(row.runs, func(r latencyResult) float64 { return r.achieved }))
			row.cores = medianOf(mapf(row.runs, func(r latencyResult) float64 { return r.cores }))
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func latencyRun(ctx context.Context, cfg config, dir, policy string, n int, rate float64, linger time.Duration) (latencyResult, error) {
	syscall.Sync()
	c, err := newCluster(ctx, cfg.bin, dir, 3, append([]string{"--flush", policy}, cfg.nodeFlags()...)...)
	if err != nil {
		return latencyResult{}, err
	}
	res, err := func() (latencyResult, error) {
		if err := c.createTopic(ctx, "latency", cfg.partitions, 3, 2); err != nil {
			return latencyResult{}, err
		}
		runtime.GC()
		return latency(ctx, c, "latency", cfg.partitions, n, cfg.size, rate, linger)
	}()
	cfg.stopCluster(c, err, fmt.Sprintf("latency, --flush %s, linger %v", policy, linger))
	return res, err
}

func printThroughput(out io.Writer, cfg config, rows []throughputRow) {
	fmt.Fprintf(out, "\nthroughput: %d records of %s per topic and run, %d partitions, one producer; RF3 = replication factor 3, min.insync.replicas 2; RF1 = replication factor 1; acks=all for both\n",
		cfg.records, report.SizeName(cfg.size), cfg.partitions)
	header := []string{"flush", "topic", "rec/s", "MB/s", "node cores", "node CPU µs/rec", "client CPU µs/rec", "RF3/RF1"}
	var lines [][]string
	for _, r := range rows {
		for i, t := range throughputTopics {
			line := []string{r.policy, t.name, fmt.Sprintf("%.0f", r.rates[i]), fmt.Sprintf("%.1f", r.rates[i]*float64(cfg.size)/1e6),
				fmt.Sprintf("%.2f", r.clusterCPU[i]), fmt.Sprintf("%.2f", r.nodeUs[i]), fmt.Sprintf("%.2f", r.clientUs[i]), ""}
			if i == 0 {
				line[len(line)-1] = fmt.Sprintf("%.2fx", r.ratio)
			}
			lines = append(lines, line)
		}
	}
	report.Table(out, cfg.markdown, header, lines)
}

func printLatency(out io.Writer, cfg config, rows []latencyRow) {
	fmt.Fprintf(out, "produce-to-consume latency: RF3 topic (min.insync.replicas 2, acks=all), %d partitions, %s records for %v at the rate shown, a consumer in the same process\n",
		cfg.partitions, report.SizeName(cfg.size), cfg.latencyDuration)
	header := []string{"flush", "linger", "rate rec/s", "achieved", "p50", "p99", "p99.9", "max", "ack p50", "ack p99", "cores"}
	var lines [][]string
	for _, r := range rows {
		lines = append(lines, []string{r.policy, r.linger.String(), fmt.Sprintf("%.0f", r.rate), fmt.Sprintf("%.0f", r.achieved),
			ms2(r.p50), ms2(r.p99), ms2(r.p999), ms2(r.m), ms2(r.ackP50), ms2(r.ackP99), fmt.Sprintf("%.2f", r.cores)})
	}
	report.Table(out, cfg.markdown, header, lines)
}

func printFailover(out io.Writer, cfg config, res []killResult, recordErrs int64) {
	st := "2s (spool serve's default)"
	if cfg.sessionTimeout > 0 {
		st = cfg.sessionTimeout.String()
	}
	every := "none on purpose"
	if cfg.failover.controllerEvery > 0 {
		every = fmt.Sprintf("every %d", cfg.failover.controllerEvery)
	}
	fmt.Fprintf(out, "failover: %d SIGKILLs of a partition leader (the active controller's node %s) of a %d-partition RF3 topic (min.insync.replicas 2), --flush %s, session timeout %s; a producer of %.0f rec/s per client setting, all at once; %d records failed\n",
		len(res), every, cfg.failover.partitions, cfg.failoverFlush, st, cfg.failover.rate, recordErrs)
	fmt.Fprintf(out, "ack = kill -> the first acks=all acknowledgement for a partition the victim led, from its successor; split: fenced = kill -> the controller fences the victim (detection); visible = kill -> a survivor's Metadata names the new leader (+ election); client = visible -> first ack; others = kill -> acknowledgements resume on the partitions whose leader survived; controller = kill -> a new active controller; rejoin = restart -> back in every ISR\n")
	header := []string{"client", "victim", "kills", "ack p50", "ack p99", "ack max", "fenced p50", "visible p50", "client p50", "client max", "others p50", "others max", "controller p50", "rejoin p50"}
	var lines [][]string
	groups := []struct {
		name string
		keep func(killResult) bool
	}{
		{"any", func(killResult) bool { return true }},
		{"leader", func(r killResult) bool { return !r.wasController }},
		{"leader+controller", func(r killResult) bool { return r.wasController }},
	}
	for ci, fc := range failoverClients {
		for _, g := range groups {
			var rs []killResult
			for _, r := range res {
				if g.keep(r) {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				lines = append(lines, []string{fc.name, g.name, "0", "", "", "", "", "", "", "", "", "", "", ""})
				continue
			}
			pct := func(f func(killResult) time.Duration, p float64) string {
				var v []time.Duration
				for _, r := range rs {
					if d := f(r); d >= 0 {
						v = append(v, d)
					}
				}
				if len(v) == 0 {
					return "-"
				}
				slices.Sort(v)
				return ms(percentile(v, p))
			}
			ack := func(r killResult) time.Duration { return r.ack[ci] }
			client := func(r killResult) time.Duration {
				if r.visible < 0 {
					return -1
				}
				return r.ack[ci] - r.visible
			}
			lines = append(lines, []string{fc.name, g.name, fmt.Sprint(len(rs)),
				pct(ack, 0.5), pct(ack, 0.99), pct(ack, 1),
				pct(func(r killResult) time.Duration { return r.fenced }, 0.5),
				pct(func(r killResult) time.Duration { return r.visible }, 0.5),
				pct(client, 0.5), pct(client, 1),
				pct(func(r killResult) time.Duration { return r.others[ci] }, 0.5),
				pct(func(r killResult) time.Duration { return r.others[ci] }, 1),
				pct(func(r killResult) time.Duration { return r.controller }, 0.5),
				pct(func(r killResult) time.Duration { return r.rejoined }, 0.5)})
		}
	}
	report.Table(out, cfg.markdown, header, lines)
}

func ms2(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func mapf[T, U any](s []T, f func(T) U) []U {
	out := make([]U, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func medianDur(v []time.Duration) time.Duration {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
