package clustertest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The operator's operations, sent over the Kafka protocol to one running
// node - any node takes them and forwards them to the active controller -
// as kafka-reassign-partitions, kafka-leader-election and kafka-cluster do.

// Reassignment is a partition's reassignment under way: its replicas (the
// target's, then those being removed) and those being added and removed.
type Reassignment struct {
	Replicas, Adding, Removing []int32
}

// opTimeout bounds an operation at the node asked: it is the request's
// TimeoutMillis, within which the node forwards it to the active
// controller and answers (REQUEST_TIMED_OUT or NOT_CONTROLLER past it).
// ask waits a little longer for the answer before it asks another node, so
// that a request is not still on its way at one node when the next goes to
// another: a reassignment cancelled meanwhile would be started again by
// the first.
const opTimeout = 10 * time.Second

// ask sends req to the first answering node that answers at all, waiting
// up to bound and a little more for each.
func (c *Cluster) ask(ctx context.Context, req kmsg.Request, bound time.Duration) (kmsg.Response, error) {
	if tr, ok := req.(kmsg.SetTimeoutRequest); ok {
		tr.SetTimeout(int32(bound / time.Millisecond))
	}
	err := ErrNotRunning
	for _, n := range c.answering() {
		rctx, cancel := context.WithTimeout(ctx, bound+5*time.Second)
		resp, rerr := n.Request(rctx, req)
		cancel()
		if rerr == nil {
			return resp, nil
		}
		err = rerr
	}
	return nil, err
}

// Reassign asks for a partition to move to replicas, in that order (the
// first is the preferred leader), or with nil replicas for its
// reassignment to be cancelled. It returns once the controller has
// committed the change: the reassignment is under way (or done, if it
// adds no replica). The partition's refusal is a *kerr.Error
// (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
// UNKNOWN_TOPIC_OR_PARTITION).
func (c *Cluster) Reassign(ctx context.Context, topic string, partition int32, replicas []int32) error {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
	rp.Partition, rp.Replicas = partition, replicas
	rt.Partitions = []kmsg.AlterPartitionAssignmentsRequestTopicPartition{rp}
	req.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{rt}
	resp, err := c.ask(ctx, req, opTimeout)
	if err != nil {
		return err
	}
	ar := resp.(*kmsg.AlterPartitionAssignmentsResponse)
	if err := kerr.ErrorForCode(ar.ErrorCode); err != nil {
		return fmt.Errorf("clustertest: reassign %s-%d: %w", topic, partition, err)
	}
	if len(ar.Topics) != 1 || len(ar.Topics[0].Partitions) != 1 {
		return fmt.Errorf("clustertest: reassign %s-%d: an answer for %d topics", topic, partition, len(ar.Topics))
	}
	if err := kerr.ErrorForCode(ar.Topics[0].Partitions[0].ErrorCode); err != nil {
		return fmt.Errorf("clustertest: reassign %s-%d: %w", topic, partition, err)
	}
	return nil
}

// Reassignments lists a topic's reassignments under way, by partition.
func (c *Cluster) Reassignments(ctx context.Context, topic string) (map[int32]Reassignment, error) {
	resp, err := c.ask(ctx, kmsg.NewPtrListPartitionReassignmentsRequest(), opTimeout)
	if err != nil {
		return nil, err
	}
	lr := resp.(*kmsg.ListPartitionReassignmentsResponse)
	if err := kerr.ErrorForCode(lr.ErrorCode); err != nil {
		return nil, fmt.Errorf("clustertest: list reassignments: %w", err)
	}
	out := map[int32]Reassignment{}
	for _, t := range lr.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			out[p.Partition] = Reassignment{Replicas: p.Replicas, Adding: p.AddingReplicas, Removing: p.RemovingReplicas}
		}
	}
	return out, nil
}

// WaitReassigned waits until a partition's reassignment has completed:
// none is under way, and the freshest metadata has the partition on
// exactly replicas (in that order), all in sync, with a running leader.
func (c *Cluster) WaitReassigned(ctx context.Context, topic string, partition int32, replicas []int32) error {
	return Eventually(ctx, fmt.Sprintf("%s-%d on replicas %v", topic, partition, replicas), func(ctx context.Context) error {
		under, err := c.Reassignments(ctx, topic)
		if err != nil {
			return err
		}
		if r, ok := under[partition]; ok {
			return fmt.Errorf("under way: %+v", r)
		}
		ps, err := c.Partitions(ctx, topic)
		if err != nil {
			return err
		}
		if int(partition) >= len(ps) {
			return fmt.Errorf("%s has %d partitions", topic, len(ps))
		}
		p := ps[partition]
		if !slices.Equal(p.Replicas, replicas) || !p.InSync() {
			return fmt.Errorf("%v", p)
		}
		if l := c.Node(p.Leader); l == nil || !l.Running() {
			return fmt.Errorf("leader not running: %v", p)
		}
		return nil
	})
}

// ElectLeaders asks for preferred (or, with unclean, unclean) leader
// elections for a topic's partitions, and returns each partition's
// outcome: nil (elected) or a *kerr.Error (ELECTION_NOT_NEEDED,
// PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
// UNKNOWN_TOPIC_OR_PARTITION).
func (c *Cluster) ElectLeaders(ctx context.Context, unclean bool, topic string, partitions ...int32) (map[int32]error, error) {
	req := kmsg.NewPtrElectLeadersRequest()
	if unclean {
		req.ElectionType = 1
	}
	req.Topics = []kmsg.ElectLeadersRequestTopic{{Topic: topic, Partitions: partitions}}
	resp, err := c.ask(ctx, req, opTimeout)
	if err != nil {
		return nil, err
	}
	er := resp.(*kmsg.ElectLeadersResponse)
	if err := kerr.ErrorForCode(er.ErrorCode); err != nil {
		return nil, fmt.Errorf("clustertest: elect leaders: %w", err)
	}
	out := map[int32]error{}
	for _, t := range er.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = kerr.ErrorForCode(p.ErrorCode)
		}
	}
	return out, nil
}

// unregisterTimeout is how long a node works on an UnregisterBroker
// (transport's bound for it).
const unregisterTimeout = 25 * time.Second

// UnregisterBroker asks for a broker's registration to be removed, the
// last step of its decommission: BROKER_ID_NOT_REGISTERED, or
// INVALID_REQUEST (with the reason) while it holds replicas or runs, are
// *kerr.Errors (the reason is in the error's text).
func (c *Cluster) UnregisterBroker(ctx context.Context, id int32) error {
	req := kmsg.NewPtrUnregisterBrokerRequest()
	req.BrokerID = id
	// The request has no timeout of its own: a node bounds it by
	// unregisterTimeout.
	resp, err := c.ask(ctx, req, unregisterTimeout)
	if err != nil {
		return err
	}
	ur := resp.(*kmsg.UnregisterBrokerResponse)
	if err := kerr.ErrorForCode(ur.ErrorCode); err != nil {
		if ur.ErrorMessage != nil {
			return fmt.Errorf("clustertest: unregister broker %d: %w: %s", id, err, *ur.ErrorMessage)
		}
		return fmt.Errorf("clustertest: unregister broker %d: %w", id, err)
	}
	return nil
}
