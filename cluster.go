package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/replica"
)

// ReplicasDir is the subdirectory of a clustered broker's data directory
// that holds its replicas of replicated partitions, one <topic>-<partition>
// directory each, laid out as any partition's.
const ReplicasDir = "replicas"

// ClusterOptions configure a LocalCluster. Zero values take Kafka's
// defaults.
type ClusterOptions struct {
	// SessionTimeout fences a broker that stops sending heartbeats
	// (broker.session.timeout.ms). Default 9s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often brokers send them
	// (broker.heartbeat.interval.ms). Default 2s.
	HeartbeatInterval time.Duration
	// ReplicaLagTime drops a follower from the ISR when it has not caught
	// up for this long (replica.lag.time.max.ms). Default 30s.
	ReplicaLagTime time.Duration
	// FetchMaxWait is how long a leader holds a follower's fetch that finds
	// nothing new (replica.fetch.wait.max.ms). Default 500ms.
	FetchMaxWait time.Duration
	// FetchBackoff bounds a follower's wait before retrying after an error
	// (replica.fetch.backoff.ms). Default 1s.
	FetchBackoff time.Duration
	// PreferredElectionInterval moves leadership back to each partition's
	// preferred replica this often (leader.imbalance.check.interval.seconds).
	// Default 5 minutes; negative: never.
	PreferredElectionInterval time.Duration
	// Logger receives the controller's logs, and the replicas' of a
	// broker without an Options.Logger of its own. Default: none.
	Logger *slog.Logger
}

// LocalCluster joins Brokers in one process into a replicated cluster: an
// in-process controller (replica.LocalController) elects leaders and keeps
// each partition's in-sync replica set, and an in-process network
// (replica.LocalNetwork) carries followers' fetches. Open each Broker with
// Options.Cluster set to it and its own NodeID and data directory; a topic
// created on any of them is placed on ReplicationFactor of them, and
// producers and consumers of any broker work through each partition's
// current leader.
//
// It is the in-process form of a cluster; brokers in different processes
// need a networked controller and links, which the replica package's
// interfaces leave room for.
type LocalCluster struct {
	opts ClusterOptions
	ctrl *replica.LocalController
	net  *replica.LocalNetwork

	mu      sync.RWMutex
	brokers map[int32]*Broker
}

// NewLocalCluster starts an in-process cluster's controller and network.
// Close stops them once its brokers are closed.
func NewLocalCluster(opts ClusterOptions) *LocalCluster {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &LocalCluster{
		opts:    opts,
		ctrl:    replica.NewLocalController(replica.ControllerConfig{SessionTimeout: opts.SessionTimeout, PreferredElectionInterval: opts.PreferredElectionInterval, Logger: opts.Logger}),
		net:     replica.NewLocalNetwork(),
		brokers: map[int32]*Broker{},
	}
}

// Controller is the cluster's controller.
func (c *LocalCluster) Controller() *replica.LocalController { return c.ctrl }

// Close stops the controller.
func (c *LocalCluster) Close() error { return c.ctrl.Close() }

func (c *LocalCluster) broker(id int32) *Broker {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.brokers[id]
}

// leader returns the replica that leads topic-n now.
func (c *LocalCluster) leader(ctx context.Context, topic string, n int32) (*replica.ReplicaSet, error) {
	_, states, err := c.ctrl.Topic(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	if n < 0 || int(n) >= len(states) {
		return nil, fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, topic, n, len(states))
	}
	st := states[n]
	if st.Leader < 0 {
		return nil, fmt.Errorf("%w: %s-%d", replica.ErrLeaderNotAvailable, topic, n)
	}
	b := c.broker(st.Leader)
	if b == nil || b.node == nil {
		return nil, fmt.Errorf("%w: broker %d", replica.ErrUnreachable, st.Leader)
	}
	rs, ok := b.node.ReplicaSet(topic, n)
	if !ok || !rs.IsLeader() {
		return nil, fmt.Errorf("%w: %s-%d is not led by broker %d yet", replica.ErrNotLeader, topic, n, st.Leader)
	}
	return rs, nil
}

// retriable reports whether a produce or fetch against a replicated
// partition may succeed if tried again, at the leader found afresh.
func retriable(err error) bool {
	return errors.Is(err, replica.ErrNotLeader) || errors.Is(err, replica.ErrLeaderNotAvailable) ||
		errors.Is(err, replica.ErrUnreachable) || errors.Is(err, replica.ErrNotEnoughReplicas) ||
		errors.Is(err, replica.ErrNotEnoughReplicasAfterAppend) || errors.Is(err, replica.ErrTimedOut) ||
		errors.Is(err, replica.ErrClosed) || errors.Is(err, log.ErrClosed)
}

