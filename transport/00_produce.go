package transport

import (
	"errors"
	"sync"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce v0-v13.
//
//	v0   message format v0/v1 (MessageSets): converted to one RecordBatch v2
//	     in the producer's codec before anything else (upConvert), as
//	     Kafka's broker did; keys, values and v1 CreateTimes kept, v0
//	     records get no timestamp (-1)
//	v1   throttle time in the response
//	v2   LogAppendTime in the response
//	v3   RecordBatch (magic 2) only, exactly one batch per partition; transactional id
//	v4   may answer KAFKA_STORAGE_ERROR
//	v5   LogStartOffset in the response
//	v6   throttling after the response (spool does not throttle)
//	v7   zstd allowed (UNSUPPORTED_COMPRESSION_TYPE below)
//	v8   ErrorRecords and ErrorMessage in the response (KIP-467)
//	v9   flexible
//	v10  CurrentLeader and NodeEndpoints with NOT_LEADER_OR_FOLLOWER (KIP-951; on one
//	     broker that error comes only while it closes, with the leader unknown: -1)
//	v11  may answer TRANSACTION_ABORTABLE (KIP-890; spool has no transactions)
//	v12  transactions add partitions implicitly (KIP-890; no transactions here)
//	v13  topics named by topic id (KIP-516); UNKNOWN_TOPIC_ID for an unknown one
//
// Each partition's records must be exactly one magic-2 batch; it is checked
// (framing, CRC-32C, header fields, every record) and appended with the
// idempotent-producer checks of partition.AppendProduced, and gets its own
// error code. acks 1 and -1 (all) are the same on one broker: the append
// returns once the batch is in the log - on stable storage under the Sync
// flush policy. acks=0 gets no response at all; if any partition failed,
// the connection is closed instead, as Kafka does, so that the client
// notices and refreshes its metadata. The timeout is not used: nothing
// waits for replicas.
//
// Producing to an unknown topic creates it when the broker auto-creates
// topics (Kafka creates topics only from Metadata requests; producing to a
// topic the producer just looked up is the same either way).
// __consumer_offsets is refused (INVALID_TOPIC_EXCEPTION): its records are
// the group coordinator's.
func init() { register(kmsg.Produce, 0, 13, produce) }

// produceParallel bounds the partitions of one request appended at once
// where an append may wait after its write (Server.appendsWait): for its
// own log's fsync, for its replicas.
const produceParallel = 16

// producePart is one partition of a produce request and its answer.
type producePart struct {
	topic string
	in    *kmsg.ProduceRequestTopicPartition
	out   *kmsg.ProduceResponseTopicPartition
}

func produce(c *conn, req *request, body *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.ProduceResponse)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(body.Topics))
	var parts []producePart
	for i := range body.Topics {
		t := &body.Topics[i]
		rt := &resp.Topics[i]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		name, code := t.Topic, errNone
		if req.version >= 13 {
			if d, ok := c.s.topicByID(t.TopicID); ok {
				name = d.Name
			} else {
				code = errUnknownTopicID
			}
		}
		if body.Acks != 0 && body.Acks != 1 && body.Acks != -1 {
			code = errInvalidRequiredAcks
		}
		switch {
		case code != errNone:
		case body.TransactionID != nil && *body.TransactionID != "" && !c.can(acl.OpWrite, acl.ResourceTransactionalID, *body.TransactionID):
			code = errTransactionalIDAuthorizationFailed
		case !c.can(acl.OpWrite, acl.ResourceTopic, name):
			code = errTopicAuthorizationFailed // decided before whether the topic exists
		}
		for j := range t.Partitions {
			out := &rt.Partitions[j]
			*out = kmsg.NewProduceResponseTopicPartition()
			out.Partition = t.Partitions[j].Partition
			if code != errNone {
				setProduceError(req.version, out, code, "")
				continue
			}
			parts = append(parts, producePart{topic: name, in: &t.Partitions[j], out: out})
		}
	}

	if len(parts) < 2 || !c.s.appendsWait || namedTwice(parts) {
		// In request order: a partition named twice gets its batches
		// appended in the order they came. Appends that return once
		// written gain nothing from goroutines of their own.
		for _, p := range parts {
			c.producePartition(req, p)
		}
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, produceParallel)
		for _, p := range parts {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c.producePartition(req, p)
			})
		}
		wg.Wait()
	}

	if c.s.b.Quorum() != nil && req.version >= 10 {
		resp.Brokers = c.leaderEndpoints(resp)
	}
	if body.Acks == 0 {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != errNone {
					return nil, errors.New("transport: acks=0 produce failed; closing the connection to tell the client")
				}
			}
		}
		return nil, nil
	}
	return resp, nil
}

