package group

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"
)

// KIP-848, the "consumer" group protocol: the coordinator assigns. A
// member heartbeats (ConsumerGroupHeartbeat) with its subscription and the
// partitions it owns; the coordinator answers with its member epoch and,
// when it changed, the partitions it is to own. There is no join phase and
// no stop-the-world rebalance: each member moves on its own.
//
// Three epochs order the changes:
//
//	group epoch       bumped by every change of membership or subscription
//	target epoch      the group epoch the target assignment was computed at
//	member epoch      the target epoch a member has reconciled to
//
// A member behind the target reconciles in two steps, revoke before
// assign (Kafka's CurrentAssignmentBuilder):
//
//	STABLE --target moved--> UNREVOKED (keeps owned ∩ target; must give up
//	   ^                      the rest and say so in a heartbeat)
//	   |                         |
//	   |                         v  nothing left to revoke: epoch = target
//	   +------------------- UNRELEASED (target partitions another member
//	     all released         has not released yet are withheld)
//
// So a partition is never owned by two members: it is given only once no
// other member holds it, assigned or awaiting revocation. A member that
// does not revoke within its rebalance timeout, or stays silent for the
// session timeout, is removed and its partitions become free.
//
// consumerGroup is that state machine: fed heartbeats and ticks, each with
// its time, doing no I/O. Partitions are named by topic name; the wire
// layer maps topic ids.

// Errors of the consumer protocol.
var (
	// ErrFencedMemberEpoch (FENCED_MEMBER_EPOCH): the member's epoch is
	// not the coordinator's; it must give up its partitions and rejoin
	// with epoch 0 and the same member id.
	ErrFencedMemberEpoch = errors.New("group: fenced member epoch")
	// ErrUnsupportedAssignor (UNSUPPORTED_ASSIGNOR): the member asked for
	// a server assignor the coordinator does not have.
	ErrUnsupportedAssignor = errors.New("group: unsupported assignor")
	// ErrInvalidHeartbeat (INVALID_REQUEST): a heartbeat the protocol
	// does not allow, e.g. a join that claims partitions.
	ErrInvalidHeartbeat = errors.New("group: invalid consumer group heartbeat")
	// ErrUnreleasedInstanceID (UNRELEASED_INSTANCE_ID): a static member
	// joined with a group instance id another active member still holds;
	// it may take it over once that member has left with epoch -2.
	ErrUnreleasedInstanceID = errors.New("group: unreleased instance id")
	// ErrInvalidRegularExpression (INVALID_REGULAR_EXPRESSION): the
	// subscription's regular expression does not compile (RE2 syntax).
	ErrInvalidRegularExpression = errors.New("group: invalid regular expression")
	// ErrStaleMemberEpoch (STALE_MEMBER_EPOCH): an offset commit of a
	// consumer group member carries an epoch other than the member's, for
	// partitions it no longer owns.
	ErrStaleMemberEpoch = errors.New("group: stale member epoch")
)

// Member epochs a heartbeat may carry besides the member's epoch.
const (
	epochJoin        int32 = 0
	epochLeave       int32 = -1
	epochStaticLeave int32 = -2
)

// consumerHeartbeat is a ConsumerGroupHeartbeat request. Nil fields are
// "unchanged since my last heartbeat".
type consumerHeartbeat struct {
	MemberID    string
	MemberEpoch int32
	// RebalanceTimeout bounds how long the member may take to revoke;
	// zero: unchanged (or the default at join).
	RebalanceTimeout time.Duration
	// Subscribed are the topic names subscribed to.
	Subscribed []string
	// Assignor names the server assignor; "" for the default.
	Assignor string
	// Owned are the partitions the member owns now, by topic.
	Owned map[string][]int32
	// Owns reports whether Owned was sent (an empty map is "I own
	// nothing").
	Owns bool
	// InstanceID is a static member's group.instance.id; "" for a
	// dynamic member.
	InstanceID string
	// Regex, if not nil, is the subscription's regular expression (RE2,
	// matching whole topic names); "" clears it.
	Regex *string
	// RackID, ClientID and ClientHost are only described.
	RackID, ClientID, ClientHost string
}

