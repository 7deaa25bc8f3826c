package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool"
)

// clusterSections splits the output of "spool cluster describe" into its
// blocks, by their first line's title ("Cluster ID", "Quorum", "Brokers",
// "Under-replicated partitions", ...): each block's lines, split into
// words.
func clusterSections(t *testing.T, out string) map[string][][]string {
	t.Helper()
	sections := map[string][][]string{}
	for _, block := range strings.Split(strings.TrimSuffix(out, "\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		title, _, ok := strings.Cut(lines[0], ":")
		require.True(t, ok, "block without a title: %q", block)
		if i := strings.Index(title, " ("); i > 0 {
			title = title[:i]
		}
		var rows [][]string
		for _, l := range lines {
			rows = append(rows, strings.Fields(l))
		}
		sections[title] = rows
	}
	return sections
}

// quorumLine matches the quorum's summary line.
var quorumLine = regexp.MustCompile(`^Quorum: leader (\d+), epoch (\d+), high watermark (\d+), max follower lag (\d+)$`)

// Against a standalone broker: describe names the cluster, the broker as
// controller and only broker, no quorum, and no partition in trouble;
// log-dirs lists its data directory and every partition; producers lists
// the idempotent producer of each partition. Bad topics and partitions
// are refused with exit status 1 and the broker's error.
func TestClusterCommandsStandalone(t *testing.T) {
	dir, addr, _ := serveBroker(t)
	cl := kafkaClient(t, addr)
	code, _, stderr := runTool(t, "topics", "create", "--topic", "t", "--partitions", "2", "--bootstrap-server", addr)
	require.Equal(t, exitOK, code, stderr)
	produceN(t, cl, "t", 1, 3)
	pid, _, err := cl.ProducerID(t.Context())
	require.NoError(t, err)
	cid, err := spool.ReadClusterID(dir)
	require.NoError(t, err)

	code, stdout, stderr := runTool(t, "cluster", "describe", "--bootstrap-server", addr)
	require.Equal(t, exitOK, code, stderr)
	s := clusterSections(t, stdout)
	require.Equal(t, [][]string{{"Cluster", "ID:", cid}, {"Controller:", "1"}}, s["Cluster ID"])
	require.Equal(t, "Quorum: none: a standalone broker has no controller quorum", strings.Join(s["Quorum"][0], " "))
	require.Equal(t, [][]string{{"Brokers:", "1"}, {"ID", "ADDRESS", "RACK", "STATE"}, {"1", addr, "-", "alive"}}, s["Brokers"])
	for _, title := range []string{"Under-replicated partitions", "Under-min-ISR partitions", "Offline partitions"} {
		require.Len(t, s[title], 1, title)
		require.Equal(t, "none", s[title][0][len(s[title][0])-1], title)
	}

	code, stdout, stderr = runTool(t, "cluster", "log-dirs", "--bootstrap-server", addr)
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Regexp(t, `^Broker 1: `+regexp.QuoteMeta(dir)+` \(total \d+\.\d [KMGTPE]iB, usable \d+\.\d [KMGTPE]iB\)$`, lines[0])
	require.Equal(t, []string{"TOPIC", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"}, strings.Fields(lines[1]))
	require.Len(t, lines, 4)
	require.Equal(t, []string{"t", "0", "0", "0", "false"}, strings.Fields(lines[2]))
	row := strings.Fields(lines[3])
	require.Equal(t, []string{"t", "1"}, row[:2])
	require.NotEqual(t, "0", row[2], "three records")
	require.Equal(t, []string{"0", "false"}, row[3:])

	code, stdout, stderr = runTool(t, "cluster", "producers", "--topic", "t", "--bootstrap-server", addr)
	require.Equal(t, exitOK, code, stderr)
	lines = strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Equal(t, []string{"PARTITION", "LEADER", "PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "COORDINATOR-EPOCH", "TXN-START-OFFSET"}, strings.Fields(lines[0]))
	require.Len(t, lines, 2, "one producer wrote to one partition")
	row = strings.Fields(lines[1])
	require.Equal(t, []string{"1", "1", fmt.Sprint(pid), "0", "2"}, row[:5])
	ts, err := time.Parse("2006-01-02T15:04:05.000Z", row[5])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), ts, time.Hour)
	require.Equal(t, []string{"-1", "-1"}, row[6:])

	code, stdout, stderr = runTool(t, "cluster", "producers", "--topic", "nope", "--bootstrap-server", addr)
	require.Equal(t, exitProblem, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, `spool cluster producers: topic "nope": UNKNOWN_TOPIC_OR_PARTITION`)
	code, _, stderr = runTool(t, "cluster", "producers", "--topic", "t", "--partition", "7", "--bootstrap-server", addr)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, `topic "t" has no partition 7 (it has 2)`)
	code, _, stderr = runTool(t, "cluster", "log-dirs", "--topic", "nope", "--bootstrap-server", addr)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, `topic "nope": UNKNOWN_TOPIC_OR_PARTITION`)
	code, _, stderr = runTool(t, "cluster", "log-dirs", "--broker", "9", "--bootstrap-server", addr)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "no broker 9 answered (--broker)")
}

