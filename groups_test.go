package spool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
)

// groupBroker is a broker whose groups notice silence quickly.
func groupBroker(t testing.TB, dir string) *Broker {
	return openBroker(t, dir, Options{GroupMinSessionTimeout: 50 * time.Millisecond, OffsetsTopicPartitions: 3})
}

func groupConfig(name string, topics ...string) ConsumerConfig {
	return ConsumerConfig{
		Group: name, Topics: topics, FetchMaxWait: 20 * time.Millisecond, AutoOffsetReset: ResetEarliest,
		SessionTimeout: 400 * time.Millisecond, HeartbeatInterval: 30 * time.Millisecond,
		RebalanceTimeout: 5 * time.Second, AutoCommitInterval: 50 * time.Millisecond,
	}
}

func produceN(t testing.TB, b *Broker, topic string, from, n int) {
	t.Helper()
	p, err := b.NewProducer(ProducerConfig{Linger: time.Millisecond})
	require.NoError(t, err)
	for i := from; i < from+n; i++ {
		p.Produce(context.Background(), Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint("v", i))}, nil)
	}
	require.NoError(t, p.Close())
}

// ownership follows OnAssigned/OnRevoked of many members and fails the
// test if a partition ever has two owners.
type ownership struct {
	mu    sync.Mutex
	t     testing.TB
	owner map[TopicPartition]string
}

func newOwnership(t testing.TB) *ownership {
	return &ownership{t: t, owner: map[TopicPartition]string{}}
}

func (o *ownership) hooks(cfg *ConsumerConfig, name string) {
	cfg.OnAssigned = func(tps []TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, tp := range tps {
			if prev, ok := o.owner[tp]; ok && prev != name {
				o.t.Errorf("%v given to %s while %s owns it", tp, name, prev)
			}
			o.owner[tp] = name
		}
	}
	cfg.OnRevoked = func(tps []TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, tp := range tps {
			if o.owner[tp] == name {
				delete(o.owner, tp)
			}
		}
	}
}

// member polls in a goroutine until stopped, recording what it consumes.
type member struct {
	c       *Consumer
	mu      sync.Mutex
	got     []Record
	stop    chan struct{}
	done    chan struct{}
	crashed bool
}

func startMember(t testing.TB, b *Broker, cfg ConsumerConfig) *member {
	c, err := b.NewConsumer(cfg)
	require.NoError(t, err)
	m := &member{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			recs, err := c.Poll(context.Background())
			if err != nil {
				select {
				case <-m.stop:
				default:
					t.Errorf("poll: %v", err)
				}
				return
			}
			m.mu.Lock()
			m.got = append(m.got, recs...)
			m.mu.Unlock()
		}
	}()
	return m
}

// close stops polling and closes the consumer (which leaves the group).
func (m *member) close() {
	close(m.stop)
	<-m.done
	m.c.Close()
}

// crash stops polling and heartbeating without leaving the group, as a
// process dying would.
func (m *member) crash() {
	close(m.stop)
	<-m.done
	m.c.stopHeartbeat()
	m.c.mu.Lock()
	m.c.closed = true
	m.c.mu.Unlock()
}

func (m *member) records() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

func (m *member) assignment() []TopicPartition { return m.c.ownedPartitions() }

// everyRecordOnce waits until the members together have consumed all n
// records of topic, and checks each value was seen at least once.
func everyRecord(t *testing.T, n int, members ...*member) map[string]int {
	t.Helper()
	var seen map[string]int
	require.Eventually(t, func() bool {
		seen = map[string]int{}
		for _, m := range members {
			for _, r := range m.records() {
				seen[string(r.Value)]++
			}
		}
		return len(seen) == n
	}, 20*time.Second, 10*time.Millisecond, "consumed %d of %d", len(seen), n)
	return seen
}

// With 3 partitions and 4 members, one member is idle; every record is
// consumed, and no partition ever has two owners.
func TestGroupSharesPartitions(t *testing.T) {
	for _, assignor := range []group.Assignor{group.Range(), group.RoundRobin(), group.CooperativeSticky()} {
		t.Run(assignor.Name(), func(t *testing.T) {
			b := groupBroker(t, t.TempDir())
			defer b.Close()
			require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 3}))
			produceN(t, b, "t", 0, 300)
			own := newOwnership(t)
			var members []*member
			for i := 0; i < 4; i++ {
				cfg := groupConfig("g", "t")
				cfg.Assignors = []group.Assignor{assignor}
				own.hooks(&cfg, fmt.Sprint("m", i))
				members = append(members, startMember(t, b, cfg))
			}
			everyRecord(t, 300, members...)
			require.Eventually(t, func() bool {
				idle, busy := 0, 0
				for _, m := range members {
					if len(m.assignment()) == 0 {
						idle++
					} else {
						busy++
					}
				}
				d, err := b.Groups().Describe("g")
				return err == nil && d.State == group.Stable && idle == 1 && busy == 3
			}, 20*time.Second, 10*time.Millisecond)
			for _, m := range members {
				m.close()
			}
		})
	}
}