// consumerHeartbeatResponse is the coordinator's answer.
type consumerHeartbeatResponse struct {
	MemberEpoch int32
	// Assignment is the member's whole assignment when it changed since
	// the last response (or at join), else nil.
	Assignment map[string][]int32
}

type memberState int8

const (
	memberStable memberState = iota
	memberUnrevoked
	memberUnreleased
)

// tp is a partition by topic name.
type tp struct {
	topic     string
	partition int32
}

type consumerMember struct {
	id               string
	epoch, prevEpoch int32
	state            memberState
	subscribed       []string // sorted
	assignor         string
	rebalanceTimeout time.Duration
	sessionDeadline  time.Time
	revokeDeadline   time.Time // while UNREVOKED

	// assigned is what the member has been told to own; revoking, what it
	// was told to give up and has not yet said it did.
	assigned, revoking map[tp]bool
	// sent is false when assigned changed since the last response.
	sent bool

	instanceID string
	// staticLeft: a static member that left with epoch -2, kept (with its
	// partitions) until its session times out or its instance id joins
	// again.
	staticLeft bool
	// names and regex are the subscription as sent; subscribed is their
	// resolution against the topics that exist.
	names    []string
	regex    *regexp.Regexp
	rackID   string
	clientID string
	host     string
	// classic, for a member that speaks the classic protocol (mixed.go).
	classic *classicMember
}

// regexSource is the subscription's regular expression as sent.
func (m *consumerMember) regexSource() string {
	if m.regex == nil {
		return ""
	}
	s := m.regex.String()
	return s[len("^(?:") : len(s)-len(")$")]
}

// consumerGroup is one KIP-848 group.
type consumerGroup struct {
	id          string
	epoch       int32
	targetEpoch int32
	target      map[string]map[tp]bool // member id -> target partitions
	members     map[string]*consumerMember
	// partitions says how many partitions a topic has (-1: no such
	// topic), read when the target is computed.
	partitions func(topic string) int32
	// counts is the partition count of each subscribed topic at the last
	// target: a change (a topic created, deleted or grown) bumps the epoch.
	counts map[string]int32
	// topicNames lists the topics that exist, for regex subscriptions;
	// nil: none.
	topicNames func() []string
	// maxSize caps the members (0: no cap).
	maxSize int
	// hadMembers: the Coordinator has seen the group with members since
	// it was last empty.
	hadMembers bool

	sessionTimeout, heartbeatInterval, defaultRebalanceTimeout time.Duration
}

func newConsumerGroup(id string, partitions func(string) int32, session, heartbeat, rebalance time.Duration) *consumerGroup {
	return &consumerGroup{id: id, target: map[string]map[tp]bool{}, members: map[string]*consumerMember{},
		partitions: partitions, counts: map[string]int32{},
		sessionTimeout: session, heartbeatInterval: heartbeat, defaultRebalanceTimeout: rebalance}
}

// Server assignors (group.consumer.assignors); the first is the default.
var serverAssignors = []string{"uniform", "range"}

