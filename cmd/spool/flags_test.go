package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoFlagIsIgnored pins the flags each subcommand offers (its --help
// lists them) to those it uses: a flag added to a shared helper, or to a
// command, that the command ignores would show up here. Adding a flag
// means adding it to this table - and having looked that every path of
// the command uses it, or refuses it where it would not.
func TestNoFlagIsIgnored(t *testing.T) {
	// The client security flags of the --bootstrap-server commands
	// (clientSecurityFlags), listed once.
	sec := strings.Join(clientSecurityFlags, " ")
	for _, tc := range []struct {
		cmd   string
		sec   bool // also the client security flags
		flags string
	}{
		{"topics create", true, "bootstrap-server compression config data max-message-bytes partitions replication-factor retention-bytes retention-ms segment-bytes timeout topic"},
		{"topics list", true, "bootstrap-server data timeout"},
		{"topics describe", true, "bootstrap-server data timeout topic"},
		{"topics delete", true, "bootstrap-server data timeout topic"},
		{"groups list", false, "data"},
		{"groups describe", false, "data group"},
		{"groups delete", false, "data flush group"},
		{"groups reset-offsets", false, "data execute flush group partition shift-by to-datetime to-earliest to-latest to-offset topic"},
		{"cluster describe", true, "bootstrap-server timeout"},
		{"cluster log-dirs", true, "bootstrap-server broker timeout topic"},
		{"cluster producers", true, "bootstrap-server partition timeout topic"},
		{"partitions reassign", true, "bootstrap-server partition reassignment-json-file replicas timeout topic wait"},
		{"partitions reassignments", true, "bootstrap-server partition timeout topic"},
		{"partitions cancel", true, "bootstrap-server partition reassignment-json-file timeout topic"},
		{"leaders elect", true, "bootstrap-server partition timeout topic type"},
		{"brokers unregister", true, "bootstrap-server id timeout"},
		{"acls create", true, "bootstrap-server cluster group host operation pattern permission principal timeout topic transactional-id"},
		{"acls list", true, "bootstrap-server cluster group host operation pattern permission principal timeout topic transactional-id"},
		{"acls delete", true, "all bootstrap-server cluster group host operation pattern permission principal timeout topic transactional-id"},
		{"quotas alter", true, "bootstrap-server client-id client-id-default remove set timeout user user-default validate-only"},
		{"quotas describe", true, "bootstrap-server client-id client-id-default timeout user user-default"},
		{"produce", false, "acks batch-bytes data flush key-separator linger partition print-acks topic"},
		{"consume", true, "bootstrap-server count data from partition print-keys print-offsets timeout topic"},
		{"perf produce", false, "acks batch-bytes compression data flush linger partitions record-size records reporting-interval throughput topic"},
		{"perf consume", false, "data fetch-max-bytes max-partition-fetch-bytes records reporting-interval timeout topic"},
		{"dump", false, "records verify-index"},
		{"check", false, "quiet"},
		{"repair", false, "dry-run"},
		{"serve", false, "advertised-addr advertised-listeners authorizer auto-create-topics cluster-id config " +
			"config-strict connections-max-idle controller-listen controller-quorum-voters data " +
			"default-replication-factor dial-map fetch-session-cache-slots flush group-consumer-heartbeat-interval " +
			"group-consumer-session-timeout group-initial-rebalance-delay group-max-session-timeout " +
			"group-min-session-timeout inter-broker-listener-name listen listener-security-protocol-map " +
			"listeners log-cleanup-policy log-format log-level log-max-open-segment-files log-retention log-retention-bytes " +
			"log-retention-check-interval log-roll log-segment-bytes max-connections " +
			"max-connections-per-ip message-max-bytes metrics-listen min-insync-replicas node-id " +
			"num-partitions offsets-retention offsets-topic-partitions queued-max-request-bytes " +
			"request-read-timeout sasl-plain sasl-scram-sha-256 sasl-scram-sha-512 session-timeout " +
			"share-delivery-limit share-lock-duration socket-request-max-bytes " +
			"ssl-principal-mapping-rules super-users tls-cert tls-client-ca tls-key " +
			"transaction-max-timeout transaction-state-partitions unclean-leader-election"},
		{"version", false, ""},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			want := append([]string{}, strings.Fields(tc.flags)...)
			if tc.sec {
				want = append(want, strings.Fields(sec)...)
			}
			slices.Sort(want)
			args := append([]string{"help"}, strings.Fields(tc.cmd)...)
			code, stdout, stderr := runTool(t, args...)
			require.Equal(t, exitOK, code, stderr)
			got := []string{}
			for _, line := range strings.Split(stdout, "\n") {
				if name, ok := strings.CutPrefix(line, "  --"); ok {
					name, _, _ = strings.Cut(name, " ")
					got = append(got, name)
				}
			}
			slices.Sort(got)
			require.Equal(t, want, got, "the flags of spool %s", tc.cmd)
		})
	}
}

