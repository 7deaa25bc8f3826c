package transport

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeCluster v0-2 (KIP-700): this node, the only broker and the
// controller. v1 adds the endpoint type: this is a broker endpoint, so a
// request for the controllers' (2) is MISMATCHED_ENDPOINT_TYPE, as Kafka
// answers; v2 adds fenced brokers, of which there are none.
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
	host, port := c.s.advertised()
	resp.ClusterID = c.s.ClusterID()
	resp.ControllerID = c.s.opts.NodeID
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{{NodeID: c.s.opts.NodeID, Host: host, Port: port}}
	return resp, nil
}
