package controller

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

// testNode is one controller node on a real loopback listener.
type testNode struct {
	id  int32
	dir string
	l   net.Listener
	q   atomic.Pointer[Quorum]
	// stores survive a restart of the node, as files would.
	logs   *raft.InmemStore
	stable *raft.InmemStore
	wg     sync.WaitGroup
}

func (n *testNode) serve() {
	defer n.wg.Done()
	for {
		c, err := n.l.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(time.Second))
		b, err := br.ReadByte()
		c.SetReadDeadline(time.Time{})
		q := n.q.Load()
		if err != nil || b != RaftMagic || q == nil {
			c.Close()
			continue
		}
		q.ServeConn(&bufConn{Conn: c, r: br})
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type cluster struct {
	t      *testing.T
	voters []Voter
	nodes  map[int32]*testNode
	cfg    func(*Config)
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newCluster listens for n voters (ids 1..n) without starting them.
func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, nodes: map[int32]*testNode{}}
	for i := 1; i <= n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		nd := &testNode{id: int32(i), dir: t.TempDir(), l: l, logs: raft.NewInmemStore(), stable: raft.NewInmemStore()}
		nd.wg.Add(1)
		go nd.serve()
		c.nodes[int32(i)] = nd
		c.voters = append(c.voters, Voter{ID: int32(i), Addr: l.Addr().String()})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if q := nd.q.Load(); q != nil {
				q.Close()
			}
			nd.l.Close()
			nd.wg.Wait()
		}
	})
	return c
}

func (c *cluster) config(nd *testNode) Config {
	cfg := Config{
		NodeID: nd.id, Dir: nd.dir, Voters: c.voters, SessionTimeout: 400 * time.Millisecond,
		ElectionTimeout: 150 * time.Millisecond, Logger: testLogger(c.t).With("node", nd.id),
		OpenStores: func(string) (Stores, error) {
			return Stores{Log: nd.logs, Stable: nd.stable, Close: func() error { return nil }}, nil
		},
	}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	return cfg
}

func (c *cluster) start(id int32) *Quorum {
	nd := c.nodes[id]
	q, err := Open(c.config(nd))
	require.NoError(c.t, err)
	nd.q.Store(q)
	return q
}

func (c *cluster) stop(id int32) {
	nd := c.nodes[id]
	if q := nd.q.Swap(nil); q != nil {
		require.NoError(c.t, q.Close())
	}
}

func (c *cluster) startAll() {
	for id := range c.nodes {
		c.start(id)
	}
}

