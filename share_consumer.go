package spool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
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
	if cfg.Group == "" || len(cfg.Topics) == 0 || cfg.MaxRecords < 0 || cfg.FetchMaxWait < 0 {
		return nil, fmt.Errorf("%w: a share consumer needs Group and Topics: %+v", ErrInvalidConfig, cfg)
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
	return &ShareConsumer{b: b, cfg: cfg, member: newMemberID()}, nil
}

// parts are the share-partitions of the consumer's topics, with the
// partitions they read.
func (c *ShareConsumer) parts(ctx context.Context) ([]*sharePart, []readable, error) {
	var sps []*sharePart
	var logs []readable
	for _, name := range c.cfg.Topics {
		t, err := c.b.topic(ctx, name, false)
		if err != nil {
			if errors.Is(err, ErrUnknownTopic) {
				continue // not created yet
			}
			return nil, nil, err
		}
		for _, p := range t.partitions() {
			if p == nil {
				continue // offline
			}
			start := p.StartOffset
			if c.cfg.StartAtLatest {
				start = p.HighWatermark
			}
			sps = append(sps, c.b.sharePartition(shareKey{c.cfg.Group, name, p.ID()}, start))
			logs = append(logs, p)
		}
	}
	return sps, logs, nil
}

// Poll returns records delivered to this consumer, waiting up to
// FetchMaxWait (or until ctx ends) for at least one. Each is this
// consumer's until acknowledged or until its lock expires.
func (c *ShareConsumer) Poll(ctx context.Context) ([]ShareRecord, error) {
	deadline := time.Now().Add(c.cfg.FetchMaxWait)
	for {
		c.mu.Lock()
		closed, next := c.closed, c.next
		c.next++
		c.mu.Unlock()
		if closed || c.b.closed.Load() {
			return nil, ErrClosed
		}
		sps, logs, err := c.parts(ctx)
		if err != nil {
			return nil, err
		}
		var out []ShareRecord
		changed := make([]<-chan struct{}, 0, len(logs))
		var wakeAt time.Time
		for i := range sps {
			k := (next + i) % len(sps)
			changed = append(changed, logs[k].Changed())
			if len(out) >= c.cfg.MaxRecords {
				continue
			}
			got, lockDeadline, err := c.acquire(ctx, sps[k], logs[k], c.cfg.MaxRecords-len(out))
			if err != nil {
				return out, err
			}
			out = append(out, got...)
			if !lockDeadline.IsZero() && (wakeAt.IsZero() || lockDeadline.Before(wakeAt)) {
				wakeAt = lockDeadline
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil
		}
		if !wakeAt.IsZero() {
			// A lock expiring frees a record to deliver.
			wait = min(wait, max(time.Until(wakeAt), time.Millisecond))
		}
		timer := time.NewTimer(wait)
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		}
		for _, ch := range changed {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		chosen, _, _ := reflect.Select(cases)
		timer.Stop()
		if chosen == 0 {
			return nil, ctx.Err()
		}
	}
}

// acquire takes up to max records of one share-partition for the
// consumer, writing their delivery counts to the state topic first (so
// that a record that crashes the process still reaches the delivery
// limit). It also reports the partition's earliest lock deadline.
func (c *ShareConsumer) acquire(ctx context.Context, sp *sharePart, log readable, max int) ([]ShareRecord, time.Time, error) {
	sp.mu.Lock()
	locked := true
	defer func() {
		if locked {
			sp.mu.Unlock()
		}
	}()
	now := time.Now()
	if err := c.b.applyArchived(ctx, sp, sp.p.Expire(now)); err != nil {
		return nil, time.Time{}, err
	}
	if ls := log.StartOffset(); sp.p.Start() < ls {
		// Retention removed records the group had not finished.
		sp.p.Reset(ls)
	}
	from, ok := sp.p.FetchOffset()
	if !ok || from >= log.HighWatermark() {
		return nil, sp.p.NextDeadline(), nil
	}
	res, err := log.Fetch(ctx, from, 0, DefaultMaxPartitionFetchBytes, 0)
	if errors.Is(err, ErrOffsetOutOfRange) {
		sp.p.Reset(log.StartOffset())
		return nil, sp.p.NextDeadline(), nil
	}
	if err != nil {
		return nil, time.Time{}, c.b.wrapClosed(fmt.Errorf("spool: share group %q: fetch %s-%d at %d: %w", c.cfg.Group, sp.key.topic, sp.key.partition, from, err))
	}
	a := &assignment{tp: TopicPartition{Topic: sp.key.topic, Partition: sp.key.partition}, pos: from}
	recs, err := decodeRecords(nil, a, res.Batches, nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	present := make([]int64, len(recs))
	for i, r := range recs {
		present[i] = r.Offset
	}
	before := sp.p.Clone()
	ds := sp.p.Acquire(c.member, present, max, now)
	if len(ds) == 0 {
		return nil, sp.p.NextDeadline(), nil
	}
	// The new delivery counts are written but not waited for: a process
	// that crashes on a record (a poison record that kills its worker)
	// leaves the write in the operating system's hands, so the count still
	// reaches the limit; only an operating system crash can lose the last
	// counts, and then records are delivered once more than counted.
	if _, err := c.b.writeShare(ctx, sp); err != nil {
		sp.p = before
		return nil, time.Time{}, err
	}
	next := sp.p.NextDeadline()
	sp.mu.Unlock()
	locked = false
	out := make([]ShareRecord, 0, len(ds))
	j := 0
	for _, d := range ds {
		for recs[j].Offset != d.Offset {
			j++
		}
		out = append(out, ShareRecord{Record: recs[j], DeliveryCount: d.DeliveryCount})
	}
	return out, next, nil
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
	for _, k := range slices.SortedFunc(mapsKeys(byPart), func(a, b shareKey) int {
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

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (c *ShareConsumer) acknowledge(ctx context.Context, k shareKey, offsets []int64, t share.AckType) error {
	c.b.shares.mu.Lock()
	sp := c.b.shares.parts[k]
	c.b.shares.mu.Unlock()
	if sp == nil {
		return fmt.Errorf("%w: nothing was delivered from it", share.ErrInvalidRecordState)
	}
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
	sp.mu.Lock()
	locked := true
	defer func() {
		if locked {
			sp.mu.Unlock()
		}
	}()
	now := time.Now()
	// Locks that expired are released first: their records are no longer
	// this consumer's to acknowledge.
	if err := c.b.applyArchived(ctx, sp, sp.p.Expire(now)); err != nil {
		return err
	}
	before := sp.p.Clone()
	archived, err := sp.p.Acknowledge(c.member, batches, now)
	if err != nil {
		return err
	}
	if t == share.Renew {
		return nil // nothing durable changed
	}
	if err := c.b.deadLetter(ctx, sp, archived); err != nil {
		sp.p = before
		return err
	}
	wait, err := c.b.writeShare(ctx, sp)
	if err != nil {
		sp.p = before
		return err
	}
	// Wait for the disk without the lock: concurrent acknowledgements
	// share an fsync. A failure here leaves memory ahead of the disk; the
	// state topic's log has failed and saves nothing more, and a restart
	// loads what is durable - the acknowledgement was not confirmed, so
	// delivering those records again breaks no promise.
	sp.mu.Unlock()
	locked = false
	return wait()
}

// applyArchived dead-letters and saves what an expiry or release
// archived. Called with sp.mu held.
func (b *Broker) applyArchived(ctx context.Context, sp *sharePart, archived []share.Delivery) error {
	if len(archived) == 0 {
		return nil
	}
	if err := b.deadLetter(ctx, sp, archived); err != nil {
		return err
	}
	return b.saveShare(ctx, sp)
}

// deadLetter copies archived records to the group's dead letter topic,
// if it has one. Called with sp.mu held, before the archiving is saved:
// a crash between the two copies a record twice, never not at all.
func (b *Broker) deadLetter(ctx context.Context, sp *sharePart, archived []share.Delivery) error {
	b.shares.mu.Lock()
	dlq := b.shares.dead[sp.key.group]
	b.shares.mu.Unlock()
	if dlq == "" || len(archived) == 0 {
		return nil
	}
	t, err := b.topic(ctx, sp.key.topic, false)
	if err != nil {
		return err
	}
	p, err := t.partition(sp.key.partition)
	if err != nil {
		return err
	}
	for _, d := range archived {
		off := d.Offset
		res, err := p.Fetch(ctx, off, 0, 1, 0)
		if err != nil {
			return fmt.Errorf("spool: dead-lettering %s-%d at %d: %w", sp.key.topic, sp.key.partition, off, err)
		}
		a := &assignment{tp: TopicPartition{Topic: sp.key.topic, Partition: sp.key.partition}, pos: off}
		recs, err := decodeRecords(nil, a, res.Batches, nil)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(recs, func(r Record) bool { return r.Offset == off })
		if i < 0 {
			continue // compacted away meanwhile
		}
		r := recs[i]
		count := d.DeliveryCount
		hs := append(slices.Clone(r.Headers),
			Header{Key: "spool.dlq.topic", Value: []byte(r.Topic)},
			Header{Key: "spool.dlq.partition", Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
			Header{Key: "spool.dlq.offset", Value: strconv.AppendInt(nil, r.Offset, 10)},
			Header{Key: "spool.dlq.delivery.count", Value: strconv.AppendInt(nil, int64(count), 10)})
		if _, err := b.Produce(ctx, Record{Topic: dlq, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}); err != nil {
			return fmt.Errorf("spool: dead-lettering %s-%d at %d to %q: %w", sp.key.topic, sp.key.partition, off, dlq, err)
		}
	}
	return nil
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
	if c.b.closed.Load() {
		return nil
	}
	var errs []error
	for _, name := range c.cfg.Topics {
		for _, sp := range c.b.sharePartsOf(c.cfg.Group, name, max(c.b.partitionCount(name), 0)) {
			sp.mu.Lock()
			errs = append(errs, c.b.applyArchived(context.Background(), sp, sp.p.ReleaseMember(c.member)))
			sp.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}
