package transport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests run franz-go's consumer group against the server: kgo joins,
// balances, syncs, heartbeats, commits and leaves through the handlers in
// this package, and the group coordinator's view is checked directly.

// groupConsumer is a kgo group member polling in the background.
type groupConsumer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	recs []*kgo.Record
}

func groupStartConsumer(t *testing.T, addr, g, topic string, opts ...kgo.Opt) *groupConsumer {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ConsumerGroup(g),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Long enough not to expire on a loaded machine; every member
		// here leaves explicitly or restarts within it.
		kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.DisableAutoCommit(),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &groupConsumer{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			c.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { c.recs = append(c.recs, r) })
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.close)
	return c
}

// close stops polling and closes the client, which leaves the group
// (unless static).
func (c *groupConsumer) close() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cl.Close()
	c.cancel = nil
}

// records is what the consumer has polled, as "partition/offset".
func (c *groupConsumer) records() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.recs))
	for _, r := range c.recs {
		out = append(out, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
	}
	return out
}

// groupMemberShare is a member's identity and its partitions of a topic.
type groupMemberShare struct {
	clientID, instanceID string
	partitions           []int32
}

// groupStableAssignment is a Stable group's assignment of topic by member id, and
// its generation; nil while the group is not Stable with n members.
func groupStableAssignment(t *testing.T, b *spool.Broker, g, topic string, n int) (map[string]groupMemberShare, int32) {
	t.Helper()
	d, err := b.Groups().Describe(g)
	if err != nil || d.State != group.Stable || len(d.Members) != n {
		return nil, 0
	}
	out := make(map[string]groupMemberShare, n)
	for _, m := range d.Members {
		a, err := group.DecodeAssignment(m.Assignment)
		require.NoError(t, err)
		ps := slices.Clone(a.Partitions[topic])
		slices.Sort(ps)
		out[m.MemberID] = groupMemberShare{m.ClientID, m.GroupInstanceID, ps}
	}
	return out, d.Generation
}

// groupWaitBalanced waits until g is Stable with n members sharing the
// partitions of topic evenly.
func groupWaitBalanced(t *testing.T, b *spool.Broker, g, topic string, n, partitions int) (map[string]groupMemberShare, int32) {
	t.Helper()
	var shares map[string]groupMemberShare
	var gen int32
	require.Eventually(t, func() bool {
		shares, gen = groupStableAssignment(t, b, g, topic, n)
		if shares == nil {
			return false
		}
		total := 0
		for _, s := range shares {
			if len(s.partitions) != partitions/n {
				return false
			}
			total += len(s.partitions)
		}
		return total == partitions
	}, 20*time.Second, 20*time.Millisecond, "group %s never balanced over %d members", g, n)
	return shares, gen
}