// active waits for an active controller and returns it.
func (c *cluster) active() *Quorum {
	c.t.Helper()
	var found *Quorum
	require.Eventually(c.t, func() bool {
		for _, nd := range c.nodes {
			if q := nd.q.Load(); q != nil && q.Active() {
				found = q
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "no active controller")
	return found
}

// converged waits until every running node's image has index at least
// that of the active controller's.
func (c *cluster) converged(idx uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range c.nodes {
		if q := nd.q.Load(); q != nil {
			require.NoError(c.t, q.WaitIndex(ctx, idx), "node %d", nd.id)
		}
	}
}

// registerAll registers brokers 1..n and heartbeats them until unfenced;
// it returns their epochs.
func registerAll(t *testing.T, q *Quorum, ids ...int32) map[int32]int64 {
	ctx := context.Background()
	epochs := map[int32]int64{}
	for _, id := range ids {
		e, err := q.RegisterBroker(ctx, Registration{BrokerID: id, IncarnationID: fmt.Sprintf("inc-%d", id), Kafka: Endpoint{Host: "localhost", Port: 9000 + id}})
		require.NoError(t, err)
		epochs[id] = e
	}
	for _, id := range ids {
		res, err := q.BrokerHeartbeat(ctx, Heartbeat{BrokerID: id, BrokerEpoch: epochs[id], MetadataIndex: q.Image().Index()})
		require.NoError(t, err)
		require.False(t, res.IsFenced)
		require.True(t, res.IsCaughtUp)
	}
	return epochs
}

// beat keeps brokers' sessions alive until the returned stop is called.
func beat(q func() *Quorum, epochs map[int32]int64, skip func(int32) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			cur := q()
			if cur == nil {
				continue
			}
			for id, e := range epochs {
				if skip != nil && skip(id) {
					continue
				}
				cur.BrokerHeartbeat(context.Background(), Heartbeat{BrokerID: id, BrokerEpoch: e, MetadataIndex: cur.Image().Index()})
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func TestQuorumCreatesTopicsAndEveryNodeSeesThem(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	q := c.active()
	require.NotEmpty(t, q.Image().ClusterID(), "the first active controller names the cluster")
	registerAll(t, q, 1, 2, 3)

	tp, err := q.CreateTopic(context.Background(), TopicRequest{Name: "orders", Partitions: 6, ReplicationFactor: 3, MinISR: 2, Config: []byte(`{"retention.ms":1000}`)})
	require.NoError(t, err)
	require.Len(t, tp.Partitions, 6)
	leaders := map[int32]int{}
	for _, st := range tp.Partitions {
		require.Len(t, st.Replicas, 3)
		require.Equal(t, st.Replicas[0], st.Leader)
		require.ElementsMatch(t, st.Replicas, st.ISR)
		leaders[st.Leader]++
	}
	require.Equal(t, map[int32]int{1: 2, 2: 2, 3: 2}, leaders, "leaders spread evenly")

	_, err = q.CreateTopic(context.Background(), TopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 1})
	require.ErrorIs(t, err, replica.ErrTopicExists)
	_, err = q.CreateTopic(context.Background(), TopicRequest{Name: "big", Partitions: 1, ReplicationFactor: 4})
	require.ErrorIs(t, err, replica.ErrNotEnoughBrokers)

	c.converged(q.Image().Index())
	for _, nd := range c.nodes {
		im := nd.q.Load().Image()
		got, ok := im.Topic("orders")
		require.True(t, ok, "node %d", nd.id)
		require.Equal(t, tp.ID, got.ID)
		require.Equal(t, tp.Partitions, got.Partitions)
		require.Equal(t, q.Image().ClusterID(), nd.q.Load().ClusterID())
	}

	// A non-controller refuses operations, naming the active one.
	for _, nd := range c.nodes {
		if other := nd.q.Load(); other != q {
			_, err := other.CreateTopic(context.Background(), TopicRequest{Name: "x", Partitions: 1, ReplicationFactor: 1})
			var nc *NotControllerError
			require.ErrorAs(t, err, &nc)
			require.Equal(t, q.cfg.NodeID, nc.Leader)
			require.Equal(t, q.Addr(), nc.Addr)
		}
	}
}

func TestQuorumFencesASilentBrokerAndMovesItsLeaderships(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	q := c.active()
	epochs := registerAll(t, q, 1, 2, 3)
	tp, err := q.CreateTopic(context.Background(), TopicRequest{Name: "t", Partitions: 3, ReplicationFactor: 3})
	require.NoError(t, err)
	_ = tp
	var silent atomic.Int32
	silent.Store(2)
	stop := beat(func() *Quorum { return q }, epochs, func(id int32) bool { return id == silent.Load() })
	defer stop()

	require.Eventually(t, func() bool {
		b, _ := q.Image().Broker(2)
		return b.Fenced
	}, 5*time.Second, 10*time.Millisecond, "broker 2 fenced after its session timeout")
	t2, _ := q.Image().Topic("t")
	for _, st := range t2.Partitions {
		require.NotEqual(t, int32(2), st.Leader, "%s", st)
		require.False(t, st.InISR(2), "%s", st)
		if st.Replicas[0] == 2 {
			require.Equal(t, int32(1), st.LeaderEpoch, "the partition broker 2 led has a new leader epoch")
		}
	}
	for _, id := range []int32{1, 3} {
		b, _ := q.Image().Broker(id)
		require.False(t, b.Fenced, "broker %d keeps heartbeating", id)
	}

	// It comes back (same incarnation: it was paused, not restarted): it
	// is unfenced, but joins ISRs only through its leaders' AlterPartition.
	silent.Store(-1)
	require.Eventually(t, func() bool {
		b, _ := q.Image().Broker(2)
		return !b.Fenced
	}, 5*time.Second, 10*time.Millisecond)
	st, _ := q.Image().Partition("t", 0)
	req := replica.AlterPartitionRequest{Topic: "t", Partition: 0, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch,
		ISR: append(append([]int32{}, st.ISR...), 2), BrokerEpochs: map[int32]int64{2: epochs[2] - 1}}
	_, err = q.AlterPartition(context.Background(), req)
	require.ErrorIs(t, err, replica.ErrIneligibleReplica, "a stale broker epoch may not join (KIP-903)")
	req.BrokerEpochs[2] = epochs[2]
	next, err := q.AlterPartition(context.Background(), req)
	require.NoError(t, err)
	require.True(t, next.InISR(2))
	_, err = q.AlterPartition(context.Background(), req)
	require.ErrorIs(t, err, replica.ErrStaleState, "the same change twice: stale partition epoch")
}

func TestQuorumSurvivesTheActiveControllersLoss(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	q := c.active()
	epochs := registerAll(t, q, 1, 2, 3)
	_, err := q.CreateTopic(context.Background(), TopicRequest{Name: "a", Partitions: 2, ReplicationFactor: 3})
	require.NoError(t, err)
	var cur atomic.Pointer[Quorum]
	cur.Store(q)
	stop := beat(func() *Quorum { return cur.Load() }, epochs, nil)
	defer stop()

	old := q.cfg.NodeID
	c.stop(old)
	q2 := c.active()
	require.NotEqual(t, old, q2.cfg.NodeID)
	cur.Store(q2)
	// Nobody is fenced merely because the controller moved: sessions
	// start afresh on the new active controller.
	time.Sleep(2 * q2.cfg.SessionTimeout)
	for _, id := range []int32{1, 2, 3} {
		b, _ := q2.Image().Broker(id)
		require.False(t, b.Fenced, "broker %d", id)
	}
	_, err = q2.CreateTopic(context.Background(), TopicRequest{Name: "b", Partitions: 1, ReplicationFactor: 2})
	require.NoError(t, err)

	// The old controller comes back from its stores and catches up.
	q3 := c.start(old)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, q3.WaitIndex(ctx, q2.Image().Index()))
	_, ok := q3.Image().Topic("b")
	require.True(t, ok)
}

func TestQuorumRegistration(t *testing.T) {
	c := newCluster(t, 1)
	c.startAll()
	q := c.active()
	ctx := context.Background()
	reg := Registration{BrokerID: 7, IncarnationID: "a", Kafka: Endpoint{Host: "h", Port: 1}}
	e1, err := q.RegisterBroker(ctx, reg)
	require.NoError(t, err)
	again, err := q.RegisterBroker(ctx, reg)
	require.NoError(t, err)
	require.Equal(t, e1, again, "the same incarnation registering again keeps its epoch")
	b, _ := q.Image().Broker(7)
	require.True(t, b.Fenced, "brokers register fenced")

	_, err = q.BrokerHeartbeat(ctx, Heartbeat{BrokerID: 7, BrokerEpoch: e1, MetadataIndex: uint64(e1)})
	require.NoError(t, err)
	b, _ = q.Image().Broker(7)
	require.False(t, b.Fenced, "unfenced once caught up")

	reg2 := reg
	reg2.IncarnationID = "b"
	_, err = q.RegisterBroker(ctx, reg2)
	require.ErrorIs(t, err, ErrDuplicateRegistration, "another process with id 7 while the first is alive")

	_, err = q.BrokerHeartbeat(ctx, Heartbeat{BrokerID: 7, BrokerEpoch: e1 - 1})
	require.ErrorIs(t, err, ErrStaleBrokerEpoch)

	bad := reg
	bad.ClusterID = "someone-else"
	_, err = q.RegisterBroker(ctx, bad)
	require.ErrorIs(t, err, ErrInconsistentClusterID)

	// Once the first incarnation's session has expired (it died), the new
	// one replaces it with a higher epoch.
	require.Eventually(t, func() bool {
		b, _ := q.Image().Broker(7)
		return b.Fenced
	}, 5*time.Second, 10*time.Millisecond)
	e2, err := q.RegisterBroker(ctx, reg2)
	require.NoError(t, err)
	require.Greater(t, e2, e1)

	// Producer ids come in disjoint blocks.
	f1, err := q.AllocateProducerIDs(ctx, 7, e2)
	require.NoError(t, err)
	f2, err := q.AllocateProducerIDs(ctx, 7, e2)
	require.NoError(t, err)
	require.Equal(t, f1+ProducerIDBlock, f2)
	_, err = q.AllocateProducerIDs(ctx, 7, e1)
	require.ErrorIs(t, err, ErrStaleBrokerEpoch)
}

func TestQuorumControlledShutdownMovesLeadershipFirst(t *testing.T) {
	c := newCluster(t, 1)
	c.startAll()
	q := c.active()
	epochs := registerAll(t, q, 1, 2, 3)
	stop := beat(func() *Quorum { return q }, epochs, nil)
	defer stop()
	_, err := q.CreateTopic(context.Background(), TopicRequest{Name: "t", Partitions: 3, ReplicationFactor: 2})
	require.NoError(t, err)
	require.Positive(t, q.Image().Leads(1))
	res, err := q.BrokerHeartbeat(context.Background(), Heartbeat{BrokerID: 1, BrokerEpoch: epochs[1], MetadataIndex: q.Image().Index(), WantShutdown: true})
	require.NoError(t, err)
	require.True(t, res.ShouldShutdown, "broker 1 leads nothing once its shutdown is committed")
	require.Zero(t, q.Image().Leads(1))
	b1, _ := q.Image().Broker(1)
	require.True(t, b1.Fenced, "a broker done with its controlled shutdown is fenced at once: clients are no longer sent to it")
	t1, _ := q.Image().Topic("t")
	for _, st := range t1.Partitions {
		if st.HasReplica(1) {
			require.False(t, st.InISR(1) && len(st.ISR) > 1, "%s", st)
		}
	}
}

func TestQuorumRefusesMismatchedPeers(t *testing.T) {
	c := newCluster(t, 2)
	c.start(1)
	c.start(2)
	q := c.active()
	// The active controller names the cluster in its first entry.
	require.Eventually(t, func() bool { return q.ClusterID() != "" }, 10*time.Second, 5*time.Millisecond)
	c.converged(q.Image().Index())

	// A third node told of other voters cannot start against them.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cfg := c.config(c.nodes[1])
	cfg.NodeID = 3
	cfg.Voters = append(append([]Voter{}, c.voters...), Voter{ID: 3, Addr: l.Addr().String()})
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrPeerMismatch)
	require.Contains(t, err.Error(), "--controller-quorum-voters")

	// A node whose data directory is of another cluster.
	c.stop(2)
	cfg = c.config(c.nodes[2])
	cfg.ClusterID = "another-cluster"
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrPeerMismatch)
	require.Contains(t, err.Error(), "another cluster")
}

func TestQuorumDeleteTopicAndCreatePartitionsAndConfig(t *testing.T) {
	c := newCluster(t, 1)
	c.startAll()
	q := c.active()
	epochs := registerAll(t, q, 1, 2)
	stop := beat(func() *Quorum { return q }, epochs, nil)
	defer stop()
	ctx := context.Background()
	tp, err := q.CreateTopic(ctx, TopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 2})
	require.NoError(t, err)
	require.NoError(t, q.CreatePartitions(ctx, "t", 3))
	t1, _ := q.Image().Topic("t")
	require.Len(t, t1.Partitions, 3)
	require.Equal(t, int32(2), t1.Partitions[2].Partition)
	require.Error(t, q.CreatePartitions(ctx, "t", 2))

	require.NoError(t, q.AlterTopicConfig(ctx, TopicConfigChange{Name: "t", BaseVersion: 0, Config: []byte(`{"retention.ms":5}`), MinISR: 2}))
	require.ErrorIs(t, q.AlterTopicConfig(ctx, TopicConfigChange{Name: "t", BaseVersion: 0, Config: []byte(`{}`)}), ErrConfigChanged)
	t1, _ = q.Image().Topic("t")
	require.JSONEq(t, `{"retention.ms":5}`, string(t1.Config))
	require.Equal(t, 2, t1.MinISR)

	require.NoError(t, q.DeleteTopic(ctx, "t"))
	_, ok := q.Image().Topic("t")
	require.False(t, ok)
	_, ok = q.Image().TopicByID(tp.ID)
	require.False(t, ok)
	require.ErrorIs(t, q.DeleteTopic(ctx, "t"), replica.ErrUnknownTopic)
}

