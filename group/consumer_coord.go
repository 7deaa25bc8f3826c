package group

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// This file is the Coordinator's side of KIP-848 consumer groups: the
// requests that reach a consumerGroup, and how such a group lives beside
// the classic protocol's state in one entry.
//
// A group id names one group, of one type at a time. An entry's classic
// group always exists: it holds the committed offsets, which both
// protocols share. When a ConsumerGroupHeartbeat joins, the entry gains a
// consumerGroup - converting a classic group that has members (mixed.go) -
// and, while that has members, the group is a consumer group: classic
// members are served inside it and offsets are committed under member
// epochs. Once its last member is gone the group is an empty group again,
// which either protocol may take.

// Defaults of the consumer protocol's timing (group.consumer.*).
const (
	DefaultConsumerSessionTimeout    = 45 * time.Second
	DefaultConsumerHeartbeatInterval = 5 * time.Second
	// DefaultConsumerRebalanceTimeout is the rebalance timeout of a member
	// whose first heartbeat names none.
	DefaultConsumerRebalanceTimeout = 5 * time.Minute
)

// ConsumerHeartbeatRequest is a ConsumerGroupHeartbeat request (KIP-848).
// Nil fields mean "unchanged since my last heartbeat".
type ConsumerHeartbeatRequest struct {
	Group string
	// MemberID is chosen by the member (ConsumerGroupHeartbeat v1); ""
	// with MemberEpoch 0 asks the coordinator to choose one (v0).
	MemberID string
	// MemberEpoch is 0 to join, -1 to leave, -2 for a static member
	// leaving for a while, else the member's current epoch.
	MemberEpoch int32
	// InstanceID is a static member's group.instance.id.
	InstanceID string
	RackID     string
	// RebalanceTimeout bounds how long the member may take to give up
	// partitions; 0 keeps the last (DefaultConsumerRebalanceTimeout at
	// first).
	RebalanceTimeout time.Duration
	// SubscribedTopics are topic names; SubscribedRegex an RE2 regular
	// expression that must match a whole topic name. Either may be nil
	// (unchanged); a join needs at least one.
	SubscribedTopics []string
	SubscribedRegex  *string
	// ServerAssignor is "uniform", "range", or "" for the group's choice.
	ServerAssignor string
	// Owned are the partitions the member owns, by topic name: nil if not
	// sent, empty if it owns none (a join must send it empty).
	Owned map[string][]int32
	// ClientID and ClientHost are only described.
	ClientID, ClientHost string
}

// ConsumerHeartbeatResponse is the answer to a ConsumerHeartbeatRequest.
type ConsumerHeartbeatResponse struct {
	MemberID    string
	MemberEpoch int32
	// HeartbeatInterval is how often the member should heartbeat.
	HeartbeatInterval time.Duration
	// Assignment, when not nil, is the member's whole assignment by topic
	// name (it changed since the member was last told, or it joined).
	Assignment map[string][]int32
}

// ConsumerDescription describes a consumer group (ConsumerGroupDescribe).
type ConsumerDescription struct {
	Group string
	// State is Empty, Reconciling (a member has not reached the target
	// assignment) or Stable.
	State           State
	Epoch           int32 // the group epoch
	AssignmentEpoch int32 // the epoch of the target assignment
	Assignor        string
	Members         []ConsumerMemberDescription // sorted by member id
}

// ConsumerMemberDescription describes a consumer group member.
type ConsumerMemberDescription struct {
	MemberID, InstanceID, RackID, ClientID, ClientHost string
	MemberEpoch                                        int32
	// Classic is a member that speaks the classic protocol (an upgrade
	// under way).
	Classic          bool
	SubscribedTopics []string // as sent
	SubscribedRegex  string
	// Assignment is what the member owns now; Target what it is moving
	// to. By topic name.
	Assignment, Target map[string][]int32
}

