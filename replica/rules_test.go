package replica

import (
	"testing"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func state3() PartitionState {
	return PartitionState{Topic: "t", Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 5, ISR: []int32{1, 2, 3}, PartitionEpoch: 9}
}

func TestHighWatermarkIsISRMinimum(t *testing.T) {
	l := NewLeader(1, state3(), LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: 10 * time.Second}, 100, 90, t0)
	require.Equal(t, int64(90), l.HighWatermark())

	// Followers' ends are unknown until they fetch: nothing moves.
	require.False(t, l.Advance(120, t0))
	require.False(t, l.Fetch(2, 1, 110, 120, t0))
	require.Equal(t, int64(90), l.HighWatermark())
	require.True(t, l.Fetch(3, 1, 105, 120, t0))
	require.Equal(t, int64(105), l.HighWatermark(), "min over the ISR")
	require.True(t, l.Fetch(3, 1, 120, 120, t0))
	require.Equal(t, int64(110), l.HighWatermark())
	require.False(t, l.Committed(111))
	require.True(t, l.Committed(110))

	// Never backwards: a follower reporting less (it truncated, say) does
	// not lower the high watermark.
	require.False(t, l.Fetch(2, 1, 100, 120, t0))
	require.Equal(t, int64(110), l.HighWatermark())
	// A broker with no replica is ignored.
	require.False(t, l.Fetch(7, 1, 500, 120, t0))
}

func TestStrictMinISR(t *testing.T) {
	// KIP-966: an ISR below the minimum neither accepts acks=all writes nor
	// commits anything - not even what the leader alone holds.
	st := state3()
	st.ISR = []int32{1}
	l := NewLeader(1, st, LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: time.Second}, 50, 40, t0)
	require.ErrorIs(t, l.CheckAppend(true), ErrNotEnoughReplicas)
	require.NoError(t, l.CheckAppend(false), "acks=0/1 are the producer's risk to take")
	require.True(t, l.UnderMinISR())
	require.False(t, l.Advance(60, t0))
	require.Equal(t, int64(40), l.HighWatermark())

	// With min ISR 1 the lone leader commits its own log end.
	l = NewLeader(1, st, LeaderConfig{MinInSyncReplicas: 1, ReplicaLagTime: time.Second}, 50, 40, t0)
	require.True(t, l.Advance(60, t0))
	require.Equal(t, int64(60), l.HighWatermark())
}

func TestISRShrinkAndExpand(t *testing.T) {
	lag := 10 * time.Second
	l := NewLeader(1, state3(), LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: lag}, 100, 70, t0)
	_, ok := l.ProposeISR(t0.Add(lag))
	require.False(t, ok, "ISR members have ReplicaLagTime to show up")

	// Follower 2 keeps up; 3 fetches once, behind, and then goes quiet.
	now := t0
	l.Fetch(3, 1, 80, 100, now)
	for i := 0; i < 20; i++ {
		now = now.Add(time.Second)
		l.Fetch(2, 1, 100+int64(i), 100+int64(i), now)
	}
	isr, ok := l.ProposeISR(now)
	require.True(t, ok)
	require.ElementsMatch(t, []int32{1, 2}, isr)
	// While the shrink is in flight, 3 still holds the high watermark back.
	require.Equal(t, int64(80), l.HighWatermark())
	_, again := l.ProposeISR(now)
	require.False(t, again, "one change in flight at a time")

	next := l.State()
	next.ISR, next.PartitionEpoch = isr, next.PartitionEpoch+1
	require.True(t, l.Apply(next))
	require.False(t, l.Apply(next), "the same state twice is ignored")
	require.True(t, l.Advance(119, now))
	require.Equal(t, int64(119), l.HighWatermark(), "committed once 3 has left")

	// 3 comes back: behind the high watermark it stays out.
	now = now.Add(time.Second)
	l.Fetch(3, 1, 110, 130, now)
	_, ok = l.ProposeISR(now)
	require.False(t, ok)
	l.Fetch(2, 1, 130, 130, now)
	require.Equal(t, int64(130), l.HighWatermark(), "3 is neither in the ISR nor caught up")
	// Once it reaches the leader's end it is caught up: the high watermark
	// waits for it (it is about to join), and it is proposed.
	l.Fetch(3, 1, 130, 130, now)
	require.False(t, l.Fetch(2, 1, 140, 140, now))
	require.Equal(t, int64(130), l.HighWatermark(), "a caught-up joiner holds the high watermark")
	isr, ok = l.ProposeISR(now)
	require.True(t, ok)
	require.ElementsMatch(t, []int32{1, 2, 3}, isr)
	require.False(t, l.Advance(150, now))
	require.Equal(t, int64(130), l.HighWatermark(), "the pending expansion counts at once (KIP-497)")
	next = l.State()
	next.ISR, next.PartitionEpoch = isr, next.PartitionEpoch+1
	require.True(t, l.Apply(next))
	require.True(t, l.Fetch(3, 1, 140, 150, now))
	require.Equal(t, int64(140), l.HighWatermark())
}

