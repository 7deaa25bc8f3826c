package group

import (
	"cmp"
	"maps"
	"slices"
)

// Assignor computes a consumer group's assignment. It runs in the client
// that the coordinator made the leader, on the subscriptions the JoinGroup
// response carried; the coordinator only relays the result. Its Name is the
// protocol name members advertise in JoinGroup.
type Assignor interface {
	// Name is the protocol name: "range", "roundrobin",
	// "cooperative-sticky".
	Name() string
	// Cooperative reports whether the assignor follows KIP-429's
	// cooperative protocol: it never hands a partition to a new owner in
	// the rebalance that takes it from its old one, so members keep
	// consuming what they keep and only revoke what they lose (and then
	// rejoin).
	Cooperative() bool
	// Assign maps every member's id to its partitions, by topic. partitions
	// gives the partition count of each topic; topics missing from it
	// (unknown to the leader) are not assigned. Every member has an entry,
	// possibly empty; partition lists are sorted.
	Assign(members []AssignMember, partitions map[string]int32) map[string]map[string][]int32
}

// AssignMember is a member as an assignor sees it: its identity and
// decoded Subscription.
type AssignMember struct {
	ID         string
	InstanceID string
	Topics     []string
	// Owned are the partitions the member holds (Subscription v1+).
	Owned []TopicPartition
	// Generation is the generation in which it got them (Subscription
	// v2+), -1 if unknown.
	Generation int32
	UserData   []byte
}

// AssignMemberOf makes the AssignMember of a JoinResponse member from its
// metadata.
func AssignMemberOf(m MemberMetadata) (AssignMember, error) {
	s, err := DecodeSubscription(m.Metadata)
	if err != nil {
		return AssignMember{}, err
	}
	return AssignMember{
		ID:         m.MemberID,
		InstanceID: m.GroupInstanceID,
		Topics:     s.Topics,
		Owned:      s.OwnedPartitions,
		Generation: s.GenerationID,
		UserData:   s.UserData,
	}, nil
}

// compareMembers is Kafka's MemberInfo order: static members first, by
// instance id, then dynamic members by member id. Assignments that follow
// it survive a static member's restart under a new member id.
func compareMembers(a, b *AssignMember) int {
	switch {
	case a.InstanceID != "" && b.InstanceID != "":
		if c := cmp.Compare(a.InstanceID, b.InstanceID); c != 0 {
			return c
		}
	case a.InstanceID != "":
		return -1
	case b.InstanceID != "":
		return 1
	}
	return cmp.Compare(a.ID, b.ID)
}

func sortedMembers(members []AssignMember) []*AssignMember {
	out := make([]*AssignMember, len(members))
	for i := range members {
		out[i] = &members[i]
	}
	slices.SortFunc(out, compareMembers)
	return out
}

func emptyAssignment(members []AssignMember) map[string]map[string][]int32 {
	out := make(map[string]map[string][]int32, len(members))
	for _, m := range members {
		out[m.ID] = map[string][]int32{}
	}
	return out
}

// Range returns Kafka's RangeAssignor ("range"): topic by topic, the
// partitions in order are cut into contiguous ranges, one per subscribed
// member in member order (static members by instance id, then the others by
// member id); the first members get one partition more when the count does
// not divide. Members subscribed to the same topics get the same partition
// numbers of each, which suits joins of co-partitioned topics.
func Range() Assignor { return rangeAssignor{} }

type rangeAssignor struct{}

func (rangeAssignor) Name() string      { return "range" }
func (rangeAssignor) Cooperative() bool { return false }

func (rangeAssignor) Assign(members []AssignMember, partitions map[string]int32) map[string]map[string][]int32 {
	out := emptyAssignment(members)
	byTopic := make(map[string][]*AssignMember)
	for _, m := range sortedMembers(members) {
		for _, t := range uniqueTopics(m.Topics) {
			byTopic[t] = append(byTopic[t], m)
		}
	}
	for topic, ms := range byTopic {
		n := partitions[topic]
		if n <= 0 {
			continue
		}
		per, extra := int(n)/len(ms), int(n)%len(ms)
		start := 0
		for i, m := range ms {
			size := per
			if i < extra {
				size++
			}
			if size == 0 {
				continue
			}
			ps := make([]int32, size)
			for j := range ps {
				ps[j] = int32(start + j)
			}
			out[m.ID][topic] = ps
			start += size
		}
	}
	return out
}

func uniqueTopics(topics []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(topics)))
}

// RoundRobin returns Kafka's RoundRobinAssignor ("roundrobin"): every
// subscribed partition, sorted by topic and number, is dealt in turn to the
// members in member order, skipping members not subscribed to its topic.
func RoundRobin() Assignor { return roundRobinAssignor{} }

type roundRobinAssignor struct{}

func (roundRobinAssignor) Name() string      { return "roundrobin" }
func (roundRobinAssignor) Cooperative() bool { return false }

func (roundRobinAssignor) Assign(members []AssignMember, partitions map[string]int32) map[string]map[string][]int32 {
	out := emptyAssignment(members)
	ms := sortedMembers(members)
	subscribed := make([]map[string]bool, len(ms))
	all := make(map[string]bool)
	for i, m := range ms {
		subscribed[i] = make(map[string]bool)
		for _, t := range m.Topics {
			subscribed[i][t] = true
			all[t] = true
		}
	}
	next := 0
	for _, topic := range slices.Sorted(maps.Keys(all)) {
		for p := range partitions[topic] {
			for !subscribed[next][topic] {
				next = (next + 1) % len(ms)
			}
			m := ms[next]
			out[m.ID][topic] = append(out[m.ID][topic], p)
			next = (next + 1) % len(ms)
		}
	}
	return out
}
