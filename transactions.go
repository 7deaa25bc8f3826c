package spool

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/txn"
)

// Transactions (KIP-98). Every broker runs a transaction coordinator
// (package txn) beside its group coordinator. A transactional id belongs
// to partition abs(javaHash(id)) % TransactionStatePartitions of the
// internal, compacted topic __transaction_state, and its coordinator is
// that partition's leader - on a standalone broker, the broker; in a
// cluster, whichever node leads the partition, which loads the partition's
// transactions when it becomes leader (the coordinator epoch is the
// partition's leader epoch) and drops them when it stops leading.
//
// The coordinator writes its state to that partition (acks=all) and, when
// a transaction ends, a COMMIT or ABORT marker to every partition of the
// transaction through WriteTxnMarker: at the partition's leader, here or
// in another process (Kafka's WriteTxnMarkers). A marker that lands on a
// __consumer_offsets partition also ends the transaction's pending offset
// commits of the groups of that partition.

// TransactionStateTopic is the internal topic of transaction coordinators'
// state.
const TransactionStateTopic = txn.StateTopic

// DefaultTransactionStatePartitions is the default partition count of
// __transaction_state (transaction.state.log.num.partitions).
const DefaultTransactionStatePartitions = txn.DefaultStatePartitions

// internalTopic reports whether a topic is one only the broker writes.
func internalTopic(name string) bool {
	return name == OffsetsTopic || name == TransactionStateTopic || name == ShareStateTopic
}

// Transactions is the broker's transaction coordinator: what the Kafka
// server (package transport) asks for InitProducerId with a transactional
// id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
// ListTransactions.
func (b *Broker) Transactions() *txn.Coordinator { return b.txc }

// newTxnCoordinator makes the broker's transaction coordinator.
func (b *Broker) newTxnCoordinator() (*txn.Coordinator, error) {
	return txn.NewCoordinator(txn.Config{
		Partitions:    int(b.opts.TransactionStatePartitions),
		Store:         txnStateStore{b},
		Markers:       txnMarkers{b},
		NewProducerID: b.AllocateProducerID,
		PartitionExists: func(tp txn.TopicPartition) bool {
			n := b.partitionCount(tp.Topic)
			return tp.Partition >= 0 && tp.Partition < n
		},
		GroupPartition: func(groupID string) txn.TopicPartition {
			return txn.TopicPartition{Topic: OffsetsTopic, Partition: b.GroupOffsetsPartition(groupID)}
		},
		MaxTimeout: b.opts.TransactionMaxTimeout,
		Logger:     b.logger,
	})
}

// GroupOffsetsPartition is the __consumer_offsets partition that holds a
// group's commits (and which AddOffsetsToTxn adds to a transaction).
func (b *Broker) GroupOffsetsPartition(groupID string) int32 {
	n := b.partitionCount(OffsetsTopic)
	if n <= 0 {
		n = b.opts.OffsetsTopicPartitions
	}
	return offsetsPartitionFor(groupID, n)
}

// transactionStateConfig is __transaction_state's own settings, Kafka's:
// compacted, kept forever, rf replicas of which two in sync for a write.
func transactionStateConfig(partitions int32, rf int) TopicConfig {
	return offsetsTopicConfig(partitions, rf) // the same settings as __consumer_offsets
}

// TransactionCoordinator reports which broker coordinates a transactional
// id: the leader of its __transaction_state partition, which is created
// first if need be (as Kafka does at the first FindCoordinator). On a
// standalone broker it is this broker, once the partition is loaded.
func (b *Broker) TransactionCoordinator(ctx context.Context, transactionalID string) (int32, error) {
	if b.closed.Load() {
		return -1, ErrClosed
	}
	if b.nc != nil {
		return b.nc.txnCoordinator(ctx, transactionalID)
	}
	if _, err := b.txnStateTopic(ctx); err != nil {
		return -1, fmt.Errorf("%w: %w", ErrCoordinatorNotAvailable, err)
	}
	return b.opts.NodeID, nil
}

// txnStateTopic returns a standalone broker's __transaction_state, creating
// it and handing its (empty) partitions to the coordinator on first use.
func (b *Broker) txnStateTopic(ctx context.Context) (*topic, error) {
	b.txnMu.Lock()
	defer b.txnMu.Unlock()
	if t := b.snapshot()[TransactionStateTopic]; t != nil && b.txnLoaded {
		return t, nil
	}
	if b.snapshot()[TransactionStateTopic] == nil {
		cfg := transactionStateConfig(b.opts.TransactionStatePartitions, 0)
		cfg.MinInSyncReplicas = 0
		err := b.createTopic(ctx, TransactionStateTopic, cfg, true)
		if err != nil && !errors.Is(err, ErrTopicExists) {
			return nil, err
		}
	}
	t := b.snapshot()[TransactionStateTopic]
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, TransactionStateTopic)
	}
	if err := b.loadTxnState(ctx, t); err != nil {
		return nil, err
	}
	b.txnLoaded = true
	return t, nil
}

