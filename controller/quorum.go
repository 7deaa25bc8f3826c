package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Voter is a member of the controller quorum: a node id and the address
// of its controller listener (one entry of controller.quorum.voters).
type Voter struct {
	ID   int32
	Addr string
}

// ParseVoters parses controller.quorum.voters: "1@host:port,2@host:port".
// Ids must be distinct and non-negative, addresses host:port with a host
// and a port from 1 to 65535.
func ParseVoters(s string) ([]Voter, error) {
	var out []Voter
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ids, addr, ok := strings.Cut(part, "@")
		id, err := strconv.ParseInt(ids, 10, 32)
		if !ok || err != nil || id < 0 {
			return nil, fmt.Errorf("%w: voter %q: want ID@HOST:PORT", ErrInvalidConfig, part)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: voter %q: %v", ErrInvalidConfig, part, err)
		}
		// Every node dials a voter at this address: it needs a host and a
		// real port (not 0, which only a listener can pick).
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || host == "" {
			return nil, fmt.Errorf("%w: voter %q: want ID@HOST:PORT with a host and a port from 1 to 65535", ErrInvalidConfig, part)
		}
		for _, v := range out {
			if v.ID == int32(id) {
				return nil, fmt.Errorf("%w: voter id %d listed twice", ErrInvalidConfig, id)
			}
		}
		out = append(out, Voter{ID: int32(id), Addr: addr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no voters in %q", ErrInvalidConfig, s)
	}
	return out, nil
}

// FormatVoters is the canonical form of a voter list: sorted by id.
func FormatVoters(vs []Voter) string {
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(a, b Voter) int { return int(a.ID) - int(b.ID) })
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%d@%s", v.ID, v.Addr)
	}
	return strings.Join(parts, ",")
}

// Stores are the Raft log and stable store of a node.
type Stores struct {
	Log    raft.LogStore
	Stable raft.StableStore
	// Close releases them after Raft stopped.
	Close func() error
}

// Config configures a Quorum. Zero durations take the defaults named.
type Config struct {
	// NodeID is this node's id (node.id).
	NodeID int32
	// ValidateSettings, if set, checks a settings document before the
	// active controller commits it (AlterSettings): every node must be
	// able to read it. Package transport supplies the decoders.
	ValidateSettings func(SettingsKind, []byte) error
	// Dir is the node's data directory: the metadata log and its
	// snapshots live in it (MetadataDir).
	Dir string
	// Voters is the controller quorum (controller.quorum.voters). A node
	// listed is a voter; any other node is a broker that follows the
	// metadata log as a non-voting Raft member.
	Voters []Voter
	// Addr is this node's controller listener as the others reach it: its
	// voter address, or for a non-voter the address it registers with.
	Addr string
	// ListenAddr is the address the node's controller listener is bound
	// to, if known. At its own voter address no other process can be, so
	// Open does not greet it; elsewhere Open greets the voter address to
	// make sure no other process serves this node's id there.
	ListenAddr string
	// ClusterID is the cluster's id if known (meta.properties); "" on a
	// node that has not joined yet: it adopts the quorum's.
	ClusterID string
	// OnClusterID is called once with the cluster id when this node learns
	// it (it must persist it); an error stops the node.
	OnClusterID func(id string) error
	// Dial connects to a controller listener. Default: TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// OpenStores opens the Raft log and stable store in Dir. Required.
	OpenStores func(dir string) (Stores, error)
	// SessionTimeout fences a broker that sends no heartbeat for this long
	// (broker.session.timeout.ms). Default 2s.
	SessionTimeout time.Duration
	// ElectionTimeout is Raft's heartbeat and election timeout among the
	// controllers (controller.quorum.election.timeout.ms). Default 500ms.
	ElectionTimeout time.Duration
	// SnapshotThreshold is how many metadata entries go by between
	// snapshots of the image (metadata.log.max.record.bytes.between.snapshots,
	// counted in entries). Default 8192.
	SnapshotThreshold uint64
	// Logger receives the quorum's and Raft's messages. Default: none.
	Logger *slog.Logger
}

