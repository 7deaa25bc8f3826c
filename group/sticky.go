package group

import (
	"cmp"
	"maps"
	"slices"
)

// CooperativeSticky returns Kafka's CooperativeStickyAssignor
// ("cooperative-sticky", KIP-429). Its assignment is
//
//   - balanced: no partition could move from one member to another member
//     subscribed to its topic that has at least two partitions fewer (with
//     equal subscriptions: every member has ⌊P/N⌋ or ⌈P/N⌉ partitions);
//   - sticky: a member keeps every partition it owns (per its subscription's
//     OwnedPartitions) unless balance needs it elsewhere;
//   - cooperative: a partition that moves from one member to another is only
//     taken from the first in this rebalance. The first member revokes it and
//     rejoins, and the next rebalance, in which nobody owns it, gives it to
//     the second. So no partition ever has two owners.
//
// Owned partitions count only for members of the newest generation the
// members report: older claims may be stale. A partition claimed by two
// members of that generation is treated as owned by neither.
func CooperativeSticky() Assignor { return cooperativeSticky{} }

type cooperativeSticky struct{}

func (cooperativeSticky) Name() string      { return "cooperative-sticky" }
func (cooperativeSticky) Cooperative() bool { return true }

func (cooperativeSticky) Assign(members []AssignMember, partitions map[string]int32) map[string]map[string][]int32 {
	ms := sortedMembers(members)
	s := newStickyState(ms, partitions)
	s.keepOwned(ms)
	s.assignUnowned()
	s.balance()

	out := emptyAssignment(members)
	withheld := s.transfers(ms)
	for i, m := range ms {
		for _, p := range s.parts[i] {
			tp := s.tps[p]
			if withheld[tp] {
				continue
			}
			out[m.ID][tp.Topic] = append(out[m.ID][tp.Topic], tp.Partition)
		}
		for _, ps := range out[m.ID] {
			slices.Sort(ps)
		}
	}
	return out
}

// stickyState is an assignment under construction. Members and partitions
// are numbered: members in member order, partitions by topic and number.
type stickyState struct {
	tps      []TopicPartition
	index    map[TopicPartition]int
	eligible map[string][]int // topic → members subscribed to it
	subs     []map[string]bool
	owner    []int   // partition → member, -1 if unassigned
	parts    [][]int // member → its partitions
}

func newStickyState(ms []*AssignMember, partitions map[string]int32) *stickyState {
	s := &stickyState{
		index:    make(map[TopicPartition]int),
		eligible: make(map[string][]int),
		subs:     make([]map[string]bool, len(ms)),
		parts:    make([][]int, len(ms)),
	}
	for i, m := range ms {
		s.subs[i] = make(map[string]bool)
		for _, t := range m.Topics {
			if partitions[t] > 0 && !s.subs[i][t] {
				s.subs[i][t] = true
				s.eligible[t] = append(s.eligible[t], i)
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(s.eligible)) {
		for p := range partitions[t] {
			tp := TopicPartition{Topic: t, Partition: p}
			s.index[tp] = len(s.tps)
			s.tps = append(s.tps, tp)
		}
	}
	s.owner = make([]int, len(s.tps))
	for p := range s.owner {
		s.owner[p] = -1
	}
	return s
}

func (s *stickyState) give(p, m int) {
	s.owner[p] = m
	s.parts[m] = append(s.parts[m], p)
}

// keepOwned gives members the partitions they validly own.
func (s *stickyState) keepOwned(ms []*AssignMember) {
	gen := func(m *AssignMember) int32 { return max(m.Generation, -1) }
	newest := int32(-1)
	for _, m := range ms {
		newest = max(newest, gen(m))
	}
	claimant := make(map[int]int)
	contested := make(map[int]bool)
	for i, m := range ms {
		if gen(m) != newest {
			continue
		}
		for _, tp := range m.Owned {
			p, ok := s.index[tp]
			if !ok || !s.subs[i][tp.Topic] {
				continue // gone, or no longer wanted
			}
			if c, ok := claimant[p]; ok && c != i {
				contested[p] = true
			}
			claimant[p] = i
		}
	}
	for p := range s.tps {
		if c, ok := claimant[p]; ok && !contested[p] {
			s.give(p, c)
		}
	}
}

// assignUnowned gives each unowned partition, those with the fewest
// candidates first, to its candidate with the fewest partitions.
func (s *stickyState) assignUnowned() {
	var free []int
	for p, o := range s.owner {
		if o < 0 {
			free = append(free, p)
		}
	}
	slices.SortStableFunc(free, func(a, b int) int {
		return cmp.Compare(len(s.eligible[s.tps[a].Topic]), len(s.eligible[s.tps[b].Topic]))
	})
	for _, p := range free {
		best := -1
		for _, m := range s.eligible[s.tps[p].Topic] {
			if best < 0 || len(s.parts[m]) < len(s.parts[best]) {
				best = m
			}
		}
		s.give(p, best)
	}
}

// balance moves partitions from the most loaded members to members with at
// least two fewer that can take them, until no such move is left. Each move
// lowers the sum of squared member loads, so it ends.
func (s *stickyState) balance() {
	n := len(s.parts)
	order := make([]int, n)
	for {
		fewest := -1
		for m := range n {
			order[m] = m
			if fewest < 0 || len(s.parts[m]) < fewest {
				fewest = len(s.parts[m])
			}
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(s.parts[b]), len(s.parts[a])) })
		if !s.moveOne(order, fewest) {
			return
		}
	}
}

func (s *stickyState) moveOne(order []int, fewest int) bool {
	for _, a := range order {
		load := len(s.parts[a])
		if load-fewest <= 1 {
			return false
		}
		for k := load - 1; k >= 0; k-- {
			p := s.parts[a][k]
			b := -1
			for _, m := range s.eligible[s.tps[p].Topic] {
				if m != a && len(s.parts[m]) < load-1 && (b < 0 || len(s.parts[m]) < len(s.parts[b])) {
					b = m
				}
			}
			if b >= 0 {
				s.parts[a] = slices.Delete(s.parts[a], k, k+1)
				s.give(p, b)
				return true
			}
		}
	}
	return false
}

// transfers are the partitions that change owner: assigned to a member that
// does not claim them while another member claims them and loses them. The
// cooperative protocol withholds them for a rebalance (Kafka's
// partitionsTransferringOwnership, computed from the claims as sent).
func (s *stickyState) transfers(ms []*AssignMember) map[TopicPartition]bool {
	claims := make([]map[TopicPartition]bool, len(ms))
	for i, m := range ms {
		claims[i] = make(map[TopicPartition]bool, len(m.Owned))
		for _, tp := range m.Owned {
			claims[i][tp] = true
		}
	}
	revoked := make(map[TopicPartition]bool)
	for i := range ms {
		kept := make(map[TopicPartition]bool, len(s.parts[i]))
		for _, p := range s.parts[i] {
			kept[s.tps[p]] = true
		}
		for tp := range claims[i] {
			if !kept[tp] {
				revoked[tp] = true
			}
		}
	}
	out := make(map[TopicPartition]bool)
	for i := range ms {
		for _, p := range s.parts[i] {
			if tp := s.tps[p]; !claims[i][tp] && revoked[tp] {
				out[tp] = true
			}
		}
	}
	return out
}
