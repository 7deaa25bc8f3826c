package transport

import (
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ElectLeaders v0-2 (KIP-183, KIP-460): preferred (v0 always) or unclean
// (v1+ ElectionType 1) leader elections for the partitions named, or for
// every partition with null Topics - whose results then leave out the
// partitions that needed none, as Kafka's do. Each partition answers
// ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
// ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION or 0 once the
// election is committed. Any broker takes it: a node that is not the
// active controller sends it there (spool.Broker.ElectLeaders). v1 adds a
// top-level error code; a failure of the whole request sets it and, for
// v0 clients, every partition's.
func init() { register(kmsg.ElectLeaders, 0, 2, electLeaders) }

func electLeaders(c *conn, req *request, body *kmsg.ElectLeadersRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.ElectLeadersResponse)
	typ := replica.PreferredElection
	if req.version >= 1 {
		typ = replica.ElectionType(body.ElectionType)
	}
	var parts []controller.TopicPartition
	if body.Topics != nil {
		parts = []controller.TopicPartition{}
		for _, t := range body.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, controller.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
	}
	fail := func(code int16, msg *string) (kmsg.Response, error) {
		resp.ErrorCode = code
		for _, t := range body.Topics {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.ErrorMessage = p, code, msg
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	if typ != replica.PreferredElection && typ != replica.UncleanElection {
		msg := "unknown election type"
		return fail(errInvalidRequest, &msg)
	}
	ctx, cancel := opContext(c, body.TimeoutMillis)
	defer cancel()
	results, err := c.s.b.ElectLeaders(ctx, typ, parts)
	if err != nil {
		return fail(errorAndMessage(err))
	}
	byTopic := map[string]int{}
	for _, r := range results {
		i, ok := byTopic[r.Topic]
		if !ok {
			i = len(resp.Topics)
			byTopic[r.Topic] = i
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = r.Topic
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewElectLeadersResponseTopicPartition()
		rp.Partition = r.Partition
		rp.ErrorCode, rp.ErrorMessage = errorAndMessage(r.Err)
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
	}
	return resp, nil
}
