package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// spool serve --authorizer with "spool acls" (the users read from a file
// with --sasl-plain @FILE): a user with no ACLs is
// refused; the super user grants it WRITE with "spool acls create"
// (authenticating with SASL, its password read from a file); the grant is
// listed, works, survives a restart of the server, and is deleted again.
func TestServeAuthorizerAndACLsCommand(t *testing.T) {
	data := t.TempDir()
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte("# the broker's users\nadmin:root-pw\n\nalice:alice-pw\n"), 0o600))
	args := []string{"--data", data, "--authorizer", "--super-users", "User:admin", "--sasl-plain", "@" + users}
	s := startServe(t, args...)
	pwFile := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("root-pw\n"), 0o600))
	as := func(cmd ...string) []string {
		return append(cmd, "--bootstrap-server", s.addr, "--sasl-mechanism", "PLAIN", "--sasl-user", "admin", "--sasl-password-file", pwFile, "--timeout", "10s")
	}
	code, _, stderr := runTool(t, as("topics", "create", "--topic", "orders")...)
	require.Equal(t, exitOK, code, stderr)

	alice, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.SASL(plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism()),
		kgo.DefaultProduceTopic("orders"), kgo.RecordDeliveryTimeout(5*time.Second))
	require.NoError(t, err)
	defer alice.Close()
	produce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return alice.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}
	require.ErrorIs(t, produce(), kerr.TopicAuthorizationFailed)

	code, stdout, stderr := runTool(t, as("acls", "create", "--principal", "User:alice", "--operation", "write,describe", "--topic", "orders")...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Created: ALLOW TOPIC:orders LITERAL WRITE User:alice from *")
	require.NoError(t, produce())
	code, stdout, _ = runTool(t, as("acls", "list")...)
	require.Equal(t, exitOK, code)
	require.Equal(t, 3, len(strings.Split(strings.TrimSpace(stdout), "\n")), "a header and two ACLs:\n%s", stdout)

	// Without credentials, or as alice, the ACLs cannot be touched.
	code, _, stderr = runTool(t, "acls", "list", "--bootstrap-server", s.addr, "--timeout", "5s")
	require.Equal(t, exitProblem, code, "no SASL: the server refuses the connection")
	code, _, stderr = runTool(t, "acls", "create", "--principal", "User:alice", "--operation", "all", "--cluster", "--bootstrap-server", s.addr)
	require.NotEqual(t, exitOK, code)
	_ = stderr

	// The ACLs survive a restart.
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	s = startServe(t, args...)
	alice2, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.SASL(plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism()),
		kgo.DefaultProduceTopic("orders"), kgo.RecordDeliveryTimeout(5*time.Second))
	require.NoError(t, err)
	defer alice2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, alice2.ProduceSync(ctx, &kgo.Record{Value: []byte("after restart")}).FirstErr())

	code, _, stderr = runTool(t, as("acls", "delete")...)
	require.Equal(t, exitUsage, code, "no filter, no --all")
	code, stdout, stderr = runTool(t, as("acls", "delete", "--principal", "User:alice")...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "2 ACLs deleted.")
	require.ErrorIs(t, alice2.ProduceSync(ctx, &kgo.Record{Value: []byte("denied")}).FirstErr(), kerr.TopicAuthorizationFailed)
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))

	// The data directory with its ACL file checks clean.
	code, stdout, _ = runTool(t, "check", "--quiet", data)
	require.Equal(t, exitOK, code, stdout)
}

func TestServeAuthorizerRefusals(t *testing.T) {
	for _, args := range [][]string{
		{"--super-users", "User:admin"},
		{"--authorizer", "--super-users", "admin"},
		{"--authorizer", "--controller-quorum-voters", "1@127.0.0.1:9999"},
	} {
		code, _, stderr := runTool(t, append([]string{"serve", "--data", t.TempDir()}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
}

// "spool quotas": set a producer byte rate for a client id on a served
// broker, see it described, throttle a client, remove it; it survives a
// restart (the data directory's quotas file).
func TestServeQuotasCommand(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--data", data)
	at := func(cmd ...string) []string { return append(cmd, "--bootstrap-server", s.addr, "--timeout", "10s") }
	code, stdout, stderr := runTool(t, at("quotas", "alter", "--client-id", "slow", "--set", "producer_byte_rate=1024,request_percentage=50")...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Quotas changed.")
	code, _, stderr = runTool(t, at("quotas", "alter", "--client-id", "slow", "--set", "producer_byte_rate=-5")...)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "INVALID_REQUEST")
	code, _, _ = runTool(t, at("quotas", "alter", "--user", "a", "--user-default", "--set", "producer_byte_rate=1")...)
	require.Equal(t, exitUsage, code)

	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	s = startServe(t, "--data", data)
	code, stdout, stderr = runTool(t, at("quotas", "describe")...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "client-id=slow")
	require.Contains(t, stdout, "producer_byte_rate=1024")

	var throttled atomic.Int64
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.ClientID("slow"), kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.WithHooks(throttleSeen(func(d time.Duration) { throttled.Store(int64(d)) })))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 4096)}).FirstErr())
	require.Positive(t, throttled.Load(), "the broker told the client to slow down")

	code, _, stderr = runTool(t, at("quotas", "alter", "--client-id", "slow", "--remove", "producer_byte_rate,request_percentage")...)
	require.Equal(t, exitOK, code, stderr)
	code, stdout, _ = runTool(t, at("quotas", "describe")...)
	require.Equal(t, exitOK, code)
	require.NotContains(t, stdout, "slow")
}

type throttleSeen func(time.Duration)

func (h throttleSeen) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) { h(d) }
