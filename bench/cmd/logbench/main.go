// Command logbench compares spool's log with the physical baseline (the same
// bytes written with os.File.Write) and with github.com/tidwall/wal, side by
// side, in one run, under equal batching and flush settings.
//
//	cd bench && go run ./cmd/logbench [--duration 2s | --records N] [--runs 3] [--markdown]
//
// For every cell of the matrix - record size x records per batch x flush
// policy - each system appends the same records, one batch per call, into a
// fresh directory, for --duration (or --records). Each cell runs --runs times,
// the systems taking turns within a run so that drift of a noisy machine hits
// all of them alike, and the table reports the median run of each system.
// See README.md for what exactly is measured.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"time"

	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/tidwall/wal"
)

type config struct {
	duration     time.Duration
	records      int
	runs         int
	dir          string
	markdown     bool
	verbose      bool
	sizes        []int
	batches      []int
	policies     []string
	segmentBytes int64
	systems      []string
}

func main() {
	var cfg config
	var sizes, batches, policies, systemNames string
	flag.DurationVar(&cfg.duration, "duration", 2*time.Second, "how long each system writes in each cell and run")
	flag.IntVar(&cfg.records, "records", 0, "write this many records per cell and run instead of for --duration")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per cell; the table shows the median")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the data (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print a markdown table")
	flag.BoolVar(&cfg.verbose, "verbose", false, "print every run to stderr")
	flag.StringVar(&sizes, "sizes", "100,1024", "record value sizes in bytes, comma-separated")
	flag.StringVar(&batches, "batches", "1,100,1000", "records per batch, comma-separated")
	flag.StringVar(&policies, "policies", "sync,none", "flush policies, comma-separated: sync, none")
	flag.StringVar(&systemNames, "systems", "spool,raw,tidwall", "systems, comma-separated: spool, raw, tidwall, spool-batch (spool's AppendBatch of a pre-encoded batch); the ratios need the first three")
	flag.Int64Var(&cfg.segmentBytes, "segment-bytes", 0, "spool's SegmentBytes (0: the library default, 1 GiB)")
	flag.Parse()

	var err error
	if cfg.sizes, err = report.Ints(sizes, 1); err != nil {
		fatalf("--sizes: %v", err)
	}
	if cfg.batches, err = report.Ints(batches, 1); err != nil {
		fatalf("--batches: %v", err)
	}
	for p := range strings.SplitSeq(policies, ",") {
		if p != "sync" && p != "none" {
			fatalf("--policies: %q is not sync or none", p)
		}
		cfg.policies = append(cfg.policies, p)
	}
	for name := range strings.SplitSeq(systemNames, ",") {
		if newSystem(name, cfg) == nil {
			fatalf("--systems: unknown system %q", name)
		}
		cfg.systems = append(cfg.systems, name)
	}
	if cfg.runs < 1 {
		fatalf("--runs must be at least 1")
	}
	if cfg.records < 0 || cfg.duration <= 0 && cfg.records == 0 {
		fatalf("need a positive --duration or --records")
	}
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "logbench-")
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

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "logbench: "+format+"\n", args...)
	os.Exit(1)
}

// cell is one point of the matrix.
type cell struct {
	size   int
	batch  int
	policy string
}

func (c cell) sync() bool { return c.policy == "sync" }

// result is one system's run in one cell.
type result struct {
	records int64
	elapsed time.Duration
	mallocs uint64
	batches int64
}

func (r result) recordsPerSec() float64 { return float64(r.records) / r.elapsed.Seconds() }

// system is a log implementation under test. open prepares it to write the
// cell's records in dir; write appends one batch of them.
type system interface {
	name() string
	open(dir string, c cell, recs []record.Record) error
	write() error
	close() error
}

func newSystem(name string, cfg config) system {
	switch name {
	case "spool":
		return &spoolLog{segmentBytes: cfg.segmentBytes}
	case "spool-batch":
		return &spoolLog{segmentBytes: cfg.segmentBytes, preEncoded: true}
	case "raw":
		return &rawFile{}
	case "tidwall":
		return &tidwallWAL{}
	}
	return nil
}

