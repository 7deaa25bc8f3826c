package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster is three (or more) `spool serve` processes on this machine, each
// a voter of the controller quorum and a broker (combined mode), on
// loopback ports picked when the cluster is made and kept across restarts
// so that a restarted node comes back where clients and peers expect it.
type cluster struct {
	bin    string
	dir    string
	voters string   // --controller-quorum-voters
	extra  []string // flags every node gets (--flush, --session-timeout)
	nodes  []*node
}

// node is one `spool serve` process of a cluster.
type node struct {
	id        int32
	kafka     string // host:port of the Kafka listener
	ctrl      string // host:port of the controller listener
	dir       string // data directory
	logPath   string // stdout and stderr of every incarnation, appended
	cmd       *exec.Cmd
	exited    chan struct{} // closed once cmd has been waited for
	startedAt time.Time
}

// newCluster starts n nodes with data under dir, each with the extra
// flags, and waits until every broker is registered and unfenced.
func newCluster(ctx context.Context, bin, dir string, n int, extra ...string) (*cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, dir: dir, extra: extra}
	var voters []string
	for i := range n {
		id := int32(i + 1)
		nd := &node{
			id:      id,
			kafka:   fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			ctrl:    fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
			dir:     filepath.Join(dir, fmt.Sprintf("node%d", id)),
			logPath: filepath.Join(dir, fmt.Sprintf("node%d.log", id)),
		}
		c.nodes = append(c.nodes, nd)
		voters = append(voters, fmt.Sprintf("%d@%s", id, nd.ctrl))
	}
	c.voters = strings.Join(voters, ",")
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			return nil, errors.Join(err, c.stop())
		}
	}
	for _, nd := range c.nodes {
		if err := c.waitListening(ctx, nd); err != nil {
			return nil, errors.Join(err, c.stop())
		}
	}
	if err := c.waitBrokers(ctx, n); err != nil {
		return nil, errors.Join(err, c.stop())
	}
	return c, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago:
// the controller listeners must be known before any node starts, since
// every node is given the whole voter list.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start starts nd's process. Its output is appended to nd.logPath, so the
// log of every incarnation of a node stays in one file.
func (c *cluster) start(nd *node) error {
	f, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "clusterbench: starting node %d at %s\n", nd.id, time.Now().UTC().Format(time.RFC3339Nano))
	args := append([]string{"serve",
		"--data", nd.dir,
		"--node-id", strconv.Itoa(int(nd.id)),
		"--listen", nd.kafka,
		"--controller-quorum-voters", c.voters,
	}, c.extra...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The nodes die with the benchmark, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %d: %w", nd.id, err)
	}
	nd.cmd, nd.exited, nd.startedAt = cmd, make(chan struct{}), time.Now()
	go func(exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(nd.exited)
	return nil
}

// waitListening waits until nd's current incarnation printed that it
// serves (its listeners are bound).
func (c *cluster) waitListening(ctx context.Context, nd *node) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(nd.logPath)
		if err != nil {
			return err
		}
		// Only the current incarnation's lines count.
		s := string(b)
		if i := strings.LastIndex(s, "clusterbench: starting node"); i >= 0 {
			s = s[i:]
		}
		if strings.Contains(s, "spool: serving on") {
			return nil
		}
		select {
		case <-nd.exited:
			return fmt.Errorf("node %d exited while starting: %s", nd.id, lastLines(s, 5))
		case <-ctx.Done():
			return fmt.Errorf("node %d not listening: %w; log: %s", nd.id, ctx.Err(), lastLines(s, 5))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// client is a kgo client of the cluster (every node a seed) with the
// benchmark's settings: kgo's defaults (acks=all, idempotent, linger
// 10 ms), compression off.
func (c *cluster) client(opts ...kgo.Opt) (*kgo.Client, error) {
	var seeds []string
	for _, nd := range c.nodes {
		seeds = append(seeds, nd.kafka)
	}
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
}

// metadata asks the cluster (any broker) for the metadata of the topics
// (all topics if none).
func metadata(ctx context.Context, cl *kgo.Client, topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	if len(topics) > 0 {
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	}
	return req.RequestWith(ctx, cl)
}

// waitBrokers waits until the metadata lists n live brokers.
func (c *cluster) waitBrokers(ctx context.Context, n int) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	return poll(ctx, 60*time.Second, fmt.Sprintf("%d brokers in the metadata", n), func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, cl)
		if err != nil {
			return false, nil
		}
		return len(m.Brokers) == n, nil
	})
}

