package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// manual returns a Coordinator with a fake clock and no timer goroutine.
func manual(t *testing.T, mod ...func(*Options)) (*Coordinator, *fakeClock) {
	clock := newFakeClock()
	opts := Options{Now: clock.Now, ManualTick: true}
	for _, m := range mod {
		m(&opts)
	}
	c := NewCoordinator(opts)
	t.Cleanup(c.Close)
	return c, clock
}

// waitParked waits until n Join or Sync calls wait on the group.
func waitParked(t *testing.T, c *Coordinator, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k := 0
		c.mu.RLock()
		e := c.groups[group]
		c.mu.RUnlock()
		if e != nil {
			e.mu.Lock()
			k = len(e.waiters)
			e.mu.Unlock()
		}
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls waiting on group %q, want %d", k, group, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type async[T any] struct {
	v    T
	err  error
	done chan struct{}
}

func goCall[T any](f func() (T, error)) *async[T] {
	a := &async[T]{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.v, a.err = f()
	}()
	return a
}

func (a *async[T]) wait(t *testing.T) (T, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.v, a.err
	case <-time.After(10 * time.Second):
		t.Fatal("call still blocked")
		panic("unreachable")
	}
}

func goJoin(c *Coordinator, req JoinRequest) *async[JoinResponse] {
	return goCall(func() (JoinResponse, error) { return c.Join(context.Background(), req) })
}

func goSync(c *Coordinator, req SyncRequest) *async[SyncResponse] {
	return goCall(func() (SyncResponse, error) { return c.Sync(context.Background(), req) })
}

// stableOfOne makes group "g" Stable with one member and returns its join.
func stableOfOne(t *testing.T, c *Coordinator, req JoinRequest) JoinResponse {
	t.Helper()
	r, err := c.Join(context.Background(), req)
	require.NoError(t, err)
	_, err = c.Sync(context.Background(), SyncRequest{Group: "g", Generation: r.Generation, MemberID: r.MemberID,
		GroupInstanceID: req.GroupInstanceID, Assignments: map[string][]byte{r.MemberID: []byte("mine")}})
	require.NoError(t, err)
	return r
}

func TestJoinBlocksUntilAllRejoin(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	a := stableOfOne(t, c, joinReq("", "t"))

	jb := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	require.ErrorIs(t, c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: a.MemberID, Generation: 1}), ErrRebalanceInProgress)
	ra, err := c.Join(ctx, joinReq(a.MemberID, "t"))
	require.NoError(t, err)
	rb, err := jb.wait(t)
	require.NoError(t, err)
	require.Equal(t, int32(2), ra.Generation)
	require.Equal(t, int32(2), rb.Generation)
	require.Equal(t, a.MemberID, ra.LeaderID)
	require.Equal(t, a.MemberID, rb.LeaderID)
	require.Len(t, ra.Members, 2)
	require.Empty(t, rb.Members)

	// The follower's Sync waits for the leader's.
	sb := goSync(c, SyncRequest{Group: "g", Generation: 2, MemberID: rb.MemberID})
	waitParked(t, c, "g", 1)
	sa, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 2, MemberID: ra.MemberID, Assignments: map[string][]byte{
		ra.MemberID: []byte("for a"), rb.MemberID: []byte("for b"),
	}})
	require.NoError(t, err)
	require.Equal(t, "for a", string(sa.Assignment))
	got, err := sb.wait(t)
	require.NoError(t, err)
	require.Equal(t, "for b", string(got.Assignment))
	require.Equal(t, "range", got.Protocol)
	require.Equal(t, ConsumerProtocolType, got.ProtocolType)
}

