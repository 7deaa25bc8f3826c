package transport

import (
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster v0-2 (KIP-700): the live brokers and the controller (on
// a standalone broker, this node is both). v1 adds the endpoint type: this
// is a broker endpoint, so a request for the controllers' (2) is
// MISMATCHED_ENDPOINT_TYPE, as Kafka answers. v2 (KIP-1073) lists fenced
// brokers too when asked (IncludeFencedBrokers), marked IsFenced: those a
// cluster node's metadata has registered and fenced (their session
// expired, or their controlled shutdown finished). A standalone broker has
// none.
func init() { register(kmsg.DescribeCluster, 0, 2, describeCluster) }

const (
	endpointBrokers     int8 = 1
	endpointControllers int8 = 2
)

func describeCluster(c *conn, req *request, body *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.EndpointType = endpointBrokers
	if req.version >= 1 && body.EndpointType != endpointBrokers {
		msg := "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
		resp.ErrorCode = errMismatchedEndpointType
		if body.EndpointType != endpointControllers {
			resp.ErrorCode, msg = errUnsupportedEndpointType, "Unsupported endpoint type"
		}
		resp.ErrorMessage = &msg
		return resp, nil
	}
	resp.ClusterID = c.s.ClusterID()
	if body.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = c.authorizedOps(acl.ResourceCluster, acl.ClusterName, clusterOps)
	}
	brokers, ctrl := c.s.brokers(c.ln)
	resp.ControllerID = ctrl
	if q := c.s.b.Quorum(); q != nil && req.version >= 2 && body.IncludeFencedBrokers {
		for _, b := range q.Image().Brokers() { // by id
			var rack *string
			if b.Rack != "" {
				rack = &b.Rack
			}
			ep, ok := b.Endpoint(c.ln.Name)
			if c.ln.Name == controllerListenerName {
				ep, ok = b.Kafka, true
			}
			if !ok {
				continue
			}
			resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: b.ID, Host: ep.Host, Port: ep.Port, Rack: rack, IsFenced: b.Fenced})
		}
		return resp, nil
	}
	for _, b := range brokers {
		resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
	}
	return resp, nil
}
