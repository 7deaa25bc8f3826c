package group

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests of one group's state machine, driven directly: every step is a
// request or a tick at a chosen time, so every outcome is deterministic.

func withInitialDelay(d time.Duration) func(*config) {
	return func(c *config) { c.initialDelay = d }
}

// joinEmpty joins n new members while the initial rebalance delay holds the
// group open, then lets it expire: one generation with all of them.
func joinEmpty(t *testing.T, h *core, n int) []JoinResponse {
	t.Helper()
	joins := make([]*pendingJoin, n)
	for i := range joins {
		joins[i] = h.join(joinReq("", "t"))
		require.False(t, joins[i].done())
	}
	require.Equal(t, PreparingRebalance, h.g.state)
	h.settle()
	resps := make([]JoinResponse, n)
	for i, j := range joins {
		resps[i] = j.ok()
	}
	return resps
}

func TestJoinFormsOneGeneration(t *testing.T) {
	for n := 1; n <= 6; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newCore(t, withInitialDelay(3*time.Second))
			resps := joinEmpty(t, h, n)
			require.Equal(t, CompletingRebalance, h.g.state)
			leaders := 0
			ids := make(map[string]bool)
			for _, r := range resps {
				require.Equal(t, int32(1), r.Generation)
				require.Equal(t, resps[0].LeaderID, r.LeaderID)
				require.Equal(t, "range", r.Protocol)
				require.Equal(t, ConsumerProtocolType, r.ProtocolType)
				ids[r.MemberID] = true
				if r.MemberID == r.LeaderID {
					leaders++
					require.Len(t, r.Members, n)
				} else {
					require.Empty(t, r.Members)
				}
			}
			require.Equal(t, 1, leaders)
			require.Len(t, ids, n)
			h.syncAll(resps)
			for _, r := range resps {
				require.NoError(t, h.heartbeat(r.MemberID, 1))
			}
		})
	}
}

// rejoin has every member join again with its id and returns the responses
// once the rebalance completed.
func rejoin(t *testing.T, h *core, ids ...string) []JoinResponse {
	t.Helper()
	joins := make([]*pendingJoin, len(ids))
	for i, id := range ids {
		joins[i] = h.join(joinReq(id, "t"))
	}
	resps := make([]JoinResponse, len(ids))
	for i, j := range joins {
		resps[i] = j.ok()
	}
	return resps
}

func TestMembersJoinOneByOne(t *testing.T) {
	h := newCore(t)
	first := h.join(joinReq("", "t")).ok() // no initial delay: a group of one at once
	require.Equal(t, int32(1), first.Generation)
	require.Equal(t, first.MemberID, first.LeaderID)
	h.syncAll([]JoinResponse{first})

	ids := []string{first.MemberID}
	for gen := int32(2); gen <= 4; gen++ {
		newcomer := h.join(joinReq("", "t"))
		require.False(t, newcomer.done())
		require.Equal(t, PreparingRebalance, h.g.state)
		// The others learn of the rebalance from their heartbeats.
		for _, id := range ids {
			require.ErrorIs(t, h.heartbeat(id, gen-1), ErrRebalanceInProgress)
		}
		resps := rejoin(t, h, ids...)
		nr := newcomer.ok()
		resps = append(resps, nr)
		ids = append(ids, nr.MemberID)
		for _, r := range resps {
			require.Equal(t, gen, r.Generation)
			require.Equal(t, first.MemberID, r.LeaderID, "the leader stays while it rejoins")
		}
		h.syncAll(resps)
	}
	require.Len(t, h.g.members, 4)
}