// poll calls done every 20 ms until it says so, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := done(rctx)
		rcancel()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// createTopic creates topic with the given partitions, replication factor
// and min.insync.replicas (0: the broker's default) and waits until every
// partition has a leader and its whole replica set in the ISR.
func (c *cluster) createTopic(ctx context.Context, topic string, partitions, rf, minISR int) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, int32(partitions), int16(rf)
	if minISR > 0 {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = "min.insync.replicas", kmsg.StringPtr(strconv.Itoa(minISR))
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if t := resp.Topics[0]; t.ErrorCode != 0 {
		msg := ""
		if t.ErrorMessage != nil {
			msg = *t.ErrorMessage
		}
		return fmt.Errorf("create topic %s: error code %d %s", topic, t.ErrorCode, msg)
	}
	return poll(ctx, 30*time.Second, "topic "+topic+" fully replicated", func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, cl, topic)
		if err != nil || len(m.Topics) != 1 || m.Topics[0].ErrorCode != 0 || len(m.Topics[0].Partitions) != partitions {
			return false, nil
		}
		for _, p := range m.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 || len(p.ISR) != rf {
				return false, nil
			}
		}
		return true, nil
	})
}

// kill sends SIGKILL to nd and waits until the process is gone.
func (nd *node) kill() error {
	if err := nd.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-nd.exited
	return nil
}

// stop ends every node that runs: SIGTERM (controlled shutdown), then,
// for a node still there after stopTimeout, SIGQUIT - the Go runtime
// writes every goroutine's stack to the node's log, to see where it hung -
// and SIGKILL.
func (c *cluster) stop() error {
	var errs []error
	for _, nd := range c.nodes {
		if nd.running() {
			nd.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(stopTimeout)
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		select {
		case <-nd.exited:
		case <-deadline:
			deadline = time.After(0) // the others had as long
			nd.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-nd.exited:
			case <-time.After(2 * time.Second):
				nd.kill()
			}
			errs = append(errs, fmt.Errorf("node %d still running %v after SIGTERM; its goroutines are in %s", nd.id, stopTimeout, nd.logPath))
		}
	}
	return errors.Join(errs...)
}

// stopTimeout is how long stop waits for the nodes to exit after SIGTERM:
// spool serve means to give up on a controlled shutdown after 10 s, but
// the last node of a cluster stopped at once can take longer (13 s seen).
const stopTimeout = 20 * time.Second

// running says whether nd's process has been started and not exited.
func (nd *node) running() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.exited:
		return false
	default:
		return true
	}
}

// byID returns the node of a broker id.
func (c *cluster) byID(id int32) *node {
	i := slices.IndexFunc(c.nodes, func(nd *node) bool { return nd.id == id })
	if i < 0 {
		return nil
	}
	return c.nodes[i]
}

// cpuTime is the user+system CPU time the running nodes have used so far
// (from /proc/PID/stat, in clock ticks of 10 ms).
func (c *cluster) cpuTime() time.Duration {
	var total time.Duration
	for _, nd := range c.nodes {
		if nd.cmd == nil || nd.cmd.Process == nil {
			continue
		}
		total += procCPU(nd.cmd.Process.Pid)
	}
	return total
}

// procCPU is a process's user+system CPU time, 0 if unknown.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from its ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU is this process's user+system CPU time: the client's share.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// logEvent is a line of a node's log: its time and the whole line.
type logEvent struct {
	at   time.Time
	line string
}

// findLog returns the first line of nd's log at or after since that holds
// every one of the parts (slog's text format: time=... level=... msg=...).
func (nd *node) findLog(since time.Time, parts ...string) (logEvent, bool) {
	f, err := os.Open(nd.logPath)
	if err != nil {
		return logEvent{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(since.Truncate(time.Millisecond)) {
			continue
		}
		if !containsAll(line, parts) {
			continue
		}
		return logEvent{at, line}, true
	}
	return logEvent{}, false
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