// clusterBackend is what a Broker in a cluster reaches the cluster
// through: the in-process LocalCluster, or a networked node's quorum and
// peers (netCluster). Everything above it - producers, consumers, topic
// administration, the Kafka server - is the same for both.
type clusterBackend interface {
	// join makes b a node of the cluster; leave moves its leaderships away
	// and stops its replicas.
	join(b *Broker) error
	leave(b *Broker) error
	// topic returns a topic's spec and its partitions' states.
	topic(ctx context.Context, name string) (replica.TopicSpec, []replica.PartitionState, error)
	topicNames() []string
	// createTopic creates a topic with its own settings own (eff: with the
	// broker's defaults) and returns once the topic is usable from b.
	createTopic(ctx context.Context, name string, own, eff TopicConfig) error
	deleteTopic(ctx context.Context, name string) error
	createPartitions(ctx context.Context, name string, total int32) error
	alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error
	// leader returns the replica in this process that leads a partition.
	leader(ctx context.Context, topic string, n int32) (*replica.ReplicaSet, error)
	// replicatesOffsets reports whether __consumer_offsets is one of the
	// cluster's topics (else each broker keeps its own).
	replicatesOffsets() bool
	// remoteLeader and remoteReader reach a partition's leader in another
	// process (nil if there is none such).
	remoteLeader(topic string, n, broker, epoch int32) leaderHandle
	remoteReader(tp TopicPartition, broker, epoch int32) readable
	// topicIdentity is a topic's id (zero if the cluster keeps none) and
	// which brokers are down.
	topicIdentity(name string) (TopicID, func(broker int32) bool)
	// topicNamed finds a topic by id.
	topicNamed(id TopicID) (string, bool)
}

// topicNamed implements clusterBackend: a LocalCluster keeps no topic ids.
func (c *LocalCluster) topicNamed(TopicID) (string, bool) { return "", false }

// topicIdentity implements clusterBackend: a LocalCluster keeps no topic
// ids, and its brokers' liveness is the controller's business.
func (c *LocalCluster) topicIdentity(string) (TopicID, func(int32) bool) {
	return TopicID{}, func(int32) bool { return false }
}

// join implements clusterBackend.
func (c *LocalCluster) join(b *Broker) error {
	c.mu.Lock()
	if c.brokers[b.opts.NodeID] != nil {
		c.mu.Unlock()
		return fmt.Errorf("%w: node %d is already open in this cluster", ErrInvalidConfig, b.opts.NodeID)
	}
	c.brokers[b.opts.NodeID] = b
	c.mu.Unlock()
	b.replicas = map[TopicPartition]*partition.Partition{}
	node, err := replica.NewNode(replica.NodeConfig{
		ID:                b.opts.NodeID,
		Controller:        c.ctrl,
		Network:           c.net,
		Open:              b.openReplica,
		ReplicaLagTime:    c.opts.ReplicaLagTime,
		HeartbeatInterval: c.opts.HeartbeatInterval,
		FetchMaxWait:      c.opts.FetchMaxWait,
		FetchBackoff:      c.opts.FetchBackoff,
		Logger:            c.replicaLogger(b),
	})
	if err == nil {
		b.node = node
		c.net.Register(b.opts.NodeID, node)
		err = node.Start(context.Background())
	}
	if err != nil {
		c.leave(b)
	}
	return err
}

// replicaLogger is where a node's replicas log their role and ISR changes:
// the broker's Options.Logger if it has one, so that a broker's operator
// logs are in one place, else ClusterOptions.Logger.
func (c *LocalCluster) replicaLogger(b *Broker) *slog.Logger {
	if b.logger.Handler() != slog.DiscardHandler {
		return b.logger
	}
	return c.opts.Logger
}

// leave implements clusterBackend: the node shuts down (leaderships move
// away first) and its replicas close.
func (c *LocalCluster) leave(b *Broker) error {
	var errs []error
	if b.node != nil {
		errs = append(errs, b.node.Close())
		c.net.Unregister(b.opts.NodeID)
	}
	c.mu.Lock()
	if c.brokers[b.opts.NodeID] == b {
		delete(c.brokers, b.opts.NodeID)
	}
	c.mu.Unlock()
	b.rmu.Lock()
	defer b.rmu.Unlock()
	for _, p := range b.replicas {
		errs = append(errs, p.Close())
	}
	b.replicas = nil
	return errors.Join(errs...)
}

