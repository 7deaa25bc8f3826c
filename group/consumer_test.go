package group

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// consumerClient plays a KIP-848 member as a well-behaved client does: it
// owns exactly the last assignment it was given (revoking at once what it
// lost) and reports it in every heartbeat.
type consumerClient struct {
	id    string
	epoch int32
	subs  []string
	owned map[string][]int32
}

func (c *consumerClient) heartbeat(g *consumerGroup, now time.Time, lose bool) error {
	req := consumerHeartbeat{MemberID: c.id, MemberEpoch: c.epoch, Owns: true, Owned: c.owned}
	if c.epoch == epochJoin {
		req.Subscribed, req.Owned = c.subs, map[string][]int32{}
	}
	resp, err := g.heartbeat(req, now)
	if err != nil || lose {
		return err
	}
	c.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		c.owned = resp.Assignment
	}
	return nil
}

func (c *consumerClient) owns() []tp {
	var out []tp
	for t, ps := range c.owned {
		for _, p := range ps {
			out = append(out, tp{t, p})
		}
	}
	return out
}

func topics(counts map[string]int32) func(string) int32 {
	return func(t string) int32 {
		if n, ok := counts[t]; ok {
			return n
		}
		return -1
	}
}

// A second member joins: the first gives up half its partitions before
// the second gets them; both end at the target epoch, balanced.
func TestConsumerGroupRevokesBeforeAssigning(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newConsumerGroup("g", topics(map[string]int32{"t": 4}), 45*time.Second, 5*time.Second, time.Minute)
	a := &consumerClient{id: "a", subs: []string{"t"}}
	require.NoError(t, a.heartbeat(g, now, false))
	require.Equal(t, int32(1), a.epoch)
	require.Equal(t, map[string][]int32{"t": {0, 1, 2, 3}}, a.owned)

	b := &consumerClient{id: "b", subs: []string{"t"}}
	require.NoError(t, b.heartbeat(g, now, false))
	require.Equal(t, int32(2), b.epoch, "a new member reconciles at once")
	require.Empty(t, b.owned["t"], "a still holds every partition")

	require.NoError(t, a.heartbeat(g, now, false))
	require.Equal(t, int32(1), a.epoch, "revoking: a keeps its epoch")
	require.Len(t, a.owned["t"], 2)
	require.NoError(t, b.heartbeat(g, now, false))
	require.Empty(t, b.owned["t"], "a has not said it revoked yet")

	require.NoError(t, a.heartbeat(g, now, false)) // reports the smaller set
	require.Equal(t, int32(2), a.epoch)
	require.NoError(t, b.heartbeat(g, now, false))
	require.Len(t, b.owned["t"], 2)
	all := append(a.owns(), b.owns()...)
	slices.SortFunc(all, func(x, y tp) int { return int(x.partition - y.partition) })
	require.Equal(t, []tp{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 3}}, all)
}

