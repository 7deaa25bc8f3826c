package transport

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/quota"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// aclCluster is three nodes over mutual TLS with an authorizer and quotas:
// their ACLs and quotas are the cluster's, in the metadata log.
type aclCluster struct {
	*testCluster
	ts *tlsSetup
}

func newACLCluster(t *testing.T) *aclCluster {
	ts := newTLSSetup(t, true)
	peerTLS := ts.clientTLS(t, ts.client(t, pkix.Name{CommonName: "node"}, time.Time{}))
	c := newTestCluster(t, 3)
	c.tune = func(cfg *NodeConfig) {
		cfg.Server.TLS = ts.files.Config()
		cfg.PeerTLS = peerTLS
		a, err := acl.New(acl.Config{SuperUsers: []string{"User:CN=node", "User:CN=admin"}})
		require.NoError(t, err)
		m, err := quota.New(quota.Config{})
		require.NoError(t, err)
		cfg.Server.Authorizer, cfg.Server.Quotas = a, m
	}
	c.startAll()
	return &aclCluster{c, ts}
}

// client is a client of one node as the principal CN=name.
func (c *aclCluster) client(t *testing.T, id int32, name string, opts ...kgo.Opt) *kgo.Client {
	pair := c.ts.client(t, pkix.Name{CommonName: name}, time.Time{})
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.running()[id].Addr().String()),
		kgo.DialTLSConfig(c.ts.clientTLS(t, pair)), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// everyNode waits until cond holds on every running node's server.
func (c *aclCluster) everyNode(t *testing.T, what string, cond func(*Server) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, nd := range c.running() {
			if !cond(nd.Server()) {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, what)
}

func writeACL(principal, topic string) acl.Binding {
	return grant(acl.ResourceTopic, topic, acl.PatternLiteral, principal, acl.OpWrite, acl.Allow)
}

// createACLErr creates one binding through CreateAcls.
func createACLErr(ctx context.Context, cl *kgo.Client, b acl.Binding) error {
	req := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.Name, kmsg.ACLResourcePatternType(b.Pattern)
	c.Principal, c.Host, c.Operation, c.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
	req.Creations = append(req.Creations, c)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Results[0].ErrorCode)
}

// ACLs created, and deleted, through one node hold on every node; a node
// restarted takes them from the metadata log before it serves.
func TestClusterACLsHoldOnEveryNode(t *testing.T) {
	c := newACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin1 := c.client(t, 1, "admin")
	c.createTopic(ctx, admin1, "orders", 3, 3, nil)

	// Alice produces to every partition through node 2: each partition's
	// leader - on any node - decides.
	alice := c.client(t, 2, "alice", kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(2))
	produceAll := func() error {
		for p := int32(0); p < 3; p++ {
			if err := alice.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
				return err
			}
		}
		return nil
	}
	require.ErrorIs(t, produceAll(), kerr.TopicAuthorizationFailed)

	// Granted through node 1.
	require.NoError(t, createACLErr(ctx, admin1, writeACL("User:CN=alice", "orders")))
	c.everyNode(t, "every node has the ACL", func(s *Server) bool { return s.opts.Authorizer.Len() == 1 })
	require.NoError(t, produceAll())

	// A restarted node has it before it serves.
	c.stop(3)
	nd := c.start(3)
	select {
	case <-nd.Broker().Ready():
	case <-ctx.Done():
		t.Fatal("node 3 not ready")
	}
	require.Eventually(t, func() bool { return nd.Server().opts.Authorizer.Len() == 1 }, 10*time.Second, 10*time.Millisecond)

	// Revoked through node 3: refused everywhere again.
	admin3 := c.client(t, 3, "admin")
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, ptr("orders"), kmsg.ACLResourcePatternTypeLiteral
	f.Principal, f.Host, f.Operation, f.PermissionType = ptr("User:CN=alice"), ptr("*"), kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow
	del.Filters = append(del.Filters, f)
	dres, err := del.RequestWith(ctx, admin3)
	require.NoError(t, err)
	require.Zero(t, dres.Results[0].ErrorCode)
	require.Len(t, dres.Results[0].MatchingACLs, 1)
	c.everyNode(t, "every node dropped the ACL", func(s *Server) bool { return s.opts.Authorizer.Len() == 0 })
	require.ErrorIs(t, produceAll(), kerr.TopicAuthorizationFailed)
}

// Admins creating ACLs through different nodes at once each make their
// change from the version their node holds; the controller refuses the
// stale ones and the nodes make them again: none is lost.
func TestClusterConcurrentACLChangesAllLand(t *testing.T) {
	c := newACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const perNode = 15
	var wg sync.WaitGroup
	for id := int32(1); id <= 3; id++ {
		adm := c.client(t, id, "admin")
		wg.Go(func() {
			for i := range perNode {
				if !assertNoErr(t, createACLErr(ctx, adm, writeACL(fmt.Sprintf("User:n%d-%d", id, i), "t"))) {
					return
				}
			}
		})
	}
	wg.Wait()
	c.everyNode(t, "every ACL on every node", func(s *Server) bool { return s.opts.Authorizer.Len() == 3*perNode })
	var versions []int64
	for _, nd := range c.running() {
		versions = append(versions, nd.Server().opts.Authorizer.Version())
	}
	require.Equal(t, []int64{3 * perNode, 3 * perNode, 3 * perNode}, versions, "one version per change, the same on every node")
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A client quota set through one node applies on every node.
func TestClusterQuotasApplyOnEveryNode(t *testing.T) {
	c := newACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alter := kmsg.NewPtrAlterClientQuotasRequest()
	e := kmsg.NewAlterClientQuotasRequestEntry()
	e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "user", Name: ptr("CN=alice")}}
	e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: "producer_byte_rate", Value: 1 << 20}}
	alter.Entries = append(alter.Entries, e)
	res, err := alter.RequestWith(ctx, c.client(t, 2, "admin"))
	require.NoError(t, err)
	require.Zero(t, res.Entries[0].ErrorCode)
	c.everyNode(t, "every node holds the quota", func(s *Server) bool {
		v, ok := s.opts.Quotas.Limit(quota.ProducerByteRate, "CN=alice", "any")
		return ok && v == 1<<20
	})
	// Described through another node.
	desc := kmsg.NewPtrDescribeClientQuotasRequest()
	d, err := desc.RequestWith(ctx, c.client(t, 3, "admin"))
	require.NoError(t, err)
	require.Zero(t, d.ErrorCode)
	require.Len(t, d.Entries, 1)
	require.Equal(t, float64(1<<20), d.Entries[0].Values[0].Value)
}

