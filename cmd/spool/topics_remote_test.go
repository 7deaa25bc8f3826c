package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/testnet"
	"github.com/spoolmq/spool/transport"
)

// remoteColumns are the columns of "spool topics describe --bootstrap-server";
// a data directory's table has SIZE and SEGMENTS after them.
var remoteColumns = []string{"PARTITION", "LEADER", "LEADER-EPOCH", "REPLICAS", "ISR", "OFFLINE-REPLICAS", "START", "END", "HIGH-WATERMARK"}

// described is the output of "spool topics describe" for one topic.
type described struct {
	topic  string     // the topic line
	header []string   // the table's columns
	rows   [][]string // a partition a row, split into words
	notes  []string   // the lines under the table
}

// parseDescribe splits the output of "spool topics describe" into its
// topics, by name.
func parseDescribe(t *testing.T, out string) map[string]described {
	t.Helper()
	topics := map[string]described{}
	for _, block := range strings.Split(strings.TrimSuffix(out, "\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		require.GreaterOrEqual(t, len(lines), 2, out)
		name, _, ok := strings.Cut(strings.TrimPrefix(lines[0], "Topic: "), "\t")
		require.True(t, ok, lines[0])
		d := described{topic: lines[0], header: strings.Fields(lines[1])}
		for _, line := range lines[2:] {
			if f := strings.Fields(line); len(f) == len(d.header) && !strings.HasPrefix(line, "Partition ") {
				d.rows = append(d.rows, f)
			} else {
				d.notes = append(d.notes, line)
			}
		}
		topics[name] = d
	}
	return topics
}

// serveBroker serves a broker on a fresh data directory on a loopback
// listener, as spool serve does, and returns the directory, the address
// and a function that stops the server and closes the broker (also run at
// the end of the test).
func serveBroker(t *testing.T) (dir, addr string, stop func()) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	b, err := spool.Open(dir, spool.Options{})
	require.NoError(t, err)
	srv, err := transport.NewServer(b, transport.Options{})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, srv.Shutdown(ctx))
			require.ErrorIs(t, <-served, transport.ErrServerClosed)
			require.NoError(t, b.Close())
		})
	}
	t.Cleanup(stop)
	return dir, l.Addr().String(), stop
}

// kafkaClient is a franz-go client of the brokers at addrs that produces
// with acks=all to the partition a record names.
func kafkaClient(t *testing.T, addrs ...string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produceN produces n records to a partition and waits for each to be
// acknowledged.
func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, n int) {
	t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i)}
		require.NoError(t, cl.ProduceSync(t.Context(), r).FirstErr())
	}
}

