package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
)

// The tests here start real "spool serve" cluster nodes and then make each
// mistake an operator can make when starting one more: the misconfigured
// process must exit 1 with a message that names the flag to fix, write
// nothing into the data directory it was given, and leave the running
// cluster serving.

// freeLoopbackAddrs returns n addresses on 127.0.0.1 that were free a
// moment ago (a listener picked each port, then closed), for voters'
// controller listeners, which must be known before any node starts.
func freeLoopbackAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		out = append(out, l.Addr().String())
		require.NoError(t, l.Close())
	}
	return out
}

// votersFlag is the --controller-quorum-voters value naming addrs as
// voters 1, 2, ...
func votersFlag(addrs []string) string {
	var parts []string
	for i, a := range addrs {
		parts = append(parts, fmt.Sprintf("%d@%s", i+1, a))
	}
	return strings.Join(parts, ",")
}

// startClusterNode starts "spool serve" as node id of the cluster voters
// names, on data, and waits until it listens.
func startClusterNode(t *testing.T, id int, data, voters string, args ...string) *servedBroker {
	t.Helper()
	return startServe(t, append([]string{"--data", data, "--node-id", strconv.Itoa(id), "--controller-quorum-voters", voters}, args...)...)
}

// serveToExit runs "spool serve --listen 127.0.0.1:0" with args as a
// process and returns its exit status and stderr. A process still running
// after a minute fails the test: it should have refused to start.
func serveToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runToExit(t, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
}

// runToExit runs the spool binary with args and returns its exit status
// and stderr; it fails the test if the process runs for more than a
// minute.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, spoolBinary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "spool %v is still running (it should have refused to start):\n%s", args, stderr.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

// dirContents maps every file under dir, by its path relative to dir, to
// the SHA-256 of its bytes, and every directory to "dir": two equal results
// mean nothing was written, created or removed in between.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	require.NoError(t, err)
	return out
}

// requireNothingWritten checks that a data directory a refused node was
// given holds nothing but, at most, the lock file Open takes first.
func requireNothingWritten(t *testing.T, data string) {
	t.Helper()
	entries, err := os.ReadDir(data)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	require.NoError(t, err)
	for _, e := range entries {
		require.Equal(t, ".lock", e.Name(), "a refused node wrote into %s", data)
	}
}

// createClusterTopic creates topic through any of seeds, retrying while the
// cluster forms (no active controller yet, too few brokers registered).
func createClusterTopic(t *testing.T, seeds []string, topic string, partitions int32, rf int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		req := kmsg.NewPtrCreateTopicsRequest()
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, partitions, rf
		req.Topics = append(req.Topics, ct)
		req.TimeoutMillis = 5000
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
			if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
				return
			}
		}
		require.NoError(t, ctx.Err(), "creating %s: %v", topic, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// produceAndConsume produces one record of a value no other call uses,
// acks=all, through a client that knows only seeds, and reads it back at
// its acknowledged offset: the cluster serves.
func produceAndConsume(t *testing.T, seeds []string, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// A node that has just (re)started may not know the topic yet: retry
	// until it does.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.UnknownTopicRetries(-1))
	require.NoError(t, err)
	defer cl.Close()
	value := fmt.Sprintf("%s at %d", t.Name(), time.Now().UnixNano())
	r := &kgo.Record{Topic: topic, Value: []byte(value)}
	require.NoError(t, cl.ProduceSync(ctx, r).FirstErr(), "produce to %v", seeds)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {r.Partition: kgo.NewOffset().At(r.Offset)}}))
	require.NoError(t, err)
	defer consumer.Close()
	for {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consuming %s-%d at %d", topic, r.Partition, r.Offset)
		var got *kgo.Record
		fetches.EachRecord(func(rec *kgo.Record) {
			if got == nil {
				got = rec
			}
		})
		if got != nil {
			require.Equal(t, r.Offset, got.Offset)
			require.Equal(t, value, string(got.Value))
			return
		}
	}
}