func run(cfg config, out io.Writer) error {
	var sys []system
	for _, name := range cfg.systems {
		sys = append(sys, newSystem(name, cfg))
	}
	var cells []cell
	for _, size := range cfg.sizes {
		for _, batch := range cfg.batches {
			for _, p := range cfg.policies {
				cells = append(cells, cell{size, batch, p})
			}
		}
	}
	fmt.Fprintf(out, "logbench: %s %s/%s, GOMAXPROCS=%d, %s per cell and system, %d runs (median), dir %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), budget(cfg), cfg.runs, cfg.dir)
	start := time.Now()
	rows := make([][]result, len(cells)) // [cell][system] medians
	for i, c := range cells {
		recs := makeRecords(c.batch, c.size)
		runs := make([][]result, len(sys)) // [system][run]
		for r := range cfg.runs {
			for k := range sys {
				j := (k + r) % len(sys) // take turns going first
				dir := filepath.Join(cfg.dir, fmt.Sprintf("size%d-batch%d-%s-run%d-%s", c.size, c.batch, c.policy, r, sys[j].name()))
				res, err := measure(cfg, sys[j], dir, c, recs)
				if rerr := os.RemoveAll(dir); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("%s, size %d, batch %d, %s: %w", sys[j].name(), c.size, c.batch, c.policy, err)
				}
				if cfg.verbose {
					fmt.Fprintf(os.Stderr, "size=%d batch=%d flush=%s run=%d %-8s %12.0f records/s %8.2f allocs/batch %v\n",
						c.size, c.batch, c.policy, r, sys[j].name(), res.recordsPerSec(),
						float64(res.mallocs)/float64(res.batches), res.elapsed.Round(time.Millisecond))
				}
				runs[j] = append(runs[j], res)
			}
		}
		rows[i] = make([]result, len(sys))
		for j := range sys {
			rows[i][j] = median(runs[j])
		}
	}
	printTable(out, cfg, sys, cells, rows)
	fmt.Fprintf(out, "total time %v\n", time.Since(start).Round(time.Second))
	return nil
}

func budget(cfg config) string {
	if cfg.records > 0 {
		return fmt.Sprintf("%d records", cfg.records)
	}
	return cfg.duration.String()
}

