package group

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Coordinator is the group coordinator of Kafka's classic protocol: it keeps
// many groups, their membership and generations and their committed
// offsets. Safe for concurrent use.
//
// Each group has its own lock; requests to different groups never wait for
// each other, requests to one group are applied one at a time. Join and Sync
// block, as Kafka's delayed operations do, until the group decides their
// answer; everything else answers at once.
type Coordinator struct {
	opts Options
	cfg  *config

	mu     sync.RWMutex // guards groups; taken before any entry's lock, never after
	groups map[string]*entry

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{} // closed when the timer goroutine has stopped
}

// entry is a group and the callers waiting on it.
type entry struct {
	mu sync.Mutex
	g  *classicGroup
	// cg is the group's KIP-848 side, once a ConsumerGroupHeartbeat came
	// (consumer_coord.go); nil for a classic group.
	cg *consumerGroup
	// sh is the group's KIP-932 membership, once a ShareGroupHeartbeat
	// came (share_coord.go).
	sh      *shareGroup
	waiters map[uint64]chan reply
	// dead marks an entry removed from the Coordinator's map (deleted,
	// expired, or never used): whoever finds it looks the group up again.
	dead bool
}

// NewCoordinator returns a Coordinator. Unless opts.ManualTick is set it runs
// a goroutine that applies timeouts (Tick) and offset retention; Close stops
// it.
func NewCoordinator(opts Options) *Coordinator {
	opts = opts.withDefaults()
	c := &Coordinator{
		opts:   opts,
		cfg:    newConfig(opts),
		groups: make(map[string]*entry),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if opts.ManualTick {
		close(c.done)
	} else {
		go c.run()
	}
	return c
}

func (c *Coordinator) run() {
	defer close(c.done)
	t := time.NewTicker(c.opts.TickInterval)
	defer t.Stop()
	lastExpiry := c.opts.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			now := c.opts.Now()
			c.Tick(now)
			if c.opts.OffsetsRetention > 0 && now.Sub(lastExpiry) >= c.opts.OffsetsRetentionCheckInterval {
				lastExpiry = now
				c.ExpireOffsets(now, c.opts.OffsetsRetention)
			}
		}
	}
}

// Close stops the timer goroutine and fails every waiting Join and Sync, and
// every later call, with ErrCoordinatorClosed. Groups are not changed: a
// Coordinator has no state worth saving but the committed offsets, which the
// Store already holds.
func (c *Coordinator) Close() {
	if c.closed.Swap(true) {
		return
	}
	close(c.stop)
	<-c.done
	for _, e := range c.entries() {
		e.mu.Lock()
		for w, ch := range e.waiters {
			ch <- reply{waiter: w, err: ErrCoordinatorClosed}
		}
		clear(e.waiters)
		e.mu.Unlock()
	}
}

// entries snapshots the groups' entries, sorted by group id.
func (c *Coordinator) entries() []*entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*entry, 0, len(c.groups))
	for _, id := range slices.Sorted(maps.Keys(c.groups)) {
		out = append(out, c.groups[id])
	}
	return out
}

// lockGroup returns the group's entry, locked; nil if the group does not
// exist and create is false.
func (c *Coordinator) lockGroup(id string, create bool) *entry {
	for {
		c.mu.RLock()
		e := c.groups[id]
		c.mu.RUnlock()
		if e == nil {
			if !create {
				return nil
			}
			c.mu.Lock()
			if e = c.groups[id]; e == nil {
				e = &entry{g: newClassicGroup(id, c.cfg, c.opts.Now()), waiters: make(map[uint64]chan reply)}
				c.groups[id] = e
			}
			c.mu.Unlock()
		}
		e.mu.Lock()
		if !e.dead {
			return e
		}
		e.mu.Unlock()
		c.forget(e)
		if !create {
			return nil
		}
	}
}

// forget removes a dead entry from the map (if it is still there).
func (c *Coordinator) forget(e *entry) {
	c.mu.Lock()
	if c.groups[e.g.id] == e {
		delete(c.groups, e.g.id)
	}
	c.mu.Unlock()
}