// running reports whether a served process is still running.
func (s *servedBroker) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// TestServeRefusesMisconfiguredClusterNodes runs a three-node cluster and
// starts one more process with each mistake in turn: the same --node-id as
// a running node, a voter list that disagrees, a --cluster-id or data
// directory of another node or cluster, a standalone data directory, and
// node 3's data directory started standalone. Each exits 1 naming the flag
// to fix, node 3's data directory is byte for byte what it was, and the
// cluster keeps serving; node 3 then restarts with the right flags.
func TestServeRefusesMisconfiguredClusterNodes(t *testing.T) {
	spoolBinary(t)
	ctrl := freeLoopbackAddrs(t, 3)
	voters := votersFlag(ctrl)
	root := t.TempDir()
	dirs := map[int]string{}
	nodes := map[int]*servedBroker{}
	for id := 1; id <= 3; id++ {
		dirs[id] = filepath.Join(root, fmt.Sprintf("node%d", id))
		nodes[id] = startClusterNode(t, id, dirs[id], voters)
	}
	seeds := []string{nodes[1].addr, nodes[2].addr, nodes[3].addr}
	const topic = "refusals"
	createClusterTopic(t, seeds, topic, 3, 3)
	produceAndConsume(t, seeds, topic)
	clusterID, err := spool.ReadClusterID(dirs[1])
	require.NoError(t, err)

	t.Run("duplicate node id", func(t *testing.T) {
		// The second process of node 2 either finds node 2's controller
		// address taken (it listens there by default) or, with a listener
		// of its own, is told by node 2 that the id is taken.
		for _, extra := range [][]string{nil, {"--controller-listen", "127.0.0.1:0"}} {
			data := filepath.Join(t.TempDir(), "data")
			code, stderr := serveToExit(t, append([]string{"--data", data, "--node-id", "2", "--controller-quorum-voters", voters}, extra...)...)
			require.Equal(t, exitProblem, code, "%v: %s", extra, stderr)
			require.Contains(t, stderr, "give each node its own --node-id", extra)
			require.Regexp(t, `node (id )?2\b`, stderr, extra)
			requireNothingWritten(t, data)
		}
		require.True(t, nodes[2].running(), "node 2 stopped:\n%s", nodes[2].log())
		produceAndConsume(t, []string{nodes[2].addr}, topic)
	})

	// Node 3 stops (a controlled shutdown) and comes back misconfigured.
	require.Equal(t, 0, nodes[3].stop(t, syscall.SIGTERM))
	healthy := seeds[:2]
	before := dirContents(t, dirs[3])
	require.Contains(t, before, filepath.Join(filepath.Base(controller.MetadataDir(dirs[3])), controller.QuorumStateFile))
	require.Contains(t, before, spool.MetaPropertiesFile)
	unchanged := func(t *testing.T) {
		t.Helper()
		require.Equal(t, before, dirContents(t, dirs[3]), "node 3's data directory changed")
	}

	t.Run("voter list disagrees", func(t *testing.T) {
		unused := freeLoopbackAddrs(t, 1)[0]
		for name, bad := range map[string]string{
			"another address for node 2": votersFlag([]string{ctrl[0], unused, ctrl[2]}),
			"a fourth voter":             voters + ",4@" + unused,
			"node 1 left out":            fmt.Sprintf("2@%s,3@%s", ctrl[1], ctrl[2]),
		} {
			code, stderr := serveToExit(t, "--data", dirs[3], "--node-id", "3", "--controller-quorum-voters", bad)
			require.Equal(t, exitProblem, code, "%s: %s", name, stderr)
			require.Contains(t, stderr, "start every node with the same --controller-quorum-voters", name)
			require.Contains(t, stderr, voters, "%s: the message shows the running nodes' list", name)
			unchanged(t)
		}
		produceAndConsume(t, healthy, topic)
	})

	t.Run("cluster id", func(t *testing.T) {
		const other = "AAAAAAAAAAAAAAAAAAAAAA"
		// Node 3's own data directory with another cluster's id.
		code, stderr := serveToExit(t, "--data", dirs[3], "--node-id", "3", "--controller-quorum-voters", voters, "--cluster-id", other)
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, "belongs to cluster "+clusterID)
		require.Contains(t, stderr, "start the node with --cluster-id "+clusterID)
		unchanged(t)

		// An empty data directory with another cluster's id: the running
		// voters refuse it.
		data := filepath.Join(t.TempDir(), "data")
		code, stderr = serveToExit(t, "--data", data, "--node-id", "3", "--controller-quorum-voters", voters, "--cluster-id", other)
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, "node 3 is of cluster "+other)
		require.Contains(t, stderr, "with --cluster-id "+clusterID)
		requireNothingWritten(t, data)
		produceAndConsume(t, healthy, topic)
	})

	t.Run("node id of another node's data directory", func(t *testing.T) {
		code, stderr := serveToExit(t, "--data", dirs[3], "--node-id", "4", "--controller-listen", "127.0.0.1:0", "--controller-quorum-voters", voters)
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, "belongs to node 3, not node 4")
		require.Contains(t, stderr, "--node-id 3")
		unchanged(t)
	})

	t.Run("standalone data directory as a cluster node", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		makeDataDir(t, data, "events", 2, 5)
		standalone := dirContents(t, data)
		code, stderr := serveToExit(t, "--data", data, "--node-id", "3", "--controller-quorum-voters", voters)
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, "is a standalone broker's data directory")
		require.Contains(t, stderr, "serve it standalone, without --controller-quorum-voters")
		require.Equal(t, standalone, dirContents(t, data))
	})

	t.Run("cluster node's data directory served standalone", func(t *testing.T) {
		code, stderr := serveToExit(t, "--data", dirs[3])
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, dirs[3]+" belongs to a cluster node")
		require.Contains(t, stderr, "start the node with spool serve and its --node-id and --controller-quorum-voters")
		unchanged(t)

		// Nor does repair turn it into a standalone one (spool.RebuildRegistry
		// refuses it, as spool.Open does).
		code, stderr = runToExit(t, "repair", dirs[3])
		require.Equal(t, exitProblem, code, stderr)
		require.Contains(t, stderr, "is the data directory of node 3 of cluster "+clusterID)
		unchanged(t)
	})

	// Started right, node 3 rejoins with its data directory as it was.
	nodes[3] = startClusterNode(t, 3, dirs[3], voters)
	produceAndConsume(t, []string{nodes[3].addr}, topic)
	got, err := spool.ReadClusterID(dirs[3])
	require.NoError(t, err)
	require.Equal(t, clusterID, got)
}

