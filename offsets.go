package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/txn"
)

// Committed offsets live, as in Kafka, in the internal compacted topic
// __consumer_offsets: a group's commits go to partition
// abs(javaHash(group)) % 50, keyed by (group, topic, partition), so that
// compaction keeps each partition's latest commit. Keys and values use
// Kafka's binary layout (OffsetCommitKey version 1, OffsetCommitValue
// version 3), so Kafka's tools can read the topic:
//
//	key:    int16 version=1 | string group | string topic | int32 partition
//	value:  int16 version=3 | int64 offset | int32 leader epoch |
//	        string metadata | int64 commit timestamp (ms)
//
// (strings: int16 length, then UTF-8 bytes). A deleted offset is a
// tombstone: the key with a nil value.

// OffsetsTopic is the internal topic of committed offsets.
const OffsetsTopic = "__consumer_offsets"

// Defaults for the offsets topic (offsets.topic.num.partitions,
// offsets.topic.segment.bytes).
const (
	DefaultOffsetsTopicPartitions = 50
	offsetsTopicSegmentBytes      = 100 << 20
	offsetsTopicIndexBytes        = 256 << 10
)

// offsetsPartitionFor is the offsets-topic partition that holds a group's
// commits: Kafka's Utils.abs(groupId.hashCode()) % partitions, so a group
// lands where Kafka would put it - the placement of transactional ids
// too (txn.PartitionFor).
func offsetsPartitionFor(groupID string, partitions int32) int32 {
	return txn.PartitionFor(groupID, int(partitions))
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func encodeOffsetKey(groupID string, tp group.TopicPartition) []byte {
	b := binary.BigEndian.AppendUint16(nil, 1)
	b = appendString(b, groupID)
	b = appendString(b, tp.Topic)
	return binary.BigEndian.AppendUint32(b, uint32(tp.Partition))
}

func encodeOffsetValue(o group.OffsetAndMetadata) []byte {
	b := binary.BigEndian.AppendUint16(nil, 3)
	b = binary.BigEndian.AppendUint64(b, uint64(o.Offset))
	b = binary.BigEndian.AppendUint32(b, uint32(o.LeaderEpoch))
	b = appendString(b, o.Metadata)
	return binary.BigEndian.AppendUint64(b, uint64(o.CommitTime.UnixMilli()))
}

var errBadOffsetRecord = errors.New("spool: malformed record in " + OffsetsTopic)

// offsetReader reads the fields of a key or value.
type offsetReader struct {
	b   []byte
	err error
}

func (r *offsetReader) int16() int16 {
	if r.err != nil || len(r.b) < 2 {
		r.err = errBadOffsetRecord
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *offsetReader) int32() int32 {
	if r.err != nil || len(r.b) < 4 {
		r.err = errBadOffsetRecord
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *offsetReader) int64() int64 {
	if r.err != nil || len(r.b) < 8 {
		r.err = errBadOffsetRecord
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *offsetReader) string() string {
	n := r.int16()
	if r.err != nil || n < 0 || int(n) > len(r.b) {
		r.err = errBadOffsetRecord
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decodeOffsetKey parses a commit key; ok is false for other record kinds
// (Kafka's group metadata records, key versions 2 and up), which are skipped.
func decodeOffsetKey(b []byte) (groupID string, tp group.TopicPartition, ok bool, err error) {
	r := offsetReader{b: b}
	v := r.int16()
	if r.err != nil {
		return "", tp, false, r.err
	}
	if v != 0 && v != 1 {
		return "", tp, false, nil
	}
	groupID = r.string()
	tp.Topic = r.string()
	tp.Partition = r.int32()
	return groupID, tp, r.err == nil, r.err
}

func decodeOffsetValue(b []byte) (group.OffsetAndMetadata, error) {
	r := offsetReader{b: b}
	v := r.int16()
	o := group.OffsetAndMetadata{Offset: r.int64(), LeaderEpoch: -1}
	if v >= 3 {
		o.LeaderEpoch = r.int32()
	}
	o.Metadata = r.string()
	o.CommitTime = time.UnixMilli(r.int64())
	if v < 0 || v > 4 {
		return o, fmt.Errorf("%w: value version %d", errBadOffsetRecord, v)
	}
	return o, r.err
}

// offsetStore is the group.OffsetStore over the offsets topic.
type offsetStore struct{ b *Broker }

// StoreOffsets appends a group's commits (or tombstones) to its offsets
// partition, as one batch: durable when it returns, under the broker's
// flush policy - in a cluster, committed (acks=all at the partition's
// leader, which must be this broker: the group's coordinator).
func (s offsetStore) StoreOffsets(groupID string, commits []group.StoredOffset) error {
	return s.b.route(OffsetsTopic).appendCommitted(context.Background(), OffsetsTopic, groupID, offsetRecords(groupID, commits), nil)
}

// StoreTxnOffsets appends a group's commits to its offsets partition as a
// transactional batch of the producer (Kafka writes it so too: the
// producer's id and epoch, no sequence): the partition counts it in the
// producer's open transaction, and the transaction's marker, written to
// this partition when it ends, commits or aborts it for readers and
// reloads alike.
func (s offsetStore) StoreTxnOffsets(groupID string, producerID int64, producerEpoch int16, commits []group.StoredOffset) error {
	txn := &record.ProducerInfo{ID: producerID, Epoch: producerEpoch, BaseSequence: -1}
	return s.b.route(OffsetsTopic).appendCommitted(context.Background(), OffsetsTopic, groupID, offsetRecords(groupID, commits), txn)
}

func offsetRecords(groupID string, commits []group.StoredOffset) []record.Record {
	recs := make([]record.Record, len(commits))
	now := time.Now()
	for i, c := range commits {
		recs[i] = record.Record{Key: encodeOffsetKey(groupID, c.TopicPartition), Timestamp: now}
		if !c.Delete {
			recs[i].Value = encodeOffsetValue(c.OffsetAndMetadata)
		}
	}
	return recs
}

// appendCommitted appends a group's offset records to its partition of
// the broker's own offsets topic (created on first use): durable when it
// returns, under the broker's flush policy.
func (s soloStore) appendCommitted(ctx context.Context, topic, groupID string, recs []record.Record, txn *record.ProducerInfo) error {
	t, err := s.b.offsetsTopic(ctx)
	if err != nil {
		return err
	}
	p, err := t.partition(offsetsPartitionFor(groupID, int32(len(t.partitions()))))
	if err != nil {
		return err
	}
	if txn == nil {
		_, err = p.Append(recs...)
		return err
	}
	batch, err := record.NewBatch(recs, record.BatchOptions{Producer: txn, Transactional: true})
	if err != nil {
		return err
	}
	_, _, err = p.AppendProduced(batch)
	return err
}

// appendCommitted appends a group's offset records to its partition of the
// cluster's offsets topic at its leader - this broker, the group's
// coordinator - and waits until they are committed (acks=all).
func (s clusterStore) appendCommitted(ctx context.Context, topic, groupID string, recs []record.Record, txn *record.ProducerInfo) error {
	n := s.b.partitionCount(topic)
	if n <= 0 {
		return fmt.Errorf("%w: %s does not exist", ErrNotCoordinator, topic)
	}
	rs, err := s.b.cl.leader(ctx, topic, offsetsPartitionFor(groupID, n))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotCoordinator, err)
	}
	batch, err := record.NewBatch(recs, record.BatchOptions{Producer: txn, Transactional: txn != nil})
	if err != nil {
		return err
	}
	// A transactional batch goes through the producer state (Idempotent),
	// which counts it in the producer's open transaction.
	_, err = rs.Append(ctx, batch, replica.AppendOptions{Acks: replica.AcksAll, Trusted: txn == nil, Idempotent: txn != nil, Timeout: 10 * time.Second})
	return err
}

// PrepareGroups creates the internal offsets topic (__consumer_offsets) now
// if it does not exist yet, rather than at the first committed offset. A
// server calls it at startup: creating the topic's partitions takes a while
// (each is a directory of files made durable), and group requests would wait
// behind the first commit otherwise. A cluster node creates it when the
// first group looks for its coordinator, once enough brokers have joined.
func (b *Broker) PrepareGroups(ctx context.Context) error {
	return b.route(OffsetsTopic).prepareGroups(ctx)
}

func (s soloStore) prepareGroups(ctx context.Context) error {
	_, err := s.b.offsetsTopic(ctx)
	return err
}

// prepareGroups does nothing in a cluster: the offsets topic is created
// when the first group looks for its coordinator, once enough brokers
// have joined to replicate it.
func (s clusterStore) prepareGroups(ctx context.Context) error { return nil }

// offsetsTopicConfig is the offsets topic's own settings: compacted, kept
// forever, so that every group's latest commit stays; in a cluster rf
// replicas, two of them in sync for a commit.
func offsetsTopicConfig(partitions int32, rf int) TopicConfig {
	return TopicConfig{
		Partitions:        partitions,
		ReplicationFactor: rf,
		MinInSyncReplicas: min(rf, 2),
		CleanupPolicy:     CleanupCompact,
		SegmentBytes:      offsetsTopicSegmentBytes,
		RetentionTime:     -1,
		MaxMessageBytes:   log.DefaultMaxMessageBytes,
	}
}

// offsetsTopic returns the offsets topic, creating it on first use.
func (b *Broker) offsetsTopic(ctx context.Context) (*topic, error) {
	if t := b.snapshot()[OffsetsTopic]; t != nil {
		return t, nil
	}
	cfg := offsetsTopicConfig(b.opts.OffsetsTopicPartitions, 0)
	cfg.MinInSyncReplicas = 0
	err := b.createTopic(ctx, OffsetsTopic, cfg, true)
	if err != nil && !errors.Is(err, ErrTopicExists) {
		return nil, err
	}
	if t := b.snapshot()[OffsetsTopic]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, OffsetsTopic)
}

// loadOffsets reads the committed offsets back into the coordinator.
func (b *Broker) loadOffsets() error {
	t := b.snapshot()[OffsetsTopic]
	if t == nil {
		return nil
	}
	for _, p := range t.partitions() {
		if err := b.loadOffsetsPartition(p, p.HighWatermark()); err != nil {
			return err
		}
	}
	return nil
}

// loadOffsetsPartition reads one offsets partition's commits below end
// into the coordinator: the latest record per key wins, a tombstone
// removes. A transaction's commits (TxnOffsetCommit: a transactional
// batch) count only once its COMMIT marker follows, and only where no
// later record of the same key came first; an ABORT drops them; those of
// transactions still open are restored pending.
func (b *Broker) loadOffsetsPartition(p *partition.Partition, end int64) error {
	type key struct {
		groupID string
		tp      group.TopicPartition
	}
	latest := map[key]*group.Positioned{} // nil: deleted
	pending := map[int64]map[key]group.Positioned{}
	apply := func(k key, o *group.Positioned) {
		if cur, ok := latest[k]; ok && cur != nil && o != nil && cur.Position > o.Position {
			return
		}
		latest[k] = o
	}
	if err := readBatchesTo(p, end, func(batch record.Batch, r *record.Record) error {
		if batch.IsControl() {
			m, err := record.ParseControlRecord(r.Key, r.Value)
			if err != nil {
				b.logger.Warn("skipping a malformed marker in the offsets topic", "partition", p.ID(), "offset", r.Offset, "err", err)
				return nil
			}
			for k, o := range pending[batch.ProducerID()] {
				if m.Type == record.ControlCommit {
					apply(k, &o)
				}
			}
			delete(pending, batch.ProducerID())
			return nil
		}
		g, tp, ok, err := decodeOffsetKey(r.Key)
		if err != nil || !ok {
			if err != nil {
				b.logger.Warn("skipping a malformed offsets record", "partition", p.ID(), "offset", r.Offset, "err", err)
			}
			return nil
		}
		k := key{g, tp}
		var o *group.Positioned
		if r.Value != nil {
			v, err := decodeOffsetValue(r.Value)
			if err != nil {
				b.logger.Warn("skipping a malformed offsets record", "partition", p.ID(), "offset", r.Offset, "err", err)
				return nil
			}
			o = &group.Positioned{OffsetAndMetadata: v, Position: r.Offset}
		}
		if batch.IsTransactional() {
			if o == nil {
				return nil // a transaction does not delete offsets
			}
			pid := batch.ProducerID()
			if pending[pid] == nil {
				pending[pid] = map[key]group.Positioned{}
			}
			pending[pid][k] = *o
			return nil
		}
		latest[k] = o
		return nil
	}); err != nil {
		return fmt.Errorf("spool: load committed offsets from %s-%d: %w", OffsetsTopic, p.ID(), err)
	}
	committed := map[string]map[group.TopicPartition]group.Positioned{}
	open := map[string]map[int64]map[group.TopicPartition]group.Positioned{}
	for k, o := range latest {
		if o == nil {
			continue
		}
		if committed[k.groupID] == nil {
			committed[k.groupID] = map[group.TopicPartition]group.Positioned{}
		}
		committed[k.groupID][k.tp] = *o
	}
	for pid, offs := range pending {
		for k, o := range offs {
			if open[k.groupID] == nil {
				open[k.groupID] = map[int64]map[group.TopicPartition]group.Positioned{}
			}
			if open[k.groupID][pid] == nil {
				open[k.groupID][pid] = map[group.TopicPartition]group.Positioned{}
			}
			open[k.groupID][pid][k.tp] = o
		}
	}
	for g, offs := range committed {
		b.coord.Restore(g, offs, open[g])
		delete(open, g)
	}
	for g, txns := range open {
		b.coord.Restore(g, nil, txns)
	}
	return nil
}

// readPartition calls fn for every committed record of a partition, in
// order. The record is valid during the call only.
func readPartition(p *partition.Partition, fn func(*record.Record) error) error {
	return readPartitionTo(p, p.HighWatermark(), fn)
}

// readPartitionTo is readPartition up to end.
func readPartitionTo(p *partition.Partition, end int64, fn func(*record.Record) error) error {
	return readBatchesTo(p, end, func(_ record.Batch, r *record.Record) error { return fn(r) })
}

// readBatchesTo is readPartitionTo that also hands over each record's
// batch (control batches included).
func readBatchesTo(p *partition.Partition, end int64, fn func(record.Batch, *record.Record) error) error {
	var it record.Iterator
	var buf []byte
	off := p.StartOffset()
	for off < end {
		out, err := p.Log().ReadInto(buf[:0], off, 1<<20)
		if err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		buf = out
		for len(out) > 0 {
			batch, n, err := record.ParseBatch(out)
			if err != nil {
				return err
			}
			out = out[n:]
			for it.Reset(batch); it.Next(); {
				if r := it.Record(); r.Offset >= off {
					if err := fn(batch, r); err != nil {
						return err
					}
				}
			}
			if err := it.Err(); err != nil {
				return err
			}
			off = max(off, batch.NextOffset())
		}
	}
	return nil
}
