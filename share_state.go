package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/share"
	"github.com/spoolmq/spool/txn"
)

// Share groups' delivery state lives in the internal compacted topic
// __share_group_state, as Kafka's share coordinator keeps it: one record
// per change of a share-partition, keyed by (group, topic, partition), so
// that compaction keeps each one's latest. A share-partition's records go
// to partition abs(javaHash("group:topic:partition")) % n. The value is a
// share.Partition snapshot (see package share); the key:
//
//	int16 version=0 | string group | string topic | int32 partition
//
// A share group's settings (ShareGroupConfig) are a record of their own,
// in the partition of abs(javaHash(group)) % n:
//
//	key:   int16 version=1 | string group
//	value: int16 version=0 | string auto.offset.reset
//
// Kafka's own records there (ShareSnapshot, ShareUpdate) have another
// layout: Kafka's tools cannot read spool's.

// ShareStateTopic is the internal topic of share groups' delivery state.
const ShareStateTopic = "__share_group_state"

type shareKey struct {
	group, topic string
	partition    int32
}

func (k shareKey) String() string { return fmt.Sprintf("%s:%s:%d", k.group, k.topic, k.partition) }

func encodeShareKey(k shareKey) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = appendString(b, k.group)
	b = appendString(b, k.topic)
	return binary.BigEndian.AppendUint32(b, uint32(k.partition))
}

// decodeShareKey parses a key: a share-partition's (config false) or a
// group's settings' (config true, k.topic "").
func decodeShareKey(b []byte) (k shareKey, config bool, err error) {
	r := offsetReader{b: b}
	v := r.int16()
	switch {
	case r.err != nil:
	case v == 0:
		k = shareKey{group: r.string(), topic: r.string(), partition: r.int32()}
	case v == 1:
		k, config = shareKey{group: r.string()}, true
	default:
		return shareKey{}, false, fmt.Errorf("%w: share key version %d", errBadOffsetRecord, v)
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = errBadOffsetRecord
	}
	return k, config, r.err
}

// ShareGroupConfig is a share group's settings (Kafka's group configs, set
// with IncrementalAlterConfigs on resource type GROUP).
type ShareGroupConfig struct {
	// AutoOffsetReset is where a share-partition the group never consumed
	// starts (share.auto.offset.reset): "latest" (Kafka's default: only
	// records produced from then on) or "earliest".
	AutoOffsetReset string
}

func encodeShareConfig(group string, cfg ShareGroupConfig) (key, value []byte) {
	key = appendString(binary.BigEndian.AppendUint16(nil, 1), group)
	value = appendString(binary.BigEndian.AppendUint16(nil, 0), cfg.AutoOffsetReset)
	return key, value
}

func decodeShareConfig(b []byte) (ShareGroupConfig, error) {
	r := offsetReader{b: b}
	if v := r.int16(); r.err == nil && v != 0 {
		return ShareGroupConfig{}, fmt.Errorf("%w: share group config version %d", errBadOffsetRecord, v)
	}
	cfg := ShareGroupConfig{AutoOffsetReset: r.string()}
	if r.err == nil && (len(r.b) > 0 || cfg.AutoOffsetReset != "latest" && cfg.AutoOffsetReset != "earliest") {
		r.err = errBadOffsetRecord
	}
	return cfg, r.err
}

// ShareGroupConfig returns a share group's settings (defaults for a group
// that set none).
func (b *Broker) ShareGroupConfig(group string) ShareGroupConfig {
	b.shares.mu.Lock()
	defer b.shares.mu.Unlock()
	if cfg, ok := b.shares.configs[group]; ok {
		return cfg
	}
	return ShareGroupConfig{AutoOffsetReset: "latest"}
}

// SetShareGroupConfig sets a share group's settings, durably when it
// returns. AutoOffsetReset must be "latest" or "earliest"
// (ErrInvalidConfig).
func (b *Broker) SetShareGroupConfig(ctx context.Context, group string, cfg ShareGroupConfig) error {
	if group == "" {
		return fmt.Errorf("%w: a share group needs a name", ErrInvalidConfig)
	}
	if cfg.AutoOffsetReset != "latest" && cfg.AutoOffsetReset != "earliest" {
		return fmt.Errorf("%w: ShareGroupConfig.AutoOffsetReset = %q for share group %q: want latest or earliest (share.auto.offset.reset)",
			ErrInvalidConfig, cfg.AutoOffsetReset, group)
	}
	if b.opts.Node != nil || b.opts.Cluster != nil {
		return fmt.Errorf("spool: share group %q: share groups need a standalone broker: %w", group, errors.ErrUnsupported)
	}
	t, err := b.internalTopic(ctx, ShareStateTopic)
	if err != nil {
		return err
	}
	p, err := t.partition(txn.PartitionFor(group, len(t.partitions())))
	if err != nil {
		return err
	}
	b.shares.mu.Lock()
	defer b.shares.mu.Unlock()
	k, v := encodeShareConfig(group, cfg)
	if _, err := p.Append(record.Record{Key: k, Value: v}); err != nil {
		return fmt.Errorf("spool: saving share group %q's config: %w", group, err)
	}
	if b.shares.configs == nil {
		b.shares.configs = map[string]ShareGroupConfig{}
	}
	b.shares.configs[group] = cfg
	return nil
}

// shareParts are the broker's share-partitions, loaded from the state
// topic at open and created on first use.
type shareParts struct {
	mu    sync.Mutex
	parts map[shareKey]*sharePart
	// dead names, per group, the topic archived records go to (the last
	// one a consumer of the group named).
	dead map[string]string
	// configs are the groups' settings.
	configs map[string]ShareGroupConfig
	// local counts each group's open in-process ShareConsumers.
	local map[string]int
}

