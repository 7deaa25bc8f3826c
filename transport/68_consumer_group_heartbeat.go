package transport

import (
	"maps"
	"slices"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupHeartbeat v0-v1 (KIP-848), served by the broker's group
// coordinator: the whole membership protocol of a "consumer" group in one
// request. A member joins with epoch 0, heartbeats with its epoch and the
// partitions it owns, and is answered with its epoch and, when it changed,
// its assignment; -1 leaves, -2 leaves for a while (a static member).
//
//   - v0 (Kafka 3.7 early access): the coordinator chooses a new member's
//     id.
//   - v1 (Kafka 4.0): the member chooses its id; adds
//     SubscribedTopicRegex, an RE2 expression over whole topic names.
//
// Partitions travel by topic id. An owned partition whose topic id the
// broker does not know (a deleted topic) is dropped from what the member
// says it owns. Subscribing to a named topic needs DESCRIBE on it
// (TOPIC_AUTHORIZATION_FAILED otherwise); a regular expression is matched
// against every topic, authorized or not.
func init() { register(kmsg.ConsumerGroupHeartbeat, 0, 1, consumerGroupHeartbeat) }

func consumerGroupHeartbeat(c *conn, req *request, body *kmsg.ConsumerGroupHeartbeatRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	fail := func(code int16, msg string) (kmsg.Response, error) {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return resp, nil
	}
	if req.version >= 1 && body.MemberID == "" {
		return fail(errInvalidRequest, "MemberId can't be empty.")
	}
	for _, t := range body.SubscribedTopicNames {
		if !c.can(acl.OpDescribe, acl.ResourceTopic, t) {
			return fail(errTopicAuthorizationFailed, "")
		}
	}
	hr := group.ConsumerHeartbeatRequest{
		Group:            body.Group,
		MemberID:         body.MemberID,
		MemberEpoch:      body.MemberEpoch,
		InstanceID:       groupString(body.InstanceID),
		RackID:           groupString(body.RackID),
		SubscribedTopics: body.SubscribedTopicNames,
		SubscribedRegex:  body.SubscribedTopicRegex,
		ServerAssignor:   groupString(body.ServerAssignor),
		ClientID:         req.clientID,
		ClientHost:       c.clientHost(),
	}
	if body.RebalanceTimeoutMillis > 0 {
		hr.RebalanceTimeout = time.Duration(body.RebalanceTimeoutMillis) * time.Millisecond
	}
	if body.Topics != nil {
		hr.Owned = make(map[string][]int32, len(body.Topics))
		for _, t := range body.Topics {
			if name, ok := b.TopicName(spool.TopicID(t.TopicID)); ok {
				hr.Owned[name] = append(hr.Owned[name], t.Partitions...)
			}
		}
	}
	if body.MemberEpoch == 0 && body.Topics != nil && len(body.Topics) > 0 {
		// Owned partitions of unknown topics were dropped above; a join
		// must still own nothing.
		return fail(errInvalidRequest, "TopicPartitions must be empty when (re-)joining.")
	}
	out, err := b.Groups().ConsumerHeartbeat(hr)
	if err != nil {
		return fail(errorCode(err), err.Error())
	}
	resp.MemberID = &out.MemberID
	resp.MemberEpoch = out.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(out.HeartbeatInterval / time.Millisecond)
	if out.Assignment != nil {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		for _, name := range slices.Sorted(maps.Keys(out.Assignment)) {
			d, err := b.DescribeTopic(name)
			if err != nil {
				// Deleted since the assignment was computed: the
				// next epoch drops it.
				continue
			}
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID, at.Partitions = d.ID, out.Assignment[name]
			a.Topics = append(a.Topics, at)
		}
		resp.Assignment = &a
	}
	return resp, nil
}