// loadTxnState hands every partition of a standalone broker's
// __transaction_state to the coordinator.
func (b *Broker) loadTxnState(ctx context.Context, t *topic) error {
	for i, p := range t.partitions() {
		if p == nil {
			return fmt.Errorf("%w: %s-%d is offline", ErrStorage, TransactionStateTopic, i)
		}
		if err := b.txc.Load(ctx, int32(i), max(p.LeaderEpoch(), 0), partitionRecords(p, p.HighWatermark())); err != nil {
			return fmt.Errorf("spool: load %s-%d: %w", TransactionStateTopic, i, err)
		}
	}
	return nil
}

// partitionRecords iterates a partition's records below end, for the
// coordinators' loads.
func partitionRecords(p *partition.Partition, end int64) iter.Seq2[*record.Record, error] {
	return func(yield func(*record.Record, error) bool) {
		stop := errors.New("stop")
		err := readPartitionTo(p, end, func(r *record.Record) error {
			if !yield(r, nil) {
				return stop
			}
			return nil
		})
		if err != nil && !errors.Is(err, stop) {
			yield(nil, err)
		}
	}
}

// txnStateStore is the coordinator's txn.Store: its partitions of
// __transaction_state.
type txnStateStore struct{ b *Broker }

// Append implements txn.Store: one batch, durable (standalone) or
// committed by the in-sync replicas (cluster) when it returns, written only
// while this broker leads the partition at the coordinator epoch.
func (s txnStateStore) Append(ctx context.Context, n, coordinatorEpoch int32, recs []record.Record) error {
	return s.b.route(TransactionStateTopic).appendState(ctx, TransactionStateTopic, n, coordinatorEpoch, recs)
}

// appendState appends a coordinator's records to partition n of the
// broker's own internal topic.
func (s soloStore) appendState(ctx context.Context, topic string, n, leaderEpoch int32, recs []record.Record) error {
	t := s.b.snapshot()[topic]
	if t == nil {
		return fmt.Errorf("%w: %s does not exist", txn.ErrNotCoordinator, topic)
	}
	p, err := t.partition(n)
	if err != nil {
		return err
	}
	_, err = p.Append(recs...)
	return err
}

// appendState appends a coordinator's records at the partition's leader,
// this broker at leaderEpoch, and waits until they are committed.
func (s clusterStore) appendState(ctx context.Context, topic string, n, leaderEpoch int32, recs []record.Record) error {
	rs, err := s.b.cl.leader(ctx, topic, n)
	if err != nil {
		return fmt.Errorf("%w: %w", txn.ErrNotCoordinator, err)
	}
	if e := rs.Partition().LeaderEpoch(); e != leaderEpoch {
		return fmt.Errorf("%w: %s-%d is at leader epoch %d, loaded at %d", txn.ErrNotCoordinator, topic, n, e, leaderEpoch)
	}
	batch, err := record.NewBatch(recs, record.BatchOptions{})
	if err != nil {
		return err
	}
	_, err = rs.Append(ctx, batch, replica.AppendOptions{Acks: replica.AcksAll, Trusted: true, Timeout: 10 * time.Second})
	if errors.Is(err, replica.ErrNotLeader) {
		err = fmt.Errorf("%w: %w", txn.ErrNotCoordinator, err)
	}
	return err
}

// txnMarkers is the coordinator's txn.MarkerWriter.
type txnMarkers struct{ b *Broker }

// WriteMarkers implements txn.MarkerWriter: each partition's marker goes
// to its leader through WriteTxnMarker.
func (m txnMarkers) WriteMarkers(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32, parts []txn.TopicPartition) []error {
	errs := make([]error, len(parts))
	for i, tp := range parts {
		err := m.b.WriteTxnMarker(ctx, tp.Topic, tp.Partition, TxnMarker{ProducerID: pid, ProducerEpoch: epoch, Commit: commit, CoordinatorEpoch: coordinatorEpoch})
		switch {
		case err == nil:
		case (errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrUnknownPartition) || errors.Is(err, replica.ErrUnknownPartition)) &&
			m.b.partitionCount(tp.Topic) <= tp.Partition:
			// Gone here too (deleted): the coordinator gives the
			// partition up. A leader that has not yet learned of a
			// partition this node knows is asked again.
			err = fmt.Errorf("%w: %w", txn.ErrUnknownTopicOrPartition, err)
		case errors.Is(err, partition.ErrTransactionCoordinatorFenced):
			err = fmt.Errorf("%w: %w", txn.ErrCoordinatorFenced, err)
		case errors.Is(err, partition.ErrInvalidProducerEpoch):
			err = fmt.Errorf("%w: %w", txn.ErrInvalidProducerEpoch, err)
		}
		errs[i] = err
	}
	return errs
}

