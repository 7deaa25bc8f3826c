package spool

import (
	"context"
	"errors"
	"fmt"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/replica"
)

// The operations an operator runs on a cluster: partition reassignment
// (KIP-455), leader elections (KIP-460) and a broker's decommission
// (KIP-631). On a node of a cluster of processes each goes to the active
// controller - run here if this node is it, else sent to it (Remote), as
// topic administration is - and answers once committed. A standalone
// broker answers as a cluster of one whose only broker is this one
// (Options.NodeID): nothing to move, elect or unregister. An in-process
// LocalCluster's controller has none of them (errors.ErrUnsupported).

// ErrNotSupportedHere refuses an operation the broker's kind of cluster
// does not have: the in-process LocalCluster has no reassignment, operator
// elections or unregistration. errors.Is(err, errors.ErrUnsupported) is
// true of it.
var ErrNotSupportedHere = fmt.Errorf("spool: not supported by an in-process cluster: %w", errors.ErrUnsupported)

// AlterPartitionReassignments starts or cancels partition reassignments
// (Kafka's AlterPartitionReassignments): each entry moves a partition to
// its Replicas, in that order, or with nil Replicas cancels the
// partition's ongoing reassignment. It returns one error per entry, in
// order (nil: done, or started - the new replicas catch up and the
// reassignment completes once they are all in sync;
// replica.ErrInvalidReplicaAssignment, ErrReplicationFactorChange,
// ErrNoReassignmentInProgress, ErrUnknownTopic, ErrUnknownPartition); err
// is a failure of the whole request. With allowRFChange false a target
// must keep its partition's replication factor (KIP-860).
func (b *Broker) AlterPartitionReassignments(ctx context.Context, rs []controller.Reassignment, allowRFChange bool) ([]error, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	switch {
	case b.nc != nil:
		return b.nc.alterPartitionReassignments(ctx, rs, allowRFChange)
	case b.cl != nil:
		return nil, ErrNotSupportedHere
	}
	errs := make([]error, len(rs))
	self := func(id int32) bool { return id == b.opts.NodeID }
	for i, r := range rs {
		st, err := b.soloState(r.Topic, r.Partition)
		switch {
		case err != nil:
		case r.Replicas == nil:
			_, err = replica.CancelReassignment(st, false, self)
		default:
			_, _, err = replica.Reassign(st, r.Replicas, allowRFChange, self, self)
		}
		errs[i] = err
	}
	return errs, nil
}

// soloState is a standalone broker's partition as a partition state: this
// broker its only replica, leader and ISR.
func (b *Broker) soloState(topic string, p int32) (replica.PartitionState, error) {
	n := b.partitionCount(topic)
	if n < 0 {
		return replica.PartitionState{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, topic)
	}
	if p < 0 || p >= n {
		return replica.PartitionState{}, fmt.Errorf("%w: %s-%d (the topic has %d partitions)", replica.ErrUnknownPartition, topic, p, n)
	}
	id := b.opts.NodeID
	return replica.PartitionState{Topic: topic, Partition: p, Replicas: []int32{id}, Leader: id, ISR: []int32{id}}, nil
}

// ListPartitionReassignments lists the ongoing reassignments of the
// partitions given, or of every partition if parts is nil (Kafka's
// ListPartitionReassignments), as the active controller sees them.
// Partitions unknown or not being reassigned are left out.
func (b *Broker) ListPartitionReassignments(ctx context.Context, parts []controller.TopicPartition) ([]controller.OngoingReassignment, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	switch {
	case b.nc != nil:
		return b.nc.listPartitionReassignments(ctx, parts)
	case b.cl != nil:
		return nil, ErrNotSupportedHere
	}
	return nil, nil
}