// consumerActive reports whether the entry is a consumer group with
// members.
func (e *entry) consumerActive() bool { return e.cg != nil && len(e.cg.members) > 0 }

// ConsumerHeartbeat handles a ConsumerGroupHeartbeat (KIP-848): it joins,
// keeps alive, reconciles or removes a member and answers at once. Its
// errors: ErrInvalidGroupID, ErrGroupIDNotFound (the group has classic
// members), ErrUnknownMemberID, ErrFencedMemberEpoch (the member must give
// up its partitions and rejoin at epoch 0 with the same id),
// ErrUnsupportedAssignor, ErrInvalidHeartbeat, ErrInvalidRegularExpression,
// ErrUnreleasedInstanceID, ErrGroupMaxSizeReached, ErrNotCoordinator and
// ErrCoordinatorClosed. A refused heartbeat changes nothing.
func (c *Coordinator) ConsumerHeartbeat(req ConsumerHeartbeatRequest) (ConsumerHeartbeatResponse, error) {
	const op = "consumer heartbeat"
	resp := ConsumerHeartbeatResponse{MemberID: req.MemberID, MemberEpoch: req.MemberEpoch}
	switch {
	case req.Group == "":
		return resp, wrap(req.Group, op, ErrInvalidGroupID)
	case c.closed.Load():
		return resp, wrap(req.Group, op, ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return resp, wrap(req.Group, op, err)
	}
	if req.MemberID == "" && req.MemberEpoch == epochJoin {
		req.MemberID = c.cfg.newID(cmp.Or(req.InstanceID, req.ClientID))
		resp.MemberID = req.MemberID
	}
	e := c.lockGroup(req.Group, req.MemberEpoch == epochJoin)
	if e == nil {
		// Not known here (a coordinator that just took the group over
		// keeps no membership): the member joins again.
		return resp, wrap(req.Group, op, ErrUnknownMemberID)
	}
	defer c.unlock(e)
	now := c.opts.Now()
	if e.shareActive() || e.g.state != Empty && !c.convertClassic(e, now) {
		// A share group, or a classic group whose members do not all
		// speak the consumer protocol type.
		return resp, wrap(req.Group, op, ErrGroupIDNotFound)
	}
	if e.cg == nil {
		e.cg = c.newConsumerGroup(req.Group)
	}
	out, err := e.cg.heartbeat(consumerHeartbeat{
		MemberID: req.MemberID, MemberEpoch: req.MemberEpoch, RebalanceTimeout: req.RebalanceTimeout,
		Subscribed: req.SubscribedTopics, Regex: req.SubscribedRegex, Assignor: req.ServerAssignor,
		Owned: req.Owned, Owns: req.Owned != nil, InstanceID: req.InstanceID,
		RackID: req.RackID, ClientID: req.ClientID, ClientHost: req.ClientHost,
	}, now)
	c.settleConsumer(e, now)
	if err != nil {
		return resp, wrap(req.Group, op, err)
	}
	resp.MemberEpoch, resp.Assignment = out.MemberEpoch, out.Assignment
	resp.HeartbeatInterval = e.cg.heartbeatInterval
	return resp, nil
}

func (c *Coordinator) newConsumerGroup(id string) *consumerGroup {
	o := c.opts
	g := newConsumerGroup(id, func(t string) int32 {
		if o.PartitionCount == nil {
			return -1
		}
		return o.PartitionCount(t)
	}, o.ConsumerSessionTimeout, o.ConsumerHeartbeatInterval, DefaultConsumerRebalanceTimeout)
	g.topicNames, g.maxSize = o.TopicNames, o.MaxGroupSize
	return g
}

// settleConsumer keeps the entry's classic side in step with its consumer
// group: a group with members has the consumer protocol type; one that
// just lost its last member starts its empty time (offset retention counts
// from it).
func (c *Coordinator) settleConsumer(e *entry, now time.Time) {
	if e.cg == nil {
		return
	}
	if len(e.cg.members) > 0 {
		e.g.protocolType = ConsumerProtocolType
		e.cg.hadMembers = true
		return
	}
	if e.cg.hadMembers {
		e.cg.hadMembers = false
		e.g.since = now
	}
}

// ConsumerDescribe describes a consumer group (ConsumerGroupDescribe).
// ErrGroupIDNotFound if there is no such group or it is not a consumer
// group.
func (c *Coordinator) ConsumerDescribe(group string) (ConsumerDescription, error) {
	const op = "describe consumer group"
	if err := c.owns(group); err != nil {
		return ConsumerDescription{Group: group, State: Dead}, wrap(group, op, err)
	}
	e := c.lockGroup(group, false)
	if e == nil {
		return ConsumerDescription{Group: group, State: Dead}, wrap(group, op, ErrGroupIDNotFound)
	}
	defer c.unlock(e)
	if e.cg == nil || e.g.state != Empty {
		return ConsumerDescription{Group: group, State: Dead}, wrap(group, op, ErrGroupIDNotFound)
	}
	return e.cg.describe(), nil
}

// describe is ConsumerGroupDescribe's view of the group.
func (g *consumerGroup) describe() ConsumerDescription {
	d := ConsumerDescription{Group: g.id, State: g.state(), Epoch: g.epoch, AssignmentEpoch: g.targetEpoch, Assignor: g.assignor()}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		d.Members = append(d.Members, ConsumerMemberDescription{
			MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.host,
			MemberEpoch: m.epoch, SubscribedTopics: slices.Clone(m.names), SubscribedRegex: m.regexSource(),
			Assignment: byTopic(m.assigned), Target: byTopic(g.target[m.id]), Classic: m.classic != nil,
		})
	}
	return d
}

