package controller

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// fetched follows Kafka's ReplicaState.updateFollowerState: a member that
// has the leader's whole log at a fetch caught up then; one that has what
// the leader had at its previous fetch caught up by that fetch; else its
// caught-up time stands. Times never go back.
func TestPeerProgressFetched(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	start := peerProgress{end: -1, leaderEnd: -1}
	steps := []struct {
		now            int
		end, leaderEnd int64
		caughtUp       time.Time
		why            string
	}{
		{1, 5, 10, time.Time{}, "behind, no previous fetch: never caught up"},
		{2, 10, 20, at(1), "has what the leader had at the previous fetch (10): caught up by then"},
		{3, 20, 20, at(3), "has the leader's whole log: caught up now"},
		{4, 21, 30, at(3), "behind the leader's 30, but has the 20 it had at the previous fetch: caught up by then"},
		{5, 25, 40, at(3), "behind the previous fetch's 30: unchanged"},
		{6, 40, 40, at(6), "caught up again"},
	}
	p := start
	for _, s := range steps {
		p = p.fetched(at(s.now), s.end, s.leaderEnd)
		require.Equal(t, s.end, p.end, s.why)
		require.Equal(t, at(s.now), p.lastFetch, s.why)
		require.Equal(t, s.caughtUp, p.caughtUp, s.why)
		require.Equal(t, s.leaderEnd, p.leaderEnd, s.why)
	}
	// An answer that arrives with an older clock moves nothing back.
	q := p.fetched(at(2), 40, 40)
	require.Equal(t, at(6), q.lastFetch)
	require.Equal(t, at(6), q.caughtUp)
}

// heard takes a member's log end from its answer: the last entry it
// took after a successful append, its last index otherwise; answers of
// another term say nothing, and a new term starts afresh.
func TestProgressHeard(t *testing.T) {
	p := newProgress()
	now := time.Unix(5000, 0)
	p.now = func() time.Time { return now }
	id := raft.ServerID("2")
	hb := &raft.AppendEntriesRequest{Term: 3}
	p.heard(id, hb, &raft.AppendEntriesResponse{Term: 3, LastLog: 7, Success: true}, 9)
	got, ok := p.of(id, 3)
	require.True(t, ok)
	require.Equal(t, int64(7), got.end)
	require.Equal(t, now, got.lastFetch)
	require.True(t, got.caughtUp.IsZero(), "7 of 9")

	now = now.Add(time.Second)
	app := &raft.AppendEntriesRequest{Term: 3, Entries: []*raft.Log{{Index: 8}, {Index: 9}}}
	p.heard(id, app, &raft.AppendEntriesResponse{Term: 3, LastLog: 7, Success: true}, 9)
	got, _ = p.of(id, 3)
	require.Equal(t, int64(9), got.end, "the entries it took")
	require.Equal(t, now, got.caughtUp)

	p.heard(id, hb, &raft.AppendEntriesResponse{Term: 4, LastLog: 12, Success: false}, 12)
	got, _ = p.of(id, 3)
	require.Equal(t, int64(9), got.end, "an answer from a later term is not about this leader's log")

	_, ok = p.of(id, 4)
	require.False(t, ok, "nothing heard in term 4")
	p.heard(id, &raft.AppendEntriesRequest{Term: 4}, &raft.AppendEntriesResponse{Term: 4, LastLog: 12, Success: true}, -1)
	got, ok = p.of(id, 4)
	require.True(t, ok)
	require.Equal(t, int64(12), got.end)
	require.True(t, got.caughtUp.IsZero(), "the leader's log end unknown: not known to be caught up")
	require.Equal(t, int64(math.MaxInt64), got.leaderEnd)
	_, ok = p.of(id, 3)
	require.False(t, ok, "term 3's record is gone")
}

