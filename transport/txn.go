package transport

import (
	"context"
	"errors"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/txn"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Transactions (KIP-98) over the Kafka protocol, served by the broker's
// transaction coordinator (package txn, spool.Broker.Transactions):
//
//   - InitProducerId with a transactional id (22_init_producer_id.go);
//   - AddPartitionsToTxn v0-v3: the client's requests. v4+ (batched, for
//     brokers verifying a produce, KIP-890) is not served: a leader asks
//     its own coordinator, see verifyTxnBatch;
//   - AddOffsetsToTxn v0-v3, EndTxn v0-v3 (v4 and v5 belong to KIP-890's
//     transaction version 2, which spool does not advertise: clients then
//     use the classic protocol, "TV1");
//   - WriteTxnMarkers v0-v1: coordinator to partition leader;
//   - TxnOffsetCommit v0-v3 (28_txn_offset_commit.go);
//   - DescribeTransactions v0, ListTransactions v0-v1.
//
// Errors follow Kafka's per-version rewrites (txnErrorCode): clients older
// than KIP-588 learn of a fenced producer as INVALID_PRODUCER_EPOCH.
func init() {
	register(kmsg.AddPartitionsToTxn, 0, 3, addPartitionsToTxn)
	register(kmsg.AddOffsetsToTxn, 0, 3, addOffsetsToTxn)
	register(kmsg.EndTxn, 0, 3, endTxn)
	register(kmsg.WriteTxnMarkers, 0, 1, writeTxnMarkers)
	register(kmsg.DescribeTransactions, 0, 0, describeTransactions)
	register(kmsg.ListTransactions, 0, 1, listTransactions)
}

// txnErrorCode maps a transaction coordinator's error to the code a client
// of that request version knows.
func txnErrorCode(err error, key int16, version int16) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, txn.ErrProducerFenced):
		// KIP-588 added PRODUCER_FENCED; older versions hear
		// INVALID_PRODUCER_EPOCH.
		old := map[int16]int16{kmsg.InitProducerID.Int16(): 4, kmsg.AddPartitionsToTxn.Int16(): 2,
			kmsg.AddOffsetsToTxn.Int16(): 2, kmsg.EndTxn.Int16(): 2}
		if v, ok := old[key]; ok && version < v {
			return errInvalidProducerEpoch
		}
		return errProducerFenced
	case errors.Is(err, txn.ErrTransactionAbortable):
		return errInvalidTxnState // TRANSACTION_ABORTABLE needs KIP-890's versions, not served
	case errors.Is(err, txn.ErrConcurrentTransactions):
		return errConcurrentTransactions
	case errors.Is(err, txn.ErrInvalidProducerEpoch):
		return errInvalidProducerEpoch
	case errors.Is(err, txn.ErrInvalidTxnState):
		return errInvalidTxnState
	case errors.Is(err, txn.ErrInvalidProducerIDMapping):
		return errInvalidProducerIDMapping
	case errors.Is(err, txn.ErrInvalidTransactionTimeout):
		return errInvalidTransactionTimeout
	case errors.Is(err, txn.ErrNotCoordinator):
		return errNotCoordinator
	case errors.Is(err, txn.ErrCoordinatorLoadInProgress):
		return errCoordinatorLoadInProgress
	case errors.Is(err, txn.ErrCoordinatorNotAvailable):
		return errCoordinatorNotAvailable
	case errors.Is(err, txn.ErrTransactionalIDNotFound):
		return errTransactionalIDNotFound
	case errors.Is(err, txn.ErrOperationNotAttempted):
		return errOperationNotAttempted
	case errors.Is(err, txn.ErrUnknownTopicOrPartition):
		return errUnknownTopicOrPartition
	case errors.Is(err, txn.ErrCoordinatorFenced):
		return errTransactionCoordinatorFenced
	case errors.Is(err, txn.ErrInvalidRequest):
		return errInvalidRequest
	case errors.Is(err, txn.ErrInvalidRegularExpression):
		return errInvalidRegularExpression
	}
	if code := errorCode(err); code != errUnknownServerError {
		return code
	}
	// The coordinator's store failed (a full disk, a lost leadership in
	// the middle): retriable for the client.
	return errCoordinatorNotAvailable
}

