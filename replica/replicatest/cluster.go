// Package replicatest runs a replicated cluster of brokers in one process
// for tests, with faults on demand: crash a broker (keeping its files,
// optionally losing what it had not fsynced) and restart it, pause one, cut
// or delay the link between two in one direction.
//
// Each broker is a replica.Node with its own data directory, joined to the
// others by an in-process network and an in-process controller - the same
// parts a Broker uses, with a fault layer between them.
package replicatest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
)

// Options configure a Cluster. Zero values get defaults sized for tests:
// failures are noticed within a few hundred milliseconds.
type Options struct {
	// Dir holds one data directory per broker. Required.
	Dir string
	// Brokers is how many brokers, with ids 1..Brokers. Default 3.
	Brokers int
	// Flush is every log's flush policy. Default log.Sync.
	Flush log.FlushPolicy
	// SegmentBytes is every log's segment size. Default 64 KiB.
	SegmentBytes int64
	// MinInSyncReplicas for every partition. Default 1.
	MinInSyncReplicas int
	// ReplicaLagTime, SessionTimeout, HeartbeatInterval, FetchMaxWait and
	// FetchBackoff: defaults 200ms, 300ms, 50ms, 100ms, 50ms.
	ReplicaLagTime    time.Duration
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	FetchMaxWait      time.Duration
	FetchBackoff      time.Duration
	// FetchMaxBytes bounds a follower's fetch (the first batch comes
	// whole). Default 1 MiB.
	FetchMaxBytes int
	// Logger receives the brokers' and controller's logs. Default: none.
	Logger *slog.Logger
}

// Cluster is a set of brokers in one process. Safe for concurrent use.
type Cluster struct {
	opts Options
	ctrl *replica.LocalController
	base *replica.LocalNetwork
	net  *faultNetwork

	mu      sync.Mutex
	brokers map[int32]*broker
}

type broker struct {
	id    int32
	dir   string
	gate  *gate
	node  *replica.Node
	mu    sync.Mutex
	parts map[string]*partition.Partition
}

// New starts a cluster.
func New(opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: replicatest needs a Dir", replica.ErrInvalidConfig)
	}
	if opts.Brokers <= 0 {
		opts.Brokers = 3
	}
	if opts.Flush == (log.FlushPolicy{}) {
		opts.Flush = log.Sync
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 10
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.ReplicaLagTime, 200*time.Millisecond)
	def(&opts.SessionTimeout, 300*time.Millisecond)
	def(&opts.HeartbeatInterval, 50*time.Millisecond)
	def(&opts.FetchMaxWait, 100*time.Millisecond)
	def(&opts.FetchBackoff, 50*time.Millisecond)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{opts: opts, base: replica.NewLocalNetwork(), brokers: map[int32]*broker{}}
	c.ctrl = replica.NewLocalController(replica.ControllerConfig{SessionTimeout: opts.SessionTimeout, PreferredElectionInterval: -1, Logger: opts.Logger})
	c.net = &faultNetwork{base: c.base, gates: c.gate, cut: map[edge]bool{}, delay: map[edge]time.Duration{}, damage: map[edge]int{}}
	for id := int32(1); id <= int32(opts.Brokers); id++ {
		if err := c.start(id); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) gate(id int32) *gate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.brokers[id]; b != nil {
		return b.gate
	}
	return &gate{id: id, dead: true}
}

// start runs broker id on its data directory.
func (c *Cluster) start(id int32) error {
	b := &broker{id: id, dir: filepath.Join(c.opts.Dir, fmt.Sprintf("broker-%d", id)), gate: &gate{id: id}, parts: map[string]*partition.Partition{}}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	node, err := replica.NewNode(replica.NodeConfig{
		ID:                id,
		Controller:        gatedController{c.ctrl, b.gate},
		Network:           c.net,
		Open:              func(st replica.PartitionState) (*partition.Partition, replica.Config, error) { return c.open(b, st) },
		ReplicaLagTime:    c.opts.ReplicaLagTime,
		HeartbeatInterval: c.opts.HeartbeatInterval,
		FetchMaxWait:      c.opts.FetchMaxWait,
		FetchBackoff:      c.opts.FetchBackoff,
		FetchMaxBytes:     c.opts.FetchMaxBytes,
		Logger:            c.opts.Logger,
	})
	if err != nil {
		return err
	}
	b.node = node
	c.mu.Lock()
	c.brokers[id] = b
	c.mu.Unlock()
	c.base.Register(id, node)
	return node.Start(context.Background())
}

func (c *Cluster) open(b *broker, st replica.PartitionState) (*partition.Partition, replica.Config, error) {
	name := fmt.Sprintf("%s-%d", st.Topic, st.Partition)
	// Under b.mu, so that Crash (which kills the gate, then takes b.mu)
	// either finds the partition to close or stops it being opened.
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate.down() {
		return nil, replica.Config{}, fmt.Errorf("%w: broker %d is down", replica.ErrClosed, b.id)
	}
	p, err := partition.Open(filepath.Join(b.dir, name), st.Topic, st.Partition, partition.Options{
		Log:                             log.Options{Flush: c.opts.Flush, SegmentBytes: c.opts.SegmentBytes, RetentionTime: -1, RetentionCheckInterval: -1},
		Replicated:                      true,
		HighWatermarkCheckpointInterval: 10 * time.Millisecond,
	})
	if err != nil {
		return nil, replica.Config{}, err
	}
	b.parts[name] = p
	return p, replica.Config{MinInSyncReplicas: c.opts.MinInSyncReplicas}, nil
}