// TestRemovedFollowerReleasesHighWatermark: a follower the controller takes
// out of the ISR without the leader asking - its broker was fenced after
// its session expired, or is shutting down - no longer holds the high
// watermark back, although it was caught up a moment ago. Kafka's leader
// waits for a caught-up follower outside the ISR only if it is eligible to
// join (Partition.isReplicaIsrEligible: not fenced, not shutting down); a
// removed follower is not until it catches up again. Without this, every
// acks=all produce to a partition of which a crashed broker was a follower
// waited ReplicaLagTime after the crash, long after the controller had
// fenced the broker.
func TestRemovedFollowerReleasesHighWatermark(t *testing.T) {
	lag := 10 * time.Second
	l := NewLeader(1, state3(), LeaderConfig{MinInSyncReplicas: 2, ReplicaLagTime: lag}, 100, 100, t0)
	l.Fetch(2, 1, 100, 100, t0)
	l.Fetch(3, 1, 100, 100, t0)
	// 2 crashes; the leader writes on, 3 keeps up.
	now := t0.Add(100 * time.Millisecond)
	l.Fetch(3, 1, 150, 150, now)
	require.Equal(t, int64(100), l.HighWatermark(), "2 is in the ISR")

	// The controller fences 2 and removes it from the ISR.
	now = now.Add(time.Second)
	next := l.State()
	next.ISR, next.PartitionEpoch = []int32{1, 3}, next.PartitionEpoch+1
	require.True(t, l.Apply(next))
	require.True(t, l.Advance(150, now))
	require.Equal(t, int64(150), l.HighWatermark(), "committed without waiting ReplicaLagTime for the removed follower")

	// Back, and caught up with the leader, it counts again (about to join).
	now = now.Add(time.Second)
	l.Fetch(2, 2, 150, 150, now)
	require.False(t, l.Advance(160, now))
	require.Equal(t, int64(150), l.HighWatermark(), "a caught-up joiner holds the high watermark")
}

func TestCaughtUpRule(t *testing.T) {
	// Replica.updateFetchState: a fetch reaching the leader's end as of
	// the previous fetch makes the follower caught up as of that fetch.
	var p Progress
	p.lastFetchLeaderEnd = -1
	p.recordFetch(50, 100, 1, t0)
	require.True(t, p.LastCaughtUp.IsZero())
	p.recordFetch(100, 140, 1, t0.Add(time.Second))
	require.Equal(t, t0, p.LastCaughtUp)
	p.recordFetch(140, 140, 1, t0.Add(2*time.Second))
	require.Equal(t, t0.Add(2*time.Second), p.LastCaughtUp)
	require.True(t, p.caughtUp(t0.Add(3*time.Second), time.Second))
	require.False(t, p.caughtUp(t0.Add(4*time.Second), time.Second))
}

func TestApplyIgnoresOtherEpochs(t *testing.T) {
	l := NewLeader(1, state3(), LeaderConfig{MinInSyncReplicas: 1, ReplicaLagTime: time.Second}, 0, 0, t0)
	st := state3()
	st.PartitionEpoch = 8
	require.False(t, l.Apply(st), "older partition epoch")
	st = state3()
	st.LeaderEpoch, st.PartitionEpoch = 6, 10
	require.False(t, l.Apply(st), "another leader epoch is a new Leader, not an update")
}

// es makes epoch entries from (epoch, start offset) pairs.
func es(pairs ...int64) []partition.EpochEntry {
	var out []partition.EpochEntry
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, partition.EpochEntry{Epoch: int32(pairs[i]), StartOffset: pairs[i+1]})
	}
	return out
}

// cache builds a real epoch cache holding entries.
func cache(t *testing.T, entries ...partition.EpochEntry) *partition.EpochCache {
	c, err := partition.OpenEpochCache(nil, t.TempDir())
	require.NoError(t, err)
	require.NoError(t, c.Reset(entries))
	return c
}

// truncate runs the follower's truncation loop against a leader's cache
// the way the driver does, returning the offset reached and the rounds.
func truncate(t *testing.T, follower *partition.EpochCache, fStart, fEnd int64, leader *partition.EpochCache, lEnd int64) (int64, int) {
	ask := follower.Latest()
	end := fEnd
	for round := 1; round < 100; round++ {
		le, lend := leader.EndOffsetFor(ask, lEnd)
		d := DecideTruncation(func(e int32) (int32, int64) { return follower.EndOffsetFor(e, end) }, fStart, end, le, lend)
		if d.Offset < end {
			end = d.Offset
			require.NoError(t, follower.TruncateFromEnd(end))
		}
		if d.Done {
			return end, round
		}
		require.Less(t, d.NextEpoch, ask, "each round asks for an older epoch")
		ask = d.NextEpoch
	}
	t.Fatal("truncation did not converge")
	return 0, 0
}