func TestLeaveRebalances(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 3)
	h.syncAll(resps)
	leader := resps[0].LeaderID
	var others []string
	for _, r := range resps {
		if r.MemberID != leader {
			others = append(others, r.MemberID)
		}
	}

	// The leader leaves: a new leader is elected among those that rejoin.
	errs := h.g.leave(h.now, []LeaveMember{{MemberID: leader}})
	require.NoError(t, errs[0])
	h.collect()
	require.Equal(t, PreparingRebalance, h.g.state)
	require.ErrorIs(t, h.heartbeat(leader, 1), ErrUnknownMemberID)
	next := rejoin(t, h, others...)
	for _, r := range next {
		require.Equal(t, int32(2), r.Generation)
		require.NotEqual(t, leader, r.LeaderID)
		require.Contains(t, others, r.LeaderID)
	}
	h.syncAll(next)

	// Unknown members get errors; the last members leave in one request.
	errs = h.g.leave(h.now, []LeaveMember{{MemberID: others[0]}, {MemberID: "nobody"}, {MemberID: others[1]}})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrUnknownMemberID)
	require.NoError(t, errs[2])
	require.Equal(t, Empty, h.g.state)
	require.Equal(t, int32(3), h.g.generation)
	require.Empty(t, h.g.leader)
}

func TestSessionExpiryRemovesMember(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	h.syncAll(resps)
	alive, dead := resps[0].MemberID, resps[1].MemberID

	// Heartbeats keep alive's session going; dead goes quiet.
	h.advance(testSession / 2)
	require.NoError(t, h.heartbeat(alive, 1))
	require.NoError(t, h.heartbeat(dead, 1))
	h.advance(testSession / 2)
	require.NoError(t, h.heartbeat(alive, 1))
	h.advance(testSession/2 - time.Millisecond)
	require.Equal(t, Stable, h.g.state)
	h.advance(time.Millisecond)
	require.Equal(t, PreparingRebalance, h.g.state, "dead's session expired")
	require.NotContains(t, h.g.members, dead)
	require.ErrorIs(t, h.heartbeat(alive, 1), ErrRebalanceInProgress)
	next := rejoin(t, h, alive)
	require.Equal(t, int32(2), next[0].Generation)
	require.Equal(t, alive, next[0].LeaderID)
	h.syncAll(next)

	// Once the last member expires, the group is Empty.
	h.advance(testSession)
	require.Equal(t, Empty, h.g.state)
	require.Equal(t, int32(3), h.g.generation)
	require.ErrorIs(t, h.heartbeat(alive, 2), ErrUnknownMemberID)
}

func TestRebalanceTimeoutRemovesStragglers(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 3)
	h.syncAll(resps)
	leader := resps[0].LeaderID
	var b, c string
	for _, r := range resps {
		switch {
		case r.MemberID == leader:
		case b == "":
			b = r.MemberID
		default:
			c = r.MemberID
		}
	}

	// The leader rejoins, which starts a rebalance, and so does c; b keeps
	// heartbeating but never rejoins.
	jl := h.join(joinReq(leader, "t"))
	jc := h.join(joinReq(c, "t"))
	for range 5 {
		h.advance(5 * time.Second)
		require.ErrorIs(t, h.heartbeat(b, 1), ErrRebalanceInProgress)
		require.False(t, jl.done())
	}
	h.advance(5 * time.Second) // the rebalance timeout
	rl, rc := jl.ok(), jc.ok()
	require.Equal(t, int32(2), rl.Generation)
	require.Equal(t, int32(2), rc.Generation)
	require.Len(t, rl.Members, 2)
	require.NotContains(t, h.g.members, b)
	require.ErrorIs(t, h.heartbeat(b, 1), ErrUnknownMemberID)
}

func TestStaticStragglerStaysUntilSessionExpires(t *testing.T) {
	h := newCore(t)
	s1 := h.join(staticReq("", "i1", "t")).ok()
	h.syncAll([]JoinResponse{s1})
	j2 := h.join(staticReq("", "i2", "t"))
	require.False(t, j2.done())
	// i1 never rejoins but heartbeats: at the rebalance timeout it is kept,
	// as KIP-345 wants, and the generation goes ahead.
	for range 5 {
		h.advance(5 * time.Second)
		require.ErrorIs(t, h.heartbeat(s1.MemberID, 1), ErrRebalanceInProgress)
	}
	require.False(t, j2.done())
	h.advance(5 * time.Second)
	r2 := j2.ok()
	require.Equal(t, int32(2), r2.Generation)
	require.Equal(t, r2.MemberID, r2.LeaderID, "the leader must be a member that rejoined")
	require.Len(t, r2.Members, 2)
	require.Contains(t, h.g.members, s1.MemberID)
}