func TestImageSnapshotRoundTrip(t *testing.T) {
	im := NewImage()
	yes := true
	im, _ = im.apply(Entry{V: 1, Records: []Record{
		{Cluster: &ClusterRecord{ClusterID: "c"}},
		{RegisterBroker: &RegisterBrokerRecord{BrokerID: 1, IncarnationID: "i", Kafka: Endpoint{Host: "h", Port: 9}}},
		{Topic: &TopicRecord{Name: "t", ID: "id", Config: []byte(`{"a":1}`), MinISR: 2}},
		partitionRecord("id", replica.PartitionState{Topic: "t", Partition: 0, Replicas: []int32{1}, Leader: 1, ISR: []int32{1}}),
		{ProducerIDs: &ProducerIDsRecord{NextProducerID: 1000}},
		{Settings: &SettingsRecord{Kind: SettingsACLs, Version: 1, Data: []byte(`[{"x":1}]`)}},
	}}, 5)
	im, _ = im.apply(Entry{V: 1, Records: []Record{{BrokerChange: &BrokerChangeRecord{BrokerID: 1, BrokerEpoch: 5, InControlledShutdown: &yes}}}}, 6)
	var buf pipeSink
	require.NoError(t, imageSnapshot{im}.Persist(&buf))
	f := newFSM(slog.New(slog.DiscardHandler))
	require.NoError(t, f.Restore(io.NopCloser(&buf.Buffer)))
	got := f.image()
	a, _ := im.MarshalJSON()
	b, _ := got.MarshalJSON()
	require.JSONEq(t, string(a), string(b))
	require.Equal(t, uint64(6), got.Index())
	br, _ := got.Broker(1)
	require.Equal(t, int64(5), br.Epoch)
	require.True(t, br.InControlledShutdown)
	require.Equal(t, Settings{Version: 1, Data: []byte(`[{"x":1}]`)}, got.Settings(SettingsACLs))
}

