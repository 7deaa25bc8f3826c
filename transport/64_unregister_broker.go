package transport

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// UnregisterBroker v0 (KIP-631): removes a broker's registration, the
// last step of its decommission. BROKER_ID_NOT_REGISTERED for a broker
// that is not registered. Kafka unregisters any registered broker; spool
// refuses, with INVALID_REQUEST and a message saying what to do first, a
// broker that still holds replicas (reassign them) or that runs (stop
// it): the first would leave partitions with a replica no one serves, the
// second registers again at its next heartbeat. Any broker takes it: a
// node that is not the active controller sends it there.
func init() { register(kmsg.UnregisterBroker, 0, 0, unregisterBroker) }

// unregisterTimeout bounds an UnregisterBroker at this node.
const unregisterTimeout = 25 * time.Second

func unregisterBroker(c *conn, req *request, body *kmsg.UnregisterBrokerRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.UnregisterBrokerResponse)
	// The request has no timeout of its own: give up before clients do
	// (the Java client's request.timeout.ms is 30 s), so that one retrying
	// elsewhere does not race a forward still under way here.
	ctx, cancel := opContext(c, int32(unregisterTimeout/time.Millisecond))
	defer cancel()
	resp.ErrorCode, resp.ErrorMessage = errorAndMessage(c.s.b.UnregisterBroker(ctx, body.BrokerID))
	return resp, nil
}
