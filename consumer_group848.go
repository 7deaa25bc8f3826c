package spool

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/group"
)

// GroupProtocol is the group membership protocol a Consumer speaks
// (Kafka's group.protocol).
type GroupProtocol string

// Group protocols.
const (
	// GroupProtocolClassic is Kafka's JoinGroup/SyncGroup protocol: the
	// members rejoin at each rebalance and one of them assigns partitions
	// (ConsumerConfig.Assignors). The default.
	GroupProtocolClassic GroupProtocol = "classic"
	// GroupProtocolConsumer is KIP-848's protocol (Kafka 4's default): the
	// coordinator assigns partitions (ConsumerConfig.ServerAssignor) and
	// each member moves on its own heartbeats, giving partitions up before
	// another member gets them; no member stops for another's join.
	GroupProtocolConsumer GroupProtocol = "consumer"
)

// member848 is a Consumer's membership of a KIP-848 consumer group. A
// background goroutine heartbeats with what the consumer owns and keeps
// the latest assignment the coordinator sent; Poll reconciles to it on the
// caller's goroutine - revoking first (committing with AutoCommit, calling
// OnRevoked), telling the coordinator at once, then assigning what it was
// given (OnAssigned) - so the callbacks run between polls, as the classic
// protocol's do.
type member848 struct {
	mu       sync.Mutex
	id       string
	epoch    int32
	target   []TopicPartition // the latest assignment sent; nil before any
	fenced   error            // set by the heartbeat: rejoin from scratch
	interval time.Duration
	kick     chan struct{} // heartbeat now
}

func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ensureActive848 joins the group if needed and reconciles the consumer
// to its latest assignment. Called by Poll, without c.mu.
func (c *Consumer) ensureActive848(ctx context.Context) error {
	g := c.grp
	m := g.m848
	m.mu.Lock()
	fenced := m.fenced
	m.mu.Unlock()
	if fenced != nil || !g.joined {
		c.stopHeartbeat()
		if fenced != nil {
			// Our partitions may already be another member's: give them
			// up without committing.
			c.drop(c.ownedPartitions())
		}
		if err := c.join848(); err != nil {
			return err
		}
		g.joined = true
		c.startHeartbeat848()
	}
	g.wakeMu.Lock()
	g.rejoin.Store(false)
	select {
	case <-g.wake:
		g.wake = make(chan struct{})
	default:
	}
	g.wakeMu.Unlock()

	m.mu.Lock()
	target := slices.Clone(m.target)
	m.mu.Unlock()
	if target == nil {
		return nil
	}
	owned := c.ownedPartitions()
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
		if err := c.revoke(ctx, revoked); err != nil {
			return err
		}
		m.heartbeatNow() // tell the coordinator, so that others may move
	}
	return c.assign(ctx, added)
}

// join848 joins with epoch 0 (a fenced member keeps its id, as KIP-848
// asks; one the coordinator does not know takes a new one).
func (c *Consumer) join848() error {
	g, m := c.grp, c.grp.m848
	m.mu.Lock()
	if m.id == "" || errors.Is(m.fenced, group.ErrUnknownMemberID) {
		m.id = newMemberID()
	}
	m.fenced, m.target, m.epoch = nil, nil, 0
	id := m.id
	m.mu.Unlock()
	resp, err := g.coord.ConsumerHeartbeat(group.ConsumerHeartbeatRequest{
		Group: c.cfg.Group, MemberID: id, InstanceID: g.instance, RebalanceTimeout: c.cfg.RebalanceTimeout,
		SubscribedTopics: g.topics, ServerAssignor: c.cfg.ServerAssignor, Owned: map[string][]int32{},
		ClientID: "spool", ClientHost: hostname(),
	})
	if err != nil {
		return c.b.wrapClosed(fmt.Errorf("spool: join group %q: %w", c.cfg.Group, err))
	}
	m.apply(resp)
	return nil
}

// apply takes a heartbeat's answer.
func (m *member848) apply(resp group.ConsumerHeartbeatResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch = resp.MemberEpoch
	if resp.HeartbeatInterval > 0 {
		m.interval = resp.HeartbeatInterval
	}
	if resp.Assignment != nil {
		m.target = []TopicPartition{}
		for _, topic := range slices.Sorted(maps.Keys(resp.Assignment)) {
			for _, p := range resp.Assignment[topic] {
				m.target = append(m.target, TopicPartition{Topic: topic, Partition: p})
			}
		}
	}
}

func (m *member848) heartbeatNow() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// startHeartbeat848 heartbeats every interval the coordinator asks for
// (and when Poll kicks it) with what the consumer owns; a new assignment
// or a fencing wakes Poll.
func (c *Consumer) startHeartbeat848() {
	g, m := c.grp, c.grp.m848
	g.hbStop, g.hbDone = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		for {
			m.mu.Lock()
			interval := m.interval
			m.mu.Unlock()
			t := time.NewTimer(interval)
			select {
			case <-stop:
				t.Stop()
				return
			case <-m.kick:
			case <-t.C:
			}
			t.Stop()
			m.mu.Lock()
			id, epoch := m.id, m.epoch
			m.mu.Unlock()
			owned := map[string][]int32{}
			for _, tp := range c.ownedPartitions() {
				owned[tp.Topic] = append(owned[tp.Topic], tp.Partition)
			}
			resp, err := g.coord.ConsumerHeartbeat(group.ConsumerHeartbeatRequest{
				Group: c.cfg.Group, MemberID: id, MemberEpoch: epoch, InstanceID: g.instance, Owned: owned,
			})
			if err != nil {
				if errors.Is(err, group.ErrCoordinatorClosed) {
					return
				}
				m.mu.Lock()
				m.fenced = err
				m.mu.Unlock()
				g.raise()
				return
			}
			m.mu.Lock()
			changed := resp.Assignment != nil
			m.mu.Unlock()
			m.apply(resp)
			if changed {
				g.raise()
			}
		}
	}(g.hbStop, g.hbDone)
}

// drop forgets partitions without committing: the member lost them.
func (c *Consumer) drop(tps []TopicPartition) {
	if len(tps) == 0 {
		return
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

// leave848 gives the partitions up (committing with AutoCommit) and leaves
// - for a while, with epoch -2, for a static member.
func (c *Consumer) leave848() {
	g, m := c.grp, c.grp.m848
	c.stopHeartbeat()
	if !g.joined {
		return
	}
	_ = c.revoke(context.Background(), c.ownedPartitions())
	m.mu.Lock()
	id := m.id
	m.mu.Unlock()
	epoch := int32(-1)
	if g.instance != "" {
		epoch = -2
	}
	_, _ = g.coord.ConsumerHeartbeat(group.ConsumerHeartbeatRequest{Group: c.cfg.Group, MemberID: id, MemberEpoch: epoch, InstanceID: g.instance})
}
