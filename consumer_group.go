package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/group"
)

// Group consumer defaults (Kafka's).
const (
	DefaultSessionTimeout     = 45 * time.Second
	DefaultRebalanceTimeout   = 5 * time.Minute
	DefaultHeartbeatInterval  = 3 * time.Second
	DefaultAutoCommitInterval = 5 * time.Second
)

// ErrGroupMode means a call that assigns partitions by hand on a consumer
// that belongs to a group (the group assigns them).
var ErrGroupMode = errors.New("spool: consumer is in a group; partitions are assigned by the group")

// groupMember is a Consumer's membership of its group. It follows Kafka's
// consumer: Poll joins and syncs (so the rebalance callbacks run on the
// caller's goroutine, between polls), a background goroutine heartbeats and
// raises the rejoin flag when the coordinator asks.
type groupMember struct {
	coord     *group.Coordinator
	id        string // member id; "" before the first join
	instance  string
	gen       int32
	protocol  string
	assignors []group.Assignor
	topics    []string
	counts    map[string]int32 // partition counts at the last join

	rejoin     atomic.Bool
	wake       chan struct{} // closed when rejoin is raised
	wakeMu     sync.Mutex
	hbStop     chan struct{}
	hbDone     chan struct{}
	lastCommit time.Time
	joined     bool

	m848 *member848 // GroupProtocolConsumer; nil for the classic protocol
}

// newGroupMember validates the group settings of cfg.
func newGroupMember(b *Broker, cfg *ConsumerConfig) (*groupMember, error) {
	if len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("%w: a group consumer needs Topics", ErrInvalidConfig)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.RebalanceTimeout == 0 {
		cfg.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = min(DefaultHeartbeatInterval, cfg.SessionTimeout/3)
	}
	if cfg.AutoCommitInterval == 0 {
		cfg.AutoCommitInterval = DefaultAutoCommitInterval
	}
	if len(cfg.Assignors) == 0 {
		cfg.Assignors = []group.Assignor{group.Range(), group.CooperativeSticky()}
	}
	if cfg.SessionTimeout < 0 || cfg.RebalanceTimeout < 0 || cfg.HeartbeatInterval <= 0 || cfg.AutoCommitInterval < 0 {
		return nil, fmt.Errorf("%w: group timeouts in %+v", ErrInvalidConfig, cfg)
	}
	for _, t := range cfg.Topics {
		if err := ValidTopicName(t); err != nil {
			return nil, err
		}
	}
	g := &groupMember{
		coord: b.coord, instance: cfg.GroupInstanceID, gen: -1,
		assignors: cfg.Assignors, topics: slices.Clone(cfg.Topics),
		wake: make(chan struct{}), lastCommit: time.Now(),
	}
	switch cfg.GroupProtocol {
	case "", GroupProtocolClassic:
		cfg.GroupProtocol = GroupProtocolClassic
		if cfg.ServerAssignor != "" {
			return nil, fmt.Errorf("%w: ServerAssignor needs GroupProtocolConsumer", ErrInvalidConfig)
		}
	case GroupProtocolConsumer:
		if !slices.Contains([]string{"", "uniform", "range"}, cfg.ServerAssignor) {
			return nil, fmt.Errorf("%w: ServerAssignor %q: the coordinator has uniform and range", ErrInvalidConfig, cfg.ServerAssignor)
		}
		g.m848 = &member848{interval: cfg.HeartbeatInterval, kick: make(chan struct{}, 1)}
	default:
		return nil, fmt.Errorf("%w: GroupProtocol %q", ErrInvalidConfig, cfg.GroupProtocol)
	}
	return g, nil
}

// identity is the member id and generation (the member epoch with
// GroupProtocolConsumer) to commit under.
func (g *groupMember) identity() (string, int32) {
	if m := g.m848; m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.id, m.epoch
	}
	return g.id, g.gen
}

