package group

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

type assignment = map[string]map[string][]int32

func dyn(id string, topics ...string) AssignMember {
	return AssignMember{ID: id, Topics: topics, Generation: -1}
}

func static(id, instance string, topics ...string) AssignMember {
	return AssignMember{ID: id, InstanceID: instance, Topics: topics, Generation: -1}
}

// The cases of Kafka's RangeAssignorTest.
func TestRangeKafkaCases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions map[string]int32
		members    []AssignMember
		want       assignment
	}{
		{"OneConsumerNoTopic", nil, []AssignMember{dyn("consumer1")}, assignment{"consumer1": {}}},
		{"OneConsumerNonexistentTopic", nil, []AssignMember{dyn("consumer1", "topic1")}, assignment{"consumer1": {}}},
		{"OneConsumerOneTopic", map[string]int32{"topic1": 3}, []AssignMember{dyn("consumer1", "topic1")},
			assignment{"consumer1": {"topic1": {0, 1, 2}}}},
		{"OnlyAssignsPartitionsFromSubscribedTopics", map[string]int32{"topic1": 3, "other": 3}, []AssignMember{dyn("consumer1", "topic1")},
			assignment{"consumer1": {"topic1": {0, 1, 2}}}},
		{"OneConsumerMultipleTopics", map[string]int32{"topic1": 1, "topic2": 2}, []AssignMember{dyn("consumer1", "topic1", "topic2")},
			assignment{"consumer1": {"topic1": {0}, "topic2": {0, 1}}}},
		{"TwoConsumersOneTopicOnePartition", map[string]int32{"topic1": 1},
			[]AssignMember{dyn("consumer1", "topic1"), dyn("consumer2", "topic1")},
			assignment{"consumer1": {"topic1": {0}}, "consumer2": {}}},
		{"TwoConsumersOneTopicTwoPartitions", map[string]int32{"topic1": 2},
			[]AssignMember{dyn("consumer1", "topic1"), dyn("consumer2", "topic1")},
			assignment{"consumer1": {"topic1": {0}}, "consumer2": {"topic1": {1}}}},
		{"MultipleConsumersMixedTopics", map[string]int32{"topic1": 3, "topic2": 2},
			[]AssignMember{dyn("consumer1", "topic1"), dyn("consumer2", "topic1", "topic2"), dyn("consumer3", "topic1")},
			assignment{"consumer1": {"topic1": {0}}, "consumer2": {"topic1": {1}, "topic2": {0, 1}}, "consumer3": {"topic1": {2}}}},
		{"TwoConsumersTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{dyn("consumer1", "topic1", "topic2"), dyn("consumer2", "topic1", "topic2")},
			assignment{"consumer1": {"topic1": {0, 1}, "topic2": {0, 1}}, "consumer2": {"topic1": {2}, "topic2": {2}}}},
		{"TwoStaticConsumersTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{static("consumer-b", "instance1", "topic1", "topic2"), static("consumer-a", "instance2", "topic1", "topic2")},
			assignment{"consumer-b": {"topic1": {0, 1}, "topic2": {0, 1}}, "consumer-a": {"topic1": {2}, "topic2": {2}}}},
		{"OneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{static("consumer-b", "instance1", "topic1", "topic2"), dyn("consumer-a", "topic1", "topic2")},
			assignment{"consumer-b": {"topic1": {0, 1}, "topic2": {0, 1}}, "consumer-a": {"topic1": {2}, "topic2": {2}}}},
		{"StaticMemberRangeAssignmentPersistent", map[string]int32{"topic1": 5, "topic2": 4},
			[]AssignMember{
				static("consumer1", "instance1", "topic1", "topic2"), static("consumer2", "instance2", "topic1", "topic2"),
				static("consumer3", "instance3", "topic1", "topic2"), dyn("consumer4", "topic1", "topic2"),
			},
			assignment{
				"consumer1": {"topic1": {0, 1}, "topic2": {0}}, "consumer2": {"topic1": {2}, "topic2": {1}},
				"consumer3": {"topic1": {3}, "topic2": {2}}, "consumer4": {"topic1": {4}, "topic2": {3}},
			}},
		{"StaticMemberRangeAssignmentPersistent/replaced", map[string]int32{"topic1": 5, "topic2": 4},
			[]AssignMember{
				static("consumer1", "instance1", "topic1", "topic2"), static("consumer2", "instance2", "topic1", "topic2"),
				static("consumer3", "instance3", "topic1", "topic2"), dyn("consumer5", "topic1", "topic2"),
			},
			assignment{
				"consumer1": {"topic1": {0, 1}, "topic2": {0}}, "consumer2": {"topic1": {2}, "topic2": {1}},
				"consumer3": {"topic1": {3}, "topic2": {2}}, "consumer5": {"topic1": {4}, "topic2": {3}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Range().Assign(tc.members, tc.partitions))
		})
	}
}

