package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// A three-node hashicorp/raft cluster in one process on the stores of this
// package, over raft's in-memory transport: bootstrap, apply, snapshot and
// compact the log head, restart a follower that catches up from the log,
// restart one so far behind that the leader sends it a snapshot (which
// empties its log and restarts it past the snapshot), restart everything.
// Every FSM must end in the same state.

// kvFSM applies commands "key=value" to a map.
type kvFSM struct {
	mu       sync.Mutex
	kv       map[string]string
	restores int
}

func (f *kvFSM) Apply(l *raft.Log) any {
	k, v, ok := strings.Cut(string(l.Data), "=")
	if !ok {
		return fmt.Errorf("bad command %q", l.Data)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kv[k] = v
	return nil
}

func (f *kvFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := json.Marshal(f.kv)
	return kvSnapshot(data), err
}

func (f *kvFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	kv := map[string]string{}
	if err := json.NewDecoder(rc).Decode(&kv); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kv = kv
	f.restores++
	return nil
}

func (f *kvFSM) state() (map[string]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.kv), f.restores
}

type kvSnapshot []byte

func (s kvSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (kvSnapshot) Release() {}

// raftNode is one member: its Raft and the stores under it, all in dir.
type raftNode struct {
	id     raft.ServerID
	dir    string
	addr   raft.ServerAddress
	trans  *raft.InmemTransport
	logs   *LogStore
	stable *StableStore
	fsm    *kvFSM
	r      *raft.Raft
}

type raftCluster struct {
	t      *testing.T
	nodes  []*raftNode
	logger hclog.Logger
}

func testRaftConfig(id raft.ServerID, logger hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = time.Hour // snapshots when the test asks
	c.TrailingLogs = 10
	c.Logger = logger
	return c
}

// start opens n's stores in its directory - the log, quorum-state beside
// its segments and raft's snapshots in a subdirectory, as a node lays out
// __cluster_metadata-0/ - and starts its Raft on a fresh transport.
func (c *raftCluster) start(n *raftNode) {
	t := c.t
	var err error
	n.logs, err = OpenLogStore(n.dir, LogStoreOptions{SegmentBytes: 16 << 10})
	require.NoError(t, err)
	n.stable, err = OpenStableStore(n.dir + "/" + QuorumStateFile)
	require.NoError(t, err)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.dir, 2, c.logger)
	require.NoError(t, err)
	n.addr, n.trans = raft.NewInmemTransport(n.addr)
	for _, o := range c.nodes {
		if o != n && o.r != nil {
			o.trans.Connect(n.addr, n.trans)
			n.trans.Connect(o.addr, o.trans)
		}
	}
	n.fsm = &kvFSM{kv: map[string]string{}}
	n.r, err = raft.NewRaft(testRaftConfig(n.id, c.logger), n.fsm, n.logs, n.stable, snaps, n.trans)
	require.NoError(t, err)
}

// stop shuts n's Raft down and closes its stores.
func (c *raftCluster) stop(n *raftNode) {
	require.NoError(c.t, n.r.Shutdown().Error())
	for _, o := range c.nodes {
		if o != n && o.r != nil {
			o.trans.Disconnect(n.addr)
		}
	}
	n.r = nil
	require.NoError(c.t, n.logs.Close())
}

