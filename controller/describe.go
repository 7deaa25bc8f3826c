package controller

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// What the quorum's leader knows of how far each member has replicated
// the metadata log, for DescribeQuorum (KIP-595, KIP-836).
//
// hashicorp/raft keeps each follower's match index in its leader's
// replication state and exports none of it (Stats and the observer
// events say nothing per follower). Every AppendEntries the leader sends
// - its heartbeats, about every ElectionTimeout/10, included - is answered
// with the follower's last log index, though, so the leader's transport is
// wrapped (observedTransport) to record those answers. What that gives,
// and where it is approximate:
//
//   - a member's log end offset is the last index it reported (a Raft
//     index is the metadata log's offset + 1, so the last index is the
//     Kafka log end offset), or, after a successful append, the last entry
//     it took: at most a heartbeat interval old. Appends pipelined by
//     hashicorp/raft are not seen; the heartbeat that follows is. A
//     follower whose log has an uncommitted tail the leader will truncate
//     reports its whole length until the leader's next append reaches it.
//   - its last fetch is when the leader last heard it answer (Kafka: when
//     it last fetched).
//   - its last caught-up time follows Kafka's rule
//     (ReplicaState.updateFollowerState), with the leader's last index
//     when it sent the request standing for the leader's log end at the
//     fetch.
//
// A new leader knows nothing of the others until their first answer in
// its term: -1 and no times, as Kafka reports.

// ReplicaProgress is one member of the quorum as the leader sees it
// (DescribeQuorum's ReplicaState).
type ReplicaProgress struct {
	// ID is the member's node id.
	ID int32
	// LogEndOffset is the member's metadata log end offset; -1 while
	// unknown.
	LogEndOffset int64
	// LastFetch is when the leader last heard from the member (zero while
	// unknown); LastCaughtUp the last time the member was known to hold
	// everything the leader did. Both are the leader's clock; for the
	// leader itself, now.
	LastFetch, LastCaughtUp time.Time
}

// QuorumDescription is the controller quorum as its leader describes it
// (DescribeQuorum).
type QuorumDescription struct {
	// LeaderID is the Raft leader, the active controller once caught up.
	LeaderID int32
	// LeaderEpoch is the leader's Raft term, KRaft's leader epoch.
	LeaderEpoch int32
	// HighWatermark is the metadata log's high watermark: the Raft
	// commit index (the offset after the last committed entry).
	HighWatermark int64
	// Voters are the members that vote, the leader among them; Observers
	// the non-voting members (brokers that are not controllers), by id.
	Voters, Observers []ReplicaProgress
}

// Describe describes the quorum from its leader. A node whose Raft member
// does not lead answers with a *NotControllerError naming the leader it
// knows of (Kafka's NOT_LEADER_OR_FOLLOWER).
func (q *Quorum) Describe() (QuorumDescription, error) {
	if q.raft.State() != raft.Leader {
		id, addr := q.Leader()
		if id == q.cfg.NodeID {
			id, addr = -1, ""
		}
		return QuorumDescription{}, &NotControllerError{Leader: id, Addr: addr}
	}
	term := q.raft.CurrentTerm()
	f := q.raft.GetConfiguration()
	if err := q.wait(f); err != nil {
		return QuorumDescription{}, fmt.Errorf("controller: the quorum's configuration: %w", err)
	}
	now := time.Now()
	d := QuorumDescription{LeaderID: q.cfg.NodeID, LeaderEpoch: int32(min(term, math.MaxInt32)), HighWatermark: int64(q.raft.CommitIndex())}
	for _, s := range f.Configuration().Servers {
		n, err := strconv.ParseInt(string(s.ID), 10, 32)
		if err != nil {
			continue // not a member this package added
		}
		rp := ReplicaProgress{ID: int32(n), LogEndOffset: -1}
		if int32(n) == q.cfg.NodeID {
			rp.LogEndOffset, rp.LastFetch, rp.LastCaughtUp = int64(q.raft.LastIndex()), now, now
		} else if p, ok := q.progress.of(s.ID, term); ok {
			rp.LogEndOffset, rp.LastFetch, rp.LastCaughtUp = p.end, p.lastFetch, p.caughtUp
		}
		if s.Suffrage == raft.Voter {
			d.Voters = append(d.Voters, rp)
		} else {
			d.Observers = append(d.Observers, rp)
		}
	}
	byID := func(a, b ReplicaProgress) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(d.Voters, byID)
	slices.SortFunc(d.Observers, byID)
	return d, nil
}