// Errors of the controller.
var (
	// ErrInvalidConfig reports a bad Config or request argument.
	ErrInvalidConfig = errors.New("controller: invalid configuration")
	// ErrClosed means the quorum was closed.
	ErrClosed = errors.New("controller: closed")
	// ErrStaleBrokerEpoch refuses a request from a broker incarnation that
	// is not the registered one (STALE_BROKER_EPOCH).
	ErrStaleBrokerEpoch = errors.New("controller: stale broker epoch")
	// ErrDuplicateRegistration refuses a broker registering while another
	// incarnation with its id is alive (DUPLICATE_BROKER_REGISTRATION).
	ErrDuplicateRegistration = errors.New("controller: another process is registered with this broker id")
	// ErrInconsistentClusterID refuses a request from another cluster
	// (INCONSISTENT_CLUSTER_ID).
	ErrInconsistentClusterID = errors.New("controller: request from another cluster")
)

// NotControllerError means this node is not the active controller; Leader
// and Addr name the one it knows of (-1, "" if none).
type NotControllerError struct {
	Leader int32
	Addr   string
}

func (e *NotControllerError) Error() string {
	if e.Leader < 0 {
		return "controller: not the active controller, and no active controller is known"
	}
	return fmt.Sprintf("controller: not the active controller; node %d at %s is", e.Leader, e.Addr)
}

// MetadataDir is the metadata log's directory in a node's data directory.
func MetadataDir(dataDir string) string { return filepath.Join(dataDir, "__cluster_metadata-0") }

// SnapshotsDir holds the metadata snapshots, beside the log.
func SnapshotsDir(dataDir string) string {
	return filepath.Join(dataDir, "__cluster_metadata-snapshots")
}

// Quorum is one node's part of the controller quorum: its Raft member,
// its image of the committed metadata log, and - while its Raft member
// leads - the active controller, the only writer of metadata (KRaft's
// QuorumController). Safe for concurrent use.
type Quorum struct {
	cfg         Config
	log         *slog.Logger
	incarnation string
	voter       bool

	raft   *raft.Raft
	trans  *raft.NetworkTransport
	stream *streamLayer
	// progress is the leader's record of the members' replication, for
	// Describe; Raft sends through observedTransport to fill it.
	progress *progress
	fsm      *fsm
	stores   Stores

	cid atomic.Pointer[string]

	// The active controller's state, valid while active.
	opMu     sync.Mutex // serializes operations: each computes from the image its predecessor left
	active   atomic.Bool
	sessions sync.Map // broker id -> *session
	assign   int      // where the next topic's replica assignment starts

	stop chan struct{}
	wg   sync.WaitGroup
}

type session struct {
	epoch    int64
	lastBeat atomic.Int64 // unix nanos
}

// Open starts this node's member of the quorum. A voter with no Raft state
// bootstraps the quorum with Voters (every voter does the same, so they
// agree); a non-voter waits until the active controller adds it. Before
// starting, it greets every voter it can reach: a voter that belongs to
// another cluster, has another voter list or claims this node's id makes
// Open fail with ErrPeerMismatch, naming the fix.
func Open(cfg Config) (*Quorum, error) {
	if cfg.OpenStores == nil || len(cfg.Voters) == 0 || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: a quorum needs Dir, Voters and OpenStores", ErrInvalidConfig)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 2 * time.Second
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = 500 * time.Millisecond
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = 8192
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Dial == nil {
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	q := &Quorum{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), stop: make(chan struct{})}
	var nonce [8]byte
	rand.Read(nonce[:])
	q.incarnation = hex.EncodeToString(nonce[:])
	cid := cfg.ClusterID
	q.cid.Store(&cid)
	for _, v := range cfg.Voters {
		if v.ID == cfg.NodeID {
			q.voter = true
			if q.cfg.Addr == "" {
				q.cfg.Addr = v.Addr
			}
		}
	}
	if q.cfg.Addr == "" {
		return nil, fmt.Errorf("%w: node %d is not a voter and has no controller address of its own", ErrInvalidConfig, cfg.NodeID)
	}
	q.fsm = newFSM(q.log)
	q.stream = newStreamLayer(q)
	if err := q.probe(); err != nil {
		return nil, err
	}
	if err := q.startRaft(); err != nil {
		q.stream.Close()
		return nil, err
	}
	q.wg.Add(2)
	go q.watchLeadership()
	go q.watchImage()
	return q, nil
}

