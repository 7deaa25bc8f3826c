package transport

import (
	"maps"
	"slices"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupDescribe v0-v1 (KIP-848), served by the broker's group
// coordinator: a consumer group's epochs, assignor and members with their
// current and target assignments (topics by id and name). A group that is
// not a consumer group is GROUP_ID_NOT_FOUND.
//
//   - v1 adds each member's type: 1 for a consumer-protocol member, 0 for
//     a classic member in a group being upgraded or rolled back.
func init() { register(kmsg.ConsumerGroupDescribe, 0, 1, consumerGroupDescribe) }

func consumerGroupDescribe(c *conn, req *request, body *kmsg.ConsumerGroupDescribeRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	ids := map[string][16]byte{}
	assignment := func(byTopic map[string][]int32) kmsg.Assignment {
		a := kmsg.NewAssignment()
		a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
		for _, name := range slices.Sorted(maps.Keys(byTopic)) {
			id, ok := ids[name]
			if !ok {
				if d, err := b.DescribeTopic(name); err == nil {
					id = d.ID
				}
				ids[name] = id
			}
			tp := kmsg.NewAssignmentTopicPartition()
			tp.TopicID, tp.Topic, tp.Partitions = id, name, byTopic[name]
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		return a
	}
	for _, id := range body.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		if body.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = 0
			for _, op := range []acl.Operation{acl.OpRead, acl.OpDelete, acl.OpDescribe} {
				if c.can(op, acl.ResourceGroup, id) {
					rg.AuthorizedOperations |= 1 << op
				}
			}
		}
		if !c.can(acl.OpDescribe, acl.ResourceGroup, id) {
			rg.ErrorCode = errGroupAuthorizationFailed
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		d, err := b.Groups().ConsumerDescribe(id)
		if err != nil {
			rg.ErrorCode = errorCode(err)
			msg := err.Error()
			rg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State = consumerGroupState(d.State)
		rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch = m.MemberID, m.MemberEpoch
			rm.InstanceID, rm.RackID = groupNullable(m.InstanceID), groupNullable(m.RackID)
			rm.ClientID, rm.ClientHost = m.ClientID, m.ClientHost
			rm.SubscribedTopics = m.SubscribedTopics
			if rm.SubscribedTopics == nil {
				rm.SubscribedTopics = []string{}
			}
			rm.SubscribedTopicRegex = groupNullable(m.SubscribedRegex)
			rm.Assignment, rm.TargetAssignment = assignment(m.Assignment), assignment(m.Target)
			rm.MemberType = 1 // consumer
			if m.Classic {
				rm.MemberType = 0 // classic, in an upgrade under way
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// consumerGroupState is a consumer group's state as Kafka names it.
func consumerGroupState(s group.State) string {
	switch s {
	case group.Empty:
		return "Empty"
	case group.Reconciling:
		return "Reconciling"
	case group.Stable:
		return "Stable"
	}
	return "Dead"
}
