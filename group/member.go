package group

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Client is what a group member needs of its group coordinator. Local
// adapts a Coordinator in this process; package transport's GroupClient
// speaks the Kafka protocol to a coordinator elsewhere.
type Client interface {
	Join(ctx context.Context, req JoinRequest) (JoinResponse, error)
	Sync(ctx context.Context, req SyncRequest) (SyncResponse, error)
	Heartbeat(ctx context.Context, req HeartbeatRequest) error
	Leave(ctx context.Context, req LeaveRequest) error
	ConsumerHeartbeat(ctx context.Context, req ConsumerHeartbeatRequest) (ConsumerHeartbeatResponse, error)
	// CommitOffsets commits offsets; a partition's refusal fails the
	// call (its error wraps the partition's).
	CommitOffsets(ctx context.Context, req CommitRequest) error
	FetchOffsets(ctx context.Context, group string, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error)
}

// Local is the Client of a Coordinator in this process.
func Local(c *Coordinator) Client { return local{c} }

type local struct{ c *Coordinator }

func (l local) Join(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	return l.c.Join(ctx, req)
}
func (l local) Sync(ctx context.Context, req SyncRequest) (SyncResponse, error) {
	return l.c.Sync(ctx, req)
}
func (l local) Heartbeat(_ context.Context, req HeartbeatRequest) error { return l.c.Heartbeat(req) }
func (l local) Leave(_ context.Context, req LeaveRequest) error {
	errs, err := l.c.Leave(req)
	return errors.Join(append(errs, err)...)
}
func (l local) ConsumerHeartbeat(_ context.Context, req ConsumerHeartbeatRequest) (ConsumerHeartbeatResponse, error) {
	return l.c.ConsumerHeartbeat(req)
}
func (l local) CommitOffsets(_ context.Context, req CommitRequest) error {
	perTP, err := l.c.CommitOffsets(req)
	if err != nil {
		return err
	}
	var errs []error
	for _, tp := range slices.SortedFunc(maps.Keys(perTP), compareTP) {
		if e := perTP[tp]; e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tp, e))
		}
	}
	return errors.Join(errs...)
}
func (l local) FetchOffsets(_ context.Context, group string, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	out, err := l.c.FetchOffsets(group, tps)
	if errors.Is(err, ErrGroupIDNotFound) {
		return map[TopicPartition]OffsetAndMetadata{}, nil
	}
	return out, err
}

// Membership protocols of a ConsumerGroup (Kafka's group.protocol).
const (
	// ProtocolClassic is JoinGroup/SyncGroup/Heartbeat: the members rejoin
	// at each rebalance and one of them assigns.
	ProtocolClassic = "classic"
	// ProtocolConsumer is KIP-848: the coordinator assigns, and each member
	// moves on its own heartbeats.
	ProtocolConsumer = "consumer"
)

// Defaults of ConsumerGroupConfig (Kafka's consumer's).
const (
	DefaultMemberSessionTimeout    = 45 * time.Second
	DefaultMemberRebalanceTimeout  = 5 * time.Minute
	DefaultMemberHeartbeatInterval = 3 * time.Second
)

// ConsumerGroupConfig configures a ConsumerGroup. Zero fields take their
// defaults.
type ConsumerGroupConfig struct {
	// Group is the group id; Topics the subscription.
	Group  string
	Topics []string
	// Protocol is ProtocolClassic (the default) or ProtocolConsumer.
	Protocol string
	// InstanceID makes the member static (group.instance.id): it keeps its
	// partitions across a restart within its session timeout, and Close
	// does not leave the group.
	InstanceID string
	// SessionTimeout and HeartbeatInterval time a classic member
	// (session.timeout.ms, heartbeat.interval.ms; defaults 45 s and 3 s,
	// at most a third of the session timeout); a KIP-848 member
	// heartbeats as its coordinator says, and gives its partitions up when
	// no heartbeat has been answered for SessionTimeout (set it to the
	// coordinator's group.consumer.session.timeout.ms, 45 s by default). RebalanceTimeout bounds how long the member may
	// take to rejoin (classic) or give up partitions (KIP-848)
	// (max.poll.interval.ms; default 5 min).
	SessionTimeout, RebalanceTimeout, HeartbeatInterval time.Duration
	// Assignors are a classic member's assignment strategies, preferred
	// first (default range, then cooperative-sticky).
	Assignors []Assignor
	// ServerAssignor names a KIP-848 member's coordinator assignor:
	// "uniform", "range", or "" for the group's choice.
	ServerAssignor string
	// ClientID and ClientHost are what the coordinator describes.
	ClientID, ClientHost string
	// PartitionCount reports how many partitions a topic has (-1: none):
	// the leader of a classic group assigns with it, and a change of a
	// subscribed topic's count makes a classic member rejoin. Required
	// with ProtocolClassic.
	PartitionCount func(topic string) int32
	// OnRevoked is called, from Poll or Close, with partitions the member
	// gives up, before the coordinator can hand them to another member:
	// stop working on them and commit their offsets here. OnAssigned is
	// called, from Poll, with the partitions it now owns. Either may be
	// nil.
	OnRevoked, OnAssigned func(ctx context.Context, tps []TopicPartition)
}

