package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/testnet"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testCluster is n cluster nodes in this process, on loopback listeners:
// each a StartNode with its own data directory, talking to the others over
// real sockets.
type testCluster struct {
	t      testing.TB
	voters string
	ctrl   map[int32]string // controller listener addresses
	dirs   map[int32]string
	mu     sync.Mutex
	nodes  map[int32]*Node
	tune   func(*NodeConfig)
}

func freeAddr(t testing.TB) string { return testnet.FreeAddr(t) }

func clusterLogger() *slog.Logger {
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newTestCluster(t testing.TB, n int) *testCluster {
	c := &testCluster{t: t, ctrl: map[int32]string{}, dirs: map[int32]string{}, nodes: map[int32]*Node{}}
	var vs []string
	for i := int32(1); i <= int32(n); i++ {
		c.ctrl[i] = freeAddr(t)
		c.dirs[i] = t.TempDir()
		vs = append(vs, fmt.Sprintf("%d@%s", i, c.ctrl[i]))
	}
	c.voters = strings.Join(vs, ",")
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := c.nodes
		c.nodes = map[int32]*Node{}
		c.mu.Unlock()
		defer testnet.Watchdog(2*time.Minute, "closing the test cluster's nodes")()
		var wg sync.WaitGroup
		for _, nd := range nodes {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				nd.Close(ctx)
			})
		}
		wg.Wait()
	})
	return c
}

func (c *testCluster) config(id int32) NodeConfig {
	cfg := NodeConfig{
		Dir: c.dirs[id], NodeID: id, Listen: "127.0.0.1:0", ControllerListen: c.ctrl[id], QuorumVoters: c.voters,
		// Short enough to keep the tests quick, long enough that a loaded
		// two-core machine does not fence brokers that are alive.
		Cluster: spool.NodeOptions{SessionTimeout: 3 * time.Second, ElectionTimeout: 300 * time.Millisecond, ReplicaLagTime: 3 * time.Second, FetchMaxWait: 100 * time.Millisecond, FetchBackoff: 100 * time.Millisecond},
		Broker:  spool.Options{OffsetsTopicPartitions: 3},
		Logger:  clusterLogger().With("node", id),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

func (c *testCluster) start(id int32) *Node {
	c.t.Helper()
	nd, err := StartNode(c.config(id))
	require.NoError(c.t, err)
	c.mu.Lock()
	c.nodes[id] = nd
	c.mu.Unlock()
	return nd
}

func (c *testCluster) startAll() {
	var wg sync.WaitGroup
	for id := range c.dirs {
		wg.Go(func() { c.start(id) })
	}
	wg.Wait()
	for _, nd := range c.running() {
		select {
		case <-nd.Broker().Ready():
		case <-time.After(20 * time.Second):
			c.t.Fatalf("node not ready")
		}
	}
}

func (c *testCluster) running() map[int32]*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int32]*Node{}
	for id, nd := range c.nodes {
		out[id] = nd
	}
	return out
}

func (c *testCluster) stop(id int32) {
	c.mu.Lock()
	nd := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if nd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(c.t, nd.Close(ctx))
	}
}

func (c *testCluster) seeds() []string {
	var out []string
	for _, nd := range c.running() {
		out = append(out, nd.Addr().String())
	}
	return out
}

