// Command brokerbench compares the embedded spool broker with embedded NATS
// JetStream (nats-server run in-process, driven by nats.go), side by side, in
// one run, under matched durability.
//
//	cd bench && go run ./cmd/brokerbench [--runs 3] [--markdown]
//
// For every cell - record size x flush policy - each system publishes
// --records records asynchronously with a window (spool: one Producer with
// default batching; JetStream: PublishAsync with 4096 acks outstanding),
// waits until all are acknowledged, then replays all of them in order (spool:
// a Consumer from the start of the partitions; JetStream: an ordered
// consumer). Each cell runs --runs times in fresh directories, the systems
// taking turns going first, and the table reports the median. Then it
// measures spool's produce-to-consume latency at half the measured maximum
// rate, next to the fsync latency of the same file system. See README.md.
package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spoolmq/spool/bench/internal/report"
	"time"
)

type config struct {
	records          int // under none
	syncRecords      int // under sync
	runs             int
	dir              string
	markdown         bool
	verbose          bool
	sizes            []int
	policies         []string
	systems          []string
	spoolPartitions  int // extra spool row with this many partitions; 0: none
	natsConn         string
	jsConsumer       string
	jsPullMax        int
	latency          bool
	latencyDuration  time.Duration
	latencyFractions []float64
	latencyRate      float64
	cpuprofile       string
	trace            string
}

// Records per cell, system and run. The default run (2 sizes x 2 policies x
// 3 systems x 3 runs, plus the latency runs) takes about five minutes on a
// 2-core VM. Fewer under sync: JetStream with sync=always fsyncs every
// message (about 10,000 a second here), so 200,000 take it 20 s a run.
const (
	defaultRecords     = 1_000_000
	defaultSyncRecords = 200_000
)

func main() {
	var cfg config
	var sizes, policies, systems, fractions string
	flag.IntVar(&cfg.records, "records", defaultRecords, "records per cell, system and run under none (and under sync too, unless --sync-records is given)")
	flag.IntVar(&cfg.syncRecords, "sync-records", defaultSyncRecords, "records per cell, system and run under sync")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per cell; the table shows the median")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the data (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.BoolVar(&cfg.verbose, "verbose", false, "print every run to stderr")
	flag.StringVar(&sizes, "sizes", "128,1024", "record value sizes in bytes, comma-separated")
	flag.StringVar(&policies, "policies", "none,sync", "flush policies, comma-separated: none, sync")
	flag.StringVar(&systems, "systems", "spool,jetstream", "systems, comma-separated: spool, jetstream")
	flag.Int64Var(&spoolSegmentBytes, "spool-segment-bytes", 0, "spool's segment size in bytes (0: the default, 1 GiB); a roll seals a segment, and under log.None leaves its fsync to the next checkpoint")
	flag.IntVar(&cfg.spoolPartitions, "spool-partitions", 6, "also run spool with a topic of this many partitions, as an extra row (0: don't)")
	flag.StringVar(&cfg.natsConn, "nats-conn", "inprocess", "how nats.go reaches the embedded server: inprocess (nats.InProcessServer) or tcp (127.0.0.1, random port)")
	flag.StringVar(&cfg.jsConsumer, "js-consumer", "push", "JetStream's ordered consumer: pull (the jetstream package's OrderedConsumer) or push (nats.go's original API, nats.OrderedConsumer)")
	flag.IntVar(&cfg.jsPullMax, "js-pull-max", 0, "PullMaxMessages of JetStream's pull consumer (0: the client's default, 500)")
	flag.BoolVar(&cfg.latency, "latency", true, "measure spool's produce-to-consume latency at half the maximum rate (128 B records)")
	flag.DurationVar(&cfg.latencyDuration, "latency-duration", 5*time.Second, "how long each latency run produces")
	flag.StringVar(&fractions, "latency-fraction", "0.1,0.5,0.9", "the latency test's rates as fractions of the publish rate measured for its cell, comma-separated")
	flag.Float64Var(&cfg.latencyRate, "latency-rate", 0, "the latency test's rate in records/s, instead of --latency-fraction")
	flag.StringVar(&cfg.trace, "latency-trace", "", "write an execution trace of the latency runs to this file (go tool trace)")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file; samples carry the label system=spool|jetstream (go tool pprof -tagfocus system=spool)")
	flag.Parse()

	var err error
	if cfg.sizes, err = report.Ints(sizes, 16); err != nil {
		fatalf("--sizes: %v", err)
	}
	for f := range strings.SplitSeq(fractions, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			fatalf("--latency-fraction: %q is not a fraction in (0, 1]", f)
		}
		cfg.latencyFractions = append(cfg.latencyFractions, v)
	}
	for p := range strings.SplitSeq(policies, ",") {
		if p != "sync" && p != "none" {
			fatalf("--policies: %q is not none or sync", p)
		}
		cfg.policies = append(cfg.policies, p)
	}
	for s := range strings.SplitSeq(systems, ",") {
		if s != "spool" && s != "jetstream" {
			fatalf("--systems: unknown system %q", s)
		}
		cfg.systems = append(cfg.systems, s)
	}
	if cfg.natsConn != "inprocess" && cfg.natsConn != "tcp" {
		fatalf("--nats-conn: %q is not inprocess or tcp", cfg.natsConn)
	}
	if cfg.jsConsumer != "pull" && cfg.jsConsumer != "push" {
		fatalf("--js-consumer: %q is not pull or push", cfg.jsConsumer)
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["records"] && !set["sync-records"] {
		cfg.syncRecords = cfg.records
	}
	if cfg.runs < 1 || cfg.records < 1 || cfg.syncRecords < 1 || cfg.spoolPartitions < 0 {
		fatalf("--runs, --records and --sync-records must be at least 1, --spool-partitions not negative")
	}
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "brokerbench-")
		if err != nil {
			fatalf("%v", err)
		}
		defer os.RemoveAll(d)
		cfg.dir = d
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if err := run(cfg, os.Stdout); err != nil {
		pprof.StopCPUProfile()
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "brokerbench: "+format+"\n", args...)
	os.Exit(1)
}

