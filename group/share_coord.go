package group

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// This file is the Coordinator's side of KIP-932 share groups: their
// membership. A share group's members do not own partitions: every member
// is given every partition of the topics it subscribes to, and the
// partition's leader hands each record to one member at a time (package
// share). So there is no revocation: a member's epoch just moves with the
// group's, and an assignment is re-sent when it changes.

// ShareHeartbeatRequest is a ShareGroupHeartbeat request. Nil fields mean
// "unchanged since my last heartbeat".
type ShareHeartbeatRequest struct {
	Group    string
	MemberID string
	// MemberEpoch is 0 to join, -1 to leave, else the member's epoch.
	MemberEpoch          int32
	RackID               string
	SubscribedTopicNames []string
	ClientID, ClientHost string
}

// ShareHeartbeatResponse answers a ShareHeartbeatRequest.
type ShareHeartbeatResponse struct {
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	// Assignment, when not nil, is the member's whole assignment by topic
	// name.
	Assignment map[string][]int32
}

// ShareDescription describes a share group (ShareGroupDescribe).
type ShareDescription struct {
	Group string
	// State is Empty or Stable.
	State   State
	Epoch   int32
	Members []ShareMemberDescription // sorted by member id
}

// ShareMemberDescription describes a share group member.
type ShareMemberDescription struct {
	MemberID, RackID, ClientID, ClientHost string
	MemberEpoch                            int32
	SubscribedTopics                       []string
	Assignment                             map[string][]int32
}

type shareGroup struct {
	epoch   int32
	members map[string]*shareMember
}

type shareMember struct {
	id, rack, client, host string
	epoch                  int32
	subscribed             []string
	sent                   map[string][]int32 // the last assignment sent
	deadline               time.Time
}

func (e *entry) shareActive() bool { return e.sh != nil && len(e.sh.members) > 0 }

// ShareHeartbeat handles a ShareGroupHeartbeat (KIP-932): it joins, keeps
// alive or removes a member of a share group and answers at once. Errors:
// ErrInvalidGroupID, ErrGroupIDNotFound (the group is a classic or
// consumer group with members), ErrUnknownMemberID, ErrFencedMemberEpoch,
// ErrInvalidHeartbeat (a join without a subscription),
// ErrGroupMaxSizeReached, ErrNotCoordinator, ErrCoordinatorClosed. A
// member that leaves or times out is reported to Options.ShareMemberGone,
// so that the records it holds are released.
func (c *Coordinator) ShareHeartbeat(req ShareHeartbeatRequest) (ShareHeartbeatResponse, error) {
	const op = "share heartbeat"
	resp := ShareHeartbeatResponse{MemberID: req.MemberID, MemberEpoch: req.MemberEpoch}
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
		req.MemberID = c.cfg.newID(req.ClientID)
		resp.MemberID = req.MemberID
	}
	e := c.lockGroup(req.Group, req.MemberEpoch == epochJoin)
	if e == nil {
		return resp, wrap(req.Group, op, ErrUnknownMemberID)
	}
	var gone string
	defer func() {
		c.unlock(e)
		if gone != "" && c.opts.ShareMemberGone != nil {
			c.opts.ShareMemberGone(req.Group, gone)
		}
	}()
	if e.g.state != Empty || e.consumerActive() {
		return resp, wrap(req.Group, op, ErrGroupIDNotFound)
	}
	if e.sh == nil {
		e.sh = &shareGroup{members: map[string]*shareMember{}}
	}
	g := e.sh
	now := c.opts.Now()
	m := g.members[req.MemberID]
	switch {
	case req.MemberEpoch == epochLeave:
		if m == nil {
			return resp, wrap(req.Group, op, ErrUnknownMemberID)
		}
		delete(g.members, m.id)
		g.epoch++
		gone = m.id
		c.settleShare(e, now)
		return resp, nil
	case req.MemberEpoch == epochJoin:
		if req.SubscribedTopicNames == nil {
			return resp, wrap(req.Group, op, ErrInvalidHeartbeat)
		}
		if m == nil {
			if c.opts.MaxGroupSize > 0 && len(g.members) >= c.opts.MaxGroupSize {
				return resp, wrap(req.Group, op, ErrGroupMaxSizeReached)
			}
			m = &shareMember{id: req.MemberID}
			g.members[m.id] = m
		}
		m.sent = nil // a rejoin is told its assignment again
		g.epoch++
	case m == nil:
		return resp, wrap(req.Group, op, ErrUnknownMemberID)
	case req.MemberEpoch != m.epoch:
		return resp, wrap(req.Group, op, ErrFencedMemberEpoch)
	}
	m.deadline = now.Add(c.opts.ConsumerSessionTimeout)
	m.rack, m.client, m.host = cmp.Or(req.RackID, m.rack), cmp.Or(req.ClientID, m.client), cmp.Or(req.ClientHost, m.host)
	if req.SubscribedTopicNames != nil {
		subs := slices.Clone(req.SubscribedTopicNames)
		slices.Sort(subs)
		subs = slices.Compact(subs)
		if !slices.Equal(subs, m.subscribed) {
			m.subscribed = subs
			g.epoch++
		}
	}
	c.settleShare(e, now)
	resp.MemberEpoch, resp.HeartbeatInterval = m.epoch, c.opts.ConsumerHeartbeatInterval
	// Every partition of the subscribed topics, as they are now.
	a := map[string][]int32{}
	for _, t := range m.subscribed {
		n := int32(-1)
		if c.opts.PartitionCount != nil {
			n = c.opts.PartitionCount(t)
		}
		for p := range max(n, 0) {
			a[t] = append(a[t], p)
		}
	}
	if m.sent == nil || !maps.EqualFunc(a, m.sent, slices.Equal) {
		m.sent, m.epoch = a, g.epoch
		resp.MemberEpoch, resp.Assignment = m.epoch, a
	}
	return resp, nil
}