// initTransactional is InitProducerId with a transactional id.
func initTransactional(c *conn, req *request, body *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) {
	timeout := time.Duration(body.TransactionTimeoutMillis) * time.Millisecond
	if body.TransactionTimeoutMillis <= 0 {
		resp.ErrorCode = errInvalidTransactionTimeout
		return
	}
	pid, epoch, err := c.s.b.Transactions().InitProducerID(c.ctx, *body.TransactionalID, timeout, body.ProducerID, body.ProducerEpoch)
	if err != nil {
		resp.ErrorCode = txnErrorCode(err, req.key, req.version)
		return
	}
	resp.ProducerID, resp.ProducerEpoch = pid, epoch
}

func addPartitionsToTxn(c *conn, req *request, body *kmsg.AddPartitionsToTxnRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var tps []txn.TopicPartition
	denied := map[string]bool{} // topics the principal may not WRITE
	for _, t := range body.Topics {
		if !c.can(acl.OpWrite, acl.ResourceTopic, t.Topic) {
			denied[t.Topic] = true
		}
		for _, p := range t.Partitions {
			tps = append(tps, txn.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	// Authorization first: the transactional id, then every topic; a
	// denial adds nothing.
	var results map[txn.TopicPartition]error
	var err error
	authCode := errNone
	switch {
	case !c.can(acl.OpWrite, acl.ResourceTransactionalID, body.TransactionalID):
		authCode = errTransactionalIDAuthorizationFailed
	case len(denied) > 0:
		authCode = errOperationNotAttempted
	default:
		results, err = c.s.b.Transactions().AddPartitions(c.ctx, body.TransactionalID, body.ProducerID, body.ProducerEpoch, tps)
	}
	for _, t := range body.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition = p
			perr := err
			if perr == nil {
				perr = results[txn.TopicPartition{Topic: t.Topic, Partition: p}]
			}
			rp.ErrorCode = txnErrorCode(perr, req.key, req.version)
			switch {
			case authCode == errOperationNotAttempted && denied[t.Topic]:
				rp.ErrorCode = errTopicAuthorizationFailed
			case authCode != errNone:
				rp.ErrorCode = authCode
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func addOffsetsToTxn(c *conn, req *request, body *kmsg.AddOffsetsToTxnRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if body.Group == "" {
		resp.ErrorCode = errInvalidGroupID
		return resp, nil
	}
	err := c.s.b.Transactions().AddOffsets(c.ctx, body.TransactionalID, body.ProducerID, body.ProducerEpoch, body.Group)
	resp.ErrorCode = txnErrorCode(err, req.key, req.version)
	return resp, nil
}

func endTxn(c *conn, req *request, body *kmsg.EndTxnRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.EndTxnResponse)
	err := c.s.b.Transactions().EndTxn(c.ctx, body.TransactionalID, body.ProducerID, body.ProducerEpoch, body.Commit)
	resp.ErrorCode = txnErrorCode(err, req.key, req.version)
	return resp, nil
}

// writeTxnMarkers is a transaction coordinator's request to this broker,
// the leader of the partitions named: a marker in each, committed before
// the answer. It is never forwarded: a broker that no longer leads a
// partition answers NOT_LEADER_OR_FOLLOWER and the coordinator looks again.
func writeTxnMarkers(c *conn, req *request, body *kmsg.WriteTxnMarkersRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	ctx, cancel := context.WithTimeout(spool.ControllerOnly(c.ctx), 30*time.Second)
	defer cancel()
	for _, m := range body.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		marker := spool.TxnMarker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Committed, CoordinatorEpoch: m.CoordinatorEpoch}
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = p
				err := c.s.b.WriteTxnMarker(ctx, t.Topic, p, marker)
				rp.ErrorCode = produceErrorCode(err)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp, nil
}

func describeTransactions(c *conn, req *request, body *kmsg.DescribeTransactionsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, d := range c.s.b.Transactions().Describe(body.TransactionalIDs) {
		rd := kmsg.NewDescribeTransactionsResponseTransactionState()
		rd.TransactionalID = d.TransactionalID
		rd.StartTimestamp = -1
		if !c.can(acl.OpDescribe, acl.ResourceTransactionalID, d.TransactionalID) {
			rd.ErrorCode = errTransactionalIDAuthorizationFailed
			resp.TransactionStates = append(resp.TransactionStates, rd)
			continue
		}
		if d.Err != nil {
			rd.ErrorCode = txnErrorCode(d.Err, req.key, req.version)
			resp.TransactionStates = append(resp.TransactionStates, rd)
			continue
		}
		rd.State = d.State.String()
		rd.TimeoutMillis = int32(d.Timeout / time.Millisecond)
		if !d.Start.IsZero() {
			rd.StartTimestamp = d.Start.UnixMilli()
		}
		rd.ProducerID, rd.ProducerEpoch = d.ProducerID, d.ProducerEpoch
		for _, tp := range d.Partitions {
			if !c.can(acl.OpDescribe, acl.ResourceTopic, tp.Topic) {
				continue // Kafka leaves out topics the caller may not describe
			}
			if n := len(rd.Topics); n == 0 || rd.Topics[n-1].Topic != tp.Topic {
				rt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				rt.Topic = tp.Topic
				rd.Topics = append(rd.Topics, rt)
			}
			rt := &rd.Topics[len(rd.Topics)-1]
			rt.Partitions = append(rt.Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, rd)
	}
	return resp, nil
}

func listTransactions(c *conn, req *request, body *kmsg.ListTransactionsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.ListTransactionsResponse)
	f := txn.ListFilter{States: body.StateFilters, ProducerIDs: body.ProducerIDFilters}
	if req.version >= 1 && body.DurationFilterMillis > 0 {
		f.MinDuration = time.Duration(body.DurationFilterMillis) * time.Millisecond
	}
	list, unknown, err := c.s.b.Transactions().List(f)
	if err != nil {
		resp.ErrorCode = txnErrorCode(err, req.key, req.version)
		return resp, nil
	}
	resp.UnknownStateFilters = unknown
	for _, l := range list {
		if !c.can(acl.OpDescribe, acl.ResourceTransactionalID, l.TransactionalID) {
			continue // listed only to those who may describe it
		}
		rs := kmsg.NewListTransactionsResponseTransactionState()
		rs.TransactionalID, rs.ProducerID, rs.TransactionState = l.TransactionalID, l.ProducerID, l.State.String()
		resp.TransactionStates = append(resp.TransactionStates, rs)
	}
	return resp, nil
}

// verifyTxnBatch is the leader's check of a transactional batch (KIP-890
// part 1): the producer must have added the partition to its open
// transaction at its coordinator. Where this broker is the coordinator of
// the transactional id it asks it; a coordinator in another process is not
// asked (AddPartitionsToTxn v4 between brokers is not implemented) and the
// batch is taken.
func (c *conn) verifyTxnBatch(req *request, topic string, partition int32, pid int64, epoch int16) (int16, string) {
	body := req.body.(*kmsg.ProduceRequest)
	if body.TransactionID == nil || *body.TransactionID == "" {
		return errTransactionalIDAuthorizationFailed, "a transactional batch without a transactional id"
	}
	tp := txn.TopicPartition{Topic: topic, Partition: partition}
	results, err := c.s.b.Transactions().VerifyPartitions(*body.TransactionID, pid, epoch, []txn.TopicPartition{tp})
	if err == nil {
		err = results[tp]
	}
	switch {
	case err == nil, errors.Is(err, txn.ErrNotCoordinator):
		return errNone, ""
	case errors.Is(err, txn.ErrProducerFenced), errors.Is(err, txn.ErrInvalidProducerEpoch):
		return errInvalidProducerEpoch, err.Error()
	case errors.Is(err, txn.ErrTransactionAbortable):
		if req.version >= 11 {
			return errTransactionAbortable, "the partition is not in the producer's transaction"
		}
		return errInvalidTxnState, "the partition is not in the producer's transaction"
	case errors.Is(err, txn.ErrCoordinatorLoadInProgress), errors.Is(err, txn.ErrConcurrentTransactions):
		return errNotEnoughReplicas, err.Error() // retriable: the producer sends it again
	}
	return errInvalidTxnState, err.Error()
}