// measure opens sys in a fresh dir and writes batches of recs until the
// budget is spent. Opening and closing are not timed.
func measure(cfg config, sys system, dir string, c cell, recs []record.Record) (result, error) {
	if err := os.RemoveAll(dir); err != nil {
		return result{}, err
	}
	// Start every measurement from a clean page cache: no earlier cell's
	// dirty pages being written back, no throttling inherited from it.
	syscall.Sync()
	if err := sys.open(dir, c, recs); err != nil {
		return result{}, err
	}
	var batches int64
	want := int64(-1)
	if cfg.records > 0 {
		want = int64(max(1, cfg.records/c.batch))
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	var elapsed time.Duration
	for {
		if err := sys.write(); err != nil {
			sys.close()
			return result{}, err
		}
		batches++
		if want > 0 {
			if batches == want {
				elapsed = time.Since(start)
				break
			}
		} else if elapsed = time.Since(start); elapsed >= cfg.duration {
			break
		}
	}
	runtime.ReadMemStats(&m1)
	if err := sys.close(); err != nil {
		return result{}, err
	}
	return result{
		records: batches * int64(c.batch),
		elapsed: elapsed,
		mallocs: m1.Mallocs - m0.Mallocs,
		batches: batches,
	}, nil
}

// median returns the run with the median records/s, with the median of the
// runs' allocations per batch.
func median(rs []result) result {
	byRate := slices.Clone(rs)
	slices.SortFunc(byRate, func(a, b result) int {
		switch x, y := a.recordsPerSec(), b.recordsPerSec(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	m := byRate[len(byRate)/2]
	allocs := make([]float64, len(rs))
	for i, r := range rs {
		allocs[i] = float64(r.mallocs) / float64(r.batches)
	}
	slices.Sort(allocs)
	// Keep the median run's rate; carry the median allocation rate in
	// mallocs/batches scaled to it.
	m.mallocs = uint64(allocs[len(allocs)/2]*float64(m.batches) + 0.5)
	return m
}

// makeRecords returns n records with size-byte values (random letters) and
// short keys, without timestamps: spool stamps the append time.
func makeRecords(n, size int) []record.Record {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte('a' + rng.IntN(26))
		}
		recs[i] = record.Record{Key: []byte("key-" + strconv.Itoa(i)), Value: v}
	}
	return recs
}

// spoolLog appends each batch with log.Append(recs...): encoding, offset
// assignment, indexing and (under sync) the fsync are all inside the call.
// With preEncoded it appends the batch encoded up front with
// log.AppendBatch instead, as a broker does a producer's batch: verified
// (CRC, record framing), not encoded.
type spoolLog struct {
	segmentBytes int64
	preEncoded   bool
	l            *log.Log
	recs         []record.Record
	batch        record.Batch
}

func (s *spoolLog) name() string {
	if s.preEncoded {
		return "spool-batch"
	}
	return "spool"
}

func (s *spoolLog) open(dir string, c cell, recs []record.Record) error {
	p := log.None
	if c.sync() {
		p = log.Sync
	}
	l, err := log.Open(dir, log.Options{Flush: p, SegmentBytes: s.segmentBytes, MaxMessageBytes: 64 << 20})
	if err != nil {
		return err
	}
	s.l, s.recs = l, recs
	if s.preEncoded {
		buf, err := record.AppendBatch(nil, recs, record.BatchOptions{Now: time.Now()})
		if err == nil {
			s.batch, _, err = record.ParseBatch(buf)
		}
		if err != nil {
			l.Close()
			return err
		}
	}
	return nil
}

func (s *spoolLog) write() error {
	if s.preEncoded {
		// The same bytes every time: AppendBatch restamps the base
		// offset (outside the CRC) and keeps no reference to them.
		_, err := s.l.AppendBatch(s.batch)
		return err
	}
	_, err := s.l.Append(s.recs...)
	return err
}

func (s *spoolLog) close() error { return s.l.Close() }

// rawFile writes the exact bytes of the batch spool would write (encoded once,
// up front) with one os.File.Write per batch, plus os.File.Sync under sync:
// the cost of the system calls alone, with no encoding, indexing or
// bookkeeping.
type rawFile struct {
	f    *os.File
	buf  []byte
	sync bool
}

func (r *rawFile) name() string { return "raw" }

func (r *rawFile) open(dir string, c cell, recs []record.Record) error {
	buf, err := record.AppendBatch(nil, recs, record.BatchOptions{Now: time.Now()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "00000000000000000000.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	r.f, r.buf, r.sync = f, buf, c.sync()
	return nil
}

func (r *rawFile) write() error {
	if _, err := r.f.Write(r.buf); err != nil {
		return err
	}
	if r.sync {
		return r.f.Sync()
	}
	return nil
}

func (r *rawFile) close() error {
	return errors.Join(r.f.Sync(), r.f.Close())
}

// tidwallWAL writes each batch as one wal.Batch holding the records' values
// as entries, with NoSync for none. Its other options are its defaults (20 MB
// segments).
type tidwallWAL struct {
	w      *wal.Log
	values [][]byte
	next   uint64
	batch  wal.Batch
}

func (t *tidwallWAL) name() string { return "tidwall" }

func (t *tidwallWAL) open(dir string, c cell, recs []record.Record) error {
	opts := *wal.DefaultOptions
	opts.NoSync = !c.sync()
	w, err := wal.Open(dir, &opts)
	if err != nil {
		return err
	}
	t.w, t.next = w, 1
	t.values = t.values[:0]
	for _, r := range recs {
		t.values = append(t.values, r.Value)
	}
	t.batch.Clear()
	return nil
}

func (t *tidwallWAL) write() error {
	for _, v := range t.values {
		t.batch.Write(t.next, v)
		t.next++
	}
	return t.w.WriteBatch(&t.batch)
}

func (t *tidwallWAL) close() error { return t.w.Close() }

// printTable prints one row per cell: each system's records/s, MB/s (record
// values) and allocations per batch, then spool's rate relative to the others.
func printTable(out io.Writer, cfg config, sys []system, cells []cell, rows [][]result) {
	header := []string{"size", "batch", "flush"}
	for _, s := range sys {
		header = append(header, s.name()+" rec/s", s.name()+" MB/s", s.name()+" allocs/batch")
	}
	idx := map[string]int{}
	for i, s := range sys {
		idx[s.name()] = i
	}
	ratios := [][2]string{{"spool", "raw"}, {"spool", "tidwall"}, {"spool-batch", "raw"}}
	var shown [][2]int
	for _, r := range ratios {
		a, aok := idx[r[0]]
		b, bok := idx[r[1]]
		if aok && bok {
			header = append(header, r[0]+"/"+r[1])
			shown = append(shown, [2]int{a, b})
		}
	}
	var lines [][]string
	for i, c := range cells {
		line := []string{report.SizeName(c.size), strconv.Itoa(c.batch), c.policy}
		for _, r := range rows[i] {
			rate := r.recordsPerSec()
			line = append(line,
				fmt.Sprintf("%.0f", rate),
				fmt.Sprintf("%.1f", rate*float64(c.size)/1e6),
				fmt.Sprintf("%.2f", float64(r.mallocs)/float64(r.batches)))
		}
		for _, r := range shown {
			ratio := rows[i][r[0]].recordsPerSec() / rows[i][r[1]].recordsPerSec()
			if sys[r[1]].name() == "raw" {
				line = append(line, fmt.Sprintf("%.0f%%", 100*ratio))
			} else {
				line = append(line, fmt.Sprintf("%.2fx", ratio))
			}
		}
		lines = append(lines, line)
	}
	report.Table(out, cfg.markdown, header, lines)
}
