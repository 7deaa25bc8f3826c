package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Options describe a cluster. The zero value is three nodes, every one a
// voter, with a one-second session timeout.
type Options struct {
	// Nodes is how many nodes the cluster has; their ids are 1 to Nodes.
	// Default 3.
	Nodes int
	// Voters is how many of them (the lowest ids) form the controller
	// quorum (--controller-quorum-voters); the others are brokers only.
	// Default: all of them.
	Voters int
	// SessionTimeout is every node's --session-timeout: how long a
	// crashed broker keeps its leaderships. Default 1s, shorter than
	// spool's default so that failovers in tests are quick.
	SessionTimeout time.Duration
	// ClusterID, if set, is passed as --cluster-id.
	ClusterID string
	// Args are more flags for every node's "spool serve", after the ones
	// the cluster sets (--data, --node-id, --listen, --controller-listen,
	// --controller-quorum-voters, --session-timeout): for example
	// "--default-replication-factor", "3" or "--log-level", "debug".
	Args []string
	// NodeArgs, if set, returns more flags for one node, after Args.
	NodeArgs func(id int32) []string
	// Binary is the spool binary to run. Default: Binary().
	Binary string
	// Host is the loopback address the nodes listen on. Default 127.0.0.1.
	Host string
	// Dir holds the nodes' data directories and logs (node1/,
	// node1.stderr, ...). Default, in a test (New, Start): a new directory
	// under $SPOOL_CLUSTERTEST_DIR, kept after the test, if that is set;
	// else a t.TempDir. Otherwise (NewCluster, Launch): a temporary
	// directory that Close removes.
	Dir string
	// StartTimeout bounds how long a node may take to listen. Default 60s.
	StartTimeout time.Duration
	// LogLines is how many of the last lines of each node's stderr are
	// logged (t.Log) when the test fails; negative logs none. Default 300.
	LogLines int
	// Verbose copies every node's stderr to this process's stderr as it is
	// written, each line prefixed "[node ID] ". Default: false, unless the
	// environment variable SPOOL_CLUSTERTEST_VERBOSE is set.
	Verbose bool
	// LinkProxies puts a TCP proxy the test controls (a Link) on every
	// connection a node opens to another node - Raft, controller requests,
	// followers' fetches - one per ordered pair of nodes and listener, so
	// that the network between nodes can be partitioned, made one-way or
	// slowed (Partition, Isolate, BlockOneWay, Slow, HealNetwork). Each
	// node is started with "--dial-map" naming its own proxies. Clients
	// (Client, Node.Request) reach the nodes directly.
	LinkProxies bool
	// DiskBytes, if positive, gives every node a data directory of its
	// own file system: a tmpfs of that many bytes mounted on it, which
	// FillDisk can make full. Mounting needs root (CAP_SYS_ADMIN) and
	// Linux; without them NewCluster fails with ErrNoDisk, and a test
	// should skip, saying so. The mounts are removed when the cluster
	// ends, after a copy of each to DIR/nodeID-disk if the directory is
	// kept ($SPOOL_CLUSTERTEST_DIR).
	DiskBytes int64
}

// VerboseEnv names the environment variable that turns Options.Verbose on.
const VerboseEnv = "SPOOL_CLUSTERTEST_VERBOSE"

// DirEnv names the environment variable that, when set, is where each
// cluster keeps its nodes' data directories and logs after its test, for a
// post-mortem: in a new directory named after the test. A node still
// running when a test fails is then sent SIGQUIT before it is killed, so
// that its log ends with its goroutines' stacks.
const DirEnv = "SPOOL_CLUSTERTEST_DIR"

// Cluster is a cluster of "spool serve" processes on this machine, each
// with its own data directory and ports. In a test, Start or New make one
// whose processes are killed when the test ends; elsewhere (a benchmark's
// main, a program) NewCluster or Launch do, and Close ends it. Its methods
// may be called from any goroutine.
type Cluster struct {
	opts    Options
	bin     string
	voters  string // the --controller-quorum-voters value
	nodes   []*Node
	ownDir  bool // Dir was made for the cluster: Close removes it
	keepDir bool // Dir stays after the test (DirEnv)

	links map[linkKey]*Link // nil without Options.LinkProxies

	mu      sync.Mutex
	clients []*kgo.Client
	exits   []error // nodes that ended without the harness asking
	closed  bool
}

