package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
)

func TestTopicsRoundTrip(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")

	code, stdout, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "events", "--partitions", "3",
		"--retention-ms", "-1", "--retention-bytes", "1048576", "--segment-bytes", "65536", "--max-message-bytes", "4096", "--compression", "zstd")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Created topic events.\n", stdout)
	code, _, stderr = runTool(t, "topics", "create", "--data", data, "--topic", "audit")
	require.Equal(t, exitOK, code, stderr)

	code, stdout, _ = runTool(t, "topics", "list", "--data", data)
	require.Equal(t, exitOK, code)
	require.Equal(t, "audit\nevents\n", stdout)

	code, stdout, stderr = runTool(t, "topics", "describe", "--data", data, "--topic", "events")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 5, stdout) // the topic, the table's header, 3 partitions
	require.Regexp(t, `^Topic: events\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: `, lines[0])
	for _, kv := range []string{"retention.ms=-1", "retention.bytes=1048576", "segment.bytes=65536", "max.message.bytes=4096", "compression.type=zstd", "cleanup.policy=delete", "min.insync.replicas=1"} {
		require.Contains(t, lines[0], kv)
	}
	require.Equal(t, append(remoteColumns, "SIZE", "SEGMENTS"), strings.Fields(lines[1]))
	for i, line := range lines[2:] {
		// A data directory opened by the tool is one node, id 0: the
		// leader, the only replica and the ISR of every partition.
		f := strings.Fields(line)
		require.Len(t, f, 11, line)
		require.Equal(t, []string{string(rune('0' + i)), "0", "0", "0", "0", "-", "0", "0", "0"}, f[:9], line)
		require.Equal(t, "1", f[10], line)
	}

	// Every topic, with the library's defaults filled in.
	code, stdout, _ = runTool(t, "topics", "describe", "--data", data)
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Topic: audit\t")
	require.Contains(t, stdout, "PartitionCount: 1\tReplicationFactor: 1\tConfigs: cleanup.policy=delete,compression.type=none,max.message.bytes=1048576,min.insync.replicas=1,retention.bytes=-1,retention.ms=604800000,")
	require.Contains(t, stdout, "\n\nTopic: events\t")

	code, stdout, stderr = runTool(t, "topics", "delete", "--data", data, "--topic", "events")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Deleted topic events.\n", stdout)
	code, stdout, _ = runTool(t, "topics", "list", "--data", data)
	require.Equal(t, exitOK, code)
	require.Equal(t, "audit\n", stdout)
}

func TestTopicsErrors(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "events")
	require.Equal(t, exitOK, code, stderr)

	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"exists", []string{"create", "--topic", "events"}, exitProblem, "already exists"},
		{"invalid name", []string{"create", "--topic", "no/slashes"}, exitProblem, "invalid topic name"},
		{"delete unknown", []string{"delete", "--topic", "nope"}, exitProblem, "unknown topic"},
		{"describe unknown", []string{"describe", "--topic", "nope"}, exitProblem, "unknown topic"},
		{"no topic", []string{"create"}, exitUsage, "--topic is required"},
		{"no topic to delete", []string{"delete"}, exitUsage, "--topic is required"},
		{"bad partitions", []string{"create", "--topic", "x", "--partitions", "0"}, exitUsage, "--partitions"},
		{"replicas on a data directory", []string{"create", "--topic", "x", "--replication-factor", "2"}, exitProblem, "ReplicationFactor 2 needs a cluster"},
		{"bad replication factor", []string{"create", "--topic", "x", "--replication-factor", "0"}, exitUsage, "--replication-factor must be from 1"},
		{"config on a data directory", []string{"create", "--topic", "x", "--config", "retention.ms=1"}, exitUsage, "--config needs --bootstrap-server"},
		{"timeout on a data directory", []string{"list", "--timeout", "1s"}, exitUsage, "--timeout needs --bootstrap-server"},
		{"data with a bootstrap server", []string{"list", "--bootstrap-server", "127.0.0.1:9092"}, exitUsage, "--data opens a data directory"},
		{"bad retention", []string{"create", "--topic", "x", "--retention-ms", "-2"}, exitUsage, "--retention-ms"},
		{"bad compression", []string{"create", "--topic", "x", "--compression", "brotli"}, exitUsage, "invalid value"},
		{"no flush", []string{"list", "--flush", "none"}, exitUsage, "flag provided but not defined: --flush"},
		{"security on a data directory", []string{"list", "--tls"}, exitUsage, "--tls needs --bootstrap-server"},
		{"stray argument", []string{"list", "extra"}, exitUsage, "unexpected argument"},
		{"unknown flag", []string{"list", "--partitions", "3"}, exitUsage, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"topics"}, tc.args...)
			if len(tc.args) > 0 {
				args = append(args, "--data", data)
			}
			code, _, stderr := runTool(t, args...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.msg)
		})
	}

	code, _, stderr = runTool(t, "topics")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "no command given")
	code, _, stderr = runTool(t, "topics", "rename")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "unknown command")
	code, stdout, _ := runTool(t, "help", "topics", "create")
	require.Equal(t, exitOK, code)
	for _, flag := range []string{"--retention-ms", "--data dir", "--bootstrap-server host:port[,host:port...]", "--replication-factor number", "--config name=value", "--timeout duration"} {
		require.Contains(t, stdout, flag)
	}
	code, stdout, _ = runTool(t, "help", "topics")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "--bootstrap-server HOST:PORT[,HOST:PORT...]")

	// Nothing was created by the failures above.
	code, stdout, _ = runTool(t, "topics", "list", "--data", data)
	require.Equal(t, exitOK, code)
	require.Equal(t, "events\n", stdout)

	// A directory in use by a broker cannot be opened by another.
	b, err := spool.Open(data, spool.Options{})
	require.NoError(t, err)
	code, _, stderr = runTool(t, "topics", "list", "--data", data)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "spool topics list: data directory "+data+" is in use by another process")
	require.NoError(t, b.Close())
}

// A partition that could not be opened is described as OFFLINE, with the
// reason, while the topic's other partitions are described as usual.
func TestTopicsDescribeOfflinePartition(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "events", "--partitions", "2")
	require.Equal(t, exitOK, code, stderr)
	require.NoError(t, os.WriteFile(filepath.Join(data, "events-1", "partition.metadata"),
		[]byte("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"), 0o644))

	code, stdout, stderr := runTool(t, "topics", "describe", "--data", data, "--topic", "events")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 5, stdout) // the topic, the header, 2 partitions, the reason
	require.Equal(t, []string{"0", "0", "0", "0", "0", "-", "0", "0", "0"}, strings.Fields(lines[2])[:9])
	// No leader, no ISR: its only replica (node 0) is offline.
	require.Equal(t, []string{"1", "none", "-", "0", "-", "0", "-", "-", "-", "-", "-"}, strings.Fields(lines[3]))
	require.Regexp(t, `^Partition 1 is OFFLINE: .*events-1 belongs to topic id AAAAAAAAAAAAAAAAAAAAAQ`, lines[4])
}
