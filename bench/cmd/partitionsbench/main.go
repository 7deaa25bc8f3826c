// Command partitionsbench measures what an embedded spool broker costs per
// partition (issue 16, item 2): N partitions on one broker, RF=1.
//
//	cd bench && go run ./cmd/partitionsbench [--partitions 1000] [--topics 1] [--records 200000] [--markdown] [--cpuprofile file]
//
// Every phase runs in a child process (this binary re-executed with
// --child), so that each measures a fresh process and a crash can be a real
// SIGKILL:
//
//   - create: open an empty broker, create the topics (--topics topics of
//     --partitions/--topics partitions each), measure, close cleanly;
//   - open: open after the clean close (time), measure the idle broker -
//     resident memory (VmRSS), open file descriptors (/proc/self/fd, by
//     kind), goroutines, and the disk the data directory uses while open
//     (allocated blocks and apparent size) - then close (time);
//   - crash: open, append one record to every partition, then the parent
//     SIGKILLs it;
//   - open after the crash (time, and what the open checked);
//   - produce: --records 100-byte records over a topic of 10 partitions,
//     then as many round-robin over the N partitions, twice, in one process,
//     with the Flush None policy and one in-process Producer (defaults:
//     acks all, linger 5 ms); the table gives the best rate of each and
//     their ratio.
//
// The per-partition figures are the idle process's figure minus the same
// figure measured after spool.Open of an empty directory in the create
// phase (the broker's fixed cost), divided by N.
//
// Disk: an open partition's index files grow with their entries (an empty
// active segment takes a first 4 KiB step of each; before issue 16 they
// were preallocated whole, 20 MiB a partition), and the produce phase
// writes its records. So as not to fill a shared disk, the tool refuses to
// start (and each phase to run) with less than --min-free bytes free on the
// file system of --dir.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
)

type config struct {
	partitions int
	topics     int
	records    int
	dir        string
	minFree    int64
	markdown   bool
	keep       bool
	phases     string
	memProfile string
	cpuProfile string
	// maxOpenFiles is the broker's Options.MaxOpenSegmentFiles (0: its
	// default).
	maxOpenFiles int
}

// measure is what one child reports, as one JSON line on stdout.
type measure struct {
	Phase      string         `json:"phase"`
	OpenSec    float64        `json:"open_sec"`
	CloseSec   float64        `json:"close_sec"`
	CreateSec  float64        `json:"create_sec"`
	BaseRSS    int64          `json:"base_rss"` // after opening an empty broker (create phase), or before Open
	RSS        int64          `json:"rss"`
	RSSFile    int64          `json:"rss_file"` // of RSS: file-backed pages (the indexes' maps)
	BaseFile   int64          `json:"base_rss_file"`
	HeapInuse  int64          `json:"heap_inuse"`
	BaseFDs    int            `json:"base_fds"`
	FDs        int            `json:"fds"`
	FDKinds    map[string]int `json:"fd_kinds"`
	BaseGor    int            `json:"base_goroutines"`
	Goroutines int            `json:"goroutines"`
	DiskAlloc  int64          `json:"disk_alloc"`
	DiskSize   int64          `json:"disk_size"`
	Clean      int            `json:"clean"` // partitions whose log opened clean
	Checked    int            `json:"checked"`
	RateMany   float64        `json:"rate_many"` // records/s over N partitions
	RateTen    float64        `json:"rate_ten"`  // records/s over 10 partitions
	Err        string         `json:"err,omitempty"`
}

func main() {
	var cfg config
	child := flag.String("child", "", "internal: run one phase in this process (create, open, crash, produce)")
	flag.IntVar(&cfg.partitions, "partitions", 1000, "partitions in all (N)")
	flag.IntVar(&cfg.topics, "topics", 1, "topics the N partitions are spread over (N/topics partitions each)")
	flag.IntVar(&cfg.records, "records", 200000, "100-byte records produced in each half of the produce phase (0: skip it)")
	flag.StringVar(&cfg.dir, "dir", "", "data directory (default: a new temporary directory, removed at the end)")
	flag.Int64Var(&cfg.minFree, "min-free", 5<<30, "abort when the data directory's file system has fewer free bytes")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print a markdown table")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the data directory")
	flag.IntVar(&cfg.maxOpenFiles, "max-open-segment-files", 0, "the broker's bound on open segment files, Options.MaxOpenSegmentFiles (0: its default, half the open-file limit; negative: none)")
	flag.StringVar(&cfg.phases, "phases", "create,open,crash,produce", "phases to run, in this order")
	flag.StringVar(&cfg.memProfile, "memprofile", "", "write a heap profile of the idle broker after the open phase to this file")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of each phase, from Open to Close, to this file with .<phase> appended (open after a crash: .open-after-crash)")
	flag.Parse()
	if cfg.partitions < 1 || cfg.topics < 1 || cfg.partitions%cfg.topics != 0 {
		fatalf("--partitions must be a positive multiple of --topics")
	}
	if *child != "" {
		if cfg.memProfile != "" {
			runtime.MemProfileRate = 1 // every allocation, for a small N
		}
		m, err := runChild(*child, cfg)
		if err != nil {
			m.Err = err.Error()
		}
		json.NewEncoder(os.Stdout).Encode(m)
		if err != nil {
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "partitionsbench: "+format+"\n", args...)
	os.Exit(1)
}

