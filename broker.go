package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/replica"
)

// Broker is an embedded Kafka-style broker: a data directory of topics,
// each split into partitions, each partition a durable log. Produce to it
// with Produce or a Producer, read from it with a Consumer. Safe for
// concurrent use.
type Broker struct {
	dir    string
	opts   Options
	logger *slog.Logger
	lock   io.Closer

	// mu serialises changes to the topic set and the registry; readers
	// use the immutable snapshot in topics.
	mu     sync.Mutex
	topics atomic.Pointer[map[string]*topic]
	closed atomic.Bool

	partitioners sync.Map // topic name -> *lockedPartitioner, for Produce

	coord *group.Coordinator // consumer groups and committed offsets

	node     *replica.Node // in a cluster: this broker's replication
	rmu      sync.Mutex
	replicas map[TopicPartition]*partition.Partition // in a cluster: this broker's replicas; nil once closed

	bgStop chan struct{}
	bgDone chan struct{}
}

// topic is one topic's state. parts grows with CreatePartitions; readers
// load the current slice.
type topic struct {
	name     string
	id       TopicID
	cfg      atomic.Pointer[TopicConfig] // the topic's own settings (zero fields: defaults); see config
	created  time.Time
	internal bool // __consumer_offsets
	parts    atomic.Pointer[[]*partition.Partition]
}

func (t *topic) partitions() []*partition.Partition { return *t.parts.Load() }

// config is the topic's own settings. AlterTopicConfig replaces them while
// producers, the cleaner and describers read them.
func (t *topic) config() TopicConfig { return *t.cfg.Load() }

func (t *topic) setConfig(c TopicConfig) { t.cfg.Store(&c) }

// Open opens (or creates) the broker whose data lives in dir. Only one
// Broker, in one process, may use a directory at a time.
func Open(dir string, opts Options) (*Broker, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lk, err := vfs.Default.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("spool: open %s: %w", dir, err)
	}
	b := &Broker{dir: dir, opts: opts, logger: opts.Logger, lock: lk, bgStop: make(chan struct{}), bgDone: make(chan struct{})}
	empty := map[string]*topic{}
	b.topics.Store(&empty)
	b.coord = group.NewCoordinator(group.Options{
		Store:                 offsetStore{b},
		MinSessionTimeout:     opts.GroupMinSessionTimeout,
		MaxSessionTimeout:     opts.GroupMaxSessionTimeout,
		InitialRebalanceDelay: opts.GroupInitialRebalanceDelay,
		OffsetsRetention:      opts.OffsetsRetention,
		Logger:                opts.Logger,
	})
	err = b.load()
	if err == nil {
		err = b.loadOffsets()
	}
	if err == nil && opts.Cluster != nil {
		err = b.joinCluster()
	}
	if err != nil {
		b.coord.Close()
		b.closePartitions()
		lk.Close()
		return nil, err
	}
	go b.background()
	return b, nil
}

