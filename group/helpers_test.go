package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

const (
	testSession   = 10 * time.Second
	testRebalance = 30 * time.Second
)

// subscriptionOf encodes a consumer subscription.
func subscriptionOf(topics ...string) []byte {
	return EncodeSubscription(Subscription{Version: SubscriptionVersion, Topics: topics, GenerationID: -1})
}

// joinReq is a consumer's JoinGroup for group "g" with the range protocol.
func joinReq(memberID string, topics ...string) JoinRequest {
	return JoinRequest{
		Group:            "g",
		MemberID:         memberID,
		ClientID:         "client",
		ClientHost:       "/127.0.0.1",
		ProtocolType:     ConsumerProtocolType,
		Protocols:        []Protocol{{Name: "range", Metadata: subscriptionOf(topics...)}},
		SessionTimeout:   testSession,
		RebalanceTimeout: testRebalance,
	}
}

func staticReq(memberID, instance string, topics ...string) JoinRequest {
	r := joinReq(memberID, topics...)
	r.GroupInstanceID = instance
	return r
}

// core drives one group's state machine directly: no goroutines, no
// clock but its own.
type core struct {
	t   *testing.T
	now time.Time
	g   *classicGroup
	ids int
	got map[uint64]reply
}

func newCore(t *testing.T, mod ...func(*config)) *core {
	h := &core{t: t, now: t0, got: make(map[uint64]reply)}
	cfg := newConfig(Options{}.withDefaults())
	cfg.newID = func(prefix string) string {
		h.ids++
		return fmt.Sprintf("%s-%d", prefix, h.ids)
	}
	for _, m := range mod {
		m(cfg)
	}
	h.g = newClassicGroup("g", cfg, h.now)
	return h
}

func (h *core) collect() {
	for _, r := range h.g.takeReplies() {
		_, dup := h.got[r.waiter]
		require.False(h.t, dup, "two replies to waiter %d", r.waiter)
		h.got[r.waiter] = r
	}
}

// advance moves time and ticks.
func (h *core) advance(d time.Duration) {
	h.now = h.now.Add(d)
	h.g.tick(h.now)
	h.collect()
}

// settle lets time pass, a second at a time, until no rebalance is
// preparing.
func (h *core) settle() {
	for i := 0; h.g.state == PreparingRebalance; i++ {
		require.Less(h.t, i, 1000, "the rebalance never completes")
		h.advance(time.Second)
	}
}

// pendingJoin is a JoinGroup that may still be waiting.
type pendingJoin struct {
	h   *core
	out joinOutcome
}

func (h *core) join(req JoinRequest) *pendingJoin {
	out := h.g.join(h.now, req)
	h.collect()
	return &pendingJoin{h: h, out: out}
}

// done reports whether the join has its answer.
func (p *pendingJoin) done() bool {
	if p.out.waiter == 0 {
		return true
	}
	_, ok := p.h.got[p.out.waiter]
	return ok
}

// result is the join's answer; it fails the test if there is none yet.
func (p *pendingJoin) result() (JoinResponse, error) {
	if p.out.waiter == 0 {
		return p.out.resp, p.out.err
	}
	r, ok := p.h.got[p.out.waiter]
	require.True(p.h.t, ok, "join still waiting")
	return r.join, r.err
}

func (p *pendingJoin) ok() JoinResponse {
	resp, err := p.result()
	require.NoError(p.h.t, err)
	return resp
}

type pendingSync struct {
	h   *core
	out syncOutcome
}

func (h *core) sync(req SyncRequest) *pendingSync {
	out := h.g.sync(h.now, req)
	h.collect()
	return &pendingSync{h: h, out: out}
}

func (p *pendingSync) done() bool {
	if p.out.waiter == 0 {
		return true
	}
	_, ok := p.h.got[p.out.waiter]
	return ok
}

func (p *pendingSync) result() (SyncResponse, error) {
	if p.out.waiter == 0 {
		return p.out.resp, p.out.err
	}
	r, ok := p.h.got[p.out.waiter]
	require.True(p.h.t, ok, "sync still waiting")
	return r.sync, r.err
}

func (h *core) heartbeat(memberID string, gen int32) error {
	return h.g.heartbeat(h.now, HeartbeatRequest{Group: "g", MemberID: memberID, Generation: gen})
}