// TestServeRefusesAnotherClustersDataDir copies node 1's data directory of
// cluster A into node 1's place in cluster B: B's running voters refuse it,
// node 1 exits 1 naming the data directory and --cluster-id, the copy is
// unchanged, and cluster B keeps serving.
func TestServeRefusesAnotherClustersDataDir(t *testing.T) {
	spoolBinary(t)
	root := t.TempDir()

	// Cluster A: one voter.
	dirA := filepath.Join(root, "a1")
	a := startClusterNode(t, 1, dirA, votersFlag(freeLoopbackAddrs(t, 1)))
	createClusterTopic(t, []string{a.addr}, "in-a", 1, 1)
	produceAndConsume(t, []string{a.addr}, "in-a")
	require.Eventually(t, func() bool {
		_, err := spool.ReadClusterID(dirA)
		return err == nil
	}, time.Minute, 20*time.Millisecond, "node 1 of cluster A never recorded its cluster id")
	idA, err := spool.ReadClusterID(dirA)
	require.NoError(t, err)
	require.Equal(t, 0, a.stop(t, syscall.SIGTERM))

	// Cluster B: three voters, of which 2 and 3 run.
	ctrlB := freeLoopbackAddrs(t, 3)
	votersB := votersFlag(ctrlB)
	b2 := startClusterNode(t, 2, filepath.Join(root, "b2"), votersB)
	b3 := startClusterNode(t, 3, filepath.Join(root, "b3"), votersB)
	seedsB := []string{b2.addr, b3.addr}
	createClusterTopic(t, seedsB, "in-b", 2, 2)
	produceAndConsume(t, seedsB, "in-b")
	idB, err := spool.ReadClusterID(filepath.Join(root, "b2"))
	require.NoError(t, err)
	require.NotEqual(t, idA, idB)

	dirB1 := filepath.Join(root, "b1")
	require.NoError(t, os.CopyFS(dirB1, os.DirFS(dirA)))
	before := dirContents(t, dirB1)
	code, stderr := serveToExit(t, "--data", dirB1, "--node-id", "1", "--controller-quorum-voters", votersB)
	require.Equal(t, exitProblem, code, stderr)
	require.Contains(t, stderr, fmt.Sprintf("node 1 is of cluster %s, node 2 of cluster %s", idA, idB))
	require.Contains(t, stderr, "--cluster-id or data directory is another cluster's")
	require.Equal(t, before, dirContents(t, dirB1), "the copied data directory changed")
	require.True(t, b2.running() && b3.running())
	produceAndConsume(t, seedsB, "in-b")
}

