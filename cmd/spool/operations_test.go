package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The operator's commands against a three-node cluster, over the wire:
// reassign (one partition, and a plan file) with --wait, list and cancel a
// reassignment under way, elect the preferred leader, unregister a stopped
// broker - and the cluster's refusals as exit status 1 with Kafka's error,
// bad flags as exit status 2.
func TestOperationsCommands(t *testing.T) {
	c := startCluster(t, 3)
	all := strings.Join([]string{c.addr(1), c.addr(2), c.addr(3)}, ",")
	op := func(args ...string) (int, string, string) {
		t.Helper()
		return runTool(t, append(args, "--bootstrap-server", all)...)
	}
	code, _, stderr := runTool(t, "topics", "create", "--topic", "ops", "--partitions", "1", "--replication-factor", "2", "--bootstrap-server", all)
	require.Equal(t, exitOK, code, stderr)
	cl := kafkaClient(t, strings.Split(all, ",")...)
	produceN(t, cl, "ops", 0, 5)
	part := func() kmsg.MetadataResponseTopicPartition {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("ops")}}
		resp, err := req.RequestWith(t.Context(), cl)
		require.NoError(t, err)
		return resp.Topics[0].Partitions[0]
	}
	p := part()
	r0, r1 := p.Replicas[0], p.Replicas[1]
	spare := int32(6) - r0 - r1
	ids := func(v ...int32) string {
		s := make([]string, len(v))
		for i, id := range v {
			s[i] = strconv.Itoa(int(id))
		}
		return strings.Join(s, ",")
	}

	code, stdout, stderr := op("partitions", "reassignments")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "No reassignment is under way.\n", stdout)

	// Move the replica on r1 to the spare broker and wait for it.
	code, stdout, stderr = op("partitions", "reassign", "--topic", "ops", "--partition", "0", "--replicas", ids(spare, r0), "--wait")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("Reassignment of partition ops-0 to replicas %s started.\n", ids(spare, r0)))
	require.Regexp(t, `Reassignment of 1 partition\(s\) completed in [0-9.]+m?s\.`, stdout)
	require.Eventually(t, func() bool { return slices.Equal(part().Replicas, []int32{spare, r0}) }, 10*time.Second, 20*time.Millisecond)

	// The leader stayed (r0): the preferred replica is now the spare one.
	before := part().Leader
	code, stdout, stderr = op("leaders", "elect", "--type", "preferred", "--topic", "ops")
	require.Equal(t, exitOK, code, stderr)
	if before == spare {
		require.Contains(t, stdout, "needs no election")
	} else {
		require.Equal(t, "Elected a leader (preferred) for partition ops-0.\n", stdout)
	}
	require.Eventually(t, func() bool { return part().Leader == spare }, 10*time.Second, 20*time.Millisecond)
	code, stdout, stderr = op("leaders", "elect", "--type", "unclean", "--topic", "ops", "--partition", "0")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Partition ops-0 needs no election: its leader is the one asked for.\n", stdout)
	code, stdout, stderr = op("leaders", "elect", "--type", "preferred")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "No partition needed an election.\n", stdout)

	// r1 holds no replica now; stopped, it is a registered broker that
	// cannot catch up: a reassignment to it stays under way until
	// cancelled.
	c.stop(r1)
	plan := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(plan, fmt.Appendf(nil, `{"version":1,"partitions":[{"topic":"ops","partition":0,"replicas":[%s],"log_dirs":["any","any","any"]}]}`, ids(spare, r0, r1)), 0o644))
	live := strings.Join([]string{c.addr(spare), c.addr(r0)}, ",")
	code, stdout, stderr = runTool(t, "partitions", "reassign", "--reassignment-json-file", plan, "--bootstrap-server", live)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, fmt.Sprintf("Reassignment of partition ops-0 to replicas %s started.\n", ids(spare, r0, r1)), stdout)
	code, stdout, stderr = runTool(t, "partitions", "reassignments", "--topic", "ops", "--bootstrap-server", live)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, []string{"TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"}, strings.Fields(strings.Split(stdout, "\n")[0]))
	require.Equal(t, []string{"ops", "0", ids(spare, r0, r1), ids(r1), "-"}, strings.Fields(strings.Split(stdout, "\n")[1]))
	code, stdout, stderr = runTool(t, "partitions", "cancel", "--reassignment-json-file", plan, "--bootstrap-server", live)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Reassignment of partition ops-0 cancelled.\n", stdout)
	code, stdout, stderr = runTool(t, "partitions", "reassignments", "--bootstrap-server", live)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "No reassignment is under way.\n", stdout)

	// The cluster's refusals.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"partitions", "reassign", "--topic", "ops", "--partition", "0", "--replicas", "1,1"}, "partition ops-0: topic \"ops\": INVALID_REPLICA_ASSIGNMENT"},
		{[]string{"partitions", "reassign", "--topic", "ops", "--partition", "0", "--replicas", "1,9"}, "not registered"},
		{[]string{"partitions", "reassign", "--topic", "nope", "--partition", "0", "--replicas", "1"}, "UNKNOWN_TOPIC_OR_PARTITION"},
		{[]string{"partitions", "cancel", "--topic", "ops", "--partition", "0"}, "NO_REASSIGNMENT_IN_PROGRESS"},
		{[]string{"partitions", "reassignments", "--topic", "ops", "--partition", "3"}, "there is no partition 3"},
		{[]string{"leaders", "elect", "--type", "preferred", "--topic", "nope"}, "UNKNOWN_TOPIC_OR_PARTITION"},
		{[]string{"brokers", "unregister", "--id", "99"}, "spool brokers unregister: broker 99: BROKER_ID_NOT_REGISTERED"},
		{[]string{"brokers", "unregister", "--id", strconv.Itoa(int(spare))}, "holds replicas"},
	} {
		code, stdout, stderr := runTool(t, append(tc.args, "--bootstrap-server", live)...)
		require.Equal(t, exitProblem, code, "%v: %s", tc.args, stderr)
		require.Empty(t, stdout, "%v", tc.args)
		require.Contains(t, stderr, tc.msg, "%v", tc.args)
	}

	// Decommission: r1 is stopped and holds nothing; once its session has
	// ended it is unregistered.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, stdout, stderr = runTool(t, "brokers", "unregister", "--id", strconv.Itoa(int(r1)), "--bootstrap-server", live)
		if code == exitOK || time.Now().After(deadline) {
			break
		}
		require.Contains(t, stderr, "is running")
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, fmt.Sprintf("Broker %d unregistered.\n", r1), stdout)
}