// The cases of Kafka's RoundRobinAssignorTest.
func TestRoundRobinKafkaCases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions map[string]int32
		members    []AssignMember
		want       assignment
	}{
		{"OneConsumerNoTopic", nil, []AssignMember{dyn("consumer")}, assignment{"consumer": {}}},
		{"OneConsumerNonexistentTopic", nil, []AssignMember{dyn("consumer", "topic")}, assignment{"consumer": {}}},
		{"OneConsumerOneTopic", map[string]int32{"topic": 3}, []AssignMember{dyn("consumer", "topic")},
			assignment{"consumer": {"topic": {0, 1, 2}}}},
		{"OnlyAssignsPartitionsFromSubscribedTopics", map[string]int32{"topic": 3, "other": 3}, []AssignMember{dyn("consumer", "topic")},
			assignment{"consumer": {"topic": {0, 1, 2}}}},
		{"OneConsumerMultipleTopics", map[string]int32{"topic1": 1, "topic2": 2}, []AssignMember{dyn("consumer", "topic1", "topic2")},
			assignment{"consumer": {"topic1": {0}, "topic2": {0, 1}}}},
		{"TwoConsumersOneTopicOnePartition", map[string]int32{"topic": 1},
			[]AssignMember{dyn("consumer1", "topic"), dyn("consumer2", "topic")},
			assignment{"consumer1": {"topic": {0}}, "consumer2": {}}},
		{"TwoConsumersOneTopicTwoPartitions", map[string]int32{"topic": 2},
			[]AssignMember{dyn("consumer1", "topic"), dyn("consumer2", "topic")},
			assignment{"consumer1": {"topic": {0}}, "consumer2": {"topic": {1}}}},
		{"MultipleConsumersMixedTopics", map[string]int32{"topic1": 3, "topic2": 2},
			[]AssignMember{dyn("consumer1", "topic1"), dyn("consumer2", "topic1", "topic2"), dyn("consumer3", "topic1")},
			assignment{"consumer1": {"topic1": {0}}, "consumer2": {"topic1": {1}, "topic2": {0, 1}}, "consumer3": {"topic1": {2}}}},
		{"TwoDynamicConsumersTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{dyn("consumer1", "topic1", "topic2"), dyn("consumer2", "topic1", "topic2")},
			assignment{"consumer1": {"topic1": {0, 2}, "topic2": {1}}, "consumer2": {"topic1": {1}, "topic2": {0, 2}}}},
		{"TwoStaticConsumersTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{static("consumer-b", "instance1", "topic1", "topic2"), static("consumer-a", "instance2", "topic1", "topic2")},
			assignment{"consumer-b": {"topic1": {0, 2}, "topic2": {1}}, "consumer-a": {"topic1": {1}, "topic2": {0, 2}}}},
		{"OneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{static("consumer-b", "instance1", "topic1", "topic2"), dyn("consumer-a", "topic1", "topic2")},
			assignment{"consumer-b": {"topic1": {0, 2}, "topic2": {1}}, "consumer-a": {"topic1": {1}, "topic2": {0, 2}}}},
		{"StaticMemberAssignmentPersistent", map[string]int32{"topic1": 3, "topic2": 3},
			[]AssignMember{
				static("consumer1", "instance1", "topic1", "topic2"), static("consumer2", "instance2", "topic1", "topic2"),
				static("consumer3", "instance3", "topic1", "topic2"), dyn("consumer4", "topic1", "topic2"),
			},
			assignment{
				"consumer1": {"topic1": {0}, "topic2": {1}}, "consumer2": {"topic1": {1}, "topic2": {2}},
				"consumer3": {"topic1": {2}}, "consumer4": {"topic2": {0}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, RoundRobin().Assign(tc.members, tc.partitions))
		})
	}
}

