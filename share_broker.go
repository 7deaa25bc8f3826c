package spool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/share"
	"github.com/spoolmq/spool/txn"
)

// groupErrNonEmpty is the error of a share group change that needs the
// group empty.
var groupErrNonEmpty = group.ErrNonEmptyGroup

// The broker's share-group deliveries, under both the in-process
// ShareConsumer and the Kafka protocol's ShareFetch and ShareAcknowledge
// (package transport): records of a share-partition are acquired for a
// member, acknowledged by it, released when it goes.

// ShareAcquireOptions bound a ShareAcquire.
type ShareAcquireOptions struct {
	// MaxRecords bounds the records acquired in all; default 500.
	MaxRecords int
	// MaxBytes bounds the batch bytes read per partition; the first batch
	// is read whole. Default 1 MiB.
	MaxBytes int
	// MaxWait is how long to wait for a record when none is there.
	MaxWait time.Duration
	// StartAtLatest makes a share-partition the group never consumed
	// start at the partition's end (share.auto.offset.reset=latest)
	// rather than its start.
	StartAtLatest bool
}

// ShareFetched is what a ShareAcquire took from one partition: the batches
// it read - which may hold records that were not acquired, and control
// batches, that the caller skips - and the records acquired, by offset.
type ShareFetched struct {
	Topic     string
	Partition int32
	Batches   []byte
	Acquired  []share.Delivery
}