// cell is one point of the matrix.
type cell struct {
	size    int
	policy  string
	records int
}

func (c cell) sync() bool { return c.policy == "sync" }

// result is one system's run in one cell.
type result struct {
	records int
	publish time.Duration // first publish to the last acknowledgement
	replay  time.Duration // subscribe/seek to the last record read
}

func (r result) publishRate() float64 { return float64(r.records) / r.publish.Seconds() }
func (r result) replayRate() float64  { return float64(r.records) / r.replay.Seconds() }

// system is a broker under test. run opens it in dir (not timed), publishes
// and replays c.records records (timed separately), and closes it.
type system interface {
	name() string
	run(ctx context.Context, dir string, c cell) (result, error)
}

func newSystems(cfg config) []system {
	var out []system
	for _, s := range cfg.systems {
		switch s {
		case "spool":
			out = append(out, &spoolSystem{partitions: 1})
			if cfg.spoolPartitions > 1 {
				out = append(out, &spoolSystem{partitions: cfg.spoolPartitions})
			}
		case "jetstream":
			out = append(out, &jetStreamSystem{conn: cfg.natsConn, consumer: cfg.jsConsumer, pullMax: cfg.jsPullMax})
		}
	}
	return out
}

func run(cfg config, out io.Writer) error {
	ctx := context.Background()
	sys := newSystems(cfg)
	var cells []cell
	for _, size := range cfg.sizes {
		for _, p := range cfg.policies {
			n := cfg.records
			if p == "sync" {
				n = cfg.syncRecords
			}
			cells = append(cells, cell{size, p, n})
		}
	}
	fmt.Fprintf(out, "brokerbench: %s %s/%s, GOMAXPROCS=%d, %d runs (median), dir %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.runs, cfg.dir)
	fmt.Fprintf(out, "records per cell, system and run: %d under none, %d under sync; nats-server %s, nats.go %s, %s connection, %s ordered consumer\n",
		cfg.records, cfg.syncRecords, natsServerVersion(), natsClientVersion(), cfg.natsConn, cfg.jsConsumer)
	start := time.Now()
	rows := make([][]result, len(cells)) // [cell][system] medians
	for i, c := range cells {
		runs := make([][]result, len(sys)) // [system][run]
		for r := range cfg.runs {
			for k := range sys {
				j := (k + r + i) % len(sys) // take turns going first
				dir := filepath.Join(cfg.dir, fmt.Sprintf("size%d-%s-run%d-%s", c.size, c.policy, r, sys[j].name()))
				res, err := measure(ctx, sys[j], dir, c)
				if rerr := os.RemoveAll(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("%s, size %d, %s: %w", sys[j].name(), c.size, c.policy, err)
				}
				if cfg.verbose {
					fmt.Fprintf(os.Stderr, "size=%d flush=%s run=%d %-10s publish %10.0f rec/s (%v)  replay %10.0f rec/s (%v)\n",
						c.size, c.policy, r, sys[j].name(), res.publishRate(), res.publish.Round(time.Millisecond),
						res.replayRate(), res.replay.Round(time.Millisecond))
				}
				runs[j] = append(runs[j], res)
			}
		}
		rows[i] = make([]result, len(sys))
		for j := range sys {
			rows[i][j] = median(runs[j])
		}
	}
	printThroughput(out, cfg, sys, cells, rows)

	if cfg.latency && slices.Contains(cfg.systems, "spool") {
		var lat []latencyRow
		if cfg.trace != "" {
			f, err := os.Create(cfg.trace)
			if err != nil {
				return err
			}
			if err := trace.Start(f); err != nil {
				return err
			}
			defer func() { trace.Stop(); f.Close() }()
		}
		for i, c := range cells {
			if c.size != 128 {
				continue
			}
			fractions := cfg.latencyFractions
			if cfg.latencyRate > 0 {
				fractions = []float64{0}
			}
			for _, f := range fractions {
				rate := rows[i][0].publishRate() * f // sys[0] is spool with one partition
				if cfg.latencyRate > 0 {
					rate = cfg.latencyRate
				}
				row, err := measureLatency(ctx, cfg, c, rate)
				if err != nil {
					return fmt.Errorf("latency, %s: %w", c.policy, err)
				}
				row.fraction = f
				lat = append(lat, row)
			}
		}
		if len(lat) > 0 {
			fs, err := measureFsync(cfg.dir, 2000)
			if err != nil {
				return fmt.Errorf("fsync loop: %w", err)
			}
			printLatency(out, cfg, lat, fs)
		}
	}
	fmt.Fprintf(out, "total time %v\n", time.Since(start).Round(time.Second))
	return nil
}

// measure runs one system once in a fresh dir.
func measure(ctx context.Context, sys system, dir string, c cell) (res result, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return result{}, err
	}
	// Start every measurement from a clean page cache: no earlier run's
	// dirty pages being written back, no throttling inherited from it.
	syscall.Sync()
	runtime.GC()
	pprof.Do(ctx, pprof.Labels("system", sys.name()), func(ctx context.Context) {
		res, err = sys.run(ctx, dir, c)
	})
	return res, err
}

