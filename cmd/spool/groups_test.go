package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/partition"
)

// openGroupsBroker opens a broker whose producers choose partitions by
// Record.Partition, with a small offsets topic.
func openGroupsBroker(t *testing.T, dir string) *spool.Broker {
	t.Helper()
	b, err := spool.Open(dir, spool.Options{
		Partitioner:            partition.ManualPartitioner(),
		OffsetsTopicPartitions: 3,
		GroupMinSessionTimeout: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	return b
}

// produceTimed produces n records to each of the topic's partitions; the
// i-th of a partition has timestamp testEpoch + i seconds.
func produceTimed(t *testing.T, b *spool.Broker, topic string, partitions int32, from, n int) {
	t.Helper()
	for p := range partitions {
		for i := from; i < from+n; i++ {
			_, err := b.Produce(t.Context(), spool.Record{
				Topic: topic, Partition: p, Timestamp: testEpoch.Add(time.Duration(i) * time.Second),
				Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i),
			})
			require.NoError(t, err)
		}
	}
}

// groupConsumer returns a member of group g consuming topic from the
// start, without auto-commit.
func groupConsumer(t *testing.T, b *spool.Broker, g, topic string) *spool.Consumer {
	t.Helper()
	c, err := b.NewConsumer(spool.ConsumerConfig{
		Group: g, Topics: []string{topic}, AutoOffsetReset: spool.ResetEarliest, AutoCommit: spool.Disabled,
		FetchMaxWait: 20 * time.Millisecond, SessionTimeout: 10 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	return c
}

// pollN polls c until it has returned n records.
func pollN(t *testing.T, c *spool.Consumer, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for got := 0; got < n; {
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		got += len(recs)
	}
}

// tableRows splits a table's output into rows of fields, without the
// header, after checking the header.
func tableRows(t *testing.T, out string, header ...string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, header, strings.Fields(lines[0]), out)
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// offsetsTable returns the offsets table of describe's output.
func offsetsTable(t *testing.T, out string) [][]string {
	t.Helper()
	i := strings.Index(out, "TOPIC")
	require.GreaterOrEqual(t, i, 0, out)
	return tableRows(t, out[i:], "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "HIGH-WATERMARK", "LAG", "MEMBER-ID")
}

func TestGroupsRoundTrip(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	b := openGroupsBroker(t, data)
	require.NoError(t, b.CreateTopic(t.Context(), "orders", spool.TopicConfig{Partitions: 3}))
	produceTimed(t, b, "orders", 3, 0, 10)
	// A member consumes everything and commits, then leaves; five more
	// records per partition make a lag of 5.
	c := groupConsumer(t, b, "billing", "orders")
	pollN(t, c, 30)
	require.NoError(t, c.Commit(t.Context()))
	require.NoError(t, c.Close())
	produceTimed(t, b, "orders", 3, 10, 5)
	require.NoError(t, b.Close())

	// After a restart the group is known by its committed offsets.
	code, stdout, stderr := runTool(t, "groups", "list", "--data", data)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, [][]string{{"billing", "Empty", "-"}}, tableRows(t, stdout, "GROUP", "STATE", "PROTOCOL-TYPE"))

	code, stdout, stderr = runTool(t, "groups", "describe", "--data", data, "--group", "billing")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "Group: billing\tState: Empty\t"), stdout)
	require.Contains(t, stdout, "\tMembers: 0\n")
	require.NotContains(t, stdout, "MEMBER-ID  ") // no members table
	require.Equal(t, [][]string{
		{"orders", "0", "10", "15", "15", "5", "-"},
		{"orders", "1", "10", "15", "15", "5", "-"},
		{"orders", "2", "10", "15", "15", "5", "-"},
	}, offsetsTable(t, stdout))

	// A dry run prints the plan and changes nothing.
	code, stdout, stderr = runTool(t, "groups", "reset-offsets", "--data", data, "--group", "billing", "--topic", "orders", "--to-earliest")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, [][]string{{"orders", "0", "10", "0"}, {"orders", "1", "10", "0"}, {"orders", "2", "10", "0"}},
		tableRows(t, stdout, "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"))
	require.Contains(t, stderr, "Dry run")
	_, stdout, _ = runTool(t, "groups", "describe", "--data", data, "--group", "billing")
	require.Equal(t, "10", offsetsTable(t, stdout)[0][2])

	for _, tc := range []struct {
		name string
		args []string
		want []string // CURRENT-OFFSET of partitions 0, 1, 2 afterwards
	}{
		{"earliest", []string{"--to-earliest"}, []string{"0", "0", "0"}},
		{"shift forward", []string{"--shift-by", "3"}, []string{"3", "3", "3"}},
		{"shift back, one partition", []string{"--partition", "1", "--shift-by", "-2"}, []string{"3", "1", "3"}},
		{"shift back past the start", []string{"--partition", "1", "--shift-by", "-100"}, []string{"3", "0", "3"}},
		{"to offset", []string{"--to-offset", "7"}, []string{"7", "7", "7"}},
		{"to offset past the end", []string{"--partition", "2", "--to-offset", "1000"}, []string{"7", "7", "15"}},
		{"to datetime", []string{"--to-datetime", testEpoch.Add(4500 * time.Millisecond).Format(time.RFC3339Nano)}, []string{"5", "5", "5"}},
		{"to datetime after the last record", []string{"--to-datetime", testEpoch.Add(time.Hour).UTC().Format(time.RFC3339)}, []string{"15", "15", "15"}},
		{"to datetime before the first record", []string{"--to-datetime", "2001-01-01T00:00:00Z"}, []string{"0", "0", "0"}},
		{"latest", []string{"--to-latest"}, []string{"15", "15", "15"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"groups", "reset-offsets", "--data", data, "--group", "billing", "--topic", "orders", "--execute"}, tc.args...)
			code, stdout, stderr := runTool(t, args...)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, "Reset the offsets of group billing.\n")
			_, stdout, _ = runTool(t, "groups", "describe", "--data", data, "--group", "billing")
			var got []string
			for _, row := range offsetsTable(t, stdout) {
				got = append(got, row[2])
			}
			require.Equal(t, tc.want, got, stdout)
		})
	}

	// Reset creates a group that does not exist.
	code, stdout, stderr = runTool(t, "groups", "reset-offsets", "--data", data, "--group", "audit", "--topic", "orders", "--partition", "0", "--to-offset", "2", "--execute")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, [][]string{{"orders", "0", "-", "2"}}, tableRows(t, strings.TrimSuffix(stdout, "Reset the offsets of group audit.\n"), "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"))
	_, stdout, _ = runTool(t, "groups", "describe", "--data", data, "--group", "audit")
	require.Equal(t, [][]string{{"orders", "0", "2", "15", "15", "13", "-"}}, offsetsTable(t, stdout))

	code, stdout, stderr = runTool(t, "groups", "delete", "--data", data, "--group", "billing")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "Deleted group billing.\n", stdout)
	code, stdout, _ = runTool(t, "groups", "list", "--data", data)
	require.Equal(t, exitOK, code)
	require.Equal(t, [][]string{{"audit", "Empty", "-"}}, tableRows(t, stdout, "GROUP", "STATE", "PROTOCOL-TYPE"))
	code, _, stderr = runTool(t, "groups", "describe", "--data", data, "--group", "billing")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, `group "billing" does not exist`)
}