func TestHeartbeatErrors(t *testing.T) {
	h := newCore(t)
	r := h.join(joinReq("", "t")).ok()
	require.NoError(t, h.heartbeat(r.MemberID, 1), "CompletingRebalance accepts heartbeats")
	h.syncAll([]JoinResponse{r})
	require.NoError(t, h.heartbeat(r.MemberID, 1))
	require.ErrorIs(t, h.heartbeat(r.MemberID, 0), ErrIllegalGeneration)
	require.ErrorIs(t, h.heartbeat(r.MemberID, 2), ErrIllegalGeneration)
	require.ErrorIs(t, h.heartbeat("stranger", 1), ErrUnknownMemberID)
	require.ErrorIs(t, h.g.heartbeat(h.now, HeartbeatRequest{MemberID: r.MemberID, GroupInstanceID: "i", Generation: 1}), ErrUnknownMemberID)

	// The leader's join starts a rebalance; as the only member it completes
	// at once.
	again := h.join(joinReq(r.MemberID, "t"))
	require.True(t, again.done())
	require.Equal(t, int32(2), again.ok().Generation)
}

func TestSyncErrors(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	id := resps[0].MemberID
	sync := func(req SyncRequest) error {
		req.Group = "g"
		_, err := h.sync(req).result()
		return err
	}
	require.ErrorIs(t, sync(SyncRequest{Generation: 1, MemberID: "nobody"}), ErrUnknownMemberID)
	require.ErrorIs(t, sync(SyncRequest{Generation: 2, MemberID: id}), ErrIllegalGeneration)
	require.ErrorIs(t, sync(SyncRequest{Generation: 1, MemberID: id, Protocol: "roundrobin"}), ErrInconsistentProtocol)
	require.ErrorIs(t, sync(SyncRequest{Generation: 1, MemberID: id, ProtocolType: "connect"}), ErrInconsistentProtocol)

	// A new member's join makes the waiting syncs rejoin.
	follower := resps[0]
	if follower.MemberID == follower.LeaderID {
		follower = resps[1]
	}
	fs := h.sync(SyncRequest{Group: "g", Generation: 1, MemberID: follower.MemberID})
	require.False(t, fs.done())
	h.join(joinReq("", "t"))
	_, err := fs.result()
	require.ErrorIs(t, err, ErrRebalanceInProgress)
	require.ErrorIs(t, sync(SyncRequest{Generation: 1, MemberID: id}), ErrRebalanceInProgress)
}

func TestMembersThatNeverSyncAreRemoved(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	leader := resps[0]
	if leader.MemberID != leader.LeaderID {
		leader = resps[1]
	}
	follower := resps[0].MemberID
	if follower == leader.MemberID {
		follower = resps[1].MemberID
	}
	ls := h.sync(SyncRequest{Group: "g", Generation: 1, MemberID: leader.MemberID, Assignments: map[string][]byte{}})
	resp, err := ls.result()
	require.NoError(t, err)
	require.Empty(t, resp.Assignment)
	require.Equal(t, Stable, h.g.state)
	// Both heartbeat, but the follower never syncs.
	for range 5 {
		h.advance(5 * time.Second)
		require.NoError(t, h.heartbeat(leader.MemberID, 1))
		require.NoError(t, h.heartbeat(follower, 1))
	}
	h.advance(5 * time.Second) // the rebalance timeout since the join completed
	require.Equal(t, PreparingRebalance, h.g.state)
	require.Len(t, h.g.members, 1)
	require.Contains(t, h.g.members, leader.MemberID)
}