// median returns the median publish and the median replay of the runs
// (each taken on its own).
func median(rs []result) result {
	pub := slices.Clone(rs)
	slices.SortFunc(pub, func(a, b result) int { return cmp.Compare(a.publish, b.publish) })
	rep := slices.Clone(rs)
	slices.SortFunc(rep, func(a, b result) int { return cmp.Compare(a.replay, b.replay) })
	return result{records: rs[0].records, publish: pub[len(pub)/2].publish, replay: rep[len(rep)/2].replay}
}

// valueSource makes record values: size bytes of random letters, the first
// eight carrying the record's index (big-endian) and the next eight a
// timestamp (Unix ns) where the latency test needs one.
type valueSource struct {
	base []byte
}

func newValueSource(size int) *valueSource {
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	v := make([]byte, size)
	for i := range v {
		v[i] = byte('a' + rng.IntN(26))
	}
	return &valueSource{base: v}
}

// fill writes record i's value into dst (len(dst) == size).
func (s *valueSource) fill(dst []byte, i int) {
	copy(dst, s.base)
	binary.BigEndian.PutUint64(dst, uint64(i))
}

// checkValue verifies that v is record i's value (its index and size): the
// replay is complete and in order.
func checkValue(v []byte, i, size int) error {
	if len(v) != size {
		return fmt.Errorf("record %d: value of %d bytes, want %d", i, len(v), size)
	}
	if got := binary.BigEndian.Uint64(v); got != uint64(i) {
		return fmt.Errorf("record %d: read record %d instead (out of order)", i, got)
	}
	return nil
}

func printThroughput(out io.Writer, cfg config, sys []system, cells []cell, rows [][]result) {
	header := []string{"size", "flush", "records", "system", "publish rec/s", "publish MB/s", "replay rec/s", "replay MB/s", "spool/JS publish", "spool/JS replay"}
	js := slices.IndexFunc(sys, func(s system) bool { return s.name() == "jetstream" })
	var lines [][]string
	for i, c := range cells {
		for j, s := range sys {
			r := rows[i][j]
			line := []string{report.SizeName(c.size), policyName(c.policy, s.name()), strconv.Itoa(c.records), s.name(),
				fmt.Sprintf("%.0f", r.publishRate()), fmt.Sprintf("%.1f", r.publishRate()*float64(c.size)/1e6),
				fmt.Sprintf("%.0f", r.replayRate()), fmt.Sprintf("%.1f", r.replayRate()*float64(c.size)/1e6)}
			if js >= 0 && j != js {
				line = append(line,
					fmt.Sprintf("%.2fx", r.publishRate()/rows[i][js].publishRate()),
					fmt.Sprintf("%.2fx", r.replayRate()/rows[i][js].replayRate()))
			} else {
				line = append(line, "", "")
			}
			lines = append(lines, line)
		}
	}
	report.Table(out, cfg.markdown, header, lines)
}

// policyName names the flush policy as each system spells it.
func policyName(policy, system string) string {
	switch {
	case system == "jetstream" && policy == "sync":
		return "sync (always)"
	case system == "jetstream":
		return "none (2 min)"
	case policy == "sync":
		return "sync (log.Sync)"
	}
	return "none (log.None)"
}