func TestGroupsErrors(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	b := openGroupsBroker(t, data)
	require.NoError(t, b.CreateTopic(t.Context(), "orders", spool.TopicConfig{Partitions: 2}))
	require.NoError(t, b.Close())

	reset := []string{"reset-offsets", "--group", "g", "--topic", "orders"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"describe unknown", []string{"describe", "--group", "nope"}, exitProblem, `group "nope" does not exist`},
		{"delete unknown", []string{"delete", "--group", "nope"}, exitProblem, `group "nope" does not exist`},
		{"describe without group", []string{"describe"}, exitUsage, "--group is required"},
		{"delete without group", []string{"delete"}, exitUsage, "--group is required"},
		{"reset without group", []string{"reset-offsets", "--topic", "orders", "--to-latest"}, exitUsage, "--group is required"},
		{"reset without topic", []string{"reset-offsets", "--group", "g", "--to-latest"}, exitUsage, "--topic is required"},
		{"reset without a target", reset, exitUsage, "exactly one of"},
		{"reset with two targets", append(reset, "--to-latest", "--to-offset", "3"), exitUsage, "exactly one of"},
		{"bad datetime", append(reset, "--to-datetime", "yesterday"), exitUsage, "RFC 3339"},
		{"bad offset", append(reset, "--to-offset", "x"), exitUsage, "want an offset"},
		{"bad partition", append(reset, "--partition", "-1", "--to-latest"), exitUsage, "want a partition number"},
		{"unknown topic", []string{"reset-offsets", "--group", "g", "--topic", "nope", "--to-latest"}, exitProblem, "unknown topic"},
		{"unknown partition", append(reset, "--partition", "2", "--to-latest"), exitProblem, "unknown partition"},
		{"shift without a committed offset", append(reset, "--shift-by", "1"), exitProblem, "no committed offset"},
		{"stray argument", []string{"list", "extra"}, exitUsage, "unexpected argument"},
		{"unknown command", []string{"rebalance"}, exitUsage, `unknown command "rebalance"`},
		{"no command", nil, exitUsage, "no command given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"groups"}, tc.args...)
			if len(tc.args) > 0 {
				args = append(args, "--data", data)
			}
			code, stdout, stderr := runTool(t, args...)
			require.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", stdout, stderr)
			require.Contains(t, stderr, tc.msg)
		})
	}

	// The dry run of a reset that failed changed nothing: no group.
	code, stdout, _ := runTool(t, "groups", "list", "--data", data)
	require.Equal(t, exitOK, code)
	require.Equal(t, "GROUP  STATE  PROTOCOL-TYPE\n", stdout)
}