func TestSessionExpiryWithFakeClock(t *testing.T) {
	c, clock := manual(t)
	ctx := context.Background()
	a := stableOfOne(t, c, joinReq("", "t"))
	jb := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	ra, err := c.Join(ctx, joinReq(a.MemberID, "t"))
	require.NoError(t, err)
	rb, err := jb.wait(t)
	require.NoError(t, err)
	sb := goSync(c, SyncRequest{Group: "g", Generation: 2, MemberID: rb.MemberID})
	waitParked(t, c, "g", 1)
	_, err = c.Sync(ctx, SyncRequest{Group: "g", Generation: 2, MemberID: ra.MemberID})
	require.NoError(t, err)
	_, err = sb.wait(t)
	require.NoError(t, err)

	hb := func(id string, gen int32) error {
		return c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: id, Generation: gen})
	}
	c.Tick(clock.Advance(6 * time.Second))
	require.NoError(t, hb(ra.MemberID, 2))
	c.Tick(clock.Advance(4 * time.Second)) // b's session timeout
	d, err := c.Describe("g")
	require.NoError(t, err)
	require.Equal(t, PreparingRebalance, d.State)
	require.Len(t, d.Members, 1)
	require.ErrorIs(t, hb(rb.MemberID, 2), ErrUnknownMemberID)
	require.ErrorIs(t, hb(ra.MemberID, 2), ErrRebalanceInProgress)
	r, err := c.Join(ctx, joinReq(ra.MemberID, "t"))
	require.NoError(t, err)
	require.Equal(t, int32(3), r.Generation)
	require.Len(t, r.Members, 1)
}

func TestJoinReturnsAtRebalanceTimeout(t *testing.T) {
	c, clock := manual(t)
	a := stableOfOne(t, c, joinReq("", "t"))
	jb := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	// a keeps heartbeating but does not rejoin.
	for range 5 {
		c.Tick(clock.Advance(5 * time.Second))
		require.ErrorIs(t, c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: a.MemberID, Generation: 1}), ErrRebalanceInProgress)
	}
	waitParked(t, c, "g", 1)
	c.Tick(clock.Advance(5 * time.Second))
	rb, err := jb.wait(t)
	require.NoError(t, err)
	require.Equal(t, int32(2), rb.Generation)
	require.Equal(t, rb.MemberID, rb.LeaderID, "the straggling leader was replaced")
	require.Len(t, rb.Members, 1)
}

func TestStaticRestartFencesWaitingSync(t *testing.T) {
	c, clock := manual(t)
	ctx := context.Background()
	r1, err := c.Join(ctx, staticReq("", "i1", "t"))
	require.NoError(t, err)
	// The first incarnation waits for its assignment… (it leads, but has
	// not sent it; a follower would wait the same way)
	j2 := goJoin(c, staticReq("", "i2", "t"))
	waitParked(t, c, "g", 1)
	r1, err = c.Join(ctx, staticReq(r1.MemberID, "i1", "t"))
	require.NoError(t, err)
	r2, err := j2.wait(t)
	require.NoError(t, err)
	s2 := goSync(c, SyncRequest{Group: "g", Generation: r2.Generation, MemberID: r2.MemberID, GroupInstanceID: "i2"})
	waitParked(t, c, "g", 1)

	// …when it restarts. The waiting Sync of the old id is fenced, and as
	// the group was completing a rebalance, a new one starts.
	clock.Advance(time.Second)
	j3 := goJoin(c, staticReq("", "i2", "t"))
	_, err = s2.wait(t)
	require.ErrorIs(t, err, ErrFencedInstanceID)
	waitParked(t, c, "g", 1)
	r1, err = c.Join(ctx, staticReq(r1.MemberID, "i1", "t"))
	require.NoError(t, err)
	r3, err := j3.wait(t)
	require.NoError(t, err)
	require.Equal(t, r1.Generation, r3.Generation)
	require.Equal(t, int32(3), r3.Generation)
	require.NotEqual(t, r2.MemberID, r3.MemberID)
}

func TestStaticRestartKeepsAssignmentThroughCoordinator(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	r := stableOfOne(t, c, staticReq("", "i1", "t"))
	again, err := c.Join(ctx, staticReq("", "i1", "t"))
	require.NoError(t, err)
	require.Equal(t, r.Generation, again.Generation)
	s, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: again.Generation, MemberID: again.MemberID, GroupInstanceID: "i1"})
	require.NoError(t, err)
	require.Equal(t, "mine", string(s.Assignment))
	err = c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: r.MemberID, GroupInstanceID: "i1", Generation: r.Generation})
	require.ErrorIs(t, err, ErrFencedInstanceID)
	_, err = c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, GroupInstanceID: "i1", Generation: r.Generation})
	require.ErrorIs(t, err, ErrFencedInstanceID)
}

