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
//     linger 10 ms; no compression; --acks 1 makes it acks=1 without
//     idempotence) produces --records records of --size bytes and waits
//     for every acknowledgement;
//   - consume: a new kgo client reads them all back from the start.
//
// The table gives CPU seconds per million records (medians of --runs, the
// systems taking turns going first), the part of it spent in user space
// (the rest is the kernel's: sockets, the page cache), and spool's ratio to
// each peer. With --cpuprofile-dir, every child writes a CPU profile of
// each phase (SYSTEM-RUN-produce.pprof, SYSTEM-RUN-consume.pprof): the
// parent tells it on its standard input when a phase starts and ends, so
// that a profile holds what the CPU figure counts and neither startup nor
// shutdown.
package main

import (
	"bufio"
	"context"
	"errors"
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
		child, childDir            string
		runs, records, size, parts int
		systems, profDir, acks     string
		markdown                   bool
	)
	flag.StringVar(&child, "child", "", "internal: run the named system's broker in this process")
	flag.StringVar(&childDir, "child-dir", "", "internal: the child's data directory")
	flag.IntVar(&runs, "runs", 5, "runs per system; the table shows medians")
	flag.IntVar(&records, "records", 1_000_000, "records produced and consumed per run")
	flag.IntVar(&size, "size", 100, "record value size in bytes (at least 16)")
	flag.IntVar(&parts, "partitions", 6, "partitions of the topic")
	flag.StringVar(&systems, "systems", strings.Join(kafkabench.Systems, ","), "systems, comma-separated: "+strings.Join(kafkabench.Systems, ", "))
	flag.StringVar(&profDir, "cpuprofile-dir", "", "write each child's CPU profile into this directory")
	flag.StringVar(&acks, "acks", "all", "the producer's acks: all (idempotent) or 1 (not idempotent)")
	flag.BoolVar(&markdown, "markdown", false, "print a markdown table")
	flag.Parse()
	if child != "" {
		if err := runChild(child, childDir); err != nil {
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
	var a kafkabench.Acks
	switch acks {
	case "all", "-1":
		a = kafkabench.AcksAll
	case "1":
		a = kafkabench.AcksLeader
	default:
		fmt.Fprintf(os.Stderr, "costbench: --acks %q: want all or 1\n", acks)
		os.Exit(2)
	}
	if err := run(sys, runs, records, size, int32(parts), a, profDir, markdown); err != nil {
		fmt.Fprintln(os.Stderr, "costbench:", err)
		os.Exit(1)
	}
}

// runChild starts the broker, prints its address and serves until its
// standard input closes. Meanwhile it takes commands on standard input,
// one a line, and answers each with "OK" (or "ERR reason") on standard
// output: "profile FILE" starts a CPU profile into FILE, "stop" ends it.
func runChild(name, dir string) error {
	t, err := kafkabench.Start(name, dir)
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", t.Addr)
	var prof *os.File
	stopProfile := func() error {
		if prof == nil {
			return nil
		}
		pprof.StopCPUProfile()
		err := prof.Close()
		prof = nil
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var err error
		switch cmd, arg, _ := strings.Cut(in.Text(), " "); cmd {
		case "profile":
			if err = stopProfile(); err != nil {
				break
			}
			if prof, err = os.Create(arg); err != nil {
				break
			}
			if err = pprof.StartCPUProfile(prof); err != nil {
				prof.Close()
				prof = nil
			}
		case "stop":
			err = stopProfile()
		default:
			err = fmt.Errorf("unknown command %q", cmd)
		}
		if err != nil {
			fmt.Printf("ERR %v\n", err)
		} else {
			fmt.Println("OK")
		}
	}
	return errors.Join(stopProfile(), t.Close())
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	addr  string
}

func startChild(name, dir string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "--child", name, "--child-dir", dir)
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
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		in.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("child %s did not start: %q %v", name, line, err)
	}
	return &child{cmd: cmd, stdin: in, out: r, addr: strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))}, nil
}

// command sends the child a command (runChild) and waits for its answer.
func (c *child) command(cmd string) error {
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		return err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("child: %q: %w", cmd, err)
	}
	if line = strings.TrimSpace(line); line != "OK" {
		return fmt.Errorf("child: %q: %s", cmd, line)
	}
	return nil
}

// profile starts a CPU profile of the child into file; "" does nothing.
func (c *child) profile(file string) error {
	if file == "" {
		return nil
	}
	return c.command("profile " + file)
}

