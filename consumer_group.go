package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/group"
)

// Group consumer defaults (Kafka's).
const (
	DefaultSessionTimeout     = group.DefaultMemberSessionTimeout
	DefaultRebalanceTimeout   = group.DefaultMemberRebalanceTimeout
	DefaultHeartbeatInterval  = group.DefaultMemberHeartbeatInterval
	DefaultAutoCommitInterval = 5 * time.Second
)

// GroupProtocol is the group membership protocol a Consumer speaks
// (Kafka's group.protocol).
type GroupProtocol string

// Group protocols.
const (
	// GroupProtocolClassic is Kafka's JoinGroup/SyncGroup protocol: the
	// members rejoin at each rebalance and one of them assigns partitions
	// (ConsumerConfig.Assignors). The default.
	GroupProtocolClassic GroupProtocol = group.ProtocolClassic
	// GroupProtocolConsumer is KIP-848's protocol (Kafka 4's default): the
	// coordinator assigns partitions (ConsumerConfig.ServerAssignor) and
	// each member moves on its own heartbeats, giving partitions up before
	// another member gets them; no member stops for another's join.
	GroupProtocolConsumer GroupProtocol = group.ProtocolConsumer
)

// ErrGroupMode means a call that assigns partitions by hand on a consumer
// that belongs to a group (the group assigns them).
var ErrGroupMode = errors.New("spool: consumer is in a group; partitions are assigned by the group")

// groupMember is a Consumer's membership of its group: a
// group.ConsumerGroup on the broker's coordinator, whose callbacks revoke
// and assign the consumer's partitions. Poll drives it, so the callbacks
// run on the caller's goroutine, between polls.
type groupMember struct {
	m          *group.ConsumerGroup
	coord      *group.Coordinator
	lastCommit time.Time
	// assignErr is what the last assignment could not do (fetch the
	// committed offsets): Poll returns it.
	assignErr error
}

// newGroupMember validates the group settings of cfg and makes the
// member; its callbacks act on c.
func newGroupMember(b *Broker, c *Consumer) (*groupMember, error) {
	cfg := &c.cfg
	if cfg.AutoCommitInterval == 0 {
		cfg.AutoCommitInterval = DefaultAutoCommitInterval
	}
	for _, t := range cfg.Topics {
		if err := ValidTopicName(t); err != nil {
			return nil, err
		}
	}
	if cfg.GroupProtocol == "" {
		cfg.GroupProtocol = GroupProtocolClassic
	}
	g := &groupMember{coord: b.coord, lastCommit: time.Now()}
	m, err := group.NewConsumerGroup(group.Local(b.coord), group.ConsumerGroupConfig{
		Group: cfg.Group, Topics: cfg.Topics, Protocol: string(cfg.GroupProtocol), InstanceID: cfg.GroupInstanceID,
		SessionTimeout: cfg.SessionTimeout, RebalanceTimeout: cfg.RebalanceTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		Assignors: cfg.Assignors, ServerAssignor: cfg.ServerAssignor, ClientID: "spool", ClientHost: hostname(),
		PartitionCount: b.partitionCount,
		OnRevoked:      c.revoke,
		OnAssigned: func(ctx context.Context, tps []TopicPartition) {
			if err := c.assign(ctx, tps); err != nil {
				g.assignErr = err
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: ConsumerConfig (group %q): %w", ErrInvalidConfig, cfg.Group, err)
	}
	g.m = m
	return g, nil
}

// ensureActive makes sure the consumer is a member of its group and holds
// what the group gives it (joining, revoking and assigning as needed).
// Called by Poll, without c.mu.
func (c *Consumer) ensureActive(ctx context.Context) error {
	if err := c.grp.m.Poll(ctx); err != nil {
		return c.b.wrapClosed(fmt.Errorf("spool: %w", err))
	}
	if err := c.grp.assignErr; err != nil {
		c.grp.assignErr = nil
		return err
	}
	return nil
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
func (c *Consumer) revoke(ctx context.Context, tps []TopicPartition) {
	if _, gen := c.grp.m.Identity(); c.cfg.AutoCommit.on(true) && gen >= 0 {
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
}

// assign takes partitions on: each resumes at the group's committed
// offset, or where AutoOffsetReset says; then OnAssigned is told. At
// ReadCommitted it first waits until no transaction is about to commit
// offsets for them (Kafka's OffsetFetch with require_stable): resuming
// from an offset a transaction in flight is moving would process its
// records twice.
func (c *Consumer) assign(ctx context.Context, tps []TopicPartition) error {
	if c.cfg.IsolationLevel == ReadCommitted {
		if err := c.awaitStableOffsets(ctx, tps); err != nil {
			return err
		}
	}
	committed, err := c.grp.m.FetchOffsets(ctx, tps)
	if err != nil {
		return fmt.Errorf("spool: fetch committed offsets of group %q: %w", c.cfg.Group, err)
	}
	c.mu.Lock()
	for _, tp := range tps {
		if tp.Partition >= c.b.partitionCount(tp.Topic) {
			continue // deleted since the leader assigned it
		}
		a := &assignment{tp: tp, end: -1}
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
// Producer.SendOffsetsToTransaction; the zero value without a group. Its
// Generation is the member epoch under GroupProtocolConsumer.
func (c *Consumer) GroupMetadata() GroupMetadata {
	if c.grp == nil {
		return GroupMetadata{}
	}
	id, gen := c.grp.m.Identity()
	return GroupMetadata{GroupID: c.cfg.Group, MemberID: id, InstanceID: c.cfg.GroupInstanceID, Generation: gen}
}

// Commit commits the current position of every assigned partition for the
// consumer's group: the offset after the last record Poll returned. Commit
// after processing for at-least-once delivery (a crash before the commit
// re-delivers), before processing for at-most-once (a crash after it loses
// what was not processed). It fails with an error wrapping
// group.ErrRebalanceInProgress, group.ErrIllegalGeneration or
// group.ErrStaleMemberEpoch when the group has moved on; the next Poll
// catches up.
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
	out := make(map[TopicPartition]group.OffsetAndMetadata, len(offsets))
	for tp, off := range offsets {
		out[tp] = group.OffsetAndMetadata{Offset: off, LeaderEpoch: -1}
	}
	return c.sendCommit(ctx, out)
}

// commitPositions commits the positions of the named partitions.
func (c *Consumer) commitPositions(ctx context.Context, tps []TopicPartition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	offsets := map[TopicPartition]group.OffsetAndMetadata{}
	c.mu.Lock()
	for _, tp := range tps {
		if a := c.byTP[tp]; a != nil && a.valid {
			epoch := int32(-1)
			if part, err := c.partOf(ctx, a); err == nil {
				epoch = part.LeaderEpoch()
			}
			offsets[tp] = group.OffsetAndMetadata{Offset: a.pos, LeaderEpoch: epoch}
		}
	}
	c.mu.Unlock()
	return c.sendCommit(ctx, offsets)
}

func (c *Consumer) sendCommit(ctx context.Context, offsets map[TopicPartition]group.OffsetAndMetadata) error {
	if len(offsets) == 0 {
		return nil
	}
	if err := c.grp.m.Commit(ctx, offsets); err != nil {
		return c.b.wrapClosed(fmt.Errorf("spool: commit for group %q: %w", c.cfg.Group, err))
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
	_ = c.grp.m.Close(context.Background())
}

// stopHeartbeat stops the member's heartbeat without leaving (Close on a
// closed broker; tests that play a crash).
func (c *Consumer) stopHeartbeat() { c.grp.m.Abandon() }

var hostnameOnce = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

func hostname() string { return hostnameOnce() }