func TestMemberIDRequiredThroughCoordinator(t *testing.T) {
	c, _ := manual(t)
	req := joinReq("", "t")
	req.RequireKnownMemberID = true
	resp, err := c.Join(context.Background(), req)
	require.ErrorIs(t, err, ErrMemberIDRequired)
	require.NotEmpty(t, resp.MemberID)
	req.MemberID = resp.MemberID
	r, err := c.Join(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, resp.MemberID, r.MemberID)
	require.Equal(t, r.MemberID, r.LeaderID)
}

func TestJoinCancelledByContext(t *testing.T) {
	c, _ := manual(t)
	a := stableOfOne(t, c, joinReq("", "t"))
	ctx, cancel := context.WithCancel(context.Background())
	j := goCall(func() (JoinResponse, error) { return c.Join(ctx, joinReq("", "t")) })
	waitParked(t, c, "g", 1)
	cancel()
	_, err := j.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	waitParked(t, c, "g", 0)
	d, err := c.Describe("g")
	require.NoError(t, err)
	require.Len(t, d.Members, 1, "the newcomer withdrew")
	r, err := c.Join(context.Background(), joinReq(a.MemberID, "t"))
	require.NoError(t, err)
	require.Equal(t, int32(2), r.Generation)
	require.Len(t, r.Members, 1)
}

func TestCloseFailsWaiters(t *testing.T) {
	c, _ := manual(t)
	stableOfOne(t, c, joinReq("", "t"))
	j := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	c.Close()
	_, err := j.wait(t)
	require.ErrorIs(t, err, ErrCoordinatorClosed)
	_, err = c.Join(context.Background(), joinReq("", "t"))
	require.ErrorIs(t, err, ErrCoordinatorClosed)
	require.ErrorIs(t, c.Heartbeat(HeartbeatRequest{Group: "g"}), ErrCoordinatorClosed)
	_, err = c.CommitOffsets(CommitRequest{Group: "g", Generation: -1})
	require.ErrorIs(t, err, ErrCoordinatorClosed)
	c.Close() // twice is fine
}

func TestInvalidGroupID(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	_, err := c.Join(ctx, JoinRequest{})
	require.ErrorIs(t, err, ErrInvalidGroupID)
	_, err = c.Sync(ctx, SyncRequest{})
	require.ErrorIs(t, err, ErrInvalidGroupID)
	require.ErrorIs(t, c.Heartbeat(HeartbeatRequest{}), ErrInvalidGroupID)
	_, err = c.Leave(LeaveRequest{})
	require.ErrorIs(t, err, ErrInvalidGroupID)
	// Offset commits accept the empty group id, as Kafka does.
	_, err = c.CommitOffsets(CommitRequest{Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{{"t", 0}: {Offset: 1}}})
	require.NoError(t, err)
}

func TestUnknownGroup(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	_, err := c.Join(ctx, joinReq("someone", "t"))
	require.ErrorIs(t, err, ErrUnknownMemberID)
	_, err = c.Sync(ctx, SyncRequest{Group: "g", MemberID: "m"})
	require.ErrorIs(t, err, ErrUnknownMemberID)
	require.ErrorIs(t, c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: "m"}), ErrUnknownMemberID)
	errs, err := c.Leave(LeaveRequest{Group: "g", Members: []LeaveMember{{MemberID: "m"}}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], ErrUnknownMemberID)
	_, err = c.Describe("g")
	require.ErrorIs(t, err, ErrGroupIDNotFound)
	require.Empty(t, c.List(), "failed requests leave no group behind")
}

func TestFailedJoinLeavesNoGroup(t *testing.T) {
	c, _ := manual(t)
	req := joinReq("", "t")
	req.SessionTimeout = time.Millisecond
	_, err := c.Join(context.Background(), req)
	require.ErrorIs(t, err, ErrInvalidSessionTimeout)
	require.Empty(t, c.List())
}

