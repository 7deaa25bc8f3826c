package replica

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"
)

// Member is a broker as the controller sees it: where it sends partition
// states, and whom it asks how far a replica's log goes when it must elect
// an unclean leader. *Node implements it.
type Member interface {
	// UpdatePartition hands the broker a partition's new state. The
	// controller calls it for one broker from one goroutine, in the order
	// the states were made.
	UpdatePartition(st PartitionState)
	// LogEnd reports the broker's replica's latest leader epoch and log end
	// offset, ok false if it has none or cannot answer now.
	LogEnd(topic string, partition int32) (epoch int32, end int64, ok bool)
}

// TopicSpec describes a topic to create.
type TopicSpec struct {
	Name              string
	Partitions        int
	ReplicationFactor int
	// Config is the embedder's encoding of the topic's other settings,
	// kept with the topic and handed back by Topic: brokers open their
	// replicas with it.
	Config []byte
	// UncleanLeaderElection lets the controller elect a replica from
	// outside the ISR when the whole ISR is down: the partition comes back
	// sooner, and the records only the old ISR held are lost
	// (unclean.leader.election.enable). Default false: wait.
	UncleanLeaderElection bool
}

// AlterPartitionRequest is a leader asking the controller to change a
// partition's ISR (KIP-497). It is refused with ErrStaleState unless Leader,
// LeaderEpoch and PartitionEpoch are the controller's current ones.
type AlterPartitionRequest struct {
	Topic          string
	Partition      int32
	Leader         int32
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
	// BrokerEpochs holds, for each ISR member, the broker epoch the leader
	// saw it fetch with: a member whose broker has since restarted is
	// refused with ErrIneligibleReplica (KIP-903).
	BrokerEpochs map[int32]int64
}

// Controller is the cluster's single writer of partition leadership and
// ISR: it assigns replicas, elects leaders, watches broker liveness and
// accepts ISR changes from leaders. LocalController is the in-process
// implementation; a Raft-backed one would implement the same interface.
type Controller interface {
	// Register announces a broker incarnation and returns its broker
	// epoch. A broker registering again (it restarted) ends the old
	// incarnation first, as if it had failed. The controller then sends
	// the broker the state of every partition it holds.
	Register(ctx context.Context, id int32, m Member) (brokerEpoch int64, err error)
	// Heartbeat keeps a broker alive; a broker missing heartbeats for the
	// session timeout is fenced: it loses leaderships and ISR places.
	Heartbeat(ctx context.Context, id int32, brokerEpoch int64) error
	// Shutdown is a controlled shutdown: leaderships move away at once.
	Shutdown(ctx context.Context, id int32, brokerEpoch int64) error
	// AlterPartition changes a partition's ISR on its leader's request.
	AlterPartition(ctx context.Context, req AlterPartitionRequest) (PartitionState, error)
	// CreateTopic assigns and creates a topic's partitions.
	CreateTopic(ctx context.Context, spec TopicSpec) ([]PartitionState, error)
	// Topic returns a topic's spec and the states of its partitions.
	Topic(ctx context.Context, name string) (TopicSpec, []PartitionState, error)
	// ElectPreferredLeaders moves each partition's leadership to its
	// preferred (first) replica where that replica is alive and in sync,
	// and returns how many moved.
	ElectPreferredLeaders(ctx context.Context) (int, error)
	// Resign moves a partition's leadership away from a leader that found a
	// damaged batch in its own log, to an in-sync replica that holds the
	// batch, and takes the old leader out of the ISR (DecideResignation).
	// It returns the new state, or the current one with ErrStaleState or
	// ErrNoIntactReplica.
	Resign(ctx context.Context, req ResignRequest) (PartitionState, error)
}

// ControllerConfig configures a LocalController.
type ControllerConfig struct {
	// SessionTimeout fences a broker that has not sent a heartbeat for
	// this long (broker.session.timeout.ms). Default 9s.
	SessionTimeout time.Duration
	// PreferredElectionInterval runs ElectPreferredLeaders this often
	// (leader.imbalance.check.interval.seconds). Default 5 minutes;
	// negative: never.
	PreferredElectionInterval time.Duration
	// Logger receives leader elections and fencing. Default: none.
	Logger *slog.Logger
}