func TestStaticMemberRestart(t *testing.T) {
	h := newCore(t)
	s1 := h.join(staticReq("", "i1", "t")).ok()
	h.syncAll([]JoinResponse{s1})
	j2 := h.join(staticReq("", "i2", "t"))
	r1 := h.join(staticReq(s1.MemberID, "i1", "t")).ok()
	r2 := j2.ok()
	h.syncAll([]JoinResponse{r1, r2})
	require.Equal(t, int32(2), h.g.generation)

	// i2 restarts: it joins with its instance id and no member id, well
	// within its session timeout. It takes its old place, with no new
	// generation, and its old member id is fenced.
	h.advance(testSession / 2)
	restarted := h.join(staticReq("", "i2", "t")).ok()
	require.NotEqual(t, r2.MemberID, restarted.MemberID)
	require.Equal(t, int32(2), restarted.Generation)
	require.Equal(t, r1.MemberID, restarted.LeaderID)
	require.Equal(t, Stable, h.g.state)
	resp, err := h.sync(SyncRequest{Group: "g", Generation: 2, MemberID: restarted.MemberID, GroupInstanceID: "i2"}).result()
	require.NoError(t, err)
	require.Equal(t, "a:"+r2.MemberID, string(resp.Assignment), "the old assignment")
	require.NoError(t, h.g.heartbeat(h.now, HeartbeatRequest{Group: "g", MemberID: restarted.MemberID, GroupInstanceID: "i2", Generation: 2}))

	old := HeartbeatRequest{Group: "g", MemberID: r2.MemberID, GroupInstanceID: "i2", Generation: 2}
	require.ErrorIs(t, h.g.heartbeat(h.now, old), ErrFencedInstanceID)
	require.ErrorIs(t, h.g.validateCommit(h.now, CommitRequest{MemberID: r2.MemberID, GroupInstanceID: "i2", Generation: 2}), ErrFencedInstanceID)
	_, err = h.sync(SyncRequest{Group: "g", Generation: 2, MemberID: r2.MemberID, GroupInstanceID: "i2"}).result()
	require.ErrorIs(t, err, ErrFencedInstanceID)
	_, err = h.join(staticReq(r2.MemberID, "i2", "t")).result()
	require.ErrorIs(t, err, ErrFencedInstanceID)
	require.ErrorIs(t, h.g.leave(h.now, []LeaveMember{{MemberID: r2.MemberID, GroupInstanceID: "i2"}})[0], ErrFencedInstanceID)

	// The leader restarting keeps the group Stable too; it is not told it
	// leads, so it does not run an assignment the group would ignore.
	leaderAgain := h.join(staticReq("", "i1", "t")).ok()
	require.Equal(t, r1.MemberID, leaderAgain.LeaderID)
	require.NotEqual(t, leaderAgain.MemberID, leaderAgain.LeaderID)
	require.Equal(t, leaderAgain.MemberID, h.g.leader)
	require.Equal(t, Stable, h.g.state)
	require.Equal(t, int32(2), h.g.generation)

	// Static members whose sessions expire are removed.
	h.advance(testSession)
	require.Empty(t, h.g.members)
	require.Empty(t, h.g.static)
	require.Equal(t, Empty, h.g.state)
}

func TestStaticMemberLeaveByInstanceID(t *testing.T) {
	h := newCore(t)
	s1 := h.join(staticReq("", "i1", "t")).ok()
	h.syncAll([]JoinResponse{s1})
	errs := h.g.leave(h.now, []LeaveMember{{GroupInstanceID: "nope"}, {GroupInstanceID: "i1"}})
	require.ErrorIs(t, errs[0], ErrUnknownMemberID)
	require.NoError(t, errs[1])
	require.Equal(t, Empty, h.g.state)
	require.Empty(t, h.g.static)
}