// ConsumerGroup is the member side of a consumer group: it joins the group
// through a Client, keeps the member alive, and reconciles it to the
// partitions the group gives it - telling OnRevoked what to give up before
// the coordinator may give it away, and OnAssigned what it got. It speaks
// either membership protocol. spool.Consumer uses it; it needs no broker,
// only a Client (Local for a Coordinator in this process).
//
// Poll does the group's work on the caller's goroutine, so the callbacks
// run there, between the caller's own work; a background goroutine only
// heartbeats and signals (Wake) when Poll has work to do.
//
// Poll, Close and the callbacks are meant for one goroutine; Assigned,
// Identity, Wake and Commit may be called from any.
type ConsumerGroup struct {
	cl  Client
	cfg ConsumerGroupConfig

	mu       sync.Mutex // guards the fields below, and owned
	id       string
	gen      int32 // the generation, or the member epoch (KIP-848)
	protocol string
	owned    []TopicPartition
	// KIP-848: the latest assignment sent (nil before any) and why the
	// heartbeat stopped (the member must rejoin).
	target   []TopicPartition
	fenced   error
	interval time.Duration

	joined bool
	counts map[string]int32 // partition counts at the last join (classic)

	rejoin atomic.Bool
	wakeMu sync.Mutex
	wake   chan struct{} // closed when Poll has work
	kick   chan struct{} // heartbeat now (KIP-848)
	hbStop chan struct{}
	hbDone chan struct{}
	closed bool
}

// NewConsumerGroup returns a member of cfg.Group that has not joined yet:
// the first Poll joins.
func NewConsumerGroup(cl Client, cfg ConsumerGroupConfig) (*ConsumerGroup, error) {
	if cl == nil || cfg.Group == "" || len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("group: a consumer group member needs a Client, Group and Topics")
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultMemberSessionTimeout
	}
	if cfg.RebalanceTimeout == 0 {
		cfg.RebalanceTimeout = DefaultMemberRebalanceTimeout
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = min(DefaultMemberHeartbeatInterval, cfg.SessionTimeout/3)
	}
	if cfg.SessionTimeout < 0 || cfg.RebalanceTimeout < 0 || cfg.HeartbeatInterval <= 0 {
		return nil, fmt.Errorf("group: consumer group member timeouts: session %v, rebalance %v, heartbeat %v",
			cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.HeartbeatInterval)
	}
	switch cfg.Protocol {
	case "", ProtocolClassic:
		cfg.Protocol = ProtocolClassic
		if cfg.ServerAssignor != "" {
			return nil, fmt.Errorf("group: ServerAssignor needs ProtocolConsumer")
		}
		if cfg.PartitionCount == nil {
			return nil, fmt.Errorf("group: a classic member needs PartitionCount")
		}
		if len(cfg.Assignors) == 0 {
			cfg.Assignors = []Assignor{Range(), CooperativeSticky()}
		}
	case ProtocolConsumer:
		if !slices.Contains([]string{"", "uniform", "range"}, cfg.ServerAssignor) {
			return nil, fmt.Errorf("%w: %q: the coordinator has uniform and range", ErrUnsupportedAssignor, cfg.ServerAssignor)
		}
	default:
		return nil, fmt.Errorf("group: unknown protocol %q (classic or consumer)", cfg.Protocol)
	}
	cfg.Topics = slices.Clone(cfg.Topics)
	return &ConsumerGroup{cl: cl, cfg: cfg, gen: -1, interval: cfg.HeartbeatInterval,
		wake: make(chan struct{}), kick: make(chan struct{}, 1)}, nil
}

