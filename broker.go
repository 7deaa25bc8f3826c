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
	"github.com/spoolmq/spool/txn"
)

// Broker is an embedded Kafka-style broker: a data directory of topics,
// each split into partitions, each partition a durable log. Produce to it
// with Produce or a Producer, read from it with a Consumer. Safe for
// concurrent use.
type Broker struct {
	dir    string
	opts   Options
	logger *slog.Logger
	fs     vfs.FS // the data directory's file layer (Options.fs)
	lock   io.Closer
	shares shareParts // share groups' share-partitions (share_state.go)

	// mu serialises changes to the topic set and the registry; readers
	// use the immutable snapshot in topics.
	mu     sync.Mutex
	topics atomic.Pointer[map[string]*topic]
	closed atomic.Bool

	partitioners sync.Map // topic name -> *lockedPartitioner, for Produce

	coord *group.Coordinator // consumer groups and committed offsets
	txc   *txn.Coordinator   // transactions (transactions.go)

	txnMu     sync.Mutex // a standalone broker's creation and load of __transaction_state
	txnLoaded bool       // guarded by txnMu

	cl       clusterBackend // in a cluster: the LocalCluster or the networked node; nil standalone
	nc       *netCluster    // a networked cluster node's own state
	node     *replica.Node  // in a cluster: this broker's replication
	pids     *producerIDs   // producer ids for idempotent producers
	rmu      sync.Mutex
	replicas map[TopicPartition]*partition.Partition // in a cluster: this broker's replicas; nil once closed

	metrics brokerMetrics // what Stats reads (stats.go)

	// sched runs the background work of every log the broker opens (its
	// partitions' flushes and checkpoints): one timer goroutine and a few
	// workers however many partitions there are. Close stops it after
	// the logs are closed.
	sched *log.Scheduler
	// files bounds the segment files open across every partition
	// (Options.MaxOpenSegmentFiles); nil: no bound.
	files *log.FilePool

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
	// parts holds the partitions by number; an offline one is nil.
	parts atomic.Pointer[[]*partition.Partition]
	// offline says why each nil partition could not be opened. Set by load
	// before the topic is published and never changed after: partitions
	// created later are created whole or not at all.
	offline map[int32]error
}

// partitions returns the partitions by number; an offline one is nil.
func (t *topic) partitions() []*partition.Partition { return *t.parts.Load() }

