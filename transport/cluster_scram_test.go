package transport

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// A SCRAM user added with AlterUserScramCredentials through one node of a
// cluster logs in on every node, a node restarted has it, and deleted
// through another node it is refused everywhere; users added through
// three nodes at once all land. Each node has the nodes' own plaintext
// listener first and a SASL one for clients.
func TestClusterSCRAMCredentials(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tune = func(cfg *NodeConfig) {
		cfg.Listen = ""
		cfg.Server.SASL = &SASL{SCRAMSHA512: map[string]string{"admin": "root-pw"}}
		cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0", Listener: Listener{Name: "INTERNAL"}},
			{Addr: "127.0.0.1:0", Listener: Listener{Name: "EXTERNAL", SASL: true}}}
	}
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	external := func(id int32) string { return c.running()[id].ListenerAddrs()[1].String() }
	admin := func(id int32) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(external(id)), kgo.SASL(scram.Auth{User: "admin", Pass: "root-pw"}.AsSha512Mechanism()))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	logIn := func(id int32, user, pass string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(external(id)), kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()),
			kgo.RetryTimeout(time.Second))
		require.NoError(t, err)
		defer cl.Close()
		return cl.Ping(ctx)
	}
	upsert := func(cl *kgo.Client, user, pass string) error {
		salt := []byte("salt-of-" + user)
		salted, err := pbkdf2.Key(sha256.New, pass, salt, 4096, 32)
		require.NoError(t, err)
		req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		req.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{{Name: user, Mechanism: 1, Iterations: 4096, Salt: salt, SaltedPassword: salted}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if code := resp.Results[0].ErrorCode; code != 0 {
			return fmt.Errorf("code %d: %v", code, resp.Results[0].ErrorMessage)
		}
		return nil
	}
	everyNode := func(user, pass string, want bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			for id := range c.running() {
				if (logIn(id, user, pass) == nil) != want {
					return false
				}
			}
			return true
		}, 20*time.Second, 50*time.Millisecond, "%s logs in everywhere: %v", user, want)
	}

	require.NoError(t, upsert(admin(1), "bob", "bob-pw"))
	everyNode("bob", "bob-pw", true)
	require.Error(t, logIn(2, "bob", "wrong"))

	c.stop(2)
	c.start(2)
	require.Eventually(t, func() bool { return logIn(2, "bob", "bob-pw") == nil }, 30*time.Second, 100*time.Millisecond)

	// Three admins at once, through three nodes.
	var wg sync.WaitGroup
	for id := int32(1); id <= 3; id++ {
		cl := admin(id)
		wg.Go(func() {
			for i := range 4 {
				assertNoErr(t, upsert(cl, fmt.Sprintf("u%d-%d", id, i), "pw"))
			}
		})
	}
	wg.Wait()
	for id := int32(1); id <= 3; id++ {
		everyNode(fmt.Sprintf("u%d-3", id), "pw", true)
	}
	for _, nd := range c.running() {
		require.Len(t, nd.Server().opts.SCRAMFile.creds["SCRAM-SHA-256"], 13, "bob and 12 more, on every node")
	}

	del := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	del.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "bob", Mechanism: 1}}
	resp, err := del.RequestWith(ctx, admin(3))
	require.NoError(t, err)
	require.Zero(t, resp.Results[0].ErrorCode)
	everyNode("bob", "bob-pw", false)

	// The admin comes from every node's flags: deleting it over the
	// protocol would hold on one node only, so it is refused.
	del.Deletions = []kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "admin", Mechanism: 2}}
	resp, err = del.RequestWith(ctx, admin(2))
	require.NoError(t, err)
	require.Equal(t, kerr.ResourceNotFound.Code, resp.Results[0].ErrorCode)
	require.Contains(t, *resp.Results[0].ErrorMessage, "configured on the nodes")
	for id := range c.running() {
		require.NoError(t, admin(id).Ping(ctx), "node %d still takes the admin", id)
	}
}

// A broker without the client's listener is left out of the client's
// Metadata, and the partitions it leads are answered LISTENER_NOT_FOUND;
// clients of a listener every broker has see them all.
func TestClusterListenerNotFound(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tune = func(cfg *NodeConfig) {
		cfg.Listen = ""
		cfg.Listeners = []NodeListener{{Addr: "127.0.0.1:0", Listener: Listener{Name: "INTERNAL"}}}
		if cfg.NodeID != 3 {
			cfg.Listeners = append(cfg.Listeners, NodeListener{Addr: "127.0.0.1:0", Listener: Listener{Name: "EXTERNAL"}})
		}
	}
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	internal, err := kgo.NewClient(kgo.SeedBrokers(c.running()[1].ListenerAddrs()[0].String()))
	require.NoError(t, err)
	defer internal.Close()
	// Every broker unfenced (listed), so that the partitions spread over
	// all three.
	require.Eventually(t, func() bool {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, internal)
		return err == nil && len(resp.Brokers) == 3
	}, 30*time.Second, 20*time.Millisecond)
	c.createTopic(ctx, internal, "spread", 6, 1, nil)
	external, err := kgo.NewClient(kgo.SeedBrokers(c.running()[1].ListenerAddrs()[1].String()))
	require.NoError(t, err)
	defer external.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("spread")
	req.Topics = append(req.Topics, rt)
	// Either EXTERNAL broker may answer; each knows the topic once it has
	// applied its creation.
	var resp *kmsg.MetadataResponse
	require.Eventually(t, func() bool {
		var err error
		resp, err = req.RequestWith(ctx, external)
		return err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions) == 6
	}, 20*time.Second, 20*time.Millisecond)
	var ids []int32
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
	}
	require.ElementsMatch(t, []int32{1, 2}, ids, "node 3 has no EXTERNAL listener")
	led := 0
	for _, p := range resp.Topics[0].Partitions {
		if p.Leader == 3 {
			led++
			require.Equal(t, kerr.ListenerNotFound.Code, p.ErrorCode, "partition %d", p.Partition)
		} else {
			require.Zero(t, p.ErrorCode, "partition %d", p.Partition)
		}
	}
	require.Positive(t, led, "node 3 leads some partition: %+v", resp.Topics[0].Partitions)
	md := c.metadata(ctx, internal, "spread")
	for _, p := range md.Partitions {
		require.Zero(t, p.ErrorCode)
	}
}