// state is the group's state as Kafka names a consumer group's.
func (g *consumerGroup) state() State {
	if len(g.members) == 0 {
		return Empty
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch || m.state != memberStable {
			return Reconciling
		}
	}
	return Stable
}

// subscribedTo reports whether a member subscribes to topic.
func (g *consumerGroup) subscribedTo(topic string) bool {
	for _, m := range g.members {
		if slices.Contains(m.subscribed, topic) {
			return true
		}
	}
	return false
}

// validateCommit decides whether a member may commit offsets of tps at
// epoch (Kafka's ConsumerGroup.validateOffsetCommit). An epoch other than
// the member's is still accepted for partitions the member owns (assigned,
// or not yet revoked): a commit sent before the member learnt its new epoch
// is its owner's, as Kafka 4.3 allows (KIP-1251). Anything else is
// ErrStaleMemberEpoch; an unknown member ErrUnknownMemberID.
func (g *consumerGroup) validateCommit(memberID string, epoch int32, tps []TopicPartition) error {
	m := g.members[memberID]
	if m == nil {
		return ErrUnknownMemberID
	}
	if epoch == m.epoch {
		return nil
	}
	stale := ErrStaleMemberEpoch
	if m.classic != nil {
		stale = ErrIllegalGeneration // what a classic member understands
	}
	if epoch > m.epoch || epoch < 0 {
		return stale
	}
	for _, p := range tps {
		if !m.assigned[tp{p.Topic, p.Partition}] && !m.revoking[tp{p.Topic, p.Partition}] {
			return stale
		}
	}
	return nil
}

// validateCommit decides whether a commit (plain or transactional) may
// proceed: a consumer group with members checks the member and its epoch
// (generation carries the member epoch), anything else is the classic
// group's decision.
func (e *entry) validateCommit(now time.Time, memberID string, generation int32, offsets map[TopicPartition]OffsetAndMetadata, classic func() error) error {
	if !e.consumerActive() {
		return classic()
	}
	if memberID == "" && generation < 0 {
		// Only members commit to a group that has them.
		return ErrUnknownMemberID
	}
	return e.cg.validateCommit(memberID, generation, slices.Collect(maps.Keys(offsets)))
}