// openReplica opens this broker's replica of a partition the controller
// placed here.
func (b *Broker) openReplica(st replica.PartitionState) (*partition.Partition, replica.Config, error) {
	spec, _, err := b.opts.Cluster.ctrl.Topic(context.Background(), st.Topic)
	if err != nil {
		return nil, replica.Config{}, err
	}
	own, err := decodeTopicSpec(spec)
	if err != nil {
		return nil, replica.Config{}, err
	}
	cfg := b.effective(own)
	dir := filepath.Join(b.dir, ReplicasDir, fmt.Sprintf("%s-%d", st.Topic, st.Partition))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, replica.Config{}, err
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	if b.replicas == nil {
		return nil, replica.Config{}, ErrClosed
	}
	p, err := b.openPartition(dir, st.Topic, st.Partition, partition.Options{Log: b.logOptions(cfg), Replicated: true})
	if err != nil {
		return nil, replica.Config{}, err
	}
	b.replicas[TopicPartition{Topic: st.Topic, Partition: st.Partition}] = p
	return p, replica.Config{MinInSyncReplicas: cfg.MinInSyncReplicas}, nil
}

// replicaPartitions lists this broker's replicas.
func (b *Broker) replicaPartitions() []*partition.Partition {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	out := make([]*partition.Partition, 0, len(b.replicas))
	for _, p := range b.replicas {
		out = append(out, p)
	}
	return out
}

func encodeTopicSpec(own TopicConfig) ([]byte, error) {
	own.Partitions = 0
	return json.Marshal(toStored(own))
}

func decodeTopicSpec(spec replica.TopicSpec) (TopicConfig, error) {
	var s topicConfig
	if len(spec.Config) > 0 {
		if err := json.Unmarshal(spec.Config, &s); err != nil {
			return TopicConfig{}, fmt.Errorf("spool: topic %q: bad settings from the controller: %w", spec.Name, err)
		}
	}
	cfg := fromStored(s, int32(spec.Partitions))
	cfg.ReplicationFactor = spec.ReplicationFactor
	cfg.UncleanLeaderElection = spec.UncleanLeaderElection
	return cfg, nil
}