// Assigned lists the partitions the member owns.
func (g *ConsumerGroup) Assigned() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.owned)
}

// Identity is the member id and generation - the member epoch under
// KIP-848 - to commit (or send offsets to a transaction) under; -1 before
// the member joined.
func (g *ConsumerGroup) Identity() (memberID string, generation int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.id, g.gen
}

// InstanceID is the member's group.instance.id.
func (g *ConsumerGroup) InstanceID() string { return g.cfg.InstanceID }

// Wake is closed when Poll has work to do: a rebalance (classic) or a new
// assignment (KIP-848). A caller that waits for records waits on it too,
// and calls Poll when it is closed.
func (g *ConsumerGroup) Wake() <-chan struct{} {
	g.wakeMu.Lock()
	defer g.wakeMu.Unlock()
	return g.wake
}

func (g *ConsumerGroup) raise() {
	g.rejoin.Store(true)
	g.wakeMu.Lock()
	select {
	case <-g.wake:
	default:
		close(g.wake)
	}
	g.wakeMu.Unlock()
}

func (g *ConsumerGroup) lower() {
	g.wakeMu.Lock()
	g.rejoin.Store(false)
	select {
	case <-g.wake:
		g.wake = make(chan struct{})
	default:
	}
	g.wakeMu.Unlock()
}

// Commit commits offsets under the member's identity. It fails with an
// error wrapping ErrRebalanceInProgress, ErrIllegalGeneration,
// ErrStaleMemberEpoch or ErrUnknownMemberID when the member is behind the
// group; the next Poll catches up.
func (g *ConsumerGroup) Commit(ctx context.Context, offsets map[TopicPartition]OffsetAndMetadata) error {
	if len(offsets) == 0 {
		return nil
	}
	id, gen := g.Identity()
	return g.cl.CommitOffsets(ctx, CommitRequest{Group: g.cfg.Group, MemberID: id, GroupInstanceID: g.cfg.InstanceID,
		Generation: gen, Offsets: offsets})
}

// FetchOffsets returns the group's committed offsets of tps (none for a
// partition never committed).
func (g *ConsumerGroup) FetchOffsets(ctx context.Context, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	return g.cl.FetchOffsets(ctx, g.cfg.Group, tps)
}

// Poll joins the group if the member is not in it, and reconciles the
// member to what the group gives it: OnRevoked and OnAssigned run in here.
// It returns at once when there is nothing to do.
func (g *ConsumerGroup) Poll(ctx context.Context) error {
	if g.closed {
		return fmt.Errorf("group %q: member closed", g.cfg.Group)
	}
	if g.cfg.Protocol == ProtocolConsumer {
		return g.poll848(ctx)
	}
	return g.pollClassic(ctx)
}

// Close gives every partition up (OnRevoked) and leaves the group; a
// static member stays in it, to come back within its session timeout. It
// stops the heartbeat either way.
func (g *ConsumerGroup) Close(ctx context.Context) error {
	if g.closed {
		return nil
	}
	g.closed = true
	g.stopHeartbeat()
	if !g.joined {
		return nil
	}
	g.revoke(ctx, g.Assigned())
	id, _ := g.Identity()
	if g.cfg.Protocol == ProtocolConsumer {
		epoch := epochLeave
		if g.cfg.InstanceID != "" {
			epoch = epochStaticLeave
		}
		_, err := g.cl.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: g.cfg.Group, MemberID: id, MemberEpoch: epoch, InstanceID: g.cfg.InstanceID})
		return err
	}
	if g.cfg.InstanceID != "" || id == "" {
		return nil
	}
	return g.cl.Leave(ctx, LeaveRequest{Group: g.cfg.Group, Members: []LeaveMember{{MemberID: id}}})
}

// Abandon stops heartbeating without leaving or revoking anything, as a
// process that dies does: the group learns at the session timeout.
func (g *ConsumerGroup) Abandon() {
	g.closed = true
	g.stopHeartbeat()
}