// settleShare keeps the classic side in step with a share group: its
// protocol type while it has members, its empty time once it has none.
func (c *Coordinator) settleShare(e *entry, now time.Time) {
	if e.shareActive() {
		e.g.protocolType = "share"
		return
	}
	if e.g.protocolType == "share" {
		e.g.since = now
	}
}

// tickShare removes members whose session expired; it returns their ids.
func (c *Coordinator) tickShare(e *entry, now time.Time) []string {
	if e.sh == nil {
		return nil
	}
	var gone []string
	for id, m := range e.sh.members {
		if now.After(m.deadline) {
			delete(e.sh.members, id)
			e.sh.epoch++
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		c.settleShare(e, now)
	}
	return gone
}

// ShareDescribe describes a share group (ShareGroupDescribe).
// ErrGroupIDNotFound if there is no such group or it is not a share group.
func (c *Coordinator) ShareDescribe(group string) (ShareDescription, error) {
	const op = "describe share group"
	if err := c.owns(group); err != nil {
		return ShareDescription{Group: group, State: Dead}, wrap(group, op, err)
	}
	e := c.lockGroup(group, false)
	if e == nil {
		return ShareDescription{Group: group, State: Dead}, wrap(group, op, ErrGroupIDNotFound)
	}
	defer c.unlock(e)
	if e.sh == nil || e.g.state != Empty || e.consumerActive() {
		return ShareDescription{Group: group, State: Dead}, wrap(group, op, ErrGroupIDNotFound)
	}
	d := ShareDescription{Group: group, State: Empty, Epoch: e.sh.epoch}
	if len(e.sh.members) > 0 {
		d.State = Stable
	}
	for _, id := range slices.Sorted(maps.Keys(e.sh.members)) {
		m := e.sh.members[id]
		d.Members = append(d.Members, ShareMemberDescription{MemberID: m.id, RackID: m.rack, ClientID: m.client,
			ClientHost: m.host, MemberEpoch: m.epoch, SubscribedTopics: slices.Clone(m.subscribed), Assignment: maps.Clone(m.sent)})
	}
	return d, nil
}

// IsShareGroup reports whether group is a share group with members.
func (c *Coordinator) IsShareGroup(group string) bool {
	e := c.lockGroup(group, false)
	if e == nil {
		return false
	}
	defer c.unlock(e)
	return e.shareActive()
}