func topicName(i int) string { return fmt.Sprintf("many-%04d", i) }

const tenTopic = "ten"

// ---------------------------------------------------------------- parent

func run(cfg config) error {
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "partitionsbench-")
		if err != nil {
			return err
		}
		cfg.dir = d
		if !cfg.keep {
			defer os.RemoveAll(d)
		}
	}
	data := filepath.Join(cfg.dir, "data")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("partitionsbench: %d partitions (%d topics x %d), dir %s, %d CPUs, load %s\n",
		cfg.partitions, cfg.topics, cfg.partitions/cfg.topics, cfg.dir, runtime.NumCPU(), report.LoadAvg())

	results := map[string]measure{}
	var order []string
	for ph := range strings.SplitSeq(cfg.phases, ",") {
		if err := checkFree(cfg.dir, cfg.minFree); err != nil {
			return err
		}
		var m measure
		switch ph {
		case "create", "open", "produce":
			m, err = runPhase(self, ph, cfg, data, false)
			if ph == "open" {
				if _, ok := results["open"]; ok {
					ph = "open-after-crash"
					m.Phase = ph
				}
			}
		case "crash":
			m, err = runPhase(self, ph, cfg, data, true)
			if err == nil {
				results[ph] = m
				order = append(order, ph)
				if err = checkFree(cfg.dir, cfg.minFree); err != nil {
					return err
				}
				ph = "open-after-crash"
				m, err = runPhase(self, "open", cfg, data, false)
				m.Phase = ph
			}
		default:
			return fmt.Errorf("unknown phase %q", ph)
		}
		if err != nil {
			return fmt.Errorf("phase %s: %w", ph, err)
		}
		results[ph] = m
		order = append(order, ph)
	}
	printTable(cfg, results, order)
	return nil
}

// runPhase runs one phase in a child process. A crash child is killed with
// SIGKILL once it has reported.
func runPhase(self, phase string, cfg config, data string, kill bool) (measure, error) {
	args := []string{"--child", phase, "--dir", data, "--memprofile", cfg.memProfile, "--cpuprofile", cfg.cpuProfile,
		"--partitions", strconv.Itoa(cfg.partitions), "--topics", strconv.Itoa(cfg.topics),
		"--records", strconv.Itoa(cfg.records), "--max-open-segment-files", strconv.Itoa(cfg.maxOpenFiles)}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return measure{}, err
	}
	if err := cmd.Start(); err != nil {
		return measure{}, err
	}
	line, rerr := bufio.NewReader(out).ReadBytes('\n')
	var m measure
	if rerr == nil {
		rerr = json.Unmarshal(line, &m)
	}
	if kill {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	} else if err := cmd.Wait(); err != nil && m.Err == "" {
		return m, fmt.Errorf("child: %w", err)
	}
	if m.Err != "" {
		return m, errors.New(m.Err)
	}
	return m, rerr
}