func TestStaticRestartWithNewProtocolRebalances(t *testing.T) {
	h := newCore(t)
	s1 := h.join(staticReq("", "i1", "t")).ok()
	h.syncAll([]JoinResponse{s1})
	// The restarted instance prefers another protocol: the group's choice
	// changes, so it rebalances (and, the only member, completes at once).
	req := staticReq("", "i1", "t")
	req.Protocols = []Protocol{{Name: "roundrobin", Metadata: subscriptionOf("t")}, {Name: "range", Metadata: subscriptionOf("t")}}
	r := h.join(req).ok()
	require.Equal(t, int32(2), r.Generation)
	require.Equal(t, "roundrobin", r.Protocol)
}

func TestProtocolSelection(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	proto := func(names ...string) JoinRequest {
		r := joinReq("")
		r.Protocols = nil
		for _, n := range names {
			r.Protocols = append(r.Protocols, Protocol{Name: n, Metadata: subscriptionOf("t")})
		}
		return r
	}
	a := h.join(proto("range", "roundrobin"))
	b := h.join(proto("roundrobin", "range", "sticky"))
	c := h.join(proto("roundrobin", "range"))
	_, err := h.join(proto("sticky")).result()
	require.ErrorIs(t, err, ErrInconsistentProtocol, "no protocol in common")
	bad := proto("range")
	bad.ProtocolType = "connect"
	_, err = h.join(bad).result()
	require.ErrorIs(t, err, ErrInconsistentProtocol, "another protocol type")
	h.settle()
	for _, j := range []*pendingJoin{a, b, c} {
		require.Equal(t, "roundrobin", j.ok().Protocol, "two votes to one")
	}

	// An empty group takes any type, but not a member with no protocol.
	e := newCore(t)
	_, err = e.join(proto()).result()
	require.ErrorIs(t, err, ErrInconsistentProtocol)
	noType := proto("range")
	noType.ProtocolType = ""
	_, err = e.join(noType).result()
	require.ErrorIs(t, err, ErrInconsistentProtocol)
}

func TestSelectProtocolTieIsDeterministic(t *testing.T) {
	for range 20 {
		h := newCore(t, withInitialDelay(time.Second))
		r1 := joinReq("")
		r1.Protocols = []Protocol{{Name: "a"}, {Name: "b"}}
		r2 := joinReq("")
		r2.Protocols = []Protocol{{Name: "b"}, {Name: "a"}}
		j := h.join(r1)
		h.join(r2)
		h.settle()
		require.Equal(t, "a", j.ok().Protocol)
	}
}

func TestMemberIDRequired(t *testing.T) {
	h := newCore(t)
	req := joinReq("", "t")
	req.RequireKnownMemberID = true
	resp, err := h.join(req).result()
	require.ErrorIs(t, err, ErrMemberIDRequired)
	require.NotEmpty(t, resp.MemberID)
	require.Equal(t, Empty, h.g.state)
	require.Contains(t, h.g.pending, resp.MemberID)

	req.MemberID = resp.MemberID
	r := h.join(req).ok()
	require.Equal(t, resp.MemberID, r.MemberID)
	require.Equal(t, int32(1), r.Generation)

	// A pending member holds up the rebalance until it joins or its session
	// ends.
	h.syncAll([]JoinResponse{r})
	req2 := joinReq("", "t")
	req2.RequireKnownMemberID = true
	p, err := h.join(req2).result()
	require.ErrorIs(t, err, ErrMemberIDRequired)
	require.Equal(t, Stable, h.g.state, "a pending member does not rebalance")
	leader := h.join(joinReq(r.MemberID, "t"))
	require.False(t, leader.done(), "the pending member has not joined")
	h.advance(testSession)
	require.NotContains(t, h.g.pending, p.MemberID)
	require.Equal(t, int32(2), leader.ok().Generation)

	// Static members skip the handshake.
	s := staticReq("", "i1", "t")
	s.RequireKnownMemberID = true
	sj := h.join(s)
	require.NoError(t, sj.out.err)
	require.NotZero(t, sj.out.waiter, "joined, waiting for the rebalance")
}