// syncAll sends every member's SyncGroup, the leader last, the leader
// assigning each member the bytes "a:<member id>", and checks that each
// gets its own.
func (h *core) syncAll(resps []JoinResponse) {
	h.t.Helper()
	var leader JoinResponse
	var followers []*pendingSync
	var ids []string
	for _, r := range resps {
		if r.MemberID == r.LeaderID {
			leader = r
			continue
		}
		followers = append(followers, h.sync(SyncRequest{Group: "g", Generation: r.Generation, MemberID: r.MemberID}))
		ids = append(ids, r.MemberID)
	}
	require.NotEmpty(h.t, leader.MemberID, "no leader among the responses")
	for _, f := range followers {
		require.False(h.t, f.done(), "a follower's sync returned before the leader's")
	}
	assignments := make(map[string][]byte)
	for _, m := range leader.Members {
		assignments[m.MemberID] = []byte("a:" + m.MemberID)
	}
	ls := h.sync(SyncRequest{Group: "g", Generation: leader.Generation, MemberID: leader.MemberID, Assignments: assignments})
	resp, err := ls.result()
	require.NoError(h.t, err)
	require.Equal(h.t, "a:"+leader.MemberID, string(resp.Assignment))
	for i, f := range followers {
		resp, err := f.result()
		require.NoError(h.t, err)
		require.Equal(h.t, "a:"+ids[i], string(resp.Assignment))
	}
	require.Equal(h.t, Stable, h.g.state)
}

// testClient is a consumer's side of the group protocol, as a client
// library runs it: join (with KIP-394's handshake), lead the assignment
// when elected, sync, and rejoin on demand.
type testClient struct {
	c          *Coordinator
	group      string
	instance   string
	assignor   Assignor
	topics     []string
	partitions map[string]int32
	session    time.Duration

	// onAssign, if set, is told the partitions the member gives up and
	// then those it takes, in that order, each time it gets an assignment.
	onAssign func(m *testClient, revoked, added []TopicPartition)

	id    string
	gen   int32
	owned []TopicPartition
}

func newTestClient(c *Coordinator, assignor Assignor, topics []string, partitions map[string]int32) *testClient {
	return &testClient{
		c: c, group: "g", assignor: assignor, topics: topics, partitions: partitions,
		session: testSession, gen: -1,
	}
}

func (m *testClient) joinReq() JoinRequest {
	if !m.assignor.Cooperative() {
		m.revoke(m.owned) // eager: give everything up before rejoining
	}
	return JoinRequest{
		Group:           m.group,
		MemberID:        m.id,
		GroupInstanceID: m.instance,
		ClientID:        "client",
		ProtocolType:    ConsumerProtocolType,
		Protocols: []Protocol{{Name: m.assignor.Name(), Metadata: EncodeSubscription(Subscription{
			Version: SubscriptionVersion, Topics: m.topics, OwnedPartitions: m.owned, GenerationID: m.gen,
		})}},
		SessionTimeout:       m.session,
		RebalanceTimeout:     testRebalance,
		RequireKnownMemberID: true,
	}
}

func (m *testClient) revoke(tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	if m.onAssign != nil {
		m.onAssign(m, tps, nil)
	}
	m.owned = slices.DeleteFunc(m.owned, func(tp TopicPartition) bool { return slices.Contains(tps, tp) })
}

// join runs JoinGroup and SyncGroup until the member holds an assignment
// of the current generation with nothing left to revoke.
func (m *testClient) join(ctx context.Context) error {
	for {
		resp, err := m.c.Join(ctx, m.joinReq())
		switch {
		case errors.Is(err, ErrMemberIDRequired):
			m.id = resp.MemberID
			continue
		case errors.Is(err, ErrUnknownMemberID):
			m.id, m.gen = "", -1
			m.revoke(m.owned)
			continue
		case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
			continue
		case err != nil:
			return err
		}
		m.id = resp.MemberID
		var assignments map[string][]byte
		if resp.LeaderID == m.id {
			if assignments, err = m.lead(resp); err != nil {
				return err
			}
		}
		sresp, err := m.c.Sync(ctx, SyncRequest{
			Group: m.group, Generation: resp.Generation, MemberID: m.id, GroupInstanceID: m.instance,
			ProtocolType: resp.ProtocolType, Protocol: resp.Protocol, Assignments: assignments,
		})
		switch {
		case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
			continue
		case errors.Is(err, ErrUnknownMemberID):
			m.id, m.gen = "", -1
			m.revoke(m.owned)
			continue
		case err != nil:
			return err
		}
		a, err := DecodeAssignment(sresp.Assignment)
		if err != nil {
			return err
		}
		var next []TopicPartition
		for topic, ps := range a.Partitions {
			for _, p := range ps {
				next = append(next, TopicPartition{Topic: topic, Partition: p})
			}
		}
		slices.SortFunc(next, compareTP)
		var revoked, added []TopicPartition
		for _, tp := range m.owned {
			if !slices.Contains(next, tp) {
				revoked = append(revoked, tp)
			}
		}
		for _, tp := range next {
			if !slices.Contains(m.owned, tp) {
				added = append(added, tp)
			}
		}
		m.revoke(revoked)
		if m.onAssign != nil && len(added) > 0 {
			m.onAssign(m, nil, added)
		}
		m.owned, m.gen = next, resp.Generation
		if len(revoked) > 0 && m.assignor.Cooperative() {
			continue // KIP-429: rejoin so the revoked partitions can move
		}
		return nil
	}
}