// Kafka's testStaticMemberAssignmentPersistentAfterMemberIdChanges: static
// members keep their partitions when their member ids change.
func TestStaticAssignmentSurvivesNewMemberIDs(t *testing.T) {
	partitions := map[string]int32{"topic1": 3, "topic2": 3}
	for _, a := range []Assignor{Range(), RoundRobin()} {
		byInstance := func(ids map[string]string) map[string]map[string][]int32 {
			var members []AssignMember
			for id, inst := range ids {
				members = append(members, static(id, inst, "topic1", "topic2"))
			}
			out := make(map[string]map[string][]int32)
			for id, parts := range a.Assign(members, partitions) {
				out[ids[id]] = parts
			}
			return out
		}
		before := byInstance(map[string]string{"consumer1": "instance1", "consumer2": "instance2", "consumer3": "instance3"})
		after := byInstance(map[string]string{"consumer4": "instance1", "consumer5": "instance2", "consumer1": "instance3"})
		require.Equal(t, before, after, a.Name())
	}
}

func TestMorePartitionsThanMembersLeavesOneIdle(t *testing.T) {
	members := []AssignMember{dyn("a", "t"), dyn("b", "t"), dyn("c", "t"), dyn("d", "t")}
	for _, a := range []Assignor{Range(), RoundRobin(), CooperativeSticky()} {
		got := a.Assign(members, map[string]int32{"t": 3})
		require.Len(t, got, 4, a.Name())
		idle, seen := 0, map[int32]bool{}
		for _, parts := range got {
			if len(parts["t"]) == 0 {
				idle++
			}
			require.LessOrEqual(t, len(parts["t"]), 1)
			for _, p := range parts["t"] {
				require.False(t, seen[p])
				seen[p] = true
			}
		}
		require.Equal(t, 1, idle, a.Name())
		require.Len(t, seen, 3, a.Name())
	}
}

func TestCooperativeStickyTwoRounds(t *testing.T) {
	a := CooperativeSticky()
	partitions := map[string]int32{"t": 3}
	round1 := a.Assign([]AssignMember{
		{ID: "c1", Topics: []string{"t"}, Owned: tps("t", 0, 1, 2), Generation: 1},
		{ID: "c2", Topics: []string{"t"}, Generation: -1},
	}, partitions)
	// c1 keeps two and gives t-2 up; c2 gets nothing yet.
	require.Equal(t, assignment{"c1": {"t": {0, 1}}, "c2": {}}, round1)
	round2 := a.Assign([]AssignMember{
		{ID: "c1", Topics: []string{"t"}, Owned: tps("t", 0, 1), Generation: 2},
		{ID: "c2", Topics: []string{"t"}, Generation: 2},
	}, partitions)
	require.Equal(t, assignment{"c1": {"t": {0, 1}}, "c2": {"t": {2}}}, round2)

	// A fresh group is balanced in one round: there is nothing to revoke.
	fresh := a.Assign([]AssignMember{dyn("c1", "t"), dyn("c2", "t")}, map[string]int32{"t": 4})
	require.Equal(t, assignment{"c1": {"t": {0, 2}}, "c2": {"t": {1, 3}}}, fresh)
}

