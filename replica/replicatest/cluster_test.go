package replicatest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

func recs(prefix string, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return out
}

// logBytes reads a replica's whole log.
func logBytes(t *testing.T, c *Cluster, id int32, topic string, p int32) []byte {
	t.Helper()
	part, ok := c.Partition(id, topic, p)
	require.True(t, ok, "broker %d has %s-%d", id, topic, p)
	var out []byte
	for off := part.StartOffset(); off < part.EndOffset(); {
		n := len(out)
		var err error
		out, err = part.Log().ReadUpTo(out, off, 1<<30, part.EndOffset())
		require.NoError(t, err)
		require.Greater(t, len(out), n, "no progress reading at %d", off)
		for buf := out[n:]; len(buf) > 0; {
			b, sz, err := record.ParseBatch(buf)
			require.NoError(t, err)
			off = b.NextOffset()
			buf = buf[sz:]
		}
	}
	return out
}

func requireIdentical(t *testing.T, c *Cluster, topic string, p int32) {
	t.Helper()
	ref := logBytes(t, c, 1, topic, p)
	for _, id := range c.Brokers()[1:] {
		require.True(t, bytes.Equal(ref, logBytes(t, c, id, topic, p)), "broker %d's log differs from broker 1's", id)
	}
}

func TestReplicateAndFailOver(t *testing.T) {
	c, err := New(Options{Dir: t.TempDir(), MinInSyncReplicas: 2})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 3}))

	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := 0; i < 20; i++ {
		off, err := c.Produce(ctx, "t", 0, recs(fmt.Sprint("a", i), 3), all)
		require.NoError(t, err)
		require.Equal(t, int64(3*i), off)
	}
	require.NoError(t, c.WaitConverged(ctx, "t", 0))
	requireIdentical(t, c, "t", 0)

	st, err := c.Leader("t", 0)
	require.NoError(t, err)
	old := st.Leader
	require.NoError(t, c.Crash(old, false))
	// The next acks=all write goes to the new leader once elected.
	off, err := c.Produce(ctx, "t", 0, recs("b", 2), all)
	require.NoError(t, err)
	require.Equal(t, int64(60), off)
	st2, err := c.Leader("t", 0)
	require.NoError(t, err)
	require.NotEqual(t, old, st2.Leader)
	require.Greater(t, st2.LeaderEpoch, st.LeaderEpoch)

	require.NoError(t, c.Restart(old))
	require.NoError(t, c.WaitConverged(ctx, "t", 0))
	requireIdentical(t, c, "t", 0)
	part, _ := c.Partition(old, "t", 0)
	require.Equal(t, int64(62), part.EndOffset())
}

// A node stopping while it removes the replicas of a deleted topic (a
// networked broker's metadata loop applies the deletion as Broker.Close
// halts the node): the two must not touch the node's replica map at once.
// Run with -race, which saw Halt range over the map while Remove deleted
// from it.
func TestHaltWhileRemoving(t *testing.T) {
	c, err := New(Options{Dir: t.TempDir(), Brokers: 1})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const partitions = 64
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "t", Partitions: partitions, ReplicationFactor: 1}))
	node := c.Node(1)
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		for p := int32(partitions - 1); p >= 0; p-- {
			node.Remove("t", p)
		}
	}()
	node.Halt()
	<-removed
}

// A follower catching up reports how far its log end is behind the high
// watermark its leader last gave it (DescribeLogDirs' offset lag), not
// Kafka's 0 from its own high watermark capped at its log end; the leader
// and a caught-up follower report 0.
func TestFollowerOffsetLag(t *testing.T) {
	c, err := New(Options{Dir: t.TempDir(), Brokers: 2, FetchMaxBytes: 1}) // a batch per fetch
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 2}))
	st, err := c.Leader("t", 0)
	require.NoError(t, err)
	leader, follower := st.Leader, 3-st.Leader
	lrs, ok := c.Node(leader).ReplicaSet("t", 0)
	require.True(t, ok)
	frs, ok := c.Node(follower).ReplicaSet("t", 0)
	require.True(t, ok)

	// The follower stops fetching and leaves the ISR; the leader alone
	// commits 40 batches.
	c.Cut(follower, leader)
	require.Eventually(t, func() bool { st, _ := c.Leader("t", 0); return len(st.ISR) == 1 }, 30*time.Second, 10*time.Millisecond)
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	for i := range 40 {
		_, err := c.Produce(ctx, "t", 0, recs(fmt.Sprint("r", i), 1), all)
		require.NoError(t, err)
	}
	require.Equal(t, int64(40), lrs.HighWatermark())
	require.Zero(t, lrs.OffsetLag(), "the leader")

	// It catches up a batch a fetch: between its fetches it knows the
	// leader's high watermark and has not got there yet.
	c.Heal()
	c.Delay(follower, leader, 20*time.Millisecond)
	sawLag := false
	for frs.Partition().EndOffset() < 40 {
		end := frs.Partition().EndOffset()
		lag := frs.OffsetLag()
		require.LessOrEqual(t, lag, 40-end, "never more than the records it lacks")
		sawLag = sawLag || lag > 0
		require.NoError(t, ctx.Err())
		time.Sleep(time.Millisecond)
	}
	require.True(t, sawLag, "a follower catching up reported no lag")
	require.Eventually(t, func() bool { return frs.OffsetLag() == 0 && frs.HighWatermark() == 40 }, 30*time.Second, 10*time.Millisecond)
	require.Zero(t, lrs.OffsetLag())
}