// A settings document changes only from its current version, one
// version at a time; through the quorum, a change from an old version is
// refused with ErrConfigChanged, and bad input with ErrInvalidConfig.
func TestSettingsChangeFromItsVersionOnly(t *testing.T) {
	im := NewImage()
	im, res := im.apply(Entry{V: 1, Records: []Record{
		{Settings: &SettingsRecord{Kind: SettingsQuotas, Version: 2, Data: []byte(`[]`)}}, // skips a version
		{Settings: &SettingsRecord{Kind: "passwords", Version: 1, Data: []byte(`[]`)}},    // unknown kind
		{Settings: &SettingsRecord{Kind: SettingsQuotas, Version: 1, Data: []byte(`[1]`)}},
	}}, 3)
	require.Equal(t, 2, res.Skipped)
	require.Equal(t, Settings{Version: 1, Data: []byte(`[1]`)}, im.Settings(SettingsQuotas))
	require.Zero(t, im.Settings(SettingsACLs).Version)

	c := newCluster(t, 1)
	c.cfg = func(cfg *Config) {
		cfg.ValidateSettings = func(k SettingsKind, data []byte) error {
			if string(data) == `["unreadable"]` {
				return errors.New("no node could read this")
			}
			return nil
		}
	}
	c.start(1)
	q := c.active()
	ctx := context.Background()
	require.NoError(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 0, Data: []byte(`["a"]`)}))
	require.ErrorIs(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 0, Data: []byte(`["b"]`)}), ErrConfigChanged)
	require.NoError(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 1, Data: []byte(`["b"]`)}))
	require.ErrorIs(t, q.AlterSettings(ctx, SettingsChange{Kind: "passwords", Data: []byte(`[]`)}), ErrInvalidConfig)
	require.ErrorIs(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 2, Data: []byte(`not json`)}), ErrInvalidConfig)
	require.Equal(t, Settings{Version: 2, Data: []byte(`["b"]`)}, q.Image().Settings(SettingsACLs))
	require.ErrorIs(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 2, Data: []byte(`["unreadable"]`)}), ErrInvalidConfig)

	// A change sent again after its answer was lost (same id) is done,
	// not stale - even once another change came after it; another
	// change from the old version is stale.
	require.NoError(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 2, Data: []byte(`["c"]`), ID: "change-c"}))
	require.NoError(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 3, Data: []byte(`["d"]`), ID: "change-d"}))
	require.NoError(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 2, Data: []byte(`["c"]`), ID: "change-c"}))
	require.ErrorIs(t, q.AlterSettings(ctx, SettingsChange{Kind: SettingsACLs, BaseVersion: 2, Data: []byte(`["e"]`), ID: "change-e"}), ErrConfigChanged)
	st := q.Image().Settings(SettingsACLs)
	require.Equal(t, int64(4), st.Version)
	require.Equal(t, `["d"]`, string(st.Data))
	require.Equal(t, []string{"change-c", "change-d"}, st.Recent)
}

