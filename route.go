package spool

import (
	"context"
	"fmt"
	"time"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
)

// What the Kafka server (package transport) asks of a broker, the same
// whether the broker is standalone or a node of a cluster: where a
// partition's leader is, writing a producer's batch there, reading from
// it, which broker coordinates a group, and who the cluster's brokers are.

// ProduceOptions qualify ProduceBatch.
type ProduceOptions struct {
	// Acks is what to wait for: on a replicated partition AcksAll waits
	// until every in-sync replica has the batch (and refuses it while the
	// ISR is below MinInSyncReplicas); on one broker it is AcksLeader.
	Acks Acks
	// Timeout bounds the wait for the in-sync replicas (the produce
	// request's timeout). Default 30s.
	Timeout time.Duration
	// Waited, if not nil, receives how long the write waited for the
	// in-sync replicas after the leader's own write: a produce request's
	// remote time. Zero on one broker.
	Waited *time.Duration
}

// ProduceBatch appends a batch a Kafka producer encoded to partition n of
// a topic, which this broker must lead, after the idempotent-producer
// checks: a retry of one of the producer's last batches is answered with
// its original offset (on a replicated partition also after a leader
// change). It returns the batch's base offset. The batch is checked first
// (framing, CRC-32C, every record); a refused batch writes nothing.
//
// On a cluster node that does not lead the partition the error is a
// *replica.NotLeaderError naming the leader it knows of.
func (b *Broker) ProduceBatch(ctx context.Context, topic string, n int32, batch record.Batch, opts ProduceOptions) (int64, error) {
	if b.closed.Load() {
		return -1, ErrClosed
	}
	return b.route(topic).produceBatch(ctx, topic, n, batch, opts)
}

func (s soloStore) produceBatch(ctx context.Context, topic string, n int32, batch record.Batch, opts ProduceOptions) (int64, error) {
	p, err := s.b.Partition(topic, n)
	if err != nil {
		s.b.metrics.produced(topic, 0, 0, err)
		return -1, err
	}
	base, dup, err := p.AppendProduced(batch)
	s.b.metrics.appended(topic, batch, dup, err)
	return base, s.b.wrapClosed(err)
}

func (s clusterStore) produceBatch(ctx context.Context, topic string, n int32, batch record.Batch, opts ProduceOptions) (int64, error) {
	b := s.b
	rs, err := b.cl.leader(ctx, topic, n)
	if err != nil {
		return -1, err
	}
	acks := replica.AcksAll
	switch opts.Acks {
	case AcksLeader:
		acks = replica.AcksLeader
	case AcksNone:
		acks = replica.AcksNone
	}
	res := rs.AppendBatches(ctx, []record.Batch{batch}, replica.AppendOptions{Acks: acks, Timeout: opts.Timeout, Idempotent: true, Waited: opts.Waited})
	counter := &b.holderOf(rs.Partition()).metrics
	if res.Err != nil {
		counter.produced(topic, 0, 0, res.Err)
		return -1, b.wrapClosed(res.Err)
	}
	// Written at the leader: its records are in, as Kafka counts them,
	// even if the followers did not acknowledge them in time.
	counter.produced(topic, int(batch.NumRecords()), batch.Size(), res.AckErr)
	if res.AckErr != nil {
		return -1, b.wrapClosed(res.AckErr)
	}
	return res.Bases[0], nil
}

// LeaderPartition returns the partition of a topic that this broker leads,
// for reading (fetch, offsets by time, where an epoch ends) and for
// DeleteRecords. leaderEpoch is the epoch the client believes in, -1 for
// any: an older one is refused with replica.ErrFencedLeaderEpoch, a newer
// one with replica.ErrUnknownLeaderEpoch (KIP-320). A cluster node that
// does not lead the partition answers with a *replica.NotLeaderError.
func (b *Broker) LeaderPartition(topic string, n int32, leaderEpoch int32) (*partition.Partition, error) {
	return b.route(topic).leaderPartition(topic, n, leaderEpoch)
}

// leaderPartition on one broker: the partition; the client's epoch is
// checked by the server against the partition's.
func (s soloStore) leaderPartition(topic string, n int32, _ int32) (*partition.Partition, error) {
	return s.b.Partition(topic, n)
}

