package replica

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// FetchRequest is a follower asking the leader for records (Kafka's Fetch
// with a replica id).
type FetchRequest struct {
	Topic     string
	Partition int32
	// ReplicaID and BrokerEpoch name the fetching broker incarnation.
	ReplicaID   int32
	BrokerEpoch int64
	// FetchOffset is the follower's log end offset: where to read from,
	// and how far the follower has got.
	FetchOffset int64
	// CurrentLeaderEpoch is the leader epoch the follower believes in; the
	// leader fences a request from another epoch (KIP-320).
	CurrentLeaderEpoch int32
	// LastFetchedEpoch is the epoch of the follower's last batch (-1 if
	// none): the leader checks it against its own history and answers with
	// Diverging instead of records when the logs differ.
	LastFetchedEpoch int32
	// MaxBytes bounds the records returned (the first batch comes whole
	// whatever its size). MaxWait is how long the leader may wait for
	// records when it has none.
	MaxBytes int
	MaxWait  time.Duration
}

// FetchResponse is the leader's answer to a FetchRequest.
type FetchResponse struct {
	// Records are whole RecordBatch v2 frames starting at the fetch offset.
	Records []byte
	// HighWatermark, LogStartOffset and LogEndOffset are the leader's.
	HighWatermark  int64
	LogStartOffset int64
	LogEndOffset   int64
	// Diverging, when set, says the follower's log differs from the
	// leader's: the leader's largest epoch at or below LastFetchedEpoch and
	// where it ends. The follower truncates before fetching again.
	Diverging *EpochEnd
}

// EpochRequest asks the leader where an epoch ends (Kafka's
// OffsetsForLeaderEpoch).
type EpochRequest struct {
	Topic              string
	Partition          int32
	ReplicaID          int32
	CurrentLeaderEpoch int32
	Epoch              int32
}

// EpochEnd is a leader epoch and the offset where it ends (the start of the
// next epoch, or the log end for the latest): -1, -1 when unknown.
type EpochEnd struct {
	Epoch     int32
	EndOffset int64
}

// Link is one broker's way to another's replicas: what a follower calls on
// its leader. The in-process implementation calls the other Node directly; a
// networked one sends Kafka's Fetch and OffsetsForLeaderEpoch.
type Link interface {
	Fetch(ctx context.Context, req *FetchRequest) (*FetchResponse, error)
	EndOffsetForEpoch(ctx context.Context, req *EpochRequest) (EpochEnd, error)
}

// Network hands out links between brokers.
type Network interface {
	// Link returns the link from broker from to broker to. Failures to
	// reach to show up as errors (wrapping ErrUnreachable) from the link's
	// calls, not here.
	Link(from, to int32) Link
}

// LocalNetwork connects Nodes in one process: a link calls the target
// Node's handlers directly. Safe for concurrent use.
type LocalNetwork struct {
	mu    sync.RWMutex
	nodes map[int32]Link
}

// NewLocalNetwork returns an empty in-process network.
func NewLocalNetwork() *LocalNetwork { return &LocalNetwork{nodes: map[int32]Link{}} }

// Register makes broker id reachable, served by h (usually its *Node).
func (n *LocalNetwork) Register(id int32, h Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[id] = h
}

// Unregister makes broker id unreachable.
func (n *LocalNetwork) Unregister(id int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.nodes, id)
}

// Link returns a link to broker to; it looks the broker up on every call,
// so it follows a broker that restarts.
func (n *LocalNetwork) Link(from, to int32) Link { return localLink{n: n, to: to} }

func (n *LocalNetwork) lookup(id int32) (Link, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	h, ok := n.nodes[id]
	if !ok {
		return nil, fmt.Errorf("%w: broker %d", ErrUnreachable, id)
	}
	return h, nil
}

type localLink struct {
	n  *LocalNetwork
	to int32
}

func (l localLink) Fetch(ctx context.Context, req *FetchRequest) (*FetchResponse, error) {
	h, err := l.n.lookup(l.to)
	if err != nil {
		return nil, err
	}
	return h.Fetch(ctx, req)
}

func (l localLink) EndOffsetForEpoch(ctx context.Context, req *EpochRequest) (EpochEnd, error) {
	h, err := l.n.lookup(l.to)
	if err != nil {
		return EpochEnd{}, err
	}
	return h.EndOffsetForEpoch(ctx, req)
}