// Every topics command reaches a standalone broker over the Kafka protocol
// with --bootstrap-server, with the output it has on the broker's data
// directory; the broker's refusals come back as exit status 1 with the
// Kafka error and the broker's message, and change nothing.
func TestTopicsRemoteStandalone(t *testing.T) {
	dir, addr, stop := serveBroker(t)
	remote := func(args ...string) (int, string, string) {
		t.Helper()
		return runTool(t, append(append([]string{"topics"}, args...), "--bootstrap-server", addr)...)
	}

	code, stdout, stderr := remote("create", "--topic", "events", "--partitions", "3",
		"--config", "retention.ms=-1", "--config", "segment.bytes=65536", "--compression", "zstd", "--max-message-bytes", "4096")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Created topic events.\n", stdout)
	code, _, stderr = remote("create", "--topic", "audit") // the broker's defaults: 1 partition
	require.Equal(t, exitOK, code, stderr)

	code, stdout, stderr = remote("list")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "audit\nevents\n", stdout)

	// Offsets come from the partitions' leader: 5 records, the first 2
	// deleted.
	cl := kafkaClient(t, addr)
	produceN(t, cl, "events", 0, 5)
	dr := kmsg.NewPtrDeleteRecordsRequest()
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "events"
	drt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 2}}
	dr.Topics = append(dr.Topics, drt)
	drResp, err := dr.RequestWith(t.Context(), cl)
	require.NoError(t, err)
	require.Zero(t, drResp.Topics[0].Partitions[0].ErrorCode)

	code, stdout, stderr = remote("describe", "--topic", "events")
	require.Equal(t, exitOK, code, stderr)
	d := parseDescribe(t, stdout)["events"]
	require.Regexp(t, `^Topic: events\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: `, d.topic)
	for _, kv := range []string{"retention.ms=-1", "segment.bytes=65536", "compression.type=zstd", "max.message.bytes=4096", "cleanup.policy=delete", "min.insync.replicas=1"} {
		require.Contains(t, d.topic, kv)
	}
	require.Equal(t, remoteColumns, d.header)
	// The server is node 1 (transport.DefaultNodeID): leader, only
	// replica and ISR.
	require.Equal(t, [][]string{
		{"0", "1", "0", "1", "1", "-", "2", "5", "5"},
		{"1", "1", "0", "1", "1", "-", "0", "0", "0"},
		{"2", "1", "0", "1", "1", "-", "0", "0", "0"},
	}, d.rows)
	require.Empty(t, d.notes)

	code, stdout, stderr = remote("describe")
	require.Equal(t, exitOK, code, stderr)
	all := parseDescribe(t, stdout)
	require.Len(t, all, 2, stdout)
	require.Contains(t, all["audit"].topic, "PartitionCount: 1\tReplicationFactor: 1\t")
	require.Equal(t, d, all["events"])
	require.Less(t, strings.Index(stdout, "Topic: audit"), strings.Index(stdout, "Topic: events"), "sorted by name")

	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  []string
	}{
		{"exists", []string{"create", "--topic", "events"}, exitProblem, []string{`topic "events": TOPIC_ALREADY_EXISTS: Topic 'events' already exists.`}},
		{"too many replicas", []string{"create", "--topic", "x", "--replication-factor", "2"}, exitProblem,
			[]string{`topic "x": INVALID_REPLICATION_FACTOR`, "only 1 broker(s) are registered"}},
		{"unknown setting", []string{"create", "--topic", "x", "--config", "retention.hours=1"}, exitProblem,
			[]string{`topic "x": INVALID_CONFIG: Unknown topic config name: retention.hours`}},
		{"bad setting", []string{"create", "--topic", "x", "--config", "retention.ms=soon"}, exitProblem,
			[]string{`topic "x": INVALID_CONFIG: Invalid value soon for configuration retention.ms`}},
		{"invalid name", []string{"create", "--topic", "no/slashes"}, exitProblem, []string{`topic "no/slashes": INVALID_TOPIC_EXCEPTION`}},
		{"setting without a value", []string{"create", "--topic", "x", "--config", "retention.ms"}, exitUsage, []string{"want name=value"}},
		{"setting twice", []string{"create", "--topic", "x", "--config", "retention.ms=1", "--config", "retention.ms=2"}, exitUsage, []string{"retention.ms is given twice"}},
		{"flag and setting", []string{"create", "--topic", "x", "--retention-ms", "5", "--config", "retention.ms=1"}, exitUsage,
			[]string{"--retention-ms and --config retention.ms=1 set the same setting"}},
		{"describe unknown", []string{"describe", "--topic", "nope"}, exitProblem, []string{`spool topics describe: topic "nope": UNKNOWN_TOPIC_OR_PARTITION`}},
		{"delete unknown", []string{"delete", "--topic", "nope"}, exitProblem, []string{`spool topics delete: topic "nope": UNKNOWN_TOPIC_OR_PARTITION`}},
		{"flush", []string{"list", "--flush", "none"}, exitUsage, []string{"flag provided but not defined: --flush"}},
		{"zero timeout", []string{"list", "--timeout", "0s"}, exitUsage, []string{"--timeout must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := remote(tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Empty(t, stdout)
			for _, msg := range tc.msg {
				require.Contains(t, stderr, msg)
			}
		})
	}
	for _, bad := range []string{"localhost", "localhost:0", "127.0.0.1:9092,", "127.0.0.1:port"} {
		code, _, stderr := runTool(t, "topics", "list", "--bootstrap-server", bad)
		require.Equal(t, exitUsage, code, bad)
		require.Contains(t, stderr, "want HOST:PORT[,HOST:PORT...]", bad)
	}
	// The refusals changed nothing.
	code, stdout, _ = remote("list")
	require.Equal(t, exitOK, code)
	require.Equal(t, "audit\nevents\n", stdout)

	code, stdout, stderr = remote("delete", "--topic", "audit")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Deleted topic audit.\n", stdout)
	code, stdout, _ = remote("list")
	require.Equal(t, exitOK, code)
	require.Equal(t, "events\n", stdout)

	// The data directory, once no server holds it, describes the same
	// topic: the same ID, settings and offsets, its node (the tool's
	// broker is node 0) leader, replica and ISR, and what is on disk.
	stop()
	code, stdout, stderr = runTool(t, "topics", "describe", "--data", dir)
	require.Equal(t, exitOK, code, stderr)
	local := parseDescribe(t, stdout)
	require.Len(t, local, 1, stdout)
	require.Equal(t, d.topic, local["events"].topic)
	require.Equal(t, append(remoteColumns, "SIZE", "SEGMENTS"), local["events"].header)
	for i, row := range local["events"].rows {
		require.Equal(t, []string{d.rows[i][0], "0", "0", "0", "0", "-"}, row[:6])
		require.Equal(t, d.rows[i][6:9], row[6:9], "offsets")
	}
}

