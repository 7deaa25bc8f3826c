package replicatest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

// Cases ported from Kafka's EpochDrivenReplicationProtocolAcceptanceTest
// and the KIP-101/279/320/966 scenarios, run on an in-process cluster.

func newCluster(t *testing.T, o Options) (*Cluster, context.Context) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

func leaderOf(t *testing.T, c *Cluster, topic string) replica.PartitionState {
	t.Helper()
	st, err := c.Leader(topic, 0)
	require.NoError(t, err)
	return st
}

// waitLeader waits until the controller names a leader for topic-0 that
// satisfies ok.
func waitLeader(t *testing.T, ctx context.Context, c *Cluster, topic string, ok func(replica.PartitionState) bool) replica.PartitionState {
	t.Helper()
	for {
		st := leaderOf(t, c, topic)
		if ok(st) {
			return st
		}
		require.NoError(t, sleep(ctx, 2*time.Millisecond), "waiting for %s", st)
	}
}

// waitHighWatermarkFile waits until broker id has recorded its high
// watermark for topic-0 as want.
func waitHighWatermarkFile(t *testing.T, ctx context.Context, c *Cluster, id int32, topic string, want int64) {
	t.Helper()
	path := filepath.Join(c.PartitionDir(id, topic, 0), partition.HighWatermarkFile)
	for {
		data, _ := os.ReadFile(path)
		if f := strings.Fields(string(data)); len(f) > 0 && f[len(f)-1] == strconv.FormatInt(want, 10) {
			return
		}
		require.NoError(t, sleep(ctx, time.Millisecond), "broker %d records high watermark %q", id, data)
	}
}

// truncateOffline cuts a stopped broker's replica to end, as a disk that
// lost its unflushed tail would leave it.
func truncateOffline(t *testing.T, c *Cluster, id int32, topic string, end int64) {
	t.Helper()
	l, err := log.Open(c.PartitionDir(id, topic, 0), log.Options{})
	require.NoError(t, err)
	_, err = l.Truncate(end)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// offsetsIncrease checks a replica's batches follow one another exactly.
func offsetsIncrease(t *testing.T, c *Cluster, id int32, topic string) int64 {
	t.Helper()
	buf := logBytes(t, c, id, topic, 0)
	next := int64(0)
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		require.Equal(t, next, b.BaseOffset(), "broker %d: offsets go %d then %d", id, next, b.BaseOffset())
		next = b.NextOffset()
		buf = buf[n:]
	}
	return next
}

// TestNoDivergentLogs is Kafka's shouldNotAllowDivergentLogs (KIP-101): both
// replicas crash, the one that comes back first lost part of its log and
// takes new writes at the offsets it lost; the other must end up with the
// same bytes, not keep its own records at those offsets.
func TestNoDivergentLogs(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "d", Partitions: 1, ReplicationFactor: 2}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := 0; i < 10; i++ {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("first", i), 1), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "d", 0))
	first := leaderOf(t, c, "d").Leader
	second := 3 - first
	waitHighWatermarkFile(t, ctx, c, second, "d", 10)
	// The follower goes first, then the leader: the controller keeps the
	// leader as the last ISR member.
	require.NoError(t, c.Crash(second, false))
	waitLeader(t, ctx, c, "d", func(st replica.PartitionState) bool { return len(st.ISR) == 1 })
	require.NoError(t, c.Crash(first, false))
	truncateOffline(t, c, first, "d", 5)

	require.NoError(t, c.Restart(first))
	waitLeader(t, ctx, c, "d", func(st replica.PartitionState) bool { return st.Leader == first })
	one := replica.AppendOptions{Acks: replica.AcksLeader}
	for i := 0; i < 10; i++ {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("second", i), 1), one)
		require.NoError(t, err)
	}
	require.NoError(t, c.Restart(second))
	require.NoError(t, c.WaitConverged(ctx, "d", 0))
	require.True(t, bytes.Equal(logBytes(t, c, first, "d", 0), logBytes(t, c, second, "d", 0)), "the logs diverge")
	require.Equal(t, int64(15), offsetsIncrease(t, c, second, "d"))
	require.Positive(t, c.Node(second).Stats().TruncatedCommitted, "the lost records are reported")
}