// namedTwice reports whether a partition appears twice in a request.
func namedTwice(parts []producePart) bool {
	type tp struct {
		topic string
		p     int32
	}
	seen := make(map[tp]bool, len(parts))
	for _, p := range parts {
		k := tp{p.topic, p.out.Partition}
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// producePartition checks and appends one partition's batch and fills in
// its answer.
func (c *conn) producePartition(req *request, pp producePart) {
	out := pp.out
	if pp.topic == spool.OffsetsTopic || pp.topic == spool.TransactionStateTopic {
		setProduceError(req.version, out, errInvalidTopicException, "cannot produce to an internal topic")
		return
	}
	if c.s.b.Quorum() != nil {
		c.produceClustered(req, pp)
		return
	}
	reached := false // the batch reached ProduceBatch, which counts it
	defer func() {
		if !reached && out.ErrorCode != errNone {
			c.s.b.RecordProduce(pp.topic, 0, 0, kerr.ErrorForCode(out.ErrorCode)) // refused before the broker
		}
	}()
	// An unknown topic is answered before the records are looked at, as
	// Kafka does; one to be created is created only for a valid batch.
	p, err := c.s.b.Partition(pp.topic, out.Partition)
	create := errors.Is(err, spool.ErrUnknownTopic) && c.s.b.AutoCreateTopics() && c.canCreateTopic(pp.topic)
	if err != nil && !create {
		setProduceError(req.version, out, produceErrorCode(err), err.Error())
		return
	}
	b, ok := c.produceRecords(req, pp)
	if !ok {
		return
	}
	if create {
		if err = c.s.b.CreateTopic(c.ctx, pp.topic, spool.TopicConfig{}); err == nil || errors.Is(err, spool.ErrTopicExists) {
			p, err = c.s.b.Partition(pp.topic, out.Partition)
		}
		if err != nil {
			setProduceError(req.version, out, produceErrorCode(err), err.Error())
			return
		}
	}
	reached = true
	base, err := c.s.b.ProduceBatch(c.ctx, pp.topic, out.Partition, b, spool.ProduceOptions{})
	if err != nil {
		setProduceError(req.version, out, produceErrorCode(err), err.Error())
		return
	}
	out.BaseOffset = base
	out.LogAppendTime = -1 // CreateTime: the producer's timestamps are kept
	out.LogStartOffset = p.StartOffset()
}

func setProduceError(version int16, out *kmsg.ProduceResponseTopicPartition, code int16, msg string) {
	out.ErrorCode = code
	out.BaseOffset = -1
	if version >= 8 && msg != "" {
		out.ErrorMessage = &msg
	}
}

// upConvert turns an old producer's message set (Produce v0-v2, message
// format v0 or v1, compressed wrappers included) into one RecordBatch v2
// without a producer id, compressed with the producer's codec: what Kafka's
// LogValidator did when its log held v2 (compression.type=producer), so
// that max.message.bytes applies to about the size the producer sent. The
// log then checks it as it checks any batch.
func upConvert(set []byte) (record.Batch, int16, string) {
	recs, codec, err := record.ParseMessageSet(set, record.DefaultMaxUncompressedBytes)
	switch {
	case errors.Is(err, record.ErrUnsupportedCodec):
		return record.Batch{}, errUnsupportedCompressionType, err.Error()
	case errors.Is(err, record.ErrDecompressedTooLarge):
		return record.Batch{}, errMessageTooLarge, err.Error()
	case err != nil:
		return record.Batch{}, errCorruptMessage, err.Error()
	}
	b, err := record.NewBatch(recs, record.BatchOptions{Compression: codec})
	if err != nil {
		return record.Batch{}, errInvalidRecord, err.Error()
	}
	return b, errNone, ""
}

// parseProduceBatch checks a partition's records as Kafka's
// ProduceRequest.validateRecords and LogValidator do before anything is
// appended: exactly one whole magic-2 batch (bytes after it that do not
// make a whole batch are ignored, as Kafka trims them), a valid CRC, record
// count and offset deltas that agree, no control batch, a base sequence for
// a batch with a producer id, zstd only from v7. The log checks the records
// themselves.
func parseProduceBatch(version int16, recs []byte) (record.Batch, int16, string) {
	const upToMagic = 17 // the bytes Kafka needs to see a batch's size and magic
	frame := func(buf []byte) (size int, code int16, msg string) {
		if len(buf) < upToMagic {
			return 0, errNone, ""
		}
		_, size, err := record.PeekHeader(buf)
		if err != nil {
			return 0, errCorruptMessage, err.Error()
		}
		switch m := int8(buf[16]); {
		case m < 0 || m > record.Magic:
			return 0, errCorruptMessage, "invalid magic byte"
		case m != record.Magic:
			return 0, errInvalidRecord, "produce requests from v3 carry record batches of magic 2 only"
		}
		if size > len(buf) {
			return 0, errNone, ""
		}
		return size, errNone, ""
	}
	size, code, msg := frame(recs)
	if code != errNone {
		return record.Batch{}, code, msg
	}
	if size == 0 {
		return record.Batch{}, errInvalidRecord, "no whole record batch"
	}
	b, n, err := record.ParseBatch(recs)
	if err != nil {
		return record.Batch{}, errCorruptMessage, err.Error()
	}
	if size, code, _ := frame(recs[n:]); code != errNone {
		return record.Batch{}, code, "bad bytes after the record batch"
	} else if size > 0 {
		return record.Batch{}, errInvalidRecord, "more than one record batch in a partition"
	}
	// Checked once, here: the batch carries the check to the log, whose
	// validation then skips the CRC (record.Batch.CheckCRC).
	b, err = b.CheckCRC()
	if err != nil {
		return record.Batch{}, errCorruptMessage, "record batch CRC mismatch"
	}
	switch {
	case b.NumRecords() <= 0:
		return record.Batch{}, errInvalidRecord, "record batch with no records"
	case b.LastOffsetDelta() < 0 || int64(b.LastOffsetDelta())+1 != int64(b.NumRecords()):
		return record.Batch{}, errInvalidRecord, "record count and last offset delta disagree"
	case b.IsControl():
		return record.Batch{}, errInvalidRecord, "clients may not write control batches"
	case b.ProducerID() >= 0 && b.BaseSequence() < 0:
		return record.Batch{}, errInvalidRecord, "record batch with a producer id but no sequence"
	case b.Compression() == record.ZSTD && version < 7:
		return record.Batch{}, errUnsupportedCompressionType, "zstd needs produce v7 or later"
	}
	return b, errNone, ""
}

// produceErrorCode maps an append's error to the code a producer acts on.
func produceErrorCode(err error) int16 {
	switch {
	case errors.Is(err, partition.ErrOutOfOrderSequence):
		return errOutOfOrderSequenceNumber
	case errors.Is(err, partition.ErrUnknownProducerID):
		return errUnknownProducerID
	case errors.Is(err, partition.ErrInvalidProducerEpoch):
		return errInvalidProducerEpoch
	case errors.Is(err, partition.ErrProducerState):
		return errKafkaStorageError
	case errors.Is(err, partition.ErrInvalidTxnState):
		return errInvalidTxnState
	case errors.Is(err, partition.ErrTransactionCoordinatorFenced):
		return errTransactionCoordinatorFenced
	case errors.Is(err, spool.ErrClosed), errors.Is(err, log.ErrClosed):
		// The partition is going away with its broker: retriable, and
		// the client looks for the leader again.
		return errNotLeaderOrFollower
	}
	return errorCode(err)
}

// produceRecords reads a partition's records as one RecordBatch v2 -
// converting an old producer's message set (v0-v2), checking a batch
// (v3+) - or answers the partition with the error and reports false.
func (c *conn) produceRecords(req *request, pp producePart) (record.Batch, bool) {
	var b record.Batch
	var code int16
	var msg string
	if req.version < 3 {
		b, code, msg = upConvert(pp.in.Records)
	} else {
		b, code, msg = parseProduceBatch(req.version, pp.in.Records)
	}
	if code == errNone && b.IsTransactional() {
		// KIP-890 part 1: the partition must be in the producer's
		// transaction (txn.go).
		code, msg = c.verifyTxnBatch(req, pp.topic, pp.out.Partition, b.ProducerID(), b.ProducerEpoch())
	}
	if code != errNone {
		setProduceError(req.version, pp.out, code, msg)
		return b, false
	}
	return b, true
}

// produceClustered is producePartition on a cluster node: the batch goes to
// the partition's leader replica, which must be this node, and waits as
// the request's acks say (acks=all: for the in-sync replicas, up to the
// request's timeout). A node that does not lead the partition answers
// NOT_LEADER_OR_FOLLOWER with the leader it knows (KIP-951, v10+).
func (c *conn) produceClustered(req *request, pp producePart) {
	out := pp.out
	body := req.body.(*kmsg.ProduceRequest)
	b, ok := c.produceRecords(req, pp)
	if !ok {
		c.s.b.RecordProduce(pp.topic, 0, 0, kerr.ErrorForCode(out.ErrorCode)) // refused before it reached the broker
		return
	}
	opts := spool.ProduceOptions{Acks: spool.AcksAll, Timeout: time.Duration(body.TimeoutMillis) * time.Millisecond}
	switch body.Acks {
	case 0:
		opts.Acks = spool.AcksNone
	case 1:
		opts.Acks = spool.AcksLeader
	}
	var waited time.Duration
	opts.Waited = &waited
	defer func() { req.waited(waited) }()
	base, err := c.s.b.ProduceBatch(c.ctx, pp.topic, out.Partition, b, opts)
	if errors.Is(err, spool.ErrUnknownTopic) && c.s.b.AutoCreateTopics() && c.canCreateTopic(pp.topic) {
		if cerr := c.s.b.CreateTopic(c.ctx, pp.topic, spool.TopicConfig{}); cerr == nil || errors.Is(cerr, spool.ErrTopicExists) {
			base, err = c.s.b.ProduceBatch(c.ctx, pp.topic, out.Partition, b, opts)
		} else {
			err = cerr
		}
	}
	if err != nil {
		setProduceError(req.version, out, produceErrorCode(err), err.Error())
		var nl *replica.NotLeaderError
		if errors.As(err, &nl) && req.version >= 10 {
			out.CurrentLeader.LeaderID, out.CurrentLeader.LeaderEpoch = nl.Leader, nl.LeaderEpoch
		}
		return
	}
	out.BaseOffset = base
	out.LogAppendTime = -1
	if d, err := c.s.b.LeaderPartition(pp.topic, out.Partition, -1); err == nil {
		out.LogStartOffset = d.StartOffset()
	}
}

// leaderEndpoints are the addresses of the leaders named in a produce
// response's NOT_LEADER_OR_FOLLOWER answers (KIP-951's NodeEndpoints).
func (c *conn) leaderEndpoints(resp *kmsg.ProduceResponse) []kmsg.ProduceResponseBroker {
	want := map[int32]bool{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == errNotLeaderOrFollower && p.CurrentLeader.LeaderID >= 0 {
				want[p.CurrentLeader.LeaderID] = true
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	info, _ := c.s.b.Cluster()
	var out []kmsg.ProduceResponseBroker
	for _, br := range info.Brokers {
		if want[br.ID] {
			e := kmsg.NewProduceResponseBroker()
			e.NodeID, e.Host, e.Port = br.ID, br.Host, br.Port
			if br.Rack != "" {
				rack := br.Rack
				e.Rack = &rack
			}
			out = append(out, e)
		}
	}
	return out
}