// A bootstrap server nobody listens on fails every command at once, exit
// status 1, naming the address.
func TestTopicsRemoteUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	for _, args := range [][]string{
		{"list"},
		{"describe"},
		{"describe", "--topic", "events"},
		{"create", "--topic", "events"},
		{"delete", "--topic", "events"},
	} {
		code, stdout, stderr := runTool(t, append(append([]string{"topics"}, args...), "--bootstrap-server", addr)...)
		require.Equal(t, exitProblem, code, args)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "spool topics "+args[0]+": no broker answered (bootstrap servers "+addr+"): ", args)
		require.Contains(t, stderr, "connection refused", args)
	}
}

// testCluster is n cluster nodes in this process, each a
// transport.StartNode with its own data directory on loopback listeners,
// as in transport/cluster_test.go.
type testCluster struct {
	t      *testing.T
	voters string
	ctrl   map[int32]string
	dirs   map[int32]string
	mu     sync.Mutex
	nodes  map[int32]*transport.Node
}

func freeAddr(t *testing.T) string { return testnet.FreeAddr(t) }

// startCluster starts n nodes and waits until each has registered and
// caught up with the metadata log; they are closed at the end of the test.
func startCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, ctrl: map[int32]string{}, dirs: map[int32]string{}, nodes: map[int32]*transport.Node{}}
	var vs []string
	for id := int32(1); id <= int32(n); id++ {
		c.ctrl[id], c.dirs[id] = freeAddr(t), t.TempDir()
		vs = append(vs, fmt.Sprintf("%d@%s", id, c.ctrl[id]))
	}
	c.voters = strings.Join(vs, ",")
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := c.nodes
		c.nodes = nil
		c.mu.Unlock()
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
	var (
		wg   sync.WaitGroup
		errs = make([]error, n+1)
	)
	for id := int32(1); id <= int32(n); id++ {
		wg.Go(func() {
			nd, err := transport.StartNode(transport.NodeConfig{
				Dir: c.dirs[id], NodeID: id, Listen: "127.0.0.1:0", ControllerListen: c.ctrl[id], QuorumVoters: c.voters,
				Cluster: spool.NodeOptions{SessionTimeout: time.Second, ElectionTimeout: 200 * time.Millisecond,
					ReplicaLagTime: 2 * time.Second, FetchMaxWait: 100 * time.Millisecond, FetchBackoff: 100 * time.Millisecond},
				Broker: spool.Options{OffsetsTopicPartitions: 3},
			})
			if err != nil {
				errs[id] = err
				return
			}
			c.mu.Lock()
			c.nodes[id] = nd
			c.mu.Unlock()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for id, nd := range c.nodes {
		select {
		case <-nd.Broker().Ready():
		case <-time.After(30 * time.Second):
			t.Fatalf("node %d did not become ready", id)
		}
	}
	// Ready means a node has registered; the brokers count toward a
	// replication factor once the controller has unfenced them (caught up),
	// and each node must have applied that.
	deadline := time.Now().Add(30 * time.Second)
	for id, nd := range c.nodes {
		for {
			info, _ := nd.Broker().Cluster()
			if len(info.Brokers) == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d sees %d unfenced brokers, want %d", id, len(info.Brokers), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// addr is the Kafka listener of node id.
func (c *testCluster) addr(id int32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id].Addr().String()
}

// stop shuts node id down (a controlled shutdown: its leaderships move
// first).
func (c *testCluster) stop(id int32) {
	c.mu.Lock()
	nd := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(c.t, nd.Close(ctx))
}

// Against a three-node cluster, over the wire: create places the replicas
// on the brokers and takes Kafka settings, describe shows each partition's
// leader, replicas, ISR, offline replicas and its leader's offsets, also
// while a broker is down, and the cluster's refusals (more replicas than
// brokers, a bad setting, an unknown topic) are exit status 1 with the
// reason.
func TestTopicsRemoteCluster(t *testing.T) {
	c := startCluster(t, 3)
	all := strings.Join([]string{c.addr(1), c.addr(2), c.addr(3)}, ",")
	topics := func(bootstrap string, args ...string) (int, string, string) {
		t.Helper()
		return runTool(t, append(append([]string{"topics"}, args...), "--bootstrap-server", bootstrap)...)
	}
	// A broker that has not yet applied the newest metadata answers with
	// the older; what the tests wait for holds on every broker in the end.
	eventually := func(bootstrap string, check func(code int, stdout, stderr string) bool, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, errOut := topics(bootstrap, args...)
			if check(code, out, errOut) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("spool topics %v --bootstrap-server %s: still, after 30s: exit %d\n%s%s", args, bootstrap, code, out, errOut)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	code, stdout, stderr := topics(all, "create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3",
		"--config", "min.insync.replicas=2", "--retention-ms", "-1")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Created topic orders.\n", stdout)

	for _, tc := range []struct {
		name string
		args []string
		msg  []string
	}{
		{"more replicas than brokers", []string{"create", "--topic", "wide", "--replication-factor", "4"},
			[]string{`spool topics create: topic "wide": INVALID_REPLICATION_FACTOR`, "only 3 broker(s) are registered"}},
		{"bad setting", []string{"create", "--topic", "bad", "--config", "cleanup.policy=sometimes"},
			[]string{`spool topics create: topic "bad": INVALID_CONFIG: Invalid value sometimes for configuration cleanup.policy`}},
		{"unknown setting", []string{"create", "--topic", "bad", "--config", "flush.sometimes=1"},
			[]string{`spool topics create: topic "bad": INVALID_CONFIG: Unknown topic config name: flush.sometimes`}},
		{"exists", []string{"create", "--topic", "orders"}, []string{`topic "orders": TOPIC_ALREADY_EXISTS`}},
		{"delete unknown", []string{"delete", "--topic", "nope"}, []string{`spool topics delete: topic "nope": UNKNOWN_TOPIC_OR_PARTITION`}},
		{"describe unknown", []string{"describe", "--topic", "nope"}, []string{`spool topics describe: topic "nope": UNKNOWN_TOPIC_OR_PARTITION`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := topics(all, tc.args...)
			require.Equal(t, exitProblem, code, stderr)
			require.Empty(t, stdout)
			for _, msg := range tc.msg {
				require.Contains(t, stderr, msg)
			}
		})
	}

	cl := kafkaClient(t, strings.Split(all, ",")...)
	for p := range int32(3) {
		produceN(t, cl, "orders", p, 4+int(p))
	}

	// Every broker describes every partition with three replicas in sync,
	// and the offsets its leader gives. The refused topics do not exist.
	for _, id := range []int32{1, 2, 3} {
		stdout = eventually(c.addr(id), func(code int, stdout, _ string) bool {
			if code != exitOK {
				return false
			}
			d, ok := parseDescribe(t, stdout)["orders"]
			if !ok || len(d.rows) != 3 {
				return false
			}
			for _, r := range d.rows {
				if len(strings.Split(r[4], ",")) != 3 {
					return false
				}
			}
			return true
		}, "describe")
		described := parseDescribe(t, stdout)
		require.NotContains(t, described, "wide")
		require.NotContains(t, described, "bad")
		d := described["orders"]
		require.Regexp(t, `^Topic: orders\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: `, d.topic)
		require.Contains(t, d.topic, "min.insync.replicas=2")
		require.Contains(t, d.topic, "retention.ms=-1")
		require.Equal(t, remoteColumns, d.header)
		for p, r := range d.rows {
			replicas := strings.Split(r[3], ",")
			require.ElementsMatch(t, []string{"1", "2", "3"}, replicas, r)
			require.ElementsMatch(t, replicas, strings.Split(r[4], ","), r)
			require.Contains(t, replicas, r[1], "the leader is a replica: %v", r)
			require.Equal(t, []string{fmt.Sprint(p), "-", "0", fmt.Sprint(4 + p), fmt.Sprint(4 + p)}, []string{r[0], r[5], r[6], r[7], r[8]})
		}
		require.Empty(t, d.notes)
	}
	// (__consumer_offsets exists once a group coordinator is first asked
	// for, which this test does not do.)
	code, stdout, stderr = topics(c.addr(2), "list")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "orders\n", strings.ReplaceAll(stdout, spool.OffsetsTopic+"\n", ""))

	// A topic created through one broker and deleted through another is
	// gone from every broker.
	code, _, stderr = topics(c.addr(3), "create", "--topic", "scratch", "--partitions", "2", "--replication-factor", "2")
	require.Equal(t, exitOK, code, stderr)
	eventually(c.addr(2), func(code int, _, _ string) bool { return code == exitOK }, "describe", "--topic", "scratch")
	code, stdout, stderr = topics(c.addr(2), "delete", "--topic", "scratch")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Deleted topic scratch.\n", stdout)
	for _, id := range []int32{1, 2, 3} {
		eventually(c.addr(id), func(code int, stdout, _ string) bool {
			return code == exitOK && !slices.Contains(strings.Split(stdout, "\n"), "scratch")
		}, "list")
		eventually(c.addr(id), func(code int, _, stderr string) bool {
			return code == exitProblem && strings.Contains(stderr, `topic "scratch": UNKNOWN_TOPIC_OR_PARTITION`)
		}, "describe", "--topic", "scratch")
	}

	// With broker 3 down, its replicas are offline and out of the ISR, the
	// leaders are elsewhere, and the records are all there.
	c.stop(3)
	stdout = eventually(c.addr(1), func(code int, stdout, _ string) bool {
		if code != exitOK {
			return false
		}
		d := parseDescribe(t, stdout)["orders"]
		for _, r := range d.rows {
			if r[5] != "3" || r[1] == "3" || len(d.notes) > 0 {
				return false
			}
		}
		return len(d.rows) == 3
	}, "describe", "--topic", "orders")
	for p, r := range parseDescribe(t, stdout)["orders"].rows {
		require.ElementsMatch(t, []string{"1", "2", "3"}, strings.Split(r[3], ","), r)
		require.ElementsMatch(t, []string{"1", "2"}, strings.Split(r[4], ","), r)
		require.Equal(t, []string{"0", fmt.Sprint(4 + p), fmt.Sprint(4 + p)}, r[6:9], r)
	}
	code, _, stderr = topics(c.addr(1), "create", "--topic", "wide", "--replication-factor", "3")
	require.Equal(t, exitProblem, code, stderr)
	require.Contains(t, stderr, "only 2 broker(s) are registered")

	// The stopped node's data directory is refused, not taken for a
	// standalone broker's with a damaged registry, and left as it was.
	dir := c.dirs[3]
	before := dirListing(t, dir)
	for _, args := range [][]string{
		{"topics", "describe", "--data", dir},
		{"groups", "list", "--data", dir},
		{"serve", "--data", dir, "--listen", "127.0.0.1:0"},
	} {
		code, _, stderr = runTool(t, args...)
		require.Equal(t, exitProblem, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "spool "+args[0], args)
		require.Contains(t, stderr, dir+" belongs to a cluster node (it holds the cluster's metadata log, __cluster_metadata-0): "+
			"start the node with spool serve and its --node-id and --controller-quorum-voters", args)
	}
	require.Equal(t, before, dirListing(t, dir))

}

// dirListing lists the names under dir, recursively, with each file's size.
func dirListing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		size := int64(0)
		if !e.IsDir() {
			size = info.Size()
		}
		out = append(out, fmt.Sprintf("%s %d", path, size))
		return nil
	}))
	return out
}
