package transport

import (
	"errors"
	"fmt"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/txn"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TxnOffsetCommit v0-v4: a transactional producer commits a consumer
// group's offsets inside its transaction (consume-transform-produce). The
// group coordinator writes them to the group's offsets partition as part
// of the transaction and keeps them pending - invisible to OffsetFetch,
// UNSTABLE_OFFSET_COMMIT to a fetch requiring stable offsets - until the
// transaction's marker reaches that partition.
//
//   - v2 adds the leader epoch (KIP-320).
//   - v3 is the first flexible version and adds the group's generation,
//     member id and instance id (KIP-447): a member of an old generation
//     is fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID).
//     Older versions (sarama, kafkajs) carry none and skip these checks.
//   - v4 only allows TRANSACTION_ABORTABLE.
//   - v5 (transaction version 2, KIP-890) adds the offsets partition to
//     the transaction implicitly; it is not served, and clients send
//     AddOffsetsToTxn first.
func init() { register(kmsg.TxnOffsetCommit, 0, 4, txnOffsetCommit) }

func txnOffsetCommit(c *conn, req *request, body *kmsg.TxnOffsetCommitRequest) (kmsg.Response, error) {
	b := c.s.b
	tr := group.TxnCommitRequest{
		CommitRequest: group.CommitRequest{
			Group:           body.Group,
			MemberID:        body.MemberID,
			GroupInstanceID: groupString(body.InstanceID),
			Generation:      body.Generation, // -1 before v3
			Offsets:         make(map[group.TopicPartition]group.OffsetAndMetadata),
		},
		ProducerID:    body.ProducerID,
		ProducerEpoch: body.ProducerEpoch,
	}
	type slot struct {
		t, p int
		tp   group.TopicPartition
	}
	var committed []slot
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	for ti, t := range body.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			if !c.can(acl.OpRead, acl.ResourceTopic, t.Topic) {
				rp.ErrorCode = errTopicAuthorizationFailed
			} else if err := b.CheckPartition(t.Topic, p.Partition); err != nil {
				rp.ErrorCode = errorCode(err)
			} else {
				tp := group.TopicPartition{Topic: t.Topic, Partition: p.Partition}
				tr.Offsets[tp] = group.OffsetAndMetadata{Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: groupString(p.Metadata)}
				committed = append(committed, slot{ti, len(rt.Partitions), tp})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(committed) == 0 {
		return resp, nil
	}
	var results map[group.TopicPartition]error
	code := errNone
	switch {
	case !c.can(acl.OpWrite, acl.ResourceTransactionalID, body.TransactionalID):
		code = errTransactionalIDAuthorizationFailed
	case !c.can(acl.OpRead, acl.ResourceGroup, body.Group):
		code = errGroupAuthorizationFailed
	case body.Group == "":
		code = errInvalidGroupID
	case body.TransactionalID == "":
		code = errInvalidRequest
	default:
		if err := c.checkTxnOffsets(body); err != nil {
			code = txnErrorCode(err, req.key, req.version)
			break
		}
		var err error
		results, err = b.Groups().TxnCommitOffsets(tr)
		code = errorCode(err)
		if errors.Is(err, group.ErrStaleMemberEpoch) {
			// A KIP-848 member's old epoch: what TxnOffsetCommit's
			// clients read as "no longer in this generation".
			code = errIllegalGeneration
		}
	}
	for _, s := range committed {
		pc := code
		if pc == errNone {
			pc = errorCode(results[s.tp])
		}
		resp.Topics[s.t].Partitions[s.p].ErrorCode = pc
	}
	return resp, nil
}

// checkTxnOffsets asks the transaction coordinator, where it is this
// broker, whether the producer added the group's offsets partition to its
// transaction (AddOffsetsToTxn) at this epoch: without it the offsets
// would never see a marker. A coordinator in another process is not asked.
func (c *conn) checkTxnOffsets(body *kmsg.TxnOffsetCommitRequest) error {
	b := c.s.b
	tps := []txn.TopicPartition{{Topic: spool.OffsetsTopic, Partition: b.GroupOffsetsPartition(body.Group)}}
	results, err := b.Transactions().VerifyPartitions(body.TransactionalID, body.ProducerID, body.ProducerEpoch, tps)
	if err == nil {
		err = results[tps[0]]
	}
	switch {
	case err == nil, errors.Is(err, txn.ErrNotCoordinator):
		return nil
	case errors.Is(err, txn.ErrTransactionAbortable):
		return fmt.Errorf("%w: the group's offsets partition is not in the transaction (AddOffsetsToTxn first)", txn.ErrInvalidTxnState)
	}
	return err
}