// unlock releases a locked entry, first discarding its group if a failed
// request created it for nothing.
func (c *Coordinator) unlock(e *entry) {
	drop := !e.dead && e.g.pristine() && !e.consumerActive() && !e.shareActive()
	if drop {
		e.dead = true
	}
	e.mu.Unlock()
	if drop {
		c.forget(e)
	}
}

// kill marks a locked entry's group deleted and unlocks it.
func (c *Coordinator) kill(e *entry) {
	e.g.transition(Dead, c.opts.Now())
	e.dead = true
	e.mu.Unlock()
	c.forget(e)
}

// deliver hands the group's decided replies to their waiters.
func (c *Coordinator) deliver(e *entry) {
	for _, r := range e.g.takeReplies() {
		if ch, ok := e.waiters[r.waiter]; ok {
			ch <- r // buffered: never blocks
			delete(e.waiters, r.waiter)
		}
	}
}

func (c *Coordinator) wait(e *entry, w uint64) chan reply {
	ch := make(chan reply, 1)
	e.waiters[w] = ch
	return ch
}

// await waits for the reply to a parked request. If ctx ends first the
// request is withdrawn with cancel, unless its reply came meanwhile.
func (c *Coordinator) await(ctx context.Context, e *entry, w uint64, ch chan reply, cancel func(*classicGroup, time.Time, uint64)) (reply, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	select {
	case r := <-ch:
		e.mu.Unlock()
		return r, nil
	default:
	}
	delete(e.waiters, w)
	if !e.dead {
		cancel(e.g, c.opts.Now(), w)
		c.deliver(e)
	}
	c.unlock(e)
	return reply{}, ctx.Err()
}

func wrap(group, op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("group %q: %s: %w", group, op, err)
}

// Join handles a JoinGroup request. It returns once the group has decided:
// at once for errors, for a member rejoining with unchanged metadata a group
// that is not rebalancing (unless it is the leader of a Stable group, whose
// join starts a rebalance), and for a static member that restarts while the
// group is Stable (KIP-345); otherwise when the rebalance completes - every
// known member has joined, or the rebalance timeout has passed and the
// dynamic members that did not rejoin are removed. If ctx ends first the join
// is withdrawn and ctx's error returned.
//
// With an error the response carries only MemberID: with ErrMemberIDRequired
// it is the id the member must join with (KIP-394).
func (c *Coordinator) Join(ctx context.Context, req JoinRequest) (JoinResponse, error) {
	if req.Group == "" {
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", ErrInvalidGroupID)
	}
	if c.closed.Load() {
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", err)
	}
	e := c.lockGroup(req.Group, req.MemberID == "")
	if e == nil {
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", ErrUnknownMemberID)
	}
	if c.closed.Load() {
		c.unlock(e)
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", ErrCoordinatorClosed)
	}
	if e.shareActive() {
		c.unlock(e)
		return JoinResponse{MemberID: req.MemberID}, wrap(req.Group, "join", ErrInconsistentProtocol)
	}
	if e.consumerActive() {
		// A classic member in a consumer group (mixed.go).
		now := c.opts.Now()
		resp, err := e.cg.joinClassic(req, now, c.cfg.newID)
		c.settleConsumer(e, now)
		c.unlock(e)
		return resp, wrap(req.Group, "join", err)
	}
	e.cg = nil // an empty consumer group becomes a classic one
	out := e.g.join(c.opts.Now(), req)
	var ch chan reply
	if out.waiter != 0 {
		ch = c.wait(e, out.waiter)
	}
	c.deliver(e)
	c.unlock(e)
	if ch == nil {
		return out.resp, wrap(req.Group, "join", out.err)
	}
	r, err := c.await(ctx, e, out.waiter, ch, (*classicGroup).cancelJoin)
	if err != nil {
		return JoinResponse{MemberID: req.MemberID}, err
	}
	if r.err != nil && r.join.MemberID == "" {
		r.join.MemberID = req.MemberID
	}
	return r.join, wrap(req.Group, "join", r.err)
}