// heartbeat applies a heartbeat at now.
func (g *consumerGroup) heartbeat(req consumerHeartbeat, now time.Time) (consumerHeartbeatResponse, error) {
	if req.MemberID == "" {
		return consumerHeartbeatResponse{}, ErrUnknownMemberID
	}
	if req.Assignor != "" && !slices.Contains(serverAssignors, req.Assignor) {
		return consumerHeartbeatResponse{}, ErrUnsupportedAssignor
	}
	m := g.members[req.MemberID]
	changed := false // one epoch bump per heartbeat, whatever changed
	switch {
	case req.MemberEpoch == epochStaticLeave && m != nil && m.instanceID != "":
		// A static member leaving for a while: it keeps its partitions
		// until its session times out, or its instance id comes back.
		m.staticLeft = true
		m.sessionDeadline = now.Add(g.sessionTimeout)
		return consumerHeartbeatResponse{MemberEpoch: req.MemberEpoch}, nil
	case req.MemberEpoch == epochLeave || req.MemberEpoch == epochStaticLeave:
		if m == nil {
			return consumerHeartbeatResponse{}, ErrUnknownMemberID
		}
		g.remove(m)
		return consumerHeartbeatResponse{MemberEpoch: req.MemberEpoch}, nil
	case req.MemberEpoch == epochJoin:
		if !req.Owns || len(req.Owned) > 0 || req.Subscribed == nil && req.Regex == nil {
			return consumerHeartbeatResponse{}, ErrInvalidHeartbeat
		}
		re, err := compileSubscription(req.Regex)
		if err != nil {
			return consumerHeartbeatResponse{}, err
		}
		var prior *consumerMember // the static member this one replaces
		if req.InstanceID != "" {
			for _, o := range g.members {
				if o.instanceID == req.InstanceID && o.id != req.MemberID {
					if !o.staticLeft {
						return consumerHeartbeatResponse{}, ErrUnreleasedInstanceID
					}
					prior = o
				}
			}
		}
		if m == nil && prior == nil && g.maxSize > 0 && len(g.members) >= g.maxSize {
			return consumerHeartbeatResponse{}, ErrGroupMaxSizeReached
		}
		if m != nil {
			// A fenced member rejoins with its id: it starts over.
			g.remove(m)
		}
		m = &consumerMember{id: req.MemberID, assigned: map[tp]bool{}, revoking: map[tp]bool{},
			rebalanceTimeout: cmp.Or(req.RebalanceTimeout, g.defaultRebalanceTimeout)}
		if prior != nil {
			// The static member is back under a new member id: it takes
			// over the partitions, epoch and target its instance had,
			// and the group does not rebalance.
			*m = *prior
			m.id, m.staticLeft, m.sent = req.MemberID, false, false
			delete(g.members, prior.id)
			g.target[m.id] = g.target[prior.id]
			delete(g.target, prior.id)
		} else {
			changed = true
		}
		if req.Regex != nil {
			m.regex = re
		}
		m.instanceID = req.InstanceID
		g.members[m.id] = m
	case m == nil:
		return consumerHeartbeatResponse{}, ErrUnknownMemberID
	case req.MemberEpoch > m.epoch:
		return consumerHeartbeatResponse{}, ErrFencedMemberEpoch
	case req.MemberEpoch < m.epoch:
		// A lost response: the member is one epoch behind and owns no
		// more than it was given since.
		if req.MemberEpoch != m.prevEpoch || !req.Owns || !subset(req.Owned, m.assigned, m.revoking) {
			return consumerHeartbeatResponse{}, ErrFencedMemberEpoch
		}
		m.sent = false
	}
	if req.MemberEpoch != epochJoin && req.Regex != nil {
		re, err := compileSubscription(req.Regex)
		if err != nil {
			return consumerHeartbeatResponse{}, err
		}
		if re.String() != m.regexString() {
			m.regex = re
		}
	}
	m.sessionDeadline = now.Add(g.sessionTimeout)
	if req.RebalanceTimeout > 0 {
		m.rebalanceTimeout = req.RebalanceTimeout
	}
	m.rackID, m.clientID, m.host = cmp.Or(req.RackID, m.rackID), cmp.Or(req.ClientID, m.clientID), cmp.Or(req.ClientHost, m.host)
	if req.Subscribed != nil {
		m.names = slices.Clone(req.Subscribed)
	}
	if subs := g.resolve(m); !slices.Equal(subs, m.subscribed) {
		m.subscribed = subs
		changed = true
	}
	if req.Assignor != "" && req.Assignor != m.assignor {
		m.assignor = req.Assignor
		changed = true
	}
	if g.countsChanged() {
		changed = true
	}
	if changed {
		g.epoch++
	}
	if g.targetEpoch < g.epoch {
		g.computeTarget()
	}
	var owned map[tp]bool
	if req.Owns {
		// What the member says it gave up is released.
		owned = map[tp]bool{}
		for t, ps := range req.Owned {
			for _, p := range ps {
				owned[tp{t, p}] = true
			}
		}
		for p := range m.revoking {
			if !owned[p] {
				delete(m.revoking, p)
			}
		}
	}
	g.reconcile(m, now)
	if owned != nil && !maps.Equal(owned, m.assigned) {
		// The member missed a response (or is mid-revocation): tell it
		// its assignment again.
		m.sent = false
	}
	// Others waiting for what this member released may move now; they
	// learn it at their next heartbeat.
	resp := consumerHeartbeatResponse{MemberEpoch: m.epoch}
	if !m.sent || req.MemberEpoch == epochJoin {
		resp.Assignment = byTopic(m.assigned)
		m.sent = true
	}
	return resp, nil
}