// TxnMarker is a transaction marker for WriteTxnMarker.
type TxnMarker struct {
	ProducerID    int64
	ProducerEpoch int16
	// Commit is a COMMIT marker; else ABORT.
	Commit bool
	// CoordinatorEpoch is the epoch of the coordinator that writes it;
	// a partition refuses markers of an older one.
	CoordinatorEpoch int32
}

// WriteTxnMarker writes a transaction marker to a partition at its leader
// (Kafka's WriteTxnMarkers): here, or on a cluster node, at the node that
// leads it. It returns once the marker is committed (acks=all). A marker
// on a __consumer_offsets partition this broker leads also ends the
// producer's pending offset commits of that partition's groups. Errors:
// ErrUnknownTopic and ErrUnknownPartition, partition.ErrInvalidProducerEpoch
// and partition.ErrTransactionCoordinatorFenced (a stale marker), a
// *replica.NotLeaderError.
func (b *Broker) WriteTxnMarker(ctx context.Context, topic string, n int32, m TxnMarker) error {
	if b.closed.Load() {
		return ErrClosed
	}
	batch, err := partition.MarkerBatch(m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch)
	if err != nil {
		return err
	}
	local, err := b.route(topic).writeMarker(ctx, topic, n, batch, m)
	if err != nil {
		return b.wrapClosed(err)
	}
	if local && topic == OffsetsTopic {
		count := b.partitionCount(OffsetsTopic)
		b.coord.CompleteTxn(m.ProducerID, m.Commit, func(g string) bool {
			return count > 0 && offsetsPartitionFor(g, count) == n
		})
	}
	return nil
}

func (s soloStore) writeMarker(ctx context.Context, topic string, n int32, batch record.Batch, m TxnMarker) (bool, error) {
	p, err := s.b.Partition(topic, n)
	if err != nil {
		return false, err
	}
	_, _, err = p.AppendProduced(batch)
	return err == nil, err
}

func (s clusterStore) writeMarker(ctx context.Context, topic string, n int32, batch record.Batch, m TxnMarker) (bool, error) {
	b := s.b
	rs, err := b.cl.leader(ctx, topic, n)
	var nl *replica.NotLeaderError
	if errors.As(err, &nl) && nl.Leader >= 0 && nl.Leader != b.opts.NodeID && b.nc != nil && !noForward(ctx) {
		return false, b.nc.opts.Remote.WriteTxnMarker(ctx, nl.Leader, topic, n, m)
	}
	if err != nil {
		return false, err
	}
	_, err = rs.Append(ctx, batch, replica.AppendOptions{Acks: replica.AcksAll, Idempotent: true, Timeout: 10 * time.Second})
	return err == nil, err
}

// txnCoordinator reports which node coordinates a transactional id in a
// cluster - the leader of its __transaction_state partition - creating the
// topic first (with as many replicas as __consumer_offsets gets) if needed.
func (nc *netCluster) txnCoordinator(ctx context.Context, transactionalID string) (int32, error) {
	return nc.keyLeader(ctx, TransactionStateTopic, transactionalID, nc.opts.OffsetsReplicationFactor, func(rf int) TopicConfig {
		return transactionStateConfig(nc.b.opts.TransactionStatePartitions, rf)
	})
}

// txnRoleChanged loads a __transaction_state partition's transactions into
// the coordinator as this node becomes its leader (at that leader epoch,
// the coordinator epoch) and drops them as it stops leading it.
func (nc *netCluster) txnRoleChanged(p int32, leading bool, epoch int32) {
	b := nc.b
	if !leading {
		if b.txc.Unload(p) {
			b.logger.Info("no longer coordinating the transactions of a state partition", "partition", p)
		}
		return
	}
	nc.wg.Add(1)
	go func() {
		defer nc.wg.Done()
		b.txc.Unload(p) // anything left from an earlier term
		rs, ok := b.node.ReplicaSet(TransactionStateTopic, p)
		if !ok {
			return
		}
		part := rs.Partition()
		if err := b.txc.Load(context.Background(), p, epoch, partitionRecords(part, part.EndOffset())); err != nil {
			b.logger.Error("loading transactions", "partition", p, "err", err)
			return
		}
		b.logger.Info("coordinating the transactions of a state partition", "partition", p, "leader_epoch", epoch)
	}()
}