func (g *ConsumerGroup) revoke(ctx context.Context, tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	if g.cfg.OnRevoked != nil {
		g.cfg.OnRevoked(ctx, slices.Clone(tps))
	}
	g.mu.Lock()
	g.owned = slices.DeleteFunc(g.owned, func(tp TopicPartition) bool { return slices.Contains(tps, tp) })
	g.mu.Unlock()
}

func (g *ConsumerGroup) assign(ctx context.Context, tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	g.mu.Lock()
	g.owned = append(g.owned, tps...)
	g.mu.Unlock()
	if g.cfg.OnAssigned != nil {
		g.cfg.OnAssigned(ctx, slices.Clone(tps))
	}
}

func (g *ConsumerGroup) stopHeartbeat() {
	if g.hbStop != nil {
		close(g.hbStop)
		<-g.hbDone
		g.hbStop, g.hbDone = nil, nil
	}
}

// The classic protocol.

func (g *ConsumerGroup) assignor() Assignor {
	for _, a := range g.cfg.Assignors {
		if a.Name() == g.protocol {
			return a
		}
	}
	return g.cfg.Assignors[0]
}

func (g *ConsumerGroup) pollClassic(ctx context.Context) error {
	if g.joined && !g.rejoin.Load() && !g.countsChanged() {
		return nil
	}
	g.stopHeartbeat()
	g.lower()
	for {
		if !(g.joined && g.assignor().Cooperative()) {
			// Eager: give everything up before rejoining.
			g.revoke(ctx, g.Assigned())
		}
		again, err := g.joinOnce(ctx)
		if err != nil {
			g.raise() // not in the group: the next Poll tries again
			return err
		}
		g.joined = true
		if !again {
			break
		}
	}
	g.startClassicHeartbeat()
	return nil
}

// countsChanged reports whether a subscribed topic's partition count
// differs from the last join: the assignment must be recomputed.
func (g *ConsumerGroup) countsChanged() bool {
	for _, name := range g.cfg.Topics {
		n := g.cfg.PartitionCount(name)
		if g.counts[name] != n && !(n < 0 && g.counts[name] == 0) {
			return true
		}
	}
	return false
}

// joinOnce runs one JoinGroup and SyncGroup and applies the assignment. It
// reports whether the member must join again at once (it revoked
// partitions under the cooperative protocol, KIP-429).
func (g *ConsumerGroup) joinOnce(ctx context.Context) (again bool, err error) {
	for {
		owned := g.Assigned()
		id, gen := g.Identity()
		req := JoinRequest{
			Group: g.cfg.Group, MemberID: id, GroupInstanceID: g.cfg.InstanceID,
			ClientID: g.cfg.ClientID, ClientHost: g.cfg.ClientHost, ProtocolType: ConsumerProtocolType,
			SessionTimeout: g.cfg.SessionTimeout, RebalanceTimeout: g.cfg.RebalanceTimeout, RequireKnownMemberID: true,
		}
		for _, a := range g.cfg.Assignors {
			sub := Subscription{Version: SubscriptionVersion, Topics: g.cfg.Topics, GenerationID: gen}
			if a.Cooperative() {
				sub.OwnedPartitions = owned
			}
			req.Protocols = append(req.Protocols, Protocol{Name: a.Name(), Metadata: EncodeSubscription(sub)})
		}
		g.counts = map[string]int32{}
		for _, name := range g.cfg.Topics {
			g.counts[name] = g.cfg.PartitionCount(name)
		}
		resp, err := g.cl.Join(ctx, req)
		switch {
		case errors.Is(err, ErrMemberIDRequired):
			g.setIdentity(resp.MemberID, gen)
			continue
		case errors.Is(err, ErrUnknownMemberID):
			g.setIdentity("", -1)
			g.revoke(ctx, g.Assigned())
			continue
		case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
			continue
		case err != nil:
			return false, fmt.Errorf("group %q: join: %w", g.cfg.Group, err)
		}
		g.mu.Lock()
		g.id, g.protocol = resp.MemberID, resp.Protocol
		g.mu.Unlock()
		var assignments map[string][]byte
		if resp.LeaderID == resp.MemberID {
			if assignments, err = g.lead(resp); err != nil {
				return false, err
			}
		}
		sresp, err := g.cl.Sync(ctx, SyncRequest{
			Group: g.cfg.Group, Generation: resp.Generation, MemberID: resp.MemberID, GroupInstanceID: g.cfg.InstanceID,
			ProtocolType: resp.ProtocolType, Protocol: resp.Protocol, Assignments: assignments,
		})
		switch {
		case errors.Is(err, ErrRebalanceInProgress), errors.Is(err, ErrIllegalGeneration):
			continue
		case errors.Is(err, ErrUnknownMemberID):
			g.setIdentity("", -1)
			g.revoke(ctx, g.Assigned())
			continue
		case err != nil:
			return false, fmt.Errorf("group %q: sync: %w", g.cfg.Group, err)
		}
		a, err := DecodeAssignment(sresp.Assignment)
		if err != nil {
			return false, fmt.Errorf("group %q: %w", g.cfg.Group, err)
		}
		var next []TopicPartition
		for _, topic := range slices.Sorted(maps.Keys(a.Partitions)) {
			for _, p := range a.Partitions[topic] {
				next = append(next, TopicPartition{Topic: topic, Partition: p})
			}
		}
		var revoked, added []TopicPartition
		for _, tp := range owned {
			if !slices.Contains(next, tp) {
				revoked = append(revoked, tp)
			}
		}
		for _, tp := range next {
			if !slices.Contains(owned, tp) {
				added = append(added, tp)
			}
		}
		g.setIdentity(resp.MemberID, resp.Generation)
		g.revoke(ctx, revoked)
		g.assign(ctx, added)
		return len(revoked) > 0 && g.assignor().Cooperative(), nil
	}
}