// online returns the partitions that are open, for work over all of them.
func (t *topic) online() []*partition.Partition {
	parts := t.partitions()
	out := make([]*partition.Partition, 0, len(parts))
	for _, p := range parts {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// partition returns partition n: ErrUnknownPartition if there is none,
// ErrPartitionOffline if it could not be opened.
func (t *topic) partition(n int32) (*partition.Partition, error) {
	parts := t.partitions()
	if n < 0 || int(n) >= len(parts) {
		return nil, fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, t.name, n, len(parts))
	}
	if parts[n] == nil {
		return nil, t.offlineError(n)
	}
	return parts[n], nil
}

// offlineError is the error reads and writes of offline partition n get.
func (t *topic) offlineError(n int32) error {
	return fmt.Errorf("%w: %s-%d could not be opened: %w", ErrPartitionOffline, t.name, n, t.offline[n])
}

// config is the topic's own settings. AlterTopicConfig replaces them while
// producers, the cleaner and describers read them.
func (t *topic) config() TopicConfig { return *t.cfg.Load() }

func (t *topic) setConfig(c TopicConfig) { t.cfg.Store(&c) }

// Open opens (or creates) the broker whose data lives in dir. Only one
// Broker, in one process, may use a directory at a time. A partition that
// cannot be opened does not fail Open: it is offline (see
// PartitionDescription.Offline) and the others serve. Open fails if the
// topic registry is damaged or missing, or a partition of the offsets
// topic cannot be opened.
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
	b := &Broker{dir: dir, opts: opts, logger: opts.Logger, fs: opts.fs, lock: lk, sched: log.NewScheduler(0),
		bgStop: make(chan struct{}), bgDone: make(chan struct{})}
	if opts.MaxOpenSegmentFiles > 0 {
		b.files = log.NewFilePool(opts.MaxOpenSegmentFiles)
	}
	empty := map[string]*topic{}
	b.topics.Store(&empty)
	b.coord = group.NewCoordinator(group.Options{
		Store:                 offsetStore{b},
		MinSessionTimeout:     opts.GroupMinSessionTimeout,
		MaxSessionTimeout:     opts.GroupMaxSessionTimeout,
		InitialRebalanceDelay: opts.GroupInitialRebalanceDelay,
		OffsetsRetention:      opts.OffsetsRetention,
		Owns:                  func(g string) error { return b.CheckGroupCoordinator(g) },
		Logger:                opts.Logger,
		PartitionCount:        b.partitionCount,
		ShareMemberGone: func(g, m string) {
			if err := b.ShareReleaseMember(g, m); err != nil {
				b.logger.Warn("releasing a share group member's records", "group", g, "member", m, "err", err)
			}
		},
		ConsumerSessionTimeout:    opts.GroupConsumerSessionTimeout,
		ConsumerHeartbeatInterval: opts.GroupConsumerHeartbeatInterval,
		TopicNames:                b.userTopics,
	})
	b.txc, err = b.newTxnCoordinator()
	if err != nil {
		b.coord.Close()
		b.sched.Close()
		lk.Close()
		return nil, err
	}
	if opts.Node != nil {
		err = b.openNetNode()
	} else {
		err = b.load()
		if err == nil {
			err = b.loadOffsets()
		}
		if err == nil {
			err = b.loadShares()
		}
		if err == nil {
			b.pids, err = openProducerIDs(dir)
		}
		if err == nil && b.snapshot()[TransactionStateTopic] != nil {
			_, err = b.txnStateTopic(context.Background())
		}
		if err == nil && opts.Cluster != nil {
			b.cl = opts.Cluster
			err = b.cl.join(b)
		}
	}
	if err != nil {
		b.coord.Close()
		b.txc.Close()
		b.closePartitions()
		b.sched.Close()
		lk.Close()
		return nil, err
	}
	go b.background()
	return b, nil
}

