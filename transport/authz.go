package transport

import (
	"net"
	"reflect"

	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Authorization (ACLs). With Options.Authorizer set every request is
// checked as Kafka checks it (notes: operations.md, 3.3) before anything
// is read or changed, and a denied one changes nothing:
//
//   - APIs on one resource (a group, a transactional id, the cluster) are
//     decided here, in gate, before the handler runs: a denied request is
//     answered with its authorization error in every error field.
//   - APIs naming several topics, groups or ids decide each in the
//     handler: the denied ones get TOPIC_/GROUP_/TRANSACTIONAL_ID_
//     AUTHORIZATION_FAILED and are not served, the others are. Topics a
//     principal may not DESCRIBE are left out of a Metadata answer for all
//     topics, as if they did not exist; one named in the request is
//     answered TOPIC_AUTHORIZATION_FAILED whether it exists or not.
//
// A cluster node's controller listener is not checked request by request:
// only the cluster's nodes use it. With an authorizer, a connection there
// is served only if its principal (its TLS client certificate's) is a
// super user, as the nodes' must be; any other is closed at once.

// can reports whether the connection's principal may perform op on the
// resource; always without an authorizer.
func (c *conn) can(op acl.Operation, rt acl.ResourceType, name string) bool {
	a := c.s.opts.Authorizer
	if a == nil || c.controller {
		return true
	}
	return a.Authorize(c.principal, c.host(), op, rt, name)
}

// canCluster is can on the cluster resource.
func (c *conn) canCluster(op acl.Operation) bool {
	return c.can(op, acl.ResourceCluster, acl.ClusterName)
}

// host is the client's IP address as ACLs name it.
func (c *conn) host() string {
	if h, _, err := net.SplitHostPort(c.remote); err == nil {
		return h
	}
	return c.remote
}

// gates decide the APIs on one resource before their handler runs: the
// error code to answer with, or errNone to serve the request.
var gates = map[int16]func(c *conn, req *request) int16{
	kmsg.JoinGroup.Int16():  groupGate(func(r kmsg.Request) string { return r.(*kmsg.JoinGroupRequest).Group }),
	kmsg.SyncGroup.Int16():  groupGate(func(r kmsg.Request) string { return r.(*kmsg.SyncGroupRequest).Group }),
	kmsg.Heartbeat.Int16():  groupGate(func(r kmsg.Request) string { return r.(*kmsg.HeartbeatRequest).Group }),
	kmsg.LeaveGroup.Int16(): groupGate(func(r kmsg.Request) string { return r.(*kmsg.LeaveGroupRequest).Group }),
	kmsg.ConsumerGroupHeartbeat.Int16(): groupGate(func(r kmsg.Request) string {
		return r.(*kmsg.ConsumerGroupHeartbeatRequest).Group
	}),
	kmsg.ShareGroupHeartbeat.Int16(): groupGate(func(r kmsg.Request) string {
		return r.(*kmsg.ShareGroupHeartbeatRequest).GroupID
	}),
	kmsg.InitProducerID.Int16(): func(c *conn, req *request) int16 {
		body := req.body.(*kmsg.InitProducerIDRequest)
		if body.TransactionalID != nil && *body.TransactionalID != "" {
			if !c.can(acl.OpWrite, acl.ResourceTransactionalID, *body.TransactionalID) {
				return errTransactionalIDAuthorizationFailed
			}
			return errNone
		}
		// Idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on
		// any topic (KIP-679).
		if c.canCluster(acl.OpIdempotentWrite) || c.canWriteSomeTopic() {
			return errNone
		}
		return errClusterAuthorizationFailed
	},
	kmsg.AddOffsetsToTxn.Int16(): func(c *conn, req *request) int16 {
		body := req.body.(*kmsg.AddOffsetsToTxnRequest)
		if !c.can(acl.OpWrite, acl.ResourceTransactionalID, body.TransactionalID) {
			return errTransactionalIDAuthorizationFailed
		}
		if !c.can(acl.OpRead, acl.ResourceGroup, body.Group) {
			return errGroupAuthorizationFailed
		}
		return errNone
	},
	kmsg.EndTxn.Int16(): func(c *conn, req *request) int16 {
		if !c.can(acl.OpWrite, acl.ResourceTransactionalID, req.body.(*kmsg.EndTxnRequest).TransactionalID) {
			return errTransactionalIDAuthorizationFailed
		}
		return errNone
	},
	kmsg.DescribeCluster.Int16():            clusterGate(acl.OpDescribe),
	kmsg.DescribeQuorum.Int16():             clusterGate(acl.OpDescribe),
	kmsg.DescribeLogDirs.Int16():            clusterGate(acl.OpDescribe),
	kmsg.ElectLeaders.Int16():               clusterGate(acl.OpAlter),
	kmsg.AlterPartitionAssignments.Int16():  clusterGate(acl.OpAlter),
	kmsg.ListPartitionReassignments.Int16(): clusterGate(acl.OpDescribe),
	kmsg.UnregisterBroker.Int16():           clusterGate(acl.OpAlter),
	kmsg.WriteTxnMarkers.Int16():            clusterGate(acl.OpClusterAction),
}

func groupGate(group func(kmsg.Request) string) func(c *conn, req *request) int16 {
	return func(c *conn, req *request) int16 {
		if !c.can(acl.OpRead, acl.ResourceGroup, group(req.body)) {
			return errGroupAuthorizationFailed
		}
		return errNone
	}
}

func clusterGate(op acl.Operation) func(c *conn, req *request) int16 {
	return func(c *conn, req *request) int16 {
		if !c.canCluster(op) {
			return errClusterAuthorizationFailed
		}
		return errNone
	}
}

// canConfigs reports whether the principal may describe or alter the
// settings of a config resource: a topic's on the topic, a broker's on
// the cluster.
func (c *conn) canConfigs(op acl.Operation, typ kmsg.ConfigResourceType, name string) bool {
	if typ == kmsg.ConfigResourceTypeTopic {
		return c.can(op, acl.ResourceTopic, name)
	}
	if typ == kmsg.ConfigResourceTypeGroupConfig {
		return c.can(op, acl.ResourceGroup, name)
	}
	return c.canCluster(op)
}

// configsDenied is the error for a config resource the principal may not
// see or change.
func configsDenied(typ kmsg.ConfigResourceType) error {
	if typ == kmsg.ConfigResourceTypeTopic {
		return &apiError{errTopicAuthorizationFailed, "Authorization failed."}
	}
	if typ == kmsg.ConfigResourceTypeGroupConfig {
		return &apiError{errGroupAuthorizationFailed, "Authorization failed."}
	}
	return &apiError{errClusterAuthorizationFailed, "Authorization failed."}
}

// canCreateTopic reports whether the principal may create the topic:
// CREATE on the cluster, or on the topic.
func (c *conn) canCreateTopic(name string) bool {
	return c.canCluster(acl.OpCreate) || c.can(acl.OpCreate, acl.ResourceTopic, name)
}

// canWriteSomeTopic reports whether the principal may WRITE some topic,
// existing or not (KIP-679's rule for an idempotent producer's
// InitProducerId): some ALLOW applies to it and no DENY of all topics.
func (c *conn) canWriteSomeTopic() bool {
	a := c.s.opts.Authorizer
	if a == nil || c.controller {
		return true
	}
	return a.AuthorizeAny(c.principal, c.host(), acl.OpWrite, acl.ResourceTopic)
}

// gate runs the request's gate, if it has one: a non-nil response is the
// denial to send instead of serving the request.
func (c *conn) gate(req *request) kmsg.Response {
	if c.s.opts.Authorizer == nil || c.controller {
		return nil
	}
	g, ok := gates[req.key]
	if !ok {
		return nil
	}
	code := g(c, req)
	if code == errNone {
		return nil
	}
	c.s.logger.Debug("request denied", "remote", c.remote, "principal", c.principal, "api", kmsg.NameForKey(req.key), "code", code)
	resp := req.body.ResponseKind()
	setErrorCodes(reflect.ValueOf(resp), code)
	return resp
}

// setErrorCodes sets every ErrorCode field reachable from v (a response)
// to code.
func setErrorCodes(v reflect.Value, code int16) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			setErrorCodes(v.Elem(), code)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 && f.CanSet() {
				f.SetInt(int64(code))
				continue
			}
			setErrorCodes(f, code)
		}
	case reflect.Slice:
		for i := range v.Len() {
			setErrorCodes(v.Index(i), code)
		}
	}
}

