package spool

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/share"
)

// ShareConsumerConfig configures a ShareConsumer. Zero fields take their
// defaults.
type ShareConsumerConfig struct {
	// Group is the share group (group.id). Its consumers take the records
	// of Topics one at a time, each delivered to one consumer at a time.
	Group string
	// Topics are the topics the consumer takes records from.
	Topics []string
	// MaxRecords bounds the records one Poll returns (max.poll.records).
	// Default 500.
	MaxRecords int
	// FetchMaxWait is how long Poll waits for a record (fetch.max.wait.ms).
	// Default 500 ms.
	FetchMaxWait time.Duration
	// StartAtLatest makes a partition the group has never consumed start
	// at its end, delivering only records produced from then on (Kafka's
	// share.auto.offset.reset=latest, its default). By default it starts
	// at the partition's start, so that jobs queued before the first
	// consumer are not skipped.
	StartAtLatest bool
	// DeadLetterTopic, if set, receives a copy of every record the group
	// archives - rejected, or delivered Options.ShareDeliveryLimit times
	// without being accepted - with the headers spool.dlq.topic,
	// spool.dlq.partition, spool.dlq.offset and spool.dlq.delivery.count
	// (as KIP-1191's errors.deadletterqueue.topic.name). It is the
	// group's setting: the last consumer of the group to name one sets it.
	// The topic must exist. Default: archived records are only dropped.
	DeadLetterTopic string
}

// Defaults of ShareConsumerConfig.
const (
	DefaultShareMaxRecords = 500
)

// ShareRecord is a record a ShareConsumer delivered: it stays with this
// consumer until acknowledged (Ack, Release, Reject) or until its lock
// expires (Options.ShareLockDuration), then goes to another.
type ShareRecord struct {
	Record
	// DeliveryCount is how many times the record has been delivered, this
	// time included.
	DeliveryCount int
}

// ShareConsumer is a consumer of a share group (KIP-932, "queues for
// Kafka"): many consumers, on one partition or many, each taking records
// as a worker takes jobs. Each record Poll returns is locked to this
// consumer until it acknowledges it:
//
//   - Ack: processed, never delivered again;
//   - Release: not processed, delivered again (to any consumer);
//   - Reject: cannot be processed, archived (and dead-lettered);
//   - Renew: still working on it, keep the lock.
//
// A record whose lock expires - its consumer is stuck, or crashed without
// Close - is delivered again; one delivered Options.ShareDeliveryLimit
// times without an Ack is archived. Acknowledgements are durable when the
// call returns; after a crash or restart of the broker no acknowledged
// record is delivered again, and records delivered but not acknowledged
// are delivered again. An acknowledgement of a record that is no longer
// this consumer's (its lock expired and it went to another) fails with
// share.ErrInvalidRecordState, so each record is acknowledged by one
// consumer only.
//
// The methods may be called from any goroutine.
type ShareConsumer struct {
	b      *Broker
	cfg    ShareConsumerConfig
	member string

	mu     sync.Mutex
	closed bool
	next   int // where the next Poll starts, for fairness
}

// NewShareConsumer returns a consumer of a share group. Share groups need
// a standalone broker (errors.ErrUnsupported on a cluster node).
func (b *Broker) NewShareConsumer(cfg ShareConsumerConfig) (*ShareConsumer, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	cfg.MaxRecords = cmp.Or(cfg.MaxRecords, DefaultShareMaxRecords)
	cfg.FetchMaxWait = cmp.Or(cfg.FetchMaxWait, DefaultFetchMaxWait)
	const c = "ShareConsumerConfig."
	switch {
	case cfg.Group == "":
		return nil, invalidConfig(c+"Group", cfg.Group, "a share consumer needs a Group")
	case len(cfg.Topics) == 0:
		return nil, invalidConfig(c+"Topics", cfg.Topics, "a share consumer needs Topics")
	case cfg.MaxRecords < 0:
		return nil, invalidConfig(c+"MaxRecords", cfg.MaxRecords, "want 0 (the default) or more")
	case cfg.FetchMaxWait < 0:
		return nil, invalidConfig(c+"FetchMaxWait", cfg.FetchMaxWait, "want 0 (the default) or more")
	}
	for _, t := range append(slices.Clone(cfg.Topics), cfg.DeadLetterTopic) {
		if t == "" {
			continue
		}
		if err := ValidTopicName(t); err != nil {
			return nil, err
		}
		if _, ok := b.route(t).(soloStore); !ok || b.opts.Node != nil || b.opts.Cluster != nil {
			return nil, fmt.Errorf("spool: share group %q on topic %q: share groups need a standalone broker: %w", cfg.Group, t, errors.ErrUnsupported)
		}
	}
	if cfg.DeadLetterTopic != "" {
		if b.partitionCount(cfg.DeadLetterTopic) < 0 {
			return nil, fmt.Errorf("%w: dead letter topic %q", ErrUnknownTopic, cfg.DeadLetterTopic)
		}
		b.shares.mu.Lock()
		if b.shares.dead == nil {
			b.shares.dead = map[string]string{}
		}
		b.shares.dead[cfg.Group] = cfg.DeadLetterTopic
		b.shares.mu.Unlock()
	}
	b.shares.mu.Lock()
	if b.shares.local == nil {
		b.shares.local = map[string]int{}
	}
	b.shares.local[cfg.Group]++
	b.shares.mu.Unlock()
	return &ShareConsumer{b: b, cfg: cfg, member: newMemberID()}, nil
}