// load reads the registry, opens every partition, and removes what deleted
// topics and interrupted creations left behind.
//
// A partition that cannot be opened (a damaged log, a full disk, a
// directory that belongs to another topic) is offline: the broker serves
// the others, and that one answers ErrPartitionOffline with the reason
// until the broker is reopened. Kafka takes a whole log directory offline;
// a partition is spool's unit. What the broker as a whole cannot be sure
// of still refuses Open: a damaged or missing registry (which partitions
// exist at all is then unknown), and a partition of __consumer_offsets
// (the group coordinator loads every group's offsets at Open; a group
// whose offsets were missing would have its consumers reset their
// positions instead of waiting).
func (b *Broker) load() error {
	// A registry write that a crash cut short left its temporary file.
	if err := os.Remove(filepath.Join(b.dir, registryFile+".tmp")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	reg, err := readRegistry(b.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := clusterNodeDirError(b.dir); err != nil {
			return err
		}
		dirs, err := partitionDirNames(b.dir)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		if len(dirs) > 0 {
			return errNoRegistry(b.dir, dirs)
		}
		if err := writeRegistryFS(b.fs, b.dir, registry{}); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	topics := map[string]*topic{}
	var slots []openSlot
	for _, rt := range reg.Topics {
		id, err := ParseTopicID(rt.ID)
		if err != nil {
			return fmt.Errorf("%w: %v", errBadRegistry, err)
		}
		t := &topic{name: rt.Name, id: id, created: rt.Created, internal: rt.Internal}
		t.setConfig(fromStored(rt.Config, 0))
		parts := make([]*partition.Partition, max(rt.Partitions, 0))
		t.parts.Store(&parts)
		topics[t.name] = t
		for i := range parts {
			slots = append(slots, openSlot{t: t, n: int32(i)})
		}
	}
	b.topics.Store(&topics) // so that a failed Open closes what it opened
	b.openRegisteredAll(slots)
	// In registry order, whatever order the opens finished in: the same
	// partitions offline, logged in the same order, and the same error,
	// as opening them one by one would give. Every partition opened is
	// published first, so that a failed Open closes them all.
	var failed error
	for _, sl := range slots {
		t := sl.t
		if sl.err == nil {
			t.partitions()[sl.n] = sl.p
			continue
		}
		if t.internal {
			if failed == nil {
				failed = sl.err
			}
			continue
		}
		if t.offline == nil {
			t.offline = map[int32]error{}
		}
		t.offline[sl.n] = sl.err
		b.logger.Error("partition offline: it could not be opened; serving the other partitions",
			"topic", t.name, "partition", sl.n, "err", sl.err)
	}
	if failed != nil {
		return failed
	}
	return b.removeLeftovers(topics)
}

// removeLeftovers deletes partition directories of deleted topics and of
// creations that did not finish: those renamed for deletion, those being
// created (named for creation), and those whose partition.metadata names a
// topic ID the registry does not have in that place (a crash between the
// registry update and the rename of a deletion, or between the creation of
// partitions and the registry update). A registered partition's directory
// is never removed, even if it could not be opened. Directories without
// metadata are left alone, with a warning. spool check (CheckDataDir)
// reports the same decisions (leftover).
func (b *Broker) removeLeftovers(topics map[string]*topic) error {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return err
	}
	owned := func(tn string, n int32, id TopicID) bool {
		t := topics[tn]
		return t != nil && t.id == id && n < int32(len(t.partitions()))
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(b.dir, name)
		if !e.IsDir() {
			continue
		}
		if isDeletedDir(name) || isCreatingDir(name) {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		tn, n, ok := parsePartitionDir(name)
		if !ok {
			continue
		}
		if t := topics[tn]; t != nil && n < int32(len(t.partitions())) {
			continue // registered; if it did not open, it is offline
		}
		remove, id, err := leftover(p, name, owned)
		if err != nil {
			b.logger.Warn("partition directory without readable metadata; leaving it", "dir", p, "err", err)
			continue
		}
		if !remove {
			continue
		}
		b.logger.Info("removing the partition directory of a deleted topic or an unfinished creation", "dir", p, "topic_id", id)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
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
// An offline partition gives ErrPartitionOffline.
//
// On a broker in a cluster it is this broker's replica of a replicated
// topic's partition (ErrUnknownPartition if it holds none): a follower's
// replica lags its leader, and writing to it directly breaks replication.
func (b *Broker) Partition(topicName string, n int32) (*partition.Partition, error) {
	return b.route(topicName).partition(topicName, n)
}

// CheckPartition reports whether partition n of a topic exists: nil, or
// an error wrapping ErrUnknownTopic or ErrUnknownPartition. In a cluster it
// asks the cluster's metadata, not this broker's replicas (Partition): a
// group coordinator takes offsets for every partition of the cluster, most
// of which it holds no replica of once the cluster has more brokers than
// the topic has replicas. An offline partition exists.
func (b *Broker) CheckPartition(topicName string, n int32) error {
	if b.closed.Load() {
		return ErrClosed
	}
	count := b.partitionCount(topicName)
	switch {
	case count < 0:
		return fmt.Errorf("%w: %q", ErrUnknownTopic, topicName)
	case n < 0 || n >= count:
		return fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, topicName, n, count)
	}
	return nil
}

func (s soloStore) partition(topicName string, n int32) (*partition.Partition, error) {
	t, err := s.b.topic(context.Background(), topicName, false)
	if err != nil {
		return nil, err
	}
	return t.partition(n)
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
// defaults. Creation is all or nothing: when a file operation fails (a full
// disk) it returns an error wrapping ErrStorage, the topic is not
// registered and none of its files are left; the same call succeeds once
// the cause is gone. A crash part of the way is undone by the next Open
// (see newPartitions).
func (b *Broker) CreateTopic(ctx context.Context, name string, cfg TopicConfig) error {
	if internalTopic(name) && !noForward(ctx) {
		// Only the broker creates it - in a cluster, any node asking the
		// controller through its controller listener (ControllerOnly).
		return fmt.Errorf("%w: %q is internal", ErrInvalidTopic, name)
	}
	return b.route(name).createTopic(ctx, name, cfg)
}

func (s soloStore) createTopic(ctx context.Context, name string, cfg TopicConfig) error {
	b := s.b
	if rf := b.effective(cfg).ReplicationFactor; rf > 1 {
		return fmt.Errorf("%w: ReplicationFactor %d needs a cluster (Options.Cluster)", ErrInvalidConfig, rf)
	}
	if m := b.effective(cfg).MinInSyncReplicas; m > 1 {
		return fmt.Errorf("%w: MinInSyncReplicas %d: a standalone broker has one replica per partition", ErrInvalidConfig, m)
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

	// The partitions first, then the registry: see newPartitions.
	parts, err := b.newPartitions(t, 0, n)
	if err != nil {
		return b.creationFailed("create topic", name, 0, n, err)
	}
	t.parts.Store(&parts)
	topics := cloneMap(old)
	topics[name] = t
	if err := b.commitRegistry(b.registryLocked(old), b.registryLocked(topics), t, 0, n, parts); err != nil {
		return b.creationFailed("create topic", name, 0, n, err)
	}
	b.topics.Store(&topics)
	return nil
}

// DeleteTopic deletes a topic and its data. The topic leaves the registry
// first; its partition directories are then renamed aside and removed. A
// crash in between is finished on the next Open.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	err := b.route(name).deleteTopic(ctx, name)
	if err == nil {
		b.metrics.topics.Delete(name) // a topic created again under the name starts from zero
	}
	return err
}

func (s soloStore) deleteTopic(ctx context.Context, name string) error {
	b := s.b
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
	if err := writeRegistryFS(b.fs, b.dir, b.registryLocked(topics)); err != nil {
		return err
	}
	b.topics.Store(&topics)
	var errs []error
	for i, p := range t.partitions() {
		if p != nil {
			errs = append(errs, p.Close())
		}
		dir := partitionDir(b.dir, t.name, int32(i))
		aside := dir + "." + t.id.String() + deleteSuffix
		if err := os.Rename(dir, aside); err != nil {
			if p != nil || !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		errs = append(errs, os.RemoveAll(aside))
	}
	errs = append(errs, vfs.Default.SyncDir(b.dir))
	return errors.Join(errs...)
}

// CreatePartitions grows a topic to total partitions. Existing partitions
// keep their data; keyed records produced from now on spread over all of
// them (so a key may move partition, as in Kafka). Like CreateTopic it is
// all or nothing: on an error wrapping ErrStorage the topic keeps its
// partitions and no file of the new ones is left.
func (b *Broker) CreatePartitions(ctx context.Context, name string, total int32) error {
	return b.route(name).createPartitions(ctx, name, total)
}

func (s soloStore) createPartitions(ctx context.Context, name string, total int32) error {
	b := s.b
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
	added, err := b.newPartitions(t, have, total)
	if err != nil {
		return b.creationFailed("create partitions of", name, have, total, err)
	}
	prev := b.registryLocked(b.snapshot())
	next := b.registryLocked(b.snapshot())
	for i := range next.Topics {
		if next.Topics[i].Name == name {
			next.Topics[i].Partitions = total
		}
	}
	if err := b.commitRegistry(prev, next, t, have, total, added); err != nil {
		return b.creationFailed("create partitions of", name, have, total, err)
	}
	parts := append(slices.Clone(t.partitions()), added...)
	t.parts.Store(&parts)
	return nil
}

// Topics lists the topic names, sorted.
func (b *Broker) Topics() []string {
	var names []string
	for _, st := range b.stores() {
		names = append(names, st.topicNames()...)
	}
	sort.Strings(names)
	return names
}

// userTopics lists the topics a regular-expression subscription may
// match: all but the internal ones, as Kafka excludes them.
func (b *Broker) userTopics() []string {
	return slices.DeleteFunc(b.Topics(), internalTopic)
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
	Partition int32
	// Offline, if not nil, is why the partition could not be opened when
	// the broker was (a damaged log, a full disk): it serves no reads or
	// writes (ErrPartitionOffline) until the broker is reopened, which
	// tries again. Its offsets and sizes are then unknown (zero), it has
	// no leader (-1) and its ISR is empty.
	Offline       error
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
	// OfflineReplicas are the replicas on brokers that are down (fenced,
	// or gone): in a networked cluster only.
	OfflineReplicas []int32
}

// DescribeTopic describes a topic and its partitions.
func (b *Broker) DescribeTopic(name string) (TopicDescription, error) {
	return b.route(name).describe(name)
}

func (s soloStore) describe(name string) (TopicDescription, error) {
	b := s.b
	t, err := b.topic(context.Background(), name, false)
	if err != nil {
		return TopicDescription{}, err
	}
	parts := t.partitions()
	d := TopicDescription{Name: t.name, ID: t.id, Internal: t.internal, Config: b.effective(t.config())}
	d.Config.Partitions = int32(len(parts))
	for i, p := range parts {
		if p == nil {
			d.Partitions = append(d.Partitions, PartitionDescription{
				Partition: int32(i), Offline: t.offline[int32(i)],
				Leader: -1, Replicas: []int32{b.opts.NodeID}, ISR: []int32{},
			})
			continue
		}
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
	parts := b.replicaPartitions() // in a cluster each replica cleans its own log, as Kafka's do
	for _, t := range b.snapshot() {
		parts = append(parts, t.online()...)
	}
	compacts := map[string]bool{}
	for _, p := range parts {
		if b.closed.Load() {
			return
		}
		c, ok := compacts[p.Topic()]
		if !ok {
			_, eff, err := b.route(p.Topic()).settings(p.Topic())
			c = err == nil && eff.CleanupPolicy.compacts()
			compacts[p.Topic()] = c
		}
		if !c {
			continue
		}
		if _, err := b.compactPartition(p, force); err != nil && !errors.Is(err, log.ErrClosed) {
			b.logger.Warn("compaction failed", "topic", p.Topic(), "partition", p.ID(), "err", err)
		}
	}
}

// Compact cleans every partition of a compacted topic now, whatever its
// dirty ratio, and reports what was done, summed over the partitions. An
// offline partition is skipped and reported in the error.
func (b *Broker) Compact(ctx context.Context, topicName string) (log.CleanStats, error) {
	return b.route(topicName).compact(ctx, topicName)
}

func (s soloStore) compact(ctx context.Context, topicName string) (log.CleanStats, error) {
	b := s.b
	var sum log.CleanStats
	t, err := b.topic(ctx, topicName, false)
	if err != nil {
		return sum, err
	}
	if !b.effective(t.config()).CleanupPolicy.compacts() {
		return sum, fmt.Errorf("%w: %q has cleanup.policy %s", ErrInvalidConfig, topicName, b.effective(t.config()).CleanupPolicy)
	}
	var offline []error
	for i, p := range t.partitions() {
		if p == nil {
			offline = append(offline, t.offlineError(int32(i)))
		}
	}
	sum, err = b.cleanNow(ctx, t.online())
	if err != nil {
		return sum, err
	}
	return sum, errors.Join(offline...)
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
		all = append(all, tparts{t.name, t.online()})
	}
	all = append(all, tparts{"", b.replicaPartitions()}) // none unless in a cluster
	for _, t := range all {
		for _, p := range t.parts {
			if b.closed.Load() {
				return
			}
			if err := b.applyRetention(p); err != nil && !errors.Is(err, log.ErrClosed) {
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
	for _, st := range b.stores() {
		cerr = errors.Join(cerr, st.leave())
	}
	close(b.bgStop)
	<-b.bgDone
	b.coord.Close()
	b.txc.Close()
	err := errors.Join(cerr, b.closePartitions())
	b.sched.Close() // after the logs: each made its last flush itself
	if lerr := b.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

func (b *Broker) closePartitions() error {
	var errs []error
	for _, t := range b.snapshot() {
		for _, p := range t.online() {
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
