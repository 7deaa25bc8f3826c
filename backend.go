package spool

import (
	"context"
	"fmt"
	"sort"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
)

// One path. Every operation on a topic - producing, consuming, creating,
// describing, reconfiguring - asks the topic's store, and route is the
// only place that decides which store that is. A broker's topics live in
// one of two:
//
//   - soloStore: the broker's own registry (topics.json) and partitions. A
//     standalone broker is a cluster of one whose every topic is here; a
//     broker in a LocalCluster keeps its __consumer_offsets here.
//   - clusterStore: the cluster's topics, reached through the
//     clusterBackend - a LocalCluster in this process, or the controller
//     of a cluster of processes (netCluster) - and each partition's leader
//     wherever it runs (leaderFor, readerFor).
//
// Each store answers every operation its own way; nothing above them asks
// what kind of broker it runs on.
type topicStore interface {
	// partition is this broker's partition (or replica) n of a topic.
	partition(name string, n int32) (*partition.Partition, error)
	// partitionCount is a topic's partition count, -1 without the topic.
	partitionCount(name string) int32
	topicNames() []string
	createTopic(ctx context.Context, name string, cfg TopicConfig) error
	deleteTopic(ctx context.Context, name string) error
	createPartitions(ctx context.Context, name string, total int32) error
	describe(name string) (TopicDescription, error)
	settings(name string) (own, effective TopicConfig, err error)
	alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error
	compact(ctx context.Context, name string) (log.CleanStats, error)
	// produce is Broker.Produce: one record, synchronously.
	produce(ctx context.Context, rec Record) (RecordMetadata, error)
	// producerTopic is a Producer's state for a topic (cached: the state it
	// had, or nil).
	producerTopic(ctx context.Context, p *Producer, name string, cached *producerTopic) (*producerTopic, error)
	// consumerParts is what a consumer assigning a topic needs: its
	// partition count, and the partitions it reads directly with why each
	// missing one is offline - or nil parts when it reads through each
	// partition's leader.
	consumerParts(name string) (count int32, parts []*partition.Partition, offline func(int32) error, err error)
	// appendCommitted writes a group's committed-offset records to its
	// offsets partition, durable or committed when it returns; with txn,
	// as a batch of that producer's transaction (TxnOffsetCommit).
	appendCommitted(ctx context.Context, topic, groupID string, recs []record.Record, txn *record.ProducerInfo) error
	prepareGroups(ctx context.Context) error
	produceBatch(ctx context.Context, topic string, n int32, batch record.Batch, opts ProduceOptions) (int64, error)
	// appendState writes a transaction coordinator's records to partition
	// n of an internal topic this broker leads at leaderEpoch, durable or
	// committed when it returns.
	appendState(ctx context.Context, topic string, n, leaderEpoch int32, recs []record.Record) error
	// writeMarker writes a transaction marker batch at the partition's
	// leader; local reports whether that was this broker.
	writeMarker(ctx context.Context, topic string, n int32, batch record.Batch, m TxnMarker) (local bool, err error)
	leaderPartition(topic string, n int32, leaderEpoch int32) (*partition.Partition, error)
	// topicNamed is the name of the topic with id, if the store has it.
	topicNamed(id TopicID) (string, bool)
	// replicaLogs lists the logs of the store's partitions this broker
	// holds (DescribeLogDir).
	replicaLogs() []ReplicaLog
	// leave is the store's part of Broker.Close.
	leave() error
}

// TopicName is the name of the topic whose id is id (Kafka's topic ids,
// KIP-516), if the broker has it.
func (b *Broker) TopicName(id TopicID) (string, bool) {
	for _, st := range b.stores() {
		if name, ok := st.topicNamed(id); ok {
			return name, true
		}
	}
	return "", false
}

func (s soloStore) topicNamed(id TopicID) (string, bool) {
	for name, t := range s.b.snapshot() {
		if t.id == id {
			return name, true
		}
	}
	return "", false
}

func (s clusterStore) topicNamed(id TopicID) (string, bool) { return s.b.cl.topicNamed(id) }

// soloStore is the broker's own registry and partitions.
type soloStore struct{ b *Broker }

// clusterStore is the broker's cluster.
type clusterStore struct{ b *Broker }

// route is the store that holds topic name.
func (b *Broker) route(name string) topicStore {
	if b.cl != nil && (!internalTopic(name) || b.cl.replicatesOffsets()) {
		return clusterStore{b}
	}
	return soloStore{b}
}

// stores are every store the broker has topics in.
func (b *Broker) stores() []topicStore {
	if b.cl == nil {
		return []topicStore{soloStore{b}}
	}
	return []topicStore{soloStore{b}, clusterStore{b}}
}

// partitionCount is a topic's partition count, -1 if there is no such
// topic.
func (b *Broker) partitionCount(name string) int32 { return b.route(name).partitionCount(name) }

func (s soloStore) partitionCount(name string) int32 {
	if t := s.b.snapshot()[name]; t != nil {
		return int32(len(t.partitions()))
	}
	return -1
}

func (s soloStore) topicNames() []string {
	var names []string
	for n := range s.b.snapshot() {
		names = append(names, n)
	}
	return names
}

