package transport

import (
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId v0-v5 for idempotent producers (KIP-98), with the KIP-360
// epoch bump from v3. Every version is served: v1 only changes throttling
// semantics, v2 is flexible, v3 adds ProducerID/ProducerEpoch, v4 and v5
// only allow newer error codes (PRODUCER_FENCED, TRANSACTION_ABORTABLE)
// that a server without transactions never sends.
//
// A request with a transactional id goes to the transaction coordinator
// (txn.go): it bumps the id's epoch, fencing older instances, and aborts a
// transaction the previous instance left open. An empty transactional id
// is INVALID_REQUEST, as in Kafka.
func init() { register(kmsg.InitProducerID, 0, 5, initProducerID) }

func initProducerID(c *conn, req *request, body *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerEpoch = -1
	if tid := body.TransactionalID; tid != nil {
		if *tid == "" {
			resp.ErrorCode = errInvalidRequest
			return resp, nil
		}
		initTransactional(c, req, body, resp)
		return resp, nil
	}
	// Before v3 the two fields are not on the wire and keep their default,
	// -1.
	pid, epoch := body.ProducerID, body.ProducerEpoch
	switch {
	case pid == -1 && epoch == -1:
	case pid < 0 || epoch < 0:
		// Only one of the two given: Kafka's KafkaApis refuses it so.
		resp.ErrorCode = errInvalidRequest
		return resp, nil
	case c.s.b.ProducerIDIssued(pid) && epoch < math.MaxInt16-1:
		// KIP-360: the producer keeps its id under a new epoch; the
		// partitions then expect its sequences to restart at 0. (Kafka
		// hands a non-transactional producer a new id instead; both
		// reset its sequences, and keeping the id keeps DescribeProducers
		// readable.) An exhausted epoch, or an id never handed out, gets
		// a new id.
		resp.ProducerID, resp.ProducerEpoch = pid, epoch+1
		return resp, nil
	}
	id, err := c.s.b.AllocateProducerID(c.ctx)
	if err != nil {
		c.s.logger.Warn("cannot allocate a producer id", "err", err)
		resp.ErrorCode = errCoordinatorNotAvailable // retriable: the disk may recover
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