// compileSubscription compiles a subscription's regular expression to
// match whole topic names, as Kafka's RE2/J matches() does; nil and ""
// are no regular expression.
func compileSubscription(re *string) (*regexp.Regexp, error) {
	if re == nil || *re == "" {
		return nil, nil
	}
	c, err := regexp.Compile("^(?:" + *re + ")$")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRegularExpression, err)
	}
	return c, nil
}

func (m *consumerMember) regexString() string {
	if m.regex == nil {
		return ""
	}
	return m.regex.String()
}

// resolve is the member's subscription: the names it sent and the
// existing topics its regular expression matches, sorted, without
// duplicates.
func (g *consumerGroup) resolve(m *consumerMember) []string {
	subs := slices.Clone(m.names)
	if m.regex != nil && g.topicNames != nil {
		for _, t := range g.topicNames() {
			if m.regex.MatchString(t) {
				subs = append(subs, t)
			}
		}
	}
	slices.Sort(subs)
	return slices.Compact(subs)
}

// reconcile moves m toward its target: revoke first, then assign what no
// other member holds.
func (g *consumerGroup) reconcile(m *consumerMember, now time.Time) {
	target := g.target[m.id]
	if m.epoch < g.targetEpoch {
		var revoke []tp
		for p := range m.assigned {
			if !target[p] {
				revoke = append(revoke, p)
			}
		}
		if len(revoke) > 0 {
			for _, p := range revoke {
				delete(m.assigned, p)
				m.revoking[p] = true
			}
			m.sent = false
		}
		if len(m.revoking) > 0 {
			if m.state != memberUnrevoked {
				m.state, m.revokeDeadline = memberUnrevoked, now.Add(m.rebalanceTimeout)
			}
			return
		}
		m.prevEpoch, m.epoch = m.epoch, g.targetEpoch
		m.state = memberStable
	}
	if len(m.revoking) > 0 {
		// Revoking at the target epoch: a target recomputed at the same
		// epoch never takes partitions away, so this is what an earlier
		// step left; wait for it.
		return
	}
	held := g.heldByOthers(m.id)
	m.state = memberStable
	for p := range target {
		if m.assigned[p] {
			continue
		}
		if held[p] {
			m.state = memberUnreleased
			continue
		}
		m.assigned[p] = true
		m.sent = false
	}
}

// heldByOthers are the partitions members other than id hold, assigned or
// awaiting revocation.
func (g *consumerGroup) heldByOthers(id string) map[tp]bool {
	held := map[tp]bool{}
	for _, o := range g.members {
		if o.id == id {
			continue
		}
		for p := range o.assigned {
			held[p] = true
		}
		for p := range o.revoking {
			held[p] = true
		}
	}
	return held
}

// tick removes members whose session expired, or that did not revoke in
// time, at now; whether any was.
func (g *consumerGroup) tick(now time.Time) bool {
	removed := false
	for _, m := range g.members {
		if now.After(m.sessionDeadline) || m.state == memberUnrevoked && now.After(m.revokeDeadline) {
			g.remove(m)
			removed = true
		}
	}
	return removed
}

func (g *consumerGroup) remove(m *consumerMember) {
	delete(g.members, m.id)
	delete(g.target, m.id)
	g.epoch++
	// The target follows at once: the others learn their share of the
	// freed partitions at their next heartbeats.
	g.computeTarget()
}

// countsChanged reports whether a subscribed topic's partition count
// differs from the last target's, and records the new counts.
func (g *consumerGroup) countsChanged() bool {
	now := map[string]int32{}
	for _, m := range g.members {
		for _, t := range m.subscribed {
			if _, ok := now[t]; !ok {
				now[t] = g.partitions(t)
			}
		}
	}
	changed := !maps.Equal(now, g.counts)
	g.counts = now
	return changed
}