// Sync handles a SyncGroup request. The leader's carries the assignment of
// the generation; every member's returns its own. A follower that syncs
// before the leader waits for it. If ctx ends first the sync is withdrawn
// (the member must sync again within the rebalance timeout or be removed)
// and ctx's error returned.
func (c *Coordinator) Sync(ctx context.Context, req SyncRequest) (SyncResponse, error) {
	if req.Group == "" {
		return SyncResponse{}, wrap(req.Group, "sync", ErrInvalidGroupID)
	}
	if c.closed.Load() {
		return SyncResponse{}, wrap(req.Group, "sync", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return SyncResponse{}, wrap(req.Group, "sync", err)
	}
	e := c.lockGroup(req.Group, false)
	if e == nil {
		return SyncResponse{}, wrap(req.Group, "sync", ErrUnknownMemberID)
	}
	if c.closed.Load() {
		c.unlock(e)
		return SyncResponse{}, wrap(req.Group, "sync", ErrCoordinatorClosed)
	}
	if e.consumerActive() {
		resp, err := e.cg.syncClassic(req, c.opts.Now())
		c.unlock(e)
		return resp, wrap(req.Group, "sync", err)
	}
	out := e.g.sync(c.opts.Now(), req)
	var ch chan reply
	if out.waiter != 0 {
		ch = c.wait(e, out.waiter)
	}
	c.deliver(e)
	c.unlock(e)
	if ch == nil {
		return out.resp, wrap(req.Group, "sync", out.err)
	}
	r, err := c.await(ctx, e, out.waiter, ch, (*classicGroup).cancelSync)
	if err != nil {
		return SyncResponse{}, err
	}
	return r.sync, wrap(req.Group, "sync", r.err)
}

// Heartbeat handles a Heartbeat request: it keeps the member's session
// alive. ErrRebalanceInProgress tells the member to rejoin.
func (c *Coordinator) Heartbeat(req HeartbeatRequest) error {
	if req.Group == "" {
		return wrap(req.Group, "heartbeat", ErrInvalidGroupID)
	}
	if c.closed.Load() {
		return wrap(req.Group, "heartbeat", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return wrap(req.Group, "heartbeat", err)
	}
	e := c.lockGroup(req.Group, false)
	if e == nil {
		return wrap(req.Group, "heartbeat", ErrUnknownMemberID)
	}
	defer c.unlock(e)
	if e.consumerActive() {
		return wrap(req.Group, "heartbeat", e.cg.heartbeatClassic(req, c.opts.Now()))
	}
	err := e.g.heartbeat(c.opts.Now(), req)
	c.deliver(e)
	return wrap(req.Group, "heartbeat", err)
}

// Leave handles a LeaveGroup request: each named member leaves the group,
// which rebalances without it. It returns one error (or nil) per member of
// req.Members, and an error for the request as a whole.
func (c *Coordinator) Leave(req LeaveRequest) ([]error, error) {
	if req.Group == "" {
		return nil, wrap(req.Group, "leave", ErrInvalidGroupID)
	}
	if c.closed.Load() {
		return nil, wrap(req.Group, "leave", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return nil, wrap(req.Group, "leave", err)
	}
	errs := make([]error, len(req.Members))
	e := c.lockGroup(req.Group, false)
	if e == nil {
		for i := range errs {
			errs[i] = wrap(req.Group, "leave", ErrUnknownMemberID)
		}
		return errs, nil
	}
	defer c.unlock(e)
	if e.consumerActive() {
		for i, err := range e.cg.leaveClassic(req.Members) {
			errs[i] = wrap(req.Group, "leave", err)
		}
		c.settleConsumer(e, c.opts.Now())
		return errs, nil
	}
	for i, err := range e.g.leave(c.opts.Now(), req.Members) {
		errs[i] = wrap(req.Group, "leave", err)
	}
	c.deliver(e)
	return errs, nil
}

// Describe describes a group (DescribeGroups). ErrGroupIDNotFound if there
// is no such group, or it is a KIP-848 consumer group or a share group with
// members (ConsumerDescribe, ShareDescribe), as Kafka answers.
func (c *Coordinator) Describe(group string) (Description, error) {
	if err := c.owns(group); err != nil {
		return Description{Group: group, State: Dead}, wrap(group, "describe", err)
	}
	e := c.lockGroup(group, false)
	if e == nil {
		return Description{Group: group, State: Dead}, wrap(group, "describe", ErrGroupIDNotFound)
	}
	defer c.unlock(e)
	if e.consumerActive() || e.shareActive() {
		// As Kafka answers DescribeGroups for a group of the KIP-848 or
		// KIP-932 protocols (ConsumerDescribe and ShareDescribe describe
		// them).
		return Description{Group: group, State: Dead}, wrap(group, "describe", fmt.Errorf("%w: not a classic group", ErrGroupIDNotFound))
	}
	return e.g.describe(), nil
}

// List lists the groups (ListGroups), sorted by group id.
func (c *Coordinator) List() []Listing {
	var out []Listing
	for _, e := range c.entries() {
		e.mu.Lock()
		switch {
		case e.dead:
		case e.consumerActive():
			out = append(out, Listing{Group: e.g.id, ProtocolType: ConsumerProtocolType, State: e.cg.state(), Type: "consumer"})
		case e.shareActive():
			out = append(out, Listing{Group: e.g.id, ProtocolType: "share", State: Stable, Type: "share"})
		case e.sh != nil:
			out = append(out, Listing{Group: e.g.id, ProtocolType: "share", State: Empty, Type: "share"})
		default:
			out = append(out, Listing{Group: e.g.id, ProtocolType: e.g.protocolType, State: e.g.state, Type: "classic"})
		}
		e.mu.Unlock()
	}
	return out
}

// Delete deletes groups and their committed offsets (DeleteGroups). Only
// groups without members can be deleted: the others get ErrNonEmptyGroup,
// unknown ones ErrGroupIDNotFound. The result has an entry, nil on success,
// for every group named.
func (c *Coordinator) Delete(groups ...string) map[string]error {
	out := make(map[string]error, len(groups))
	for _, id := range groups {
		out[id] = c.delete(id)
	}
	return out
}

func (c *Coordinator) delete(id string) error {
	if c.closed.Load() {
		return wrap(id, "delete", ErrCoordinatorClosed)
	}
	if err := c.owns(id); err != nil {
		return wrap(id, "delete", err)
	}
	e := c.lockGroup(id, false)
	if e == nil {
		return wrap(id, "delete", ErrGroupIDNotFound)
	}
	if e.g.state != Empty || e.consumerActive() || e.shareActive() {
		c.unlock(e)
		return wrap(id, "delete", ErrNonEmptyGroup)
	}
	if err := c.store(e, e.g.deletions(e.g.allOffsets())); err != nil {
		c.unlock(e)
		return wrap(id, "delete", err)
	}
	c.kill(e)
	return nil
}

// Tick applies every timeout due by now, in every group: members whose
// session expired are removed, rebalances whose timeout passed complete
// without their stragglers, members that never came for their assignment
// are removed. The timer goroutine calls it; with Options.ManualTick only
// the caller does, which makes timing deterministic in tests.
func (c *Coordinator) Tick(now time.Time) {
	for _, e := range c.entries() {
		var gone []string
		e.mu.Lock()
		if !e.dead {
			e.g.tick(now)
			c.deliver(e)
			if e.cg != nil {
				e.cg.tick(now)
				c.settleConsumer(e, now)
			}
			gone = c.tickShare(e, now)
		}
		c.unlock(e)
		for _, m := range gone {
			if c.opts.ShareMemberGone != nil {
				c.opts.ShareMemberGone(e.g.id, m)
			}
		}
	}
}

// store hands records to the Store, if any, then applies them.
func (c *Coordinator) store(e *entry, records []StoredOffset) error {
	if len(records) == 0 {
		return nil
	}
	if c.opts.Store != nil {
		if err := c.opts.Store.StoreOffsets(e.g.id, records); err != nil {
			return fmt.Errorf("storing offsets: %w", err)
		}
	}
	e.g.applyOffsets(records)
	return nil
}

// CommitOffsets handles an OffsetCommit request. The error is for the
// request as a whole: the group refused the committer (ErrUnknownMemberID,
// ErrIllegalGeneration, ErrFencedInstanceID, ErrRebalanceInProgress while
// the group awaits its assignment), or the Store failed, and nothing was
// committed. Otherwise the map holds, per partition, nil or why that offset
// was refused (ErrOffsetMetadataTooLarge).
//
// A commit with Generation -1 and no member id comes from outside the group
// protocol; it is allowed while the group is Empty, and creates the group if
// there is none. Offsets are in the Store before CommitOffsets returns.
// Commits to one group are stored one at a time.
func (c *Coordinator) CommitOffsets(req CommitRequest) (map[TopicPartition]error, error) {
	if c.closed.Load() {
		return nil, wrap(req.Group, "commit offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return nil, wrap(req.Group, "commit offsets", err)
	}
	e := c.lockGroup(req.Group, req.Generation < 0)
	if e == nil {
		// A member of a generation of a group that no longer exists.
		return nil, wrap(req.Group, "commit offsets", ErrIllegalGeneration)
	}
	defer c.unlock(e)
	now := c.opts.Now()
	if err := e.validateCommit(now, req.MemberID, req.Generation, req.Offsets, func() error { return e.g.validateCommit(now, req) }); err != nil {
		return nil, wrap(req.Group, "commit offsets", err)
	}
	records, results := e.g.checkCommitOffsets(now, req.Offsets)
	if err := c.store(e, records); err != nil {
		return nil, wrap(req.Group, "commit offsets", err)
	}
	return results, nil
}

// FetchOffsets returns a group's committed offsets for tps, or all of them
// if tps is nil (OffsetFetch). Partitions without a committed offset are
// absent from the map (Kafka answers -1 for them). An unknown group has none.
func (c *Coordinator) FetchOffsets(group string, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	if c.closed.Load() {
		return nil, wrap(group, "fetch offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(group); err != nil {
		return nil, wrap(group, "fetch offsets", err)
	}
	out := make(map[TopicPartition]OffsetAndMetadata)
	e := c.lockGroup(group, false)
	if e == nil {
		return out, nil
	}
	defer c.unlock(e)
	if tps == nil {
		maps.Copy(out, e.g.offsets)
		return out, nil
	}
	for _, tp := range tps {
		if o, ok := e.g.offsets[tp]; ok {
			out[tp] = o
		}
	}
	return out, nil
}

// DeleteOffsets deletes a group's committed offsets for tps (OffsetDelete).
// A group with members keeps the offsets of topics it consumes: those
// partitions get ErrGroupSubscribedToTopic (or, for a group that is not a
// consumer group, the whole request ErrNonEmptyGroup). An unknown group is
// ErrGroupIDNotFound.
func (c *Coordinator) DeleteOffsets(group string, tps []TopicPartition) (map[TopicPartition]error, error) {
	if c.closed.Load() {
		return nil, wrap(group, "delete offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(group); err != nil {
		return nil, wrap(group, "delete offsets", err)
	}
	e := c.lockGroup(group, false)
	if e == nil {
		return nil, wrap(group, "delete offsets", ErrGroupIDNotFound)
	}
	defer c.unlock(e)
	g := e.g
	if g.state != Empty && g.protocolType != ConsumerProtocolType {
		return nil, wrap(group, "delete offsets", ErrNonEmptyGroup)
	}
	results := make(map[TopicPartition]error, len(tps))
	var eligible []TopicPartition
	for _, tp := range tps {
		if g.state != Empty && g.subscribedTo(tp.Topic) || e.consumerActive() && e.cg.subscribedTo(tp.Topic) {
			results[tp] = wrap(group, "delete offsets", ErrGroupSubscribedToTopic)
			continue
		}
		results[tp] = nil
		eligible = append(eligible, tp)
	}
	if err := c.store(e, g.deletions(eligible)); err != nil {
		return nil, wrap(group, "delete offsets", err)
	}
	return results, nil
}

// ResetOffsets sets a group's committed offsets, as an administrator does
// (kafka-consumer-groups --reset-offsets): only while the group has no
// members (else ErrNonEmptyGroup). It creates the group if there is none.
func (c *Coordinator) ResetOffsets(group string, offsets map[TopicPartition]int64) error {
	if c.closed.Load() {
		return wrap(group, "reset offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(group); err != nil {
		return wrap(group, "reset offsets", err)
	}
	e := c.lockGroup(group, true)
	defer c.unlock(e)
	if e.g.state != Empty || e.consumerActive() {
		return wrap(group, "reset offsets", ErrNonEmptyGroup)
	}
	now := c.opts.Now()
	records := make([]StoredOffset, 0, len(offsets))
	for _, tp := range slices.SortedFunc(maps.Keys(offsets), compareTP) {
		records = append(records, StoredOffset{TopicPartition: tp, OffsetAndMetadata: OffsetAndMetadata{
			Offset: offsets[tp], LeaderEpoch: -1, CommitTime: now,
		}})
	}
	return wrap(group, "reset offsets", c.store(e, records))
}

// LoadOffsets restores a group's committed offsets from the Store at
// startup, creating the group (Empty) if needed. It does not write to the
// Store.
func (c *Coordinator) LoadOffsets(group string, offsets map[TopicPartition]OffsetAndMetadata) {
	e := c.lockGroup(group, true)
	maps.Copy(e.g.offsets, offsets)
	c.unlock(e)
}

// owns asks Options.Owns whether this coordinator coordinates a group now.
func (c *Coordinator) owns(group string) error {
	if c.opts.Owns == nil || group == "" {
		return nil
	}
	return c.opts.Owns(group)
}

// Unload drops from memory every group owns reports true of - not from the
// Store - failing the requests waiting on them with ErrNotCoordinator: what
// a broker does when another takes over coordinating those groups (their
// offsets partition's leadership moved), so that members find the new
// coordinator, which loads the groups from the Store. It waits for the
// requests being served to those groups only (owns is asked without any
// group's lock held).
func (c *Coordinator) Unload(owns func(group string) bool) int {
	n := 0
	for _, e := range c.entries() {
		// A group's id never changes: ask before locking, so that a
		// request holding another group (a commit waiting for its store)
		// does not hold up the unloading of these.
		if !owns(e.g.id) {
			continue
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		for w, ch := range e.waiters {
			ch <- reply{waiter: w, err: ErrNotCoordinator}
			delete(e.waiters, w)
		}
		e.dead = true
		e.mu.Unlock()
		c.forget(e)
		n++
	}
	return n
}

// ExpireOffsets drops committed offsets older than retention
// (offsets.retention.minutes), from memory and from the Store: all of a
// group's once it has been Empty for retention, and those committed
// retention ago for groups that never had members or for topics a Stable
// consumer group no longer consumes. Groups left Empty with no offsets are
// removed, as Kafka does. It returns the groups that lost offsets, sorted.
// The timer goroutine calls it every OffsetsRetentionCheckInterval.
func (c *Coordinator) ExpireOffsets(now time.Time, retention time.Duration) []string {
	var affected []string
	for _, e := range c.entries() {
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		g := e.g
		if e.consumerActive() || e.sh != nil {
			// Kafka keeps a consumer group's offsets while it has
			// members (a share group keeps no offsets here).
			e.mu.Unlock()
			continue
		}
		if expired := g.expiredOffsets(now, retention); len(expired) > 0 {
			if err := c.store(e, g.deletions(expired)); err != nil {
				c.opts.Logger.Warn("group: expiring offsets", "group", g.id, "err", err)
			} else {
				affected = append(affected, g.id)
			}
		}
		if g.state == Empty && len(g.offsets) == 0 && len(g.pending) == 0 && len(g.txn.pending) == 0 {
			c.kill(e)
			continue
		}
		e.mu.Unlock()
	}
	return affected
}
