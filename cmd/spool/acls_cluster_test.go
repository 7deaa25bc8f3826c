package main

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testcerts"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Three "spool serve" processes over mutual TLS with --authorizer: an ACL
// created with "spool acls" through one node holds on the others; a node
// killed and restarted enforces it as soon as it serves; deleted through
// another node, it is gone everywhere. A client quota set through one
// node is described by another.
func TestServeClusterACLsAndQuotas(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("cluster CA")
	require.NoError(t, err)
	issue := func(cn string, hosts ...string) (string, string) {
		p, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: cn}, Hosts: hosts})
		require.NoError(t, err)
		cert, key, err := p.Write(dir, cn)
		require.NoError(t, err)
		return cert, key
	}
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM, 0o600))
	nodeCert, nodeKey := issue("node", "127.0.0.1")
	adminCert, adminKey := issue("admin")
	alicePair, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "alice"}})
	require.NoError(t, err)
	aliceCert, err := alicePair.TLS()
	require.NoError(t, err)

	var ctrl []string
	for range 3 {
		ctrl = append(ctrl, freeAddr(t))
	}
	voters := votersFlag(ctrl)
	args := []string{"--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-client-ca", caFile,
		"--authorizer", "--super-users", "User:CN=node;User:CN=admin", "--session-timeout", "3s"}
	dirs := map[int]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	nodes := map[int]*servedBroker{}
	for id := 1; id <= 3; id++ {
		nodes[id] = startClusterNode(t, id, dirs[id], voters, args...)
	}
	admin := func(id int, cmd ...string) (int, string, string) {
		return runTool(t, append(cmd, "--bootstrap-server", nodes[id].addr, "--tls-ca", caFile,
			"--tls-cert", adminCert, "--tls-key", adminKey, "--timeout", "30s")...)
	}
	// Until all three brokers have registered, a replication factor of 3
	// is refused (INVALID_REPLICATION_FACTOR): retry until it is not.
	var code int
	var stderr string
	require.Eventually(t, func() bool {
		code, _, stderr = admin(1, "topics", "create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3")
		return code == exitOK || !strings.Contains(stderr, "INVALID_REPLICATION_FACTOR")
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, exitOK, code, stderr)

	alice := func(id int) func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(nodes[id].addr),
			kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{aliceCert}}),
			kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RecordDeliveryTimeout(10*time.Second),
			kgo.DisableIdempotentWrite()) // the topic ACL alone decides
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			for i := range 3 { // every partition, whichever node leads it
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	viaNode2 := alice(2)
	require.ErrorIs(t, viaNode2(), kerr.TopicAuthorizationFailed)

	code, stdout, stderr := admin(1, "acls", "create", "--principal", "User:CN=alice", "--operation", "write", "--topic", "orders")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "Created: ALLOW TOPIC:orders LITERAL WRITE User:CN=alice from *")
	require.Eventually(t, func() bool { return viaNode2() == nil }, 20*time.Second, 100*time.Millisecond, "node 2 applies the ACL node 1 created")

	// Node 3, killed and restarted, has the ACL from the metadata log.
	require.Equal(t, -1, nodes[3].stop(t, syscall.SIGKILL))
	nodes[3] = startClusterNode(t, 3, dirs[3], voters, args...)
	require.Eventually(t, func() bool { return alice(3)() == nil }, 30*time.Second, 200*time.Millisecond)
	code, stdout, stderr = admin(3, "acls", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "User:CN=alice")

	// A quota set through node 3 is described by node 2.
	code, _, stderr = admin(3, "quotas", "alter", "--user", "CN=alice", "--set", "producer_byte_rate=1048576")
	require.Equal(t, exitOK, code, stderr)
	require.Eventually(t, func() bool {
		_, stdout, _ := admin(2, "quotas", "describe")
		return strings.Contains(stdout, "producer_byte_rate=1048576")
	}, 20*time.Second, 100*time.Millisecond)

	// Deleted through node 3: refused through node 1 as well.
	code, stdout, stderr = admin(3, "acls", "delete", "--principal", "User:CN=alice")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "1 ACLs deleted.")
	viaNode1 := alice(1)
	require.Eventually(t, func() bool { return viaNode1() != nil }, 20*time.Second, 100*time.Millisecond)
	require.ErrorIs(t, viaNode1(), kerr.TopicAuthorizationFailed)
}