func (g *groupMember) assignor() group.Assignor {
	for _, a := range g.assignors {
		if a.Name() == g.protocol {
			return a
		}
	}
	return g.assignors[0]
}

// raise asks the next Poll to rejoin and wakes a Poll that waits.
func (g *groupMember) raise() {
	g.rejoin.Store(true)
	g.wakeMu.Lock()
	select {
	case <-g.wake:
	default:
		close(g.wake)
	}
	g.wakeMu.Unlock()
}

func (g *groupMember) wakeChan() <-chan struct{} {
	g.wakeMu.Lock()
	defer g.wakeMu.Unlock()
	return g.wake
}

// ensureActive makes sure the consumer is a member of the group's current
// generation, joining (and revoking and assigning) as needed. Called by
// Poll, without c.mu.
func (c *Consumer) ensureActive(ctx context.Context) error {
	g := c.grp
	if g.joined && !g.rejoin.Load() && !c.subscriptionChanged() {
		return nil
	}
	c.stopHeartbeat()
	g.wakeMu.Lock()
	g.rejoin.Store(false)
	select {
	case <-g.wake:
		g.wake = make(chan struct{})
	default:
	}
	g.wakeMu.Unlock()
	for {
		cooperative := g.joined && g.assignor().Cooperative()
		if !cooperative {
			// Eager: give everything up before rejoining.
			if err := c.revoke(ctx, c.ownedPartitions()); err != nil {
				return err
			}
		}
		again, err := c.joinOnce(ctx)
		if err != nil {
			return err
		}
		g.joined = true
		if !again {
			break
		}
	}
	c.startHeartbeat()
	return nil
}

// subscriptionChanged reports whether a subscribed topic's partition count
// differs from the last join: the assignment must be recomputed.
func (c *Consumer) subscriptionChanged() bool {
	for _, name := range c.grp.topics {
		n := c.b.partitionCount(name)
		if c.grp.counts[name] != n && !(n < 0 && c.grp.counts[name] == 0) {
			return true
		}
	}
	return false
}