// LocalController is an in-process Controller. Safe for concurrent use.
type LocalController struct {
	cfg ControllerConfig
	log *slog.Logger

	mu          sync.Mutex
	brokers     map[int32]*registration
	nextEpoch   int64
	topics      map[string]*topicState
	assignStart int
	closed      bool
	unclean     int64 // unclean elections held

	stop chan struct{}
	done chan struct{}
	// deliveries counts the members' delivery goroutines, which Close
	// waits for: none outlives the controller.
	deliveries sync.WaitGroup
}

type registration struct {
	epoch    int64
	member   Member
	lastBeat time.Time
	fenced   bool
	queue    *delivery
}

type topicState struct {
	spec  TopicSpec
	parts []PartitionState
}

// NewLocalController starts an in-process controller. Close stops it.
func NewLocalController(cfg ControllerConfig) *LocalController {
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 9 * time.Second
	}
	if cfg.PreferredElectionInterval == 0 {
		cfg.PreferredElectionInterval = 5 * time.Minute
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &LocalController{cfg: cfg, log: lg, brokers: map[int32]*registration{}, topics: map[string]*topicState{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// Close stops the controller's background work and its deliveries, and
// returns once every goroutine it started has ended.
func (c *LocalController) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, r := range c.brokers {
		r.queue.close()
	}
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	c.deliveries.Wait()
	return nil
}

func (c *LocalController) run() {
	defer close(c.done)
	tick := time.NewTicker(max(c.cfg.SessionTimeout/4, time.Millisecond))
	defer tick.Stop()
	var pref <-chan time.Time
	if c.cfg.PreferredElectionInterval > 0 {
		t := time.NewTicker(c.cfg.PreferredElectionInterval)
		defer t.Stop()
		pref = t.C
	}
	for {
		select {
		case <-c.stop:
			return
		case now := <-tick.C:
			c.expire(now)
		case <-pref:
			c.ElectPreferredLeaders(context.Background())
		}
	}
}

// expire fences brokers whose session ran out.
func (c *LocalController) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.brokers {
		if !r.fenced && now.Sub(r.lastBeat) > c.cfg.SessionTimeout {
			c.log.Warn("broker session expired; fencing", "broker", id, "broker_epoch", r.epoch)
			r.fenced = true
			c.reelectLocked(id)
		}
	}
}

func (c *LocalController) alive(id int32) bool {
	r := c.brokers[id]
	return r != nil && !r.fenced
}

// Register implements Controller.
func (c *LocalController) Register(ctx context.Context, id int32, m Member) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	if old := c.brokers[id]; old != nil {
		// A new incarnation: the old one is gone, whatever it held.
		old.queue.close()
		if !old.fenced {
			old.fenced = true
			c.reelectLocked(id)
		}
	}
	c.nextEpoch++
	r := &registration{epoch: c.nextEpoch, member: m, lastBeat: time.Now(), queue: newDelivery(m, &c.deliveries)}
	c.brokers[id] = r
	c.log.Info("broker registered", "broker", id, "broker_epoch", r.epoch)
	for _, name := range c.topicNames() {
		for i := range c.topics[name].parts {
			st := &c.topics[name].parts[i]
			if st.HasReplica(id) {
				r.queue.push(st.Clone())
			}
		}
	}
	c.electLeaderlessLocked()
	return r.epoch, nil
}

// Heartbeat implements Controller. A fenced broker that heartbeats again
// with its current epoch (it was paused or cut off, not restarted) is
// unfenced.
func (c *LocalController) Heartbeat(ctx context.Context, id int32, brokerEpoch int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.brokers[id]
	if r == nil || r.epoch != brokerEpoch {
		return fmt.Errorf("%w: broker %d epoch %d is not registered", ErrStaleState, id, brokerEpoch)
	}
	r.lastBeat = time.Now()
	if r.fenced {
		r.fenced = false
		c.log.Info("broker unfenced", "broker", id, "broker_epoch", r.epoch)
		c.electLeaderlessLocked()
	}
	return nil
}