// load reads the registry, opens every partition, and removes what deleted
// topics left behind.
func (b *Broker) load() error {
	reg, err := readRegistry(b.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if dirs := b.partitionDirs(); len(dirs) > 0 {
			// Never guess which directories are data: refuse.
			return fmt.Errorf("%w: %s has partition directories (%s, ...) but no %s", errBadRegistry, b.dir, dirs[0], registryFile)
		}
		if err := writeRegistry(b.dir, registry{}); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	topics := map[string]*topic{}
	for _, rt := range reg.Topics {
		id, err := ParseTopicID(rt.ID)
		if err != nil {
			return fmt.Errorf("%w: %v", errBadRegistry, err)
		}
		t := &topic{name: rt.Name, id: id, created: rt.Created, internal: rt.Internal}
		t.setConfig(fromStored(rt.Config, 0))
		empty := []*partition.Partition{}
		t.parts.Store(&empty)
		topics[t.name] = t
		b.topics.Store(&topics)
		if err := b.openPartitions(t, rt.Partitions); err != nil {
			return err
		}
	}
	b.topics.Store(&topics)
	return b.removeLeftovers(topics)
}

// partitionDirs lists the data dir's entries that look like partitions.
func (b *Broker) partitionDirs() []string {
	entries, _ := os.ReadDir(b.dir)
	var out []string
	for _, e := range entries {
		if _, _, ok := parsePartitionDir(e.Name()); ok && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeLeftovers deletes partition directories of deleted topics: those
// renamed for deletion, and those whose partition.metadata names a topic ID
// the registry no longer has (a crash between the registry update and the
// rename). Directories without metadata are left alone, with a warning.
func (b *Broker) removeLeftovers(topics map[string]*topic) error {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(b.dir, name)
		if !e.IsDir() {
			continue
		}
		if len(name) > len(deleteSuffix) && name[len(name)-len(deleteSuffix):] == deleteSuffix {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		tn, n, ok := parsePartitionDir(name)
		if !ok {
			continue
		}
		id, err := readPartitionMeta(p)
		if err != nil {
			b.logger.Warn("partition directory without readable metadata; leaving it", "dir", p, "err", err)
			continue
		}
		if t := topics[tn]; t != nil && t.id == id && n < int32(len(t.partitions())) {
			continue
		}
		b.logger.Info("removing the partition of a deleted topic", "dir", p, "topic_id", id)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// openPartitions opens (creating) partitions [len(current), n) of t.
func (b *Broker) openPartitions(t *topic, n int32) error {
	cfg := b.effective(t.config())
	parts := slices.Clone(t.partitions())
	for i := int32(len(parts)); i < n; i++ {
		dir := partitionDir(b.dir, t.name, i)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if id, err := readPartitionMeta(dir); errors.Is(err, os.ErrNotExist) {
			if err := writePartitionMeta(dir, t.id); err != nil {
				return err
			}
		} else if err != nil {
			return err
		} else if id != t.id {
			return fmt.Errorf("spool: %s belongs to topic id %s, not %s's %s", dir, id, t.name, t.id)
		}
		lo := b.logOptions(cfg)
		if t.internal {
			lo.IndexMaxBytes = offsetsTopicIndexBytes // many small partitions
		}
		p, err := partition.Open(dir, t.name, i, partition.Options{Log: lo})
		if err != nil {
			return fmt.Errorf("spool: open %s-%d: %w", t.name, i, err)
		}
		parts = append(parts, p)
		t.parts.Store(&parts)
	}
	return vfs.Default.SyncDir(b.dir)
}

func (b *Broker) snapshot() map[string]*topic { return *b.topics.Load() }

// topic returns the named topic, creating it if allowed and asked to.
func (b *Broker) topic(ctx context.Context, name string, create bool) (*topic, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if t := b.snapshot()[name]; t != nil {
		return t, nil
	}
	if !create || !b.opts.AutoCreateTopics.on(true) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	err := b.CreateTopic(ctx, name, TopicConfig{})
	if err != nil && !errors.Is(err, ErrTopicExists) {
		return nil, err
	}
	if t := b.snapshot()[name]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
}

// Partition returns partition n of a topic, for direct use of its log.
//
// On a broker in a cluster it is this broker's replica of a replicated
// topic's partition (ErrUnknownPartition if it holds none): a follower's
// replica lags its leader, and writing to it directly breaks replication.
func (b *Broker) Partition(topicName string, n int32) (*partition.Partition, error) {
	if b.clustered(topicName) {
		b.rmu.Lock()
		p := b.replicas[TopicPartition{Topic: topicName, Partition: n}]
		b.rmu.Unlock()
		if p == nil {
			return nil, fmt.Errorf("%w: broker %d holds no replica of %s-%d", ErrUnknownPartition, b.opts.NodeID, topicName, n)
		}
		return p, nil
	}
	t, err := b.topic(context.Background(), topicName, false)
	if err != nil {
		return nil, err
	}
	parts := t.partitions()
	if n < 0 || int(n) >= len(parts) {
		return nil, fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, topicName, n, len(parts))
	}
	return parts[n], nil
}

// registryLocked builds the registry from the current topics. Called with
// mu held.
func (b *Broker) registryLocked(topics map[string]*topic) registry {
	var r registry
	for _, t := range topics {
		r.Topics = append(r.Topics, registryTopic{
			Name: t.name, ID: t.id.String(), Partitions: int32(len(t.partitions())),
			Config: toStored(t.config()), Created: t.created, Internal: t.internal,
		})
	}
	sort.Slice(r.Topics, func(i, j int) bool { return r.Topics[i].Name < r.Topics[j].Name })
	return r
}

// CreateTopic creates a topic. Zero fields of cfg take the broker's
// defaults. The topic is in the registry, on stable storage, before any of
// its partitions is created; a crash in between is finished on the next
// Open.
func (b *Broker) CreateTopic(ctx context.Context, name string, cfg TopicConfig) error {
	if name == OffsetsTopic {
		return fmt.Errorf("%w: %q is internal", ErrInvalidTopic, name)
	}
	if b.clustered(name) {
		return b.createReplicatedTopic(ctx, name, cfg)
	}
	if rf := b.effective(cfg).ReplicationFactor; rf > 1 {
		return fmt.Errorf("%w: ReplicationFactor %d needs a cluster (Options.Cluster)", ErrInvalidConfig, rf)
	}
	return b.createTopic(ctx, name, cfg, false)
}

func (b *Broker) createTopic(ctx context.Context, name string, cfg TopicConfig, internal bool) error {
	if err := ValidTopicName(name); err != nil {
		return err
	}
	// Check the log options the partitions will open with too, so that a
	// topic is never recorded that its partitions cannot open.
	if err := b.CheckTopicConfig(cfg); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	old := b.snapshot()
	if old[name] != nil {
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	}
	t := &topic{name: name, id: newTopicID(), created: time.Now().UTC(), internal: internal}
	n := b.effective(cfg).Partitions
	own := cfg
	own.Partitions = 0 // the registry records the count separately
	t.setConfig(own)
	empty := []*partition.Partition{}
	t.parts.Store(&empty)

	topics := cloneMap(old)
	topics[name] = t
	reg := b.registryLocked(topics)
	for i := range reg.Topics {
		if reg.Topics[i].Name == name {
			reg.Topics[i].Partitions = n
		}
	}
	if err := writeRegistry(b.dir, reg); err != nil {
		return err
	}
	if err := b.openPartitions(t, n); err != nil {
		// The registry has the topic; the next Open creates what is
		// missing. Publish what exists so it can be deleted.
		b.topics.Store(&topics)
		return err
	}
	b.topics.Store(&topics)
	return nil
}

// DeleteTopic deletes a topic and its data. The topic leaves the registry
// first; its partition directories are then renamed aside and removed. A
// crash in between is finished on the next Open.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	if b.clustered(name) && b.partitionCount(name) >= 0 {
		return fmt.Errorf("spool: %s on replicated topic %q: %w", "DeleteTopic", name, errors.ErrUnsupported)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	old := b.snapshot()
	t := old[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	topics := cloneMap(old)
	delete(topics, name)
	if err := writeRegistry(b.dir, b.registryLocked(topics)); err != nil {
		return err
	}
	b.topics.Store(&topics)
	var errs []error
	for _, p := range t.partitions() {
		errs = append(errs, p.Close())
		aside := p.Dir() + "." + t.id.String() + deleteSuffix
		if err := os.Rename(p.Dir(), aside); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.RemoveAll(aside))
	}
	errs = append(errs, vfs.Default.SyncDir(b.dir))
	return errors.Join(errs...)
}

// CreatePartitions grows a topic to total partitions. Existing partitions
// keep their data; keyed records produced from now on spread over all of
// them (so a key may move partition, as in Kafka).
func (b *Broker) CreatePartitions(ctx context.Context, name string, total int32) error {
	if b.clustered(name) && b.partitionCount(name) >= 0 {
		return fmt.Errorf("spool: %s on replicated topic %q: %w", "CreatePartitions", name, errors.ErrUnsupported)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	t := b.snapshot()[name]
	if t == nil {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	have := int32(len(t.partitions()))
	if total <= have {
		return fmt.Errorf("%w: %q has %d partitions; partitions can only be added (asked for %d)", ErrInvalidConfig, name, have, total)
	}
	reg := b.registryLocked(b.snapshot())
	for i := range reg.Topics {
		if reg.Topics[i].Name == name {
			reg.Topics[i].Partitions = total
		}
	}
	if err := writeRegistry(b.dir, reg); err != nil {
		return err
	}
	return b.openPartitions(t, total)
}

// Topics lists the topic names, sorted.
func (b *Broker) Topics() []string {
	var names []string
	for n := range b.snapshot() {
		names = append(names, n)
	}
	if b.opts.Cluster != nil {
		names = append(names, b.clusterTopics()...)
	}
	sort.Strings(names)
	return names
}

// TopicDescription describes a topic.
type TopicDescription struct {
	Name       string
	ID         TopicID
	Internal   bool        // __consumer_offsets
	Config     TopicConfig // effective: every default filled in
	Partitions []PartitionDescription
}

// PartitionDescription describes one partition.
type PartitionDescription struct {
	Partition     int32
	StartOffset   int64 // the first readable offset
	EndOffset     int64 // the offset the next record will get
	HighWatermark int64 // consumers read below this
	LeaderEpoch   int32
	Size          int64 // bytes of log on disk
	Segments      int
	// CorruptBatches counts the damaged batches reads of this replica
	// have found since it was opened (log.Stats): none was returned as
	// data. Non-zero means a disk is damaging data; see spool check.
	CorruptBatches int64
	// Leader is the broker leading the partition (-1: none, while its ISR
	// is down); Replicas the brokers holding it, the first preferred as
	// leader; ISR those in sync. A standalone broker is all three.
	Leader   int32
	Replicas []int32
	ISR      []int32
}

// DescribeTopic describes a topic and its partitions.
func (b *Broker) DescribeTopic(name string) (TopicDescription, error) {
	if b.clustered(name) {
		return b.describeReplicated(name)
	}
	t, err := b.topic(context.Background(), name, false)
	if err != nil {
		return TopicDescription{}, err
	}
	parts := t.partitions()
	d := TopicDescription{Name: t.name, ID: t.id, Internal: t.internal, Config: b.effective(t.config())}
	d.Config.Partitions = int32(len(parts))
	for _, p := range parts {
		d.Partitions = append(d.Partitions, PartitionDescription{
			Partition: p.ID(), StartOffset: p.StartOffset(), EndOffset: p.EndOffset(),
			HighWatermark: p.HighWatermark(), LeaderEpoch: p.LeaderEpoch(),
			Size: p.Log().Size(), Segments: p.Log().NumSegments(), CorruptBatches: p.Log().Stats().CorruptBatches,
			Leader: b.opts.NodeID, Replicas: []int32{b.opts.NodeID}, ISR: []int32{b.opts.NodeID},
		})
	}
	return d, nil
}

// background applies retention and age-based rolls to every partition
// every RetentionCheckInterval.
func (b *Broker) background() {
	defer close(b.bgDone)
	t := time.NewTicker(b.opts.RetentionCheckInterval)
	defer t.Stop()
	cleaner := time.NewTicker(b.opts.CleanerBackoff)
	defer cleaner.Stop()
	for {
		select {
		case <-b.bgStop:
			return
		case <-t.C:
			b.maintain()
		case <-cleaner.C:
			b.clean(false)
		}
	}
}

// clean runs the cleaner over every partition of the compacted topics,
// forced or when due.
func (b *Broker) clean(force bool) {
	for _, t := range b.snapshot() {
		if !b.effective(t.config()).CleanupPolicy.compacts() {
			continue
		}
		for _, p := range t.partitions() {
			if b.closed.Load() {
				return
			}
			if _, err := p.Log().Clean(force); err != nil && !errors.Is(err, log.ErrClosed) {
				b.logger.Warn("compaction failed", "topic", t.name, "partition", p.ID(), "err", err)
			}
		}
	}
}

// Compact cleans every partition of a compacted topic now, whatever its
// dirty ratio, and reports what was done, summed over the partitions.
func (b *Broker) Compact(ctx context.Context, topicName string) (log.CleanStats, error) {
	if b.clustered(topicName) && b.partitionCount(topicName) >= 0 {
		return log.CleanStats{}, fmt.Errorf("spool: %s on replicated topic %q: %w", "Compact", topicName, errors.ErrUnsupported)
	}
	var sum log.CleanStats
	t, err := b.topic(ctx, topicName, false)
	if err != nil {
		return sum, err
	}
	if !b.effective(t.config()).CleanupPolicy.compacts() {
		return sum, fmt.Errorf("%w: %q has cleanup.policy %s", ErrInvalidConfig, topicName, b.effective(t.config()).CleanupPolicy)
	}
	for _, p := range t.partitions() {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		st, err := p.Log().Clean(true)
		if err != nil {
			return sum, err
		}
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
	return sum, nil
}

// Groups is the broker's group coordinator: consumer groups and their
// committed offsets, for tools and for the Kafka protocol server.
func (b *Broker) Groups() *group.Coordinator { return b.coord }

// maintain runs one round of retention and age-based rolls, on the
// broker's topics and, in a cluster, on its replicas (each replica applies
// retention to its own log, as Kafka's do).
func (b *Broker) maintain() {
	type tparts struct {
		name  string
		parts []*partition.Partition
	}
	var all []tparts
	for _, t := range b.snapshot() {
		all = append(all, tparts{t.name, t.partitions()})
	}
	if b.opts.Cluster != nil {
		all = append(all, tparts{"", b.replicaPartitions()})
	}
	for _, t := range all {
		for _, p := range t.parts {
			if b.closed.Load() {
				return
			}
			if _, err := p.Log().ApplyRetention(); err != nil && !errors.Is(err, log.ErrClosed) {
				b.logger.Warn("retention failed", "topic", p.Topic(), "partition", p.ID(), "err", err)
			}
			if _, err := p.Log().RollIfOld(); err != nil && !errors.Is(err, log.ErrClosed) {
				b.logger.Warn("segment roll failed", "topic", p.Topic(), "partition", p.ID(), "err", err)
			}
			if err := p.Epochs().TruncateFromStart(p.StartOffset()); err != nil {
				b.logger.Warn("leader-epoch cache update failed", "topic", p.Topic(), "partition", p.ID(), "err", err)
			}
		}
	}
}

// Close flushes and closes every partition (each records a clean shutdown)
// and releases the data directory. Producers and consumers of the broker
// fail afterwards with ErrClosed.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed.Swap(true) {
		b.mu.Unlock()
		return ErrClosed
	}
	b.mu.Unlock()
	var cerr error
	if b.opts.Cluster != nil {
		cerr = b.leaveCluster()
	}
	close(b.bgStop)
	<-b.bgDone
	b.coord.Close()
	err := errors.Join(cerr, b.closePartitions())
	if lerr := b.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

func (b *Broker) closePartitions() error {
	var errs []error
	for _, t := range b.snapshot() {
		for _, p := range t.partitions() {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// Dir is the data directory.
func (b *Broker) Dir() string { return b.dir }

func cloneMap(m map[string]*topic) map[string]*topic {
	out := make(map[string]*topic, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