// checkedInHandler lists the APIs whose handlers decide authorization for
// each resource they name; with gates and unchecked it covers every API
// the server serves (TestEveryAPIIsAuthorized).
var checkedInHandler = []kmsg.Key{
	kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.OffsetCommit, kmsg.OffsetFetch,
	kmsg.FindCoordinator, kmsg.DescribeGroups, kmsg.ListGroups, kmsg.CreateTopics, kmsg.DeleteTopics,
	kmsg.DeleteRecords, kmsg.OffsetForLeaderEpoch, kmsg.AddPartitionsToTxn, kmsg.TxnOffsetCommit,
	kmsg.DescribeConfigs, kmsg.AlterConfigs, kmsg.CreatePartitions, kmsg.DeleteGroups,
	kmsg.IncrementalAlterConfigs, kmsg.OffsetDelete, kmsg.DescribeProducers, kmsg.DescribeTransactions,
	kmsg.ListTransactions, kmsg.DescribeACLs, kmsg.CreateACLs, kmsg.DeleteACLs,
	kmsg.DescribeClientQuotas, kmsg.AlterClientQuotas, kmsg.DescribeUserSCRAMCredentials, kmsg.AlterUserSCRAMCredentials,
	kmsg.ConsumerGroupDescribe, kmsg.ShareGroupDescribe, kmsg.ShareFetch, kmsg.ShareAcknowledge,
	kmsg.DescribeShareGroupOffsets, kmsg.AlterShareGroupOffsets, kmsg.DeleteShareGroupOffsets,
}

// unchecked are the APIs Kafka serves to anyone: before authentication,
// or to find out what the broker speaks.
var unchecked = []kmsg.Key{kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate}

// Authorized-operations bitfields (KIP-430): bit 1<<op for each operation
// of the resource type the principal may perform.
var (
	topicOps   = []acl.Operation{acl.OpRead, acl.OpWrite, acl.OpCreate, acl.OpDelete, acl.OpAlter, acl.OpDescribe, acl.OpDescribeConfigs, acl.OpAlterConfigs}
	clusterOps = []acl.Operation{acl.OpCreate, acl.OpAlter, acl.OpDescribe, acl.OpClusterAction, acl.OpDescribeConfigs, acl.OpAlterConfigs, acl.OpIdempotentWrite}
)

func (c *conn) authorizedOps(rt acl.ResourceType, name string, ops []acl.Operation) int32 {
	var bits int32
	for _, op := range ops {
		if c.can(op, rt, name) {
			bits |= 1 << op
		}
	}
	return bits
}