func TestImageSkipsStaleChanges(t *testing.T) {
	im := NewImage()
	st := replica.PartitionState{Topic: "t", Partition: 0, Replicas: []int32{1, 2}, Leader: 1, ISR: []int32{1, 2}}
	im, _ = im.apply(Entry{V: 1, Records: []Record{{Topic: &TopicRecord{Name: "t", ID: "id"}}, partitionRecord("id", st)}}, 1)
	next := st.Clone()
	next.ISR = []int32{1}
	next.PartitionEpoch = 1
	im, res := im.apply(Entry{V: 1, Records: []Record{partitionRecord("id", next)}}, 2)
	require.Zero(t, res.Skipped)
	// The same change again, a change skipping an epoch, and one for a
	// re-created topic's old id: none applies.
	im2, res := im.apply(Entry{V: 1, Records: []Record{
		partitionRecord("id", next),
		partitionRecord("id", func() replica.PartitionState { s := next.Clone(); s.PartitionEpoch = 3; return s }()),
		partitionRecord("other", func() replica.PartitionState { s := next.Clone(); s.PartitionEpoch = 2; return s }()),
		{BrokerChange: &BrokerChangeRecord{BrokerID: 9, BrokerEpoch: 1}},
	}}, 3)
	require.Equal(t, 4, res.Skipped)
	got, _ := im2.Partition("t", 0)
	require.Equal(t, next, got)
	_, err := DecodeEntry([]byte(`{"v":2,"records":[]}`))
	require.True(t, errors.Is(err, ErrBadMetadataEntry))
}

