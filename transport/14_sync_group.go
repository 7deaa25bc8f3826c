package transport

import (
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup v0-v5, served by the broker's group coordinator.
//
//   - v1 adds throttle time; v2 is the same.
//   - v3 adds group.instance.id (KIP-345).
//   - v4 is the first flexible version.
//   - v5 adds the protocol type and name, which must be given (else
//     INCONSISTENT_GROUP_PROTOCOL, as in Kafka), are checked against the
//     group's and returned (KIP-559).
//
// A follower's sync waits for the leader's, holding its connection as in
// Kafka.
func init() { register(kmsg.SyncGroup, 0, 5, syncGroup) }

// emptyConsumerAssignment is what a member of a consumer group gets when the
// leader assigned it nothing. Kafka relays the leader's bytes, empty ones
// included, but some clients fail to decode an empty assignment; franz-go's
// kfake sends an encoded empty one for the same reason.
var emptyConsumerAssignment = group.EncodeAssignment(group.Assignment{Version: 0})

func syncGroup(c *conn, req *request, body *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.MemberAssignment = []byte{}
	if req.version >= 5 && (body.ProtocolType == nil || body.Protocol == nil) {
		resp.ErrorCode = errInconsistentGroupProtocol
		return resp, nil
	}
	sr := group.SyncRequest{
		Group:           body.Group,
		Generation:      body.Generation,
		MemberID:        body.MemberID,
		GroupInstanceID: groupString(body.InstanceID),
		ProtocolType:    groupString(body.ProtocolType),
		Protocol:        groupString(body.Protocol),
	}
	if len(body.GroupAssignment) > 0 {
		sr.Assignments = make(map[string][]byte, len(body.GroupAssignment))
		for _, a := range body.GroupAssignment {
			sr.Assignments[a.MemberID] = a.MemberAssignment
		}
	}

	ctx, stop := c.groupWaitContext()
	defer stop()
	out, err := c.s.b.Groups().Sync(ctx, sr)
	if err != nil && ctx.Err() != nil {
		return nil, err // the server is going: no answer
	}

	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	if req.version >= 5 {
		resp.ProtocolType = &out.ProtocolType
		resp.Protocol = &out.Protocol
	}
	switch {
	case len(out.Assignment) > 0:
		resp.MemberAssignment = out.Assignment
	case out.ProtocolType == group.ConsumerProtocolType:
		resp.MemberAssignment = emptyConsumerAssignment
	}
	return resp, nil
}
