package transport

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// aclServer is a server with SASL PLAIN users admin (a super user),
// alice and bob, and an authorizer keeping its ACLs in a file.
func aclServer(t *testing.T) (*spool.Broker, *Server, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acls")
	store, bs, err := acl.OpenFile(path)
	require.NoError(t, err)
	a, err := acl.New(acl.Config{SuperUsers: []string{"User:admin"}, Bindings: bs, Store: store})
	require.NoError(t, err)
	b, s, addr := testServer(t, spool.Options{AutoCreateTopics: spool.Disabled}, Options{
		SASL:       &SASL{Plain: map[string]string{"admin": "a", "alice": "a", "bob": "b"}},
		Authorizer: a,
	})
	return b, s, addr, path
}

func saslClient(t *testing.T, addr, user, pass string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()),
		kgo.RetryTimeout(2 * time.Second), kgo.RecordDeliveryTimeout(3 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// createACL creates one binding through CreateAcls and requires success.
func createACL(t *testing.T, cl *kgo.Client, b acl.Binding) {
	t.Helper()
	req := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceType(b.ResourceType), b.Name, kmsg.ACLResourcePatternType(b.Pattern)
	c.Principal, c.Host, c.Operation, c.PermissionType = b.Principal, b.Host, kmsg.ACLOperation(b.Operation), kmsg.ACLPermissionType(b.Permission)
	req.Creations = append(req.Creations, c)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Zero(t, resp.Results[0].ErrorCode, "%v", resp.Results[0].ErrorMessage)
}

func grant(rt acl.ResourceType, name string, pattern acl.PatternType, principal string, op acl.Operation, perm acl.Permission) acl.Binding {
	return acl.Binding{ResourceType: rt, Name: name, Pattern: pattern, Principal: principal, Host: "*", Operation: op, Permission: perm}
}

func produceErr(cl *kgo.Client, topic, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

func metadataTopics(t *testing.T, cl *kgo.Client, names ...string) map[string]int16 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	if names != nil {
		for _, n := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	out := map[string]int16{}
	for _, tp := range resp.Topics {
		out[*tp.Topic] = tp.ErrorCode
	}
	return out
}

// A principal without ACLs can neither read, write, describe nor delete;
// each grant enables exactly its operation; prefixed patterns apply to
// the names they start; deny overrides allow; super users bypass; nothing
// is written or deleted by a refused request; the ACLs survive a restart.
func TestACLs(t *testing.T) {
	b, _, addr, path := aclServer(t)
	ctx := context.Background()
	admin := saslClient(t, addr, "admin", "a")
	alice := saslClient(t, addr, "alice", "a")
	for _, name := range []string{"orders", "logs-app", "other"} {
		require.NoError(t, b.CreateTopic(ctx, name, spool.TopicConfig{}))
	}
	end := func(topic string) int64 {
		p, err := b.Partition(topic, 0)
		require.NoError(t, err)
		return p.EndOffset()
	}

	// Nothing allowed: invisible, unwritable, unreadable, undeletable.
	require.Empty(t, metadataTopics(t, alice), "topics alice may not describe are not listed")
	require.Equal(t, map[string]int16{"orders": kerr.TopicAuthorizationFailed.Code, "nope": kerr.TopicAuthorizationFailed.Code},
		metadataTopics(t, alice, "orders", "nope"), "existence is not disclosed")
	require.ErrorIs(t, produceErr(alice, "orders", "x"), kerr.TopicAuthorizationFailed)
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"orders"}
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	dresp, err := dt.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, dresp.Topics[0].ErrorCode)
	require.Contains(t, b.Topics(), "orders", "a refused delete deletes nothing")
	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "alice-new", 1, 1
	ct.Topics = append(ct.Topics, rt)
	cresp, err := ct.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, cresp.Topics[0].ErrorCode)
	require.NotContains(t, b.Topics(), "alice-new")
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MaxBytes = 10, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	d, err := b.DescribeTopic("orders")
	require.NoError(t, err)
	ft.Topic, ft.TopicID = "orders", d.ID // by name before v13, by id from it
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fresp, err := fetch.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, fresp.Topics[0].Partitions[0].ErrorCode)
	// An ACL request needs ALTER on the cluster.
	req := kmsg.NewPtrCreateACLsRequest()
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLResourcePatternTypeLiteral
	c.Principal, c.Host, c.Operation, c.PermissionType = "User:alice", "*", kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow
	req.Creations = append(req.Creations, c)
	aresp, err := req.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, kerr.ClusterAuthorizationFailed.Code, aresp.Results[0].ErrorCode)
	require.Equal(t, int64(0), end("orders"), "nothing written by refused requests")

	// WRITE on orders: produce works (and DESCRIBE is implied), reading
	// does not.
	createACL(t, admin, grant(acl.ResourceTopic, "orders", acl.PatternLiteral, "User:alice", acl.OpWrite, acl.Allow))
	require.NoError(t, produceErr(alice, "orders", "one"))
	require.Equal(t, map[string]int16{"orders": 0}, metadataTopics(t, alice))
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	mreq.IncludeTopicAuthorizedOperations = true
	mresp, err := mreq.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, int32(1<<acl.OpWrite|1<<acl.OpDescribe), mresp.Topics[0].AuthorizedOperations, "KIP-430: WRITE, and the DESCRIBE it implies")
	fresp, err = fetch.RequestWith(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, fresp.Topics[0].Partitions[0].ErrorCode, "WRITE grants no READ")
	require.ErrorIs(t, produceErr(alice, "other", "x"), kerr.TopicAuthorizationFailed, "nor anything on another topic")

	// READ on orders and on group g: a group consumer reads it.
	createACL(t, admin, grant(acl.ResourceTopic, "orders", acl.PatternLiteral, "User:alice", acl.OpRead, acl.Allow))
	consumer := saslClient(t, addr, "alice", "a", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("g"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	fs := consumer.PollFetches(pctx)
	cancel()
	require.ErrorIs(t, fs.Err0(), kerr.GroupAuthorizationFailed, "no READ on the group yet")
	createACL(t, admin, grant(acl.ResourceGroup, "g", acl.PatternLiteral, "User:alice", acl.OpRead, acl.Allow))
	consumer2 := saslClient(t, addr, "alice", "a", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("g"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	fs = consumer2.PollFetches(pctx)
	cancel()
	require.NoError(t, fs.Err0())
	require.Equal(t, "one", string(fs.Records()[0].Value))

	// Prefixed: WRITE on every topic starting logs-.
	createACL(t, admin, grant(acl.ResourceTopic, "logs-", acl.PatternPrefixed, "User:alice", acl.OpWrite, acl.Allow))
	require.NoError(t, produceErr(alice, "logs-app", "l"))
	require.ErrorIs(t, produceErr(alice, "other", "x"), kerr.TopicAuthorizationFailed)

	// DENY wins over ALLOW, for alice only.
	createACL(t, admin, grant(acl.ResourceTopic, "orders", acl.PatternLiteral, "User:alice", acl.OpWrite, acl.Deny))
	require.ErrorIs(t, produceErr(alice, "orders", "denied"), kerr.TopicAuthorizationFailed)
	require.Equal(t, int64(1), end("orders"))

	// bob has nothing; the super user has everything.
	bob := saslClient(t, addr, "bob", "b")
	require.ErrorIs(t, produceErr(bob, "logs-app", "b"), kerr.TopicAuthorizationFailed)
	require.NoError(t, produceErr(admin, "other", "root"))

	// DescribeAcls and DeleteAcls; the file holds what is left.
	dreq := kmsg.NewPtrDescribeACLsRequest()
	dreq.ResourceType, dreq.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	dreq.Operation, dreq.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	desc, err := dreq.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.Zero(t, desc.ErrorCode)
	n := 0
	for _, r := range desc.Resources {
		n += len(r.ACLs)
	}
	require.Equal(t, 5, n)
	del := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType, f.Operation, f.PermissionType = kmsg.ACLResourceTypeTopic, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeDeny
	del.Filters = append(del.Filters, f)
	delResp, err := del.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.Len(t, delResp.Results[0].MatchingACLs, 1)
	require.NoError(t, produceErr(alice, "orders", "allowed again"))
	_, saved, err := acl.OpenFile(path)
	require.NoError(t, err)
	require.Len(t, saved, 4, "the ACL file holds the bindings left, for the next start")
}

// Without an authorizer the ACL APIs answer SECURITY_DISABLED and
// everything is allowed, as before.
func TestACLsWithoutAuthorizer(t *testing.T) {
	_, _, addr := testServer(t, spool.Options{}, Options{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType, req.Operation, req.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Equal(t, kerr.SecurityDisabled.Code, resp.ErrorCode)
}