func checkFree(dir string, min int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * st.Bsize
	if free < min {
		return fmt.Errorf("only %s free on the file system of %s (--min-free %s): stopping", mib(free), dir, mib(min))
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func kib(n float64) string { return fmt.Sprintf("%.1f KiB", n/1024) }

func printTable(cfg config, r map[string]measure, order []string) {
	n := float64(cfg.partitions)
	var lines [][]string
	add := func(k string, v ...string) { lines = append(lines, append([]string{k}, v...)) }
	c, hasCreate := r["create"]
	if hasCreate {
		add("create topics", fmt.Sprintf("%.3f s", c.CreateSec), fmt.Sprintf("%.0f µs", c.CreateSec*1e6/n))
	}
	for _, ph := range []string{"open", "open-after-crash"} {
		m, ok := r[ph]
		if !ok {
			continue
		}
		add(ph+": time", fmt.Sprintf("%.3f s", m.OpenSec), fmt.Sprintf("%.0f µs", m.OpenSec*1e6/n))
		add(ph+": logs opened clean", fmt.Sprintf("%d of %d", m.Clean, m.Clean+m.Checked), "")
		baseRSS, baseFDs, baseGor, baseFile := m.BaseRSS, m.BaseFDs, m.BaseGor, m.BaseFile
		if hasCreate { // the empty broker's fixed cost
			baseRSS, baseFDs, baseGor, baseFile = c.BaseRSS, c.BaseFDs, c.BaseGor, c.BaseFile
		}
		add(ph+": RSS", mib(m.RSS), kib(float64(m.RSS-baseRSS)/n))
		add(ph+": of RSS, file-backed (RssFile)", mib(m.RSSFile), kib(float64(m.RSSFile-baseFile)/n))
		add(ph+": Go heap in use", mib(m.HeapInuse), kib(float64(m.HeapInuse)/n))
		add(ph+": open fds", strconv.Itoa(m.FDs), fmt.Sprintf("%.2f", float64(m.FDs-baseFDs)/n))
		add(ph+": goroutines", strconv.Itoa(m.Goroutines), fmt.Sprintf("%.2f", float64(m.Goroutines-baseGor)/n))
		add(ph+": disk allocated", mib(m.DiskAlloc), kib(float64(m.DiskAlloc)/n))
		add(ph+": disk apparent size", mib(m.DiskSize), kib(float64(m.DiskSize)/n))
		if ph == "open" {
			add("close (clean)", fmt.Sprintf("%.3f s", m.CloseSec), fmt.Sprintf("%.0f µs", m.CloseSec*1e6/n))
		}
	}
	if m, ok := r["produce"]; ok {
		add("produce 100 B round-robin over N", fmt.Sprintf("%.0f rec/s", m.RateMany), "")
		add("produce 100 B over 10 partitions", fmt.Sprintf("%.0f rec/s", m.RateTen), "")
		add("ratio N / 10", fmt.Sprintf("%.2fx", m.RateMany/m.RateTen), "")
	}
	report.Table(os.Stdout, cfg.markdown, []string{fmt.Sprintf("N=%d (%d topics)", cfg.partitions, cfg.topics), "total", "per partition"}, lines)
	if m, ok := r["open"]; ok {
		fmt.Printf("open fds by kind, per partition: %s\n", fdKinds(m.FDKinds, n))
	}
}

func fdKinds(k map[string]int, n float64) string {
	var names []string
	for name := range k {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		if v := float64(k[name]) / n; v >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v))
		}
	}
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------- child

func runChild(phase string, cfg config) (measure, error) {
	m := measure{Phase: phase}
	ctx := context.Background()
	opts := spool.Options{Flush: log.None, MaxOpenSegmentFiles: cfg.maxOpenFiles}
	m.BaseRSS, m.BaseFDs, m.BaseGor, m.BaseFile = rss(), countFDs(nil), runtime.NumGoroutine(), status("RssFile:")
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile, phase, cfg.dir)
		if err != nil {
			return m, err
		}
		defer stop()
	}
	began := time.Now()
	b, err := spool.Open(cfg.dir, opts)
	if err != nil {
		return m, err
	}
	m.OpenSec = time.Since(began).Seconds()
	closed := false
	defer func() {
		if !closed {
			b.Close()
		}
	}()
	per := cfg.partitions / cfg.topics
	switch phase {
	case "create":
		settle()
		m.BaseRSS, m.BaseFDs, m.BaseGor, m.BaseFile = rss(), countFDs(nil), runtime.NumGoroutine(), status("RssFile:")
		began = time.Now()
		for i := range cfg.topics {
			if err := b.CreateTopic(ctx, topicName(i), spool.TopicConfig{Partitions: int32(per)}); err != nil {
				return m, err
			}
		}
		m.CreateSec = time.Since(began).Seconds()
	case "open":
		for i := range cfg.topics {
			for p := range per {
				part, err := b.Partition(topicName(i), int32(p))
				if err != nil {
					return m, err
				}
				if part.Recovery().Clean {
					m.Clean++
				} else {
					m.Checked++
				}
			}
		}
	case "crash":
		prod, err := b.NewProducer(spool.ProducerConfig{Partitioner: partition.ManualPartitioner()})
		if err != nil {
			return m, err
		}
		val := make([]byte, 100)
		for i := range cfg.topics {
			for p := range per {
				prod.Produce(ctx, spool.Record{Topic: topicName(i), Partition: int32(p), Value: val}, nil)
			}
		}
		if err := prod.Flush(ctx); err != nil {
			return m, err
		}
		// No Close: the parent kills this process once it has reported.
	case "produce":
		// The topic of 10 partitions exists only in this phase, so that
		// it does not count in the others.
		if err := b.CreateTopic(ctx, tenTopic, spool.TopicConfig{Partitions: 10}); err != nil {
			return m, err
		}
		// Two rounds, taking turns, the best of each kept: a noisy
		// machine and warm-up hit both alike.
		for range 2 {
			ten, err := produce(ctx, b, cfg, func(i int) (string, int32) { return tenTopic, int32(i % 10) })
			if err != nil {
				return m, err
			}
			many, err := produce(ctx, b, cfg, func(i int) (string, int32) {
				p := i % cfg.partitions
				return topicName(p / per), int32(p % per)
			})
			if err != nil {
				return m, err
			}
			m.RateMany, m.RateTen = max(m.RateMany, many), max(m.RateTen, ten)
		}
	}
	settle()
	m.RSS, m.Goroutines = rss(), runtime.NumGoroutine()
	m.RSSFile = status("RssFile:")
	m.FDKinds = map[string]int{}
	m.FDs = countFDs(m.FDKinds)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.HeapInuse = int64(ms.HeapInuse)
	m.DiskAlloc, m.DiskSize = diskUsage(cfg.dir)
	if phase == "open" && cfg.memProfile != "" {
		if err := writeHeapProfile(cfg.memProfile); err != nil {
			return m, err
		}
	}
	if phase == "crash" {
		pprof.StopCPUProfile() // the deferred stop never runs
		json.NewEncoder(os.Stdout).Encode(m)
		select {} // wait for SIGKILL
	}
	began = time.Now()
	closed = true
	if err := b.Close(); err != nil {
		return m, err
	}
	m.CloseSec = time.Since(began).Seconds()
	return m, nil
}