func TestPendingMemberLeaves(t *testing.T) {
	h := newCore(t)
	req := joinReq("", "t")
	req.RequireKnownMemberID = true
	resp, err := h.join(req).result()
	require.ErrorIs(t, err, ErrMemberIDRequired)
	require.NoError(t, h.g.leave(h.now, []LeaveMember{{MemberID: resp.MemberID}})[0])
	require.Empty(t, h.g.pending)
	require.True(t, h.g.pristine())
}

func TestInitialRebalanceDelay(t *testing.T) {
	h := newCore(t, withInitialDelay(3*time.Second))
	j1 := h.join(joinReq("", "t"))
	h.advance(2 * time.Second)
	j2 := h.join(joinReq("", "t")) // extends the wait by another delay
	h.advance(time.Second)
	require.False(t, j1.done())
	h.advance(2 * time.Second)
	require.False(t, j1.done())
	h.advance(time.Second)
	require.Equal(t, int32(1), j1.ok().Generation)
	require.Equal(t, int32(1), j2.ok().Generation)
	require.Len(t, j1.ok().Members, 2)
}

func TestInitialDelayBoundedByRebalanceTimeout(t *testing.T) {
	h := newCore(t, withInitialDelay(3*time.Second))
	first := h.join(joinReq("", "t"))
	for i := 0; i < 20 && !first.done(); i++ {
		h.join(joinReq("", "t"))
		h.advance(3 * time.Second)
	}
	require.True(t, first.done())
	require.LessOrEqual(t, h.now.Sub(t0), testRebalance+3*time.Second)
}

func TestMaxGroupSize(t *testing.T) {
	h := newCore(t, func(c *config) { c.maxSize = 2; c.initialDelay = time.Second })
	a := h.join(joinReq("", "t"))
	b := h.join(joinReq("", "t"))
	resp, err := h.join(joinReq("", "t")).result()
	require.ErrorIs(t, err, ErrGroupMaxSizeReached)
	require.Empty(t, resp.MemberID)
	h.settle()
	h.syncAll([]JoinResponse{a.ok(), b.ok()})
	_, err = h.join(joinReq("", "t")).result()
	require.ErrorIs(t, err, ErrGroupMaxSizeReached)
	require.Equal(t, Stable, h.g.state)
}

func TestInvalidSessionTimeout(t *testing.T) {
	h := newCore(t)
	for _, d := range []time.Duration{time.Second, time.Hour} {
		req := joinReq("", "t")
		req.SessionTimeout = d
		_, err := h.join(req).result()
		require.ErrorIs(t, err, ErrInvalidSessionTimeout)
	}
	require.True(t, h.g.pristine())
}

func TestJoinUnknownMember(t *testing.T) {
	h := newCore(t)
	_, err := h.join(joinReq("ghost", "t")).result()
	require.ErrorIs(t, err, ErrUnknownMemberID)
	_, err = h.join(staticReq("ghost", "i1", "t")).result()
	require.ErrorIs(t, err, ErrUnknownMemberID)
}

func TestFollowerMetadataChangeRebalances(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	h.syncAll(resps)
	follower := resps[0]
	if follower.MemberID == follower.LeaderID {
		follower = resps[1]
	}
	// Same metadata: the current generation, no rebalance.
	same := h.join(joinReq(follower.MemberID, "t")).ok()
	require.Equal(t, int32(1), same.Generation)
	require.Empty(t, same.Members)
	require.Equal(t, Stable, h.g.state)
	// New subscription: a rebalance.
	changed := h.join(joinReq(follower.MemberID, "t", "u"))
	require.False(t, changed.done())
	require.Equal(t, PreparingRebalance, h.g.state)
	h.join(joinReq(follower.LeaderID, "t"))
	require.Equal(t, int32(2), changed.ok().Generation)
	require.True(t, h.g.subscribed["u"])
}

func TestRejoinDuringCompletingRebalanceResendsResponse(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	for _, r := range resps {
		again := h.join(joinReq(r.MemberID, "t")).ok()
		require.Equal(t, r.Generation, again.Generation)
		require.Equal(t, len(r.Members), len(again.Members))
	}
	require.Equal(t, CompletingRebalance, h.g.state)
}