// TestGroupsWithMembers drives the commands' work on an open broker while
// a consumer is a member of the group: the tool cannot open a directory a
// broker holds.
func TestGroupsWithMembers(t *testing.T) {
	b := openGroupsBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(t.Context(), "orders", spool.TopicConfig{Partitions: 3}))
	produceTimed(t, b, "orders", 3, 0, 4)
	c := groupConsumer(t, b, "billing", "orders")
	pollN(t, c, 12)
	require.NoError(t, c.Commit(t.Context()))
	produceTimed(t, b, "orders", 3, 4, 1)

	var out bytes.Buffer
	listGroups(b, &out)
	require.Equal(t, [][]string{{"billing", "Stable", "consumer"}}, tableRows(t, out.String(), "GROUP", "STATE", "PROTOCOL-TYPE"))

	out.Reset()
	require.NoError(t, describeGroup(b, "billing", &out))
	desc, err := b.Groups().Describe("billing")
	require.NoError(t, err)
	require.Len(t, desc.Members, 1)
	member := desc.Members[0].MemberID
	host, _ := os.Hostname()
	host = orDash(host)
	require.Contains(t, out.String(), "Group: billing\tState: Stable\tProtocolType: consumer\tProtocol: range\tGeneration: 1\tLeader: "+member+"\tMembers: 1\n")
	members := out.String()[strings.Index(out.String(), "MEMBER-ID"):strings.Index(out.String(), "TOPIC")]
	require.Equal(t, [][]string{{member, "-", "spool", host, "orders-0,orders-1,orders-2"}},
		tableRows(t, strings.TrimSpace(members), "MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"))
	require.Equal(t, [][]string{
		{"orders", "0", "4", "5", "5", "1", member},
		{"orders", "1", "4", "5", "5", "1", member},
		{"orders", "2", "4", "5", "5", "1", member},
	}, offsetsTable(t, out.String()))

	// Neither delete nor reset touches a group with members.
	err = deleteGroup(b, "billing")
	require.ErrorIs(t, err, group.ErrNonEmptyGroup)
	require.ErrorContains(t, err, `group "billing" is Stable with 1 member(s); it can be deleted only when Empty`)
	plan, err := planReset(b, "billing", "orders", nil, resetSpec{earliest: true})
	require.NoError(t, err)
	err = applyReset(b, "billing", plan)
	require.ErrorIs(t, err, group.ErrNonEmptyGroup)
	require.ErrorContains(t, err, "it can be reset only when Empty")
	offsets, err := b.Groups().FetchOffsets("billing", nil)
	require.NoError(t, err)
	for tp, o := range offsets {
		require.Equal(t, int64(4), o.Offset, tp)
	}

	// Once the member has left, both work.
	require.NoError(t, c.Close())
	require.NoError(t, applyReset(b, "billing", plan))
	offsets, err = b.Groups().FetchOffsets("billing", nil)
	require.NoError(t, err)
	require.Len(t, offsets, 3)
	for tp, o := range offsets {
		require.Equal(t, int64(0), o.Offset, tp)
	}
	require.NoError(t, deleteGroup(b, "billing"))
	require.Empty(t, b.Groups().List())
}

func TestGroupsHelp(t *testing.T) {
	code, stdout, _ := runTool(t, "help", "groups")
	require.Equal(t, exitOK, code)
	for _, c := range groupsCommands {
		require.Contains(t, stdout, "\t"+c.name+" ")
	}
	code, stdout, _ = runTool(t, "help", "groups", "reset-offsets")
	require.Equal(t, exitOK, code)
	for _, f := range []string{"--to-earliest", "--to-latest", "--to-offset", "--to-datetime", "--shift-by", "--execute", "--partition", "--data"} {
		require.Contains(t, stdout, f)
	}
}

// A KIP-848 consumer group is listed and described in the same layout:
// its epoch as the generation, its server assignor as the protocol.
func TestGroupsWithKIP848Members(t *testing.T) {
	b := openGroupsBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(t.Context(), "orders", spool.TopicConfig{Partitions: 2}))
	produceTimed(t, b, "orders", 2, 0, 3)
	c, err := b.NewConsumer(spool.ConsumerConfig{
		Group: "billing", Topics: []string{"orders"}, GroupProtocol: spool.GroupProtocolConsumer,
		AutoOffsetReset: spool.ResetEarliest, AutoCommit: spool.Disabled, FetchMaxWait: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	defer c.Close()
	pollN(t, c, 6)
	require.NoError(t, c.Commit(t.Context()))

	var out bytes.Buffer
	listGroups(b, &out)
	require.Equal(t, [][]string{{"billing", "Stable", "consumer"}}, tableRows(t, out.String(), "GROUP", "STATE", "PROTOCOL-TYPE"))
	out.Reset()
	require.NoError(t, describeGroup(b, "billing", &out))
	require.Contains(t, out.String(), "Group: billing\tState: Stable\tProtocolType: consumer\tProtocol: uniform\tGeneration: 1\tLeader: -\tMembers: 1\n")
	require.Contains(t, out.String(), "orders-0,orders-1")
	err = deleteGroup(b, "billing")
	require.ErrorIs(t, err, group.ErrNonEmptyGroup)
}