// produce sends cfg.records 100-byte records, record i to where(i), and
// returns the rate at which they were acknowledged.
func produce(ctx context.Context, b *spool.Broker, cfg config, where func(i int) (string, int32)) (float64, error) {
	if cfg.records == 0 {
		return 0, nil
	}
	prod, err := b.NewProducer(spool.ProducerConfig{Partitioner: partition.ManualPartitioner()})
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	var mu sync.Mutex
	var failed error
	cb := func(_ spool.RecordMetadata, err error) {
		if err != nil {
			mu.Lock()
			if failed == nil {
				failed = err
			}
			mu.Unlock()
		}
	}
	val := make([]byte, 100)
	began := time.Now()
	for i := range cfg.records {
		t, p := where(i)
		prod.Produce(ctx, spool.Record{Topic: t, Partition: p, Value: val}, cb)
	}
	if err := prod.Flush(ctx); err != nil {
		return 0, err
	}
	rate := float64(cfg.records) / time.Since(began).Seconds()
	mu.Lock()
	defer mu.Unlock()
	return rate, failed
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// settle lets the garbage of opening go, and returns the freed memory to
// the operating system, before memory is measured.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(200 * time.Millisecond)
}

// rss is the process's resident set (VmRSS) in bytes.
func rss() int64 { return status("VmRSS:") }

// status reads a field of /proc/self/status given in kB, in bytes.
func status(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// countFDs counts the process's open file descriptors, and if kinds is set
// counts them by kind: a file's suffix (.log, .index, ...) or its name.
func countFDs(kinds map[string]int) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		if kinds == nil {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		kinds[fdKind(target)]++
	}
	return len(entries)
}

func fdKind(target string) string {
	if !strings.HasPrefix(target, "/") {
		if i := strings.IndexByte(target, ':'); i > 0 {
			return target[:i] // socket, pipe, anon_inode
		}
		return target
	}
	base := filepath.Base(strings.TrimSuffix(target, " (deleted)"))
	if i := strings.IndexByte(base, '.'); i > 0 {
		return base[i:]
	}
	return base
}

// diskUsage sums the blocks allocated to the files under dir (as du does)
// and their apparent sizes.
func diskUsage(dir string) (alloc, size int64) {
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			alloc += st.Blocks * 512
		}
		size += info.Size()
		return nil
	})
	return alloc, size
}

// startCPUProfile profiles the phase into path.<phase>; an open phase
// after a crash (the data directory holds a log not closed cleanly)
// writes path.open-after-crash.
func startCPUProfile(path, phase, dir string) (stop func(), err error) {
	if phase == "open" {
		if cp, err := log.ReadCheckpoint(filepath.Join(dir, partitionDirOf(0, 0))); err == nil && !cp.CleanShutdown {
			phase = "open-after-crash"
		}
	}
	f, err := os.Create(path + "." + phase)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// partitionDirOf is the directory, under the data directory, of partition
// p of topic t.
func partitionDirOf(t, p int) string { return fmt.Sprintf("%s-%d", topicName(t), p) }