func TestTwoGroupsEachGetEveryRecord(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 3}))
	produceN(t, b, "t", 0, 200)
	a1, a2 := startMember(t, b, groupConfig("a", "t")), startMember(t, b, groupConfig("a", "t"))
	b1 := startMember(t, b, groupConfig("b", "t"))
	everyRecord(t, 200, a1, a2)
	everyRecord(t, 200, b1)
	for _, m := range []*member{a1, a2, b1} {
		m.close()
	}
}

// A member that leaves, or crashes (goes silent past its session timeout),
// has its partitions taken over; nothing is lost.
func TestMembersLeaveAndCrash(t *testing.T) {
	for _, how := range []string{"leave", "crash"} {
		t.Run(how, func(t *testing.T) {
			b := groupBroker(t, t.TempDir())
			defer b.Close()
			require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 4}))
			own := newOwnership(t)
			var members []*member
			for i := 0; i < 3; i++ {
				cfg := groupConfig("g", "t")
				own.hooks(&cfg, fmt.Sprint("m", i))
				members = append(members, startMember(t, b, cfg))
			}
			produceN(t, b, "t", 0, 100)
			everyRecord(t, 100, members...)
			gone := members[0]
			if how == "leave" {
				gone.close()
			} else {
				gone.crash()
				// Its partitions are not given away while it might be
				// alive, but are after the session timeout.
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
			for _, m := range members[1:] {
				m.close()
			}
		})
	}
}

// Members coming and going many times, under both protocols: no
// partition ever has two owners, and every record is consumed.
func TestRebalanceChurnNeverDoubleOwns(t *testing.T) {
	for _, assignor := range []group.Assignor{group.Range(), group.CooperativeSticky()} {
		t.Run(assignor.Name(), func(t *testing.T) {
			b := groupBroker(t, t.TempDir())
			defer b.Close()
			require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 6}))
			own := newOwnership(t)
			var all, live []*member
			add := func(i int) {
				cfg := groupConfig("g", "t")
				cfg.Assignors = []group.Assignor{assignor}
				own.hooks(&cfg, fmt.Sprint("m", i))
				m := startMember(t, b, cfg)
				all, live = append(all, m), append(live, m)
			}
			for i := 0; i < 3; i++ {
				add(i)
			}
			total := 0
			for round := 0; round < 8; round++ {
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
		})
	}
}

// After a broker restart, a group resumes exactly at its committed
// offsets: nothing re-read, nothing skipped.
func TestGroupResumesAtCommittedOffsetsAfterRestart(t *testing.T) {
	dir := t.TempDir()
	b := groupBroker(t, dir)
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 2}))
	produceN(t, b, "t", 0, 100)
	cfg := groupConfig("g", "t")
	cfg.AutoCommit = Disabled
	c, err := b.NewConsumer(cfg)
	require.NoError(t, err)
	var got []Record
	for len(got) < 100 {
		recs, err := c.Poll(context.Background())
		require.NoError(t, err)
		got = append(got, recs...)
	}
	require.NoError(t, c.Commit(context.Background()))
	require.NoError(t, c.Close())
	require.NoError(t, b.Close())

	b = groupBroker(t, dir)
	defer b.Close()
	produceN(t, b, "t", 100, 50)
	c, err = b.NewConsumer(cfg)
	require.NoError(t, err)
	defer c.Close()
	var after []Record
	deadline := time.Now().Add(10 * time.Second)
	for len(after) < 50 && time.Now().Before(deadline) {
		recs, err := c.Poll(context.Background())
		require.NoError(t, err)
		after = append(after, recs...)
	}
	require.Len(t, after, 50)
	for _, r := range after {
		var i int
		fmt.Sscanf(string(r.Value), "v%d", &i)
		require.GreaterOrEqual(t, i, 100, "record %d was consumed before the restart", i)
	}
	recs, err := c.Poll(context.Background())
	require.NoError(t, err)
	require.Empty(t, recs)
}