// Shutdown implements Controller.
func (c *LocalController) Shutdown(ctx context.Context, id int32, brokerEpoch int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.brokers[id]
	if r == nil || r.epoch != brokerEpoch {
		return fmt.Errorf("%w: broker %d epoch %d is not registered", ErrStaleState, id, brokerEpoch)
	}
	r.fenced = true
	c.reelectLocked(id)
	r.queue.close()
	delete(c.brokers, id)
	return nil
}

// reelectLocked recomputes leader and ISR of every partition broker id
// holds after it was fenced.
func (c *LocalController) reelectLocked(id int32) {
	for _, name := range c.topicNames() {
		t := c.topics[name]
		for i := range t.parts {
			if t.parts[i].HasReplica(id) {
				c.reconcileLocked(t, i)
			}
		}
	}
}

// electLeaderlessLocked elects leaders for partitions that have none (or a
// fenced one) now that a broker is back.
func (c *LocalController) electLeaderlessLocked() {
	for _, name := range c.topicNames() {
		t := c.topics[name]
		for i := range t.parts {
			if l := t.parts[i].Leader; l < 0 || !c.alive(l) {
				c.reconcileLocked(t, i)
			}
		}
	}
}

// reconcileLocked brings one partition in line with broker liveness
// (Reconcile) and commits the result.
func (c *LocalController) reconcileLocked(t *topicState, i int) {
	st := t.parts[i]
	res := Reconcile(st, c.alive, t.spec.UncleanLeaderElection, c.logEnd(st))
	if !res.Changed {
		return
	}
	switch {
	case res.Unclean:
		c.unclean++
		c.log.Warn("unclean leader election: records the old ISR committed may be lost",
			"topic", st.Topic, "partition", st.Partition, "leader", res.State.Leader, "old_isr", st.ISR)
	case res.Offline:
		c.log.Warn("partition offline: no in-sync replica is alive", "topic", st.Topic, "partition", st.Partition, "isr", res.State.ISR)
	}
	c.commitLocked(t, i, res.State)
}

func (c *LocalController) logEnd(st PartitionState) LogEnds {
	return func(id int32) (int32, int64, bool) {
		r := c.brokers[id]
		if r == nil {
			return 0, 0, false
		}
		return r.member.LogEnd(st.Topic, st.Partition)
	}
}

// commitLocked stores a partition's new state and sends it to every broker
// holding a replica.
func (c *LocalController) commitLocked(t *topicState, i int, st PartitionState) {
	t.parts[i] = st
	if st.Leader != -1 {
		c.log.Debug("partition state", "state", st.String())
	}
	for _, id := range st.Replicas {
		if r := c.brokers[id]; r != nil {
			r.queue.push(st.Clone())
		}
	}
}

// AlterPartition implements Controller.
func (c *LocalController) AlterPartition(ctx context.Context, req AlterPartitionRequest) (PartitionState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, i, err := c.lookup(req.Topic, req.Partition)
	if err != nil {
		return PartitionState{}, err
	}
	next, err := CheckAlterPartition(t.parts[i], req, func(id int32, seen int64) bool {
		r := c.brokers[id]
		return r == nil || r.fenced || r.epoch != seen
	})
	if err != nil {
		return next.Clone(), err
	}
	c.commitLocked(t, i, next)
	return next.Clone(), nil
}

// Resign implements Controller.
func (c *LocalController) Resign(ctx context.Context, req ResignRequest) (PartitionState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, i, err := c.lookup(req.Topic, req.Partition)
	if err != nil {
		return PartitionState{}, err
	}
	st := t.parts[i]
	next, err := DecideResignation(st, req, c.alive, c.logEnd(st))
	if err != nil {
		return st.Clone(), err
	}
	c.log.Warn("leader resigned: damaged batch in its log", "topic", req.Topic, "partition", req.Partition,
		"old_leader", req.Leader, "offset", req.Offset, "state", next.String())
	c.commitLocked(t, i, next)
	return next.Clone(), nil
}