func TestClusterOverTheWire(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	md := func() *kmsg.MetadataResponse {
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp
	}
	require.Eventually(t, func() bool { return len(md().Brokers) == 3 }, 10*time.Second, 20*time.Millisecond, "every live broker is in metadata")

	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "orders", 3, 3
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "min.insync.replicas", Value: ptr("2")}}
	ct.Topics = append(ct.Topics, rt)
	cresp, err := ct.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, cresp.Topics[0].ErrorCode, "%v", cresp.Topics[0].ErrorMessage)

	require.Eventually(t, func() bool {
		for _, tp := range md().Topics {
			if tp.Topic == nil || *tp.Topic != "orders" {
				continue
			}
			for _, p := range tp.Partitions {
				if p.Leader < 0 || len(p.ISR) != 3 || len(p.Replicas) != 3 {
					return false
				}
			}
			return len(tp.Partitions) == 3
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "every partition has a leader and a full ISR")

	const n = 300
	for i := range n {
		r := &kgo.Record{Topic: "orders", Partition: int32(i % 3), Value: fmt.Appendf(nil, "v%d", i)}
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}

	// Every replica has every record (the followers copied them over
	// Kafka's Fetch), and the high watermark covers them.
	require.Eventually(t, func() bool {
		for _, nd := range c.running() {
			for p := int32(0); p < 3; p++ {
				part, err := nd.Broker().Partition("orders", p)
				if err != nil || part.EndOffset() != n/3 || part.HighWatermark() != n/3 {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond)

	cons, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("g1"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	require.NoError(t, err)
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(t string, p int32, err error) { require.NoError(nil, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	require.NoError(t, cons.CommitUncommittedOffsets(ctx))
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = "g1"
	oresp, err := of.RequestWith(ctx, cons)
	require.NoError(t, err)
	total := int64(0)
	for _, tp := range oresp.Topics {
		for _, p := range tp.Partitions {
			total += p.Offset
		}
	}
	require.Equal(t, int64(n), total, "the group's committed offsets")
}

func ptr[T any](v T) *T { return &v }

// createTopic creates a topic through any node, over the Kafka protocol,
// and waits until every partition has a leader and a full ISR.
func (c *testCluster) createTopic(ctx context.Context, cl *kgo.Client, name string, partitions int32, rf int16, configs map[string]string) {
	c.t.Helper()
	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	for k, v := range configs {
		rt.Configs = append(rt.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: k, Value: ptr(v)})
	}
	ct.Topics = append(ct.Topics, rt)
	// Until every broker has registered (a loaded machine is slow to),
	// the replication factor is refused INVALID_REPLICATION_FACTOR: retry.
	var cresp *kmsg.CreateTopicsResponse
	require.Eventually(c.t, func() bool {
		var err error
		cresp, err = ct.RequestWith(ctx, cl)
		require.NoError(c.t, err)
		return cresp.Topics[0].ErrorCode != 38 // INVALID_REPLICATION_FACTOR
	}, 30*time.Second, 100*time.Millisecond)
	require.Zero(c.t, cresp.Topics[0].ErrorCode, "%v", cresp.Topics[0].ErrorMessage)
	require.Eventually(c.t, func() bool {
		md := c.metadata(ctx, cl, name)
		if len(md.Partitions) != int(partitions) {
			return false
		}
		for _, p := range md.Partitions {
			if p.Leader < 0 || len(p.ISR) != int(rf) {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "topic %s ready", name)
}

func (c *testCluster) metadata(ctx context.Context, cl *kgo.Client, name string) kmsg.MetadataResponseTopic {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &name
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(c.t, err)
	return resp.Topics[0]
}

// TestClusterInProcessClientsReachRemoteLeaders: a node's own Producer and
// Consumer (the Go API) reach partitions whose leaders run in other
// processes, over the Kafka protocol.
func TestClusterInProcessClientsReachRemoteLeaders(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "t", 3, 2, nil)

	b := c.running()[1].Broker()
	leaders := map[int32]bool{}
	require.Eventually(t, func() bool {
		clear(leaders)
		for _, p := range c.metadata(ctx, cl, "t").Partitions {
			leaders[p.Leader] = true
		}
		return len(leaders) > 1
	}, 10*time.Second, 20*time.Millisecond, "partitions led by more than one node")

	p, err := b.NewProducer(spool.ProducerConfig{})
	require.NoError(t, err)
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		p.Produce(ctx, spool.Record{Topic: "t", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)},
			func(md spool.RecordMetadata, err error) {
				defer wg.Done()
				if err != nil {
					errs <- err
				}
			})
	}
	require.NoError(t, p.Flush(ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, p.Close())
	md, err := b.Produce(ctx, spool.Record{Topic: "t", Value: []byte("sync")})
	require.NoError(t, err)
	require.GreaterOrEqual(t, md.Offset, int64(0))

	cons, err := c.running()[2].Broker().NewConsumer(spool.ConsumerConfig{AutoOffsetReset: spool.ResetEarliest})
	require.NoError(t, err)
	defer cons.Close()
	require.NoError(t, cons.Assign("t"))
	seen := map[string]bool{}
	for len(seen) < n+1 {
		recs, err := cons.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			require.False(t, seen[string(r.Value)], "duplicate %s", r.Value)
			seen[string(r.Value)] = true
		}
	}
}

// TestClusterISRChangesThroughARemoteController: the ISR of a partition
// whose leader is not the active controller shrinks when a follower stops
// and grows back when it returns - the leader's AlterPartition goes over
// the wire - and the leader still knows its replicas afterwards (one that
// took AlterPartition's answer whole lost them, refused its followers'
// fetches and dropped them from the ISR again).
func TestClusterISRChangesThroughARemoteController(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "t", 3, 3, nil)

	// A partition whose leader is not the active controller (with three
	// partitions on three brokers, two of them).
	var part kmsg.MetadataResponseTopicPartition
	var active int32
	require.Eventually(t, func() bool {
		active, _ = c.running()[1].Broker().Quorum().Leader()
		for _, p := range c.metadata(ctx, cl, "t").Partitions {
			if p.Leader >= 0 && p.Leader != active && len(p.ISR) == 3 {
				part = p
				return active >= 0
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond)
	var follower int32
	for _, r := range part.Replicas {
		if r != part.Leader && r != active {
			follower = r
		}
	}
	require.NotZero(t, follower, "active %d, partition %+v", active, part)

	c.stop(follower)
	require.Eventually(t, func() bool {
		for _, p := range c.metadata(ctx, cl, "t").Partitions {
			if p.Partition == part.Partition {
				return len(p.ISR) == 2
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "follower %d leaves the ISR", follower)
	// The leader's measures say so: an ISR shrink, an under-replicated
	// partition; exactly one running broker is the active controller.
	leader := c.running()[part.Leader].Broker()
	require.Eventually(t, func() bool {
		st := leader.Stats()
		return st.ISRShrinks >= 1 && st.UnderReplicated >= 1
	}, 10*time.Second, 50*time.Millisecond)
	controllers := 0
	for _, n := range c.running() {
		if n.Broker().Stats().ActiveController {
			controllers++
		}
	}
	require.Equal(t, 1, controllers)
	c.start(follower)
	full := func() bool {
		for _, p := range c.metadata(ctx, cl, "t").Partitions {
			if p.Partition == part.Partition {
				return len(p.ISR) == 3
			}
		}
		return false
	}
	require.Eventually(t, full, 30*time.Second, 50*time.Millisecond, "follower %d rejoins the ISR", follower)
	// The leader took the controller's answer with the partition's
	// replicas (the response names none): it still knows every follower,
	// and an acks=all write commits on all three.
	rs, ok := c.running()[part.Leader].Broker().ReplicaNode().ReplicaSet("t", part.Partition)
	require.True(t, ok)
	require.ElementsMatch(t, []int32{1, 2, 3}, rs.State().Replicas)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()
	require.NoError(t, pcl.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: part.Partition, Value: []byte("x")}).FirstErr())
	st := leader.Stats()
	require.GreaterOrEqual(t, st.ISRExpands, int64(1))
	// The leader may lead another partition whose ISR the follower has
	// not rejoined yet: every one of them comes back in time.
	require.Eventually(t, func() bool { return leader.Stats().UnderReplicated == 0 }, 30*time.Second, 50*time.Millisecond)
	// The acks=all write waited for the followers: remote time.
	var produce APIStats
	for _, a := range c.running()[part.Leader].Server().APIStats() {
		if a.Name == "Produce" {
			produce = a
		}
	}
	require.NotZero(t, produce.Requests)
	require.Positive(t, produce.Remote.Sum, "%+v", produce)
}

// TestClusterAdministrationThroughAnyBroker: topic administration sent to
// a broker that is not the active controller is forwarded there and takes
// effect cluster-wide; DeleteRecords goes to the leader and the followers
// follow its log start.
func TestClusterAdministrationThroughAnyBroker(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	active, _ := c.running()[1].Broker().Quorum().Leader()
	var other *Node
	for id, nd := range c.running() {
		if id != active {
			other = nd
		}
	}
	// A client that knows only the broker that is not the controller.
	cl, err := kgo.NewClient(kgo.SeedBrokers(other.Addr().String()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "adm", 2, 3, map[string]string{"retention.ms": "86400000"})

	// CreatePartitions: 2 -> 4.
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis = 30000
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "adm", 4
	cp.Topics = append(cp.Topics, cpt)
	cpr, err := cp.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, cpr.Topics[0].ErrorCode, "%v", cpr.Topics[0].ErrorMessage)
	require.Eventually(t, func() bool {
		md := c.metadata(ctx, cl, "adm")
		if len(md.Partitions) != 4 {
			return false
		}
		for _, p := range md.Partitions {
			if p.Leader < 0 || len(p.ISR) != 3 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond)

	// IncrementalAlterConfigs, then every broker describes the new value.
	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "adm"
	res.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpSet, Value: ptr("3600000")}}
	ia.Resources = append(ia.Resources, res)
	// Retried on UNKNOWN_TOPIC_OR_PARTITION only: a fresh-clone run saw
	// it once here, right after CreatePartitions, from a node that looks
	// the topic up in its own metadata image before forwarding the change
	// (not yet explained; see the stop note). Any other error fails.
	var iar *kmsg.IncrementalAlterConfigsResponse
	for attempt := 0; ; attempt++ {
		iar, err = ia.RequestWith(ctx, cl)
		require.NoError(t, err)
		code := iar.Resources[0].ErrorCode
		if code != kerr.UnknownTopicOrPartition.Code || attempt == 50 {
			break
		}
		t.Logf("IncrementalAlterConfigs: UNKNOWN_TOPIC_OR_PARTITION (%s), attempt %d", derefString(iar.Resources[0].ErrorMessage), attempt)
		time.Sleep(100 * time.Millisecond)
	}
	require.Zero(t, iar.Resources[0].ErrorCode, "%s", derefString(iar.Resources[0].ErrorMessage))
	for id, nd := range c.running() {
		require.Eventually(t, func() bool {
			own, _, err := nd.Broker().TopicSettings("adm")
			return err == nil && own.RetentionTime == time.Hour
		}, 10*time.Second, 20*time.Millisecond, "broker %d sees the new retention", id)
	}

	// DeleteRecords below offset 5 of partition 0: leader and followers.
	for i := range 10 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "adm", Partition: 0, Value: fmt.Appendf(nil, "%d", i)}).FirstErr())
	}
	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.TimeoutMillis = 30000
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "adm"
	drt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 5}}
	dr.Topics = append(dr.Topics, drt)
	drr, err := dr.RequestWith(ctx, cl) // kgo sends it to the partition's leader
	require.NoError(t, err)
	require.Zero(t, drr.Topics[0].Partitions[0].ErrorCode)
	require.Eventually(t, func() bool {
		for _, nd := range c.running() {
			p, err := nd.Broker().Partition("adm", 0)
			if err != nil || p.StartOffset() != 5 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "every replica's log starts at 5")

	// DeleteTopics: gone from every broker, data directories included.
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TimeoutMillis = 30000
	dtt := kmsg.NewDeleteTopicsRequestTopic()
	dtt.Topic = ptr("adm")
	dt.Topics = append(dt.Topics, dtt)
	dt.TopicNames = []string{"adm"}
	dtr, err := dt.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, dtr.Topics[0].ErrorCode, "%v", dtr.Topics[0].ErrorMessage)
	require.Eventually(t, func() bool {
		for id, nd := range c.running() {
			if _, err := nd.Broker().DescribeTopic("adm"); err == nil {
				return false
			}
			if m, _ := filepath.Glob(filepath.Join(c.dirs[id], "adm-*")); len(m) > 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the topic and its replicas are gone everywhere")
}

// TestClusterBrokerOnlyNode: a node not among the voters is a broker only:
// it joins the metadata quorum as a non-voting member (added by the active
// controller when it registers), follows the metadata log and takes
// replicas like any broker.
func TestClusterBrokerOnlyNode(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c.dirs[4] = t.TempDir()
	c.ctrl[4] = freeAddr(t)
	n4 := c.start(4)
	select {
	case <-n4.Broker().Ready():
	case <-ctx.Done():
		t.Fatal("the broker-only node did not join")
	}
	require.False(t, n4.Broker().Quorum().Voter())

	cl, err := kgo.NewClient(kgo.SeedBrokers(n4.Addr().String()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(ctx, cl)
		return err == nil && len(resp.Brokers) == 4
	}, 20*time.Second, 50*time.Millisecond, "four brokers in metadata")
	c.createTopic(ctx, cl, "wide", 4, 4, nil)
	for p := int32(0); p < 4; p++ {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "wide", Partition: p, Value: []byte("x")}).FirstErr())
	}
	require.Eventually(t, func() bool {
		for p := int32(0); p < 4; p++ {
			part, err := n4.Broker().Partition("wide", p)
			if err != nil || part.HighWatermark() != 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the broker-only node holds a replica of every partition")
}

// TestClusterDialHook: every connection a node opens to another node goes
// through NodeConfig.Dial - Raft, controller requests and followers'
// fetches - so that a fault-injection harness can route each link through
// a proxy it controls.
func TestClusterDialHook(t *testing.T) {
	c := newTestCluster(t, 3)
	var mu sync.Mutex
	dialed := map[int32]map[string]int{}
	c.tune = func(cfg *NodeConfig) {
		id := cfg.NodeID
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			mu.Lock()
			if dialed[id] == nil {
				dialed[id] = map[string]int{}
			}
			dialed[id][addr]++
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "t", 1, 3, nil)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr())

	mu.Lock()
	defer mu.Unlock()
	for id, nd := range c.running() {
		for other, ctrl := range c.ctrl {
			if other != id {
				require.Positive(t, dialed[id][ctrl], "node %d dialed node %d's controller listener through the hook", id, other)
			}
		}
		_ = nd
	}
	// The partition's followers fetched from its leader through the hook.
	leader := c.metadata(ctx, cl, "t").Partitions[0].Leader
	for id := range c.running() {
		if id != leader {
			require.Positive(t, dialed[id][c.running()[leader].Addr().String()], "follower %d dialed leader %d through the hook", id, leader)
		}
	}
}

// TestClusterGroupThroughANonController: the first group to look for its
// coordinator at a broker that is not the active controller creates
// __consumer_offsets through the controller (the forwarded CreateTopics
// used to be refused there as a user's request for an internal topic,
// leaving every group without a coordinator).
func TestClusterGroupThroughANonController(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	active, _ := c.running()[1].Broker().Quorum().Leader()
	var other *Node
	for id, nd := range c.running() {
		if id != active {
			other = nd
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(other.Addr().String()))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = "g"
	require.Eventually(t, func() bool {
		resp, err := req.RequestWith(ctx, cl)
		return err == nil && resp.ErrorCode == 0 && resp.NodeID >= 0
	}, 30*time.Second, 100*time.Millisecond, "the group gets a coordinator")
	d, err := other.Broker().DescribeTopic(spool.OffsetsTopic)
	require.NoError(t, err)
	require.True(t, d.Internal)
	require.Len(t, d.Partitions[0].Replicas, 3)
}

// TestClusterServesClientsOnceReady: a node serves its Kafka listener only
// once it has registered and caught up with the metadata log, as a Kafka
// broker enables request processing only then. Before, a restarted node
// answered from an empty image - no brokers, every topic unknown - and a
// client told that a topic does not exist gives up on the records it
// holds for it (franz-go fails them after a few such answers), as the
// clustertest fault runs saw after every restart. Here a restarted
// node's own connections to the others are held, so that it cannot
// register: its Kafka listener accepts but does not answer; let through,
// the node registers and answers with the topic and the brokers.
func TestClusterServesClientsOnceReady(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "orders", 1, 3, nil)

	c.stop(3)
	gate := make(chan struct{})
	c.tune = func(cfg *NodeConfig) {
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	nd := c.start(3)
	direct, err := kgo.NewClient(kgo.SeedBrokers(nd.Addr().String()))
	require.NoError(t, err)
	defer direct.Close()
	metadata := func(ctx context.Context) (*kmsg.MetadataResponse, error) {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = ptr("orders")
		req.Topics = append(req.Topics, rt)
		return req.RequestWith(ctx, direct)
	}

	// Not registered: nothing is answered. (A slow machine could only
	// make this pass wrongly, never fail wrongly.)
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	resp, err := metadata(wctx)
	wcancel()
	require.Error(t, err, "a node that has not registered answered Metadata: %d brokers, topic error %d", brokersOf(resp), topicErr(resp))
	select {
	case <-nd.Broker().Ready():
		t.Fatal("ready without reaching the controller")
	default:
	}

	close(gate)
	select {
	case <-nd.Broker().Ready():
	case <-ctx.Done():
		t.Fatal("never ready")
	}
	resp, err = metadata(ctx)
	require.NoError(t, err)
	require.Zero(t, topicErr(resp), "the topic, from a ready node")
	require.NotEmpty(t, brokerIDs(resp), "the brokers, from a ready node")
}

func brokersOf(resp *kmsg.MetadataResponse) int {
	if resp == nil {
		return -1
	}
	return len(resp.Brokers)
}

func brokerIDs(resp *kmsg.MetadataResponse) []int32 {
	var out []int32
	for _, b := range resp.Brokers {
		out = append(out, b.NodeID)
	}
	return out
}

func topicErr(resp *kmsg.MetadataResponse) int16 {
	if resp == nil || len(resp.Topics) == 0 {
		return -1
	}
	return resp.Topics[0].ErrorCode
}

// TestClusterTransactions: a transaction over partitions led by three
// different nodes commits or aborts as a whole - the coordinator writes
// its markers to the other nodes' leaders over WriteTxnMarkers - and a
// transaction survives its coordinator's node stopping in the middle: the
// state partition's new leader loads it and the commit goes through there.
func TestClusterTransactions(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tune = func(cfg *NodeConfig) { cfg.Broker.TransactionStatePartitions = 3 }
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "t", 3, 3, nil)
	require.Eventually(t, func() bool {
		leaders := map[int32]bool{}
		for _, p := range c.metadata(ctx, cl, "t").Partitions {
			leaders[p.Leader] = true
		}
		return len(leaders) == 3
	}, 20*time.Second, 50*time.Millisecond, "the partitions have three different leaders")

	p, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.TransactionalID("cluster-tx"), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
	require.NoError(t, err)
	defer p.Close()
	send := func(prefix string) {
		for part := range int32(3) {
			v := fmt.Sprintf("%s-%d", prefix, part)
			require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(v)}).FirstErr())
		}
	}
	require.NoError(t, p.BeginTransaction())
	send("committed")
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, p.BeginTransaction())
	send("aborted")
	require.NoError(t, p.EndTransaction(ctx, kgo.TryAbort))

	// The coordinator's node stops while a transaction is open.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey = 1, "cluster-tx"
	fr, err := fc.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, fr.ErrorCode)
	require.NoError(t, p.BeginTransaction())
	send("failover")
	c.stop(fr.NodeID)
	require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit))

	want := []string{"committed-0", "committed-1", "committed-2", "failover-0", "failover-1", "failover-2"}
	seeds := c.seeds()
	var got []string
	require.Eventually(t, func() bool {
		got = readAll(t, strings.Join(seeds, ","), "t", true, len(want))
		return len(got) >= len(want)
	}, 30*time.Second, 100*time.Millisecond, "read_committed sees the committed transactions: %v", &got)
	require.ElementsMatch(t, want, got)
	require.Len(t, readAll(t, strings.Join(seeds, ","), "t", false, 9), 9, "read_uncommitted sees the aborted records too")
}

// derefString is *p, or "" for nil: an error message of a Kafka response.
func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