// A static member that restarts within its session timeout gets its
// partitions back without a rebalance.
func TestStaticMemberRestartKeepsPartitions(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 4}))
	cfgA, cfgB := groupConfig("g", "t"), groupConfig("g", "t")
	cfgA.GroupInstanceID, cfgB.GroupInstanceID = "a", "b"
	cfgA.SessionTimeout, cfgB.SessionTimeout = 2*time.Second, 2*time.Second
	a, bm := startMember(t, b, cfgA), startMember(t, b, cfgB)
	require.Eventually(t, func() bool {
		return len(a.assignment()) == 2 && len(bm.assignment()) == 2
	}, 10*time.Second, 10*time.Millisecond)
	before := a.assignment()
	d, err := b.Groups().Describe("g")
	require.NoError(t, err)
	gen := generationOf(t, b, "g")

	a.close() // a static member does not leave
	a = startMember(t, b, cfgA)
	require.Eventually(t, func() bool { return len(a.assignment()) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, before, a.assignment())
	require.Equal(t, gen, generationOf(t, b, "g"), "no rebalance")
	require.Equal(t, group.Stable, d.State)
	a.close()
	bm.close()
}

func generationOf(t *testing.T, b *Broker, g string) int32 {
	t.Helper()
	d, err := b.Groups().Describe(g)
	require.NoError(t, err)
	return d.Generation
}

// Commit after processing: a crash before the commit re-delivers (at least
// once). Commit before processing: a crash after it loses what was not
// processed (at most once).
func TestDeliverySemantics(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 1}))
	produceN(t, b, "t", 0, 10)
	ctx := context.Background()
	poll := func(c *Consumer) []Record {
		var out []Record
		for len(out) == 0 {
			recs, err := c.Poll(ctx)
			require.NoError(t, err)
			out = recs
		}
		return out
	}
	crash := func(c *Consumer) {
		c.stopHeartbeat()
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	}

	// At least once: the records are processed, the process dies before it
	// commits; the next member reads them again.
	cfg := groupConfig("alo", "t")
	cfg.AutoCommit = Disabled
	c, err := b.NewConsumer(cfg)
	require.NoError(t, err)
	first := poll(c)
	crash(c)
	c, err = b.NewConsumer(cfg)
	require.NoError(t, err)
	again := poll(c)
	require.Equal(t, first[0].Offset, again[0].Offset, "re-delivered")
	require.NoError(t, c.Commit(ctx))
	require.NoError(t, c.Close())

	// At most once: commit first, then die before processing; nothing is
	// re-delivered.
	cfg = groupConfig("amo", "t")
	cfg.AutoCommit = Disabled
	c, err = b.NewConsumer(cfg)
	require.NoError(t, err)
	taken := poll(c)
	require.NoError(t, c.Commit(ctx))
	crash(c)
	c, err = b.NewConsumer(cfg)
	require.NoError(t, err)
	defer c.Close()
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	for _, r := range recs {
		require.Greater(t, r.Offset, taken[len(taken)-1].Offset, "nothing committed is re-delivered")
	}
}

// Under auto-commit, a group's committed offsets only move forward.
func TestAutoCommittedOffsetsNeverGoBack(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "t", TopicConfig{Partitions: 2}))
	var stop atomic.Bool
	go func() {
		for i := 0; !stop.Load(); i++ {
			b.Produce(context.Background(), Record{Topic: "t", Value: []byte(fmt.Sprint(i))})
		}
	}()
	defer stop.Store(true)
	m1, m2 := startMember(t, b, groupConfig("g", "t")), startMember(t, b, groupConfig("g", "t"))
	last := map[TopicPartition]int64{}
	start := time.Now()
	m2open := true
	for time.Since(start) < 2*time.Second {
		got, err := b.Groups().FetchOffsets("g", nil)
		require.NoError(t, err)
		for tp, o := range got {
			require.GreaterOrEqual(t, o.Offset, last[tp], "%v went back", tp)
			last[tp] = o.Offset
		}
		if m2open && time.Since(start) > time.Second {
			m2.close() // a rebalance in the middle
			m2open = false
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Len(t, last, 2)
	stop.Store(true)
	m1.close()
	if m2open {
		m2.close()
	}
}

func TestGroupConsumerConfig(t *testing.T) {
	b := groupBroker(t, t.TempDir())
	defer b.Close()
	_, err := b.NewConsumer(ConsumerConfig{Group: "g"})
	require.ErrorIs(t, err, ErrInvalidConfig, "a group needs topics")
	_, err = b.NewConsumer(ConsumerConfig{Topics: []string{"t"}})
	require.ErrorIs(t, err, ErrInvalidConfig, "topics need a group")
	c, err := b.NewConsumer(groupConfig("g", "t"))
	require.NoError(t, err)
	require.ErrorIs(t, c.Assign("t"), ErrGroupMode)
	nc, err := b.NewConsumer(ConsumerConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, nc.Commit(context.Background()), ErrInvalidConfig)
}
