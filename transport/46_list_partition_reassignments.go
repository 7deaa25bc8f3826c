package transport

import (
	"github.com/spoolmq/spool/controller"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListPartitionReassignments v0 (KIP-455): the ongoing reassignments of
// the partitions named, or of every partition with null Topics - each
// with its replicas (the target's, then those being removed) and the
// replicas being added and removed. Partitions unknown or not being
// reassigned are left out, as Kafka does. Any broker takes it: a node
// that is not the active controller asks it, so that the answer includes
// every change committed before.
func init() { register(kmsg.ListPartitionReassignments, 0, 0, listPartitionReassignments) }

func listPartitionReassignments(c *conn, req *request, body *kmsg.ListPartitionReassignmentsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	var parts []controller.TopicPartition
	if body.Topics != nil {
		parts = []controller.TopicPartition{}
		for _, t := range body.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, controller.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
	}
	ctx, cancel := opContext(c, body.TimeoutMillis)
	defer cancel()
	out, err := c.s.b.ListPartitionReassignments(ctx, parts)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorAndMessage(err)
		return resp, nil
	}
	byTopic := map[string]int{}
	for _, r := range out {
		i, ok := byTopic[r.Topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[r.Topic] = i
			rt := kmsg.NewListPartitionReassignmentsResponseTopic()
			rt.Topic = r.Topic
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		rp.Partition, rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas = r.Partition, r.Replicas, r.Adding, r.Removing
		if rp.AddingReplicas == nil {
			rp.AddingReplicas = []int32{}
		}
		if rp.RemovingReplicas == nil {
			rp.RemovingReplicas = []int32{}
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	return resp, nil
}