// TestOffsetsNeverGoBackwards is Kafka's offsetsShouldNotGoBackwards: the
// returning follower's log end falls inside a multi-record batch the new
// leader wrote; offsets must still increase one by one on every replica and
// the files must be identical.
func TestOffsetsNeverGoBackwards(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "o", Partitions: 1, ReplicationFactor: 2}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := 0; i < 100; i++ {
		_, err := c.Produce(ctx, "o", 0, recs(fmt.Sprint("a", i), 1), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "o", 0))
	first := leaderOf(t, c, "o").Leader
	second := 3 - first
	require.NoError(t, c.Crash(second, false))
	waitLeader(t, ctx, c, "o", func(st replica.PartitionState) bool { return len(st.ISR) == 1 })
	require.NoError(t, c.Crash(first, false))
	truncateOffline(t, c, first, "o", 50)
	require.NoError(t, c.Restart(first))
	waitLeader(t, ctx, c, "o", func(st replica.PartitionState) bool { return st.Leader == first })
	// Two large batches: [50, 80) and [80, 130); the follower ends at 100.
	for _, n := range []int{30, 50} {
		_, err := c.Produce(ctx, "o", 0, recs("big", n), replica.AppendOptions{Acks: replica.AcksLeader})
		require.NoError(t, err)
	}
	require.NoError(t, c.Restart(second))
	require.NoError(t, c.WaitConverged(ctx, "o", 0))
	for _, id := range []int32{first, second} {
		require.Equal(t, int64(130), offsetsIncrease(t, c, id, "o"))
	}
	require.True(t, bytes.Equal(logBytes(t, c, first, "o", 0), logBytes(t, c, second, "o", 0)))
}

// TestSurvivesFastLeaderChanges is Kafka's shouldSurviveFastLeaderChange
// (KIP-279): write one record, bounce the follower as soon as it has it,
// then bounce the leader, many times; every replica ends with every record.
func TestSurvivesFastLeaderChanges(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "f", Partitions: 1, ReplicationFactor: 2}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	const rounds = 15
	for i := 0; i < rounds; i++ {
		_, err := c.Produce(ctx, "f", 0, recs(fmt.Sprint("r", i), 1), all)
		require.NoError(t, err)
		st := leaderOf(t, c, "f")
		follower := 3 - st.Leader
		require.NoError(t, c.Crash(follower, false))
		require.NoError(t, c.Restart(follower))
		require.NoError(t, c.Crash(st.Leader, false))
		require.NoError(t, c.Restart(st.Leader))
		waitLeader(t, ctx, c, "f", func(s replica.PartitionState) bool { return s.Leader >= 0 })
	}
	require.NoError(t, c.WaitConverged(ctx, "f", 0))
	for _, id := range c.Brokers() {
		require.Equal(t, int64(rounds), offsetsIncrease(t, c, id, "f"), "broker %d", id)
	}
	require.True(t, bytes.Equal(logBytes(t, c, 1, "f", 0), logBytes(t, c, 2, "f", 0)))
}