func (c *raftCluster) leader() *raftNode {
	var l *raftNode
	require.Eventually(c.t, func() bool {
		for _, n := range c.nodes {
			if n.r != nil && n.r.State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "no leader")
	return l
}

// apply applies the commands "k<i>=v<i>" for i in [from, to) through the
// leader and waits for each to be committed and applied there. A command
// that fails because leadership moved (Raft steps down when it misses its
// lease, which a loaded machine makes happen) is applied again through the
// new leader: the outcome was unknown, and applying it twice is harmless.
func (c *raftCluster) apply(from, to int) {
	var pending []int
	for i := from; i < to; i++ {
		pending = append(pending, i)
	}
	for attempt := 0; len(pending) > 0; attempt++ {
		require.Less(c.t, attempt, 20, "commands keep failing")
		l := c.leader()
		fs := make([]raft.ApplyFuture, len(pending))
		for j, i := range pending {
			fs[j] = l.r.Apply([]byte(fmt.Sprintf("k%d=v%d", i, i)), 10*time.Second)
		}
		var retry []int
		for j, f := range fs {
			if err := f.Error(); err != nil {
				require.True(c.t, leadershipMoved(err), "command %d: %v", pending[j], err)
				retry = append(retry, pending[j])
				continue
			}
			require.Nil(c.t, f.Response())
		}
		pending = retry
	}
}

// leadershipMoved reports an error that means "ask the new leader".
func leadershipMoved(err error) bool {
	return errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrEnqueueTimeout)
}

// converge waits until every running node's FSM holds want (Raft hands
// committed entries to the FSM asynchronously: AppliedIndex runs ahead of
// it), failing with the difference if one does not within a generous time.
func (c *raftCluster) converge(want map[string]string) {
	for _, n := range c.nodes {
		if n.r == nil {
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, _ := n.fsm.state()
			if maps.Equal(got, want) || time.Now().After(deadline) {
				require.Equal(c.t, want, got, "node %s", n.id)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func index(t *testing.T, f func() (uint64, error)) uint64 {
	i, err := f()
	require.NoError(t, err)
	return i
}

// newRaftCluster starts three bootstrapped nodes, each in a directory of
// its own, and stops them when the test ends.
func newRaftCluster(t *testing.T) *raftCluster {
	output := io.Discard
	if os.Getenv("SPOOL_RAFT_LOG") != "" {
		output = os.Stderr
	}
	c := &raftCluster{t: t, logger: hclog.New(&hclog.LoggerOptions{Name: "raft", Output: output, Level: hclog.Debug})}
	var servers []raft.Server
	for i := 1; i <= 3; i++ {
		n := &raftNode{id: raft.ServerID(fmt.Sprint(i)), dir: t.TempDir(), addr: raft.ServerAddress(fmt.Sprintf("node-%d", i))}
		c.nodes = append(c.nodes, n)
		servers = append(servers, raft.Server{ID: n.id, Address: n.addr})
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		require.NoError(t, n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error())
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n.r != nil {
				c.stop(n)
			}
		}
	})
	return c
}

// record applies the commands [from, to) and notes them in want.
func (c *raftCluster) record(want map[string]string, from, to int) {
	c.apply(from, to)
	for i := from; i < to; i++ {
		want[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
	}
}

func TestRaftClusterOnTheseStores(t *testing.T) {
	c := newRaftCluster(t)
	want := map[string]string{}
	record := func(from, to int) { c.record(want, from, to) }
	record(0, 300)
	c.converge(want)

	// Snapshot everywhere: each log keeps only TrailingLogs entries.
	for _, n := range c.nodes {
		require.NoError(t, n.r.Snapshot().Error())
		first, last := index(t, n.logs.FirstIndex), index(t, n.logs.LastIndex)
		require.Greater(t, first, uint64(250), "node %s: the head was compacted", n.id)
		require.Equal(t, uint64(10), last-first+1, "node %s keeps TrailingLogs", n.id)
	}

	// A follower misses a few entries and catches up from the leader's log.
	f := c.nodes[0]
	if f == c.leader() {
		f = c.nodes[1]
	}
	c.stop(f)
	record(300, 305)
	c.start(f)
	c.converge(want)
	_, restores := f.fsm.state()
	require.Equal(t, 1, restores, "restarted from its own snapshot, then replayed the leader's entries")

	// It misses so much that the leader's log no longer holds what it needs:
	// the leader sends a snapshot, Raft deletes the follower's whole log and
	// the next StoreLogs restarts it past the snapshot.
	oldLast := index(t, f.logs.LastIndex)
	c.stop(f)
	record(305, 600)
	for _, n := range c.nodes {
		if n.r != nil {
			require.NoError(t, n.r.Snapshot().Error())
		}
	}
	require.Greater(t, index(t, c.leader().logs.FirstIndex), oldLast+1, "the leader no longer holds what the follower needs")
	c.start(f)
	record(600, 610)
	c.converge(want)
	_, restores = f.fsm.state()
	require.GreaterOrEqual(t, restores, 2, "its own snapshot at start, then the leader's")
	require.Greater(t, index(t, f.logs.FirstIndex), oldLast+1, "the follower's log restarted past the snapshot")

	// A new leader, elected among the rest, goes on.
	old := c.leader()
	c.stop(old)
	record(610, 700)
	c.start(old)
	c.converge(want)

	// Everything restarts from its directories: terms, votes, logs and
	// snapshots all come back.
	for _, n := range c.nodes {
		c.stop(n)
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	record(700, 720)
	c.converge(want)
	for _, n := range c.nodes {
		term, err := n.stable.GetUint64([]byte("CurrentTerm"))
		require.NoError(t, err)
		require.Positive(t, term)
	}
}

// A leader cut off from the others stores a long tail of entries that never
// commit; the others elect a leader, go on, snapshot and compact. Back, the
// old leader is sent a snapshot that ends below its tail: Raft deletes its
// whole log. Restarted, it stores the entries after the snapshot, below
// the old end of its log - the restart a log can only make once it is
// empty (log.Reset below the end) - and converges with the rest, none of
// the uncommitted tail left.
func TestRaftDeposedLeaderRestartsBelowItsTail(t *testing.T) {
	c := newRaftCluster(t)
	want := map[string]string{}
	c.record(want, 0, 50)
	c.converge(want)

	a := c.leader()
	a.trans.DisconnectAll()
	for _, o := range c.nodes {
		if o != a {
			o.trans.Disconnect(a.addr)
		}
	}
	var lost []raft.ApplyFuture
	for i := 0; i < 300; i++ {
		lost = append(lost, a.r.Apply([]byte(fmt.Sprintf("lost%d=x", i)), time.Second))
	}
	for _, f := range lost {
		require.Error(t, f.Error(), "cut off from the others, nothing commits")
	}
	tail := index(t, a.logs.LastIndex)

	var b *raftNode
	require.Eventually(t, func() bool {
		for _, n := range c.nodes {
			if n != a && n.r.State() == raft.Leader {
				b = n
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	c.record(want, 50, 70)
	for _, n := range c.nodes {
		if n != a {
			require.NoError(t, n.r.Snapshot().Error())
		}
	}
	snapshotIndex := index(t, b.logs.FirstIndex) + 9 // TrailingLogs 10 kept before the snapshot's end
	require.Less(t, snapshotIndex, tail, "the snapshot ends below the old leader's tail")

	// Reconnect: the old leader installs the snapshot and empties its log.
	for _, o := range c.nodes {
		if o != a {
			o.trans.Connect(a.addr, a.trans)
			a.trans.Connect(o.addr, o.trans)
		}
	}
	require.Eventually(t, func() bool {
		_, restores := a.fsm.state()
		first, _ := a.logs.FirstIndex()
		return restores > 0 && first == 0
	}, 20*time.Second, 10*time.Millisecond, "the old leader got the snapshot and deleted its log")
	require.Equal(t, tail, uint64(a.logs.log.EndOffset()), "the emptied log ends where the tail did")

	c.stop(a)
	c.start(a)
	c.record(want, 70, 80)
	c.converge(want)
	first, last := index(t, a.logs.FirstIndex), index(t, a.logs.LastIndex)
	require.LessOrEqual(t, first, tail, "restarted below the old end")
	lead := c.leader()
	for i := first; i <= last; i++ {
		var mine, theirs raft.Log
		require.NoError(t, a.logs.GetLog(i, &mine))
		if err := lead.logs.GetLog(i, &theirs); err == nil {
			require.Equal(t, theirs.Term, mine.Term, "index %d", i)
			require.Equal(t, theirs.Data, mine.Data, "index %d", i)
		}
		require.False(t, strings.HasPrefix(string(mine.Data), "lost"), "index %d holds an entry that never committed", i)
	}
}
