package transport

import (
	"fmt"
	"github.com/spoolmq/spool/acl"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions v0-3 grows topics (never shrinks them: INVALID_PARTITIONS),
// all or nothing: on a full disk the topic keeps its partitions and the
// answer is KAFKA_STORAGE_ERROR.
// A manual assignment may only name this node, one replica per new
// partition. __consumer_offsets keeps its count: groups are placed by it.
func init() { register(kmsg.CreatePartitions, 0, 3, createPartitions) }

func createPartitions(c *conn, req *request, body *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrCreatePartitionsResponse()
	count := map[string]int{}
	for _, t := range body.Topics {
		count[t.Topic]++
	}
	for _, t := range body.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		if count[t.Topic] > 1 {
			err = &apiError{errInvalidRequest, "Duplicate topic in request: " + t.Topic}
		} else if !c.can(acl.OpAlter, acl.ResourceTopic, t.Topic) {
			err = &apiError{errTopicAuthorizationFailed, "Authorization failed."}
		} else if d, derr := c.s.b.DescribeTopic(t.Topic); derr == nil && !body.ValidateOnly && t.Count > int32(len(d.Partitions)) {
			if err = c.mutationQuota(req, int(t.Count)-len(d.Partitions), req.version >= 3, resp); err == nil {
				err = c.createPartitions(t, body.ValidateOnly)
			}
		} else {
			err = c.createPartitions(t, body.ValidateOnly)
		}
		rt.ErrorCode, rt.ErrorMessage = errorAndMessage(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (c *conn) createPartitions(t kmsg.CreatePartitionsRequestTopic, validateOnly bool) error {
	b := c.s.b
	d, err := b.DescribeTopic(t.Topic)
	if err != nil {
		return err
	}
	if d.Internal {
		return &apiError{errInvalidRequest, "The partition count of internal topic " + t.Topic + " cannot change"}
	}
	have := int32(len(d.Partitions))
	switch {
	case t.Count < have:
		return &apiError{errInvalidPartitions, fmt.Sprintf("Topic currently has %d partitions, which is higher than the requested %d.", have, t.Count)}
	case t.Count == have:
		return &apiError{errInvalidPartitions, fmt.Sprintf("Topic already has %d partitions.", have)}
	}
	if t.Assignment != nil {
		if len(t.Assignment) != int(t.Count-have) {
			return &apiError{errInvalidReplicaAssignment, fmt.Sprintf("Increasing the number of partitions by %d but %d assignments provided.", t.Count-have, len(t.Assignment))}
		}
		for i, a := range t.Assignment {
			if len(a.Replicas) != 1 || a.Replicas[0] != c.s.opts.NodeID {
				return &apiError{errInvalidReplicaAssignment, fmt.Sprintf("Partition %d: replicas %v; this cluster has one broker, %d", int(have)+i, a.Replicas, c.s.opts.NodeID)}
			}
		}
	}
	if validateOnly {
		return nil
	}
	return b.CreatePartitions(c.ctx, t.Topic, t.Count)
}
