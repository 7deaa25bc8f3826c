package transport

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A cluster node's controller listener serves two protocols on one port:
// Raft among the controllers (hashicorp/raft's, after a hello; the first
// byte is controller.RaftMagic) and Kafka requests to the controller -
// BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds
// and the administration other brokers forward (CreateTopics,
// DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs).
// Requests on it are never forwarded again: a node that is not the active
// controller answers NOT_CONTROLLER, and the sender finds the new one.

// controllerHandlers are the APIs served on the controller listener only.
var controllerHandlers = map[int16]handler{}

// registerController adds an API of the controller listener.
func registerController[Req kmsg.Request](key kmsg.Key, min, max int16, fn func(c *conn, req *request, body Req) (kmsg.Response, error)) {
	controllerHandlers[key.Int16()] = makeHandler(min, max, fn)
}

// handlerFor finds the handler of an API key on this connection's listener.
func (c *conn) handlerFor(key int16) (handler, bool) {
	if c.controller {
		if h, ok := controllerHandlers[key]; ok {
			return h, true
		}
	}
	h, ok := handlers[key]
	return h, ok
}

func init() {
	registerController(kmsg.BrokerRegistration, 0, registrationVersion, brokerRegistration)
	registerController(kmsg.BrokerHeartbeat, 0, heartbeatVersion, brokerHeartbeat)
	registerController(kmsg.AlterPartition, 2, alterPartitionVersion, alterPartition)
	registerController(kmsg.AllocateProducerIDs, 0, allocatePIDsVersion, allocateProducerIDs)
}

// ServeController accepts connections on a cluster node's controller
// listener until Shutdown. It returns ErrServerClosed then.
func (s *Server) ServeController(l net.Listener) error {
	// TLS as the server's; never SASL: the nodes authenticate with
	// their certificates (or are trusted) there.
	ln := s.defaultListener(l)
	ln.SASL, ln.Name = false, controllerListenerName
	return s.serve(l, true, ln)
}

// peekConn is a connection whose first bytes were read into r.
type peekConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// routeController hands a controller-listener connection to Raft, or
// returns it (with what was peeked) to be served as a Kafka connection.
func (s *Server) routeController(nc net.Conn) (net.Conn, bool) {
	br := bufio.NewReaderSize(nc, 64<<10)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	first, err := br.Peek(1)
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, false
	}
	pc := &peekConn{Conn: nc, r: br}
	if first[0] != controller.RaftMagic {
		return pc, true
	}
	br.Discard(1)
	q := s.b.Quorum()
	if q == nil {
		nc.Close()
		return nil, false
	}
	q.ServeConn(pc)
	return nil, false
}

// quorum is the node's controller quorum member, or an error for a node
// that is not a cluster node.
func (c *conn) quorum() (*controller.Quorum, int16) {
	q := c.s.b.Quorum()
	if q == nil {
		return nil, errNotController
	}
	return q, errNone
}

func brokerRegistration(c *conn, req *request, body *kmsg.BrokerRegistrationRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	resp.BrokerEpoch = -1
	q, code := c.quorum()
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	reg := controller.Registration{BrokerID: body.BrokerID, ClusterID: body.ClusterID, IncarnationID: incarnationString(body.IncarnationID)}
	if body.Rack != nil {
		reg.Rack = *body.Rack
	}
	// The first Kafka listener is the one the nodes use among themselves
	// (remote.RegisterBroker); a node with named listeners registers them
	// all, one with a single unnamed listener registers that alone.
	for _, l := range body.Listeners {
		switch l.Name {
		case controllerListenerName:
			reg.Controller = net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))
		default:
			if reg.Kafka.Host == "" {
				reg.Kafka = controller.Endpoint{Host: l.Host, Port: int32(l.Port)}
			}
			if l.Name != "" { // unnamed: the node's one listener, for every client
				reg.Listeners = append(reg.Listeners, controller.NamedEndpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port)})
			}
		}
	}
	epoch, err := q.RegisterBroker(c.ctx, reg)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		c.s.logger.Debug("broker registration refused", "broker", body.BrokerID, "err", err)
		return resp, nil
	}
	resp.BrokerEpoch = epoch
	return resp, nil
}

func brokerHeartbeat(c *conn, req *request, body *kmsg.BrokerHeartbeatRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	resp.IsFenced = true
	q, code := c.quorum()
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	idx := uint64(0)
	if body.CurrentMetadataOffset > 0 {
		idx = uint64(body.CurrentMetadataOffset)
	}
	res, err := q.BrokerHeartbeat(c.ctx, controller.Heartbeat{BrokerID: body.BrokerID, BrokerEpoch: body.BrokerEpoch,
		MetadataIndex: idx, WantFence: body.WantFence, WantShutdown: body.WantShutdown})
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	resp.IsCaughtUp, resp.IsFenced, resp.ShouldShutdown = res.IsCaughtUp, res.IsFenced, res.ShouldShutdown
	return resp, nil
}

// alterPartition serves AlterPartition v2+ (topics by id); v3 carries each
// ISR member's broker epoch (KIP-903), v2 none (checked as -1: only
// members already in the ISR pass).
func alterPartition(c *conn, req *request, body *kmsg.AlterPartitionRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AlterPartitionResponse)
	q, code := c.quorum()
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	im := q.Image()
	for _, rt := range body.Topics {
		t := kmsg.NewAlterPartitionResponseTopic()
		t.TopidID = rt.TopicID
		name := ""
		if ti, ok := im.TopicByID(spool.TopicID(rt.TopicID).String()); ok {
			name = ti.Name
		}
		for _, rp := range rt.Partitions {
			p := kmsg.NewAlterPartitionResponseTopicPartition()
			p.Partition = rp.Partition
			if name == "" {
				p.ErrorCode = errUnknownTopicID
				t.Partitions = append(t.Partitions, p)
				continue
			}
			ar := replica.AlterPartitionRequest{Topic: name, Partition: rp.Partition, Leader: body.BrokerID,
				LeaderEpoch: rp.LeaderEpoch, PartitionEpoch: rp.PartitionEpoch, BrokerEpochs: map[int32]int64{}}
			if req.version >= 3 {
				for _, m := range rp.NewEpochISR {
					ar.ISR = append(ar.ISR, m.BrokerID)
					ar.BrokerEpochs[m.BrokerID] = m.BrokerEpoch
				}
			} else {
				ar.ISR = rp.NewISR
			}
			st, err := q.AlterPartition(c.ctx, ar)
			var nc *controller.NotControllerError
			switch {
			case errors.As(err, &nc):
				resp.ErrorCode = errNotController
				return resp, nil
			case errors.Is(err, replica.ErrStaleState):
				p.ErrorCode = errInvalidUpdateVersion
				if st.LeaderEpoch > rp.LeaderEpoch || st.Leader != body.BrokerID {
					p.ErrorCode = errFencedLeaderEpoch
				}
			case err != nil:
				p.ErrorCode = errorCode(err)
			default:
				p.LeaderID, p.LeaderEpoch, p.ISR, p.PartitionEpoch = st.Leader, st.LeaderEpoch, st.ISR, st.PartitionEpoch
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}

func allocateProducerIDs(c *conn, req *request, body *kmsg.AllocateProducerIDsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
	q, code := c.quorum()
	if code != errNone {
		resp.ErrorCode = code
		return resp, nil
	}
	first, err := q.AllocateProducerIDs(c.ctx, body.BrokerID, body.BrokerEpoch)
	if err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	resp.ProducerIDStart, resp.ProducerIDLen = first, controller.ProducerIDBlock
	return resp, nil
}