func TestListDescribeDelete(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	r := stableOfOne(t, c, joinReq("", "t"))
	_, err := c.CommitOffsets(CommitRequest{Group: "simple", Generation: -1,
		Offsets: map[TopicPartition]OffsetAndMetadata{{"t", 0}: {Offset: 5}}})
	require.NoError(t, err)
	joining := goJoin(c, JoinRequest{Group: "other", ProtocolType: "connect", SessionTimeout: testSession,
		Protocols: []Protocol{{Name: "sessioned"}}})
	_, err = joining.wait(t)
	require.NoError(t, err)

	require.Equal(t, []Listing{
		{Group: "g", ProtocolType: ConsumerProtocolType, State: Stable, Type: "classic"},
		{Group: "other", ProtocolType: "connect", State: CompletingRebalance, Type: "classic"},
		{Group: "simple", State: Empty, Type: "classic"},
	}, c.List())

	d, err := c.Describe("g")
	require.NoError(t, err)
	require.Equal(t, Stable, d.State)
	require.Equal(t, "range", d.Protocol)
	require.Equal(t, int32(1), d.Generation)
	require.Equal(t, r.MemberID, d.LeaderID)
	require.Equal(t, "mine", string(d.Members[0].Assignment))
	d, err = c.Describe("simple")
	require.NoError(t, err)
	require.Equal(t, Empty, d.State)
	require.Empty(t, d.Members)

	errs := c.Delete("g", "simple", "nope")
	require.ErrorIs(t, errs["g"], ErrNonEmptyGroup)
	require.NoError(t, errs["simple"])
	require.ErrorIs(t, errs["nope"], ErrGroupIDNotFound)
	_, err = c.Describe("simple")
	require.ErrorIs(t, err, ErrGroupIDNotFound)
	offs, err := c.FetchOffsets("simple", nil)
	require.NoError(t, err)
	require.Empty(t, offs, "a deleted group's offsets go with it")

	lerrs, err := c.Leave(LeaveRequest{Group: "g", Members: []LeaveMember{{MemberID: r.MemberID}}})
	require.NoError(t, err)
	require.NoError(t, lerrs[0])
	d, err = c.Describe("g")
	require.NoError(t, err)
	require.Equal(t, Empty, d.State)
	require.NoError(t, c.Delete("g")["g"])
	require.Equal(t, []Listing{{Group: "other", ProtocolType: "connect", State: CompletingRebalance, Type: "classic"}}, c.List())

	// A deleted group can be joined afresh.
	r2, err := c.Join(ctx, joinReq("", "t"))
	require.NoError(t, err)
	require.Equal(t, int32(1), r2.Generation)
}

func tps(topic string, parts ...int32) []TopicPartition {
	out := make([]TopicPartition, len(parts))
	for i, p := range parts {
		out[i] = TopicPartition{Topic: topic, Partition: p}
	}
	return out
}

func commits(offset int64, tps ...TopicPartition) map[TopicPartition]OffsetAndMetadata {
	out := make(map[TopicPartition]OffsetAndMetadata)
	for _, tp := range tps {
		out[tp] = OffsetAndMetadata{Offset: offset, LeaderEpoch: 3, Metadata: "md"}
	}
	return out
}

func TestCommitAndFetchOffsets(t *testing.T) {
	store := newMemStore()
	c, clock := manual(t, func(o *Options) { o.Store = store })
	r := stableOfOne(t, c, joinReq("", "t"))
	res, err := c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, Generation: r.Generation,
		Offsets: commits(42, tps("t", 0, 1)...)})
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]error{{"t", 0}: nil, {"t", 1}: nil}, res)

	all, err := c.FetchOffsets("g", nil)
	require.NoError(t, err)
	want := OffsetAndMetadata{Offset: 42, LeaderEpoch: 3, Metadata: "md", CommitTime: clock.Now()}
	require.Equal(t, map[TopicPartition]OffsetAndMetadata{{"t", 0}: want, {"t", 1}: want}, all)
	some, err := c.FetchOffsets("g", tps("t", 1, 7))
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]OffsetAndMetadata{{"t", 1}: want}, some)
	none, err := c.FetchOffsets("nope", nil)
	require.NoError(t, err)
	require.Empty(t, none)

	// The Store got exactly what was committed, sorted, before it showed.
	require.Equal(t, [][]StoredOffset{{
		{TopicPartition: TopicPartition{"t", 0}, OffsetAndMetadata: want},
		{TopicPartition: TopicPartition{"t", 1}, OffsetAndMetadata: want},
	}}, store.calls)

	// Metadata too large: refused for that partition only.
	big := commits(50, tps("t", 0, 1)...)
	big[TopicPartition{"t", 1}] = OffsetAndMetadata{Offset: 50, Metadata: string(make([]byte, DefaultMaxOffsetMetadataBytes+1))}
	res, err = c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, Generation: r.Generation, Offsets: big})
	require.NoError(t, err)
	require.NoError(t, res[TopicPartition{"t", 0}])
	require.ErrorIs(t, res[TopicPartition{"t", 1}], ErrOffsetMetadataTooLarge)
	all, _ = c.FetchOffsets("g", nil)
	require.Equal(t, int64(50), all[TopicPartition{"t", 0}].Offset)
	require.Equal(t, int64(42), all[TopicPartition{"t", 1}].Offset)

	// A failing Store fails the commit and changes nothing.
	store.fail = errors.New("disk on fire")
	_, err = c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, Generation: r.Generation, Offsets: commits(60, tps("t", 0)...)})
	require.ErrorContains(t, err, "disk on fire")
	all, _ = c.FetchOffsets("g", nil)
	require.Equal(t, int64(50), all[TopicPartition{"t", 0}].Offset)
}

