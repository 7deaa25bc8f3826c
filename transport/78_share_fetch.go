package transport

import (
	"slices"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ShareFetch v0-v2 (KIP-932), served by the partitions' leader: in one
// request, acknowledge records a member holds (AcknowledgementBatches, per
// partition, answered in AcknowledgeErrorCode) and acquire more from the
// share session's partitions, waiting up to MaxWaitMillis when there are
// none. Records go out as the log's batches; the client delivers only the
// AcquiredRecords ranges, each with its delivery count.
//
//   - v1 adds MaxRecords and BatchSize (spool bounds by MaxRecords only)
//     and the acquisition lock timeout in the response.
//   - v2 (KIP-1206, KIP-1222) adds ShareAcquireMode - spool never returns
//     more than MaxRecords acquired records, so both modes are served
//     alike - and IsRenewAck: acknowledgements of type 4 (renew) only,
//     with no fetch.
//
// Acknowledgements are not accepted when a session opens (epoch 0:
// INVALID_REQUEST); a request at epoch -1 acknowledges, closes the
// session and fetches nothing. Partitions are named by topic id
// (UNKNOWN_TOPIC_ID for one the broker does not know); READ on the group
// and on each topic is needed.
func init() { register(kmsg.ShareFetch, 0, 2, shareFetch) }

func shareFetch(c *conn, req *request, body *kmsg.ShareFetchRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrShareFetchResponse()
	resp.AcquisitionLockTimeoutMillis = int32(b.ShareLockDuration() / time.Millisecond)
	group, member := groupString(body.GroupID), groupString(body.MemberID)
	hasAcks := false
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			hasAcks = hasAcks || len(p.AcknowledgementBatches) > 0
		}
	}
	switch {
	case group == "" || member == "":
		resp.ErrorCode = errInvalidRequest
		return resp, nil
	case !c.can(acl.OpRead, acl.ResourceGroup, group):
		resp.ErrorCode = errGroupAuthorizationFailed
		return resp, nil
	case body.ShareSessionEpoch == 0 && hasAcks:
		resp.ErrorCode = errInvalidRequest
		msg := "Acknowledge data present on initial fetch of a share session"
		resp.ErrorMessage = &msg
		return resp, nil
	}
	key := shareSessionKey{group, member}
	sess, code := c.shareSessionFor(key, body.ShareSessionEpoch)
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}

	// The partitions named, each with its response slot.
	type slot struct {
		tp   spool.TopicPartition
		rp   *kmsg.ShareFetchResponseTopicPartition
		acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
	}
	var slots []slot
	byTP := map[spool.TopicPartition]*kmsg.ShareFetchResponseTopicPartition{}
	// Partition answers are made one by one and put in the response at
	// the end, by topic, in the order they were made.
	type answer struct {
		id [16]byte
		rp *kmsg.ShareFetchResponseTopicPartition
	}
	var answers []answer
	respPart := func(id [16]byte, partition int32) *kmsg.ShareFetchResponseTopicPartition {
		rp := kmsg.NewShareFetchResponseTopicPartition()
		rp.Partition = partition
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
		answers = append(answers, answer{id, &rp})
		return &rp
	}
	defer func() {
		topicIdx := map[[16]byte]int{}
		for _, a := range answers {
			ti, ok := topicIdx[a.id]
			if !ok {
				rt := kmsg.NewShareFetchResponseTopic()
				rt.TopicID = a.id
				resp.Topics = append(resp.Topics, rt)
				ti = len(resp.Topics) - 1
				topicIdx[a.id] = ti
			}
			resp.Topics[ti].Partitions = append(resp.Topics[ti].Partitions, *a.rp)
		}
	}()
	for _, t := range body.Topics {
		name, known := b.TopicName(spool.TopicID(t.TopicID))
		for _, p := range t.Partitions {
			tp := spool.TopicPartition{Topic: name, Partition: p.Partition}
			rp := respPart(t.TopicID, p.Partition)
			switch {
			case !known:
				rp.ErrorCode = errUnknownTopicID
			case !c.can(acl.OpRead, acl.ResourceTopic, name):
				rp.ErrorCode = errTopicAuthorizationFailed
			default:
				if err := b.CheckPartition(name, p.Partition); err != nil {
					rp.ErrorCode = errorCode(err)
				}
			}
			if rp.ErrorCode != errNone {
				if len(p.AcknowledgementBatches) > 0 {
					rp.AcknowledgeErrorCode = rp.ErrorCode
				}
				continue
			}
			slots = append(slots, slot{tp, rp, p.AcknowledgementBatches})
			if !slices.Contains(sess.parts, tp) {
				sess.parts = append(sess.parts, tp)
			}
		}
	}
	for _, f := range body.ForgottenTopicsData {
		if name, ok := b.TopicName(spool.TopicID(f.TopicID)); ok {
			for _, p := range f.Partitions {
				gone := spool.TopicPartition{Topic: name, Partition: p}
				sess.parts = slices.DeleteFunc(sess.parts, func(tp spool.TopicPartition) bool { return tp == gone })
			}
		}
	}

	// Acknowledge first: what is released may be acquired again below.
	ctx, stop := c.shareWaitContext()
	defer stop()
	for i := range slots {
		s := &slots[i]
		byTP[s.tp] = s.rp
		if len(s.acks) == 0 {
			continue
		}
		batches := ackBatches(s.acks, func(a kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
			return a.FirstOffset, a.LastOffset, a.AcknowledgeTypes
		})
		if err := b.ShareAcknowledge(ctx, group, member, s.tp, batches); err != nil {
			s.rp.AcknowledgeErrorCode = shareErrorCode(err)
			msg := err.Error()
			s.rp.AcknowledgeErrorMessage = &msg
		}
	}
	if body.ShareSessionEpoch == shareAcknowledgeFinalEpoch {
		c.closeShareSession(key)
		return resp, nil
	}
	if req.version >= 2 && body.IsRenewAck {
		return resp, nil
	}

	maxRecords := defaultShareFetchMaxRecords
	if req.version >= 1 && body.MaxRecords > 0 {
		maxRecords = body.MaxRecords
	}
	maxWait := time.Duration(body.MaxWaitMillis) * time.Millisecond
	if hasAcks {
		maxWait = 0 // answer the acknowledgements at once
	}
	fetched, err := b.ShareAcquire(ctx, group, member, sess.parts, spool.ShareAcquireOptions{
		MaxRecords: int(maxRecords), MaxWait: maxWait, StartAtLatest: c.startAtLatest(group),
	})
	if err != nil && ctx.Err() != nil {
		return nil, err // the server is going: no answer
	}
	if err != nil {
		resp.ErrorCode = errorCode(err)
		msg := err.Error()
		resp.ErrorMessage = &msg
		return resp, nil
	}
	for _, f := range fetched {
		tp := spool.TopicPartition{Topic: f.Topic, Partition: f.Partition}
		rp := byTP[tp]
		if rp == nil {
			d, err := b.DescribeTopic(f.Topic)
			if err != nil {
				continue
			}
			rp = respPart(d.ID, f.Partition)
			byTP[tp] = rp
		}
		rp.Records = f.Batches
		rp.AcquiredRecords = acquiredRanges(f.Acquired)
	}
	return resp, nil
}