// stopProfile ends the child's CPU profile, if profiling (file != "").
func (c *child) stopProfile(file string) error {
	if file == "" {
		return nil
	}
	return c.command("stop")
}

func (c *child) stop() error {
	c.stdin.Close()
	return c.cmd.Wait()
}

// cpuTime is a process's CPU time: in user space and in the kernel.
type cpuTime struct{ user, sys time.Duration }

func (t cpuTime) total() time.Duration { return t.user + t.sys }

func (t cpuTime) sub(u cpuTime) cpuTime { return cpuTime{t.user - u.user, t.sys - u.sys} }

// cpu is the child's user and system CPU time so far, from /proc/PID/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func (c *child) cpu() (cpuTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return cpuTime{}, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTime{}, fmt.Errorf("parse %s", s)
	}
	const tick = 10 * time.Millisecond
	return cpuTime{time.Duration(ut) * tick, time.Duration(st) * tick}, nil
}

type result struct {
	produce, consume         cpuTime // CPU time of the broker process
	produceWall, consumeWall time.Duration
}

func once(name string, run, records, size int, parts int32, acks kafkabench.Acks, profDir string) (result, error) {
	var r result
	dir, err := os.MkdirTemp("", "costbench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	var prodProf, consProf string
	if profDir != "" {
		prodProf = filepath.Join(profDir, fmt.Sprintf("%s-%d-produce.pprof", name, run))
		consProf = filepath.Join(profDir, fmt.Sprintf("%s-%d-consume.pprof", name, run))
	}
	c, err := startChild(name, dir)
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
	if err := c.profile(prodProf); err != nil {
		return r, err
	}
	c0, err := c.cpu()
	if err != nil {
		return r, err
	}
	if r.produceWall, err = kafkabench.Produce(ctx, t, topic, records, size, acks); err != nil {
		return r, fmt.Errorf("produce: %w", err)
	}
	c1, err := c.cpu()
	if err != nil {
		return r, err
	}
	if err := c.profile(consProf); err != nil { // ends the produce profile
		return r, err
	}
	c1, err = c.cpu() // without the profile's writing
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
	if err := c.stopProfile(consProf); err != nil {
		return r, err
	}
	r.produce, r.consume = c1.sub(c0), c2.sub(c1)
	return r, c.stop()
}

func run(systems []string, runs, records, size int, parts int32, acks kafkabench.Acks, profDir string, markdown bool) error {
	res := map[string][]result{}
	for i := range runs {
		order := slices.Clone(systems)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			r, err := once(s, i, records, size, parts, acks, profDir)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", s, i, err)
			}
			fmt.Fprintf(os.Stderr, "%s run %d: produce %v CPU (user %v, system %v; %v wall), consume %v CPU (user %v, system %v; %v wall)\n",
				s, i, r.produce.total(), r.produce.user, r.produce.sys, r.produceWall.Round(time.Millisecond),
				r.consume.total(), r.consume.user, r.consume.sys, r.consumeWall.Round(time.Millisecond))
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
	prod := func(r result) float64 { return perM(r.produce.total()) }
	cons := func(r result) float64 { return perM(r.consume.total()) }
	prodUser := func(r result) float64 { return perM(r.produce.user) }
	consUser := func(r result) float64 { return perM(r.consume.user) }
	fmt.Printf("broker CPU per million %d B records, acks=%s, %d partitions, medians of %d runs (load %s)\n", size, acks, parts, runs, report.LoadAvg())
	var lines [][]string
	for _, s := range systems {
		l := []string{s, fmt.Sprintf("%.3f", med(s, prod)), fmt.Sprintf("%.3f", med(s, prodUser)),
			fmt.Sprintf("%.3f", med(s, cons)), fmt.Sprintf("%.3f", med(s, consUser)), "", ""}
		if s != systems[0] {
			l[5] = fmt.Sprintf("%.2fx", med(systems[0], prod)/med(s, prod))
			l[6] = fmt.Sprintf("%.2fx", med(systems[0], cons)/med(s, cons))
		}
		lines = append(lines, l)
	}
	report.Table(os.Stdout, markdown, []string{"system", "produce CPU s/M", "of it user", "consume CPU s/M", "of it user",
		systems[0] + "/system produce", systems[0] + "/system consume"}, lines)
	return nil
}