// NewCluster makes a cluster of processes that are not started yet: it
// finds (or builds) the binary and chooses each node's ports and data
// directory (under Options.Dir, or a new temporary directory that Close
// removes). Start the nodes with StartAll; end it with Close.
func NewCluster(opts Options) (*Cluster, error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.Voters <= 0 || opts.Voters > opts.Nodes {
		opts.Voters = opts.Nodes
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = time.Second
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.LogLines == 0 {
		opts.LogLines = 300
	}
	if os.Getenv(VerboseEnv) != "" {
		opts.Verbose = true
	}
	c := &Cluster{opts: opts, bin: opts.Binary}
	if c.bin == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		c.bin = bin
	}
	ports, err := freePorts(opts.Host, 2*opts.Nodes)
	if err != nil {
		return nil, err
	}
	if c.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "spool-cluster-")
		if err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
		c.opts.Dir, c.ownDir = dir, true
	}
	var voters []string
	for i := range opts.Nodes {
		id := int32(i + 1)
		n := &Node{
			c:       c,
			id:      id,
			dir:     filepath.Join(c.opts.Dir, fmt.Sprintf("node%d", id)),
			logPath: filepath.Join(c.opts.Dir, fmt.Sprintf("node%d.stderr", id)),
			listen:  net.JoinHostPort(opts.Host, strconv.Itoa(ports[2*i])),
		}
		n.ctrlListen = net.JoinHostPort(opts.Host, strconv.Itoa(ports[2*i+1]))
		n.addr, n.ctrlAddr = n.listen, n.ctrlListen
		if i < opts.Voters {
			voters = append(voters, fmt.Sprintf("%d@%s", id, n.ctrlAddr))
		}
		c.nodes = append(c.nodes, n)
	}
	c.voters = strings.Join(voters, ",")
	if opts.DiskBytes > 0 {
		if err := c.mountDisks(); err != nil {
			c.unmountDisks()
			if c.ownDir {
				os.RemoveAll(c.opts.Dir)
			}
			return nil, err
		}
	}
	if opts.LinkProxies {
		if err := c.startLinks(); err != nil {
			c.unmountDisks()
			if c.ownDir {
				os.RemoveAll(c.opts.Dir)
			}
			return nil, err
		}
	}
	return c, nil
}

// Launch makes a cluster with NewCluster, starts every node and waits
// until each has joined (WaitBrokers). On failure nothing is left running.
func Launch(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := NewCluster(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := c.StartAll(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitBrokers(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close kills every node that runs and closes the clients Client made, and
// removes the cluster's directory if NewCluster made it. It returns the
// error CheckExits would: nodes that ended on their own before.
func (c *Cluster) Close() error {
	err := c.shutdown(false)
	if c.ownDir {
		os.RemoveAll(c.opts.Dir)
	}
	return err
}

// shutdown closes the clients and kills the nodes, first asking each for
// its goroutines' stacks (SIGQUIT) if dumpStacks. It returns CheckExits's
// error from before the kills.
func (c *Cluster) shutdown(dumpStacks bool) error {
	c.mu.Lock()
	clients := c.clients
	c.clients, c.closed = nil, true
	c.mu.Unlock()
	for _, cl := range clients {
		cl.Close()
	}
	err := c.CheckExits()
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		n.closeDirect()
		if n.Running() {
			wg.Go(func() {
				if dumpStacks {
					n.quit()
				}
				n.Kill()
			})
		}
	}
	wg.Wait()
	c.closeLinks()
	c.unmountDisks()
	return err
}

// New makes a cluster with NewCluster for a test: in a t.TempDir (or, with
// $SPOOL_CLUSTERTEST_DIR set, in a directory kept after the test), whose
// processes are killed when the test ends, failing it if any had ended on
// its own, and logging the end of each node's stderr if it failed. The
// nodes are not started: see StartAll. It fails the test if the binary
// cannot be had.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	keep := false
	if d := os.Getenv(DirEnv); d != "" && opts.Dir == "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp(d, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-")
		if err != nil {
			t.Fatal(err)
		}
		opts.Dir, keep = dir, true
		t.Logf("clustertest: the cluster's data and logs are kept in %s", dir)
	} else if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := NewCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	c.keepDir = keep
	t.Cleanup(func() { c.cleanup(t) })
	return c
}