// Bad flags are usage errors (exit status 2) that reach no broker.
func TestOperationsUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version":1,"partitions":[{"topic":"t","partition":0}]}`), 0o644))
	v2 := filepath.Join(dir, "v2.json")
	require.NoError(t, os.WriteFile(v2, []byte(`{"version":2,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}`), 0o644))
	twice := filepath.Join(dir, "twice.json")
	require.NoError(t, os.WriteFile(twice, []byte(`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}`), 0o644))
	const bs = "127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"partitions", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1"}, "--bootstrap-server is required"},
		{[]string{"partitions", "reassign", "--topic", "t", "--replicas", "1", "--bootstrap-server", bs}, "--partition is required"},
		{[]string{"partitions", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1,x", "--bootstrap-server", bs}, `"x" is not a broker id`},
		{[]string{"partitions", "reassign", "--topic", "t", "--partition", "0", "--replicas", "-1", "--bootstrap-server", bs}, `"-1" is not a broker id`},
		{[]string{"partitions", "reassign", "--reassignment-json-file", bad, "--bootstrap-server", bs}, "has no replicas"},
		{[]string{"partitions", "reassign", "--reassignment-json-file", v2, "--bootstrap-server", bs}, "version 2"},
		{[]string{"partitions", "reassign", "--reassignment-json-file", twice, "--bootstrap-server", bs}, "in the plan twice"},
		{[]string{"partitions", "reassign", "--reassignment-json-file", filepath.Join(dir, "none"), "--bootstrap-server", bs}, "no such file"},
		{[]string{"partitions", "reassign", "--reassignment-json-file", bad, "--topic", "t", "--bootstrap-server", bs}, "replaces --topic"},
		{[]string{"partitions", "cancel", "--topic", "t", "--bootstrap-server", bs}, "give --topic and --partition"},
		{[]string{"partitions", "reassignments", "--partition", "1", "--bootstrap-server", bs}, "--partition needs --topic"},
		{[]string{"leaders", "elect", "--bootstrap-server", bs}, "--type is required"},
		{[]string{"leaders", "elect", "--type", "dirty", "--bootstrap-server", bs}, `--type "dirty"`},
		{[]string{"brokers", "unregister", "--bootstrap-server", bs}, "--id is required"},
		{[]string{"brokers", "unregister", "--id", "1", "--bootstrap-server", "nohost"}, "want HOST:PORT"},
		{[]string{"brokers", "unregister", "--id", "1", "--bootstrap-server", bs, "--timeout", "0s"}, "--timeout must be positive"},
	} {
		code, stdout, stderr := runTool(t, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tc.msg, "%v", tc.args)
	}
}
