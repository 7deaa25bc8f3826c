package group

import (
	"bytes"
	"slices"
	"time"
)

// This file is the rebalance of one group: JoinGroup, the delayed join
// that completes it, and SyncGroup, which hands out the leader's assignment.

// joinOutcome is what a JoinGroup gets at once: a response or an error, or a
// waiter token whose reply comes later (possibly already queued).
type joinOutcome struct {
	resp   JoinResponse
	err    error
	waiter uint64
}

func joinFailed(memberID string, err error) joinOutcome {
	return joinOutcome{resp: JoinResponse{MemberID: memberID}, err: err}
}

// join handles a JoinGroup (Kafka's handleJoinGroup). The caller has
// checked the group id.
func (g *classicGroup) join(now time.Time, req JoinRequest) joinOutcome {
	if req.SessionTimeout < g.cfg.minSession || req.SessionTimeout > g.cfg.maxSession {
		return joinFailed(req.MemberID, ErrInvalidSessionTimeout)
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout
	}
	if g.state == Dead {
		return joinFailed(req.MemberID, ErrUnknownMemberID)
	}
	var out joinOutcome
	switch {
	case !g.acceptJoining(req.MemberID):
		g.remove(req.MemberID)
		out = joinFailed("", ErrGroupMaxSizeReached)
	case req.MemberID == "":
		out = g.joinNew(now, req)
	default:
		out = g.joinCurrent(now, req)
	}
	if g.state == PreparingRebalance {
		g.maybeCompleteJoin(now)
	}
	return out
}

// acceptJoining is Kafka's acceptJoiningMember: may this member join
// without the group passing MaxGroupSize?
func (g *classicGroup) acceptJoining(memberID string) bool {
	if g.cfg.maxSize <= 0 {
		return true
	}
	m := g.members[memberID]
	switch g.state {
	case PreparingRebalance:
		if m != nil && m.joinWaiter != 0 {
			return true
		}
		joined := 0
		for _, o := range g.order {
			if o.joinWaiter != 0 {
				joined++
			}
		}
		return joined < g.cfg.maxSize
	case CompletingRebalance, Stable:
		return m != nil || len(g.members) < g.cfg.maxSize
	}
	return true
}

func (g *classicGroup) joinNew(now time.Time, req JoinRequest) joinOutcome {
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return joinFailed("", ErrInconsistentProtocol)
	}
	prefix := req.ClientID
	if req.GroupInstanceID != "" {
		prefix = req.GroupInstanceID
	}
	id := g.cfg.newID(prefix)
	switch {
	case req.GroupInstanceID != "":
		if old, ok := g.static[req.GroupInstanceID]; ok {
			return g.replaceStatic(now, old, id, req)
		}
		return g.addAndRebalance(now, id, req, true)
	case req.RequireKnownMemberID:
		g.pending[id] = now.Add(req.SessionTimeout)
		return joinFailed(id, ErrMemberIDRequired)
	default:
		return g.addAndRebalance(now, id, req, true)
	}
}

func (g *classicGroup) joinCurrent(now time.Time, req JoinRequest) joinOutcome {
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return joinFailed(req.MemberID, ErrInconsistentProtocol)
	}
	if _, ok := g.pending[req.MemberID]; ok {
		if req.GroupInstanceID != "" {
			// Pending ids are only ever given to dynamic members.
			return joinFailed(req.MemberID, ErrUnknownMemberID)
		}
		return g.addAndRebalance(now, req.MemberID, req, false)
	}
	if err := g.validateMember(req.MemberID, req.GroupInstanceID); err != nil {
		return joinFailed(req.MemberID, err)
	}
	m := g.members[req.MemberID]
	switch g.state {
	case PreparingRebalance:
		return g.updateAndRebalance(now, m, req)
	case CompletingRebalance:
		if m.matches(req.Protocols) {
			// The member lost our response: send it again.
			return joinOutcome{resp: g.joinResponse(m)}
		}
		return g.updateAndRebalance(now, m, req)
	case Stable:
		if g.leader == m.id || !m.matches(req.Protocols) {
			// A leader's JoinGroup asks for a rebalance: that is how it
			// reacts to changes the members' metadata does not show (new
			// partitions, say).
			return g.updateAndRebalance(now, m, req)
		}
		resp := g.joinResponse(m)
		resp.Members = nil
		return joinOutcome{resp: resp}
	}
	return joinFailed(req.MemberID, ErrUnknownMemberID)
}

// joinResponse is the successful JoinGroup response for m in the current
// generation.
func (g *classicGroup) joinResponse(m *member) JoinResponse {
	resp := JoinResponse{
		Generation:   g.generation,
		ProtocolType: g.protocolType,
		Protocol:     g.protocol,
		LeaderID:     g.leader,
		MemberID:     m.id,
	}
	if m.id == g.leader {
		resp.Members = make([]MemberMetadata, 0, len(g.order))
		for _, o := range g.order {
			resp.Members = append(resp.Members, MemberMetadata{
				MemberID:        o.id,
				GroupInstanceID: o.instanceID,
				Metadata:        bytes.Clone(o.metadata(g.protocol)),
			})
		}
	}
	return resp
}