// peerProgress is what the leader heard from one member in one term.
type peerProgress struct {
	term      uint64
	end       int64 // its log end offset, -1 unknown
	lastFetch time.Time
	caughtUp  time.Time
	// leaderEnd is the leader's log end at the member's previous fetch,
	// -1 before one.
	leaderEnd int64
}

// fetched is Kafka's ReplicaState.updateFollowerState: the member
// answered at now with log end end, the leader's log having ended at
// leaderEnd when it asked. It has caught up at now if it has all of that;
// else, if it has what the leader had at its previous fetch, it had caught
// up by then.
func (p peerProgress) fetched(now time.Time, end, leaderEnd int64) peerProgress {
	switch {
	case end >= leaderEnd:
		if now.After(p.caughtUp) {
			p.caughtUp = now
		}
	case p.leaderEnd >= 0 && end >= p.leaderEnd:
		if p.lastFetch.After(p.caughtUp) {
			p.caughtUp = p.lastFetch
		}
	}
	p.leaderEnd = leaderEnd
	if now.After(p.lastFetch) {
		p.lastFetch = now
	}
	p.end = end
	return p
}

// progress is the leader's record of the members' answers, by member.
type progress struct {
	raft atomic.Pointer[raft.Raft] // set once Raft runs: the leader's log end
	now  func() time.Time

	mu    sync.Mutex
	peers map[raft.ServerID]peerProgress
}

func newProgress() *progress {
	return &progress{now: time.Now, peers: map[raft.ServerID]peerProgress{}}
}

// leaderEnd is the leader's log end offset now, -1 before Raft runs.
func (p *progress) leaderEnd() int64 {
	r := p.raft.Load()
	if r == nil {
		return -1
	}
	return int64(r.LastIndex())
}

// heard records a member's answer to an AppendEntries of term args.Term,
// sent when the leader's log ended at leaderEnd. Answers from another term
// (a member that moved on, a leader that was deposed) say nothing about
// this leader's log.
func (p *progress) heard(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, leaderEnd int64) {
	if resp.Term != args.Term {
		return
	}
	end := int64(resp.LastLog) // its last index before this append
	if resp.Success && len(args.Entries) > 0 {
		end = int64(args.Entries[len(args.Entries)-1].Index)
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	cur, ok := p.peers[id]
	if !ok || cur.term != args.Term {
		cur = peerProgress{term: args.Term, end: -1, leaderEnd: -1}
	}
	if leaderEnd < 0 {
		leaderEnd = math.MaxInt64 // unknown: never counts as caught up
	}
	p.peers[id] = cur.fetched(now, end, leaderEnd)
}

// of is what was heard from member id in term.
func (p *progress) of(id raft.ServerID, term uint64) (peerProgress, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur, ok := p.peers[id]
	return cur, ok && cur.term == term
}

// observedTransport is Raft's network transport with every AppendEntries
// answer recorded in progress. Embedding keeps every other method, and the
// optional interfaces (pre-vote, Close), of the network transport.
type observedTransport struct {
	*raft.NetworkTransport
	progress *progress
}

// The wrapper must keep what Raft looks for on its transport beyond
// raft.Transport, or Raft would quietly run without it (pre-vote).
var (
	_ raft.WithPreVote = (*observedTransport)(nil)
	_ raft.WithClose   = (*observedTransport)(nil)
)

// AppendEntriesPipeline implements raft.Transport: it refuses, so Raft
// sends every AppendEntries as a call of its own (AppendEntries above,
// which records the answer). hashicorp/raft's pipeline (v1.8.0) can wedge
// for good: when the follower refuses an append, the goroutine reading
// the pipeline's answers stops, and the one sending blocks handing over
// its next request while the reader of the connection blocks handing an
// answer to nobody - the follower gets no more entries (only heartbeats,
// so no election heals it) and Raft's shutdown waits forever. A stalled
// CI run showed exactly those three goroutines. The metadata log is small
// and its entries few: a round trip per append costs nothing that
// matters.
func (t *observedTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries implements raft.Transport.
func (t *observedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	leaderEnd := t.progress.leaderEnd()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.progress.heard(id, args, resp, leaderEnd)
	}
	return err
}