// TestStaleEpochsFenced checks KIP-320 fencing on the leader's serving side
// and KIP-497 partition-epoch checks at the controller.
func TestStaleEpochsFenced(t *testing.T) {
	c, ctx := newCluster(t, Options{})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "s", Partitions: 1, ReplicationFactor: 3}))
	st := leaderOf(t, c, "s")
	// Move leadership once so that there is an older epoch to use.
	require.NoError(t, c.Crash(st.Leader, false))
	st = waitLeader(t, ctx, c, "s", func(s replica.PartitionState) bool { return s.Leader >= 0 && s.LeaderEpoch > st.LeaderEpoch })
	for {
		if n := c.Node(st.Leader); n != nil {
			if rs, ok := n.ReplicaSet("s", 0); ok && rs.IsLeader() {
				break
			}
		}
		require.NoError(t, sleep(ctx, time.Millisecond))
	}
	leader := c.Node(st.Leader)
	var follower int32
	for _, id := range st.ISR {
		if id != st.Leader {
			follower = id
		}
	}
	fetch := func(epoch int32) error {
		_, err := leader.Fetch(ctx, &replica.FetchRequest{Topic: "s", ReplicaID: follower, FetchOffset: 0, CurrentLeaderEpoch: epoch, LastFetchedEpoch: -1, MaxBytes: 1 << 10})
		return err
	}
	require.ErrorIs(t, fetch(st.LeaderEpoch-1), replica.ErrFencedLeaderEpoch)
	require.ErrorIs(t, fetch(st.LeaderEpoch+1), replica.ErrUnknownLeaderEpoch)
	require.NoError(t, fetch(st.LeaderEpoch))
	_, err := leader.EndOffsetForEpoch(ctx, &replica.EpochRequest{Topic: "s", ReplicaID: follower, CurrentLeaderEpoch: st.LeaderEpoch - 1, Epoch: 0})
	require.ErrorIs(t, err, replica.ErrFencedLeaderEpoch)
	// A follower is not a leader, whatever the epoch says.
	_, err = c.Node(follower).Fetch(ctx, &replica.FetchRequest{Topic: "s", ReplicaID: st.Leader, CurrentLeaderEpoch: st.LeaderEpoch, LastFetchedEpoch: -1})
	require.ErrorIs(t, err, replica.ErrNotLeader)
	// The old leader's ISR change, made against the old epochs, is refused.
	_, err = c.Controller().AlterPartition(ctx, replica.AlterPartitionRequest{Topic: "s", Leader: st.Leader,
		LeaderEpoch: st.LeaderEpoch - 1, PartitionEpoch: st.PartitionEpoch, ISR: st.ISR})
	require.ErrorIs(t, err, replica.ErrStaleState)
	_, err = c.Controller().AlterPartition(ctx, replica.AlterPartitionRequest{Topic: "s", Leader: st.Leader,
		LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch - 1, ISR: st.ISR})
	require.ErrorIs(t, err, replica.ErrStaleState)
}

