package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/partition"
)

// NodeConfig configures a Node.
type NodeConfig struct {
	// ID is this broker's id in the cluster.
	ID int32
	// Controller assigns leaders and accepts ISR changes.
	Controller Controller
	// Network reaches the other brokers.
	Network Network
	// Open opens (or creates) this broker's replica of a partition the
	// controller hands it, with its replication settings. The Node never
	// closes the partitions; whoever opened them does, after Node.Close.
	Open func(st PartitionState) (*partition.Partition, Config, error)
	// ReplicaLagTime is how long a follower may fail to catch up before
	// the leader drops it from the ISR (replica.lag.time.max.ms). Default
	// 30s.
	ReplicaLagTime time.Duration
	// HeartbeatInterval is how often the node tells the controller it is
	// alive (broker.heartbeat.interval.ms). Default 2s.
	HeartbeatInterval time.Duration
	// FetchMaxBytes bounds one fetch from a leader (replica.fetch.max.bytes).
	// Default 1 MiB.
	FetchMaxBytes int
	// FetchMaxWait is how long a leader holds a fetch that finds nothing
	// new (replica.fetch.wait.max.ms). Default 500ms.
	FetchMaxWait time.Duration
	// FetchBackoff is the longest a follower waits before retrying after an
	// error (replica.fetch.backoff.ms); retries start much sooner and back
	// off up to it. Default 1s.
	FetchBackoff time.Duration
	// OnRoleChange, if set, is told after a replica starts or stops
	// leading (a group coordinator loads or unloads the groups of an
	// offsets partition). It is called from the goroutine applying the
	// partition's states, one call at a time per partition, and must not
	// block for long.
	OnRoleChange func(topic string, partition int32, leading bool, leaderEpoch int32)
	// Logger receives role changes, truncations and ISR changes. Default:
	// none.
	Logger *slog.Logger
}

type tp struct {
	topic string
	part  int32
}

// Node is one broker's replication: its ReplicaSets, its session with the
// controller, and the handlers other brokers' followers fetch from. It is a
// Member of the controller and a Link (the serving side) for the network.
type Node struct {
	cfg  NodeConfig
	id   int32
	ctrl Controller
	net  Network
	log  *slog.Logger

	brokerEpoch atomic.Int64

	truncatedCommitted atomic.Int64 // records cut below the high watermark
	resignations       atomic.Int64 // leaderships given up over damage
	repairs            atomic.Int64 // damaged logs cut to be copied again
	isrShrinks         atomic.Int64 // ISR changes that removed replicas
	isrExpands         atomic.Int64 // ISR changes that added replicas

	mu     sync.Mutex
	sets   map[tp]*ReplicaSet
	closed bool

	stop chan struct{}
	// ctx ends when the node stops: requests to the controller made on the
	// node's behalf (ISR changes) end with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewNode returns a node; Start registers it with the controller.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Controller == nil || cfg.Network == nil || cfg.Open == nil {
		return nil, fmt.Errorf("%w: a Node needs a Controller, a Network and Open", ErrInvalidConfig)
	}
	if cfg.ReplicaLagTime <= 0 {
		cfg.ReplicaLagTime = 30 * time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 2 * time.Second
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 1 << 20
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = 500 * time.Millisecond
	}
	if cfg.FetchBackoff <= 0 {
		cfg.FetchBackoff = time.Second
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lg = lg.With("broker", cfg.ID)
	n := &Node{cfg: cfg, id: cfg.ID, ctrl: cfg.Controller, net: cfg.Network, log: lg, sets: map[tp]*ReplicaSet{}, stop: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// ID is the node's broker id.
func (n *Node) ID() int32 { return n.id }

// BrokerEpoch is the epoch of this node's registration with the
// controller (0 before Start).
func (n *Node) BrokerEpoch() int64 { return n.brokerEpoch.Load() }

// Start registers the node with the controller - which then sends it the
// state of every partition it holds - and starts its heartbeats and ISR
// checks.
func (n *Node) Start(ctx context.Context) error {
	epoch, err := n.ctrl.Register(ctx, n.id, n)
	if err != nil {
		return err
	}
	n.brokerEpoch.Store(epoch)
	n.wg.Add(2)
	go n.heartbeats()
	go n.isrChecks()
	return nil
}

func (n *Node) heartbeats() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HeartbeatInterval)
		err := n.ctrl.Heartbeat(ctx, n.id, n.brokerEpoch.Load())
		cancel()
		if errors.Is(err, ErrStaleState) {
			// The controller no longer knows this incarnation: register
			// again, as a restarted broker would.
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HeartbeatInterval)
			if epoch, err := n.ctrl.Register(ctx, n.id, n); err == nil {
				n.brokerEpoch.Store(epoch)
			}
			cancel()
		}
	}
}

// isrChecks has every leader reconsider its ISR twice per ReplicaLagTime
// (Kafka's isr-expiration task).
func (n *Node) isrChecks() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ReplicaLagTime / 2)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		for _, r := range n.replicaSets() {
			r.proposeISR()
			r.resignIfDamaged() // damage a consumer's read found
		}
	}
}

func (n *Node) replicaSets() []*ReplicaSet {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*ReplicaSet, 0, len(n.sets))
	for _, r := range n.sets {
		out = append(out, r)
	}
	return out
}

