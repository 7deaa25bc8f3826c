package group

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"slices"
	"time"
)

// The decision logic of one group is a state machine fed requests and
// ticks, each with the time it happens at: this file (its state and
// bookkeeping), rebalance.go (JoinGroup and SyncGroup), liveness.go
// (heartbeats, leaving, timeouts) and offsets.go (commit rules). It does no
// I/O, takes no locks and never blocks. A request that must wait (a
// JoinGroup until the rebalance completes, a follower's SyncGroup until the
// leader's) gets a waiter token; the answer to it is queued in replies when a
// later request or tick decides it, and the Coordinator hands it over.

// config holds what the state machine needs of Options.
type config struct {
	minSession, maxSession time.Duration
	initialDelay           time.Duration
	maxSize                int
	maxMetadata            int
	newMemberJoinTimeout   time.Duration
	newID                  func(prefix string) string
}

func newConfig(o Options) *config {
	return &config{
		minSession:           o.MinSessionTimeout,
		maxSession:           o.MaxSessionTimeout,
		initialDelay:         o.InitialRebalanceDelay,
		maxSize:              o.MaxGroupSize,
		maxMetadata:          o.MaxOffsetMetadataBytes,
		newMemberJoinTimeout: NewMemberJoinTimeout,
		newID:                randomMemberID,
	}
}

// randomMemberID makes a member id as Kafka does: the client id (or group
// instance id) and a random UUID.
func randomMemberID(prefix string) string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// member is one member of a group (Kafka's MemberMetadata).
type member struct {
	id, instanceID       string
	clientID, clientHost string
	protocolType         string
	protocols            []Protocol
	session, rebalance   time.Duration
	assignment           []byte

	// joinWaiter is the parked JoinGroup of the member, 0 if none: the
	// member has joined the rebalance under way (Kafka's isAwaitingJoin).
	joinWaiter uint64
	// syncWaiter is the parked SyncGroup, 0 if none (isAwaitingSync).
	syncWaiter uint64
	// isNew marks a member added in the rebalance under way; it expires at
	// expires even while it waits in JoinGroup.
	isNew bool
	// idUnsent marks a new member whose client has not yet been told its
	// id: if its JoinGroup is withdrawn, nobody can ever use the id.
	idUnsent bool
	// expires is when the member's session ends unless it heartbeats (or
	// a rebalance it is waiting in holds it).
	expires time.Time
}