// Usage errors exit 2 and say what is wrong; an address nothing listens
// on exits 1 saying no broker answered.
func TestClusterCommandsRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster"}, "spool cluster: no command given"},
		{[]string{"cluster", "rebalance"}, `spool cluster: unknown command "rebalance"`},
		{[]string{"cluster", "describe"}, "spool cluster describe: --bootstrap-server is required"},
		{[]string{"cluster", "describe", "--bootstrap-server", "localhost"}, `--bootstrap-server "localhost": want HOST:PORT`},
		{[]string{"cluster", "describe", "--bootstrap-server", "localhost:0"}, "with non-zero ports"},
		{[]string{"cluster", "describe", "--bootstrap-server", "localhost:9092", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"cluster", "describe", "--bootstrap-server", "localhost:9092", "extra"}, `unexpected argument "extra"`},
		{[]string{"cluster", "describe", "--data", "x", "--bootstrap-server", "localhost:9092"}, "flag provided but not defined: --data"},
		{[]string{"cluster", "producers", "--bootstrap-server", "localhost:9092"}, "spool cluster producers: --topic is required"},
		{[]string{"cluster", "log-dirs", "--broker", "x", "--bootstrap-server", "localhost:9092"}, `invalid value "x" for flag --broker`},
	} {
		code, stdout, stderr := runTool(t, tc.args...)
		require.Equal(t, exitUsage, code, "%v", tc.args)
		require.Empty(t, stdout, "%v", tc.args)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
	code, stdout, _ := runTool(t, "help", "cluster")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Usage: spool cluster <describe|log-dirs|producers>")

	addr := freeAddr(t) // nothing listens there
	for _, args := range [][]string{{"describe"}, {"log-dirs"}, {"producers", "--topic", "t"}} {
		code, stdout, stderr := runTool(t, append(append([]string{"cluster"}, args...), "--bootstrap-server", addr, "--timeout", "2s")...)
		require.Equal(t, exitProblem, code, "%v", args)
		require.Empty(t, stdout, "%v", args)
		require.Contains(t, stderr, "no broker answered", "%v", args)
	}
}

