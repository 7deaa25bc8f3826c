package transport

import (
	"maps"
	"slices"

	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareGroupDescribe v0-v1 (KIP-932): a share group's epoch and members
// with their subscriptions and assignments. A group that is not a share
// group is GROUP_ID_NOT_FOUND. v1 is v0 with Kafka 4.1's error set.
func init() { register(kmsg.ShareGroupDescribe, 0, 1, shareGroupDescribe) }

func shareGroupDescribe(c *conn, req *request, body *kmsg.ShareGroupDescribeRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrShareGroupDescribeResponse()
	for _, id := range body.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = id
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
		d, err := b.Groups().ShareDescribe(id)
		if err != nil {
			rg.ErrorCode = errorCode(err)
			msg := err.Error()
			rg.ErrorMessage = &msg
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.GroupState = d.State.String()
		rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = d.Epoch, d.Epoch, "simple"
		for _, m := range d.Members {
			rm := kmsg.NewShareGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.RackID = m.MemberID, m.MemberEpoch, groupNullable(m.RackID)
			rm.ClientID, rm.ClientHost = m.ClientID, m.ClientHost
			rm.SubscribedTopicNames = m.SubscribedTopics
			if rm.SubscribedTopicNames == nil {
				rm.SubscribedTopicNames = []string{}
			}
			rm.Assignment.TopicPartitions = []kmsg.ShareGroupDescribeResponseGroupMemberAssignmentTopicPartition{}
			for _, name := range slices.Sorted(maps.Keys(m.Assignment)) {
				tp := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				if td, err := b.DescribeTopic(name); err == nil {
					tp.TopicID = td.ID
				}
				tp.Topic, tp.Partitions = name, m.Assignment[name]
				rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, tp)
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