// joinOnce runs one JoinGroup and SyncGroup and applies the assignment. It
// reports whether the member must join again at once (it revoked
// partitions under the cooperative protocol, KIP-429).
func (c *Consumer) joinOnce(ctx context.Context) (again bool, err error) {
	g := c.grp
	for {
		owned := c.ownedPartitions()
		req := group.JoinRequest{
			Group: c.cfg.Group, MemberID: g.id, GroupInstanceID: g.instance,
			ClientID: "spool", ClientHost: hostname(), ProtocolType: group.ConsumerProtocolType,
			SessionTimeout: c.cfg.SessionTimeout, RebalanceTimeout: c.cfg.RebalanceTimeout, RequireKnownMemberID: true,
		}
		for _, a := range g.assignors {
			sub := group.Subscription{Version: group.SubscriptionVersion, Topics: g.topics, GenerationID: g.gen}
			if a.Cooperative() {
				sub.OwnedPartitions = owned
			}
			req.Protocols = append(req.Protocols, group.Protocol{Name: a.Name(), Metadata: group.EncodeSubscription(sub)})
		}
		g.counts = c.partitionCounts()
		resp, err := g.coord.Join(ctx, req)
		switch {
		case errors.Is(err, group.ErrMemberIDRequired):
			g.id = resp.MemberID
			continue
		case errors.Is(err, group.ErrUnknownMemberID):
			g.id, g.gen = "", -1
			if err := c.revoke(ctx, c.ownedPartitions()); err != nil {
				return false, err
			}
			continue
		case errors.Is(err, group.ErrRebalanceInProgress), errors.Is(err, group.ErrIllegalGeneration):
			continue
		case err != nil:
			return false, c.b.wrapClosed(fmt.Errorf("spool: join group %q: %w", c.cfg.Group, err))
		}
		g.id, g.protocol = resp.MemberID, resp.Protocol
		var assignments map[string][]byte
		if resp.LeaderID == g.id {
			if assignments, err = c.lead(resp); err != nil {
				return false, err
			}
		}
		sresp, err := g.coord.Sync(ctx, group.SyncRequest{
			Group: c.cfg.Group, Generation: resp.Generation, MemberID: g.id, GroupInstanceID: g.instance,
			ProtocolType: resp.ProtocolType, Protocol: resp.Protocol, Assignments: assignments,
		})
		switch {
		case errors.Is(err, group.ErrRebalanceInProgress), errors.Is(err, group.ErrIllegalGeneration):
			continue
		case errors.Is(err, group.ErrUnknownMemberID):
			g.id, g.gen = "", -1
			if err := c.revoke(ctx, c.ownedPartitions()); err != nil {
				return false, err
			}
			continue
		case err != nil:
			return false, c.b.wrapClosed(fmt.Errorf("spool: sync group %q: %w", c.cfg.Group, err))
		}
		a, err := group.DecodeAssignment(sresp.Assignment)
		if err != nil {
			return false, fmt.Errorf("spool: group %q: %w", c.cfg.Group, err)
		}
		var next []TopicPartition
		for topic, ps := range a.Partitions {
			for _, p := range ps {
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
		g.gen = resp.Generation
		if err := c.revoke(ctx, revoked); err != nil {
			return false, err
		}
		if err := c.assign(ctx, added); err != nil {
			return false, err
		}
		return len(revoked) > 0 && c.grp.assignor().Cooperative(), nil
	}
}

// lead computes the group's assignment as its leader.
func (c *Consumer) lead(resp group.JoinResponse) (map[string][]byte, error) {
	var assignor group.Assignor
	for _, a := range c.grp.assignors {
		if a.Name() == resp.Protocol {
			assignor = a
		}
	}
	if assignor == nil {
		return nil, fmt.Errorf("spool: group %q chose protocol %q, which this consumer does not have", c.cfg.Group, resp.Protocol)
	}
	members := make([]group.AssignMember, 0, len(resp.Members))
	counts := map[string]int32{}
	for _, mm := range resp.Members {
		am, err := group.AssignMemberOf(mm)
		if err != nil {
			return nil, fmt.Errorf("spool: group %q: member %s: %w", c.cfg.Group, mm.MemberID, err)
		}
		members = append(members, am)
		for _, name := range am.Topics {
			if n := c.b.partitionCount(name); n >= 0 {
				counts[name] = n
			}
		}
	}
	out := make(map[string][]byte, len(members))
	for id, parts := range assignor.Assign(members, counts) {
		out[id] = group.EncodeAssignment(group.Assignment{Version: group.AssignmentVersion, Partitions: parts})
	}
	return out, nil
}

// partitionCounts are the subscribed topics' partition counts (-1: no such
// topic).
func (c *Consumer) partitionCounts() map[string]int32 {
	counts := map[string]int32{}
	for _, name := range c.grp.topics {
		counts[name] = c.b.partitionCount(name)
	}
	return counts
}

func (c *Consumer) ownedPartitions() []TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TopicPartition, 0, len(c.assigned))
	for _, a := range c.assigned {
		out = append(out, a.tp)
	}
	return out
}

