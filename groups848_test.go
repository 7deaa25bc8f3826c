package spool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
)

// The in-process consumer under KIP-848 (GroupProtocolConsumer): the
// coordinator assigns, members reconcile on their own heartbeats.

func group848Broker(t testing.TB, dir string) *Broker {
	return openBroker(t, dir, Options{GroupMinSessionTimeout: 50 * time.Millisecond, OffsetsTopicPartitions: 3,
		GroupConsumerHeartbeatInterval: 30 * time.Millisecond, GroupConsumerSessionTimeout: 500 * time.Millisecond})
}

func group848Config(name string, topics ...string) ConsumerConfig {
	cfg := groupConfig(name, topics...)
	cfg.GroupProtocol = GroupProtocolConsumer
	return cfg
}

// With 3 partitions and 4 members one member is idle; every record is
// consumed; no partition ever has two owners. With either server assignor.
func TestGroup848SharesPartitions(t *testing.T) {
	for _, assignor := range []string{"uniform", "range"} {
		t.Run(assignor, func(t *testing.T) {
			b := group848Broker(t, t.TempDir())
			defer b.Close()
			require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 3}))
			produceN(t, b, "t", 0, 300)
			own := newOwnership(t)
			var members []*member
			for i := range 4 {
				cfg := group848Config("g", "t")
				cfg.ServerAssignor = assignor
				own.hooks(&cfg, fmt.Sprint("m", i))
				members = append(members, startMember(t, b, cfg))
			}
			everyRecord(t, 300, members...)
			require.Eventually(t, func() bool {
				idle := 0
				for _, m := range members {
					if len(m.assignment()) == 0 {
						idle++
					}
				}
				d, err := b.Groups().ConsumerDescribe("g")
				return err == nil && d.State == group.Stable && d.Assignor == assignor && idle == 1
			}, 20*time.Second, 10*time.Millisecond)
			for _, m := range members {
				m.close()
			}
		})
	}
}

// A member that leaves, or crashes (is silent past the session timeout),
// has its partitions taken over; nothing is lost, nothing double-owned.
func TestGroup848MembersLeaveAndCrash(t *testing.T) {
	for _, how := range []string{"leave", "crash"} {
		t.Run(how, func(t *testing.T) {
			b := group848Broker(t, t.TempDir())
			defer b.Close()
			require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 4}))
			own := newOwnership(t)
			var members []*member
			for i := range 3 {
				cfg := group848Config("g", "t")
				own.hooks(&cfg, fmt.Sprint("m", i))
				members = append(members, startMember(t, b, cfg))
			}
			produceN(t, b, "t", 0, 100)
			everyRecord(t, 100, members...)
			gone := members[0]
			var held int
			var crashed time.Time
			if how == "leave" {
				gone.close()
			} else {
				held, crashed = len(gone.assignment()), time.Now()
				gone.crash()
				own.mu.Lock()
				for tp, o := range own.owner {
					if o == "m0" {
						delete(own.owner, tp) // the crash revoked nothing: forget it
					}
				}
				own.mu.Unlock()
			}
			produceN(t, b, "t", 100, 100)
			everyRecord(t, 200, members...)
			require.Eventually(t, func() bool {
				n := 0
				for _, m := range members[1:] {
					n += len(m.assignment())
				}
				return n == 4
			}, 10*time.Second, 10*time.Millisecond, "the survivors hold all 4 partitions")
			if held > 0 {
				// Not given away while the member might be alive: not
				// before its session timeout (500 ms from its last
				// heartbeat, at most 30 ms before the crash).
				require.GreaterOrEqual(t, time.Since(crashed), 400*time.Millisecond)
			}
			for _, m := range members[1:] {
				m.close()
			}
		})
	}
}

// Members coming and going many times: no partition ever has two owners,
// every record is consumed.
func TestGroup848ChurnNeverDoubleOwns(t *testing.T) {
	b := group848Broker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 6}))
	own := newOwnership(t)
	var all, live []*member
	add := func(i int) {
		cfg := group848Config("g", "t")
		own.hooks(&cfg, fmt.Sprint("m", i))
		m := startMember(t, b, cfg)
		all, live = append(all, m), append(live, m)
	}
	for i := range 3 {
		add(i)
	}
	total := 0
	for round := range 8 {
		produceN(t, b, "t", total, 50)
		total += 50
		if round%2 == 0 {
			add(3 + round)
		} else {
			live[0].close()
			live = live[1:]
		}
		time.Sleep(50 * time.Millisecond)
	}
	everyRecord(t, total, all...)
	for _, m := range live {
		m.close()
	}
}

// Offsets are shared between the protocols: a classic group's commits are
// where the group's KIP-848 members resume, and back; a broker restart
// keeps them.
func TestGroupProtocolsShareOffsets(t *testing.T) {
	dir := t.TempDir()
	b := group848Broker(t, dir)
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 2}))
	produceN(t, b, "t", 0, 100)
	consume := func(b *Broker, cfg ConsumerConfig, n int) []Record {
		t.Helper()
		cfg.AutoCommit = Disabled
		c, err := b.NewConsumer(cfg)
		require.NoError(t, err)
		var got []Record
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < n && time.Now().Before(deadline) {
			recs, err := c.Poll(context.Background())
			require.NoError(t, err)
			got = append(got, recs...)
		}
		require.NoError(t, c.Commit(context.Background()))
		require.NoError(t, c.Close())
		return got
	}
	require.Len(t, consume(b, groupConfig("g", "t"), 100), 100)
	produceN(t, b, "t", 100, 50)
	got := consume(b, group848Config("g", "t"), 50)
	require.Len(t, got, 50, "the KIP-848 member resumed at the classic commits")
	require.NoError(t, b.Close())

	b = group848Broker(t, dir)
	defer b.Close()
	produceN(t, b, "t", 150, 20)
	got = consume(b, groupConfig("g", "t"), 20)
	require.Len(t, got, 20, "and the classic member at the KIP-848 commits, after a restart")
	for _, r := range got {
		var i int
		_, err := fmt.Sscanf(string(r.Value), "v%d", &i)
		require.NoError(t, err)
		require.GreaterOrEqual(t, i, 150)
	}
}

func TestGroup848ConsumerConfig(t *testing.T) {
	b := group848Broker(t, t.TempDir())
	defer b.Close()
	for name, cfg := range map[string]ConsumerConfig{
		"unknown protocol":        {Group: "g", Topics: []string{"t"}, GroupProtocol: "eager"},
		"unknown server assignor": {Group: "g", Topics: []string{"t"}, GroupProtocol: GroupProtocolConsumer, ServerAssignor: "sticky"},
		"classic server assignor": {Group: "g", Topics: []string{"t"}, ServerAssignor: "range"},
	} {
		_, err := b.NewConsumer(cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