func TestCommitValidation(t *testing.T) {
	c, _ := manual(t)
	ctx := context.Background()
	commit := func(member string, gen int32) error {
		_, err := c.CommitOffsets(CommitRequest{Group: "g", MemberID: member, Generation: gen, Offsets: commits(1, tps("t", 0)...)})
		return err
	}
	// No group yet: a member commit is from a generation gone by; an
	// outside commit creates the group.
	require.ErrorIs(t, commit("m", 1), ErrIllegalGeneration)
	require.Empty(t, c.List())
	require.NoError(t, commit("", -1))

	a := stableOfOne(t, c, joinReq("", "t"))
	require.NoError(t, commit(a.MemberID, 1))
	require.ErrorIs(t, commit(a.MemberID, 0), ErrIllegalGeneration)
	require.ErrorIs(t, commit(a.MemberID, 2), ErrIllegalGeneration)
	require.ErrorIs(t, commit("stranger", 1), ErrUnknownMemberID)
	require.ErrorIs(t, commit("", -1), ErrUnknownMemberID, "outside commits need an Empty group")
	require.ErrorIs(t, c.ResetOffsets("g", map[TopicPartition]int64{{"t", 0}: 0}), ErrNonEmptyGroup)

	// PreparingRebalance: the old generation may still commit.
	jb := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	require.NoError(t, commit(a.MemberID, 1))
	ra, err := c.Join(ctx, joinReq(a.MemberID, "t"))
	require.NoError(t, err)
	rb, err := jb.wait(t)
	require.NoError(t, err)
	// CompletingRebalance: the new generation has no assignment yet.
	require.ErrorIs(t, commit(ra.MemberID, 2), ErrRebalanceInProgress)
	require.ErrorIs(t, commit(ra.MemberID, 1), ErrIllegalGeneration, "a stale generation")
	sb := goSync(c, SyncRequest{Group: "g", Generation: 2, MemberID: rb.MemberID})
	waitParked(t, c, "g", 1)
	_, err = c.Sync(ctx, SyncRequest{Group: "g", Generation: 2, MemberID: ra.MemberID})
	require.NoError(t, err)
	_, err = sb.wait(t)
	require.NoError(t, err)
	require.NoError(t, commit(rb.MemberID, 2))
	require.ErrorIs(t, commit(rb.MemberID, 1), ErrIllegalGeneration)
}