// sameAddr reports whether the voter address v names the bound address l
// (a host name resolving to its IP, or l listening on every interface).
func sameAddr(v, l string) bool {
	if v == l {
		return true
	}
	vh, vp, err1 := net.SplitHostPort(v)
	lh, lp, err2 := net.SplitHostPort(l)
	if err1 != nil || err2 != nil || vp != lp {
		return false
	}
	if ip := net.ParseIP(lh); ip != nil && ip.IsUnspecified() {
		return true
	}
	ips, err := net.LookupHost(vh)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if a, b := net.ParseIP(ip), net.ParseIP(lh); a != nil && b != nil && a.Equal(b) {
			return true
		}
	}
	return false
}

// probe greets the voters before Raft starts (see Open). Unreachable
// voters are skipped: they check this node when they start.
func (q *Quorum) probe() error {
	var wg sync.WaitGroup
	errs := make([]error, len(q.cfg.Voters))
	for i, v := range q.cfg.Voters {
		if v.ID == q.cfg.NodeID && sameAddr(v.Addr, q.cfg.ListenAddr) {
			// This node is bound to its own voter address (not served
			// yet): no other process can be there.
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c, ans, err := q.dialHello(ctx, v.Addr)
			if err != nil {
				return
			}
			c.Close()
			switch {
			case ans.Error != "":
				errs[i] = fmt.Errorf("%w: voter %d at %s: %s", ErrPeerMismatch, v.ID, v.Addr, ans.Error)
			case v.ID == q.cfg.NodeID && (ans.NodeID != q.cfg.NodeID || ans.Incarnation != q.incarnation):
				if ans.NodeID == q.cfg.NodeID {
					errs[i] = fmt.Errorf("%w: another process already serves node %d's controller address %s: give each node its own --node-id", ErrPeerMismatch, v.ID, v.Addr)
				} else {
					errs[i] = fmt.Errorf("%w: node %d's controller address %s is served by node %d: check --controller-quorum-voters", ErrPeerMismatch, v.ID, v.Addr, ans.NodeID)
				}
			case v.ID != q.cfg.NodeID && ans.NodeID != v.ID:
				errs[i] = fmt.Errorf("%w: voter %d's address %s is served by node %d: check --controller-quorum-voters", ErrPeerMismatch, v.ID, v.Addr, ans.NodeID)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (q *Quorum) startRaft() error {
	stores, err := q.cfg.OpenStores(q.cfg.Dir)
	if err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(SnapshotsDir(q.cfg.Dir), 3, newHCLogger(q.log))
	if err != nil {
		stores.Close()
		return fmt.Errorf("controller: snapshots: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(strconv.Itoa(int(q.cfg.NodeID)))
	rc.HeartbeatTimeout = q.cfg.ElectionTimeout
	rc.ElectionTimeout = q.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = q.cfg.ElectionTimeout / 2
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = q.cfg.SnapshotThreshold
	rc.TrailingLogs = q.cfg.SnapshotThreshold
	rc.Logger = newHCLogger(q.log)
	q.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: q.stream, MaxPool: 3, Timeout: 5 * time.Second, Logger: rc.Logger,
	})
	existing, err := raft.HasExistingState(stores.Log, stores.Stable, snaps)
	if err != nil {
		q.trans.Close()
		stores.Close()
		return err
	}
	if !existing && q.voter {
		var servers []raft.Server
		for _, v := range q.cfg.Voters {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(strconv.Itoa(int(v.ID))), Address: raft.ServerAddress(v.Addr)})
		}
		if err := raft.BootstrapCluster(rc, stores.Log, stores.Stable, snaps, q.trans, raft.Configuration{Servers: servers}); err != nil {
			q.trans.Close()
			stores.Close()
			return fmt.Errorf("controller: bootstrap: %w", err)
		}
	}
	q.progress = newProgress()
	r, err := raft.NewRaft(rc, q.fsm, stores.Log, stores.Stable, snaps, &observedTransport{NetworkTransport: q.trans, progress: q.progress})
	if err != nil {
		q.trans.Close()
		stores.Close()
		return fmt.Errorf("controller: raft: %w", err)
	}
	q.progress.raft.Store(r)
	q.raft, q.stores = r, stores
	return nil
}

// Close stops the node's member of the quorum. It does not hand
// leadership over first: the other voters elect a new leader within
// ElectionTimeout or so.
func (q *Quorum) Close() error {
	select {
	case <-q.stop:
		return nil
	default:
	}
	close(q.stop)
	q.active.Store(false)
	// Raft's shutdown waits for its goroutines before it closes the
	// transport; one blocked on a peer's connection would wait with it.
	// So: start the shutdown, cut every Raft connection, then wait.
	f := q.raft.Shutdown()
	q.trans.Close()
	q.stream.Close()
	err := f.Error()
	q.wg.Wait()
	return errors.Join(err, q.stores.Close())
}

// wait waits for a Raft future, or for Close. hashicorp/raft (v1.8.0)
// answers most futures only from its main loop: one queued when Raft shuts
// down is never answered, and its Error would wait forever - a CI run
// showed Close waiting on activate's Barrier. The goroutine left waiting
// on such a future ends with the process; there is one per future that
// raced the shutdown.
func (q *Quorum) wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-q.stop:
		select {
		case err := <-done:
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}

// Image is the image of the committed metadata this node has applied.
func (q *Quorum) Image() *Image { return q.fsm.image() }

// Changed returns a channel closed when the image next changes.
func (q *Quorum) Changed() <-chan struct{} { return q.fsm.changed.Wait() }

// WaitIndex waits until this node's image includes entry index.
func (q *Quorum) WaitIndex(ctx context.Context, index uint64) error {
	for {
		ch := q.Changed()
		if q.Image().Index() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-q.stop:
			return ErrClosed
		}
	}
}

// Active reports whether this node is the active controller.
func (q *Quorum) Active() bool { return q.active.Load() }

// Voter reports whether this node is a voter.
func (q *Quorum) Voter() bool { return q.voter }

// Leader names the Raft leader - the active controller once it has caught
// up - and its controller address (-1, "" when none is known).
func (q *Quorum) Leader() (int32, string) {
	addr, id := q.raft.LeaderWithID()
	if id == "" {
		return -1, ""
	}
	n, err := strconv.Atoi(string(id))
	if err != nil {
		return -1, ""
	}
	return int32(n), string(addr)
}

// Addr is this node's controller address.
func (q *Quorum) Addr() string { return q.cfg.Addr }

// Voters is the quorum's voter list.
func (q *Quorum) Voters() []Voter { return slices.Clone(q.cfg.Voters) }

func (q *Quorum) clusterID() string { return *q.cid.Load() }

// ClusterID is the cluster's id ("" until known).
func (q *Quorum) ClusterID() string { return q.clusterID() }

// watchImage adopts the cluster id once the metadata log names it.
func (q *Quorum) watchImage() {
	defer q.wg.Done()
	for {
		ch := q.Changed()
		if cid := q.Image().ClusterID(); cid != "" {
			cur := q.clusterID()
			switch {
			case cur == "":
				if q.cfg.OnClusterID != nil {
					if err := q.cfg.OnClusterID(cid); err != nil {
						q.log.Error("cannot record the cluster id", "cluster_id", cid, "err", err)
					}
				}
				q.cid.Store(&cid)
				q.log.Info("joined cluster", "cluster_id", cid)
			case cur != cid:
				q.log.Error("the metadata log names another cluster than this node's data directory; refusing to act on it",
					"log_cluster_id", cid, "node_cluster_id", cur)
			}
			return
		}
		select {
		case <-ch:
		case <-q.stop:
			return
		}
	}
}

// notController is the error for an operation on a node that is not the
// active controller.
func (q *Quorum) notController() error {
	id, addr := q.Leader()
	if id == q.cfg.NodeID {
		// Leading, but not caught up yet (or just lost it): retry.
		id, addr = -1, ""
	}
	return &NotControllerError{Leader: id, Addr: addr}
}

// MetadataTopic is the name the metadata log's directory carries, as
// Kafka's __cluster_metadata-0.
const MetadataTopic = "__cluster_metadata"

// TransferLeadership hands the Raft leadership - and so the active
// controller - to another voter, best effort: a node shutting down calls it
// so that the quorum does not wait an election timeout.
func (q *Quorum) TransferLeadership() {
	if q.raft.State() != raft.Leader {
		return
	}
	q.active.Store(false)
	if err := q.wait(q.raft.LeadershipTransfer()); err != nil {
		q.log.Debug("leadership transfer", "err", err)
	}
}
