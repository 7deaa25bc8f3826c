package group

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Classic members in a KIP-848 consumer group (Kafka's online upgrade and
// downgrade, group.consumer.migration.policy=bidirectional).
//
// A rolling upgrade replaces a classic group's members one by one with
// members of the consumer protocol; a rollback does the reverse. So a
// consumer group may hold members of both protocols. The coordinator
// assigns every member with its server assignor, and serves a classic
// member through the classic requests:
//
//   - JoinGroup is its heartbeat with a subscription and (cooperative
//     members, KIP-429) the partitions it owns: it is answered at once,
//     with its member epoch as the generation, and no member is leader -
//     the coordinator assigns;
//   - SyncGroup returns its current assignment (revoke-first: partitions
//     another member still holds are withheld until released);
//   - Heartbeat answers REBALANCE_IN_PROGRESS whenever the member has
//     something to revoke or a new assignment to fetch, so that it rejoins;
//   - its session timeout is the one it joined with; commits check the
//     generation (ILLEGAL_GENERATION).
//
// A ConsumerGroupHeartbeat that finds a classic group with members
// converts it when they all use the consumer protocol type: each member
// keeps its id, generation (as its epoch) and assignment, and joins and
// syncs in flight are answered REBALANCE_IN_PROGRESS. A group that is left
// with only classic members stays a consumer group that serves them (Kafka
// would convert it back; the members cannot tell the difference) until it
// empties.

// classicMember is what a consumer group keeps of a classic member.
type classicMember struct {
	protocols        []Protocol
	session          time.Duration
	rebalanceTimeout time.Duration
}

// convertClassic turns the entry's classic group, which has members, into
// a consumer group, if they all use the consumer protocol type; it reports
// whether it did.
func (c *Coordinator) convertClassic(e *entry, now time.Time) bool {
	g := e.g
	if g.protocolType != ConsumerProtocolType || c.opts.MaxGroupSize > 0 && len(g.members) > c.opts.MaxGroupSize {
		return false
	}
	cg := c.newConsumerGroup(g.id)
	cg.epoch, cg.targetEpoch = max(g.generation, 0), max(g.generation, 0)
	for _, m := range g.order {
		var sub Subscription
		var err error
		if len(m.protocols) > 0 {
			sub, err = DecodeSubscription(m.metadata(cmp.Or(g.protocol, m.protocols[0].Name)))
		}
		if err != nil || len(m.protocols) == 0 {
			return false
		}
		cm := &consumerMember{id: m.id, epoch: cg.epoch, prevEpoch: cg.epoch, instanceID: m.instanceID,
			assigned: map[tp]bool{}, revoking: map[tp]bool{}, rebalanceTimeout: m.rebalance,
			names: slices.Clone(sub.Topics), clientID: m.clientID, host: m.clientHost,
			sessionDeadline: now.Add(m.session), sent: true,
			classic: &classicMember{protocols: slices.Clone(m.protocols), session: m.session, rebalanceTimeout: m.rebalance}}
		if g.state == Stable && m.assignment != nil {
			if a, err := DecodeAssignment(m.assignment); err == nil {
				for t, ps := range a.Partitions {
					for _, p := range ps {
						cm.assigned[tp{t, p}] = true
					}
				}
			}
		}
		cm.subscribed = cg.resolve(cm)
		cg.members[cm.id] = cm
		cg.target[cm.id] = maps.Clone(cm.assigned)
	}
	cg.countsChanged()
	// Joins and syncs in flight rejoin into the consumer group.
	for w, ch := range e.waiters {
		ch <- reply{waiter: w, err: ErrRebalanceInProgress}
		delete(e.waiters, w)
	}
	ng := newClassicGroup(g.id, g.cfg, now)
	ng.offsets, ng.txn, ng.protocolType = g.offsets, g.txn, ConsumerProtocolType
	e.g, e.cg = ng, cg
	cg.hadMembers = true
	return true
}

// joinClassic serves a classic member's JoinGroup in a consumer group.
func (g *consumerGroup) joinClassic(req JoinRequest, now time.Time, newID func(string) string) (JoinResponse, error) {
	resp := JoinResponse{MemberID: req.MemberID}
	if req.ProtocolType != ConsumerProtocolType || len(req.Protocols) == 0 {
		return resp, ErrInconsistentProtocol
	}
	sub, err := DecodeSubscription(req.Protocols[0].Metadata)
	if err != nil {
		return resp, ErrInconsistentProtocol
	}
	if req.MemberID == "" {
		if req.GroupInstanceID == "" && req.RequireKnownMemberID {
			resp.MemberID = newID(req.ClientID)
			return resp, ErrMemberIDRequired
		}
		req.MemberID = newID(cmp.Or(req.GroupInstanceID, req.ClientID))
		resp.MemberID = req.MemberID
	}
	m := g.members[req.MemberID]
	if m != nil && m.classic == nil {
		return resp, ErrUnknownMemberID // a consumer-protocol member's id
	}
	hb := consumerHeartbeat{MemberID: req.MemberID, Subscribed: sub.Topics, Owns: true, Owned: map[string][]int32{},
		InstanceID: req.GroupInstanceID, RebalanceTimeout: req.RebalanceTimeout, ClientID: req.ClientID, ClientHost: req.ClientHost}
	if m == nil {
		hb.MemberEpoch = epochJoin
	} else {
		hb.MemberEpoch = m.epoch
		for _, p := range sub.OwnedPartitions {
			hb.Owned[p.Topic] = append(hb.Owned[p.Topic], p.Partition)
		}
	}
	if _, err := g.heartbeat(hb, now); err != nil {
		return resp, err
	}
	m = g.members[req.MemberID]
	m.classic = &classicMember{protocols: slices.Clone(req.Protocols), session: req.SessionTimeout,
		rebalanceTimeout: cmp.Or(req.RebalanceTimeout, req.SessionTimeout)}
	m.sessionDeadline = now.Add(req.SessionTimeout)
	m.sent = false // told at SyncGroup
	resp.Generation, resp.Protocol, resp.ProtocolType = m.epoch, req.Protocols[0].Name, ConsumerProtocolType
	return resp, nil
}

// syncClassic serves a classic member's SyncGroup: its assignment.
func (g *consumerGroup) syncClassic(req SyncRequest, now time.Time) (SyncResponse, error) {
	m := g.members[req.MemberID]
	switch {
	case m == nil || m.classic == nil:
		return SyncResponse{}, ErrUnknownMemberID
	case req.Generation != m.epoch:
		return SyncResponse{}, ErrIllegalGeneration
	}
	m.sent = true
	m.sessionDeadline = now.Add(m.classic.session)
	return SyncResponse{Assignment: EncodeAssignment(Assignment{Version: AssignmentVersion, Partitions: byTopic(m.assigned)})}, nil
}

// heartbeatClassic serves a classic member's Heartbeat: it reconciles the
// member and asks it to rejoin when it has something to revoke or a new
// assignment.
func (g *consumerGroup) heartbeatClassic(req HeartbeatRequest, now time.Time) error {
	m := g.members[req.MemberID]
	switch {
	case m == nil || m.classic == nil:
		return ErrUnknownMemberID
	case req.Generation != m.epoch:
		return ErrIllegalGeneration
	}
	m.sessionDeadline = now.Add(m.classic.session)
	if g.targetEpoch < g.epoch {
		g.computeTarget()
	}
	g.reconcile(m, now)
	if !m.sent || len(m.revoking) > 0 || m.epoch != req.Generation {
		return ErrRebalanceInProgress
	}
	return nil
}

// leaveClassic removes classic members from a consumer group.
func (g *consumerGroup) leaveClassic(members []LeaveMember) []error {
	errs := make([]error, len(members))
	for i, lm := range members {
		var m *consumerMember
		for _, o := range g.members {
			if o.classic != nil && (lm.MemberID != "" && o.id == lm.MemberID || lm.MemberID == "" && lm.GroupInstanceID != "" && o.instanceID == lm.GroupInstanceID) {
				m = o
			}
		}
		if m == nil {
			errs[i] = ErrUnknownMemberID
			continue
		}
		g.remove(m)
	}
	return errs
}
