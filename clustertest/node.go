package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNotRunning reports an operation that needs a running node (a signal,
// a request) on one that is not, or one that needs a stopped node
// (reading its data directory) on one that runs.
var (
	ErrNotRunning = errors.New("clustertest: node is not running")
	ErrRunning    = errors.New("clustertest: node is running")
)

// Node is one "spool serve" process of a Cluster and its restarts: its
// node id, data directory and ports stay the same across them. Its methods
// may be called from any goroutine.
type Node struct {
	c  *Cluster
	id int32

	dir     string // data directory
	logPath string // stderr of every incarnation, appended

	// The addresses the process binds, and the ones clients and the other
	// nodes are given (the advertised address, the voters list). They are
	// the same: link proxies (Options.LinkProxies) sit on the dialing
	// side, each node told by --dial-map to reach the others through its
	// own, so that clients still reach every node directly.
	listen, ctrlListen string
	addr, ctrlAddr     string

	mu      sync.Mutex
	proc    *process // the running incarnation; nil when none
	starts  int
	direct  []*kgo.Client // idle clients of this node alone, for Request
	closed  bool          // the cluster's test is over: no more clients
	mounted bool          // dir is a tmpfs of its own (Options.DiskBytes)
}

// process is one incarnation of a node.
type process struct {
	cmd     *exec.Cmd
	out     *output
	done    chan struct{} // closed once the process has exited and its output is written
	state   *os.ProcessState
	waitErr error
	// expected is set before the harness signals the process to end, so
	// that its exit is not reported as a crash.
	expected atomic.Bool
	paused   bool // SIGSTOPped; under Node.mu
}

// ID is the node's id (--node-id).
func (n *Node) ID() int32 { return n.id }

// Addr is the node's Kafka listener, HOST:PORT, the same across restarts.
func (n *Node) Addr() string { return n.addr }

// ControllerAddr is the node's controller listener, HOST:PORT, its entry
// in the voters list if it is a voter.
func (n *Node) ControllerAddr() string { return n.ctrlAddr }

// Dir is the node's data directory (--data).
func (n *Node) Dir() string { return n.dir }

// LogPath is the file holding the node's stderr, every incarnation's in
// turn, each introduced by a line "=== clustertest: start N of node ID".
func (n *Node) LogPath() string { return n.logPath }

// Running reports whether the node's process runs (paused or not).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil
}

// Paused reports whether the node's process is stopped by Pause.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && n.proc.paused
}

// PID is the process id of the running incarnation, 0 when none runs.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// args is the node's "spool serve" command line.
func (n *Node) args() []string {
	o := n.c.opts
	args := []string{"serve",
		"--data", n.dir,
		"--node-id", strconv.Itoa(int(n.id)),
		"--listen", n.listen,
		"--controller-listen", n.ctrlListen,
		"--controller-quorum-voters", n.c.voters,
		"--session-timeout", o.SessionTimeout.String(),
	}
	if n.addr != n.listen {
		args = append(args, "--advertised-addr", n.addr)
	}
	if o.ClusterID != "" {
		args = append(args, "--cluster-id", o.ClusterID)
	}
	if n.c.links != nil {
		args = append(args, "--dial-map", n.c.dialMap(n))
	}
	args = append(args, o.Args...)
	if o.NodeArgs != nil {
		args = append(args, o.NodeArgs(n.id)...)
	}
	return args
}

// Start starts the node's process, the first time or again after it
// ended, with the same data directory and ports, and waits until it
// listens (its "spool: serving on" line). It does not wait for the node
// to join the cluster: see Cluster.WaitBrokers. It fails if the node
// runs, if the process exits first, or when ctx ends (then the process
// is killed).
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.proc != nil {
		n.mu.Unlock()
		return fmt.Errorf("clustertest: start node %d: %w", n.id, ErrRunning)
	}
	n.starts++
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.mu.Unlock()
		return fmt.Errorf("clustertest: start node %d: %w", n.id, err)
	}
	fmt.Fprintf(f, "=== clustertest: start %d of node %d at %s\n", n.starts, n.id, time.Now().Format(time.RFC3339Nano))
	var mirror *os.File
	if n.c.opts.Verbose {
		mirror = os.Stderr
	}
	p := &process{done: make(chan struct{})}
	if mirror != nil {
		p.out = newOutput(f, mirror, fmt.Sprintf("[node %d] ", n.id))
	} else {
		p.out = newOutput(f, nil, "")
	}
	p.cmd = exec.Command(n.c.bin, n.args()...)
	p.cmd.Stderr = p.out
	if err := startCmd(p.cmd); err != nil {
		f.Close()
		n.mu.Unlock()
		return fmt.Errorf("clustertest: start node %d: %w", n.id, err)
	}
	n.proc = p
	n.mu.Unlock()

	go func() {
		p.waitErr = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		f.Close()
		n.mu.Lock()
		if n.proc == p {
			n.proc = nil
		}
		n.mu.Unlock()
		if !p.expected.Load() {
			n.c.unexpectedExit(n, p)
		}
		close(p.done)
	}()

	timer := time.NewTimer(n.c.opts.StartTimeout)
	defer timer.Stop()
	var why string
	select {
	case <-p.out.serving:
		return nil
	case <-p.done:
		why = fmt.Sprintf("exited (%s) before serving", p.state)
	case <-timer.C:
		why = fmt.Sprintf("not serving after %v", n.c.opts.StartTimeout)
	case <-ctx.Done():
		why = fmt.Sprintf("not serving: %v", ctx.Err())
	}
	p.expected.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	tail, _ := tailLines(n.logPath, 30, 64<<10)
	return fmt.Errorf("clustertest: start node %d: %s; its stderr ends:\n%s", n.id, why, tail)
}