func copyProtocols(ps []Protocol) []Protocol {
	out := make([]Protocol, len(ps))
	for i, p := range ps {
		out[i] = Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)}
	}
	return out
}

// park makes m wait in the rebalance; a JoinGroup it had waiting already is
// superseded.
func (g *classicGroup) park(m *member) uint64 {
	g.replyJoin(m, JoinResponse{MemberID: m.id}, ErrRebalanceInProgress)
	m.joinWaiter = g.newWaiter()
	return m.joinWaiter
}

func (g *classicGroup) updateMember(m *member, req JoinRequest) {
	m.protocols = copyProtocols(req.Protocols)
	m.session = req.SessionTimeout
	m.rebalance = req.RebalanceTimeout
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
}

func (g *classicGroup) addAndRebalance(now time.Time, id string, req JoinRequest, idUnsent bool) joinOutcome {
	m := &member{
		id:           id,
		instanceID:   req.GroupInstanceID,
		protocolType: req.ProtocolType,
		isNew:        true,
		idUnsent:     idUnsent,
		expires:      now.Add(g.cfg.newMemberJoinTimeout),
	}
	g.updateMember(m, req)
	if g.state == PreparingRebalance && g.generation == 0 {
		g.newMemberAdded = true
	}
	g.add(m)
	w := g.park(m)
	g.maybePrepareRebalance(now)
	return joinOutcome{waiter: w}
}

func (g *classicGroup) updateAndRebalance(now time.Time, m *member, req JoinRequest) joinOutcome {
	g.updateMember(m, req)
	w := g.park(m)
	g.maybePrepareRebalance(now)
	return joinOutcome{waiter: w}
}

