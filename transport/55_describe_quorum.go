package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/spoolmq/spool/controller"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeQuorum v0-2 (KIP-595, KIP-836, KIP-853): the controller quorum
// as its leader sees it (controller.Quorum.Describe) - the leader, its
// Raft term as the leader epoch, the commit index as the metadata log's
// high watermark, and each voter's and observer's log end offset, last
// fetch and last caught-up times (v1+). v2 adds error messages, the
// voters' directory ids - zero, as Kafka reports for a static voter list
// (controller.quorum.voters) - and the voters' controller endpoints.
//
// As in KRaft, the controller listener answers it from the leader only:
// another voter answers NOT_LEADER_OR_FOLLOWER (naming the leader in the
// message). A broker's Kafka listener forwards it to the leader, as Kafka's
// brokers forward it to the active controller, so that admin clients
// (kadm, kafka-metadata-quorum --bootstrap-server) reach it through any
// broker; while no leader answers, the broker says NOT_CONTROLLER, on
// which clients look for the controller again and retry. The only
// partition is __cluster_metadata-0: a request for anything else is
// UNKNOWN_TOPIC_OR_PARTITION for each partition named, as Kafka answers,
// and so is every request to a standalone broker, which has no quorum.
func init() { register(kmsg.DescribeQuorum, 0, 2, describeQuorum) }

// quorumForwardWait bounds how long a broker looks for a quorum leader to
// forward DescribeQuorum to before it answers NOT_CONTROLLER.
const quorumForwardWait = 5 * time.Second

func describeQuorum(c *conn, req *request, body *kmsg.DescribeQuorumRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeQuorumResponse)
	if len(body.Topics) != 1 || body.Topics[0].Topic != controller.MetadataTopic ||
		len(body.Topics[0].Partitions) != 1 || body.Topics[0].Partitions[0].Partition != 0 {
		quorumPartitionErrors(resp, body, errUnknownTopicOrPartition, "the only quorum is "+controller.MetadataTopic+"-0's")
		return resp, nil
	}
	q := c.s.b.Quorum()
	if q == nil {
		quorumPartitionErrors(resp, body, errUnknownTopicOrPartition, "a standalone broker has no controller quorum")
		return resp, nil
	}
	if c.controller {
		d, err := q.Describe()
		if err != nil {
			quorumPartitionErrors(resp, body, quorumErrorCode(err), err.Error())
			return resp, nil
		}
		quorumResponse(resp, d, q.Voters())
		return resp, nil
	}
	return c.forwardDescribeQuorum(q, body), nil
}

// forwardDescribeQuorum answers a client's DescribeQuorum on a broker: here
// if this node leads the quorum, else from the leader's controller
// listener, trying again as leadership settles until quorumForwardWait.
func (c *conn) forwardDescribeQuorum(q *controller.Quorum, body *kmsg.DescribeQuorumRequest) kmsg.Response {
	ctx, cancel := context.WithTimeout(c.ctx, quorumForwardWait)
	defer cancel()
	backoff := 20 * time.Millisecond
	var last error
	for {
		d, err := q.Describe()
		if err == nil {
			resp := body.ResponseKind().(*kmsg.DescribeQuorumResponse)
			quorumResponse(resp, d, q.Voters())
			return resp
		}
		var nc *controller.NotControllerError
		switch {
		case !errors.As(err, &nc):
			resp := body.ResponseKind().(*kmsg.DescribeQuorumResponse)
			quorumPartitionErrors(resp, body, quorumErrorCode(err), err.Error())
			return resp
		case nc.Leader < 0:
			last = err
		case c.s.peers == nil:
			last = fmt.Errorf("%w; this broker cannot forward requests to it", err)
		default:
			fwd := *body
			r, ferr := c.s.peers.request(ctx, nc.Addr, &fwd)
			if ferr == nil {
				resp := r.(*kmsg.DescribeQuorumResponse)
				if !quorumNotLeader(resp) {
					return resp
				}
				ferr = fmt.Errorf("node %d at %s no longer leads the quorum", nc.Leader, nc.Addr)
			}
			last = ferr
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			resp := body.ResponseKind().(*kmsg.DescribeQuorumResponse)
			resp.ErrorCode = errNotController
			if last != nil {
				msg := "no leader of the controller quorum answered: " + last.Error()
				resp.ErrorMessage = &msg
			}
			return resp
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// quorumNotLeader reports a DescribeQuorum answer from a node that does
// not lead the quorum.
func quorumNotLeader(resp *kmsg.DescribeQuorumResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == errNotLeaderOrFollower {
				return true
			}
		}
	}
	return resp.ErrorCode == errNotController
}

func quorumErrorCode(err error) int16 {
	if errors.As(err, new(*controller.NotControllerError)) {
		return errNotLeaderOrFollower
	}
	return errorCode(err)
}

// quorumPartitionErrors answers every partition of the request with code
// (Kafka's DescribeQuorumRequest.getPartitionLevelErrorResponse), the
// message from v2 on.
func quorumPartitionErrors(resp *kmsg.DescribeQuorumResponse, body *kmsg.DescribeQuorumRequest, code int16, msg string) {
	for _, rt := range body.Topics {
		t := kmsg.NewDescribeQuorumResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewDescribeQuorumResponseTopicPartition()
			p.Partition, p.ErrorCode = rp.Partition, code
			m := msg
			p.ErrorMessage = &m
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
}

// quorumResponse fills in the leader's description of the quorum.
func quorumResponse(resp *kmsg.DescribeQuorumResponse, d controller.QuorumDescription, voters []controller.Voter) {
	p := kmsg.NewDescribeQuorumResponseTopicPartition()
	p.Partition, p.LeaderID, p.LeaderEpoch, p.HighWatermark = 0, d.LeaderID, d.LeaderEpoch, d.HighWatermark
	state := func(rp controller.ReplicaProgress) kmsg.DescribeQuorumResponseTopicPartitionReplicaState {
		s := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		s.ReplicaID, s.LogEndOffset = rp.ID, rp.LogEndOffset
		s.LastFetchTimestamp, s.LastCaughtUpTimestamp = unixMillis(rp.LastFetch), unixMillis(rp.LastCaughtUp)
		return s
	}
	for _, v := range d.Voters {
		p.CurrentVoters = append(p.CurrentVoters, state(v))
	}
	for _, o := range d.Observers {
		p.Observers = append(p.Observers, state(o))
	}
	t := kmsg.NewDescribeQuorumResponseTopic()
	t.Topic = controller.MetadataTopic
	t.Partitions = append(t.Partitions, p)
	resp.Topics = append(resp.Topics, t)
	for _, v := range voters {
		host, port, err := net.SplitHostPort(v.Addr)
		n, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil {
			continue // ParseVoters admits none such
		}
		node := kmsg.NewDescribeQuorumResponseNode()
		node.NodeID = v.ID
		node.Listeners = []kmsg.DescribeQuorumResponseNodeListener{{Name: controllerListenerName, Host: host, Port: uint16(n)}}
		resp.Nodes = append(resp.Nodes, node)
	}
}

// unixMillis is t in Unix milliseconds, -1 for the zero time (unknown).
func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}