func (g *ConsumerGroup) setIdentity(id string, gen int32) {
	g.mu.Lock()
	g.id, g.gen = id, gen
	g.mu.Unlock()
}

// lead computes the group's assignment as its leader.
func (g *ConsumerGroup) lead(resp JoinResponse) (map[string][]byte, error) {
	var assignor Assignor
	for _, a := range g.cfg.Assignors {
		if a.Name() == resp.Protocol {
			assignor = a
		}
	}
	if assignor == nil {
		return nil, fmt.Errorf("group %q chose protocol %q, which this member does not have", g.cfg.Group, resp.Protocol)
	}
	members := make([]AssignMember, 0, len(resp.Members))
	counts := map[string]int32{}
	for _, mm := range resp.Members {
		am, err := AssignMemberOf(mm)
		if err != nil {
			return nil, fmt.Errorf("group %q: member %s: %w", g.cfg.Group, mm.MemberID, err)
		}
		members = append(members, am)
		for _, name := range am.Topics {
			if n := g.cfg.PartitionCount(name); n >= 0 {
				counts[name] = n
			}
		}
	}
	out := make(map[string][]byte, len(members))
	for id, parts := range assignor.Assign(members, counts) {
		out[id] = EncodeAssignment(Assignment{Version: AssignmentVersion, Partitions: parts})
	}
	return out, nil
}

func (g *ConsumerGroup) startClassicHeartbeat() {
	g.hbStop, g.hbDone = make(chan struct{}), make(chan struct{})
	id, gen := g.Identity()
	req := HeartbeatRequest{Group: g.cfg.Group, MemberID: id, GroupInstanceID: g.cfg.InstanceID, Generation: gen}
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(g.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if err := g.cl.Heartbeat(context.Background(), req); err != nil {
				// Rebalancing, a stale generation, an unknown member, a
				// closed coordinator: the next Poll rejoins.
				g.raise()
				return
			}
		}
	}(g.hbStop, g.hbDone)
}

// KIP-848.

// poll848 joins if needed and reconciles to the latest assignment.
func (g *ConsumerGroup) poll848(ctx context.Context) error {
	g.mu.Lock()
	fenced := g.fenced
	g.mu.Unlock()
	if fenced != nil || !g.joined {
		g.stopHeartbeat()
		if fenced != nil {
			// Our partitions may be another member's already: give them
			// up (OnRevoked: commits will be refused, which is right).
			g.revoke(ctx, g.Assigned())
		}
		if err := g.join848(ctx); err != nil {
			// Not a member: the next Poll tries again.
			g.joined = false
			return err
		}
		g.joined = true
		g.start848Heartbeat()
	}
	g.lower()
	g.mu.Lock()
	target := slices.Clone(g.target)
	g.mu.Unlock()
	if target == nil {
		return nil
	}
	owned := g.Assigned()
	var revoked, added []TopicPartition
	for _, tp := range owned {
		if !slices.Contains(target, tp) {
			revoked = append(revoked, tp)
		}
	}
	for _, tp := range target {
		if !slices.Contains(owned, tp) {
			added = append(added, tp)
		}
	}
	if len(revoked) > 0 {
		g.revoke(ctx, revoked)
		select { // tell the coordinator at once, so that others may move
		case g.kick <- struct{}{}:
		default:
		}
	}
	g.assign(ctx, added)
	return nil
}