func (s soloStore) consumerParts(name string) (int32, []*partition.Partition, func(int32) error, error) {
	t, err := s.b.topic(context.Background(), name, false)
	if err != nil {
		return 0, nil, nil, err
	}
	parts := t.partitions()
	return int32(len(parts)), parts, t.offlineError, nil
}

// leave: the broker closes its own partitions itself (closePartitions).
func (s soloStore) leave() error { return nil }

func (s clusterStore) partition(name string, n int32) (*partition.Partition, error) {
	b := s.b
	b.rmu.Lock()
	p := b.replicas[TopicPartition{Topic: name, Partition: n}]
	b.rmu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: broker %d holds no replica of %s-%d", ErrUnknownPartition, b.opts.NodeID, name, n)
	}
	return p, nil
}

func (s clusterStore) partitionCount(name string) int32 {
	_, states, err := s.b.cl.topic(context.Background(), name)
	if err != nil {
		return -1
	}
	return int32(len(states))
}

func (s clusterStore) topicNames() []string {
	names := s.b.cl.topicNames()
	sort.Strings(names)
	return names
}

func (s clusterStore) createTopic(ctx context.Context, name string, cfg TopicConfig) error {
	return s.b.createReplicatedTopic(ctx, name, cfg)
}

func (s clusterStore) deleteTopic(ctx context.Context, name string) error {
	b := s.b
	if b.closed.Load() {
		return ErrClosed
	}
	if s.partitionCount(name) < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	return b.wrapTopicErr(name, b.cl.deleteTopic(ctx, name))
}

func (s clusterStore) createPartitions(ctx context.Context, name string, total int32) error {
	b := s.b
	if b.closed.Load() {
		return ErrClosed
	}
	have := s.partitionCount(name)
	if have < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	if total <= have {
		return fmt.Errorf("%w: %q has %d partitions; partitions can only be added (asked for %d)", ErrInvalidConfig, name, have, total)
	}
	return b.wrapTopicErr(name, b.cl.createPartitions(ctx, name, total))
}

func (s clusterStore) settings(name string) (own, effective TopicConfig, err error) {
	own, states, err := s.b.replicatedTopic(context.Background(), name, false)
	if err != nil {
		return own, effective, err
	}
	effective = s.b.effective(own)
	effective.Partitions = int32(len(states))
	return own, effective, nil
}

func (s clusterStore) alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error {
	b := s.b
	if b.closed.Load() {
		return ErrClosed
	}
	if s.partitionCount(name) < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	return b.wrapTopicErr(name, b.cl.alterTopicConfig(ctx, name, alter))
}

// compact cleans this broker's replicas of a compacted topic now: in a
// cluster each replica cleans its own log, as Kafka's do (cleaning keeps
// offsets, so followers and leader stay in step).
func (s clusterStore) compact(ctx context.Context, name string) (log.CleanStats, error) {
	b := s.b
	own, _, err := b.replicatedTopic(ctx, name, false)
	if err != nil {
		return log.CleanStats{}, err
	}
	if !b.effective(own).CleanupPolicy.compacts() {
		return log.CleanStats{}, fmt.Errorf("%w: %q has cleanup.policy %s", ErrInvalidConfig, name, b.effective(own).CleanupPolicy)
	}
	var mine []*partition.Partition
	for _, p := range b.replicaPartitions() {
		if p.Topic() == name {
			mine = append(mine, p)
		}
	}
	return b.cleanNow(ctx, mine)
}

func (s clusterStore) produce(ctx context.Context, rec Record) (RecordMetadata, error) {
	return s.b.produceReplicated(ctx, rec)
}

func (s clusterStore) producerTopic(ctx context.Context, p *Producer, name string, cached *producerTopic) (*producerTopic, error) {
	if cached != nil {
		return cached, nil
	}
	return p.replicatedTopicState(ctx, name)
}

func (s clusterStore) consumerParts(name string) (int32, []*partition.Partition, func(int32) error, error) {
	count := s.partitionCount(name)
	if count < 0 {
		return 0, nil, nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	return count, nil, nil, nil
}

func (s clusterStore) leave() error { return s.b.cl.leave(s.b) }

// cleanNow cleans partitions now, whatever their dirty ratio, and sums
// what was done.
func (b *Broker) cleanNow(ctx context.Context, parts []*partition.Partition) (log.CleanStats, error) {
	var sum log.CleanStats
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		st, err := b.compactPartition(p, true)
		if err != nil {
			return sum, err
		}
		addCleanStats(&sum, st)
	}
	return sum, nil
}

// addCleanStats adds one partition's cleaning to a sum over partitions.
func addCleanStats(sum *log.CleanStats, st log.CleanStats) {
	sum.Cleaned = sum.Cleaned || st.Cleaned
	sum.SegmentsRead += st.SegmentsRead
	sum.SegmentsWritten += st.SegmentsWritten
	sum.BytesRead += st.BytesRead
	sum.BytesWritten += st.BytesWritten
	sum.RecordsRead += st.RecordsRead
	sum.RecordsKept += st.RecordsKept
	sum.TombstonesRemoved += st.TombstonesRemoved
	sum.Duration += st.Duration
}