// TestISRBelowMinimumRefusesAcksAll: with the followers gone, acks=all is
// refused before writing; a write accepted just before the ISR shrank
// fails once its timeout passes instead of being acknowledged.
func TestISRBelowMinimumRefusesAcksAll(t *testing.T) {
	c, ctx := newCluster(t, Options{MinInSyncReplicas: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "m", Partitions: 1, ReplicationFactor: 3}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	_, err := c.Produce(ctx, "m", 0, recs("ok", 1), all)
	require.NoError(t, err)
	st := leaderOf(t, c, "m")
	lp, _ := c.Partition(st.Leader, "m", 0)

	// Followers stop fetching: a write lands on the leader alone, the ISR
	// shrinks under it, and the write times out unacknowledged.
	for _, id := range st.Replicas {
		if id != st.Leader {
			c.Cut(id, st.Leader)
		}
	}
	_, err = c.Append(ctx, st.Leader, "m", 0, recs("stranded", 1), replica.AppendOptions{Acks: replica.AcksAll, Timeout: time.Second})
	require.ErrorIs(t, err, replica.ErrNotEnoughReplicasAfterAppend)
	require.Equal(t, int64(1), lp.HighWatermark(), "nothing past the first record is committed")
	st = waitLeader(t, ctx, c, "m", func(s replica.PartitionState) bool { return len(s.ISR) == 1 })

	end := lp.EndOffset()
	_, err = c.Append(ctx, st.Leader, "m", 0, recs("refused", 1), all)
	require.ErrorIs(t, err, replica.ErrNotEnoughReplicas)
	require.Equal(t, end, lp.EndOffset(), "a refused acks=all produce writes nothing")
	_, err = c.Append(ctx, st.Leader, "m", 0, recs("acks1", 1), replica.AppendOptions{Acks: replica.AcksLeader})
	require.NoError(t, err, "acks=1 is still served")
	require.Equal(t, int64(1), lp.HighWatermark(), "KIP-966: a lone leader commits nothing")

	c.Heal()
	require.NoError(t, c.WaitConverged(ctx, "m", 0))
	_, err = c.Produce(ctx, "m", 0, recs("back", 1), all)
	require.NoError(t, err)
}

// TestUncleanElection: the ISR's only member holds records no one else has
// and dies. With unclean election off the partition waits for it and loses
// nothing; with it on, another replica takes over at once, the records are
// lost and reported, and the replicas converge again.
func TestUncleanElection(t *testing.T) {
	for _, unclean := range []bool{false, true} {
		t.Run(fmt.Sprintf("unclean=%v", unclean), func(t *testing.T) {
			c, ctx := newCluster(t, Options{MinInSyncReplicas: 1})
			require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "u", Partitions: 1, ReplicationFactor: 3, UncleanLeaderElection: unclean}))
			all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
			_, err := c.Produce(ctx, "u", 0, recs("shared", 5), all)
			require.NoError(t, err)
			st := leaderOf(t, c, "u")
			for _, id := range st.Replicas {
				if id != st.Leader {
					c.Cut(id, st.Leader)
				}
			}
			waitLeader(t, ctx, c, "u", func(s replica.PartitionState) bool { return len(s.ISR) == 1 })
			// Committed with the leader alone (MinInSyncReplicas 1).
			off, err := c.Append(ctx, st.Leader, "u", 0, recs("only-on-leader", 3), all)
			require.NoError(t, err)
			require.Equal(t, int64(5), off)
			if unclean {
				waitHighWatermarkFile(t, ctx, c, st.Leader, "u", 8)
			}
			require.NoError(t, c.Crash(st.Leader, false))
			c.Heal()

			if !unclean {
				// No ISR member is alive: once the controller notices, the
				// partition has no leader.
				waitLeader(t, ctx, c, "u", func(s replica.PartitionState) bool { return s.Leader == -1 })
				pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, err = c.Produce(pctx, "u", 0, recs("x", 1), all)
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.NoError(t, c.Restart(st.Leader))
				require.NoError(t, c.WaitConverged(ctx, "u", 0))
				for _, id := range c.Brokers() {
					require.Equal(t, int64(8), offsetsIncrease(t, c, id, "u"), "nothing lost on broker %d", id)
				}
				require.Zero(t, c.Controller().UncleanElections())
				return
			}
			off, err = c.Produce(ctx, "u", 0, recs("after", 1), all)
			require.NoError(t, err)
			require.Equal(t, int64(5), off, "the new leader never had the acknowledged records 5..7")
			require.Equal(t, int64(1), c.Controller().UncleanElections())
			require.NoError(t, c.Restart(st.Leader))
			require.NoError(t, c.WaitConverged(ctx, "u", 0))
			for _, id := range c.Brokers() {
				require.Equal(t, int64(6), offsetsIncrease(t, c, id, "u"))
			}
			requireIdentical(t, c, "u", 0)
			require.Equal(t, int64(3), c.Node(st.Leader).Stats().TruncatedCommitted, "the old leader reports what it cut")
		})
	}
}

// TestPreferredLeaderElection: after a failover the preferred replica,
// back and in sync, gets leadership back on demand.
func TestPreferredLeaderElection(t *testing.T) {
	c, ctx := newCluster(t, Options{MinInSyncReplicas: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "p", Partitions: 1, ReplicationFactor: 3}))
	st := leaderOf(t, c, "p")
	preferred := st.Replicas[0]
	require.Equal(t, preferred, st.Leader)
	require.NoError(t, c.Crash(preferred, false))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	_, err := c.Produce(ctx, "p", 0, recs("x", 1), all)
	require.NoError(t, err)
	require.NotEqual(t, preferred, leaderOf(t, c, "p").Leader)

	moved, err := c.Controller().ElectPreferredLeaders(ctx)
	require.NoError(t, err)
	require.Zero(t, moved, "the preferred replica is down")
	require.NoError(t, c.Restart(preferred))
	require.NoError(t, c.WaitConverged(ctx, "p", 0))
	moved, err = c.Controller().ElectPreferredLeaders(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	waitLeader(t, ctx, c, "p", func(s replica.PartitionState) bool { return s.Leader == preferred })
	off, err := c.Produce(ctx, "p", 0, recs("y", 1), all)
	require.NoError(t, err)
	require.Equal(t, int64(1), off, "after x at 0")
	require.NoError(t, c.WaitConverged(ctx, "p", 0))
	requireIdentical(t, c, "p", 0)
}