func TestDeleteOffsets(t *testing.T) {
	store := newMemStore()
	c, _ := manual(t, func(o *Options) { o.Store = store })
	_, err := c.DeleteOffsets("g", tps("t", 0))
	require.ErrorIs(t, err, ErrGroupIDNotFound)

	r := stableOfOne(t, c, joinReq("", "t"))
	_, err = c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, Generation: 1,
		Offsets: commits(7, append(tps("t", 0, 1), tps("u", 0)...)...)})
	require.NoError(t, err)

	// The group consumes t, not u.
	res, err := c.DeleteOffsets("g", append(tps("t", 0), tps("u", 0, 5)...))
	require.NoError(t, err)
	require.ErrorIs(t, res[TopicPartition{"t", 0}], ErrGroupSubscribedToTopic)
	require.NoError(t, res[TopicPartition{"u", 0}])
	require.NoError(t, res[TopicPartition{"u", 5}], "no offset: nothing to do")
	left, _ := c.FetchOffsets("g", nil)
	require.Len(t, left, 2)
	require.Equal(t, []StoredOffset{{TopicPartition: TopicPartition{"u", 0}, Delete: true}}, store.calls[len(store.calls)-1])

	// Once Empty, anything goes.
	_, err = c.Leave(LeaveRequest{Group: "g", Members: []LeaveMember{{MemberID: r.MemberID}}})
	require.NoError(t, err)
	res, err = c.DeleteOffsets("g", tps("t", 0))
	require.NoError(t, err)
	require.NoError(t, res[TopicPartition{"t", 0}])
	left, _ = c.FetchOffsets("g", nil)
	require.Len(t, left, 1)

	// A non-consumer group with members refuses outright.
	_, err = c.Join(context.Background(), JoinRequest{Group: "conn", ProtocolType: "connect", SessionTimeout: testSession,
		Protocols: []Protocol{{Name: "p"}}})
	require.NoError(t, err)
	_, err = c.DeleteOffsets("conn", tps("t", 0))
	require.ErrorIs(t, err, ErrNonEmptyGroup)
}

func TestResetAndLoadOffsets(t *testing.T) {
	store := newMemStore()
	c, clock := manual(t, func(o *Options) { o.Store = store })
	require.NoError(t, c.ResetOffsets("g", map[TopicPartition]int64{{"t", 1}: 10, {"t", 0}: 0}))
	got, _ := c.FetchOffsets("g", nil)
	require.Equal(t, map[TopicPartition]OffsetAndMetadata{
		{"t", 0}: {Offset: 0, LeaderEpoch: -1, CommitTime: clock.Now()},
		{"t", 1}: {Offset: 10, LeaderEpoch: -1, CommitTime: clock.Now()},
	}, got)
	require.Equal(t, store.offsets["g"], got)

	loaded := map[TopicPartition]OffsetAndMetadata{{"u", 3}: {Offset: 99, LeaderEpoch: 2, Metadata: "x", CommitTime: t0.Add(-time.Hour)}}
	calls := len(store.calls)
	c.LoadOffsets("h", loaded)
	require.Len(t, store.calls, calls, "loading does not write back")
	got, _ = c.FetchOffsets("h", nil)
	require.Equal(t, loaded, got)
	d, err := c.Describe("h")
	require.NoError(t, err)
	require.Equal(t, Empty, d.State)
}

func TestExpireOffsets(t *testing.T) {
	store := newMemStore()
	c, clock := manual(t, func(o *Options) { o.Store = store })
	ctx := context.Background()
	const retention = 24 * time.Hour

	// "simple": offsets committed from outside group management expire one
	// by one, retention after their commit.
	_, err := c.CommitOffsets(CommitRequest{Group: "simple", Generation: -1, Offsets: commits(1, tps("t", 0)...)})
	require.NoError(t, err)
	// "left": a consumer group whose last member leaves at once, with a
	// commit made just before.
	lj, err := c.Join(ctx, JoinRequest{Group: "left", ProtocolType: ConsumerProtocolType, SessionTimeout: testSession,
		Protocols: []Protocol{{Name: "range", Metadata: subscriptionOf("t")}}})
	require.NoError(t, err)
	_, err = c.Sync(ctx, SyncRequest{Group: "left", Generation: 1, MemberID: lj.MemberID})
	require.NoError(t, err)

	clock.Advance(time.Hour)
	_, err = c.CommitOffsets(CommitRequest{Group: "left", MemberID: lj.MemberID, Generation: 1, Offsets: commits(2, tps("t", 0)...)})
	require.NoError(t, err)
	_, err = c.CommitOffsets(CommitRequest{Group: "simple", Generation: -1, Offsets: commits(3, tps("t", 1)...)})
	require.NoError(t, err)
	_, err = c.Leave(LeaveRequest{Group: "left", Members: []LeaveMember{{MemberID: lj.MemberID}}})
	require.NoError(t, err)

	// "active": a Stable consumer group of t with an old offset of u.
	r := stableOfOne(t, c, joinReq("", "t"))
	_, err = c.CommitOffsets(CommitRequest{Group: "g", MemberID: r.MemberID, Generation: 1,
		Offsets: commits(4, append(tps("t", 0), tps("u", 0)...)...)})
	require.NoError(t, err)
	keepAlive := func() {
		require.NoError(t, c.Heartbeat(HeartbeatRequest{Group: "g", MemberID: r.MemberID, Generation: 1}))
	}

	start := clock.Now() // = t0 + 1h
	require.Empty(t, c.ExpireOffsets(start.Add(retention-time.Hour-time.Nanosecond), retention))
	require.Equal(t, []string{"simple"}, c.ExpireOffsets(start.Add(retention-time.Hour), retention),
		"simple's first offset, committed at t0")
	got, _ := c.FetchOffsets("simple", nil)
	require.Equal(t, []TopicPartition{{"t", 1}}, keys(got))

	require.Empty(t, c.ExpireOffsets(start.Add(retention-time.Nanosecond), retention))
	keepAlive()
	require.Equal(t, []string{"g", "left", "simple"}, c.ExpireOffsets(start.Add(retention), retention))
	// "left" and "simple" have nothing left and are gone; "g" lost only u.
	require.Equal(t, []string{"g"}, groupNames(c.List()))
	got, _ = c.FetchOffsets("g", nil)
	require.Equal(t, []TopicPartition{{"t", 0}}, keys(got))
	require.Empty(t, store.offsets["left"])
	require.Empty(t, store.offsets["simple"])
	require.Len(t, store.offsets["g"], 1)
}