func (s clusterStore) leaderPartition(topic string, n int32, leaderEpoch int32) (*partition.Partition, error) {
	b := s.b
	if b.closed.Load() {
		return nil, ErrClosed
	}
	rs, err := b.cl.leader(context.Background(), topic, n)
	if err != nil {
		return nil, err
	}
	cur := rs.State().LeaderEpoch
	switch {
	case leaderEpoch >= 0 && leaderEpoch < cur:
		return nil, fmt.Errorf("%w: %s-%d is in epoch %d, the request has %d", replica.ErrFencedLeaderEpoch, topic, n, cur, leaderEpoch)
	case leaderEpoch > cur:
		return nil, fmt.Errorf("%w: %s-%d is in epoch %d, the request has %d", replica.ErrUnknownLeaderEpoch, topic, n, cur, leaderEpoch)
	}
	return rs.Partition(), nil
}

// BrokerInfo is a broker of the cluster as clients see it.
type BrokerInfo struct {
	ID   int32
	Host string
	Port int32
	Rack string
	// Listeners are the broker's named Kafka listeners (Host and Port are
	// the one the nodes use among themselves); none: one unnamed
	// listener, told to every client.
	Listeners []controller.NamedEndpoint
}

// Endpoint is the broker's host and port on the listener named name: Host
// and Port if it has one listener; false if it has none of that name.
func (b BrokerInfo) Endpoint(name string) (host string, port int32, ok bool) {
	if len(b.Listeners) == 0 {
		return b.Host, b.Port, true
	}
	for _, l := range b.Listeners {
		if l.Name == name {
			return l.Host, l.Port, true
		}
	}
	return "", 0, false
}

// ClusterInfo is what a cluster node knows of its cluster: the brokers
// clients may use (registered and unfenced) and the active controller.
type ClusterInfo struct {
	// Brokers are the live brokers, by id.
	Brokers []BrokerInfo
	// Controller is the active controller's node id (-1: none known).
	Controller int32
}

// Cluster describes the cluster this node belongs to; ok is false on a
// broker that is not a networked cluster node (it is the whole cluster).
func (b *Broker) Cluster() (info ClusterInfo, ok bool) {
	if b.nc == nil {
		return ClusterInfo{}, false
	}
	im := b.nc.q.Image()
	for _, br := range im.Brokers() {
		if br.Fenced {
			continue
		}
		info.Brokers = append(info.Brokers, BrokerInfo{ID: br.ID, Host: br.Kafka.Host, Port: br.Kafka.Port, Rack: br.Rack, Listeners: br.Listeners})
	}
	info.Controller, _ = b.nc.q.Leader()
	return info, true
}

// GroupCoordinator returns the broker that coordinates a consumer group:
// this one on a standalone broker; in a cluster the leader of the group's
// __consumer_offsets partition (created, as Kafka does, when the first
// group looks for its coordinator: ErrCoordinatorNotAvailable until enough
// brokers have joined).
func (b *Broker) GroupCoordinator(ctx context.Context, groupID string) (int32, error) {
	if b.nc == nil {
		return b.opts.NodeID, nil
	}
	return b.nc.coordinator(ctx, groupID)
}

// CheckGroupCoordinator reports whether this broker coordinates a group
// now: nil, ErrNotCoordinator (another broker leads its offsets partition)
// or ErrCoordinatorLoadInProgress (it is loading the partition's offsets).
// Always nil on a standalone broker.
func (b *Broker) CheckGroupCoordinator(groupID string) error {
	if b.nc == nil {
		return nil
	}
	return b.nc.checkCoordinator(groupID)
}

// Ready is closed once the broker serves: at once for a standalone broker;
// for a cluster node once it has registered with the active controller and
// applied the metadata up to its registration.
func (b *Broker) Ready() <-chan struct{} {
	if b.nc == nil {
		return closedChan
	}
	return b.nc.ready
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Failed receives the error that keeps a cluster node out of its cluster
// for good - another live process registered with its node id - after
// which it will never be Ready. Nil channel (never ready to receive) on a
// standalone broker.
func (b *Broker) Failed() <-chan error {
	if b.nc == nil {
		return nil
	}
	return b.nc.failed
}
