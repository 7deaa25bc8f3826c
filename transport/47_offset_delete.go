package transport

import (
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetDelete v0 (KIP-496), served by the broker's group coordinator: it
// deletes a group's committed offsets, except those of topics the group
// consumes while it has members (GROUP_SUBSCRIBED_TO_TOPIC). As in Kafka,
// partitions of unknown topics are refused first (UNKNOWN_TOPIC_OR_PARTITION)
// and the rest go to the group. A refusal of the whole request
// (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a non-consumer group with members)
// is the response's error code, alone.
func init() { register(kmsg.OffsetDelete, 0, 0, offsetDelete) }

func offsetDelete(c *conn, req *request, body *kmsg.OffsetDeleteRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrOffsetDeleteResponse()
	type slot struct {
		t, p int
		tp   group.TopicPartition
	}
	var valid []slot
	var tps []group.TopicPartition
	for ti, t := range body.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if !c.can(acl.OpRead, acl.ResourceTopic, t.Topic) {
				rp.ErrorCode = errTopicAuthorizationFailed
			} else if err := b.CheckPartition(t.Topic, p.Partition); err != nil {
				rp.ErrorCode = errorCode(err)
			} else {
				tp := group.TopicPartition{Topic: t.Topic, Partition: p.Partition}
				valid = append(valid, slot{ti, len(rt.Partitions), tp})
				tps = append(tps, tp)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if body.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		resp.Topics = nil
		return resp, nil
	}
	if !c.can(acl.OpDelete, acl.ResourceGroup, body.Group) {
		resp.ErrorCode = errGroupAuthorizationFailed
		resp.Topics = nil
		return resp, nil
	}
	results, err := b.Groups().DeleteOffsets(body.Group, tps)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		resp.Topics = nil
		return resp, nil
	}
	for _, s := range valid {
		resp.Topics[s.t].Partitions[s.p].ErrorCode = errorCode(results[s.tp])
	}
	return resp, nil
}