func keys(m map[TopicPartition]OffsetAndMetadata) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, compareTP)
	return out
}

func groupNames(ls []Listing) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Group)
	}
	return out
}

// TestGroupOfGoroutines runs real members, each a goroutine heartbeating
// every few milliseconds on the real clock, for each assignor: they
// converge on one generation whose assignment covers every partition
// once; members leave and join and they converge again; and no partition
// ever has two owners at once.
func TestGroupOfGoroutines(t *testing.T) {
	for _, a := range []Assignor{Range(), RoundRobin(), CooperativeSticky()} {
		t.Run(a.Name(), func(t *testing.T) {
			c := NewCoordinator(Options{TickInterval: 5 * time.Millisecond})
			defer c.Close()
			partitions := map[string]int32{"t": 12, "u": 5}
			own := newOwners(t)
			type running struct {
				m      *testClient
				cancel context.CancelFunc
				done   chan error
				gen    chan int32
			}
			start := func() *running {
				m := newTestClient(c, a, []string{"t", "u"}, partitions)
				m.onAssign = own.onAssign
				ctx, cancel := context.WithCancel(context.Background())
				r := &running{m: m, cancel: cancel, done: make(chan error, 1), gen: make(chan int32, 100)}
				go func() { r.done <- m.run(ctx, 2*time.Millisecond, r.gen) }()
				return r
			}
			var members []*running
			converged := func(n int) {
				t.Helper()
				last := make(map[*running]int32)
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					for _, r := range members {
						for drained := false; !drained; {
							select {
							case g := <-r.gen:
								last[r] = g
							default:
								drained = true
							}
						}
					}
					d, err := c.Describe("g")
					ok := err == nil && d.State == Stable && len(d.Members) == n && len(own.snapshot()) == 17
					for _, r := range members {
						ok = ok && last[r] == d.Generation
					}
					if ok {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				t.Fatalf("no convergence on %d members", n)
			}
			for range 3 {
				members = append(members, start())
			}
			converged(3)
			for range 2 {
				members = append(members, start())
			}
			converged(5)
			// Two members leave: each stops, gives its partitions up and
			// leaves the group.
			for _, r := range members[:2] {
				r.cancel()
				require.NoError(t, <-r.done)
				r.m.revoke(r.m.owned)
				_, err := c.Leave(LeaveRequest{Group: "g", Members: []LeaveMember{{MemberID: r.m.id}}})
				require.NoError(t, err)
			}
			members = members[2:]
			converged(3)
			own.check()
			counts := make(map[string]int)
			for _, owner := range own.snapshot() {
				counts[owner]++
			}
			require.Len(t, counts, 3)
			for _, r := range members {
				r.cancel()
				require.NoError(t, <-r.done)
			}
		})
	}
}

func TestConcurrentGroupsAndCommits(t *testing.T) {
	c := NewCoordinator(Options{TickInterval: 5 * time.Millisecond, Store: newMemStore()})
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		group := fmt.Sprintf("g%d", g)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := newTestClient(c, Range(), []string{"t"}, map[string]int32{"t": 6})
				m.group = group
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for i := range 50 {
					if err := m.join(ctx); err != nil {
						t.Error(err)
						return
					}
					_, err := c.CommitOffsets(CommitRequest{Group: group, MemberID: m.id, Generation: m.gen,
						Offsets: commits(int64(i), m.owned...)})
					if err != nil && !errors.Is(err, ErrRebalanceInProgress) && !errors.Is(err, ErrIllegalGeneration) {
						t.Error(err)
						return
					}
				}
				_, _ = c.Leave(LeaveRequest{Group: group, Members: []LeaveMember{{MemberID: m.id}}})
			}()
		}
	}
	wg.Wait()
	for _, l := range c.List() {
		require.Equal(t, Empty, l.State, l.Group)
	}
}