// ShareAcquire acquires records of a share group's partitions tps for
// member, in the order given, up to opts.MaxRecords in all, waiting up to
// opts.MaxWait (or until ctx ends) when there is none. Each acquired
// record is member's until it acknowledges it (ShareAcknowledge), its
// lock expires, or ShareReleaseMember. Partitions that do not exist are
// skipped. Share groups need a standalone broker (errors.ErrUnsupported on
// a cluster node).
func (b *Broker) ShareAcquire(ctx context.Context, group, member string, tps []TopicPartition, opts ShareAcquireOptions) ([]ShareFetched, error) {
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = DefaultShareMaxRecords
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxPartitionFetchBytes
	}
	deadline := time.Now().Add(opts.MaxWait)
	for {
		if b.closed.Load() {
			return nil, ErrClosed
		}
		var out []ShareFetched
		var changed []<-chan struct{}
		var wakeAt time.Time
		n := 0
		for _, tp := range tps {
			sp, log, err := b.shareOf(ctx, group, tp, opts.StartAtLatest)
			if err != nil {
				return out, err
			}
			if sp == nil {
				continue
			}
			changed = append(changed, log.Changed())
			if n >= opts.MaxRecords {
				continue
			}
			f, lockDeadline, err := b.shareAcquireOne(ctx, sp, log, member, opts.MaxRecords-n, opts.MaxBytes)
			if err != nil {
				return out, err
			}
			if len(f.Acquired) > 0 {
				out = append(out, f)
				n += len(f.Acquired)
			}
			if !lockDeadline.IsZero() && (wakeAt.IsZero() || lockDeadline.Before(wakeAt)) {
				wakeAt = lockDeadline
			}
		}
		if n > 0 {
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

// shareOf is a group's share-partition of tp and the partition it reads,
// creating the share-partition if needed; nil if the partition does not
// exist or is offline.
func (b *Broker) shareOf(ctx context.Context, group string, tp TopicPartition, latest bool) (*sharePart, readable, error) {
	if b.opts.Node != nil || b.opts.Cluster != nil {
		return nil, nil, fmt.Errorf("spool: share group %q: share groups need a standalone broker: %w", group, errors.ErrUnsupported)
	}
	t, err := b.topic(ctx, tp.Topic, false)
	if errors.Is(err, ErrUnknownTopic) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	parts := t.partitions()
	if tp.Partition < 0 || int(tp.Partition) >= len(parts) || parts[tp.Partition] == nil {
		return nil, nil, nil
	}
	p := parts[tp.Partition]
	start := p.StartOffset
	if latest {
		start = p.HighWatermark
	}
	return b.sharePartition(shareKey{group, tp.Topic, tp.Partition}, start), p, nil
}

// shareAcquireOne takes up to max records of one share-partition for
// member, writing their delivery counts to the state topic first (so that
// a record that crashes the process still reaches the delivery limit). It
// also reports the partition's earliest lock deadline.
func (b *Broker) shareAcquireOne(ctx context.Context, sp *sharePart, log readable, member string, max, maxBytes int) (ShareFetched, time.Time, error) {
	f := ShareFetched{Topic: sp.key.topic, Partition: sp.key.partition}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.deleted {
		return f, time.Time{}, nil
	}
	now := time.Now()
	if err := b.expireShare(ctx, sp, now); err != nil {
		return f, time.Time{}, err
	}
	// Retention removed records the group had not finished: they are
	// gone; what it finished past them stays done.
	sp.p.Trim(log.StartOffset())
	from, ok := sp.p.FetchOffset()
	if !ok || from >= log.HighWatermark() {
		return f, sp.p.NextDeadline(), nil
	}
	res, err := log.Fetch(ctx, from, 0, maxBytes, 0)
	if errors.Is(err, ErrOffsetOutOfRange) {
		sp.p.Trim(log.StartOffset())
		return f, sp.p.NextDeadline(), nil
	}
	if err != nil {
		return f, time.Time{}, b.wrapClosed(fmt.Errorf("spool: share group %q: fetch %s-%d at %d: %w", sp.key.group, sp.key.topic, sp.key.partition, from, err))
	}
	present, err := recordOffsets(res.Batches, from)
	if err != nil {
		return f, time.Time{}, err
	}
	before := sp.p.Clone()
	ds := sp.p.Acquire(member, from, present, max, now)
	if len(ds) == 0 {
		return f, sp.p.NextDeadline(), nil
	}
	// The new delivery counts are written but not waited for: a process
	// that crashes on a record (a poison record that kills its worker)
	// leaves the write in the operating system's hands, so the count still
	// reaches the limit; only an operating system crash can lose the last
	// counts, and then records are delivered once more than counted.
	if _, err := b.writeShare(ctx, sp); err != nil {
		sp.p = before
		return f, time.Time{}, err
	}
	f.Batches, f.Acquired = res.Batches, ds
	return f, sp.p.NextDeadline(), nil
}

// recordOffsets lists the offsets of the data records in batches, at or
// after from (control records are not records a consumer gets: they are
// gaps).
func recordOffsets(batches []byte, from int64) ([]int64, error) {
	a := &assignment{pos: from}
	recs, err := decodeRecords(nil, a, batches, nil)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out, nil
}

// ShareAcknowledge applies member's acknowledgements of a share-partition,
// all or none (share.ErrInvalidRecordState, share.ErrInvalidRequest: and
// nothing changes), durably when it returns. Records archived - rejected,
// or released at the delivery limit - are copied to the group's dead
// letter topic first, if it has one.
func (b *Broker) ShareAcknowledge(ctx context.Context, group, member string, tp TopicPartition, batches []share.AckBatch) error {
	b.shares.mu.Lock()
	sp := b.shares.parts[shareKey{group, tp.Topic, tp.Partition}]
	b.shares.mu.Unlock()
	if sp == nil {
		return fmt.Errorf("%w: nothing of %s-%d was delivered to the group", share.ErrInvalidRecordState, tp.Topic, tp.Partition)
	}
	sp.mu.Lock()
	locked := true
	defer func() {
		if locked {
			sp.mu.Unlock()
		}
	}()
	if sp.deleted {
		return fmt.Errorf("%w: the group's state of %s-%d was deleted", share.ErrInvalidRecordState, tp.Topic, tp.Partition)
	}
	now := time.Now()
	// Locks that expired are released first: their records are no longer
	// the member's to acknowledge.
	if err := b.expireShare(ctx, sp, now); err != nil {
		return err
	}
	before := sp.p.Clone()
	archived, err := sp.p.Acknowledge(member, batches, now)
	if err != nil {
		return err
	}
	renewOnly := true
	for _, bt := range batches {
		for _, t := range bt.Types {
			renewOnly = renewOnly && t == share.Renew
		}
	}
	if renewOnly {
		return nil // nothing durable changed
	}
	if err := b.deadLetter(ctx, sp, archived); err != nil {
		sp.p = before
		return err
	}
	wait, err := b.writeShare(ctx, sp)
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

// ShareReleaseMember releases every record member of group holds, in
// every share-partition (it left, or its session or connection ended), so
// that other members get them at once.
func (b *Broker) ShareReleaseMember(group, member string) error {
	if b.closed.Load() {
		return nil
	}
	b.shares.mu.Lock()
	var sps []*sharePart
	for k, sp := range b.shares.parts {
		if k.group == group {
			sps = append(sps, sp)
		}
	}
	b.shares.mu.Unlock()
	var errs []error
	for _, sp := range sps {
		sp.mu.Lock()
		if !sp.deleted {
			before := sp.p.Clone()
			if err := b.applyArchived(context.Background(), sp, sp.p.ReleaseMember(member)); err != nil {
				sp.p = before // the records stay the member's until their locks expire
				errs = append(errs, err)
			}
		}
		sp.mu.Unlock()
	}
	return errors.Join(errs...)
}

// ShareLockDuration is how long an acquired record stays with its member.
func (b *Broker) ShareLockDuration() time.Duration {
	return share.New(b.shareConfig(), 0).Config().LockDuration
}

// expireShare releases the records whose locks expired by now,
// dead-lettering and saving what that archives; if that fails the
// partition is as it was. Called with sp.mu held.
func (b *Broker) expireShare(ctx context.Context, sp *sharePart, now time.Time) error {
	if d := sp.p.NextDeadline(); d.IsZero() || !now.After(d) {
		return nil
	}
	before := sp.p.Clone()
	if err := b.applyArchived(ctx, sp, sp.p.Expire(now)); err != nil {
		sp.p = before
		return err
	}
	return nil
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

// ShareGroupOffsets returns a share group's start offset in each
// share-partition it has (DescribeShareGroupOffsets): every record below
// it is done.
func (b *Broker) ShareGroupOffsets(group string) map[TopicPartition]int64 {
	b.shares.mu.Lock()
	var sps []*sharePart
	for k, sp := range b.shares.parts {
		if k.group == group {
			sps = append(sps, sp)
		}
	}
	b.shares.mu.Unlock()
	out := make(map[TopicPartition]int64, len(sps))
	for _, sp := range sps {
		sp.mu.Lock()
		out[TopicPartition{Topic: sp.key.topic, Partition: sp.key.partition}] = sp.p.Start()
		sp.mu.Unlock()
	}
	return out
}

// AlterShareGroupOffsets moves a share group's start offsets
// (AlterShareGroupOffsets), forgetting what was in flight there; only
// while the group has no members (group.ErrNonEmptyGroup). Durable when
// it returns.
func (b *Broker) AlterShareGroupOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error {
	if b.shareGroupBusy(group) {
		return fmt.Errorf("spool: share group %q: %w", group, groupErrNonEmpty)
	}
	for tp, off := range offsets {
		if off < 0 {
			return fmt.Errorf("%w: share group %q: offset %d for %s-%d", ErrInvalidConfig, group, off, tp.Topic, tp.Partition)
		}
		if err := b.CheckPartition(tp.Topic, tp.Partition); err != nil {
			return err
		}
	}
	for _, tp := range slices.SortedFunc(maps.Keys(offsets), compareTopicPartitions) {
		sp, _, err := b.shareOf(ctx, group, tp, false)
		if err != nil {
			return err
		}
		if sp == nil {
			return fmt.Errorf("%w: %s-%d", ErrPartitionOffline, tp.Topic, tp.Partition)
		}
		sp.mu.Lock()
		before := sp.p.Clone()
		sp.p.Reset(offsets[tp])
		err = b.saveShare(ctx, sp)
		if err != nil {
			sp.p = before
		}
		sp.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// DeleteShareGroupOffsets forgets a share group's state of the topics'
// partitions (DeleteShareGroupOffsets): they start afresh, where the
// group's share.auto.offset.reset says. Only while the group has no
// members (group.ErrNonEmptyGroup). Durable when it returns.
func (b *Broker) DeleteShareGroupOffsets(ctx context.Context, group string, topics []string) error {
	if b.shareGroupBusy(group) {
		return fmt.Errorf("spool: share group %q: %w", group, groupErrNonEmpty)
	}
	b.shares.mu.Lock()
	var sps []*sharePart
	for k, sp := range b.shares.parts {
		if k.group == group && slices.Contains(topics, k.topic) {
			sps = append(sps, sp)
		}
	}
	b.shares.mu.Unlock()
	for _, sp := range sps {
		t, err := b.internalTopic(ctx, ShareStateTopic)
		if err != nil {
			return err
		}
		p, err := t.partition(txn.PartitionFor(sp.key.String(), len(t.partitions())))
		if err != nil {
			return err
		}
		// Under the share-partition's lock, so that no acknowledgement
		// writes a snapshot after the tombstone; marked deleted, so that
		// none writes one later through a stale reference.
		sp.mu.Lock()
		if _, err := p.Append(record.Record{Key: encodeShareKey(sp.key)}); err != nil { // a tombstone
			sp.mu.Unlock()
			return fmt.Errorf("spool: deleting share group %q's state of %s-%d: %w", group, sp.key.topic, sp.key.partition, err)
		}
		sp.deleted = true
		b.shares.mu.Lock()
		delete(b.shares.parts, sp.key)
		b.shares.mu.Unlock()
		sp.mu.Unlock()
	}
	return nil
}

// shareGroupBusy reports whether a share group has members: over the wire
// (the coordinator's), or in process (open ShareConsumers).
func (b *Broker) shareGroupBusy(group string) bool {
	b.shares.mu.Lock()
	local := b.shares.local[group]
	b.shares.mu.Unlock()
	return local > 0 || b.coord.IsShareGroup(group)
}

func compareTopicPartitions(a, b TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition - b.Partition)
}