func groupWaitCommitted(t *testing.T, b *spool.Broker, g, topic string, partitions int32, want int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
		for p := range partitions {
			if got[group.TopicPartition{Topic: topic, Partition: p}].Offset != want {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

func groupCommitAll(t *testing.T, cs ...*groupConsumer) {
	t.Helper()
	for _, c := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, c.cl.CommitUncommittedOffsets(ctx))
		cancel()
	}
}

// Two franz-go members share a topic, consume every record once, commit; one
// leaves and the other takes its partitions over from the committed
// offsets. With the default cooperative-sticky balancer and with range.
func TestGroupConsumeWithFranzGo(t *testing.T) {
	for name, balancer := range map[string][]kgo.Opt{
		"cooperative-sticky": nil,
		"range":              {kgo.Balancers(kgo.RangeBalancer())},
	} {
		t.Run(name, func(t *testing.T) {
			const topic, partitions, perPartition = "events", 4, 50
			b, _, addr := testServer(t, groupTestOptions, Options{})
			groupCreateTopic(t, b, topic, partitions)
			g := "group-" + name

			a := groupStartConsumer(t, addr, g, topic, append(balancer, kgo.ClientID("a"))...)
			c := groupStartConsumer(t, addr, g, topic, append(balancer, kgo.ClientID("c"))...)
			shares, _ := groupWaitBalanced(t, b, g, topic, 2, partitions)

			groupAppend(t, b, topic, partitions, perPartition)
			var all []string
			require.Eventually(t, func() bool {
				all = append(a.records(), c.records()...)
				return len(all) >= partitions*perPartition
			}, 20*time.Second, 20*time.Millisecond)
			var want []string
			for p := range int32(partitions) {
				for o := range perPartition {
					want = append(want, fmt.Sprintf("%d/%d", p, o))
				}
			}
			require.ElementsMatch(t, want, all, "every record, once")

			// Each consumed what it was assigned.
			assigned := map[string][]int32{}
			for _, s := range shares {
				assigned[s.clientID] = s.partitions
			}
			for id, cons := range map[string]*groupConsumer{"a": a, "c": c} {
				cons.mu.Lock()
				var ps []int32
				for _, r := range cons.recs {
					if !slices.Contains(ps, r.Partition) {
						ps = append(ps, r.Partition)
					}
				}
				cons.mu.Unlock()
				slices.Sort(ps)
				require.Equal(t, assigned[id], ps, "client %s", id)
			}

			groupCommitAll(t, a, c)
			groupWaitCommitted(t, b, g, topic, partitions, perPartition)

			// c leaves: a takes everything over, from the committed offsets.
			c.close()
			groupWaitBalanced(t, b, g, topic, 1, partitions)
			before := len(a.records())
			groupAppend(t, b, topic, partitions, 10)
			require.Eventually(t, func() bool { return len(a.records()) >= before+partitions*10 }, 20*time.Second, 20*time.Millisecond)
			want = want[:0]
			for p := range int32(partitions) {
				for o := perPartition; o < perPartition+10; o++ {
					want = append(want, fmt.Sprintf("%d/%d", p, o))
				}
			}
			got := a.records()[before:]
			require.ElementsMatch(t, want, got, "the new records, nothing consumed twice")
			groupCommitAll(t, a)
			groupWaitCommitted(t, b, g, topic, partitions, perPartition+10)
		})
	}
}

// A static member (group.instance.id) that restarts within its session
// timeout gets its partitions back without a rebalance.
func TestGroupStaticRestartWithFranzGo(t *testing.T) {
	const topic, partitions = "events", 4
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, topic, partitions)
	const g = "static"

	a := groupStartConsumer(t, addr, g, topic, kgo.InstanceID("a"))
	groupStartConsumer(t, addr, g, topic, kgo.InstanceID("b"))
	shares, gen := groupWaitBalanced(t, b, g, topic, 2, partitions)
	var oldID string
	var mine []int32
	for id, s := range shares {
		if s.instanceID == "a" {
			oldID, mine = id, s.partitions
		}
	}
	require.NotEmpty(t, oldID)

	a.close() // a static member does not leave the group
	d, err := b.Groups().Describe(g)
	require.NoError(t, err)
	require.Len(t, d.Members, 2)

	a2 := groupStartConsumer(t, addr, g, topic, kgo.InstanceID("a"))
	var newShares map[string]groupMemberShare
	var newGen int32
	require.Eventually(t, func() bool {
		newShares, newGen = groupStableAssignment(t, b, g, topic, 2)
		if newShares == nil {
			return false
		}
		_, oldStillThere := newShares[oldID]
		return !oldStillThere
	}, 10*time.Second, 20*time.Millisecond, "the restarted member never took its place")
	require.Equal(t, gen, newGen, "no rebalance")
	for id, s := range newShares {
		if s.instanceID == "a" {
			require.NotEqual(t, oldID, id)
			require.Equal(t, mine, s.partitions, "the same partitions")
		} else {
			require.Equal(t, shares[id], s, "the other member is untouched")
		}
	}

	// The restarted member consumes its partitions, and only those.
	groupAppend(t, b, topic, partitions, 5)
	require.Eventually(t, func() bool { return len(a2.records()) >= len(mine)*5 }, 20*time.Second, 20*time.Millisecond)
	a2.mu.Lock()
	for _, r := range a2.recs {
		require.Contains(t, mine, r.Partition)
	}
	a2.mu.Unlock()
	d, err = b.Groups().Describe(g)
	require.NoError(t, err)
	require.Equal(t, gen, d.Generation)
}
