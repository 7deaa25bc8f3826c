package transport

import (
	"context"
	"net"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinGroup v0-v8, served by the broker's group coordinator.
//
//   - v1 adds the rebalance timeout (v0: the session timeout, KIP-62).
//   - v2 adds throttle time; v3 is the same.
//   - v4 makes a new member join twice, first to learn its member id
//     (MEMBER_ID_REQUIRED, KIP-394).
//   - v5 adds group.instance.id: static membership (KIP-345).
//   - v6 is the first flexible version.
//   - v7 returns the protocol type (KIP-559).
//   - v8 adds a reason, which is only logged (KIP-800).
//
// Not v9 (KIP-814): its SkipAssignment tells a static leader that restarts
// into a Stable group that it leads but must not assign. The coordinator
// answers such a leader as Kafka did before v9, naming the old leader id, so
// the member follows and gets its old assignment back.
//
// A join waits - holding its connection, whose requests are served in order,
// as in Kafka - until the group decides (the rebalance completes) or the
// server shuts down. A client that hangs up meanwhile is noticed only once
// the join is answered: like Kafka's delayed join, its member stays in the
// rebalance until then.
func init() { register(kmsg.JoinGroup, 0, 8, joinGroup) }

func joinGroup(c *conn, req *request, body *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	jr := group.JoinRequest{
		Group:                body.Group,
		MemberID:             body.MemberID,
		GroupInstanceID:      groupString(body.InstanceID),
		ClientID:             req.clientID,
		ClientHost:           c.clientHost(),
		ProtocolType:         body.ProtocolType,
		SessionTimeout:       time.Duration(body.SessionTimeoutMillis) * time.Millisecond,
		RequireKnownMemberID: req.version >= 4,
	}
	if req.version >= 1 {
		jr.RebalanceTimeout = time.Duration(body.RebalanceTimeoutMillis) * time.Millisecond
	}
	for _, p := range body.Protocols {
		jr.Protocols = append(jr.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	if body.Reason != nil {
		c.s.logger.Debug("join group", "group", body.Group, "member", body.MemberID, "reason", *body.Reason)
	}

	ctx, stop := c.groupWaitContext()
	defer stop()
	out, err := c.s.b.Groups().Join(ctx, jr)
	if err != nil && ctx.Err() != nil {
		return nil, err // the server is going: no answer
	}

	resp := kmsg.NewPtrJoinGroupResponse()
	resp.MemberID = out.MemberID
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	resp.Generation = out.Generation
	resp.Protocol = &out.Protocol
	if req.version >= 7 {
		resp.ProtocolType = &out.ProtocolType
	}
	resp.LeaderID = out.LeaderID
	for _, m := range out.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID = m.MemberID
		rm.InstanceID = groupNullable(m.GroupInstanceID)
		rm.ProtocolMetadata = m.Metadata
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}

// clientHost is the client's address as Kafka reports it in DescribeGroups
// (Java's InetAddress.toString: "/127.0.0.1").
func (c *conn) clientHost() string {
	host, _, err := net.SplitHostPort(c.remote)
	if err != nil {
		host = c.remote
	}
	return "/" + host
}

// groupWaitContext is the context a JoinGroup or SyncGroup waits under: the
// connection's, ended too when the server starts shutting down. A parked
// join would otherwise hold Shutdown for as long as the group's rebalance
// timeout, as the connection only notices it is stopping between requests.
// stop releases the context and its watcher.
func (c *conn) groupWaitContext() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-c.stop:
			cancel()
		}
	}()
	return ctx, func() {
		cancel()
		<-done
	}
}

// groupString reads a nullable string of a group request: null is "".
func groupString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// groupNullable writes an optional string of a group response: "" is null.
func groupNullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