// The leader describes the quorum: itself, the Raft term as the epoch,
// the commit index as the high watermark, and every voter's log end and
// times from their answers; a stopped voter falls behind while the others
// keep up, and catches up once back. Other members refuse, naming the
// leader.
func TestQuorumDescribe(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	q := c.active()
	registerAll(t, q, 1, 2, 3)
	leader := q.cfg.NodeID

	upToDate := func(d QuorumDescription, ids ...int32) bool {
		for _, v := range d.Voters {
			for _, id := range ids {
				if v.ID == id && (v.LogEndOffset != d.Voters[leader-1].LogEndOffset || v.LastFetch.IsZero() || v.LastCaughtUp.IsZero()) {
					return false
				}
			}
		}
		return true
	}
	var d QuorumDescription
	require.Eventually(t, func() bool {
		var err error
		d, err = q.Describe()
		require.NoError(t, err)
		return upToDate(d, 1, 2, 3)
	}, 10*time.Second, 10*time.Millisecond, "every voter heard from and caught up")
	require.Equal(t, leader, d.LeaderID)
	require.Equal(t, int32(q.raft.CurrentTerm()), d.LeaderEpoch)
	require.Positive(t, d.LeaderEpoch)
	require.GreaterOrEqual(t, d.HighWatermark, int64(q.Image().Index()), "the commit index covers what was applied")
	require.Len(t, d.Voters, 3)
	require.Empty(t, d.Observers)
	for i, v := range d.Voters {
		require.Equal(t, int32(i+1), v.ID)
	}

	for id, nd := range c.nodes {
		if id == leader {
			continue
		}
		_, err := nd.q.Load().Describe()
		var nc *NotControllerError
		require.ErrorAs(t, err, &nc, "node %d", id)
		require.Equal(t, leader, nc.Leader)
		require.Equal(t, q.Addr(), nc.Addr)
	}

	// One follower stops; the log grows; it falls behind, the other
	// keeps up.
	stopped := leader%3 + 1
	other := 6 - leader - stopped
	c.stop(stopped)
	for i := range 5 {
		_, err := q.CreateTopic(context.Background(), TopicRequest{Name: fmt.Sprint("t", i), Partitions: 1, ReplicationFactor: 2})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var err error
		d, err = q.Describe()
		require.NoError(t, err)
		return upToDate(d, other) && d.HighWatermark == d.Voters[leader-1].LogEndOffset
	}, 10*time.Second, 10*time.Millisecond)
	// An answer the stopped voter gave just before it stopped may be
	// recorded a moment later (its RPC's goroutine is scheduled late, on
	// a loaded machine): wait until its row holds still.
	require.Eventually(t, func() bool {
		d1, err := q.Describe()
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		d, err = q.Describe()
		require.NoError(t, err)
		return d1.Voters[stopped-1] == d.Voters[stopped-1]
	}, 10*time.Second, time.Millisecond)
	behind := d.Voters[stopped-1]
	require.Less(t, behind.LogEndOffset, d.HighWatermark, "the stopped voter lacks the new entries")
	require.Positive(t, behind.LogEndOffset)
	require.False(t, behind.LastFetch.IsZero())
	require.True(t, behind.LastCaughtUp.Before(d.Voters[other-1].LastCaughtUp), "%+v", d)
	time.Sleep(50 * time.Millisecond)
	d2, err := q.Describe()
	require.NoError(t, err)
	require.Equal(t, behind, d2.Voters[stopped-1], "nothing heard from a stopped voter: %+v then %+v", d, d2)

	c.start(stopped)
	require.Eventually(t, func() bool {
		d, err = q.Describe()
		require.NoError(t, err)
		return upToDate(d, 1, 2, 3)
	}, 20*time.Second, 10*time.Millisecond, "the restarted voter catches up")
}

// Raft replicates the metadata log one AppendEntries at a time: the
// transport refuses hashicorp/raft's pipeline, which can wedge a
// follower's replication and Raft's shutdown for good (see
// AppendEntriesPipeline).
func TestRaftReplicatesWithoutPipeline(t *testing.T) {
	var tr raft.Transport = &observedTransport{}
	p, err := tr.AppendEntriesPipeline("2", "127.0.0.1:1")
	require.Nil(t, p)
	require.ErrorIs(t, err, raft.ErrPipelineReplicationNotSupported)
}

// never is a Raft future that is never answered, as one queued when Raft
// shuts down.
type never struct{}

func (never) Error() error { select {} }

// Waiting for a Raft future ends with Close even if Raft never answers it.
func TestWaitEndsWithClose(t *testing.T) {
	q := &Quorum{stop: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- q.wait(never{}) }()
	select {
	case <-done:
		t.Fatal("returned before Close")
	case <-time.After(20 * time.Millisecond):
	}
	close(q.stop)
	select {
	case err := <-done:
		require.ErrorIs(t, err, raft.ErrRaftShutdown)
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after Close")
	}
}
