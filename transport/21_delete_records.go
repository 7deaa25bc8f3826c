package transport

import (
	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords v0 to v2 (KIP-107; v2 is flexible): advance partitions' log
// start offsets. On one broker the new low watermark is known at once, so
// the request's timeout never runs out.
func init() { register(kmsg.DeleteRecords, 0, 2, deleteRecords) }

// deleteRecordsHighWatermark asks to delete everything below the high
// watermark (DeleteRecordsRequest.HIGH_WATERMARK).
const deleteRecordsHighWatermark = -1

func deleteRecords(c *conn, req *request, body *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DeleteRecordsResponse)
	resp.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(body.Topics))
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		t := &resp.Topics[ti]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(rt.Partitions))
		// Kafka refuses a topic whose cleanup policy does not delete: a
		// compacted log keeps every key's latest record.
		topicCode := errNone
		if !c.can(acl.OpDelete, acl.ResourceTopic, rt.Topic) {
			topicCode = errTopicAuthorizationFailed
		} else if d, err := c.s.b.DescribeTopic(rt.Topic); err != nil {
			topicCode = fetchErrorCode(err)
		} else if d.Config.CleanupPolicy == spool.CleanupCompact {
			topicCode = errPolicyViolation
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			out := &t.Partitions[pi]
			out.Partition = rp.Partition
			out.LowWatermark = -1
			if out.ErrorCode = topicCode; topicCode != errNone {
				continue
			}
			p, err := c.s.b.LeaderPartition(rt.Topic, rp.Partition, -1)
			if err != nil {
				out.ErrorCode = fetchErrorCode(err)
				continue
			}
			offset := rp.Offset
			if offset == deleteRecordsHighWatermark {
				offset = p.HighWatermark()
			}
			if offset < 0 || offset > p.HighWatermark() {
				out.ErrorCode = errOffsetOutOfRange
				continue
			}
			if err := p.Log().DeleteRecordsBefore(offset); err != nil {
				out.ErrorCode = fetchErrorCode(err)
				continue
			}
			// The leader-epoch cache follows the log start, as Kafka's
			// does; its first entry then starts at the new log start.
			if err := p.Epochs().TruncateFromStart(p.StartOffset()); err != nil {
				out.ErrorCode = errKafkaStorageError
				continue
			}
			out.LowWatermark = p.StartOffset()
		}
	}
	return resp, nil
}