// Poll returns records delivered to this consumer, waiting up to
// FetchMaxWait (or until ctx ends) for at least one. Each is this
// consumer's until acknowledged or until its lock expires.
func (c *ShareConsumer) Poll(ctx context.Context) ([]ShareRecord, error) {
	c.mu.Lock()
	closed, next := c.closed, c.next
	c.next++
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var tps []TopicPartition
	for _, name := range c.cfg.Topics {
		for p := range max(c.b.partitionCount(name), 0) {
			tps = append(tps, TopicPartition{Topic: name, Partition: p})
		}
	}
	if len(tps) > 0 {
		k := next % len(tps)
		tps = append(tps[k:], tps[:k]...) // fairness: start elsewhere each time
	}
	fetched, err := c.b.ShareAcquire(ctx, c.cfg.Group, c.member, tps, ShareAcquireOptions{
		MaxRecords: c.cfg.MaxRecords, MaxWait: c.cfg.FetchMaxWait, StartAtLatest: c.cfg.StartAtLatest,
	})
	var out []ShareRecord
	for _, f := range fetched {
		a := &assignment{tp: TopicPartition{Topic: f.Topic, Partition: f.Partition}}
		recs, derr := decodeRecords(nil, a, f.Batches, nil)
		if derr != nil {
			return out, derr
		}
		j := 0
		for _, d := range f.Acquired {
			for j < len(recs) && recs[j].Offset < d.Offset {
				j++
			}
			if j < len(recs) && recs[j].Offset == d.Offset {
				out = append(out, ShareRecord{Record: recs[j], DeliveryCount: d.DeliveryCount})
			}
		}
	}
	return out, err
}

// Ack acknowledges records as processed: they are never delivered again.
// See Acknowledge.
func (c *ShareConsumer) Ack(ctx context.Context, recs ...ShareRecord) error {
	return c.Acknowledge(ctx, share.Accept, recs...)
}

// Release hands records back unprocessed: they are delivered again (to
// any consumer), unless delivered ShareDeliveryLimit times already, when
// they are archived. See Acknowledge.
func (c *ShareConsumer) Release(ctx context.Context, recs ...ShareRecord) error {
	return c.Acknowledge(ctx, share.Release, recs...)
}

// Reject archives records that cannot be processed (and copies them to
// the dead letter topic). See Acknowledge.
func (c *ShareConsumer) Reject(ctx context.Context, recs ...ShareRecord) error {
	return c.Acknowledge(ctx, share.Reject, recs...)
}

// Renew keeps records locked to this consumer for another lock duration.
// See Acknowledge.
func (c *ShareConsumer) Renew(ctx context.Context, recs ...ShareRecord) error {
	return c.Acknowledge(ctx, share.Renew, recs...)
}

// Acknowledge acknowledges records with one type, durably when it returns.
// The records of each partition are acknowledged all or none: if one is
// not this consumer's (share.ErrInvalidRecordState: never delivered to it,
// acknowledged already, or its lock expired), none of that partition's is,
// and nothing changes. Partitions are acknowledged one after another; the
// error names those that failed.
func (c *ShareConsumer) Acknowledge(ctx context.Context, t share.AckType, recs ...ShareRecord) error {
	if t == share.Gap || t < 0 || t > share.Renew {
		return fmt.Errorf("%w: acknowledgement type %d", ErrInvalidConfig, t)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	byPart := map[shareKey][]int64{}
	for _, r := range recs {
		k := shareKey{c.cfg.Group, r.Topic, r.Partition}
		byPart[k] = append(byPart[k], r.Offset)
	}
	var errs []error
	for _, k := range slices.SortedFunc(maps.Keys(byPart), func(a, b shareKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	}) {
		if err := c.acknowledge(ctx, k, byPart[k], t); err != nil {
			errs = append(errs, fmt.Errorf("%s-%d: %w", k.topic, k.partition, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("spool: share group %q: acknowledge: %w", c.cfg.Group, errors.Join(errs...))
	}
	return nil
}

func (c *ShareConsumer) acknowledge(ctx context.Context, k shareKey, offsets []int64, t share.AckType) error {
	slices.Sort(offsets)
	if len(slices.Compact(slices.Clone(offsets))) != len(offsets) {
		return fmt.Errorf("%w: a record acknowledged twice", share.ErrInvalidRequest)
	}
	var batches []share.AckBatch
	for _, o := range offsets {
		if n := len(batches); n > 0 && batches[n-1].Last == o-1 {
			batches[n-1].Last = o
			continue
		}
		batches = append(batches, share.AckBatch{First: o, Last: o, Types: []share.AckType{t}})
	}
	return c.b.ShareAcknowledge(ctx, k.group, c.member, TopicPartition{Topic: k.topic, Partition: k.partition}, batches)
}

// Close releases the records delivered to this consumer and not
// acknowledged, so that other consumers get them at once (rather than
// when their locks expire). Poll and the acknowledgements fail with
// ErrClosed afterwards.
func (c *ShareConsumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.b.shares.mu.Lock()
	if c.b.shares.local[c.cfg.Group]--; c.b.shares.local[c.cfg.Group] <= 0 {
		delete(c.b.shares.local, c.cfg.Group)
	}
	c.b.shares.mu.Unlock()
	if c.b.closed.Load() {
		return nil
	}
	return c.b.ShareReleaseMember(c.cfg.Group, c.member)
}

// newMemberID is a share consumer's member id: 16 random bytes, as
// Kafka's clients make theirs.
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
