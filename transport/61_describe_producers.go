package transport

import (
	"errors"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeProducers v0 (KIP-664): the active idempotent producers of each
// partition named, from its leader's producer state
// (partition.Partition.Producers): id, epoch, last sequence and when it
// last wrote, the coordinator epoch of its last transaction marker (-1:
// none) and the first offset of its open transaction (-1: none), which
// kafka-transactions.sh find-hanging compares with the coordinators. A
// partition this broker does not lead is NOT_LEADER_OR_FOLLOWER, an
// unknown one UNKNOWN_TOPIC_OR_PARTITION, one whose log could not be
// opened or whose producer state could not be loaded KAFKA_STORAGE_ERROR,
// each with a message.
func init() { register(kmsg.DescribeProducers, 0, 0, describeProducers) }

func describeProducers(c *conn, req *request, body *kmsg.DescribeProducersRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range body.Topics {
		t := kmsg.NewDescribeProducersResponseTopic()
		t.Topic = rt.Topic
		for _, n := range rt.Partitions {
			p := kmsg.NewDescribeProducersResponseTopicPartition()
			p.Partition = n
			part, err := c.s.b.LeaderPartition(rt.Topic, n, -1)
			if !c.can(acl.OpRead, acl.ResourceTopic, rt.Topic) {
				part, err = nil, &apiError{errTopicAuthorizationFailed, "Authorization failed."}
			}
			if err == nil {
				producers, perr := part.Producers()
				err = perr
				for _, pi := range producers {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp = pi.ID, int32(pi.Epoch), pi.LastSequence, pi.LastTimestamp
					ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = pi.CoordinatorEpoch, pi.CurrentTxnStartOffset
					p.ActiveProducers = append(p.ActiveProducers, ap)
				}
			}
			if err != nil {
				msg := err.Error()
				p.ErrorCode, p.ErrorMessage = produceErrorCode(err), &msg
				if ae := (*apiError)(nil); errors.As(err, &ae) {
					p.ErrorCode = ae.code
				}
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}