// Start makes a cluster with New, starts every node and waits until each
// has joined (WaitBrokers). It fails the test if they do not.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := New(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBrokers(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartAll starts every node that is not running, all at once (a quorum
// forms only when a majority of voters runs), and waits until each
// listens.
func (c *Cluster) StartAll(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		if n.Running() {
			continue
		}
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Nodes are the cluster's nodes, by id.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns the node with an id, or nil if there is none.
func (c *Cluster) Node(id int32) *Node {
	if id < 1 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// Running are the nodes whose process runs (paused ones included).
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// Dir is the directory holding the nodes' data directories and logs.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Voters is the --controller-quorum-voters value every node is given.
func (c *Cluster) Voters() string { return c.voters }

// Seeds are the Kafka listener addresses of the running nodes.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, n := range c.Running() {
		out = append(out, n.addr)
	}
	return out
}

// Client returns a franz-go client seeded with the running nodes (every
// node, if none runs), with opts after the seeds; it is closed when the
// cluster ends (with its test, or Close). The client finds the other brokers through metadata, and
// keeps working as nodes die and come back.
func (c *Cluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	seeds := c.Seeds()
	if len(seeds) == 0 {
		for _, n := range c.nodes {
			seeds = append(seeds, n.addr)
		}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("clustertest: client: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cl.Close()
		return nil, fmt.Errorf("clustertest: client: the cluster is closed")
	}
	c.clients = append(c.clients, cl)
	return cl, nil
}

// unexpectedExit records a node's process that ended without the harness
// asking; the test fails when it ends (and CheckExits reports it sooner).
func (c *Cluster) unexpectedExit(n *Node, p *process) {
	err := fmt.Errorf("%w: node %d (pid %d): %s (see %s)", ErrExited, n.id, p.cmd.Process.Pid, p.state, n.logPath)
	c.mu.Lock()
	c.exits = append(c.exits, err)
	c.mu.Unlock()
}

// ErrExited reports a node process that ended without being killed or
// stopped through its Node: it crashed, panicked or failed to serve.
var ErrExited = errors.New("clustertest: node exited on its own")

// CheckExits returns an error wrapping ErrExited for each node process
// that has ended without being killed or stopped through its Node, nil if
// none has.
func (c *Cluster) CheckExits() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.exits...)
}

// ErrDataRace reports that a node built with -race found a data race.
var ErrDataRace = errors.New("clustertest: data race in a node")

// CheckRaces returns an error wrapping ErrDataRace, with the report, for
// each data race the nodes' logs hold (nodes built with -race report them
// on stderr and go on running), nil if there is none.
func (c *Cluster) CheckRaces() error {
	var errs []error
	for _, n := range c.nodes {
		reports, err := raceReports(n.logPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("clustertest: node %d's log: %w", n.id, err))
		}
		for _, r := range reports {
			errs = append(errs, fmt.Errorf("%w: node %d (%s):\n%s", ErrDataRace, n.id, n.logPath, r))
		}
	}
	return errors.Join(errs...)
}

// cleanup ends a test's cluster: it fails the test for node processes
// that ended on their own and for data races the nodes reported, logs the
// end of each node's stderr if the test failed, and kills what still runs
// (asking for goroutine dumps first if the test failed and the directory
// is kept).
func (c *Cluster) cleanup(t testing.TB) {
	if err := c.CheckExits(); err != nil {
		t.Error(err)
	}
	if err := c.CheckRaces(); err != nil {
		t.Error(err)
	}
	failed := t.Failed()
	if failed && c.opts.LogLines >= 0 {
		for _, n := range c.nodes {
			tail, err := tailLines(n.logPath, c.opts.LogLines, 4<<20)
			if err != nil {
				t.Logf("node %d: no stderr: %v", n.id, err)
				continue
			}
			t.Logf("node %d stderr (%s, last %d lines):\n%s", n.id, n.logPath, c.opts.LogLines, tail)
		}
	}
	c.shutdown(failed && c.keepDir)
	if failed && c.keepDir {
		t.Logf("clustertest: the nodes' data and whole logs (ending with goroutine dumps of the nodes that ran) are in %s", c.opts.Dir)
	}
}