func TestCancelJoin(t *testing.T) {
	h := newCore(t)
	first := h.join(joinReq("", "t")).ok()
	h.syncAll([]JoinResponse{first})

	// A new member gives up before the rebalance completes: it is gone, and
	// the rebalance completes without it.
	j := h.join(joinReq("", "t"))
	require.Len(t, h.g.members, 2)
	h.g.cancelJoin(h.now, j.out.waiter)
	h.collect()
	require.Len(t, h.g.members, 1)
	r := h.join(joinReq(first.MemberID, "t")).ok()
	require.Equal(t, int32(2), r.Generation)
	require.Len(t, r.Members, 1)

	// A known member (here one that learnt its id through KIP-394) that
	// gives up is still a member, just not counted as joined: the
	// rebalance drops it at the timeout.
	h.syncAll([]JoinResponse{r})
	req := joinReq("", "t")
	req.RequireKnownMemberID = true
	resp, err := h.join(req).result()
	require.ErrorIs(t, err, ErrMemberIDRequired)
	req.MemberID = resp.MemberID
	j = h.join(req)
	require.False(t, j.done())
	h.g.cancelJoin(h.now, j.out.waiter)
	h.collect()
	require.Contains(t, h.g.members, resp.MemberID)
	lj := h.join(joinReq(first.MemberID, "t"))
	require.False(t, lj.done())
	h.advance(testRebalance)
	require.Equal(t, int32(3), lj.ok().Generation)
	require.NotContains(t, h.g.members, resp.MemberID)
}

func TestCancelSyncOwesSync(t *testing.T) {
	h := newCore(t, withInitialDelay(time.Second))
	resps := joinEmpty(t, h, 2)
	follower := resps[0]
	if follower.MemberID == follower.LeaderID {
		follower = resps[1]
	}
	fs := h.sync(SyncRequest{Group: "g", Generation: 1, MemberID: follower.MemberID})
	h.g.cancelSync(h.now, fs.out.waiter)
	require.True(t, h.g.pendingSync[follower.MemberID])
	ls := h.sync(SyncRequest{Group: "g", Generation: 1, MemberID: follower.LeaderID})
	_, err := ls.result()
	require.NoError(t, err)
	require.False(t, fs.done(), "the withdrawn sync gets no reply")
	for range 5 {
		h.advance(5 * time.Second)
		require.NoError(t, h.heartbeat(follower.LeaderID, 1))
		require.NoError(t, h.heartbeat(follower.MemberID, 1))
	}
	h.advance(5 * time.Second)
	require.NotContains(t, h.g.members, follower.MemberID)
	require.Contains(t, h.g.members, follower.LeaderID)
}

func TestStateTimelineThroughDescribe(t *testing.T) {
	h := newCore(t)
	require.Equal(t, Empty, h.g.describe().State)
	j := h.join(joinReq("", "t"))
	d := h.g.describe()
	require.Equal(t, CompletingRebalance, d.State)
	require.Empty(t, d.Protocol, "the protocol is shown only when Stable")
	require.Len(t, d.Members, 1)
	require.Nil(t, d.Members[0].Assignment)
	h.syncAll([]JoinResponse{j.ok()})
	d = h.g.describe()
	require.Equal(t, Stable, d.State)
	require.Equal(t, "range", d.Protocol)
	require.Equal(t, "client", d.Members[0].ClientID)
	require.Equal(t, "/127.0.0.1", d.Members[0].ClientHost)
	require.Equal(t, "a:"+d.Members[0].MemberID, string(d.Members[0].Assignment))
	require.Equal(t, subscriptionOf("t"), d.Members[0].Metadata)
	h.join(joinReq("", "t"))
	require.Equal(t, PreparingRebalance, h.g.describe().State)
	h.advance(testSession) // the first member expires; the newcomer forms generation 2
	d = h.g.describe()
	require.Equal(t, CompletingRebalance, d.State)
	require.Equal(t, int32(2), d.Generation)
	require.Len(t, d.Members, 1)
	h.advance(testRebalance) // it never syncs
	d = h.g.describe()
	require.Equal(t, Empty, d.State)
	require.Equal(t, int32(3), d.Generation)
	require.Empty(t, d.Members)
}