// NodeStats counts what a node's replicas did that an operator must know.
type NodeStats struct {
	// TruncatedCommitted counts records a follower removed from below its
	// high watermark: records once committed, lost to an unclean leader
	// election (or to more replicas failing than the ISR allows).
	TruncatedCommitted int64
	// Resignations counts leaderships this node gave up because its
	// replica's log held a damaged batch (DecideResignation).
	Resignations int64
	// Repairs counts the times a follower cut its log before a damaged
	// batch to copy it again from the leader. The records cut were not
	// lost: the leader holds them.
	Repairs int64
	// ISRShrinks and ISRExpands count the ISR changes this node's leaders
	// made (IsrShrinksPerSec, IsrExpandsPerSec): 0 outside restarts and
	// slow followers.
	ISRShrinks, ISRExpands int64
}

// Stats returns the node's counters.
func (n *Node) Stats() NodeStats {
	return NodeStats{TruncatedCommitted: n.truncatedCommitted.Load(), Resignations: n.resignations.Load(), Repairs: n.repairs.Load(),
		ISRShrinks: n.isrShrinks.Load(), ISRExpands: n.isrExpands.Load()}
}

// ReplicaSets lists the node's replicas, in no order.
func (n *Node) ReplicaSets() []*ReplicaSet { return n.replicaSets() }

// ReplicaSet returns this node's replica of a partition, if it has one.
func (n *Node) ReplicaSet(topic string, partition int32) (*ReplicaSet, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.sets[tp{topic, partition}]
	return r, ok
}

// UpdatePartition implements Member: it opens the replica on first sight
// and applies the state to it.
func (n *Node) UpdatePartition(st PartitionState) {
	key := tp{st.Topic, st.Partition}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	r := n.sets[key]
	n.mu.Unlock()
	if r == nil {
		if !st.HasReplica(n.id) {
			return
		}
		p, cfg, err := n.cfg.Open(st)
		if err != nil {
			n.log.Error("cannot open replica", "topic", st.Topic, "partition", st.Partition, "err", err)
			return
		}
		r = newReplicaSet(n, p, cfg, st.Topic, st.Partition)
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return
		}
		n.sets[key] = r
		n.mu.Unlock()
	}
	r.Apply(st)
}

// Remove stops this node's replica of a partition (its topic was deleted)
// and forgets it; it returns the partition, for the caller to close and
// delete, or nil if the node held none.
func (n *Node) Remove(topic string, partition int32) *partition.Partition {
	n.mu.Lock()
	r := n.sets[tp{topic, partition}]
	delete(n.sets, tp{topic, partition})
	n.mu.Unlock()
	if r == nil {
		return nil
	}
	leading := r.IsLeader()
	r.close()
	if leading && n.cfg.OnRoleChange != nil {
		n.cfg.OnRoleChange(topic, partition, false, r.State().LeaderEpoch)
	}
	return r.part
}

// LogEnd implements Member.
func (n *Node) LogEnd(topic string, partition int32) (int32, int64, bool) {
	r, ok := n.ReplicaSet(topic, partition)
	if !ok {
		return 0, 0, false
	}
	return r.part.Epochs().Latest(), r.part.EndOffset(), true
}

func (n *Node) lookup(topic string, partition int32) (*ReplicaSet, error) {
	r, ok := n.ReplicaSet(topic, partition)
	if !ok {
		return nil, fmt.Errorf("%w: %s-%d on broker %d", ErrUnknownPartition, topic, partition, n.id)
	}
	return r, nil
}

// Fetch implements Link: a follower on another broker fetching from this
// node's leader replica.
func (n *Node) Fetch(ctx context.Context, req *FetchRequest) (*FetchResponse, error) {
	r, err := n.lookup(req.Topic, req.Partition)
	if err != nil {
		return nil, err
	}
	return r.handleFetch(ctx, req)
}

// EndOffsetForEpoch implements Link: OffsetsForLeaderEpoch against this
// node's leader replica.
func (n *Node) EndOffsetForEpoch(ctx context.Context, req *EpochRequest) (EpochEnd, error) {
	r, err := n.lookup(req.Topic, req.Partition)
	if err != nil {
		return EpochEnd{}, err
	}
	return r.handleEpoch(req)
}

// Close shuts the node down in a controlled way: the controller moves its
// leaderships away first, then its replicas stop. It does not close the
// partitions.
func (n *Node) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := n.ctrl.Shutdown(ctx, n.id, n.brokerEpoch.Load())
	cancel()
	n.Halt()
	if errors.Is(err, ErrStaleState) {
		err = nil
	}
	return err
}

// Halt stops the node at once without telling the controller, as a crash
// would: the controller finds out when heartbeats stop.
func (n *Node) Halt() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	// Copy the replicas under the lock: Remove (the metadata loop applying
	// a topic's deletion) may still delete from the map meanwhile. A
	// replica both stop is closed twice, which is harmless.
	sets := make([]*ReplicaSet, 0, len(n.sets))
	for _, r := range n.sets {
		sets = append(sets, r)
	}
	n.mu.Unlock()
	close(n.stop)
	n.cancel()
	n.wg.Wait()
	for _, r := range sets {
		r.close()
	}
}