func TestCooperativeStickyOwnershipRules(t *testing.T) {
	a := CooperativeSticky()
	partitions := map[string]int32{"t": 4}
	// c2's claims are a generation old: they do not keep it t-1..t-3 (c2
	// keeps t-1 only because balance gives it to it again), but until c2
	// has revoked them they are not given to anyone else either.
	got := a.Assign([]AssignMember{
		{ID: "c1", Topics: []string{"t"}, Owned: tps("t", 0), Generation: 5},
		{ID: "c2", Topics: []string{"t"}, Owned: tps("t", 1, 2, 3), Generation: 4},
		{ID: "c3", Topics: []string{"t"}, Generation: 5},
	}, partitions)
	require.Equal(t, assignment{"c1": {"t": {0}}, "c2": {"t": {1}}, "c3": {}}, got)

	// Two members of the same generation claiming one partition: neither
	// keeps it on the strength of the claim.
	got = a.Assign([]AssignMember{
		{ID: "c1", Topics: []string{"t"}, Owned: tps("t", 0, 1), Generation: 5},
		{ID: "c2", Topics: []string{"t"}, Owned: tps("t", 1, 2), Generation: 5},
	}, partitions)
	all := append(slices.Clone(got["c1"]["t"]), got["c2"]["t"]...)
	slices.Sort(all)
	require.Equal(t, []int32{0, 1, 2, 3}, all, "nobody else claims t-1 and t-3, so both are handed out")

	// Unsubscribed and vanished partitions are dropped.
	got = a.Assign([]AssignMember{
		{ID: "c1", Topics: []string{"t"}, Owned: append(tps("t", 0, 9), tps("gone", 0)...), Generation: 1},
	}, partitions)
	require.Equal(t, assignment{"c1": {"t": {0, 1, 2, 3}}}, got)
}

// randomCase makes members with subscriptions and, sometimes, owned
// partitions from an earlier assignment over other members.
func randomCase(rng *rand.Rand) ([]AssignMember, map[string]int32) {
	partitions := make(map[string]int32)
	topics := make([]string, 1+rng.Intn(4))
	for i := range topics {
		topics[i] = fmt.Sprintf("t%d", i)
		partitions[topics[i]] = int32(rng.Intn(12))
	}
	if rng.Intn(5) == 0 {
		topics = append(topics, "unknown")
	}
	same := rng.Intn(2) == 0
	members := make([]AssignMember, 1+rng.Intn(9))
	for i := range members {
		m := AssignMember{ID: fmt.Sprintf("m%02d", rng.Intn(100)*100+i), Generation: -1}
		if rng.Intn(4) == 0 {
			m.InstanceID = fmt.Sprintf("i%d", i)
		}
		if same {
			m.Topics = topics
		} else {
			for _, t := range topics {
				if rng.Intn(2) == 0 {
					m.Topics = append(m.Topics, t)
				}
			}
		}
		members[i] = m
	}
	if rng.Intn(2) == 0 {
		// Owned partitions from a previous sticky generation.
		prev := CooperativeSticky().Assign(members, partitions)
		for i := range members {
			if rng.Intn(4) == 0 {
				continue // a new member
			}
			members[i].Generation = 3
			for t, ps := range prev[members[i].ID] {
				for _, p := range ps {
					members[i].Owned = append(members[i].Owned, TopicPartition{t, p})
				}
			}
		}
		if rng.Intn(2) == 0 {
			partitions[topics[0]] += int32(rng.Intn(4)) // partitions added
		}
	}
	return members, partitions
}

// checkValid checks what every assignor must do: an entry per member,
// partitions sorted, of topics it subscribes to, existing, each given once.
func checkValid(t *testing.T, members []AssignMember, partitions map[string]int32, got assignment) map[TopicPartition]string {
	t.Helper()
	require.Len(t, got, len(members))
	owner := make(map[TopicPartition]string)
	for _, m := range members {
		parts, ok := got[m.ID]
		require.True(t, ok, "no entry for %s", m.ID)
		for topic, ps := range parts {
			require.Contains(t, m.Topics, topic)
			require.True(t, slices.IsSorted(ps))
			for _, p := range ps {
				require.True(t, p >= 0 && p < partitions[topic])
				tp := TopicPartition{topic, p}
				require.NotContains(t, owner, tp, "given twice")
				owner[tp] = m.ID
			}
		}
	}
	return owner
}