// TestRandomOperationsKeepInvariants feeds a group random requests and
// ticks and checks the invariants after each: one leader who is a member,
// static ids mapped both ways, generation never decreasing, every waiting
// member answered at most once.
func TestRandomOperationsKeepInvariants(t *testing.T) {
	for seed := range int64(30) {
		h := newCore(t, withInitialDelay(time.Duration(seed%3)*time.Second))
		rng := newRand(seed)
		var departed []string
		known := func() []string {
			ids := slices.Sorted(maps.Keys(h.g.members))
			ids = append(ids, slices.Sorted(maps.Keys(h.g.pending))...)
			return append(ids, departed...)
		}
		gen := int32(0)
		for range 300 {
			switch rng.Intn(7) {
			case 0:
				req := joinReq("", "t")
				if rng.Intn(3) == 0 {
					req.GroupInstanceID = fmt.Sprintf("i%d", rng.Intn(4))
				}
				req.RequireKnownMemberID = rng.Intn(2) == 0
				h.join(req)
			case 1:
				if ids := known(); len(ids) > 0 {
					h.join(joinReq(ids[rng.Intn(len(ids))], "t"))
				}
			case 2:
				if ids := known(); len(ids) > 0 {
					_ = h.heartbeat(ids[rng.Intn(len(ids))], h.g.generation)
				}
			case 3:
				if ids := known(); len(ids) > 0 {
					id := ids[rng.Intn(len(ids))]
					h.g.leave(h.now, []LeaveMember{{MemberID: id}})
					h.collect()
					departed = append(departed, id)
				}
			case 4:
				if h.g.state == CompletingRebalance {
					h.sync(SyncRequest{Group: "g", Generation: h.g.generation, MemberID: h.g.leader})
				}
			case 5, 6:
				h.advance(time.Duration(rng.Intn(12)) * time.Second)
			}
			g := h.g
			require.GreaterOrEqual(t, g.generation, gen)
			gen = g.generation
			if len(g.members) > 0 {
				require.Contains(t, g.members, g.leader)
			} else {
				require.Empty(t, g.leader)
			}
			require.Len(t, g.order, len(g.members))
			for inst, id := range g.static {
				require.Equal(t, inst, g.members[id].instanceID)
			}
			if g.state == Empty {
				require.Empty(t, g.members)
			}
		}
	}
}

func TestRebalanceWaitsForStaticMembersWhenNoneRejoined(t *testing.T) {
	h := newCore(t)
	s1 := h.join(staticReq("", "i1", "t")).ok()
	h.syncAll([]JoinResponse{s1})
	// A dynamic member arrives and leaves again before i1 rejoins.
	req := joinReq("", "t")
	req.RequireKnownMemberID = true
	resp, err := h.join(req).result()
	require.ErrorIs(t, err, ErrMemberIDRequired)
	req.MemberID = resp.MemberID
	h.join(req)
	require.NoError(t, h.g.leave(h.now, []LeaveMember{{MemberID: resp.MemberID}})[0])
	h.collect()
	// At the rebalance timeout nobody has rejoined: the static member is
	// kept and the rebalance waits again, with no new generation.
	for range 6 {
		h.advance(5 * time.Second)
		require.ErrorIs(t, h.heartbeat(s1.MemberID, 1), ErrRebalanceInProgress)
	}
	require.Equal(t, PreparingRebalance, h.g.state)
	require.Equal(t, int32(1), h.g.generation)
	r := h.join(staticReq(s1.MemberID, "i1", "t")).ok()
	require.Equal(t, int32(2), r.Generation)
}
