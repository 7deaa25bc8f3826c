package transport

import (
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareAcknowledge v0-v2 (KIP-932), served by the partitions' leader:
// acknowledgements of records a member holds, without fetching, in an
// open share session (epoch 0 is INVALID_SHARE_SESSION_EPOCH: a session
// opens with a ShareFetch); at epoch -1 the session then closes, releasing
// what the member still holds. Each partition's acknowledgements apply all
// or none.
//
//   - v1 is v0 with Kafka 4.1's error set.
//   - v2 adds IsRenewAck (renew acknowledgements, type 4) and the
//     acquisition lock timeout in the response.
func init() { register(kmsg.ShareAcknowledge, 0, 2, shareAcknowledge) }

func shareAcknowledge(c *conn, req *request, body *kmsg.ShareAcknowledgeRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrShareAcknowledgeResponse()
	resp.AcquisitionLockTimeoutMillis = int32(b.ShareLockDuration() / time.Millisecond)
	group, member := groupString(body.GroupID), groupString(body.MemberID)
	switch {
	case group == "" || member == "":
		resp.ErrorCode = errInvalidRequest
		return resp, nil
	case !c.can(acl.OpRead, acl.ResourceGroup, group):
		resp.ErrorCode = errGroupAuthorizationFailed
		return resp, nil
	case body.ShareSessionEpoch == shareAcknowledgeInitialEpoch:
		resp.ErrorCode = errInvalidShareSessionEpoch
		return resp, nil
	}
	key := shareSessionKey{group, member}
	if _, code := c.shareSessionFor(key, body.ShareSessionEpoch); code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	ctx, stop := c.shareWaitContext()
	defer stop()
	for _, t := range body.Topics {
		rt := kmsg.NewShareAcknowledgeResponseTopic()
		rt.TopicID = t.TopicID
		name, known := b.TopicName(spool.TopicID(t.TopicID))
		for _, p := range t.Partitions {
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition = p.Partition
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			switch {
			case !known:
				rp.ErrorCode = errUnknownTopicID
			case !c.can(acl.OpRead, acl.ResourceTopic, name):
				rp.ErrorCode = errTopicAuthorizationFailed
			default:
				batches := ackBatches(p.AcknowledgementBatches, func(a kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
					return a.FirstOffset, a.LastOffset, a.AcknowledgeTypes
				})
				if err := b.ShareAcknowledge(ctx, group, member, spool.TopicPartition{Topic: name, Partition: p.Partition}, batches); err != nil {
					rp.ErrorCode = shareErrorCode(err)
					msg := err.Error()
					rp.ErrorMessage = &msg
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if body.ShareSessionEpoch == shareAcknowledgeFinalEpoch {
		c.closeShareSession(key)
	}
	return resp, nil
}