func TestTruncationByLeaderEpoch(t *testing.T) {
	for _, tc := range []struct {
		name             string
		follower         []partition.EpochEntry
		fEnd             int64
		leader           []partition.EpochEntry
		lEnd             int64
		want             int64
		rounds           int
		comment          string
		followerStartOff int64
	}{
		{name: "identical", follower: es(0, 0, 1, 10), fEnd: 20, leader: es(0, 0, 1, 10), lEnd: 20, want: 20, rounds: 1},
		{name: "follower behind", follower: es(0, 0, 1, 10), fEnd: 15, leader: es(0, 0, 1, 10, 2, 30), lEnd: 40, want: 15, rounds: 1},
		// KIP-101 scenario 1: the follower's high watermark lags; it must
		// keep what the leader's epoch holds, not cut to its HW.
		{name: "KIP-101 keeps records above the HW", follower: es(0, 0), fEnd: 2, leader: es(0, 0), lEnd: 2, want: 2, rounds: 1},
		// KIP-101 scenario 2: the follower wrote offset 1 in epoch 1 that the
		// new leader (epoch 2) never saw: the leader's epoch 1 ended at 1.
		{name: "KIP-101 divergent suffix", follower: es(0, 0, 1, 1), fEnd: 2, leader: es(0, 0, 2, 1), lEnd: 2, want: 1, rounds: 1},
		// KIP-279: the follower led epochs 2 and 3 alone; the leader jumped
		// from 1 to 4. Asking for 3 gets (1, 20); the follower knows epoch 1
		// ending at 20 too.
		{name: "KIP-279 back-to-back changes", follower: es(1, 0, 2, 20, 3, 25), fEnd: 30, leader: es(1, 0, 4, 22), lEnd: 40, want: 20, rounds: 1},
		// KIP-279 iteration: the leader answers with an epoch the follower
		// never had; the follower retreats to its own older epoch and asks
		// again.
		{name: "KIP-279 unknown epoch", follower: es(0, 0, 2, 10, 5, 20), fEnd: 30, leader: es(0, 0, 3, 8, 6, 25), lEnd: 50, want: 8, rounds: 2},
		{name: "follower empty", follower: nil, fEnd: 0, leader: es(0, 0), lEnd: 10, want: 0, rounds: 1},
		{name: "follower older than leader's first epoch", follower: es(0, 0), fEnd: 10, leader: es(3, 5), lEnd: 10, want: 5, rounds: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rounds := truncate(t, cache(t, tc.follower...), tc.followerStartOff, tc.fEnd, cache(t, tc.leader...), tc.lEnd)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.rounds, rounds)
		})
	}
	// The leader knows nothing at or below the asked epoch: keep nothing.
	d := DecideTruncation(func(int32) (int32, int64) { return 3, 10 }, 4, 10, -1, -1)
	require.Equal(t, Truncation{Offset: 4, Done: true}, d)
}

func TestElectLeader(t *testing.T) {
	all := func(int32) bool { return true }
	except := func(down ...int32) func(int32) bool {
		return func(id int32) bool {
			for _, d := range down {
				if d == id {
					return false
				}
			}
			return true
		}
	}
	l, clean := ElectLeader([]int32{1, 2, 3}, []int32{3, 2, 1}, all, false, nil)
	require.Equal(t, int32(1), l, "the preferred leader first")
	require.True(t, clean)
	l, _ = ElectLeader([]int32{1, 2, 3}, []int32{3, 2}, all, false, nil)
	require.Equal(t, int32(2), l, "ISR members in replica order")
	l, _ = ElectLeader([]int32{1, 2, 3}, []int32{1, 3}, except(1), false, nil)
	require.Equal(t, int32(3), l)
	l, clean = ElectLeader([]int32{1, 2, 3}, []int32{1}, except(1), false, nil)
	require.Equal(t, int32(-1), l, "the ISR is gone: wait")
	require.True(t, clean)

	ends := func(id int32) (int32, int64, bool) {
		return map[int32]int32{2: 4, 3: 4}[id], map[int32]int64{2: 90, 3: 95}[id], true
	}
	l, clean = ElectLeader([]int32{1, 2, 3}, []int32{1}, except(1), true, ends)
	require.Equal(t, int32(3), l, "unclean: the most up-to-date live replica")
	require.False(t, clean)
	l, _ = ElectLeader([]int32{1, 2, 3}, []int32{1}, except(1, 2, 3), true, ends)
	require.Equal(t, int32(-1), l)
}

