package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memberHarness runs ConsumerGroup members of one group on a Coordinator
// in this process, each polling in its goroutine, and checks that no
// partition ever has two owners.
type memberHarness struct {
	t         *testing.T
	c         *Coordinator
	mu        sync.Mutex
	owner     map[TopicPartition]string
	counts    map[string]int32
	assignors []Assignor // classic members'; default range, cooperative-sticky
}

func (h *memberHarness) member(name, protocol string) *ConsumerGroup {
	h.t.Helper()
	m, err := NewConsumerGroup(Local(h.c), ConsumerGroupConfig{
		Group: "g", Topics: []string{"t"}, Protocol: protocol, ClientID: name,
		SessionTimeout: time.Second, HeartbeatInterval: 20 * time.Millisecond, RebalanceTimeout: 5 * time.Second,
		PartitionCount: func(t string) int32 { return h.counts[t] }, Assignors: h.assignors,
		OnAssigned: func(_ context.Context, tps []TopicPartition) {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, tp := range tps {
				if o, ok := h.owner[tp]; ok && o != name {
					h.t.Errorf("%v given to %s while %s owns it", tp, name, o)
				}
				h.owner[tp] = name
			}
		},
		OnRevoked: func(_ context.Context, tps []TopicPartition) {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, tp := range tps {
				if h.owner[tp] == name {
					delete(h.owner, tp)
				}
			}
		},
	})
	require.NoError(h.t, err)
	return m
}

