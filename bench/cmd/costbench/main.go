// Command costbench measures what a Kafka broker spends, in CPU time of its
// own process, per record produced and per record consumed (issue 16, item
// 3): spool's Kafka server (transport.Server on a spool.Broker, flush
// policy log.None) against franz-go's kfake (in memory, and with a data
// dir), each broker alone in a child process, driven by franz-go's kgo from
// this one.
//
//	cd bench && go run ./cmd/costbench [--runs 5] [--records 1000000] [--markdown]
//
// Every run starts a fresh child process per system (this binary re-run
// with --child), creates a topic of --partitions partitions, and reads the
// child's user+system CPU time (/proc/PID/stat) around two phases:
//
//   - produce: one kgo producer (acks=all, idempotent: kgo's defaults;
//     linger 10 ms; no compression) produces --records records of --size
//     bytes and waits for every acknowledgement;
//   - consume: a new kgo client reads them all back from the start.
//
// The table gives CPU seconds per million records (medians of --runs, the
// systems taking turns going first) and spool's ratio to each peer. With
// --cpuprofile-dir, every child writes a CPU profile of its whole life
// (SYSTEM-RUN.pprof).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/bench/kafkabench"
)

func main() {
	var (
		child, childDir, childProfile string
		runs, records, size, parts    int
		systems, profDir              string
		markdown                      bool
	)
	flag.StringVar(&child, "child", "", "internal: run the named system's broker in this process")
	flag.StringVar(&childDir, "child-dir", "", "internal: the child's data directory")
	flag.StringVar(&childProfile, "child-cpuprofile", "", "internal: the child's CPU profile")
	flag.IntVar(&runs, "runs", 5, "runs per system; the table shows medians")
	flag.IntVar(&records, "records", 1_000_000, "records produced and consumed per run")
	flag.IntVar(&size, "size", 100, "record value size in bytes (at least 16)")
	flag.IntVar(&parts, "partitions", 6, "partitions of the topic")
	flag.StringVar(&systems, "systems", strings.Join(kafkabench.Systems, ","), "systems, comma-separated: "+strings.Join(kafkabench.Systems, ", "))
	flag.StringVar(&profDir, "cpuprofile-dir", "", "write each child's CPU profile into this directory")
	flag.BoolVar(&markdown, "markdown", false, "print a markdown table")
	flag.Parse()
	if child != "" {
		if err := runChild(child, childDir, childProfile); err != nil {
			fmt.Fprintln(os.Stderr, "costbench child:", err)
			os.Exit(1)
		}
		return
	}
	sys := strings.Split(systems, ",")
	if profDir != "" {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "costbench:", err)
			os.Exit(1)
		}
	}
	if err := run(sys, runs, records, size, int32(parts), profDir, markdown); err != nil {
		fmt.Fprintln(os.Stderr, "costbench:", err)
		os.Exit(1)
	}
}

// runChild starts the broker, prints its address and serves until its
// standard input closes.
func runChild(name, dir, profile string) error {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	t, err := kafkabench.Start(name, dir)
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", t.Addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return t.Close()
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

func startChild(name, dir, profile string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "--child", name, "--child-dir", dir, "--child-cpuprofile", profile)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		in.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child %s did not start: %q %v", name, line, err)
	}
	return &child{cmd: cmd, stdin: in, addr: strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))}, nil
}

func (c *child) stop() error {
	c.stdin.Close()
	return c.cmd.Wait()
}

// cpu is the child's user+system CPU time so far, from /proc/PID/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func (c *child) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse %s", s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

type result struct {
	produce, consume         time.Duration // CPU time of the broker process
	produceWall, consumeWall time.Duration
}

func once(name string, run, records, size int, parts int32, profDir string) (result, error) {
	var r result
	dir, err := os.MkdirTemp("", "costbench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	prof := ""
	if profDir != "" {
		prof = filepath.Join(profDir, fmt.Sprintf("%s-%d.pprof", name, run))
	}
	c, err := startChild(name, dir, prof)
	if err != nil {
		return r, err
	}
	defer c.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t := kafkabench.Remote(name, c.addr)
	const topic = "cost"
	if err := t.CreateTopic(ctx, topic, parts); err != nil {
		return r, err
	}
	c0, err := c.cpu()
	if err != nil {
		return r, err
	}
	if r.produceWall, err = kafkabench.Produce(ctx, t, topic, records, size, kafkabench.AcksAll); err != nil {
		return r, fmt.Errorf("produce: %w", err)
	}
	c1, err := c.cpu()
	if err != nil {
		return r, err
	}
	if r.consumeWall, err = kafkabench.Consume(ctx, t, topic, records, size); err != nil {
		return r, fmt.Errorf("consume: %w", err)
	}
	c2, err := c.cpu()
	if err != nil {
		return r, err
	}
	r.produce, r.consume = c1-c0, c2-c1
	return r, c.stop()
}

func run(systems []string, runs, records, size int, parts int32, profDir string, markdown bool) error {
	res := map[string][]result{}
	for i := range runs {
		order := slices.Clone(systems)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			r, err := once(s, i, records, size, parts, profDir)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", s, i, err)
			}
			fmt.Fprintf(os.Stderr, "%s run %d: produce %v CPU (%v wall), consume %v CPU (%v wall)\n",
				s, i, r.produce, r.produceWall.Round(time.Millisecond), r.consume, r.consumeWall.Round(time.Millisecond))
			res[s] = append(res[s], r)
		}
	}
	perM := func(d time.Duration) float64 { return d.Seconds() / (float64(records) / 1e6) }
	med := func(s string, f func(result) float64) float64 {
		var v []float64
		for _, r := range res[s] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	prod := func(r result) float64 { return perM(r.produce) }
	cons := func(r result) float64 { return perM(r.consume) }
	fmt.Printf("broker CPU per million %d B records, acks=all, %d partitions, medians of %d runs (load %s)\n", size, parts, runs, report.LoadAvg())
	var lines [][]string
	for _, s := range systems {
		l := []string{s, fmt.Sprintf("%.3f", med(s, prod)), fmt.Sprintf("%.3f", med(s, cons)), "", ""}
		if s != systems[0] {
			l[3] = fmt.Sprintf("%.2fx", med(systems[0], prod)/med(s, prod))
			l[4] = fmt.Sprintf("%.2fx", med(systems[0], cons)/med(s, cons))
		}
		lines = append(lines, l)
	}
	report.Table(os.Stdout, markdown, []string{"system", "produce CPU s/M", "consume CPU s/M", systems[0] + "/system produce", systems[0] + "/system consume"}, lines)
	return nil
}