func TestAssignReplicas(t *testing.T) {
	brokers := []int32{10, 11, 12, 13}
	a, err := AssignReplicas(brokers, 8, 3, 1)
	require.NoError(t, err)
	leaders := map[int32]int{}
	for _, rs := range a {
		require.Len(t, rs, 3)
		seen := map[int32]bool{}
		for _, r := range rs {
			require.False(t, seen[r], "a broker holds a partition once")
			seen[r] = true
		}
		leaders[rs[0]]++
	}
	for _, b := range brokers {
		require.Equal(t, 2, leaders[b], "leaders spread evenly")
	}
	_, err = AssignReplicas(brokers, 1, 5, 0)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = AssignReplicas(brokers, 1, 0, 0)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestSilentFollowerDoesNotRejoin(t *testing.T) {
	// A follower that stopped fetching while at the high watermark must not
	// be added back by the periodic check (it was flapping in and out).
	lag := time.Second
	l := NewLeader(1, state3(), LeaderConfig{MinInSyncReplicas: 1, ReplicaLagTime: lag}, 0, 0, t0)
	l.Fetch(2, 1, 0, 0, t0)
	l.Fetch(3, 1, 0, 0, t0)
	now := t0.Add(2 * lag)
	isr, ok := l.ProposeISR(now)
	require.True(t, ok)
	require.Equal(t, []int32{1}, isr)
	next := l.State()
	next.ISR, next.PartitionEpoch = isr, next.PartitionEpoch+1
	require.True(t, l.Apply(next))
	_, ok = l.ProposeISR(now.Add(time.Millisecond))
	require.False(t, ok, "followers at the HW but silent stay out")
	l.Fetch(2, 1, 0, 0, now.Add(2*time.Millisecond))
	isr, ok = l.ProposeISR(now.Add(2 * time.Millisecond))
	require.True(t, ok)
	require.Equal(t, []int32{1, 2}, isr)
}

// A leader with a damaged batch hands over to an in-sync replica holding
// the batch and leaves the ISR; with none, nothing changes.
func TestDecideResignation(t *testing.T) {
	all := func(int32) bool { return true }
	ends := func(m map[int32]int64) LogEnds {
		return func(id int32) (int32, int64, bool) { e, ok := m[id]; return 5, e, ok }
	}
	req := ResignRequest{Topic: "t", Leader: 1, LeaderEpoch: 5, Offset: 100}
	for _, tc := range []struct {
		name   string
		st     PartitionState
		req    ResignRequest
		alive  func(int32) bool
		ends   map[int32]int64
		leader int32
		isr    []int32
		err    error
	}{
		{name: "first in-sync replica in replica order", st: state3(), req: req, alive: all,
			ends: map[int32]int64{2: 150, 3: 150}, leader: 2, isr: []int32{2, 3}},
		{name: "one that does not reach the damage is skipped", st: state3(), req: req, alive: all,
			ends: map[int32]int64{2: 100, 3: 101}, leader: 3, isr: []int32{2, 3}},
		{name: "a dead replica is skipped", st: state3(), req: req, alive: func(id int32) bool { return id != 2 },
			ends: map[int32]int64{2: 150, 3: 150}, leader: 3, isr: []int32{2, 3}},
		{name: "a replica whose end is unknown is skipped", st: state3(), req: req, alive: all,
			ends: map[int32]int64{3: 150}, leader: 3, isr: []int32{2, 3}},
		{name: "out of sync replicas never take over", st: func() PartitionState { s := state3(); s.ISR = []int32{1}; return s }(),
			req: req, alive: all, ends: map[int32]int64{2: 150, 3: 150}, err: ErrNoIntactReplica},
		{name: "no follower reaches the damage", st: state3(), req: req, alive: all,
			ends: map[int32]int64{2: 90, 3: 100}, err: ErrNoIntactReplica},
		{name: "a stale leader epoch", st: state3(), req: ResignRequest{Leader: 1, LeaderEpoch: 4, Offset: 100}, alive: all,
			ends: map[int32]int64{2: 150}, err: ErrStaleState},
		{name: "not the leader", st: state3(), req: ResignRequest{Leader: 2, LeaderEpoch: 5, Offset: 100}, alive: all,
			ends: map[int32]int64{3: 150}, err: ErrStaleState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.st.Clone()
			next, err := DecideResignation(tc.st, tc.req, tc.alive, ends(tc.ends))
			require.Equal(t, before, tc.st, "the input is not changed")
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Equal(t, before, next)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.leader, next.Leader)
			require.ElementsMatch(t, tc.isr, next.ISR)
			require.Equal(t, before.LeaderEpoch+1, next.LeaderEpoch)
			require.Equal(t, before.PartitionEpoch+1, next.PartitionEpoch)
			require.Equal(t, before.Replicas, next.Replicas)
		})
	}
}