// The controller listener serves only super users when an authorizer is
// on: a client certificate from the same CA gets nothing there.
func TestClusterControllerListenerRefusesNonSuperUsers(t *testing.T) {
	c := newACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pair := c.ts.client(t, pkix.Name{CommonName: "alice"}, time.Time{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.running()[1].ControllerAddr().String()), kgo.DialTLSConfig(c.ts.clientTLS(t, pair)),
		kgo.RetryTimeout(time.Second), kgo.RequestRetries(1))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	require.Error(t, err)

	// The admin, a super user, is served there.
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.running()[1].ControllerAddr().String()),
		kgo.DialTLSConfig(c.ts.clientTLS(t, c.ts.client(t, pkix.Name{CommonName: "admin"}, time.Time{}))))
	require.NoError(t, err)
	defer adm.Close()
	require.NoError(t, adm.Ping(ctx))
}

// An authorizer on a cluster node is refused at start unless the nodes
// authenticate to each other as super users, and it starts empty.
func TestClusterNodeAuthorizerRefusals(t *testing.T) {
	ts := newTLSSetup(t, true)
	c := newTestCluster(t, 1)
	newAuthorizer := func(super ...string) *acl.Authorizer {
		a, err := acl.New(acl.Config{SuperUsers: super})
		require.NoError(t, err)
		return a
	}
	peer := ts.clientTLS(t, ts.client(t, pkix.Name{CommonName: "node"}, time.Time{}))

	cfg := c.config(1)
	cfg.Server.Authorizer = newAuthorizer("User:CN=node")
	_, err := StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
	require.ErrorContains(t, err, "mutual TLS")

	cfg.Server.TLS, cfg.PeerTLS = ts.files.Config(), peer
	cfg.Server.Authorizer = newAuthorizer("User:CN=admin")
	_, err = StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
	require.ErrorContains(t, err, "User:CN=node, which is not a super user")

	noClientCerts := newTLSSetup(t, false)
	cfg.Server.TLS = noClientCerts.files.Config()
	cfg.Server.Authorizer = newAuthorizer("User:CN=node")
	_, err = StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
	require.ErrorContains(t, err, "verify client certificates")
	cfg.Server.TLS = ts.files.Config()

	a := newAuthorizer("User:CN=node")
	require.Empty(t, a.Create([]acl.Binding{{ResourceType: acl.ResourceTopic, Name: "t", Pattern: acl.PatternLiteral,
		Principal: "User:x", Host: "*", Operation: acl.OpRead, Permission: acl.Allow}})[0])
	cfg.Server.Authorizer = a
	_, err = StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
	require.ErrorContains(t, err, "without bindings")
}

// Listeners the nodes could not use among themselves are refused at
// start, with the reason.
func TestClusterNodeListenerRefusals(t *testing.T) {
	ts := newTLSSetup(t, true)
	peer := ts.clientTLS(t, ts.client(t, pkix.Name{CommonName: "node"}, time.Time{}))
	c := newTestCluster(t, 1)
	for _, tc := range []struct {
		name string
		tune func(*NodeConfig)
		msg  string
	}{
		{"one listener with SASL", func(cfg *NodeConfig) { cfg.Server.SASL = &SASL{Plain: map[string]string{"a": "b"}} }, "several listeners"},
		{"the nodes' listener with SASL", func(cfg *NodeConfig) {
			cfg.Server.SASL = &SASL{Plain: map[string]string{"a": "b"}}
			cfg.Listen = ""
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0", Listener: Listener{Name: "EXT", SASL: true}}, {Addr: "127.0.0.1:0", Listener: Listener{Name: "INT"}}}
		}, "put a listener without SASL first"},
		{"Listen and Listeners", func(cfg *NodeConfig) {
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0"}}
		}, "not both"},
		{"a name twice", func(cfg *NodeConfig) {
			cfg.Listen = ""
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0"}}
		}, "used twice"},
		{"the reserved name", func(cfg *NodeConfig) {
			cfg.Listen = ""
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0", Listener: Listener{Name: "CONTROLLER"}}}
		}, "reserved"},
		{"SASL without users", func(cfg *NodeConfig) {
			cfg.Listen = ""
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0", Listener: Listener{SASL: true}}}
		}, "no users"},
		{"nodes' listener plaintext, nodes on TLS", func(cfg *NodeConfig) {
			cfg.Listen = ""
			cfg.Server.TLS, cfg.PeerTLS = ts.files.Config(), peer
			cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0"}}
		}, "exactly when the nodes do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := c.config(1)
			tc.tune(&cfg)
			_, err := StartNode(cfg)
			require.ErrorIs(t, err, spool.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}