// TestFlushOnlyWhereRecordsAreAppended: the commands that append no
// record do not take --flush, which would only loosen what opening a log
// tolerates.
func TestFlushOnlyWhereRecordsAreAppended(t *testing.T) {
	for _, args := range [][]string{
		{"topics", "create", "--topic", "t"},
		{"topics", "list"},
		{"topics", "describe"},
		{"topics", "delete", "--topic", "t"},
		{"groups", "list"},
		{"groups", "describe", "--group", "g"},
		{"consume", "--topic", "t"},
		{"perf", "consume", "--topic", "t"},
	} {
		code, _, stderr := runTool(t, append(args, "--data", t.TempDir(), "--flush", "none")...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "flag provided but not defined: --flush", args)
	}
}

// TestGroupsResetOffsetsFlushNeedsExecute: a dry run commits nothing, so
// --flush without --execute is refused rather than ignored.
func TestGroupsResetOffsetsFlushNeedsExecute(t *testing.T) {
	code, _, stderr := runTool(t, "groups", "reset-offsets", "--data", t.TempDir(), "--group", "g", "--topic", "t",
		"--to-earliest", "--flush", "none")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "spool groups reset-offsets: --flush needs --execute")
}

// TestTopicsSecurityFlagsNeedBootstrapServer: the SASL and TLS flags
// secure a --bootstrap-server connection; on a data directory they are
// refused, as consume refuses them.
func TestTopicsSecurityFlagsNeedBootstrapServer(t *testing.T) {
	for _, sub := range []string{"create", "list", "describe", "delete"} {
		for _, flag := range clientSecurityFlags {
			args := []string{"topics", sub, "--data", t.TempDir(), "--topic", "t", "--" + flag}
			if flag != "tls" {
				args = append(args, "x")
			}
			if sub == "list" {
				args = slices.Delete(args, 4, 6) // no --topic
			}
			code, _, stderr := runTool(t, args...)
			require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
			require.Contains(t, stderr, "--"+flag+" needs --bootstrap-server", args)
		}
	}
}

// TestPerfProducePartitionsOfExistingTopic: --partitions sizes the topic
// perf produce creates; given for an existing topic of another size it is
// refused rather than ignored.
func TestPerfProducePartitionsOfExistingTopic(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "p", "--partitions", "2")
	require.Equal(t, exitOK, code, stderr)

	perf := []string{"perf", "produce", "--data", data, "--topic", "p", "--records", "10", "--record-size", "10"}
	code, _, stderr = runTool(t, append(perf, "--partitions", "3")...)
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--partitions 3: --topic p exists, with 2 partitions")

	// As many as the topic has, or none: the topic is measured.
	code, _, stderr = runTool(t, append(perf, "--partitions", "2")...)
	require.Equal(t, exitOK, code, stderr)
	code, _, stderr = runTool(t, perf...)
	require.Equal(t, exitOK, code, stderr)
}

// TestACLsDeleteAllWithFilter: --all deletes every ACL only without
// filter flags; beside them it would be ignored, so it is refused.
func TestACLsDeleteAllWithFilter(t *testing.T) {
	code, _, stderr := runTool(t, "acls", "delete", "--bootstrap-server", "127.0.0.1:1", "--all", "--topic", "orders")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--all deletes every ACL: give it without filter flags")
}

// TestServePrincipalMappingRulesNeedClientCA: the rules map client
// certificates' subjects, which clients present only under
// --tls-client-ca.
func TestServePrincipalMappingRulesNeedClientCA(t *testing.T) {
	code, _, stderr := runTool(t, "serve", "--data", t.TempDir(), "--ssl-principal-mapping-rules", "RULE:^CN=([^,]*)$/$1/,DEFAULT")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--ssl-principal-mapping-rules needs --tls-client-ca")
}
