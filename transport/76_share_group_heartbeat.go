package transport

import (
	"maps"
	"slices"
	"time"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupHeartbeat v0-v1 (KIP-932), served by the broker's group
// coordinator: a share group member joins (epoch 0), heartbeats with its
// epoch, or leaves (-1). Every member is given every partition of the
// topics it subscribes to, by topic id; the records are shared out by
// ShareFetch. v1 is v0 for a broker without topic ACL filtering of
// subscriptions (subscribing to a topic needs DESCRIBE on it at both).
func init() { register(kmsg.ShareGroupHeartbeat, 0, 1, shareGroupHeartbeat) }

func shareGroupHeartbeat(c *conn, req *request, body *kmsg.ShareGroupHeartbeatRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrShareGroupHeartbeatResponse()
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return resp, nil
	}
	if body.MemberID == "" {
		return fail(errInvalidRequest, "MemberId can't be empty.")
	}
	for _, t := range body.SubscribedTopicNames {
		if !c.can(acl.OpDescribe, acl.ResourceTopic, t) {
			return fail(errTopicAuthorizationFailed, "")
		}
	}
	out, err := b.Groups().ShareHeartbeat(group.ShareHeartbeatRequest{
		Group: body.GroupID, MemberID: body.MemberID, MemberEpoch: body.MemberEpoch,
		RackID: groupString(body.RackID), SubscribedTopicNames: body.SubscribedTopicNames,
		ClientID: req.clientID, ClientHost: c.clientHost(),
	})
	if err != nil {
		return fail(errorCode(err), err.Error())
	}
	resp.MemberID = &out.MemberID
	resp.MemberEpoch = out.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(out.HeartbeatInterval / time.Millisecond)
	if out.Assignment != nil {
		a := kmsg.NewShareGroupHeartbeatResponseAssignment()
		a.TopicPartitions = []kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition{}
		for _, name := range slices.Sorted(maps.Keys(out.Assignment)) {
			d, err := b.DescribeTopic(name)
			if err != nil {
				continue // deleted meanwhile
			}
			tp := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			tp.TopicID, tp.Partitions = d.ID, out.Assignment[name]
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		resp.Assignment = &a
	}
	return resp, nil
}
