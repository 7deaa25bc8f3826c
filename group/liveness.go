package group

import (
	"slices"
	"time"
)

// This file is how members stay in a group and leave it: heartbeats,
// LeaveGroup, requests withdrawn by their callers, and the timeouts Tick
// applies.

// heartbeat handles a Heartbeat (Kafka's handleHeartbeat).
func (g *classicGroup) heartbeat(now time.Time, req HeartbeatRequest) error {
	if g.state == Dead {
		return ErrUnknownMemberID
	}
	if err := g.validateMember(req.MemberID, req.GroupInstanceID); err != nil {
		return err
	}
	if req.Generation != g.generation {
		return ErrIllegalGeneration
	}
	m := g.members[req.MemberID]
	switch g.state {
	case CompletingRebalance, Stable:
		m.expires = now.Add(m.session)
		return nil
	case PreparingRebalance:
		m.expires = now.Add(m.session)
		return ErrRebalanceInProgress
	}
	return ErrUnknownMemberID
}

// leave handles a LeaveGroup; it returns one error (or nil) per member.
func (g *classicGroup) leave(now time.Time, members []LeaveMember) []error {
	errs := make([]error, len(members))
	for i, lm := range members {
		switch {
		case g.state == Dead:
			errs[i] = ErrUnknownMemberID
		case lm.MemberID == "":
			id, ok := g.static[lm.GroupInstanceID]
			if !ok || lm.GroupInstanceID == "" {
				errs[i] = ErrUnknownMemberID
				continue
			}
			g.removeAndUpdate(now, g.members[id])
		default:
			if _, ok := g.pending[lm.MemberID]; ok {
				delete(g.pending, lm.MemberID)
				g.maybeCompleteJoin(now)
				continue
			}
			if err := g.validateMember(lm.MemberID, lm.GroupInstanceID); err != nil {
				errs[i] = err
				continue
			}
			g.removeAndUpdate(now, g.members[lm.MemberID])
		}
	}
	return errs
}

// removeAndUpdate removes a member and rebalances what is left (Kafka's
// removeMemberAndUpdateGroup).
func (g *classicGroup) removeAndUpdate(now time.Time, m *member) {
	g.replyJoin(m, JoinResponse{}, ErrUnknownMemberID)
	g.replySync(m, SyncResponse{}, ErrUnknownMemberID)
	g.remove(m.id)
	switch g.state {
	case Stable, CompletingRebalance:
		g.maybePrepareRebalance(now)
	case PreparingRebalance:
		g.maybeCompleteJoin(now)
	}
}

// cancelJoin withdraws a parked JoinGroup whose caller gave up. A new member
// whose id its client never learnt is removed; any other member is simply no
// longer counted as joined, so the rebalance waits for it again (or drops
// it at the rebalance timeout).
func (g *classicGroup) cancelJoin(now time.Time, waiter uint64) {
	for _, m := range g.order {
		if m.joinWaiter != waiter {
			continue
		}
		m.joinWaiter = 0
		if m.isNew && m.idUnsent {
			g.removeAndUpdate(now, m)
		} else {
			m.expires = now.Add(m.session)
		}
		return
	}
}

// cancelSync withdraws a parked SyncGroup: the member owes a SyncGroup again
// within the rebalance timeout.
func (g *classicGroup) cancelSync(now time.Time, waiter uint64) {
	for _, m := range g.order {
		if m.syncWaiter != waiter {
			continue
		}
		m.syncWaiter = 0
		m.expires = now.Add(m.session)
		if g.state == CompletingRebalance || g.state == Stable {
			g.pendingSync[m.id] = true
			if g.syncDeadline.IsZero() {
				g.syncDeadline = now.Add(g.rebalanceTimeout())
			}
		}
		return
	}
}

// tick applies every deadline that has passed by now: pending member ids,
// sessions, the rebalance timeout and the sync timeout.
func (g *classicGroup) tick(now time.Time) {
	if g.state == Dead {
		return
	}
	if len(g.pending) > 0 {
		ids := make([]string, 0, len(g.pending))
		for id, exp := range g.pending {
			if !now.Before(exp) {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			delete(g.pending, id)
		}
		if len(ids) > 0 {
			g.maybeCompleteJoin(now)
		}
	}
	for _, m := range slices.Clone(g.order) {
		if g.members[m.id] == m && m.expired(now) {
			g.removeAndUpdate(now, m)
		}
	}
	if g.state == PreparingRebalance && !now.Before(g.rebalanceDeadline) {
		g.onRebalanceDeadline(now)
	}
	if (g.state == CompletingRebalance || g.state == Stable) && len(g.pendingSync) > 0 &&
		!g.syncDeadline.IsZero() && !now.Before(g.syncDeadline) {
		// Members that joined but never came for their assignment.
		for _, m := range slices.Clone(g.order) {
			if g.pendingSync[m.id] {
				g.replyJoin(m, JoinResponse{}, ErrUnknownMemberID)
				g.remove(m.id)
			}
		}
		g.prepareRebalance(now)
	}
}