// TestServeStandaloneDataDirUnchanged: without --controller-quorum-voters,
// "spool serve" opens a standalone data directory as it always did - every
// record is served - and makes nothing of a cluster node in it.
func TestServeStandaloneDataDirUnchanged(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	const batches = 10
	makeDataDir(t, data, "events", 2, batches)
	s := startServe(t, "--data", data)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer consumer.Close()
	got := map[int32][]string{}
	for n := 0; n < 2*batches*recordsPerBatch; {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d records", n)
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			require.Equal(t, int64(len(got[r.Partition])), r.Offset)
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	for p := range int32(2) {
		require.Len(t, got[p], batches*recordsPerBatch)
		for k, v := range got[p] {
			require.True(t, strings.HasPrefix(v, fmt.Sprintf("value-%d-", k)), "partition %d offset %d: %q", p, k, v)
		}
	}
	consumer.Close()
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	require.NoDirExists(t, controller.MetadataDir(data))
	require.NoDirExists(t, controller.SnapshotsDir(data))
	code, stdout, stderr := runTool(t, "check", "--quiet", data)
	require.Equal(t, exitOK, code, "%s%s", stdout, stderr)
}

// TestServeClusterFlagErrors: a malformed cluster flag is a usage error
// (exit 2) that names the flag, and no data directory is created.
func TestServeClusterFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--controller-quorum-voters", "1@localhost"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "one@localhost:9093"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "-1@localhost:9093"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "1@localhost:9093,1@localhost:9094"}, "listed twice"},
		{[]string{"--controller-quorum-voters", ","}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "1@localhost:0"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "1@localhost:99999"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "1@localhost:http"}, "--controller-quorum-voters"},
		{[]string{"--controller-quorum-voters", "1@:9093"}, "--controller-quorum-voters"},
		{[]string{"--node-id", "4", "--controller-quorum-voters", "1@localhost:9093"}, "give it --controller-listen"},
		{[]string{"--node-id", "1", "--controller-quorum-voters", "1@localhost:9093", "--cluster-id", "my-cluster"}, "--cluster-id"},
		{[]string{"--node-id", "1", "--controller-quorum-voters", "1@localhost:9093", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAAAAA"}, "--cluster-id"},
		{[]string{"--cluster-id", "AAAAAAAAAAAAAAAAAAAAAA"}, "need --controller-quorum-voters"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		// A flag wrongly accepted starts a node, which would serve until
		// the context ends: bound it, so that the test fails rather than
		// hangs.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var stdout, stderrBuf strings.Builder
		code := run(ctx, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, tc.args...), strings.NewReader(""), &stdout, &stderrBuf)
		cancel()
		stderr := stderrBuf.String()
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
		require.Contains(t, stderr, "Usage: spool serve", tc.args)
		require.NoDirExists(t, data, tc.args)
	}
}