// join848 joins with epoch 0: a fenced member keeps its id, as KIP-848
// asks; one the coordinator does not know takes a new one.
func (g *ConsumerGroup) join848(ctx context.Context) error {
	g.mu.Lock()
	if g.id == "" || errors.Is(g.fenced, ErrUnknownMemberID) {
		g.id = newMemberID()
	}
	g.fenced, g.target, g.gen = nil, nil, 0
	id := g.id
	g.mu.Unlock()
	resp, err := g.cl.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{
		Group: g.cfg.Group, MemberID: id, InstanceID: g.cfg.InstanceID, RebalanceTimeout: g.cfg.RebalanceTimeout,
		SubscribedTopics: g.cfg.Topics, ServerAssignor: g.cfg.ServerAssignor, Owned: map[string][]int32{},
		ClientID: g.cfg.ClientID, ClientHost: g.cfg.ClientHost,
	})
	if err != nil {
		return fmt.Errorf("group %q: join: %w", g.cfg.Group, err)
	}
	g.apply(resp)
	return nil
}

func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// apply takes a heartbeat's answer; whether it carried an assignment.
func (g *ConsumerGroup) apply(resp ConsumerHeartbeatResponse) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen = resp.MemberEpoch
	if resp.HeartbeatInterval > 0 {
		g.interval = resp.HeartbeatInterval
	}
	if resp.Assignment == nil {
		return false
	}
	g.target = []TopicPartition{}
	for _, topic := range slices.Sorted(maps.Keys(resp.Assignment)) {
		for _, p := range resp.Assignment[topic] {
			g.target = append(g.target, TopicPartition{Topic: topic, Partition: p})
		}
	}
	return true
}

// start848Heartbeat heartbeats every interval the coordinator asks for
// (and when Poll kicks it) with what the member owns; a new assignment or
// a fencing wakes Poll.
func (g *ConsumerGroup) start848Heartbeat() {
	g.hbStop, g.hbDone = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		lastOK := time.Now()
		for {
			g.mu.Lock()
			interval := g.interval
			g.mu.Unlock()
			t := time.NewTimer(interval)
			select {
			case <-stop:
				t.Stop()
				return
			case <-g.kick:
			case <-t.C:
			}
			t.Stop()
			g.mu.Lock()
			id, epoch := g.id, g.gen
			owned := map[string][]int32{}
			for _, tp := range g.owned {
				owned[tp.Topic] = append(owned[tp.Topic], tp.Partition)
			}
			g.mu.Unlock()
			resp, err := g.cl.ConsumerHeartbeat(context.Background(), ConsumerHeartbeatRequest{
				Group: g.cfg.Group, MemberID: id, MemberEpoch: epoch, InstanceID: g.cfg.InstanceID, Owned: owned,
			})
			if err != nil && time.Since(lastOK) > g.cfg.SessionTimeout {
				// Unheard for a session timeout: the coordinator has
				// removed us by now and may have given our partitions
				// away. Give them up too (as Kafka's consumer does).
				err = fmt.Errorf("%w: no heartbeat answered for %v: %w", ErrUnknownMemberID, g.cfg.SessionTimeout, err)
			}
			switch {
			case err == nil:
				lastOK = time.Now()
			case errors.Is(err, ErrFencedMemberEpoch), errors.Is(err, ErrUnknownMemberID), errors.Is(err, ErrCoordinatorClosed):
				// Out of the group, or the coordinator is gone: the next
				// Poll gives everything up and rejoins (or reports why it
				// cannot). A member that stopped heartbeating must not
				// keep its partitions: the group gives them away.
				g.mu.Lock()
				g.fenced = err
				g.mu.Unlock()
				g.raise()
				return
			default:
				continue // the coordinator is moving, or unreachable: try again
			}
			if g.apply(resp) {
				g.raise()
			}
		}
	}(g.hbStop, g.hbDone)
}