// Many members joining, leaving, crashing and losing responses, topics
// growing: no partition is ever owned by two clients, and once things
// settle every partition is owned once, evenly.
func TestConsumerGroupNeverOwnsAPartitionTwice(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			counts := map[string]int32{"a": 6, "b": 5}
			now := time.Unix(1000, 0)
			g := newConsumerGroup("g", topics(counts), 10*time.Second, time.Second, 5*time.Second)
			live := map[string]*consumerClient{}
			next := 0
			check := func(step string) {
				t.Helper()
				owner := map[tp]string{}
				for id, c := range live {
					for _, p := range c.owns() {
						if o, ok := owner[p]; ok {
							t.Fatalf("%s: %v owned by %s and %s", step, p, o, id)
						}
						owner[p] = id
					}
				}
			}
			for step := range 400 {
				now = now.Add(100 * time.Millisecond)
				switch r := rng.IntN(100); {
				case r < 8 && len(live) < 6:
					c := &consumerClient{id: fmt.Sprint("m", next), subs: []string{"a", "b"}}
					next++
					live[c.id] = c
					require.NoError(t, c.heartbeat(g, now, false))
				case r < 12 && len(live) > 0:
					id := slices.Sorted(maps.Keys(live))[rng.IntN(len(live))]
					c := live[id]
					_, err := g.heartbeat(consumerHeartbeat{MemberID: id, MemberEpoch: epochLeave}, now)
					require.NoError(t, err)
					delete(live, c.id)
				case r < 14 && len(live) > 0:
					// A crash: the client stops owning; the coordinator
					// learns at the session timeout.
					id := slices.Sorted(maps.Keys(live))[rng.IntN(len(live))]
					delete(live, id)
				case r < 16:
					counts["a"]++
				default:
					for _, id := range slices.Sorted(maps.Keys(live)) {
						c := live[id]
						err := c.heartbeat(g, now, rng.IntN(10) == 0)
						if err != nil {
							// Fenced or removed (past a timeout): give
							// everything up, rejoin.
							require.True(t, errors.Is(err, ErrFencedMemberEpoch) || errors.Is(err, ErrUnknownMemberID), "%s: %v", id, err)
							c.owned, c.epoch = nil, epochJoin
						}
					}
				}
				g.tick(now)
				check(fmt.Sprint("step ", step))
			}
			// Settle: heartbeats only, past every session timeout.
			for range 20 {
				now = now.Add(time.Second)
				for _, id := range slices.Sorted(maps.Keys(live)) {
					c := live[id]
					if err := c.heartbeat(g, now, false); err != nil {
						c.owned, c.epoch = nil, epochJoin
					}
				}
				g.tick(now)
				check("settling")
			}
			if len(live) == 0 {
				return
			}
			owned, least, most := 0, 1<<30, 0
			for _, c := range live {
				n := len(c.owns())
				owned += n
				least, most = min(least, n), max(most, n)
				require.Equal(t, g.targetEpoch, c.epoch)
			}
			require.Equal(t, int(counts["a"]+counts["b"]), owned, "every partition owned")
			require.LessOrEqual(t, most-least, 1, "balanced")
		})
	}
}

// Stale and future epochs are fenced, with the lost-response exception;
// bad joins and unknown members are refused; none of them changes the
// group.
func TestConsumerGroupRefusals(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newConsumerGroup("g", topics(map[string]int32{"t": 2}), 45*time.Second, 5*time.Second, time.Minute)
	a := &consumerClient{id: "a", subs: []string{"t"}}
	require.NoError(t, a.heartbeat(g, now, false))
	epoch := g.epoch

	for name, tc := range map[string]struct {
		req consumerHeartbeat
		err error
	}{
		"future epoch":      {consumerHeartbeat{MemberID: "a", MemberEpoch: 5, Owns: true, Owned: a.owned}, ErrFencedMemberEpoch},
		"unknown member":    {consumerHeartbeat{MemberID: "z", MemberEpoch: 1}, ErrUnknownMemberID},
		"no member id":      {consumerHeartbeat{MemberEpoch: 0, Owns: true, Owned: map[string][]int32{}, Subscribed: []string{"t"}}, ErrUnknownMemberID},
		"join owning":       {consumerHeartbeat{MemberID: "b", MemberEpoch: 0, Owns: true, Owned: map[string][]int32{"t": {0}}, Subscribed: []string{"t"}}, ErrInvalidHeartbeat},
		"join without subs": {consumerHeartbeat{MemberID: "b", MemberEpoch: 0, Owns: true, Owned: map[string][]int32{}}, ErrInvalidHeartbeat},
		"unknown assignor":  {consumerHeartbeat{MemberID: "a", MemberEpoch: 1, Assignor: "sticky"}, ErrUnsupportedAssignor},
		"leave of a nobody": {consumerHeartbeat{MemberID: "z", MemberEpoch: epochLeave}, ErrUnknownMemberID},
		"rejoin claiming":   {consumerHeartbeat{MemberID: "a", MemberEpoch: 0, Owns: true, Owned: map[string][]int32{"t": {0, 1, 7}}}, ErrInvalidHeartbeat},
	} {
		_, err := g.heartbeat(tc.req, now)
		require.ErrorIs(t, err, tc.err, name)
		require.Equal(t, epoch, g.epoch, "%s changed the group", name)
		require.Len(t, g.members, 1, name)
	}

	// A second member moves a to epoch 2 in a response a never gets; a's
	// heartbeat at epoch 1 is then accepted (its previous epoch, owning
	// no more than it had) and told its assignment again.
	b := &consumerClient{id: "b", subs: []string{"t"}}
	require.NoError(t, b.heartbeat(g, now, false))
	require.NoError(t, a.heartbeat(g, now, true)) // revocation lost
	require.NoError(t, a.heartbeat(g, now, true)) // revoked? the owned set says no: still revoking
	require.NoError(t, a.heartbeat(g, now, false))
	require.Len(t, a.owned["t"], 1, "a is told to give one up")
	require.NoError(t, a.heartbeat(g, now, false))
	require.Equal(t, g.targetEpoch, a.epoch)
	// A third member moves a on again: an epoch older than a's previous
	// one is fenced.
	old := a.epoch
	c := &consumerClient{id: "c", subs: []string{"t"}}
	require.NoError(t, c.heartbeat(g, now, false))
	for range 3 {
		require.NoError(t, a.heartbeat(g, now, false))
	}
	require.Greater(t, a.epoch, old)
	_, err := g.heartbeat(consumerHeartbeat{MemberID: "a", MemberEpoch: old - 1, Owns: true, Owned: a.owned}, now)
	require.ErrorIs(t, err, ErrFencedMemberEpoch, "older than the previous epoch")
}