func subscribedPartitions(members []AssignMember, partitions map[string]int32) []TopicPartition {
	set := make(map[TopicPartition]bool)
	for _, m := range members {
		for _, topic := range m.Topics {
			for p := range partitions[topic] {
				set[TopicPartition{topic, p}] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(set), compareTP)
}

func count(parts map[string][]int32) int {
	n := 0
	for _, ps := range parts {
		n += len(ps)
	}
	return n
}

// checkBalanced is the sticky assignor's balance: a member with at least
// two partitions more than another holds none the other could take.
func checkBalanced(t *testing.T, members []AssignMember, got assignment) {
	t.Helper()
	for _, a := range members {
		for _, b := range members {
			if count(got[a.ID]) <= count(got[b.ID])+1 {
				continue
			}
			for topic, ps := range got[a.ID] {
				require.False(t, len(ps) > 0 && slices.Contains(b.Topics, topic),
					"%s (%d) could give %s (%d) a partition of %s", a.ID, count(got[a.ID]), b.ID, count(got[b.ID]), topic)
			}
		}
	}
}

func TestAssignorProperties(t *testing.T) {
	rng := newRand(1)
	for i := range 2000 {
		members, partitions := randomCase(rng)
		name := fmt.Sprintf("case %d", i)
		for _, a := range []Assignor{Range(), RoundRobin()} {
			got := a.Assign(slices.Clone(members), partitions)
			owner := checkValid(t, members, partitions, got)
			require.Len(t, owner, len(subscribedPartitions(members, partitions)), "%s %s: all assigned", name, a.Name())
			if a.Name() == "roundrobin" && allSame(members) {
				lo, hi := minMax(members, got)
				require.LessOrEqual(t, hi-lo, 1, name)
			}
			if a.Name() == "range" {
				// Per topic, member loads differ by at most one.
				for topic := range partitions {
					lo, hi := -1, 0
					for _, m := range members {
						if slices.Contains(m.Topics, topic) {
							n := len(got[m.ID][topic])
							if lo < 0 || n < lo {
								lo = n
							}
							hi = max(hi, n)
						}
					}
					require.LessOrEqual(t, hi-max(lo, 0), 1, name)
				}
			}
		}
	}
}

func allSame(members []AssignMember) bool {
	for _, m := range members {
		if !slices.Equal(m.Topics, members[0].Topics) {
			return false
		}
	}
	return true
}

func minMax(members []AssignMember, got assignment) (int, int) {
	lo, hi := -1, 0
	for _, m := range members {
		n := count(got[m.ID])
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return lo, hi
}

// TestCooperativeStickyProperties checks, on random cases, that one round
// never gives a partition to a new owner while someone still claims it,
// that what is withheld goes out in the next round, and that the result is
// then complete, balanced and sticky.
func TestCooperativeStickyProperties(t *testing.T) {
	rng := newRand(2)
	a := CooperativeSticky()
	for i := range 2000 {
		members, partitions := randomCase(rng)
		name := fmt.Sprintf("case %d", i)
		got := a.Assign(slices.Clone(members), partitions)
		checkValid(t, members, partitions, got)
		claimed := make(map[TopicPartition]string)
		for _, m := range members {
			for _, tp := range m.Owned {
				claimed[tp] = m.ID
			}
		}
		for _, m := range members {
			for topic, ps := range got[m.ID] {
				for _, p := range ps {
					tp := TopicPartition{topic, p}
					if c, ok := claimed[tp]; ok {
						require.Equal(t, m.ID, c, "%s: %v given to %s while %s owns it", name, tp, m.ID, c)
					}
				}
			}
		}

		// Stickiness, with equal subscriptions and current claims: a member
		// keeps its owned partitions up to its fair share.
		if allSame(members) && len(members) > 0 {
			total := len(subscribedPartitions(members, partitions))
			floor := total / len(members)
			for _, m := range members {
				if m.Generation != 3 {
					continue
				}
				kept := 0
				for _, tp := range m.Owned {
					if slices.Contains(got[m.ID][tp.Topic], tp.Partition) {
						kept++
					}
				}
				valid := 0
				for _, tp := range m.Owned {
					if tp.Partition < partitions[tp.Topic] && slices.Contains(m.Topics, tp.Topic) {
						valid++
					}
				}
				require.GreaterOrEqual(t, kept, min(valid, floor), "%s: %s", name, m.ID)
			}
		}

		// Second round: every member now owns what it was given.
		next := slices.Clone(members)
		for j := range next {
			next[j].Owned = nil
			next[j].Generation = 4
			for topic, ps := range got[next[j].ID] {
				for _, p := range ps {
					next[j].Owned = append(next[j].Owned, TopicPartition{topic, p})
				}
			}
		}
		got2 := a.Assign(next, partitions)
		owner := checkValid(t, next, partitions, got2)
		require.Len(t, owner, len(subscribedPartitions(next, partitions)), "%s: all assigned after two rounds", name)
		checkBalanced(t, next, got2)
		for _, m := range next {
			for _, tp := range m.Owned {
				require.Contains(t, got2[m.ID][tp.Topic], tp.Partition, "%s: a balanced member keeps all it owns", name)
			}
		}
	}
}

// TestCooperativeDanceNeverDoubleOwns plays KIP-429's protocol over many
// generations of a changing group: each generation the members report what
// they own, the leader assigns, members revoke what they lost (and, if they
// lost anything, ask for another generation) and take what they gained. A
// partition is never given to a member while another one owns it.
func TestCooperativeDanceNeverDoubleOwns(t *testing.T) {
	a := CooperativeSticky()
	for seed := range int64(50) {
		rng := newRand(seed)
		partitions := map[string]int32{"a": int32(1 + rng.Intn(10)), "b": int32(rng.Intn(10))}
		type mem struct {
			id     string
			topics []string
			owned  []TopicPartition
			gen    int32
		}
		var members []*mem
		next := 0
		add := func() {
			topics := []string{"a", "b"}
			if rng.Intn(3) == 0 {
				topics = []string{[]string{"a", "b"}[rng.Intn(2)]}
			}
			members = append(members, &mem{id: fmt.Sprintf("m%03d", next), topics: topics, gen: -1})
			next++
		}
		for range 1 + rng.Intn(4) {
			add()
		}
		gen := int32(0)
		for step := range 60 {
			// Churn between generations.
			switch {
			case step%10 == 9:
				// Quiet: let the group settle.
			case rng.Intn(4) == 0:
				add()
			case rng.Intn(5) == 0 && len(members) > 1:
				i := rng.Intn(len(members))
				members = slices.Delete(members, i, i+1) // leaves, revoking all
			case rng.Intn(8) == 0:
				partitions["b"]++
			}
			gen++
			in := make([]AssignMember, len(members))
			for i, m := range members {
				in[i] = AssignMember{ID: m.id, Topics: m.topics, Owned: m.owned, Generation: m.gen}
			}
			got := a.Assign(in, partitions)
			checkValid(t, in, partitions, got)
			ownedBy := make(map[TopicPartition]string)
			for _, m := range members {
				for _, tp := range m.owned {
					ownedBy[tp] = m.id
				}
			}
			for _, m := range members {
				var now []TopicPartition
				for topic, ps := range got[m.id] {
					for _, p := range ps {
						tp := TopicPartition{topic, p}
						if o, ok := ownedBy[tp]; ok && o != m.id {
							t.Fatalf("seed %d gen %d: %v given to %s while %s owns it", seed, gen, tp, m.id, o)
						}
						now = append(now, tp)
					}
				}
				m.owned, m.gen = now, gen
			}
		}
	}
}