// replaceStatic handles a known group instance id joining with no member id:
// the instance restarted (KIP-345). The new member id takes over the old
// one's place, assignment included; the old id is fenced.
func (g *classicGroup) replaceStatic(now time.Time, oldID, newID string, req JoinRequest) joinOutcome {
	oldLeader := g.leader
	m := g.members[oldID]
	g.replyJoin(m, JoinResponse{MemberID: oldID}, ErrFencedInstanceID)
	g.replySync(m, SyncResponse{}, ErrFencedInstanceID)
	delete(g.members, oldID)
	m.id = newID
	g.members[newID] = m
	g.static[m.instanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if g.pendingSync[oldID] {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = true
	}
	g.updateMember(m, req)
	m.expires = now.Add(m.session)
	w := g.park(m)

	switch g.state {
	case Stable:
		if g.selectProtocol() == g.protocol {
			// Nothing the assignment depends on changed: no rebalance. The
			// old leader id is returned so that, if this instance was the
			// leader, it does not run an assignment the Stable group would
			// ignore; it syncs and gets its old assignment back.
			resp := g.joinResponse(m)
			resp.Members = nil
			resp.LeaderID = oldLeader
			m.joinWaiter = 0
			return joinOutcome{resp: resp}
		}
		g.prepareRebalance(now)
	case CompletingRebalance:
		// The leader may already be assigning with the old id: start over.
		g.prepareRebalance(now)
	}
	return joinOutcome{waiter: w}
}

func (g *classicGroup) maybePrepareRebalance(now time.Time) {
	if slices.Contains(validPrevious[PreparingRebalance], g.state) {
		g.prepareRebalance(now)
	}
}

func (g *classicGroup) prepareRebalance(now time.Time) {
	if g.state == CompletingRebalance {
		g.resetAndPropagate(ErrRebalanceInProgress, now)
	}
	clear(g.pendingSync)
	g.syncDeadline = time.Time{}
	if g.state == Empty && g.cfg.initialDelay > 0 {
		g.delay = delayInitial
		g.rebalanceDeadline = now.Add(g.cfg.initialDelay)
		g.delayRemaining = max(g.rebalanceTimeout()-g.cfg.initialDelay, 0)
		g.newMemberAdded = false
	} else {
		g.delay = delayRegular
		g.rebalanceDeadline = now.Add(g.rebalanceTimeout())
	}
	g.transition(PreparingRebalance, now)
	g.maybeCompleteJoin(now)
}

// maybeCompleteJoin completes the rebalance once every member has joined,
// unless the initial delay is holding it open.
func (g *classicGroup) maybeCompleteJoin(now time.Time) {
	if g.state == PreparingRebalance && g.delay == delayRegular && g.allJoined() {
		g.completeJoin(now)
	}
}

// onRebalanceDeadline is the expiry of the delayed join.
func (g *classicGroup) onRebalanceDeadline(now time.Time) {
	if g.delay == delayInitial && g.newMemberAdded && g.delayRemaining > 0 {
		g.newMemberAdded = false
		d := min(g.cfg.initialDelay, g.delayRemaining)
		g.delayRemaining -= d
		g.rebalanceDeadline = now.Add(d)
		return
	}
	g.completeJoin(now)
}

// completeJoin ends PreparingRebalance (Kafka's onCompleteJoin): dynamic
// members that did not rejoin are dropped, the generation is bumped and
// every waiting member learns it; the leader also learns the members.
func (g *classicGroup) completeJoin(now time.Time) {
	for _, m := range slices.Clone(g.order) {
		if m.joinWaiter == 0 && m.instanceID == "" {
			g.remove(m.id)
		}
	}
	if len(g.members) > 0 && !g.electJoinedLeader() {
		// Only static members remain and none has rejoined: wait another
		// rebalance timeout (their sessions may expire meanwhile).
		g.delay = delayRegular
		g.rebalanceDeadline = now.Add(g.rebalanceTimeout())
		return
	}
	g.delay = delayRegular
	g.generation++
	clear(g.pendingSync)
	g.syncDeadline = time.Time{}
	if len(g.members) == 0 {
		g.protocol = ""
		g.computeSubscribed()
		g.transition(Empty, now)
		return
	}
	g.protocol = g.selectProtocol()
	g.computeSubscribed()
	g.transition(CompletingRebalance, now)
	for _, m := range g.order {
		g.replyJoin(m, g.joinResponse(m), nil)
		m.expires = now.Add(m.session)
		m.isNew = false
		m.idUnsent = false
		g.pendingSync[m.id] = true
	}
	g.syncDeadline = now.Add(g.rebalanceTimeout())
}

// electJoinedLeader keeps the leader if it rejoined, else makes the first
// member that did the leader; false if none did.
func (g *classicGroup) electJoinedLeader() bool {
	if l := g.members[g.leader]; l != nil && l.joinWaiter != 0 {
		return true
	}
	for _, m := range g.order {
		if m.joinWaiter != 0 {
			g.leader = m.id
			return true
		}
	}
	return false
}

// resetAndPropagate fails the parked SyncGroups of a generation whose
// assignment will not come.
func (g *classicGroup) resetAndPropagate(err error, now time.Time) {
	for _, m := range g.order {
		m.assignment = nil
		if g.replySync(m, SyncResponse{}, err) {
			m.expires = now.Add(m.session)
		}
	}
}

// syncOutcome is what a SyncGroup gets at once, as joinOutcome.
type syncOutcome struct {
	resp   SyncResponse
	err    error
	waiter uint64
}

// sync handles a SyncGroup (Kafka's handleSyncGroup).
func (g *classicGroup) sync(now time.Time, req SyncRequest) syncOutcome {
	if g.state == Dead {
		return syncOutcome{err: ErrUnknownMemberID}
	}
	if err := g.validateMember(req.MemberID, req.GroupInstanceID); err != nil {
		return syncOutcome{err: err}
	}
	if req.Generation != g.generation {
		return syncOutcome{err: ErrIllegalGeneration}
	}
	if (req.ProtocolType != "" && req.ProtocolType != g.protocolType) ||
		(req.Protocol != "" && req.Protocol != g.protocol) {
		return syncOutcome{err: ErrInconsistentProtocol}
	}
	m := g.members[req.MemberID]
	switch g.state {
	case Empty:
		return syncOutcome{err: ErrUnknownMemberID}
	case PreparingRebalance:
		return syncOutcome{err: ErrRebalanceInProgress}
	case CompletingRebalance:
		g.replySync(m, SyncResponse{}, ErrRebalanceInProgress) // superseded
		m.syncWaiter = g.newWaiter()
		w := m.syncWaiter
		g.syncReceived(m.id)
		if m.id == g.leader {
			for _, o := range g.order {
				o.assignment = bytes.Clone(req.Assignments[o.id])
				if o.assignment == nil {
					o.assignment = []byte{}
				}
			}
			g.transition(Stable, now)
			resp := SyncResponse{ProtocolType: g.protocolType, Protocol: g.protocol}
			for _, o := range g.order {
				resp.Assignment = bytes.Clone(o.assignment)
				if g.replySync(o, resp, nil) {
					o.expires = now.Add(o.session)
				}
			}
		}
		return syncOutcome{waiter: w}
	case Stable:
		g.syncReceived(m.id)
		m.expires = now.Add(m.session)
		return syncOutcome{resp: SyncResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: bytes.Clone(m.assignment)}}
	}
	return syncOutcome{err: ErrUnknownMemberID}
}

func (g *classicGroup) syncReceived(id string) {
	delete(g.pendingSync, id)
	if len(g.pendingSync) == 0 {
		g.syncDeadline = time.Time{}
	}
}