// createReplicatedTopic creates a topic of the cluster.
func (b *Broker) createReplicatedTopic(ctx context.Context, name string, cfg TopicConfig) error {
	if err := ValidTopicName(name); err != nil {
		return err
	}
	if err := b.CheckTopicConfig(cfg); err != nil {
		return err
	}
	eff := b.effective(cfg)
	if eff.MinInSyncReplicas > eff.ReplicationFactor {
		return fmt.Errorf("%w: MinInSyncReplicas %d > ReplicationFactor %d: acks=all could never succeed", ErrInvalidConfig, eff.MinInSyncReplicas, eff.ReplicationFactor)
	}
	own := cfg
	own.MinInSyncReplicas = eff.MinInSyncReplicas // fixed at creation, as the placement is
	err := b.cl.createTopic(ctx, name, own, eff)
	switch {
	case errors.Is(err, replica.ErrTopicExists):
		return fmt.Errorf("%w: %q (%w)", ErrTopicExists, name, err)
	case errors.Is(err, replica.ErrNotEnoughBrokers), errors.Is(err, replica.ErrInvalidConfig):
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return err
}

// createTopic implements clusterBackend: through the controller, then it
// waits until every partition has a leader ready to take writes.
func (c *LocalCluster) createTopic(ctx context.Context, name string, own, eff TopicConfig) error {
	data, err := encodeTopicSpec(own)
	if err != nil {
		return err
	}
	_, err = c.ctrl.CreateTopic(ctx, replica.TopicSpec{Name: name, Partitions: int(eff.Partitions),
		ReplicationFactor: eff.ReplicationFactor, UncleanLeaderElection: eff.UncleanLeaderElection, Config: data})
	if err != nil {
		return err
	}
	for n := int32(0); n < eff.Partitions; n++ {
		for {
			if _, err := c.leader(ctx, name, n); err == nil {
				break
			}
			if err := sleepCtx(ctx, time.Millisecond); err != nil {
				return fmt.Errorf("spool: topic %q created, partition %d has no leader yet: %w", name, n, err)
			}
		}
	}
	return nil
}

// topic implements clusterBackend.
func (c *LocalCluster) topic(ctx context.Context, name string) (replica.TopicSpec, []replica.PartitionState, error) {
	return c.ctrl.Topic(ctx, name)
}

// topicNames implements clusterBackend.
func (c *LocalCluster) topicNames() []string { return c.ctrl.Topics() }

// replicatesOffsets implements clusterBackend: in one process each broker
// keeps its own committed offsets.
func (c *LocalCluster) replicatesOffsets() bool { return false }

func (c *LocalCluster) deleteTopic(ctx context.Context, name string) error {
	return fmt.Errorf("spool: %s on replicated topic %q in a LocalCluster: %w", "DeleteTopic", name, errors.ErrUnsupported)
}

func (c *LocalCluster) createPartitions(ctx context.Context, name string, total int32) error {
	return fmt.Errorf("spool: %s on replicated topic %q in a LocalCluster: %w", "CreatePartitions", name, errors.ErrUnsupported)
}

func (c *LocalCluster) alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error {
	return fmt.Errorf("spool: AlterTopicConfig on replicated topic %q in a LocalCluster: %w", name, errors.ErrUnsupported)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replicatedTopic returns a replicated topic's settings and partition
// states, creating the topic if asked and allowed.
func (b *Broker) replicatedTopic(ctx context.Context, name string, create bool) (TopicConfig, []replica.PartitionState, error) {
	if b.closed.Load() {
		return TopicConfig{}, nil, ErrClosed
	}
	spec, states, err := b.cl.topic(ctx, name)
	if err != nil && create && b.opts.AutoCreateTopics.on(true) {
		if cerr := b.createReplicatedTopic(ctx, name, TopicConfig{}); cerr != nil && !errors.Is(cerr, ErrTopicExists) {
			return TopicConfig{}, nil, cerr
		}
		spec, states, err = b.cl.topic(ctx, name)
		// Created by someone else just now: this node's view of the
		// cluster's metadata may be a moment behind.
		for wait := time.Millisecond; err != nil && wait < 5*time.Second; wait *= 2 {
			if serr := sleepCtx(ctx, wait); serr != nil {
				break
			}
			spec, states, err = b.cl.topic(ctx, name)
		}
	}
	if err != nil {
		return TopicConfig{}, nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	cfg, err := decodeTopicSpec(spec)
	return cfg, states, err
}

// describe describes a topic of the cluster, each partition as its leader
// sees it (offsets -1 where the leader is in another process).
func (s clusterStore) describe(name string) (TopicDescription, error) {
	b := s.b
	cfg, states, err := b.replicatedTopic(context.Background(), name, false)
	if err != nil {
		return TopicDescription{}, err
	}
	d := TopicDescription{Name: name, Config: b.effective(cfg), Internal: internalTopic(name)}
	d.Config.Partitions = int32(len(states))
	var offline func(int32) bool
	d.ID, offline = b.cl.topicIdentity(name)
	for _, st := range states {
		pd := PartitionDescription{Partition: st.Partition, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
			Replicas: st.Replicas, ISR: st.ISR, StartOffset: -1, EndOffset: -1, HighWatermark: -1, OfflineReplicas: []int32{}}
		for _, r := range st.Replicas {
			if offline(r) {
				pd.OfflineReplicas = append(pd.OfflineReplicas, r)
			}
		}
		if rs, err := b.cl.leader(context.Background(), name, st.Partition); err == nil {
			p := rs.Partition()
			pd.StartOffset, pd.EndOffset, pd.HighWatermark = p.StartOffset(), p.EndOffset(), p.HighWatermark()
			pd.Size, pd.Segments, pd.CorruptBatches = p.Log().Size(), p.Log().NumSegments(), p.Log().Stats().CorruptBatches
		}
		d.Partitions = append(d.Partitions, pd)
	}
	return d, nil
}

// leaderPartition is the current leader's replica of a replicated
// partition, for reading: in one process, a consumer reads the leader's
// partition directly, as it would fetch from the leader over the network.
func (b *Broker) leaderPartition(ctx context.Context, tp TopicPartition) (readable, error) {
	return b.readerFor(ctx, tp)
}

// wrapTopicErr maps the controller's topic errors to the broker's.
func (b *Broker) wrapTopicErr(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, replica.ErrUnknownTopic):
		return fmt.Errorf("%w: %q (%w)", ErrUnknownTopic, name, err)
	case errors.Is(err, replica.ErrTopicExists):
		return fmt.Errorf("%w: %q (%w)", ErrTopicExists, name, err)
	case errors.Is(err, replica.ErrNotEnoughBrokers), errors.Is(err, replica.ErrInvalidConfig):
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return err
}

// controllerBroker is the broker that answers for the cluster's in-process
// controller: the lowest-numbered one (-1 with none).
func (c *LocalCluster) controllerBroker() int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id := int32(-1)
	for b := range c.brokers {
		if id < 0 || b < id {
			id = b
		}
	}
	return id
}