// run polls m until stopped, as an application's loop does between its
// own work.
func run(t *testing.T, m *ConsumerGroup) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := m.Poll(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("poll: %v", err)
				return
			}
			select {
			case <-m.Wake():
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// Members of either protocol joining and leaving through a Coordinator in
// this process: no partition ever has two owners, and once the churn ends
// the survivors own every partition, evenly.
func TestConsumerGroupMembers(t *testing.T) {
	for _, protocol := range []string{ProtocolClassic, ProtocolConsumer} {
		t.Run(protocol, func(t *testing.T) {
			c := NewCoordinator(Options{ConsumerHeartbeatInterval: 20 * time.Millisecond, ConsumerSessionTimeout: time.Second,
				MinSessionTimeout: 100 * time.Millisecond, PartitionCount: func(string) int32 { return 6 }})
			defer c.Close()
			h := &memberHarness{t: t, c: c, owner: map[TopicPartition]string{}, counts: map[string]int32{"t": 6}}
			var live []*ConsumerGroup
			var stops []func()
			for i := range 3 {
				m := h.member(fmt.Sprint("m", i), protocol)
				live, stops = append(live, m), append(stops, run(t, m))
			}
			for i := range 4 {
				time.Sleep(50 * time.Millisecond)
				if i%2 == 0 {
					stops[0]()
					require.NoError(t, live[0].Close(context.Background()))
					live, stops = live[1:], stops[1:]
				} else {
					m := h.member(fmt.Sprint("n", i), protocol)
					live, stops = append(live, m), append(stops, run(t, m))
				}
			}
			require.Eventually(t, func() bool {
				total, least, most := 0, 6, 0
				for _, m := range live {
					n := len(m.Assigned())
					total += n
					least, most = min(least, n), max(most, n)
				}
				return total == 6 && most-least <= 1
			}, 10*time.Second, 10*time.Millisecond)
			for _, stop := range stops {
				stop()
			}
			// Commits go under each member's identity.
			for _, m := range live {
				offsets := map[TopicPartition]OffsetAndMetadata{}
				for _, tp := range m.Assigned() {
					offsets[tp] = OffsetAndMetadata{Offset: 42}
				}
				require.NoError(t, m.Commit(context.Background(), offsets))
				got, err := m.FetchOffsets(context.Background(), m.Assigned())
				require.NoError(t, err)
				require.Len(t, got, len(offsets))
				require.NoError(t, m.Close(context.Background()))
			}
			require.Empty(t, h.owner, "Close revoked everything")
		})
	}
}

// A commit of a member that fell behind is refused with the protocol's
// error; bad configurations are refused.
func TestConsumerGroupMemberRefusals(t *testing.T) {
	c := NewCoordinator(Options{PartitionCount: func(string) int32 { return 2 }})
	defer c.Close()
	counts := func(string) int32 { return 2 }
	for name, cfg := range map[string]ConsumerGroupConfig{
		"no group":          {Topics: []string{"t"}, PartitionCount: counts},
		"no topics":         {Group: "g", PartitionCount: counts},
		"no counts":         {Group: "g", Topics: []string{"t"}},
		"unknown protocol":  {Group: "g", Topics: []string{"t"}, Protocol: "eager", PartitionCount: counts},
		"server assignor":   {Group: "g", Topics: []string{"t"}, ServerAssignor: "range", PartitionCount: counts},
		"unknown assignor":  {Group: "g", Topics: []string{"t"}, Protocol: ProtocolConsumer, ServerAssignor: "sticky"},
		"negative timeouts": {Group: "g", Topics: []string{"t"}, SessionTimeout: -1, PartitionCount: counts},
	} {
		_, err := NewConsumerGroup(Local(c), cfg)
		require.Error(t, err, name)
	}
	m, err := NewConsumerGroup(Local(c), ConsumerGroupConfig{Group: "g", Topics: []string{"t"}, Protocol: ProtocolConsumer})
	require.NoError(t, err)
	require.NoError(t, m.Poll(context.Background()))
	id, epoch := m.Identity()
	require.NotEmpty(t, id)
	require.Equal(t, int32(1), epoch)
	require.Equal(t, []TopicPartition{{"t", 0}, {"t", 1}}, m.Assigned())
	m.mu.Lock()
	m.gen = 7 // a member that believes in an epoch the group never had
	m.mu.Unlock()
	err = m.Commit(context.Background(), map[TopicPartition]OffsetAndMetadata{{"t", 0}: {Offset: 1}})
	require.ErrorIs(t, err, ErrStaleMemberEpoch)
	require.NoError(t, m.Close(context.Background()))
	require.Error(t, m.Poll(context.Background()), "closed")
	require.True(t, slices.Equal([]TopicPartition{}, m.Assigned()) || len(m.Assigned()) == 0)
}

// Online upgrade and rollback: classic members and KIP-848 members in one
// group, joining and leaving in either order. The group converts when the
// first KIP-848 member arrives; the coordinator assigns everyone; no
// partition ever has two owners; at every quiet point every partition is
// owned, evenly.
func TestConsumerGroupMixedProtocols(t *testing.T) {
	for name, assignors := range map[string][]Assignor{"eager": {Range()}, "cooperative": {CooperativeSticky()}} {
		t.Run(name, func(t *testing.T) { testMixedProtocols(t, assignors) })
	}
}

func testMixedProtocols(t *testing.T, assignors []Assignor) {
	c := NewCoordinator(Options{ConsumerHeartbeatInterval: 20 * time.Millisecond, ConsumerSessionTimeout: time.Second,
		MinSessionTimeout: 100 * time.Millisecond, PartitionCount: func(string) int32 { return 6 }})
	defer c.Close()
	h := &memberHarness{t: t, c: c, owner: map[TopicPartition]string{}, counts: map[string]int32{"t": 6}, assignors: assignors}
	type live struct {
		m    *ConsumerGroup
		stop func()
	}
	var members []live
	start := func(name, protocol string) {
		m := h.member(name, protocol)
		members = append(members, live{m, run(t, m)})
	}
	leave := func(i int) {
		members[i].stop()
		require.NoError(t, members[i].m.Close(context.Background()))
		members = slices.Delete(members, i, i+1)
	}
	settled := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool {
			total, least, most := 0, 6, 0
			for _, l := range members {
				n := len(l.m.Assigned())
				total += n
				least, most = min(least, n), max(most, n)
			}
			return total == 6 && most-least <= 1
		}, 10*time.Second, 10*time.Millisecond, what)
	}
	// A classic group of two, upgraded one member at a time.
	start("classic-a", ProtocolClassic)
	start("classic-b", ProtocolClassic)
	settled("classic group")
	start("new-a", ProtocolConsumer)
	settled("converted: two classic members and one KIP-848")
	d, err := c.ConsumerDescribe("g")
	require.NoError(t, err)
	require.Len(t, d.Members, 3)
	leave(0)
	start("new-b", ProtocolConsumer)
	settled("one classic member left")
	leave(0)
	settled("KIP-848 members only")
	// A rollback: a classic member joins the consumer group.
	start("classic-c", ProtocolClassic)
	settled("rolled back one member")
	leave(0)
	leave(0)
	settled("the classic member alone")
	for len(members) > 0 {
		leave(0)
	}
	h.mu.Lock()
	require.Empty(t, h.owner)
	h.mu.Unlock()
}