// Against a three-node cluster: describe shows the quorum (leader, epoch,
// three voters caught up), three live brokers and nothing in trouble; once
// a broker stops, it shows it fenced, the replicated topic's partitions
// under-replicated and under min ISR, and the single-replica partition it
// held offline. log-dirs and producers describe the survivors' replicas
// and the idempotent producer.
func TestClusterCommandsCluster(t *testing.T) {
	c := startCluster(t, 3)
	boot := c.addr(1) + "," + c.addr(2)
	tool := func(args ...string) (int, string, string) {
		return runTool(t, append(append([]string{"cluster"}, args...), "--bootstrap-server", boot)...)
	}
	for _, args := range [][]string{
		{"create", "--topic", "r", "--partitions", "2", "--replication-factor", "3", "--config", "min.insync.replicas=3"},
		{"create", "--topic", "solo", "--partitions", "3", "--replication-factor", "1"},
	} {
		code, _, stderr := runTool(t, append(append([]string{"topics"}, args...), "--bootstrap-server", boot)...)
		require.Equal(t, exitOK, code, stderr)
	}
	cl := kafkaClient(t, c.addr(1))
	require.Eventually(t, func() bool {
		return cl.ProduceSync(t.Context(), &kgo.Record{Topic: "r", Partition: 0, Value: []byte("x")}).FirstErr() == nil
	}, 20*time.Second, 50*time.Millisecond, "acks=all with min.insync.replicas=3 once the ISR is full")
	produceN(t, cl, "r", 1, 4)
	pid, _, err := cl.ProducerID(t.Context())
	require.NoError(t, err)

	var s map[string][][]string
	require.Eventually(t, func() bool {
		code, stdout, stderr := tool("describe")
		require.Equal(t, exitOK, code, stderr)
		s = clusterSections(t, stdout)
		m := quorumLine.FindStringSubmatch(strings.Join(s["Quorum"][0], " "))
		require.NotNil(t, m, stdout)
		return m[4] == "0" && len(s["Under-replicated partitions"]) == 1
	}, 20*time.Second, 50*time.Millisecond, "every voter caught up, every ISR full")
	require.Equal(t, []string{"NODE", "ROLE", "LOG-END", "LAG", "LAST-FETCH", "LAST-CAUGHT-UP"}, s["Quorum"][1])
	require.Len(t, s["Quorum"], 5, "three voters")
	leaders := 0
	for i, row := range s["Quorum"][2:] {
		require.Equal(t, fmt.Sprint(i+1), row[0])
		require.Contains(t, []string{"leader", "voter"}, row[1])
		if row[1] == "leader" {
			leaders++
		}
		require.Equal(t, "0", row[3], "lag")
		require.Equal(t, "ago", row[5], "%v", row)
	}
	require.Equal(t, 1, leaders)
	require.Equal(t, [][]string{{"Brokers:", "3"}, {"ID", "ADDRESS", "RACK", "STATE"},
		{"1", c.addr(1), "-", "alive"}, {"2", c.addr(2), "-", "alive"}, {"3", c.addr(3), "-", "alive"}}, s["Brokers"])
	require.Equal(t, "none", s["Under-min-ISR partitions"][0][len(s["Under-min-ISR partitions"][0])-1])
	require.Equal(t, "none", s["Offline partitions"][0][len(s["Offline partitions"][0])-1])

	addr3 := c.addr(3)
	c.stop(3)
	require.Eventually(t, func() bool {
		code, stdout, stderr := tool("describe")
		require.Equal(t, exitOK, code, stderr)
		s = clusterSections(t, stdout)
		return len(s["Under-replicated partitions"]) == 4 && len(s["Offline partitions"]) == 3 && len(s["Brokers"]) == 5 && s["Brokers"][4][3] == "fenced"
	}, 20*time.Second, 50*time.Millisecond, "broker 3 fenced, its replicas out of the ISRs, its single replica offline")
	require.Equal(t, []string{"3", addr3, "-", "fenced"}, s["Brokers"][4])
	header := []string{"TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "MIN-ISR"}
	for _, title := range []string{"Under-replicated partitions", "Under-min-ISR partitions"} {
		rows := s[title]
		require.Equal(t, []string{"2"}, rows[0][len(rows[0])-1:], title)
		require.Equal(t, header, rows[1])
		for i, row := range rows[2:] {
			require.Equal(t, []string{"r", fmt.Sprint(i)}, row[:2])
			require.Len(t, strings.Split(row[3], ","), 3)
			require.Len(t, strings.Split(row[4], ","), 2)
			require.NotContains(t, strings.Split(row[4], ","), "3")
			require.Equal(t, "3", row[5])
		}
	}
	offline := s["Offline partitions"]
	require.Equal(t, header, offline[1])
	row := offline[2]
	require.Equal(t, []string{"solo", "none", "3"}, []string{row[0], row[2], row[3]})

	code, stdout, stderr := tool("log-dirs", "--topic", "r", "--broker", "2")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Regexp(t, `^Broker 2: `+regexp.QuoteMeta(c.dirs[2])+` \(total `, lines[0])
	require.Len(t, lines, 4, stdout)
	for i, l := range lines[2:] {
		f := strings.Fields(l)
		require.Equal(t, []string{"r", fmt.Sprint(i)}, f[:2])
		require.NotEqual(t, "0", f[2], "records in r-%d", i)
		require.Equal(t, []string{"0", "false"}, f[3:], "no lag")
	}
	// Every broker's metadata drops the fenced broker 3, each in its own
	// time: the tool asks whichever node answers for the brokers to ask,
	// and one that has not yet heard of the fence names broker 3 too.
	require.Eventually(t, func() bool {
		code, stdout, stderr = tool("log-dirs")
		return code == exitOK && !strings.Contains(stdout, "Broker 3")
	}, 20*time.Second, 50*time.Millisecond, "every node's metadata leaves out the fenced broker 3: %s", stderr)
	require.Contains(t, stdout, "Broker 1: "+filepath.Clean(c.dirs[1]))
	require.Contains(t, stdout, "\n\nBroker 2: ")
	require.NotContains(t, stdout, "Broker 3")

	code, stdout, stderr = tool("producers", "--topic", "r")
	require.Equal(t, exitOK, code, stderr)
	lines = strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 3, stdout)
	for i, l := range lines[1:] {
		f := strings.Fields(l)
		require.Equal(t, fmt.Sprint(i), f[0])
		require.Equal(t, fmt.Sprint(pid), f[2])
	}
	require.Equal(t, "0", strings.Fields(lines[1])[4], "one record to r-0")
	require.Equal(t, "3", strings.Fields(lines[2])[4], "four records to r-1")

	code, stdout, stderr = tool("producers", "--topic", "solo")
	require.Equal(t, exitProblem, code, "a partition without a leader cannot be described")
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Regexp(t, `^spool cluster producers: partition \d: LEADER_NOT_AVAILABLE`, stderr)
	require.Len(t, strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"), 1, "the others have no producers: the header only")
}