// pipeSink is a raft.SnapshotSink in memory.
type pipeSink struct{ Buffer bytes.Buffer }

func (s *pipeSink) Write(p []byte) (int, error) { return s.Buffer.Write(p) }
func (s *pipeSink) Close() error                { return nil }
func (s *pipeSink) ID() string                  { return "test" }
func (s *pipeSink) Cancel() error               { return nil }

// A peer that stops sending halfway through a snapshot leaves Raft's main
// goroutine reading a connection that has no deadline. Close must still
// return: it cuts the node's Raft connections before it waits for Raft.
func TestQuorumCloseWhileAPeerStallsMidSnapshot(t *testing.T) {
	c := newCluster(t, 2)
	q := c.start(1) // node 2 is played below by a peer that stalls

	// The peer's side: a hello as node 2, then hashicorp/raft's own
	// transport sends an InstallSnapshot whose data never comes.
	dial := func(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
		nc, err := net.DialTimeout("tcp", string(addr), timeout)
		if err != nil {
			return nil, err
		}
		bw := bufio.NewWriter(nc)
		bw.WriteByte(RaftMagic)
		if err := writeFrame(bw, hello{NodeID: 2, Incarnation: "stalling-peer", Voters: FormatVoters(c.voters)}); err != nil {
			return nil, err
		}
		if err := bw.Flush(); err != nil {
			return nil, err
		}
		var ans helloAnswer
		if err := readFrame(nc, &ans); err != nil || ans.Error != "" {
			nc.Close()
			return nil, fmt.Errorf("hello: %v %s", err, ans.Error)
		}
		return nc, nil
	}
	peer := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &dialOnly{dial: dial}, MaxPool: 1, Logger: nil,
	})
	defer peer.Close()
	stalled, never := io.Pipe()
	defer never.Close()
	go peer.InstallSnapshot("1", raft.ServerAddress(c.voters[0].Addr), &raft.InstallSnapshotRequest{
		RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("2"), Addr: []byte(c.voters[1].Addr)},
		SnapshotVersion: raft.SnapshotVersionMax, Term: 1 << 20, LastLogIndex: 1 << 20, LastLogTerm: 1 << 20,
		Size: 1 << 20, ConfigurationIndex: 1 << 20,
		Configuration: raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{
			{Suffrage: raft.Voter, ID: "1", Address: raft.ServerAddress(c.voters[0].Addr)},
			{Suffrage: raft.Voter, ID: "2", Address: raft.ServerAddress(c.voters[1].Addr)},
		}}),
	}, &raft.InstallSnapshotResponse{}, stalled)

	// Node 1 took the peer as its leader: it is in the snapshot's copy.
	require.Eventually(t, func() bool {
		_, id := q.raft.LeaderWithID()
		return id == "2"
	}, 10*time.Second, 10*time.Millisecond)

	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Quorum.Close did not return while a peer stalled mid-snapshot")
	}
	c.nodes[1].q.Store(nil)
}

// dialOnly is a raft.StreamLayer that only dials.
type dialOnly struct {
	dial   func(raft.ServerAddress, time.Duration) (net.Conn, error)
	closed chan struct{}
	once   sync.Once
}

func (d *dialOnly) Dial(a raft.ServerAddress, t time.Duration) (net.Conn, error) { return d.dial(a, t) }
func (d *dialOnly) Accept() (net.Conn, error) {
	d.once.Do(func() { d.closed = make(chan struct{}) })
	<-d.closed
	return nil, net.ErrClosed
}
func (d *dialOnly) Close() error {
	d.once.Do(func() { d.closed = make(chan struct{}) })
	select {
	case <-d.closed:
	default:
		close(d.closed)
	}
	return nil
}
func (d *dialOnly) Addr() net.Addr { return strAddr("stalling-peer") }