// assignor is the server assignor the group uses: the one most of its
// members ask for, the default ("uniform") on a tie or when none asks.
func (g *consumerGroup) assignor() string {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	best := serverAssignors[0]
	for _, a := range serverAssignors {
		if votes[a] > votes[best] {
			best = a
		}
	}
	return best
}

// computeTarget assigns the subscribed partitions to the members at the
// group epoch, with the group's assignor.
func (g *consumerGroup) computeTarget() {
	if g.assignor() == "range" {
		g.computeRange()
	} else {
		g.computeUniform()
	}
	g.targetEpoch = g.epoch
}

// computeRange is the "range" assignor: each topic's partitions in
// contiguous ranges over its subscribers sorted by member id, the first
// ones one more when they do not divide evenly - so members subscribed to
// co-partitioned topics get the same partition numbers of each.
func (g *consumerGroup) computeRange() {
	next := map[string]map[tp]bool{}
	topics := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		next[id] = map[tp]bool{}
		for _, t := range g.members[id].subscribed {
			topics[t] = append(topics[t], id)
		}
	}
	for t, ids := range topics {
		n := int(max(g.partitions(t), 0))
		p := 0
		for i, id := range ids {
			k := n / len(ids)
			if i < n%len(ids) {
				k++
			}
			for range k {
				next[id][tp{t, int32(p)}] = true
				p++
			}
		}
	}
	g.target = next
}

// computeUniform is the "uniform" assignor: balanced and sticky - a
// partition stays with its target owner while that member is subscribed
// and not above its share; the rest go to the least loaded eligible
// member, then the fullest give to the emptiest while that narrows the
// gap.
func (g *consumerGroup) computeUniform() {
	ids := slices.Sorted(maps.Keys(g.members))
	eligible := map[string][]string{} // topic -> member ids, sorted
	for _, id := range ids {
		for _, t := range g.members[id].subscribed {
			eligible[t] = append(eligible[t], id)
		}
	}
	var all []tp
	for _, t := range slices.Sorted(maps.Keys(eligible)) {
		for p := range max(g.partitions(t), 0) {
			all = append(all, tp{t, p})
		}
	}
	next := map[string]map[tp]bool{}
	for _, id := range ids {
		next[id] = map[tp]bool{}
	}
	// share is each member's fair count if every member could take every
	// partition; with mixed subscriptions it is a cap that keeps
	// stickiness from piling up on one member.
	share := 0
	if len(ids) > 0 {
		share = (len(all) + len(ids) - 1) / len(ids)
	}
	owner := map[tp]string{}
	for id, ps := range g.target {
		for p := range ps {
			owner[p] = id
		}
	}
	var free []tp
	for _, p := range all {
		id, ok := owner[p]
		if ok && next[id] != nil && slices.Contains(eligible[p.topic], id) && len(next[id]) < share {
			next[id][p] = true
			continue
		}
		free = append(free, p)
	}
	for _, p := range free {
		best := ""
		for _, id := range eligible[p.topic] {
			if best == "" || len(next[id]) < len(next[best]) {
				best = id
			}
		}
		next[best][p] = true
	}
	// Even out: move from the fullest to the emptiest eligible member
	// while that narrows the gap.
	for moved := true; moved; {
		moved = false
		for _, p := range all {
			from := ""
			for id, ps := range next {
				if ps[p] {
					from = id
				}
			}
			for _, to := range eligible[p.topic] {
				if len(next[from])-len(next[to]) > 1 {
					delete(next[from], p)
					next[to][p] = true
					moved = true
					break
				}
			}
		}
	}
	g.target = next
}

// subset reports whether owned lies within the member's partitions.
func subset(owned map[string][]int32, assigned, revoking map[tp]bool) bool {
	for t, ps := range owned {
		for _, p := range ps {
			if !assigned[tp{t, p}] && !revoking[tp{t, p}] {
				return false
			}
		}
	}
	return true
}

func byTopic(ps map[tp]bool) map[string][]int32 {
	out := map[string][]int32{}
	for p := range ps {
		out[p.topic] = append(out[p.topic], p.partition)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}
