package spool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/txn"
)

// A networked node is a Broker whose cluster spans processes: it runs a
// member of the controller quorum (package controller, on hashicorp/raft),
// registers with the active controller, follows the committed metadata log
// - opening, leading, following and deleting its replicas as the
// partitions' states say - and reaches the other brokers and the active
// controller over the Kafka protocol through Remote, which package
// transport implements (transport.StartNode wires it all).

// Remote is how a node reaches the rest of its cluster: the links its
// followers fetch through, and the active controller's RPCs, each sent to
// a controller listener's address. Package transport implements it with
// Kafka's Fetch, OffsetsForLeaderEpoch, BrokerRegistration,
// BrokerHeartbeat, AlterPartition, AllocateProducerIds, CreateTopics,
// DeleteTopics, CreatePartitions, AlterConfigs,
// AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders
// and UnregisterBroker. Errors from a node that is not the active
// controller wrap a *controller.NotControllerError.
type Remote interface {
	replica.Network
	RegisterBroker(ctx context.Context, addr string, r controller.Registration) (int64, error)
	BrokerHeartbeat(ctx context.Context, addr string, h controller.Heartbeat) (controller.HeartbeatResult, error)
	AlterPartition(ctx context.Context, addr string, req replica.AlterPartitionRequest) (replica.PartitionState, error)
	AllocateProducerIDs(ctx context.Context, addr string, broker int32, brokerEpoch int64) (int64, error)
	CreateTopic(ctx context.Context, addr string, name string, cfg TopicConfig) error
	DeleteTopic(ctx context.Context, addr string, name string) error
	CreatePartitions(ctx context.Context, addr string, name string, total int32) error
	AlterTopicConfig(ctx context.Context, addr string, name string, cfg TopicConfig) error
	// AlterSettings replaces one of the cluster's settings documents
	// (controller.Quorum.AlterSettings).
	AlterSettings(ctx context.Context, addr string, c controller.SettingsChange) error
	// The operator's operations (operations.go), each answered by the
	// active controller as controller.Quorum's method of the same name.
	AlterPartitionReassignments(ctx context.Context, addr string, rs []controller.Reassignment, allowRFChange bool) ([]error, error)
	ListPartitionReassignments(ctx context.Context, addr string, parts []controller.TopicPartition) ([]controller.OngoingReassignment, error)
	ElectLeaders(ctx context.Context, addr string, typ replica.ElectionType, parts []controller.TopicPartition) ([]controller.ElectionResult, error)
	UnregisterBroker(ctx context.Context, addr string, id int32) error
	// Produce writes a batch at broker's leader replica of a partition and
	// waits as opts.Acks says (Kafka's Produce); it returns the base
	// offset.
	Produce(ctx context.Context, broker int32, topic string, partition int32, b record.Batch, opts ProduceOptions) (int64, error)
	// Fetch reads committed batches from offset at broker's leader replica
	// (Kafka's Fetch as a consumer); offset -1 reads nothing and only
	// reports the partition's high watermark and log start offset.
	Fetch(ctx context.Context, broker int32, topic string, partition int32, offset int64, maxBytes int) (RemoteFetch, error)
	// WriteTxnMarker writes a transaction marker at broker's leader
	// replica of a partition (Kafka's WriteTxnMarkers), committed when it
	// returns.
	WriteTxnMarker(ctx context.Context, broker int32, topic string, partition int32, m TxnMarker) error
}

// NodeOptions make a Broker a node of a cluster of processes (Options.Node).
// transport.StartNode fills them in from its own options; set them directly
// only to supply your own Remote.
type NodeOptions struct {
	// Voters is the controller quorum (controller.quorum.voters). A node
	// listed is a voter and a broker (KRaft's combined mode); any other node
	// is a broker only, following the metadata log as a non-voting member.
	Voters []controller.Voter
	// ControllerAddr is this node's controller listener as the others reach
	// it; for a voter, its entry in Voters.
	ControllerAddr string
	// Dial connects to another node's controller listener (Raft and its
	// greeting). Default: TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// ControllerListenAddr is the address the controller listener is
	// bound to, if known (see controller.Config.ListenAddr).
	ControllerListenAddr string
	// AdvertisedHost and AdvertisedPort are the Kafka listener clients and
	// other brokers are told to use (advertised.listeners).
	AdvertisedHost string
	AdvertisedPort int32
	// Listeners are the broker's named Kafka listeners
	// (advertised.listeners), the first the one at AdvertisedHost and
	// AdvertisedPort: each client is told every broker's endpoint on the
	// listener it came in on. None: the one listener at AdvertisedHost and
	// AdvertisedPort is told to every client.
	Listeners []controller.NamedEndpoint
	// ValidateSettings, if set, checks a settings document (the
	// cluster's ACLs, quotas or SCRAM credentials) before the active
	// controller commits it (controller.Config.ValidateSettings).
	ValidateSettings func(controller.SettingsKind, []byte) error
	// Rack is the broker's rack (broker.rack), shown in metadata.
	Rack string
	// ClusterID, if set, is the cluster the node must belong to; a node
	// with a data directory of another cluster refuses to start.
	ClusterID string
	// Remote reaches the other nodes. Required.
	Remote Remote
	// OpenStores opens the Raft log and stable store in the data
	// directory. Default: the metadata log as a Kafka-format log of package
	// log (controller.OpenStores).
	OpenStores func(dir string) (controller.Stores, error)
	// SessionTimeout fences a broker that stops sending heartbeats
	// (broker.session.timeout.ms); it bounds how long partitions led by a
	// crashed broker wait for a new leader. Default 2s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the node sends heartbeats
	// (broker.heartbeat.interval.ms). Default SessionTimeout/4.
	HeartbeatInterval time.Duration
	// ElectionTimeout is the controllers' Raft election timeout
	// (controller.quorum.election.timeout.ms). Default 500ms.
	ElectionTimeout time.Duration
	// ReplicaLagTime drops a follower from the ISR when it has not caught
	// up for this long (replica.lag.time.max.ms). Default 10s.
	ReplicaLagTime time.Duration
	// FetchMaxWait is how long a leader holds a follower's fetch that finds
	// nothing new (replica.fetch.wait.max.ms). Default 500ms.
	FetchMaxWait time.Duration
	// FetchBackoff bounds a follower's wait before retrying after an error
	// (replica.fetch.backoff.ms). Default 1s.
	FetchBackoff time.Duration
	// OffsetsReplicationFactor is the replication factor of
	// __consumer_offsets (offsets.topic.replication.factor), lowered to the
	// number of brokers in a smaller cluster. Default 3.
	OffsetsReplicationFactor int
}