func (c *LocalController) lookup(topic string, partition int32) (*topicState, int, error) {
	t := c.topics[topic]
	if t == nil {
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	if partition < 0 || int(partition) >= len(t.parts) {
		return nil, 0, fmt.Errorf("%w: %s-%d", ErrUnknownPartition, topic, partition)
	}
	return t, int(partition), nil
}

// CreateTopic implements Controller: replicas go round-robin over the live
// brokers (AssignReplicas), the first replica leads, and every replica
// starts in the ISR (there is nothing to be behind on).
func (c *LocalController) CreateTopic(ctx context.Context, spec TopicSpec) ([]PartitionState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.topics[spec.Name] != nil {
		return nil, fmt.Errorf("%w: %q", ErrTopicExists, spec.Name)
	}
	if spec.Partitions < 1 {
		return nil, fmt.Errorf("%w: %d partitions", ErrInvalidConfig, spec.Partitions)
	}
	if spec.ReplicationFactor == 0 {
		spec.ReplicationFactor = 1
	}
	var live []int32
	for id, r := range c.brokers {
		if !r.fenced {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	if spec.ReplicationFactor > len(live) || spec.ReplicationFactor < 1 {
		return nil, fmt.Errorf("%w: replication factor %d, %d live brokers", ErrNotEnoughBrokers, spec.ReplicationFactor, len(live))
	}
	assign, err := AssignReplicas(live, spec.Partitions, spec.ReplicationFactor, c.assignStart)
	if err != nil {
		return nil, err
	}
	c.assignStart += spec.Partitions
	spec.Config = slices.Clone(spec.Config)
	t := &topicState{spec: spec}
	c.topics[spec.Name] = t
	out := make([]PartitionState, len(assign))
	for p, st := range NewPartitionStates(spec.Name, 0, assign) {
		t.parts = append(t.parts, PartitionState{})
		c.commitLocked(t, p, st)
		out[p] = st.Clone()
	}
	return out, nil
}

// Topic implements Controller.
func (c *LocalController) Topic(ctx context.Context, name string) (TopicSpec, []PartitionState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[name]
	if t == nil {
		return TopicSpec{}, nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	out := make([]PartitionState, len(t.parts))
	for i, st := range t.parts {
		out[i] = st.Clone()
	}
	spec := t.spec
	spec.Config = slices.Clone(spec.Config)
	return spec, out, nil
}

// UncleanElections counts the unclean leader elections the controller has
// held: each may have lost committed records.
func (c *LocalController) UncleanElections() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unclean
}

// Topics lists the controller's topics.
func (c *LocalController) Topics() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topicNames()
}

func (c *LocalController) topicNames() []string {
	names := make([]string, 0, len(c.topics))
	for n := range c.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ElectPreferredLeaders implements Controller.
func (c *LocalController) ElectPreferredLeaders(ctx context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := 0
	for _, name := range c.topicNames() {
		t := c.topics[name]
		for i := range t.parts {
			st, ok := ElectPreferred(t.parts[i], c.alive)
			if !ok {
				continue
			}
			c.commitLocked(t, i, st)
			moved++
		}
	}
	return moved, nil
}

// delivery sends partition states to one member in order, from its own
// goroutine, so that the controller never waits for a broker.
type delivery struct {
	member Member
	mu     sync.Mutex
	items  []PartitionState
	wake   chan struct{}
	stop   chan struct{}
	once   sync.Once
}

// newDelivery starts a member's delivery goroutine, counted in wg.
func newDelivery(m Member, wg *sync.WaitGroup) *delivery {
	d := &delivery{member: m, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	wg.Go(d.run)
	return d
}

func (d *delivery) push(st PartitionState) {
	d.mu.Lock()
	d.items = append(d.items, st)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *delivery) close() { d.once.Do(func() { close(d.stop) }) }

func (d *delivery) run() {
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		for {
			d.mu.Lock()
			items := d.items
			d.items = nil
			d.mu.Unlock()
			if len(items) == 0 {
				break
			}
			for _, st := range items {
				select {
				case <-d.stop:
					return
				default:
				}
				d.member.UpdatePartition(st)
			}
		}
	}
}