// running returns the running incarnation, or ErrNotRunning.
func (n *Node) running(op string) (*process, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil, fmt.Errorf("clustertest: %s node %d: %w", op, n.id, ErrNotRunning)
	}
	return n.proc, nil
}

// Kill sends the node's process SIGKILL - a crash: nothing it has not
// written to a file survives, nothing it holds is released in order - and
// waits until it has exited.
func (n *Node) Kill() error {
	p, err := n.running("kill")
	if err != nil {
		return err
	}
	p.expected.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("clustertest: kill node %d: %w", n.id, err)
	}
	<-p.done
	return nil
}

// Stop sends the node's process SIGTERM (resuming it first if paused) -
// spool serve's controlled shutdown: leaderships move to other brokers,
// then it exits - and waits for it to exit. It returns the exit code
// (0 for a clean shutdown; -1 if a signal ended it). If ctx ends first,
// the process is killed and Stop returns ctx's error.
func (n *Node) Stop(ctx context.Context) (int, error) {
	p, err := n.running("stop")
	if err != nil {
		return 0, err
	}
	p.expected.Store(true)
	n.mu.Lock()
	if p.paused {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
	n.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, fmt.Errorf("clustertest: stop node %d: %w", n.id, err)
	}
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-ctx.Done():
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return p.state.ExitCode(), fmt.Errorf("clustertest: stop node %d: killed, still running when %w", n.id, ctx.Err())
	}
}

// quit sends the process SIGQUIT, which makes a Go program write its
// goroutines' stacks to stderr and exit, and waits a little for it to do
// so (a paused process is resumed first).
func (n *Node) quit() {
	p, err := n.running("quit")
	if err != nil {
		return
	}
	p.expected.Store(true)
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// Pause sends the node's process SIGSTOP: it stays, holding its sockets
// and locks, but does nothing (a long GC pause, a hung disk, a VM
// migration) until Resume. Its connections stay open and unanswered.
func (n *Node) Pause() error { return n.signalPause(syscall.SIGSTOP, true) }

// Resume sends the node's process SIGCONT, ending a Pause.
func (n *Node) Resume() error { return n.signalPause(syscall.SIGCONT, false) }

func (n *Node) signalPause(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("clustertest: %v node %d: %w", sig, n.id, ErrNotRunning)
	}
	if err := n.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("clustertest: %v node %d: %w", sig, n.id, err)
	}
	waitStopped(n.proc.cmd.Process.Pid, paused)
	n.proc.paused = paused
	return nil
}

// Request sends req to this node alone (not to whichever broker a client
// would pick) and returns its response: to ask a node what it believes
// (its metadata, its controller, the coordinator it names) or to reach a
// partition's leader or a group's coordinator directly. A Kafka broker
// answers the requests of one connection in order, so concurrent calls go
// over separate connections: a slow request does not hold up the others.
// It fails at once when the node is down, and when ctx ends while it is
// paused.
func (n *Node) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if _, err := n.running("request to"); err != nil {
		return nil, err
	}
	cl, err := n.takeDirect()
	if err != nil {
		return nil, fmt.Errorf("clustertest: request to node %d: %w", n.id, err)
	}
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	n.putDirect(cl)
	if err != nil {
		return nil, fmt.Errorf("clustertest: %s to node %d: %w", kmsg.NameForKey(req.Key()), n.id, err)
	}
	return resp, nil
}

// takeDirect takes an idle client of this node alone, or makes one.
func (n *Node) takeDirect() (*kgo.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrNotRunning
	}
	if k := len(n.direct); k > 0 {
		cl := n.direct[k-1]
		n.direct = n.direct[:k-1]
		return cl, nil
	}
	return kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.DialTimeout(2*time.Second))
}

// putDirect returns a client takeDirect gave.
func (n *Node) putDirect(cl *kgo.Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		cl.Close()
		return
	}
	n.direct = append(n.direct, cl)
}

// closeDirect closes the clients Request uses; later requests fail.
func (n *Node) closeDirect() {
	n.mu.Lock()
	clients := n.direct
	n.direct, n.closed = nil, true
	n.mu.Unlock()
	for _, cl := range clients {
		cl.Close()
	}
}