// A member that goes silent loses its partitions at the session timeout;
// one that does not revoke within its rebalance timeout is removed.
func TestConsumerGroupTimeouts(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newConsumerGroup("g", topics(map[string]int32{"t": 4}), 10*time.Second, time.Second, 3*time.Second)
	a := &consumerClient{id: "a", subs: []string{"t"}}
	b := &consumerClient{id: "b", subs: []string{"t"}}
	require.NoError(t, a.heartbeat(g, now, false))
	require.NoError(t, b.heartbeat(g, now, false))
	require.NoError(t, a.heartbeat(g, now, false)) // told to revoke two

	// a never reports the revocation; b keeps heartbeating.
	for range 4 {
		now = now.Add(time.Second)
		require.NoError(t, b.heartbeat(g, now, false))
		g.tick(now)
	}
	require.NotContains(t, g.members, "a", "removed past its rebalance timeout")
	require.NoError(t, b.heartbeat(g, now, false))
	require.Len(t, b.owned["t"], 4)

	// b goes silent: removed at the session timeout.
	require.False(t, g.tick(now.Add(5*time.Second)))
	require.True(t, g.tick(now.Add(11*time.Second)))
	require.Empty(t, g.members)
}

// The range assignor gives members the same partition numbers of
// co-partitioned topics; the group uses it when most members ask.
func TestConsumerGroupRangeAssignor(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newConsumerGroup("g", topics(map[string]int32{"x": 4, "y": 4}), 45*time.Second, time.Second, time.Minute)
	join := func(id string) map[string][]int32 {
		resp, err := g.heartbeat(consumerHeartbeat{MemberID: id, Owns: true, Owned: map[string][]int32{}, Subscribed: []string{"x", "y"}, Assignor: "range"}, now)
		require.NoError(t, err)
		return resp.Assignment
	}
	join("m1")
	join("m2")
	require.Equal(t, "range", g.assignor())
	require.Equal(t, map[tp]bool{{"x", 0}: true, {"x", 1}: true, {"y", 0}: true, {"y", 1}: true}, g.target["m1"])
	require.Equal(t, map[tp]bool{{"x", 2}: true, {"x", 3}: true, {"y", 2}: true, {"y", 3}: true}, g.target["m2"])
}