func (m *member) matches(protocols []Protocol) bool {
	return slices.EqualFunc(m.protocols, protocols, func(a, b Protocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// expired reports whether the member's session has ended: Kafka's
// hasSatisfiedHeartbeat negated. A member waiting in a rebalance is alive,
// except a new one, which has its own deadline.
func (m *member) expired(now time.Time) bool {
	if !m.isNew && (m.joinWaiter != 0 || m.syncWaiter != 0) {
		return false
	}
	return !now.Before(m.expires)
}

// reply is the answer to a parked request.
type reply struct {
	waiter uint64
	join   JoinResponse
	sync   SyncResponse
	err    error
}

// delayKind says which of Kafka's delayed joins the PreparingRebalance
// deadline stands for.
type delayKind int8

const (
	delayRegular delayKind = iota // DelayedJoin: all members joined, or the rebalance timeout
	delayInitial                  // InitialDelayedJoin: wait for more members of a new group
)

// classicGroup is the state of one group under the classic protocol (Kafka's
// GroupMetadata, or ClassicGroup).
type classicGroup struct {
	id    string // never changes: Coordinator.Unload reads it without the lock
	cfg   *config
	state State
	since time.Time // when the group entered state

	generation   int32
	protocolType string
	protocol     string // chosen for the generation; "" while Empty
	leader       string

	members map[string]*member
	order   []*member         // members in joining order: every iteration is deterministic
	static  map[string]string // group instance id → member id
	pending map[string]time.Time

	// During PreparingRebalance: when the delayed join expires.
	rebalanceDeadline time.Time
	delay             delayKind
	delayRemaining    time.Duration // InitialDelayedJoin's budget left
	newMemberAdded    bool

	// pendingSync are the members of the generation that have not sent
	// SyncGroup by syncDeadline (Kafka's DelayedSync, KAFKA-13766).
	pendingSync  map[string]bool
	syncDeadline time.Time

	// subscribed are the topics a consumer group's members subscribe to,
	// known when subscribedKnown (Kafka's subscribedTopics).
	subscribed      map[string]bool
	subscribedKnown bool

	offsets map[TopicPartition]OffsetAndMetadata
	// txn orders offsets against transactional commits and holds those
	// pending (txnoffsets.go).
	txn txnState

	lastWaiter uint64
	replies    []reply
}

func newClassicGroup(id string, cfg *config, now time.Time) *classicGroup {
	return &classicGroup{
		id:          id,
		cfg:         cfg,
		state:       Empty,
		since:       now,
		members:     make(map[string]*member),
		static:      make(map[string]string),
		pending:     make(map[string]time.Time),
		pendingSync: make(map[string]bool),
		offsets:     make(map[TopicPartition]OffsetAndMetadata),
	}
}

// validPrevious are the states each state may be entered from.
var validPrevious = map[State][]State{
	PreparingRebalance:  {Stable, CompletingRebalance, Empty},
	CompletingRebalance: {PreparingRebalance},
	Stable:              {CompletingRebalance},
	Empty:               {PreparingRebalance},
	Dead:                {Stable, PreparingRebalance, CompletingRebalance, Empty, Dead},
}

func (g *classicGroup) transition(to State, now time.Time) {
	if !slices.Contains(validPrevious[to], g.state) {
		// A bug in this file, not bad input: every caller checks the state.
		panic(fmt.Sprintf("group %q: invalid transition %v -> %v", g.id, g.state, to))
	}
	g.state = to
	g.since = now
}

// pristine reports whether the group holds nothing worth keeping: it was
// created by a request that then failed.
func (g *classicGroup) pristine() bool {
	return g.state == Empty && len(g.members) == 0 && len(g.pending) == 0 &&
		len(g.offsets) == 0 && g.generation == 0 && g.protocolType == "" && len(g.txn.pending) == 0
}

func (g *classicGroup) newWaiter() uint64 {
	g.lastWaiter++
	return g.lastWaiter
}

func (g *classicGroup) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.order {
		d = max(d, m.rebalance)
	}
	return d
}

func (g *classicGroup) add(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	if g.leader == "" {
		g.leader = m.id
	}
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	g.members[m.id] = m
	g.order = append(g.order, m)
	delete(g.pending, m.id)
}

func (g *classicGroup) remove(id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(o *member) bool { return o == m })
	if m.instanceID != "" && g.static[m.instanceID] == id {
		delete(g.static, m.instanceID)
	}
	if g.leader == id {
		g.leader = ""
		if len(g.order) > 0 {
			g.leader = g.order[0].id
		}
	}
	delete(g.pending, id)
	delete(g.pendingSync, id)
}

// allJoined is Kafka's hasAllMembersJoined.
func (g *classicGroup) allJoined() bool {
	for _, m := range g.order {
		if m.joinWaiter == 0 {
			return false
		}
	}
	return len(g.pending) == 0
}

// supportsProtocols says whether a member with these protocols may join.
func (g *classicGroup) supportsProtocols(protocolType string, protocols []Protocol) bool {
	if g.state == Empty {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.supportedByAll(p.Name) {
			return true
		}
	}
	return false
}

func (g *classicGroup) supportedByAll(name string) bool {
	for _, m := range g.order {
		if !slices.ContainsFunc(m.protocols, func(p Protocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

// selectProtocol picks the protocol of the next generation: among those
// every member supports, each member votes for the first in its own order of
// preference and the most votes win. Kafka breaks ties arbitrarily; here the
// protocol voted for first, in joining order, wins.
func (g *classicGroup) selectProtocol() string {
	var names []string
	votes := make(map[string]int)
	for _, m := range g.order {
		for _, p := range m.protocols {
			if g.supportedByAll(p.Name) {
				if votes[p.Name] == 0 {
					names = append(names, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, n := range names {
		if best == "" || votes[n] > votes[best] {
			best = n
		}
	}
	return best
}

// validateMember checks that memberID is in the group and, for a static
// member, that it still holds its instance id (Kafka's
// validateCurrentMember).
func (g *classicGroup) validateMember(memberID, instanceID string) error {
	if instanceID != "" {
		cur, ok := g.static[instanceID]
		if !ok {
			return ErrUnknownMemberID
		}
		if cur != memberID {
			return ErrFencedInstanceID
		}
	}
	if g.members[memberID] == nil {
		return ErrUnknownMemberID
	}
	return nil
}

func (g *classicGroup) replyJoin(m *member, resp JoinResponse, err error) {
	if m.joinWaiter == 0 {
		return
	}
	g.replies = append(g.replies, reply{waiter: m.joinWaiter, join: resp, err: err})
	m.joinWaiter = 0
}

func (g *classicGroup) replySync(m *member, resp SyncResponse, err error) bool {
	if m.syncWaiter == 0 {
		return false
	}
	g.replies = append(g.replies, reply{waiter: m.syncWaiter, sync: resp, err: err})
	m.syncWaiter = 0
	return true
}

// takeReplies hands the queued replies over.
func (g *classicGroup) takeReplies() []reply {
	r := g.replies
	g.replies = nil
	return r
}

// computeSubscribed learns the topics of a consumer group's members from
// their subscriptions, decoding only the fields every version has.
func (g *classicGroup) computeSubscribed() {
	g.subscribed, g.subscribedKnown = nil, false
	if g.protocolType != ConsumerProtocolType {
		return
	}
	topics := make(map[string]bool)
	for _, m := range g.order {
		s, err := DecodeSubscription(m.metadata(g.protocol))
		if err != nil {
			return
		}
		for _, t := range s.Topics {
			topics[t] = true
		}
	}
	g.subscribed, g.subscribedKnown = topics, true
}

// subscribedTo reports whether the group may be consuming topic: when its
// subscriptions are unknown, any topic.
func (g *classicGroup) subscribedTo(topic string) bool {
	return !g.subscribedKnown || g.subscribed[topic]
}

// describe is DescribeGroups' view of the group.
func (g *classicGroup) describe() Description {
	d := Description{
		Group:        g.id,
		State:        g.state,
		ProtocolType: g.protocolType,
		Generation:   g.generation,
		LeaderID:     g.leader,
	}
	if g.state == Stable {
		d.Protocol = g.protocol
	}
	for _, m := range g.order {
		md := MemberDescription{
			MemberID:        m.id,
			GroupInstanceID: m.instanceID,
			ClientID:        m.clientID,
			ClientHost:      m.clientHost,
		}
		if g.state == Stable {
			md.Metadata = bytes.Clone(m.metadata(g.protocol))
			md.Assignment = bytes.Clone(m.assignment)
		}
		d.Members = append(d.Members, md)
	}
	return d
}