func TestSyncCancelledByContext(t *testing.T) {
	c, _ := manual(t)
	a := stableOfOne(t, c, joinReq("", "t"))
	jb := goJoin(c, joinReq("", "t"))
	waitParked(t, c, "g", 1)
	ra, err := c.Join(context.Background(), joinReq(a.MemberID, "t"))
	require.NoError(t, err)
	rb, err := jb.wait(t)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := goCall(func() (SyncResponse, error) {
		return c.Sync(ctx, SyncRequest{Group: "g", Generation: rb.Generation, MemberID: rb.MemberID})
	})
	waitParked(t, c, "g", 1)
	cancel()
	_, err = s.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	waitParked(t, c, "g", 0)
	// The leader's assignment arrives; b syncs again and gets it.
	_, err = c.Sync(context.Background(), SyncRequest{Group: "g", Generation: ra.Generation, MemberID: ra.MemberID,
		Assignments: map[string][]byte{rb.MemberID: []byte("b's")}})
	require.NoError(t, err)
	got, err := c.Sync(context.Background(), SyncRequest{Group: "g", Generation: rb.Generation, MemberID: rb.MemberID})
	require.NoError(t, err)
	require.Equal(t, "b's", string(got.Assignment))
}

// blockingStore is an OffsetStore whose StoreOffsets waits until release is
// closed: a store replicating an offsets partition that waits for
// followers.
type blockingStore struct {
	entered chan string
	release chan struct{}
}

func (s *blockingStore) StoreOffsets(group string, _ []StoredOffset) error {
	s.entered <- group
	<-s.release
	return nil
}

// TestUnloadDoesNotWaitForOtherGroups: Unload drops the groups of one
// offsets partition without waiting for commits to groups it does not
// drop. A networked node calls it from the goroutine that applies the
// cluster's metadata, when a partition's leadership moves away; a commit
// in flight to another group, held up until its own partition's
// leadership change is applied (its append can no longer be replicated),
// held the node's whole metadata loop for minutes in the clustertest
// fault runs (seed 5: an isolated coordinator that came back never
// rejoined the ISRs).
func TestUnloadDoesNotWaitForOtherGroups(t *testing.T) {
	store := &blockingStore{entered: make(chan string, 1), release: make(chan struct{})}
	c := NewCoordinator(Options{ManualTick: true, Store: store})
	defer c.Close()
	defer close(store.release)
	committed := make(chan error, 1)
	go func() {
		_, err := c.CommitOffsets(CommitRequest{Group: "busy", Generation: -1,
			Offsets: map[TopicPartition]OffsetAndMetadata{{"t", 0}: {Offset: 1}}})
		committed <- err
	}()
	require.Equal(t, "busy", <-store.entered, "the commit holds group busy while the store waits")

	unloaded := make(chan int, 1)
	go func() { unloaded <- c.Unload(func(g string) bool { return g == "other" }) }()
	select {
	case n := <-unloaded:
		require.Zero(t, n, "no group of the unloaded partition is loaded")
	case <-time.After(10 * time.Second):
		t.Fatal("Unload of another partition's groups waits for a commit to group busy")
	}
}