// revoke gives partitions up: with auto-commit their positions are
// committed first, then OnRevoked is told.
func (c *Consumer) revoke(ctx context.Context, tps []TopicPartition) error {
	if len(tps) == 0 {
		return nil
	}
	if _, gen := c.grp.identity(); c.cfg.AutoCommit.on(true) && gen >= 0 {
		// Best effort, as Kafka's consumer: a failed commit before a
		// rebalance leaves the partitions to be re-read (at least once).
		_ = c.commitPositions(ctx, tps)
	}
	if c.cfg.OnRevoked != nil {
		c.cfg.OnRevoked(slices.Clone(tps))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tp := range tps {
		delete(c.byTP, tp)
	}
	c.assigned = slices.DeleteFunc(c.assigned, func(a *assignment) bool { return slices.Contains(tps, a.tp) })
	return nil
}

// assign takes partitions on: each resumes at the group's committed
// offset, or where AutoOffsetReset says; then OnAssigned is told. At
// ReadCommitted it first waits until no transaction is about to commit
// offsets for them (Kafka's OffsetFetch with require_stable): resuming
// from an offset a transaction in flight is moving would process its
// records twice.
func (c *Consumer) assign(ctx context.Context, tps []TopicPartition) error {
	if len(tps) == 0 {
		return nil
	}
	if c.cfg.IsolationLevel == ReadCommitted {
		if err := c.awaitStableOffsets(ctx, tps); err != nil {
			return err
		}
	}
	committed, err := c.grp.coord.FetchOffsets(c.cfg.Group, tps)
	if err != nil && !errors.Is(err, group.ErrGroupIDNotFound) {
		return fmt.Errorf("spool: fetch committed offsets of group %q: %w", c.cfg.Group, err)
	}
	c.mu.Lock()
	for _, tp := range tps {
		if tp.Partition >= c.b.partitionCount(tp.Topic) {
			continue // deleted since the leader assigned it
		}
		a := &assignment{tp: tp}
		if _, parts, offline, err := c.b.route(tp.Topic).consumerParts(tp.Topic); err == nil && parts != nil {
			if a.part = parts[tp.Partition]; a.part == nil {
				a.offline = offline(tp.Partition)
			}
		}
		if o, ok := committed[tp]; ok && o.Offset >= 0 {
			a.pos, a.valid = o.Offset, true
		}
		c.byTP[tp] = a
		c.assigned = append(c.assigned, a)
	}
	c.mu.Unlock()
	if c.cfg.OnAssigned != nil {
		c.cfg.OnAssigned(slices.Clone(tps))
	}
	return nil
}

// awaitStableOffsets waits until the group has no transactional offset
// commits pending for tps.
func (c *Consumer) awaitStableOffsets(ctx context.Context, tps []TopicPartition) error {
	backoff := time.Millisecond
	for {
		unstable, err := c.grp.coord.UnstableOffsets(c.cfg.Group, tps)
		if err != nil && !errors.Is(err, group.ErrGroupIDNotFound) {
			return c.b.wrapClosed(fmt.Errorf("spool: fetch committed offsets of group %q: %w", c.cfg.Group, err))
		}
		if len(unstable) == 0 {
			return nil
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return fmt.Errorf("spool: group %q: waiting for the transactions committing offsets of %v: %w", c.cfg.Group, unstable, err)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// GroupMetadata is the member's identity in its group at this moment, for
// Producer.SendOffsetsToTransaction; the zero value without a group.
func (c *Consumer) GroupMetadata() GroupMetadata {
	if c.grp == nil {
		return GroupMetadata{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, gen := c.grp.identity()
	return GroupMetadata{GroupID: c.cfg.Group, MemberID: id, InstanceID: c.grp.instance, Generation: gen}
}

func (c *Consumer) startHeartbeat() {
	g := c.grp
	g.hbStop, g.hbDone = make(chan struct{}), make(chan struct{})
	req := group.HeartbeatRequest{Group: c.cfg.Group, MemberID: g.id, GroupInstanceID: g.instance, Generation: g.gen}
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(c.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			err := g.coord.Heartbeat(req)
			switch {
			case err == nil:
			case errors.Is(err, group.ErrUnknownMemberID), errors.Is(err, group.ErrFencedInstanceID):
				g.raise()
				return
			default: // rebalance in progress, stale generation, coordinator closed
				g.raise()
				return
			}
		}
	}(g.hbStop, g.hbDone)
}

func (c *Consumer) stopHeartbeat() {
	g := c.grp
	if g.hbStop != nil {
		close(g.hbStop)
		<-g.hbDone
		g.hbStop, g.hbDone = nil, nil
	}
}

// Commit commits the current position of every assigned partition for the
// consumer's group: the offset after the last record Poll returned. Commit
// after processing for at-least-once delivery (a crash before the commit
// re-delivers), before processing for at-most-once (a crash after it loses
// what was not processed). It fails with an error wrapping
// group.ErrRebalanceInProgress or group.ErrIllegalGeneration when the group
// is rebalancing; the next Poll rejoins.
func (c *Consumer) Commit(ctx context.Context) error {
	if c.grp == nil {
		return fmt.Errorf("%w: Commit needs a group", ErrInvalidConfig)
	}
	return c.commitPositions(ctx, c.ownedPartitions())
}

// CommitOffsets commits the given next-offsets to consume for the
// consumer's group.
func (c *Consumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	if c.grp == nil {
		return fmt.Errorf("%w: CommitOffsets needs a group", ErrInvalidConfig)
	}
	req := c.commitRequest()
	for tp, off := range offsets {
		req.Offsets[tp] = group.OffsetAndMetadata{Offset: off, LeaderEpoch: -1}
	}
	return c.sendCommit(req)
}

func (c *Consumer) commitRequest() group.CommitRequest {
	id, gen := c.grp.identity()
	return group.CommitRequest{
		Group: c.cfg.Group, MemberID: id, GroupInstanceID: c.grp.instance, Generation: gen,
		Offsets: map[group.TopicPartition]group.OffsetAndMetadata{},
	}
}

// commitPositions commits the positions of the named partitions.
func (c *Consumer) commitPositions(ctx context.Context, tps []TopicPartition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := c.commitRequest()
	c.mu.Lock()
	for _, tp := range tps {
		if a := c.byTP[tp]; a != nil && a.valid {
			epoch := int32(-1)
			if part, err := c.partOf(ctx, a); err == nil {
				epoch = part.LeaderEpoch()
			}
			req.Offsets[tp] = group.OffsetAndMetadata{Offset: a.pos, LeaderEpoch: epoch}
		}
	}
	c.mu.Unlock()
	if len(req.Offsets) == 0 {
		return nil
	}
	return c.sendCommit(req)
}

func (c *Consumer) sendCommit(req group.CommitRequest) error {
	perTP, err := c.grp.coord.CommitOffsets(req)
	if err != nil {
		return c.b.wrapClosed(fmt.Errorf("spool: commit for group %q: %w", c.cfg.Group, err))
	}
	var errs []error
	for tp, e := range perTP {
		if e != nil {
			errs = append(errs, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, e))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("spool: commit for group %q: %w", c.cfg.Group, errors.Join(errs...))
	}
	c.grp.lastCommit = time.Now()
	return nil
}

// maybeAutoCommit commits positions when AutoCommitInterval has passed.
func (c *Consumer) maybeAutoCommit(ctx context.Context) {
	if !c.cfg.AutoCommit.on(true) || time.Since(c.grp.lastCommit) < c.cfg.AutoCommitInterval {
		return
	}
	if err := c.commitPositions(ctx, c.ownedPartitions()); err != nil {
		c.b.logger.Debug("auto-commit failed", "group", c.cfg.Group, "err", err)
	}
}

// leaveGroup gives the member's partitions up - committing them with
// auto-commit and telling OnRevoked, as Kafka's consumer does on close - and
// leaves the group; a static member does not leave, so that it keeps its
// partitions if it restarts within the session timeout (KIP-345).
func (c *Consumer) leaveGroup() {
	g := c.grp
	if g.m848 != nil {
		c.leave848()
		return
	}
	c.stopHeartbeat()
	if !g.joined {
		return
	}
	_ = c.revoke(context.Background(), c.ownedPartitions())
	if g.instance == "" && g.id != "" {
		_, _ = g.coord.Leave(group.LeaveRequest{Group: c.cfg.Group, Members: []group.LeaveMember{{MemberID: g.id}}})
	}
}

var hostnameOnce = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

func hostname() string { return hostnameOnce() }