func (c *Cluster) broker(id int32) (*broker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.brokers[id]
	if b == nil {
		return nil, fmt.Errorf("replicatest: no broker %d", id)
	}
	return b, nil
}

// PartitionDir is where broker id keeps its replica of a partition: tests
// may change the files while the broker is down.
func (c *Cluster) PartitionDir(id int32, topic string, p int32) string {
	return filepath.Join(c.opts.Dir, fmt.Sprintf("broker-%d", id), fmt.Sprintf("%s-%d", topic, p))
}

// Controller is the cluster's controller.
func (c *Cluster) Controller() *replica.LocalController { return c.ctrl }

// Brokers lists the broker ids.
func (c *Cluster) Brokers() []int32 {
	ids := make([]int32, 0, c.opts.Brokers)
	for id := int32(1); id <= int32(c.opts.Brokers); id++ {
		ids = append(ids, id)
	}
	return ids
}

// Node returns broker id's node (nil while it is down).
func (c *Cluster) Node(id int32) *replica.Node {
	b, err := c.broker(id)
	if err != nil || b.gate.down() {
		return nil
	}
	return b.node
}

// Partition returns broker id's replica of a partition, if it has it open.
func (c *Cluster) Partition(id int32, topic string, p int32) (*partition.Partition, bool) {
	b, err := c.broker(id)
	if err != nil {
		return nil, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	part, ok := b.parts[fmt.Sprintf("%s-%d", topic, p)]
	return part, ok
}

// CreateTopic creates a topic and waits until every replica has its
// partitions and every partition a leader.
func (c *Cluster) CreateTopic(ctx context.Context, spec replica.TopicSpec) error {
	states, err := c.ctrl.CreateTopic(ctx, spec)
	if err != nil {
		return err
	}
	for _, st := range states {
		for _, id := range st.Replicas {
			for {
				if n := c.Node(id); n != nil {
					if rs, ok := n.ReplicaSet(st.Topic, st.Partition); ok && rs.State().LeaderEpoch >= st.LeaderEpoch && (id != st.Leader || rs.IsLeader()) {
						break
					}
				}
				if err := sleep(ctx, time.Millisecond); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Leader is the partition's leader according to the controller (-1 for
// none).
func (c *Cluster) Leader(topic string, p int32) (replica.PartitionState, error) {
	_, states, err := c.ctrl.Topic(context.Background(), topic)
	if err != nil {
		return replica.PartitionState{}, err
	}
	if int(p) >= len(states) {
		return replica.PartitionState{}, fmt.Errorf("%w: %s-%d", replica.ErrUnknownPartition, topic, p)
	}
	return states[p], nil
}

// Append sends one batch to broker id as a client would: it fails if the
// broker is down, waits if it is paused.
func (c *Cluster) Append(ctx context.Context, id int32, topic string, p int32, recs []record.Record, opts replica.AppendOptions) (int64, error) {
	b, err := c.broker(id)
	if err != nil {
		return 0, err
	}
	if err := b.gate.pass(ctx); err != nil {
		return 0, err
	}
	rs, ok := b.node.ReplicaSet(topic, p)
	if !ok {
		return 0, fmt.Errorf("%w: %s-%d on broker %d", replica.ErrNotLeader, topic, p, id)
	}
	batch, err := record.NewBatch(recs, record.BatchOptions{})
	if err != nil {
		return 0, err
	}
	opts.Trusted = true
	off, err := rs.Append(ctx, batch, opts)
	if gerr := b.gate.pass(ctx); gerr != nil {
		return 0, gerr // the answer is lost with the broker
	}
	return off, err
}

// Produce appends recs to the partition's current leader, retrying on
// ErrNotLeader, ErrLeaderNotAvailable and ErrUnreachable until ctx ends,
// as a producer does within its delivery timeout.
func (c *Cluster) Produce(ctx context.Context, topic string, p int32, recs []record.Record, opts replica.AppendOptions) (int64, error) {
	for {
		st, err := c.Leader(topic, p)
		if err != nil {
			return 0, err
		}
		if st.Leader >= 0 {
			off, err := c.Append(ctx, st.Leader, topic, p, recs, opts)
			if err == nil || !retriable(err) {
				return off, err
			}
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func retriable(err error) bool {
	return errors.Is(err, replica.ErrNotLeader) || errors.Is(err, replica.ErrUnreachable) || errors.Is(err, replica.ErrLeaderNotAvailable)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Crash kills broker id: its node stops without a word to the controller,
// its logs close as after a crash (with dropUnsynced, losing what they had
// not fsynced). Its files stay for Restart.
func (c *Cluster) Crash(id int32, dropUnsynced bool) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if b.gate.down() {
		return nil
	}
	b.gate.kill()
	c.base.Unregister(id)
	b.node.Halt()
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for name, p := range b.parts {
		if err := p.Crash(dropUnsynced); err != nil && !errors.Is(err, log.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	b.parts = map[string]*partition.Partition{}
	return errors.Join(errs...)
}

// Restart starts broker id again on its data directory, after Crash or
// Stop. It registers with the controller as a new incarnation.
func (c *Cluster) Restart(id int32) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if !b.gate.down() {
		return fmt.Errorf("replicatest: broker %d is running", id)
	}
	return c.start(id)
}

// Stop shuts broker id down cleanly (a controlled shutdown).
func (c *Cluster) Stop(id int32) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if b.gate.down() {
		return nil
	}
	err = b.node.Close()
	b.gate.kill()
	c.base.Unregister(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := []error{err}
	for _, p := range b.parts {
		errs = append(errs, p.Close())
	}
	b.parts = map[string]*partition.Partition{}
	return errors.Join(errs...)
}

// Running reports whether broker id is up (paused counts as up).
func (c *Cluster) Running(id int32) bool {
	b, err := c.broker(id)
	return err == nil && !b.gate.down()
}

// Pause freezes broker id: nothing it sends or is sent gets through, and
// the controller hears no heartbeat, until Resume.
func (c *Cluster) Pause(id int32) {
	if b, err := c.broker(id); err == nil {
		b.gate.pause()
	}
}

// Resume lets a paused broker go on where it stopped.
func (c *Cluster) Resume(id int32) {
	if b, err := c.broker(id); err == nil {
		b.gate.resume()
	}
}

// Cut loses every message from broker from to broker to (requests one
// way, responses the other) until Heal.
func (c *Cluster) Cut(from, to int32) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.cut[edge{from, to}] = true
}

// Delay holds every message from broker from to broker to for d.
func (c *Cluster) Delay(from, to int32, d time.Duration) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.delay[edge{from, to}] = d
}

// DamageFetches damages the next n fetch responses with records that
// broker from sends broker to (a leader's answers to its follower), as a
// faulty network card or memory would: a bit of the last batch flips on
// the way. Heal cancels the damage not yet done.
func (c *Cluster) DamageFetches(from, to int32, n int) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.damage[edge{from, to}] += n
}

// Damaged is how many fetch responses DamageFetches has damaged so far.
func (c *Cluster) Damaged() int {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.net.damaged
}

// Heal removes every cut, delay and pending damage and resumes every
// paused broker.
func (c *Cluster) Heal() {
	c.net.mu.Lock()
	c.net.cut = map[edge]bool{}
	c.net.delay = map[edge]time.Duration{}
	c.net.damage = map[edge]int{}
	c.net.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.brokers {
		b.gate.resume()
	}
}

// WaitConverged waits until the partition has a leader, every replica is
// running and in the ISR, and every replica's log ends at the leader's
// high watermark: nothing is left to replicate or commit.
func (c *Cluster) WaitConverged(ctx context.Context, topic string, p int32) error {
	for {
		ok, why := c.converged(topic, p)
		if ok {
			return nil
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("%s-%d did not converge: %s: %w", topic, p, why, err)
		}
	}
}

func (c *Cluster) converged(topic string, p int32) (bool, string) {
	st, err := c.Leader(topic, p)
	if err != nil {
		return false, err.Error()
	}
	if st.Leader < 0 {
		return false, "no leader"
	}
	if !sameMembers(st.ISR, st.Replicas) {
		return false, fmt.Sprintf("ISR %v of %v", st.ISR, st.Replicas)
	}
	lp, ok := c.Partition(st.Leader, topic, p)
	if !ok {
		return false, "leader has no partition"
	}
	hw := lp.HighWatermark()
	for _, id := range st.Replicas {
		rp, ok := c.Partition(id, topic, p)
		if !ok {
			return false, fmt.Sprintf("broker %d has no partition", id)
		}
		if rp.EndOffset() != hw || rp.HighWatermark() != hw {
			return false, fmt.Sprintf("broker %d ends at %d (hw %d), leader %d hw %d", id, rp.EndOffset(), rp.HighWatermark(), st.Leader, hw)
		}
	}
	return true, ""
}

func sameMembers(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Close stops every broker (as a crash: nothing waits for the controller)
// and the controller, closing every log.
func (c *Cluster) Close() error {
	var errs []error
	for _, id := range c.Brokers() {
		if b, err := c.broker(id); err == nil && !b.gate.down() {
			b.gate.kill()
			c.base.Unregister(id)
			b.node.Halt()
			b.mu.Lock()
			for _, p := range b.parts {
				errs = append(errs, p.Close())
			}
			b.parts = map[string]*partition.Partition{}
			b.mu.Unlock()
		}
	}
	errs = append(errs, c.ctrl.Close())
	return errors.Join(errs...)
}