// A follower that was away while the leader deleted the records it would
// fetch next (retention, DeleteRecords) cannot copy on from its log end: it
// empties its log and starts at the leader's log start (Kafka's
// truncateFullyAndStartAt), rejoins the ISR, and from there holds exactly
// the leader's bytes. Without it the follower fetched out of range forever
// and the partition ran one replica short.
func TestFollowerBehindLeaderLogStart(t *testing.T) {
	c, ctx := newCluster(t, Options{MinInSyncReplicas: 2, SegmentBytes: 4 << 10})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "r", Partitions: 1, ReplicationFactor: 3}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := range 50 {
		_, err := c.Produce(ctx, "r", 0, recs(fmt.Sprint("a", i), 10), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "r", 0))
	st := leaderOf(t, c, "r")
	var away int32
	for _, id := range st.Replicas {
		if id != st.Leader {
			away = id
			break
		}
	}
	require.NoError(t, c.Crash(away, false))
	for i := range 100 {
		_, err := c.Produce(ctx, "r", 0, recs(fmt.Sprint("b", i), 10), all)
		require.NoError(t, err)
	}
	// The leader and the other follower delete everything the crashed
	// follower has and more.
	st = leaderOf(t, c, "r")
	lp, ok := c.Partition(st.Leader, "r", 0)
	require.True(t, ok)
	start := lp.HighWatermark() - 200
	require.Greater(t, start, int64(500), "deletes past the crashed follower's end")
	for _, id := range st.Replicas {
		if p, ok := c.Partition(id, "r", 0); ok && id != away {
			require.NoError(t, p.Log().DeleteRecordsBefore(start))
		}
	}

	require.NoError(t, c.Restart(away))
	for i := range 20 {
		_, err := c.Produce(ctx, "r", 0, recs(fmt.Sprint("c", i), 10), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "r", 0))
	fp, ok := c.Partition(away, "r", 0)
	require.True(t, ok)
	require.Equal(t, start, fp.StartOffset(), "the follower starts at the leader's log start")
	require.Equal(t, int64(0), c.Node(away).Stats().TruncatedCommitted, "deleted records are not lost records")
	requireIdentical(t, c, "r", 0)

	// Its epoch cache describes what it holds: it can lead.
	require.NoError(t, c.Stop(st.Leader))
	st = waitLeader(t, ctx, c, "r", func(s replica.PartitionState) bool { return s.Leader > 0 && s.Leader != st.Leader })
	_, err := c.Produce(ctx, "r", 0, recs("d", 10), all)
	require.NoError(t, err)
}

// Records deleted before an offset on the leader (DeleteRecords) are
// deleted on its followers too, so that they do not come back when a
// follower becomes leader.
func TestFollowersFollowLeaderLogStart(t *testing.T) {
	c, ctx := newCluster(t, Options{MinInSyncReplicas: 2, SegmentBytes: 4 << 10})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "s", Partitions: 1, ReplicationFactor: 3}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := range 40 {
		_, err := c.Produce(ctx, "s", 0, recs(fmt.Sprint("a", i), 10), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "s", 0))
	st := leaderOf(t, c, "s")
	lp, ok := c.Partition(st.Leader, "s", 0)
	require.True(t, ok)
	require.NoError(t, lp.Log().DeleteRecordsBefore(250))
	_, err := c.Produce(ctx, "s", 0, recs("b", 10), all)
	require.NoError(t, err)
	for _, id := range st.Replicas {
		p, ok := c.Partition(id, "s", 0)
		require.True(t, ok)
		for p.StartOffset() != 250 {
			require.NoError(t, sleep(ctx, 2*time.Millisecond), "broker %d log start %d", id, p.StartOffset())
		}
	}
	require.NoError(t, c.WaitConverged(ctx, "s", 0))
	requireIdentical(t, c, "s", 0)
	require.NoError(t, c.Stop(st.Leader))
	st2 := waitLeader(t, ctx, c, "s", func(s replica.PartitionState) bool { return s.Leader > 0 && s.Leader != st.Leader })
	np, ok := c.Partition(st2.Leader, "s", 0)
	require.True(t, ok)
	require.Equal(t, int64(250), np.StartOffset(), "the deleted records stay deleted after the failover")
}