// ElectLeaders holds leader elections (Kafka's ElectLeaders): preferred
// (the first replica leads if it is an eligible in-sync replica) or
// unclean (a partition without a leader gets one, from outside the ISR if
// need be), for the partitions given or every partition if parts is nil -
// then those that need none are left out of the results. Each result's
// Err is nil (elected) or why not (replica.ErrElectionNotNeeded,
// ErrPreferredLeaderNotAvailable, ErrEligibleLeadersNotAvailable,
// ErrUnknownTopic, ErrUnknownPartition).
func (b *Broker) ElectLeaders(ctx context.Context, typ replica.ElectionType, parts []controller.TopicPartition) ([]controller.ElectionResult, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if typ != replica.PreferredElection && typ != replica.UncleanElection {
		return nil, fmt.Errorf("%w: election type %d", ErrInvalidConfig, typ)
	}
	switch {
	case b.nc != nil:
		return b.nc.electLeaders(ctx, typ, parts)
	case b.cl != nil:
		return nil, ErrNotSupportedHere
	}
	var out []controller.ElectionResult
	for _, tp := range parts {
		st, err := b.soloState(tp.Topic, tp.Partition)
		if err == nil {
			_, err = replica.DecideElection(st, typ, func(id int32) bool { return id == b.opts.NodeID })
		}
		out = append(out, controller.ElectionResult{Topic: tp.Topic, Partition: tp.Partition, Err: err})
	}
	return out, nil
}

// UnregisterBroker removes a broker's registration, the last step of its
// decommission (Kafka's UnregisterBroker): refused while the broker holds
// any replica (controller.ErrBrokerHoldsReplicas: reassign them first) or
// runs (controller.ErrBrokerAlive: stop it first), or if it is not
// registered (controller.ErrBrokerNotRegistered).
func (b *Broker) UnregisterBroker(ctx context.Context, id int32) error {
	if b.closed.Load() {
		return ErrClosed
	}
	switch {
	case b.nc != nil:
		return b.nc.unregisterBroker(ctx, id)
	case b.cl != nil:
		return ErrNotSupportedHere
	case id == b.opts.NodeID:
		return fmt.Errorf("%w: broker %d is this standalone broker", controller.ErrBrokerAlive, id)
	}
	return fmt.Errorf("%w: broker %d (a standalone broker is broker %d)", controller.ErrBrokerNotRegistered, id, b.opts.NodeID)
}

func (nc *netCluster) alterPartitionReassignments(ctx context.Context, rs []controller.Reassignment, allowRFChange bool) ([]error, error) {
	var errs []error
	ambiguous, err := nc.callAmbiguous(ctx, func() (err error) {
		errs, err = nc.q.AlterPartitionReassignments(ctx, rs, allowRFChange)
		return err
	}, func(addr string) (err error) {
		errs, err = nc.opts.Remote.AlterPartitionReassignments(ctx, addr, rs, allowRFChange)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ambiguous {
		for i, e := range errs {
			if rs[i].Replicas == nil && errors.Is(e, replica.ErrNoReassignmentInProgress) {
				errs[i] = nil // most likely an earlier attempt of ours cancelled it
			}
		}
	}
	return errs, nil
}

func (nc *netCluster) listPartitionReassignments(ctx context.Context, parts []controller.TopicPartition) ([]controller.OngoingReassignment, error) {
	var out []controller.OngoingReassignment
	err := nc.call(ctx, func() error {
		out = nc.q.ListPartitionReassignments(parts)
		return nil
	}, func(addr string) (err error) {
		out, err = nc.opts.Remote.ListPartitionReassignments(ctx, addr, parts)
		return err
	})
	return out, err
}

func (nc *netCluster) electLeaders(ctx context.Context, typ replica.ElectionType, parts []controller.TopicPartition) ([]controller.ElectionResult, error) {
	var out []controller.ElectionResult
	err := nc.call(ctx, func() (err error) {
		out, err = nc.q.ElectLeaders(ctx, typ, parts)
		return err
	}, func(addr string) (err error) {
		out, err = nc.opts.Remote.ElectLeaders(ctx, addr, typ, parts)
		return err
	})
	return out, err
}

func (nc *netCluster) unregisterBroker(ctx context.Context, id int32) error {
	ambiguous, err := nc.callAmbiguous(ctx, func() error { return nc.q.UnregisterBroker(ctx, id) },
		func(addr string) error { return nc.opts.Remote.UnregisterBroker(ctx, addr, id) })
	if ambiguous && errors.Is(err, controller.ErrBrokerNotRegistered) {
		return nil // an earlier attempt of ours unregistered it
	}
	return err
}