// sharePart is one share-partition and the lock that serializes its
// changes and their writes.
type sharePart struct {
	mu  sync.Mutex
	key shareKey
	p   *share.Partition
	// deleted: DeleteShareGroupOffsets removed it; a holder of a stale
	// reference must not save it again.
	deleted bool
}

func (b *Broker) shareConfig() share.Config {
	return share.Config{LockDuration: b.opts.ShareLockDuration, DeliveryLimit: b.opts.ShareDeliveryLimit, MaxInFlight: b.opts.ShareMaxInFlight}
}

// sharePartition returns a share-partition, creating it (starting at
// start()) if the group never consumed the partition.
func (b *Broker) sharePartition(k shareKey, start func() int64) *sharePart {
	s := &b.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parts == nil {
		s.parts = map[shareKey]*sharePart{}
	}
	sp := s.parts[k]
	if sp == nil {
		sp = &sharePart{key: k, p: share.New(b.shareConfig(), start())}
		s.parts[k] = sp
	}
	return sp
}

// saveShare writes a share-partition's snapshot to the state topic:
// durable, under the broker's flush policy, when it returns. Called with
// sp.mu held.
func (b *Broker) saveShare(ctx context.Context, sp *sharePart) error {
	wait, err := b.writeShare(ctx, sp)
	if err != nil {
		return err
	}
	return wait()
}

// writeShare writes a share-partition's snapshot to the state topic and
// returns at once, with the wait for it to be durable. Called with sp.mu
// held; the wait is meant to be made without it, so that the changes of
// many consumers share an fsync. Writes are durable in the order they
// were made: a change is never durable before one it followed.
func (b *Broker) writeShare(ctx context.Context, sp *sharePart) (wait func() error, err error) {
	if sp.deleted {
		return nil, fmt.Errorf("spool: share group %q's state of %s-%d was deleted", sp.key.group, sp.key.topic, sp.key.partition)
	}
	t, err := b.internalTopic(ctx, ShareStateTopic)
	if err != nil {
		return nil, err
	}
	p, err := t.partition(txn.PartitionFor(sp.key.String(), len(t.partitions())))
	if err != nil {
		return nil, err
	}
	wrap := func(err error) error {
		return fmt.Errorf("spool: saving share group %q's state of %s-%d: %w", sp.key.group, sp.key.topic, sp.key.partition, err)
	}
	batch, err := record.NewBatch([]record.Record{{Key: encodeShareKey(sp.key), Value: sp.p.Snapshot(), Timestamp: time.Now()}}, record.BatchOptions{})
	if err != nil {
		return nil, wrap(err)
	}
	_, pending, err := p.AppendTrustedNoWait(batch)
	if err != nil {
		return nil, wrap(err)
	}
	return func() error {
		if err := p.WaitDurable(pending); err != nil {
			return wrap(err)
		}
		return nil
	}, nil
}

// internalTopic returns an internal topic of the broker's own (the share
// state topic), creating it, compacted, on first use.
func (b *Broker) internalTopic(ctx context.Context, name string) (*topic, error) {
	if t := b.snapshot()[name]; t != nil {
		return t, nil
	}
	cfg := offsetsTopicConfig(b.opts.OffsetsTopicPartitions, 0)
	cfg.MinInSyncReplicas = 0
	if err := b.createTopic(ctx, name, cfg, true); err != nil && !errors.Is(err, ErrTopicExists) {
		return nil, err
	}
	if t := b.snapshot()[name]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
}

// loadShares restores every share-partition from the state topic: the
// latest snapshot of each wins. A record that does not decode fails the
// open, as a damaged offsets topic does: dropping it would deliver
// acknowledged records again.
func (b *Broker) loadShares() error {
	t := b.snapshot()[ShareStateTopic]
	if t == nil {
		return nil
	}
	latest := map[shareKey][]byte{}
	configs := map[string]ShareGroupConfig{}
	for _, p := range t.partitions() {
		err := readBatchesTo(p, p.HighWatermark(), func(_ record.Batch, r *record.Record) error {
			k, config, err := decodeShareKey(r.Key)
			if err == nil && config {
				var cfg ShareGroupConfig
				if cfg, err = decodeShareConfig(r.Value); err == nil {
					configs[k.group] = cfg
				}
			}
			if err != nil {
				return fmt.Errorf("%s-%d at %d: %w", ShareStateTopic, p.ID(), r.Offset, err)
			}
			if !config {
				latest[k] = r.Value
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("spool: loading share groups: %w", err)
		}
	}
	s := &b.shares
	s.parts, s.configs = map[shareKey]*sharePart{}, configs
	for k, v := range latest {
		if v == nil {
			continue // deleted
		}
		sp, err := share.Restore(b.shareConfig(), v)
		if err != nil {
			return fmt.Errorf("spool: loading share group %q's state of %s-%d: %w", k.group, k.topic, k.partition, err)
		}
		s.parts[k] = &sharePart{key: k, p: sp}
	}
	return nil
}

// shareParts lists a group's share-partitions of a topic that exist.
func (b *Broker) sharePartsOf(groupID, topic string, n int32) []*sharePart {
	s := &b.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sharePart
	for i := range n {
		if sp := s.parts[shareKey{groupID, topic, i}]; sp != nil {
			out = append(out, sp)
		}
	}
	return out
}
