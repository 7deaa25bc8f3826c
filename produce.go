package spool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
)

// Produce appends one record and returns where it landed: synchronously,
// one batch per record. With the Sync flush policy it returns once the
// record is on stable storage. The partition is chosen by
// Options.Partitioner; a topic that does not exist is created when
// AutoCreateTopics allows. For throughput, batch records with a Producer.
func (b *Broker) Produce(ctx context.Context, rec Record) (RecordMetadata, error) {
	if err := ctx.Err(); err != nil {
		return RecordMetadata{}, err
	}
	return b.route(rec.Topic).produce(ctx, rec)
}

func (s soloStore) produce(ctx context.Context, rec Record) (RecordMetadata, error) {
	b := s.b
	t, err := b.topic(ctx, rec.Topic, true)
	if err != nil {
		return RecordMetadata{}, err
	}
	n := b.choosePartition(t.name, &rec, int32(len(t.partitions())))
	p, err := t.partition(n)
	if err != nil {
		return RecordMetadata{}, err
	}
	ts := rec.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	off, size, err := p.AppendRecords([]record.Record{{Timestamp: ts, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}})
	b.metrics.produced(rec.Topic, 1, size, err)
	if err != nil {
		return RecordMetadata{}, b.wrapClosed(err)
	}
	return RecordMetadata{Topic: rec.Topic, Partition: n, Offset: off, Timestamp: ts.Truncate(time.Millisecond)}, nil
}

// lockedPartitioner is the broker partitioner's state for one topic: a
// TopicPartitioner is not safe for concurrent use, and Produce is.
type lockedPartitioner struct {
	mu sync.Mutex
	tp partition.TopicPartitioner
}

func (b *Broker) choosePartition(name string, rec *Record, n int32) int32 {
	v, ok := b.partitioners.Load(name)
	if !ok {
		v, _ = b.partitioners.LoadOrStore(name, &lockedPartitioner{tp: b.opts.Partitioner.ForTopic(name)})
	}
	lp := v.(*lockedPartitioner)
	lp.mu.Lock()
	defer lp.mu.Unlock()
	p := lp.tp.Partition(rec.Key, rec.Partition, n)
	if p >= 0 {
		lp.tp.OnNewBatch(p) // every Produce is a batch of its own
	}
	return p
}

// wrapClosed reports a partition closed under an operation as the broker
// being closed, when it is.
func (b *Broker) wrapClosed(err error) error {
	if b.closed.Load() && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