// errNodeConfig reports a bad NodeOptions.
func errNodeConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// netCluster is a networked node's cluster: the quorum member, the
// controller client its replica.Node uses, and the metadata follower.
type netCluster struct {
	b           *Broker
	opts        NodeOptions
	q           *controller.Quorum
	incarnation string
	epoch       atomic.Int64 // this incarnation's broker epoch, 0 before registration
	// heard is when the last heartbeat (or registration) the controller
	// answered was sent, as nanoseconds since processStart (a monotonic
	// reading): the start of this node's lease as a group coordinator (see
	// checkCoordinator).
	heard atomic.Int64

	// ready is closed once the node has registered and applied its own
	// registration: from then on it acts on the metadata it applies.
	ready chan struct{}
	// failed receives the error that keeps the node out of the cluster
	// for good (another process registered with its id).
	failed chan error

	mu        sync.Mutex
	delivered map[TopicPartition]replica.PartitionState // the last state handed to the node per replica
	ids       map[TopicPartition]string                 // topic id of each replica, to notice a re-created topic
	loading   map[int32]bool                            // offsets partitions this node leads: true while loading

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// processStart is the clock the leases of group coordinators are read on:
// time.Since of it is monotonic.
var processStart = time.Now()

// openNetNode makes b a node of the cluster opts.Node describes. The data
// directory must be empty, or a cluster node's of this node id and cluster.
func (b *Broker) openNetNode() error {
	no := *b.opts.Node
	if no.Remote == nil || len(no.Voters) == 0 {
		return errNodeConfig("a cluster node needs Voters and a Remote")
	}
	if b.opts.Cluster != nil {
		return errNodeConfig("Options.Cluster (in-process) and Options.Node (networked) exclude each other")
	}
	if no.SessionTimeout <= 0 {
		no.SessionTimeout = 2 * time.Second
	}
	if no.HeartbeatInterval <= 0 {
		no.HeartbeatInterval = no.SessionTimeout / 4
	}
	if no.ReplicaLagTime <= 0 {
		no.ReplicaLagTime = 10 * time.Second
	}
	if no.OffsetsReplicationFactor <= 0 {
		no.OffsetsReplicationFactor = 3
	}
	if no.OpenStores == nil {
		no.OpenStores = func(dir string) (controller.Stores, error) {
			return controller.OpenStores(dir, b.logger)
		}
	}
	if _, err := os.Stat(filepath.Join(b.dir, registryFile)); err == nil {
		return errNodeConfig("%s is a standalone broker's data directory (it holds %s): serve it standalone, without --controller-quorum-voters; "+
			"a cluster node needs an empty data directory or its own", b.dir, registryFile)
	}
	cid := no.ClusterID
	mp, err := readMetaProperties(b.dir)
	switch {
	case err == nil:
		if mp.nodeID >= 0 && mp.nodeID != b.opts.NodeID {
			return errNodeConfig("%s belongs to node %d, not node %d: give each node its own data directory (or start it with --node-id %d)", b.dir, mp.nodeID, b.opts.NodeID, mp.nodeID)
		}
		if cid != "" && mp.clusterID != cid {
			return errNodeConfig("%s belongs to cluster %s, not to cluster %s that --cluster-id names: start the node with --cluster-id %s (or none), "+
				"or give it an empty data directory to join cluster %s", b.dir, mp.clusterID, cid, mp.clusterID, cid)
		}
		cid = mp.clusterID
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	var inc [16]byte
	_, _ = rand.Read(inc[:])
	nc := &netCluster{b: b, opts: no, incarnation: hex.EncodeToString(inc[:]), ready: make(chan struct{}), failed: make(chan error, 1),
		delivered: map[TopicPartition]replica.PartitionState{}, ids: map[TopicPartition]string{}, loading: map[int32]bool{}}
	nc.ctx, nc.cancel = context.WithCancel(context.Background())
	q, err := controller.Open(controller.Config{
		NodeID: b.opts.NodeID, Dir: b.dir, Voters: no.Voters, Addr: no.ControllerAddr, ListenAddr: no.ControllerListenAddr, ClusterID: cid,
		ValidateSettings: no.ValidateSettings,
		OnClusterID: func(id string) error {
			return writeMetaProperties(b.dir, metaProperties{clusterID: id, nodeID: b.opts.NodeID})
		},
		OpenStores: no.OpenStores, SessionTimeout: no.SessionTimeout, ElectionTimeout: no.ElectionTimeout, Logger: b.logger, Dial: no.Dial,
	})
	if err != nil {
		return err
	}
	nc.q = q
	b.nc = nc
	b.cl = nc
	b.replicas = map[TopicPartition]*partition.Partition{}
	b.pids = &producerIDs{
		reserve: func(ctx context.Context, _ int64) (int64, error) {
			var first int64
			err := nc.call(ctx, func() (err error) {
				first, err = q.AllocateProducerIDs(ctx, b.opts.NodeID, nc.epoch.Load())
				return err
			}, func(addr string) (err error) {
				first, err = no.Remote.AllocateProducerIDs(ctx, addr, b.opts.NodeID, nc.epoch.Load())
				return err
			})
			return first, err
		},
		issuedBelow: func() int64 { return q.Image().NextProducerID() },
	}
	node, err := replica.NewNode(replica.NodeConfig{
		ID: b.opts.NodeID, Controller: (*netController)(nc), Network: no.Remote, Open: b.openNetReplica,
		ReplicaLagTime: no.ReplicaLagTime, HeartbeatInterval: no.HeartbeatInterval,
		FetchMaxWait: no.FetchMaxWait, FetchBackoff: no.FetchBackoff,
		OnRoleChange: nc.roleChanged, Logger: b.logger,
	})
	if err != nil {
		q.Close()
		return err
	}
	b.node = node
	nc.wg.Add(1)
	go nc.run()
	return nil
}

// run registers the node (retrying until a controller answers) and then
// follows the metadata log, handing each of its replicas its states.
func (nc *netCluster) run() {
	defer nc.wg.Done()
	b := nc.b
	var dupSince time.Time
	for nc.ctx.Err() == nil {
		err := b.node.Start(nc.ctx)
		if err == nil {
			break
		}
		if errors.Is(err, controller.ErrDuplicateRegistration) {
			// Refused while the previous incarnation's session lasts (a
			// quick restart); for longer, another process has this id.
			if dupSince.IsZero() {
				dupSince = time.Now()
			} else if time.Since(dupSince) > 2*nc.opts.SessionTimeout+time.Second {
				err = fmt.Errorf("%w: another process is registered as node %d and alive: give each node its own --node-id", err, b.opts.NodeID)
				b.logger.Error("cannot join the cluster", "err", err)
				nc.failed <- err
				return
			}
		} else {
			dupSince = time.Time{}
		}
		if nc.ctx.Err() == nil {
			b.logger.Info("registering with the controller", "err", err)
			sleepCtx(nc.ctx, 200*time.Millisecond)
		}
	}
	if nc.ctx.Err() != nil {
		return
	}
	first := true
	for {
		ch := nc.q.Changed()
		im := nc.q.Image()
		if me, ok := im.Broker(b.opts.NodeID); ok && me.Epoch == nc.epoch.Load() {
			if first {
				first = false
				nc.removeStrays(im)
				close(nc.ready)
				b.logger.Info("caught up with the cluster's metadata", "broker_epoch", me.Epoch, "metadata_index", im.Index())
			}
			nc.publish(im)
		}
		select {
		case <-ch:
		case <-nc.ctx.Done():
			return
		}
	}
}

// publish hands the node every state of its replicas that changed, and
// removes replicas of deleted (or re-created) topics.
func (nc *netCluster) publish(im *controller.Image) {
	self := nc.b.opts.NodeID
	seen := map[TopicPartition]bool{}
	for _, name := range im.Topics() {
		t, _ := im.Topic(name)
		for _, st := range t.Partitions {
			if !st.HasReplica(self) {
				continue
			}
			tp := TopicPartition{Topic: name, Partition: st.Partition}
			seen[tp] = true
			nc.mu.Lock()
			prev, had := nc.delivered[tp]
			if had && nc.ids[tp] != t.ID {
				nc.mu.Unlock()
				nc.remove(tp) // the topic was deleted and created again
				nc.mu.Lock()
				had = false
			}
			nc.mu.Unlock()
			if had && !st.NewerThan(prev) {
				continue
			}
			nc.b.node.UpdatePartition(st)
			nc.mu.Lock()
			nc.delivered[tp] = st
			nc.ids[tp] = t.ID
			nc.mu.Unlock()
		}
	}
	nc.mu.Lock()
	var gone []TopicPartition
	for tp := range nc.delivered {
		if !seen[tp] {
			gone = append(gone, tp)
		}
	}
	nc.mu.Unlock()
	for _, tp := range gone {
		nc.remove(tp)
	}
}

// remove stops, closes and deletes this node's replica of a partition.
func (nc *netCluster) remove(tp TopicPartition) {
	b := nc.b
	p := b.node.Remove(tp.Topic, tp.Partition)
	nc.mu.Lock()
	delete(nc.delivered, tp)
	delete(nc.ids, tp)
	nc.mu.Unlock()
	b.rmu.Lock()
	if p == nil {
		p = b.replicas[tp]
	}
	delete(b.replicas, tp)
	b.rmu.Unlock()
	if p == nil {
		return
	}
	dir := p.Dir()
	if err := p.Close(); err != nil {
		b.logger.Warn("closing a replica the metadata no longer places here", "topic", tp.Topic, "partition", tp.Partition, "err", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		b.logger.Warn("deleting a replica the metadata no longer places here", "dir", dir, "err", err)
		return
	}
	// Its topic was deleted, or a reassignment moved the replica away.
	b.logger.Info("deleted a replica the metadata no longer places here", "topic", tp.Topic, "partition", tp.Partition)
}

// removeStrays deletes partition directories the metadata no longer
// places on this node (topics deleted, or replicas moved, while it was
// down). It runs once the node has applied its own registration, so the
// image is at least as new as any deletion before it.
func (nc *netCluster) removeStrays(im *controller.Image) {
	b := nc.b
	names, _ := partitionDirNames(b.dir)
	for _, name := range names {
		tn, n, _ := parsePartitionDir(name)
		dir := filepath.Join(b.dir, name)
		if tn == controller.MetadataTopic {
			continue
		}
		id, err := readPartitionMeta(dir)
		t, ok := im.Topic(tn)
		if ok && err == nil && id.String() == t.ID && int(n) < len(t.Partitions) && t.Partitions[n].HasReplica(b.opts.NodeID) {
			continue
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			b.logger.Warn("partition directory without readable metadata; leaving it", "dir", dir, "err", err)
			continue
		}
		b.logger.Info("removing a partition directory the cluster no longer places here", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			b.logger.Warn("removing a stray partition directory", "dir", dir, "err", err)
		}
	}
}

// openNetReplica opens this node's replica of a partition the metadata
// places here, in <data>/<topic>-<n> with the topic's id recorded.
func (b *Broker) openNetReplica(st replica.PartitionState) (*partition.Partition, replica.Config, error) {
	t, ok := b.nc.q.Image().Topic(st.Topic)
	if !ok {
		return nil, replica.Config{}, fmt.Errorf("%w: %q", ErrUnknownTopic, st.Topic)
	}
	own, err := decodeTopicSpec(replica.TopicSpec{Name: t.Name, Partitions: len(t.Partitions), Config: t.Config, UncleanLeaderElection: t.Unclean})
	if err != nil {
		return nil, replica.Config{}, err
	}
	id, err := ParseTopicID(t.ID)
	if err != nil {
		return nil, replica.Config{}, err
	}
	cfg := b.effective(own)
	dir := partitionDir(b.dir, st.Topic, st.Partition)
	if old, err := readPartitionMeta(dir); err == nil && old != id {
		// A replica of an earlier topic of that name, deleted while this
		// node was down: nothing in it belongs to the new topic.
		b.logger.Info("removing the replica of an earlier topic of the same name", "dir", dir, "old_id", old, "id", id)
		if err := os.RemoveAll(dir); err != nil {
			return nil, replica.Config{}, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, replica.Config{}, err
	}
	if _, err := readPartitionMeta(dir); errors.Is(err, os.ErrNotExist) {
		if err := writePartitionMeta(dir, id); err != nil {
			return nil, replica.Config{}, err
		}
	} else if err != nil {
		return nil, replica.Config{}, err
	}
	lo := b.logOptions(cfg)
	if internalTopic(st.Topic) {
		lo.IndexMaxBytes = offsetsTopicIndexBytes
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	if b.replicas == nil {
		return nil, replica.Config{}, ErrClosed
	}
	tp := TopicPartition{Topic: st.Topic, Partition: st.Partition}
	if p := b.replicas[tp]; p != nil {
		return p, replica.Config{MinInSyncReplicas: cfg.MinInSyncReplicas}, nil
	}
	p, err := b.openPartition(dir, st.Topic, st.Partition, partition.Options{Log: lo, Replicated: true})
	if err != nil {
		return nil, replica.Config{}, err
	}
	b.replicas[tp] = p
	return p, replica.Config{MinInSyncReplicas: cfg.MinInSyncReplicas}, nil
}

// call runs an operation at the active controller: local when this node
// is it, else remote at the controller's address; while no controller is
// known, or the one asked is no longer it, it waits and tries again until
// ctx ends.
func (nc *netCluster) call(ctx context.Context, local func() error, remote func(addr string) error) error {
	_, err := nc.callAmbiguous(ctx, local, remote)
	return err
}

// callAmbiguous is call, also reporting whether an attempt before the
// last may have taken effect: an operation interrupted by the loss of the
// controller's leadership (or of the connection) may still have been
// committed, so a retry can find its own effect (a topic it created
// "exists", one it deleted "is unknown").
func (nc *netCluster) callAmbiguous(ctx context.Context, local func() error, remote func(addr string) error) (ambiguous bool, _ error) {
	backoff := 10 * time.Millisecond
	guess := 0
	for {
		var err error
		sent := true
		id, addr := nc.q.Leader()
		switch {
		case nc.q.Active():
			err = local()
		case id >= 0 && id != nc.b.opts.NodeID:
			err = remote(addr)
		case !nc.q.Voter():
			// A broker-only node learns the leader from Raft only once
			// the controller has added it to the quorum, which its
			// registration asks for: until then, try each voter in turn.
			v := nc.opts.Voters[guess%len(nc.opts.Voters)]
			guess++
			err = remote(v.Addr)
		default:
			err, sent = &controller.NotControllerError{Leader: -1}, false
		}
		var nce *controller.NotControllerError
		if !errors.As(err, &nce) && !errors.Is(err, replica.ErrUnreachable) {
			return ambiguous, err
		}
		if noForward(ctx) {
			return ambiguous, err
		}
		// An operation that was sent and failed so may have been
		// committed all the same (a controller losing its leadership while
		// committing answers NOT_CONTROLLER too).
		ambiguous = ambiguous || sent
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ambiguous, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-nc.q.Changed():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// netController is the replica.Controller of a networked node: its calls
// go to the active controller through netCluster.call; partition states
// reach the node from the metadata log (netCluster.publish), not from it.
type netController netCluster

// Register implements replica.Controller.
func (c *netController) Register(ctx context.Context, id int32, _ replica.Member) (int64, error) {
	nc := (*netCluster)(c)
	reg := controller.Registration{BrokerID: id, ClusterID: nc.q.ClusterID(), IncarnationID: nc.incarnation,
		Kafka: controller.Endpoint{Host: nc.opts.AdvertisedHost, Port: nc.opts.AdvertisedPort}, Rack: nc.opts.Rack,
		Listeners: nc.opts.Listeners}
	if !nc.q.Voter() {
		reg.Controller = nc.q.Addr()
	}
	var epoch int64
	sent := time.Now()
	err := nc.call(ctx, func() (err error) {
		epoch, err = nc.q.RegisterBroker(ctx, reg)
		return err
	}, func(addr string) (err error) {
		epoch, err = nc.opts.Remote.RegisterBroker(ctx, addr, reg)
		return err
	})
	if err != nil {
		return 0, err
	}
	nc.heard.Store(int64(sent.Sub(processStart)))
	nc.epoch.Store(epoch)
	// Unfence at once, rather than at the next heartbeat, once this node
	// has applied its registration.
	if err := nc.q.WaitIndex(ctx, uint64(epoch)); err == nil {
		c.Heartbeat(ctx, id, epoch)
	}
	return epoch, nil
}

// Heartbeat implements replica.Controller. A refusal of this incarnation
// is replica.ErrStaleState, on which the node registers again.
func (c *netController) Heartbeat(ctx context.Context, id int32, brokerEpoch int64) error {
	_, err := c.heartbeat(ctx, controller.Heartbeat{BrokerID: id, BrokerEpoch: brokerEpoch})
	return err
}

func (c *netController) heartbeat(ctx context.Context, h controller.Heartbeat) (controller.HeartbeatResult, error) {
	nc := (*netCluster)(c)
	h.MetadataIndex = nc.q.Image().Index()
	var res controller.HeartbeatResult
	sent := time.Now()
	err := nc.call(ctx, func() (err error) {
		res, err = nc.q.BrokerHeartbeat(ctx, h)
		return err
	}, func(addr string) (err error) {
		res, err = nc.opts.Remote.BrokerHeartbeat(ctx, addr, h)
		return err
	})
	if err == nil {
		// The controller heard from this node after sent: it will not
		// fence it before sent + SessionTimeout.
		nc.heard.Store(int64(sent.Sub(processStart)))
	}
	if errors.Is(err, controller.ErrStaleBrokerEpoch) {
		err = fmt.Errorf("%w: %w", replica.ErrStaleState, err)
	}
	return res, err
}

// Shutdown implements replica.Controller: a controlled shutdown, heartbeats
// asking for it until the controller has moved every leadership away.
func (c *netController) Shutdown(ctx context.Context, id int32, brokerEpoch int64) error {
	nc := (*netCluster)(c)
	// A controller that does not answer within a session timeout would
	// fence this broker anyway (the last voters of a quorum have none to
	// answer): stop trying then.
	ctx, cancel := context.WithTimeout(ctx, nc.opts.SessionTimeout)
	defer cancel()
	for {
		res, err := c.heartbeat(ctx, controller.Heartbeat{BrokerID: id, BrokerEpoch: brokerEpoch, WantShutdown: true})
		if err != nil {
			return err
		}
		if res.ShouldShutdown {
			// Let the image here show it too, so that this node's replicas
			// are followers when it stops.
			ctx2, cancel := context.WithTimeout(ctx, time.Second)
			for nc.q.Image().Leads(id) > 0 && ctx2.Err() == nil {
				select {
				case <-nc.q.Changed():
				case <-ctx2.Done():
				}
			}
			cancel()
			return nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// AlterPartition implements replica.Controller.
func (c *netController) AlterPartition(ctx context.Context, req replica.AlterPartitionRequest) (replica.PartitionState, error) {
	nc := (*netCluster)(c)
	var st replica.PartitionState
	err := nc.call(ctx, func() (err error) {
		st, err = nc.q.AlterPartition(ctx, req)
		return err
	}, func(addr string) (err error) {
		st, err = nc.opts.Remote.AlterPartition(ctx, addr, req)
		return err
	})
	if err == nil && len(st.Replicas) == 0 {
		// AlterPartition's response names no replicas; an ISR change
		// keeps them.
		cur, _ := nc.q.Image().Partition(req.Topic, req.Partition)
		st.Replicas = cur.Replicas
	}
	return st, err
}

// Resign implements replica.Controller. Kafka has no request for it: a
// leader that is the active controller resigns here; another one keeps its
// leadership (it refuses to serve the damaged batch) - moving it from there
// is not done yet.
func (c *netController) Resign(ctx context.Context, req replica.ResignRequest) (replica.PartitionState, error) {
	nc := (*netCluster)(c)
	if nc.q.Active() {
		return nc.q.Resign(ctx, req)
	}
	return replica.PartitionState{}, fmt.Errorf("spool: a leader's resignation from a node that is not the active controller: %w", errors.ErrUnsupported)
}

// CreateTopic implements replica.Controller; brokers create topics through
// Broker.CreateTopic instead.
func (c *netController) CreateTopic(ctx context.Context, spec replica.TopicSpec) ([]replica.PartitionState, error) {
	return nil, fmt.Errorf("spool: CreateTopic through the replica layer: %w", errors.ErrUnsupported)
}

// Topic implements replica.Controller from the node's image.
func (c *netController) Topic(ctx context.Context, name string) (replica.TopicSpec, []replica.PartitionState, error) {
	return (*netCluster)(c).topic(ctx, name)
}

// ElectPreferredLeaders implements replica.Controller.
func (c *netController) ElectPreferredLeaders(ctx context.Context) (int, error) {
	nc := (*netCluster)(c)
	var n int
	err := nc.call(ctx, func() (err error) {
		n, err = nc.q.ElectPreferredLeaders(ctx)
		return err
	}, func(string) error {
		return fmt.Errorf("spool: preferred election from a broker that is not the controller: %w", errors.ErrUnsupported)
	})
	return n, err
}

// The clusterBackend of a networked node.

func (nc *netCluster) join(b *Broker) error { return nil } // openNetNode did it

// leave moves the node's leaderships away (a controlled shutdown), hands
// the controller's leadership to another voter, and stops the quorum
// member and the replicas.
func (nc *netCluster) leave(b *Broker) error {
	var errs []error
	errs = append(errs, b.node.Close())
	nc.cancel()
	nc.wg.Wait()
	close(nc.failed) // run, its only sender, has returned
	if nc.q.Active() {
		nc.q.TransferLeadership()
	}
	errs = append(errs, nc.q.Close())
	b.rmu.Lock()
	for _, p := range b.replicas {
		errs = append(errs, p.Close())
	}
	b.replicas = nil
	b.rmu.Unlock()
	return errors.Join(errs...)
}

func (nc *netCluster) topic(ctx context.Context, name string) (replica.TopicSpec, []replica.PartitionState, error) {
	t, ok := nc.q.Image().Topic(name)
	if !ok {
		return replica.TopicSpec{}, nil, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, name)
	}
	spec := replica.TopicSpec{Name: name, Partitions: len(t.Partitions), Config: slices.Clone([]byte(t.Config)), UncleanLeaderElection: t.Unclean}
	if len(t.Partitions) > 0 {
		spec.ReplicationFactor = t.Partitions[0].ReplicationFactor() // not counting what a reassignment adds
	}
	states := make([]replica.PartitionState, len(t.Partitions))
	for i, st := range t.Partitions {
		states[i] = st.Clone()
	}
	return spec, states, nil
}

func (nc *netCluster) topicNames() []string { return nc.q.Image().Topics() }

func (nc *netCluster) replicatesOffsets() bool { return true }

// topicNamed implements clusterBackend from the node's metadata image.
func (nc *netCluster) topicNamed(id TopicID) (string, bool) {
	if t, ok := nc.q.Image().TopicByID(id.String()); ok {
		return t.Name, true
	}
	return "", false
}

// topicIdentity implements clusterBackend from the node's metadata image.
func (nc *netCluster) topicIdentity(name string) (TopicID, func(int32) bool) {
	im := nc.q.Image()
	var id TopicID
	if t, ok := im.Topic(name); ok {
		id, _ = ParseTopicID(t.ID)
	}
	return id, func(b int32) bool { br, ok := im.Broker(b); return !ok || br.Fenced }
}

func (nc *netCluster) createTopic(ctx context.Context, name string, own, eff TopicConfig) error {
	data, err := encodeTopicSpec(own)
	if err != nil {
		return err
	}
	req := controller.TopicRequest{Name: name, Partitions: int(eff.Partitions), ReplicationFactor: eff.ReplicationFactor,
		Config: data, Unclean: eff.UncleanLeaderElection, MinISR: eff.MinInSyncReplicas}
	var index uint64
	ambiguous, err := nc.callAmbiguous(ctx, func() error {
		_, err := nc.q.CreateTopic(ctx, req)
		index = nc.q.Image().Index()
		return err
	}, func(addr string) error {
		fwd := own
		fwd.Partitions, fwd.ReplicationFactor = eff.Partitions, eff.ReplicationFactor
		return nc.b.opts.Node.Remote.CreateTopic(ctx, addr, name, fwd)
	})
	if ambiguous && errors.Is(err, replica.ErrTopicExists) {
		// Most likely an earlier attempt of ours created it: say so only
		// for a topic created with the settings asked.
		if t, ok := nc.q.Image().Topic(name); ok && string(t.Config) == string(data) {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	// Answer once this node's image has the topic, so that what the caller
	// does next here (metadata, produce) sees it.
	for index == 0 || nc.q.Image().Index() < index {
		if _, ok := nc.q.Image().Topic(name); ok {
			return nil
		}
		select {
		case <-nc.q.Changed():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (nc *netCluster) deleteTopic(ctx context.Context, name string) error {
	ambiguous, err := nc.callAmbiguous(ctx, func() error { return nc.q.DeleteTopic(ctx, name) },
		func(addr string) error { return nc.opts.Remote.DeleteTopic(ctx, addr, name) })
	if ambiguous && errors.Is(err, replica.ErrUnknownTopic) {
		return nil // an earlier attempt deleted it
	}
	return err
}

func (nc *netCluster) createPartitions(ctx context.Context, name string, total int32) error {
	ambiguous, err := nc.callAmbiguous(ctx, func() error { return nc.q.CreatePartitions(ctx, name, int(total)) },
		func(addr string) error { return nc.opts.Remote.CreatePartitions(ctx, addr, name, total) })
	if ambiguous && errors.Is(err, replica.ErrInvalidConfig) {
		// An earlier attempt of ours most likely added them.
		if t, ok := nc.q.Image().Topic(name); ok && len(t.Partitions) == int(total) {
			return nil
		}
	}
	return err
}

func (nc *netCluster) alterTopicConfig(ctx context.Context, name string, alter func(own TopicConfig) (TopicConfig, error)) error {
	for attempt := 0; ; attempt++ {
		t, ok := nc.q.Image().Topic(name)
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
		}
		cur, err := decodeTopicSpec(replica.TopicSpec{Name: name, Config: t.Config, UncleanLeaderElection: t.Unclean})
		if err != nil {
			return err
		}
		cur.Partitions, cur.ReplicationFactor = 0, 0
		next, err := alter(cur)
		if err != nil {
			return err
		}
		next.Partitions, next.ReplicationFactor = 0, 0
		if err := nc.b.CheckTopicConfig(next); err != nil {
			return err
		}
		eff := nc.b.effective(next)
		if rf := t.Partitions[0].ReplicationFactor(); eff.MinInSyncReplicas > rf {
			return fmt.Errorf("%w: min.insync.replicas %d > replication factor %d", ErrInvalidConfig, eff.MinInSyncReplicas, rf)
		}
		data, err := encodeTopicSpec(next)
		if err != nil {
			return err
		}
		change := controller.TopicConfigChange{Name: name, BaseVersion: t.ConfigVersion, Config: data, Unclean: eff.UncleanLeaderElection, MinISR: eff.MinInSyncReplicas}
		err = nc.call(ctx, func() error { return nc.q.AlterTopicConfig(ctx, change) },
			func(addr string) error { return nc.opts.Remote.AlterTopicConfig(ctx, addr, name, next) })
		if errors.Is(err, controller.ErrConfigChanged) && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		nc.applyConfig(name)
		return nil
	}
}

// applyConfig reconfigures this node's replicas of a topic after its
// settings changed (segment size and age, retention, compaction).
func (nc *netCluster) applyConfig(name string) {
	b := nc.b
	t, ok := nc.q.Image().Topic(name)
	if !ok {
		return
	}
	own, err := decodeTopicSpec(replica.TopicSpec{Name: name, Config: t.Config})
	if err != nil {
		return
	}
	lo := b.logOptions(b.effective(own))
	for _, p := range b.replicaPartitions() {
		if p.Topic() == name {
			if err := p.Log().Reconfigure(lo); err != nil {
				b.logger.Warn("reconfiguring a replica", "topic", name, "partition", p.ID(), "err", err)
			}
		}
	}
}

// leader is this node's replica of a partition if it leads it; otherwise a
// *replica.NotLeaderError naming the leader the metadata knows.
func (nc *netCluster) leader(ctx context.Context, topic string, n int32) (*replica.ReplicaSet, error) {
	st, ok := nc.q.Image().Partition(topic, n)
	if !ok {
		if _, ok := nc.q.Image().Topic(topic); !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
		}
		return nil, fmt.Errorf("%w: %s-%d", ErrUnknownPartition, topic, n)
	}
	if st.Leader < 0 {
		return nil, fmt.Errorf("%w: %s-%d", replica.ErrLeaderNotAvailable, topic, n)
	}
	if rs, ok := nc.b.node.ReplicaSet(topic, n); ok && rs.IsLeader() {
		return rs, nil
	}
	return nil, &replica.NotLeaderError{Topic: topic, Partition: n, Broker: nc.b.opts.NodeID, Leader: st.Leader, LeaderEpoch: st.LeaderEpoch}
}

// roleChanged loads or unloads the consumer groups of an offsets partition
// as this node starts or stops leading it: a group's coordinator is the
// leader of its offsets partition.
func (nc *netCluster) roleChanged(topic string, p int32, leading bool, epoch int32) {
	if topic == TransactionStateTopic {
		nc.txnRoleChanged(p, leading, epoch)
		return
	}
	if topic != OffsetsTopic {
		return
	}
	b := nc.b
	n := nc.offsetsPartitions()
	owns := func(g string) bool { return n > 0 && offsetsPartitionFor(g, n) == p }
	if !leading {
		nc.mu.Lock()
		delete(nc.loading, p)
		nc.mu.Unlock()
		if k := b.coord.Unload(owns); k > 0 {
			b.logger.Info("no longer coordinating the groups of an offsets partition", "partition", p, "groups", k)
		}
		return
	}
	nc.mu.Lock()
	nc.loading[p] = true
	nc.mu.Unlock()
	nc.wg.Add(1)
	go func() {
		defer nc.wg.Done()
		b.coord.Unload(owns) // anything left from an earlier term
		rs, ok := b.node.ReplicaSet(topic, p)
		var err error
		if ok {
			err = b.loadOffsetsPartition(rs.Partition(), rs.Partition().EndOffset())
		}
		nc.mu.Lock()
		defer nc.mu.Unlock()
		if _, still := nc.loading[p]; !still {
			return // lost the leadership meanwhile
		}
		if err != nil {
			b.logger.Error("loading committed offsets", "partition", p, "err", err)
			delete(nc.loading, p)
			return
		}
		nc.loading[p] = false
		b.logger.Info("coordinating the groups of an offsets partition", "partition", p, "leader_epoch", epoch)
	}()
}

// offsetsPartitions is the partition count of __consumer_offsets (0 while
// it does not exist).
func (nc *netCluster) offsetsPartitions() int32 { return nc.partitionsOf(OffsetsTopic) }

// partitionsOf is a topic's partition count in the image (0 while it does
// not exist).
func (nc *netCluster) partitionsOf(topic string) int32 {
	t, ok := nc.q.Image().Topic(topic)
	if !ok {
		return 0
	}
	return int32(len(t.Partitions))
}

// coordinator reports which broker coordinates a group - the leader of its
// offsets partition - creating the offsets topic first if needed.
func (nc *netCluster) coordinator(ctx context.Context, groupID string) (int32, error) {
	return nc.keyLeader(ctx, OffsetsTopic, groupID, nc.opts.OffsetsReplicationFactor, func(rf int) TopicConfig {
		return offsetsTopicConfig(nc.b.opts.OffsetsTopicPartitions, rf)
	})
}

// keyLeader is the leader of the partition of an internal topic a key (a
// group id, a transactional id) belongs to - abs(javaHash(key)) % count -
// creating the topic first, with cfg, if it does not exist yet.
func (nc *netCluster) keyLeader(ctx context.Context, topic, key string, maxRF int, cfg func(rf int) TopicConfig) (int32, error) {
	n := nc.partitionsOf(topic)
	if n == 0 {
		if err := nc.b.createInternalTopic(ctx, topic, maxRF, cfg); err != nil {
			return -1, err
		}
		if n = nc.partitionsOf(topic); n == 0 {
			return -1, fmt.Errorf("%w: %s is being created", ErrCoordinatorNotAvailable, topic)
		}
	}
	st, _ := nc.q.Image().Partition(topic, txn.PartitionFor(key, int(n)))
	if st.Leader < 0 {
		return -1, fmt.Errorf("%w: %s-%d has no leader", ErrCoordinatorNotAvailable, topic, st.Partition)
	}
	return st.Leader, nil
}

// checkCoordinator reports whether this node coordinates a group now.
func (nc *netCluster) checkCoordinator(groupID string) error {
	n := nc.offsetsPartitions()
	if n == 0 {
		return fmt.Errorf("%w: %s does not exist yet", ErrNotCoordinator, OffsetsTopic)
	}
	p := offsetsPartitionFor(groupID, n)
	nc.mu.Lock()
	loading, leads := nc.loading[p]
	nc.mu.Unlock()
	switch {
	case !leads:
		return fmt.Errorf("%w: broker %d does not lead %s-%d", ErrNotCoordinator, nc.b.opts.NodeID, OffsetsTopic, p)
	case loading:
		return fmt.Errorf("%w: %s-%d", ErrCoordinatorLoadInProgress, OffsetsTopic, p)
	}
	// A lease: a node cut off from the controller may already have been
	// fenced and its partitions led elsewhere, where commits go on; what it
	// would answer of the group is stale. The controller fences no sooner
	// than a session timeout after the last heartbeat it answered, which
	// this node sent at heard: it stops coordinating a quarter of one
	// before.
	if since := time.Since(processStart) - time.Duration(nc.heard.Load()); since > nc.opts.SessionTimeout*3/4 {
		return fmt.Errorf("%w: broker %d has not heard from the controller for %v", ErrNotCoordinator, nc.b.opts.NodeID, since.Round(time.Millisecond))
	}
	return nil
}

// createInternalTopic creates an internal topic (__consumer_offsets,
// __transaction_state) in the cluster with maxRF replicas (fewer in a
// smaller cluster: as many as there are voters or registered brokers,
// whichever is more) and the settings cfg gives for that count.
func (b *Broker) createInternalTopic(ctx context.Context, topic string, maxRF int, cfg func(rf int) TopicConfig) error {
	nc := b.nc
	size := max(len(nc.opts.Voters), len(nc.q.Image().Brokers()))
	own := cfg(min(maxRF, size))
	err := b.cl.createTopic(ctx, topic, own, b.effective(own))
	switch {
	case errors.Is(err, replica.ErrTopicExists):
		return nil
	case errors.Is(err, replica.ErrNotEnoughBrokers):
		return fmt.Errorf("%w: %v", ErrCoordinatorNotAvailable, err)
	}
	return err
}

// Errors of group coordination in a cluster (package transport maps them
// to NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and
// COORDINATOR_NOT_AVAILABLE).
var (
	ErrNotCoordinator            = errors.New("spool: not the group's coordinator")
	ErrCoordinatorLoadInProgress = errors.New("spool: the group's coordinator is loading its offsets")
	ErrCoordinatorNotAvailable   = errors.New("spool: the group's coordinator is not available")
)

// noForwardKey marks a context whose controller operations must not be
// forwarded to another node.
type noForwardKey struct{}

// ControllerOnly returns a context for operations that must run on this
// node's controller: a node that is not the active controller answers them
// with a *controller.NotControllerError instead of forwarding them. Package
// transport uses it for requests forwarded to this node by others, so that
// a request is never forwarded twice.
func ControllerOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, noForwardKey{}, true)
}

func noForward(ctx context.Context) bool { v, _ := ctx.Value(noForwardKey{}).(bool); return v }

// Quorum is the node's member of the controller quorum (nil on a broker
// that is not a networked cluster node), for package transport to serve
// Raft connections and controller requests.
func (b *Broker) Quorum() *controller.Quorum {
	if b.nc == nil {
		return nil
	}
	return b.nc.q
}

// AlterSettings replaces one of the cluster's settings documents - its
// ACLs, its client quotas - through the active controller, if the
// document is still at c.BaseVersion (else controller.ErrConfigChanged:
// read it from Quorum().Image() again and retry). Every node applies the
// change from the metadata log; package transport keeps its authorizer
// and quotas so. A broker that is not a networked cluster node has none:
// errors.ErrUnsupported.
func (b *Broker) AlterSettings(ctx context.Context, c controller.SettingsChange) error {
	nc := b.nc
	if nc == nil {
		return fmt.Errorf("spool: cluster settings on a broker that is not a cluster node: %w", errors.ErrUnsupported)
	}
	return nc.call(ctx, func() error { return nc.q.AlterSettings(ctx, c) },
		func(addr string) error { return nc.opts.Remote.AlterSettings(ctx, addr, c) })
}

// ReplicaNode is the broker's replication (nil on a standalone broker),
// for package transport to serve other brokers' followers.
func (b *Broker) ReplicaNode() *replica.Node { return b.node }
