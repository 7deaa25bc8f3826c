package group

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRebalance measures, in a group of 10 members consuming one
// topic of 100 partitions (range assignor, eager), the time from one member
// leaving until the 9 others have all completed JoinGroup and SyncGroup of
// the next generation. Members are goroutines heartbeating every
// millisecond that rejoin as soon as a heartbeat says so. Between
// iterations (untimed) a new member joins to make 10 again.
func BenchmarkRebalance(b *testing.B) {
	c := NewCoordinator(Options{})
	defer c.Close()
	partitions := map[string]int32{"t": 100}

	type running struct {
		m      *testClient
		cancel context.CancelFunc
		done   chan error
		last   int32
	}
	type event struct {
		r   *running
		gen int32
	}
	events := make(chan event, 4096)
	start := func() *running {
		r := &running{m: newTestClient(c, Range(), []string{"t"}, partitions), done: make(chan error, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		gens := make(chan int32)
		go func() { r.done <- r.m.run(ctx, time.Millisecond, gens) }()
		go func() {
			for {
				select {
				case g := <-gens:
					events <- event{r, g}
				case <-ctx.Done():
					return
				}
			}
		}()
		return r
	}
	// settle waits until every member of rs has joined one generation
	// after `after` and the group is Stable with just them.
	settle := func(rs []*running, after int32) int32 {
		deadline := time.After(30 * time.Second)
		in := make(map[*running]bool)
		for _, r := range rs {
			in[r] = true
		}
		for {
			gen, ok := rs[0].last, true
			for _, r := range rs {
				ok = ok && r.last > after && r.last == gen
			}
			if ok {
				if d, err := c.Describe("g"); err == nil && d.State == Stable && d.Generation == gen && len(d.Members) == len(rs) {
					return gen
				}
			}
			select {
			case e := <-events:
				e.r.last = e.gen
			case <-time.After(time.Millisecond):
			case <-deadline:
				b.Fatal("the group did not settle")
			}
		}
	}

	members := make([]*running, 10)
	for i := range members {
		members[i] = start()
	}
	gen := settle(members, 0)
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		leaving := members[0]
		leaving.cancel()
		if err := <-leaving.done; err != nil {
			b.Fatal(err)
		}
		members = members[1:]
		b.StartTimer()
		t0 := time.Now()
		if _, err := c.Leave(LeaveRequest{Group: "g", Members: []LeaveMember{{MemberID: leaving.m.id}}}); err != nil {
			b.Fatal(err)
		}
		gen = settle(members, gen)
		total += time.Since(t0)
		b.StopTimer()
		members = append(members, start())
		gen = settle(members, gen)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "rebalance-ms")
	for _, r := range members {
		r.cancel()
		<-r.done
	}
}

// benchStore is a memory OffsetStore: the latest offset per partition.
type benchStore struct {
	mu      sync.Mutex
	offsets map[string]map[TopicPartition]OffsetAndMetadata
}

func (s *benchStore) StoreOffsets(group string, commits []StoredOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.offsets[group]
	if m == nil {
		m = make(map[TopicPartition]OffsetAndMetadata)
		s.offsets[group] = m
	}
	for _, c := range commits {
		m[c.TopicPartition] = c.OffsetAndMetadata
	}
	return nil
}

// BenchmarkCommitOffsets measures OffsetCommit of one partition by a member
// of a Stable group, with a memory Store: one group serially, and many
// groups in parallel.
func BenchmarkCommitOffsets(b *testing.B) {
	b.Run("one-group", func(b *testing.B) {
		c := NewCoordinator(Options{Store: &benchStore{offsets: map[string]map[TopicPartition]OffsetAndMetadata{}}})
		defer c.Close()
		m := newTestClient(c, Range(), []string{"t"}, map[string]int32{"t": 100})
		if err := m.join(context.Background()); err != nil {
			b.Fatal(err)
		}
		req := CommitRequest{Group: "g", MemberID: m.id, Generation: m.gen}
		b.ReportAllocs()
		b.ResetTimer()
		t0 := time.Now()
		for i := range b.N {
			req.Offsets = map[TopicPartition]OffsetAndMetadata{{"t", int32(i % 100)}: {Offset: int64(i)}}
			if _, err := c.CommitOffsets(req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "commits/s")
	})
	b.Run("parallel-groups", func(b *testing.B) {
		c := NewCoordinator(Options{Store: &benchStore{offsets: map[string]map[TopicPartition]OffsetAndMetadata{}}})
		defer c.Close()
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		t0 := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			req := CommitRequest{Group: fmt.Sprintf("g%d", next.Add(1)), Generation: -1}
			i := 0
			for pb.Next() {
				req.Offsets = map[TopicPartition]OffsetAndMetadata{{"t", int32(i % 100)}: {Offset: int64(i)}}
				if _, err := c.CommitOffsets(req); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "commits/s")
	})
}

// BenchmarkCooperativeSticky measures one assignment of 1000 partitions
// over 50 members that own a balanced assignment, when a 51st joins.
func BenchmarkCooperativeSticky(b *testing.B) {
	partitions := map[string]int32{"a": 400, "b": 600}
	members := make([]AssignMember, 50)
	for i := range members {
		members[i] = AssignMember{ID: fmt.Sprintf("m%02d", i), Topics: []string{"a", "b"}, Generation: -1}
	}
	prev := CooperativeSticky().Assign(members, partitions)
	for i := range members {
		members[i].Generation = 1
		for t, ps := range prev[members[i].ID] {
			for _, p := range ps {
				members[i].Owned = append(members[i].Owned, TopicPartition{t, p})
			}
		}
	}
	members = append(members, AssignMember{ID: "new", Topics: []string{"a", "b"}, Generation: -1})
	b.ReportAllocs()
	for range b.N {
		CooperativeSticky().Assign(members, partitions)
	}
}