// lead computes the assignment as the group leader.
func (m *testClient) lead(resp JoinResponse) (map[string][]byte, error) {
	members := make([]AssignMember, 0, len(resp.Members))
	for _, mm := range resp.Members {
		am, err := AssignMemberOf(mm)
		if err != nil {
			return nil, err
		}
		members = append(members, am)
	}
	out := make(map[string][]byte)
	for id, parts := range m.assignor.Assign(members, m.partitions) {
		out[id] = EncodeAssignment(Assignment{Version: AssignmentVersion, Partitions: parts})
	}
	return out, nil
}

// heartbeat is one Heartbeat of the member's generation.
func (m *testClient) heartbeat() error {
	return m.c.Heartbeat(HeartbeatRequest{Group: m.group, MemberID: m.id, GroupInstanceID: m.instance, Generation: m.gen})
}

// run keeps the member in the group until ctx ends: it heartbeats every
// interval and rejoins when told to. Each completed join is reported on
// joined (if not nil).
func (m *testClient) run(ctx context.Context, interval time.Duration, joined chan<- int32) error {
	for {
		if err := m.join(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if joined != nil {
			select {
			case joined <- m.gen:
			case <-ctx.Done():
				return nil
			}
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
			err := m.heartbeat()
			if err == nil {
				continue
			}
			if errors.Is(err, ErrUnknownMemberID) {
				m.id, m.gen = "", -1
				m.revoke(m.owned)
			} else if !errors.Is(err, ErrRebalanceInProgress) && !errors.Is(err, ErrIllegalGeneration) {
				return err
			}
			break
		}
	}
}

// owners tracks which member consumes each partition and fails the test
// if two ever do at once.
type owners struct {
	mu    sync.Mutex
	t     testing.TB
	owner map[TopicPartition]string
	err   error
}

func newOwners(t testing.TB) *owners {
	return &owners{t: t, owner: make(map[TopicPartition]string)}
}

func (o *owners) onAssign(m *testClient, revoked, added []TopicPartition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tp := range revoked {
		if o.owner[tp] == m.id {
			delete(o.owner, tp)
		}
	}
	for _, tp := range added {
		if cur, ok := o.owner[tp]; ok && cur != m.id && o.err == nil {
			o.err = fmt.Errorf("%v given to %s while %s still owns it", tp, m.id, cur)
		}
		o.owner[tp] = m.id
	}
}

func (o *owners) snapshot() map[TopicPartition]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.owner)
}

func (o *owners) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	require.NoError(o.t, o.err)
}

// memStore is an in-memory OffsetStore that records what it is given.
type memStore struct {
	mu      sync.Mutex
	calls   [][]StoredOffset
	offsets map[string]map[TopicPartition]OffsetAndMetadata
	fail    error
}

func newMemStore() *memStore {
	return &memStore{offsets: make(map[string]map[TopicPartition]OffsetAndMetadata)}
}

func (s *memStore) StoreOffsets(group string, commits []StoredOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.calls = append(s.calls, slices.Clone(commits))
	m := s.offsets[group]
	if m == nil {
		m = make(map[TopicPartition]OffsetAndMetadata)
		s.offsets[group] = m
	}
	for _, c := range commits {
		if c.Delete {
			delete(m, c.TopicPartition)
		} else {
			m[c.TopicPartition] = c.OffsetAndMetadata
		}
	}
	return nil
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }
