package replicatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// Damaged batches on a replicated partition (issue 17): a follower never
// appends a damaged batch it fetched; a follower whose own copy is damaged
// cuts it and copies it again; a leader whose copy is damaged never sends
// it and hands the partition to an in-sync replica with the batch intact.

// fileDamage reports the first batch that does not verify in a replica's
// .log files, read straight from disk (not through the log, which would
// refuse it): "" when every batch verifies.
func fileDamage(t *testing.T, c *Cluster, id int32, topic string) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(c.PartitionDir(id, topic, 0), "*"+segment.LogSuffix))
	require.NoError(t, err)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for pos := 0; pos < len(data); {
			b, n, err := record.ParseBatch(data[pos:])
			if err == nil {
				err = b.Verify()
			}
			if err != nil {
				return fmt.Sprintf("%s at %d: %v", path, pos, err)
			}
			pos += n
		}
	}
	return ""
}

// damageOnDisk flips a bit of the last byte of the batch holding offset in
// broker id's replica, in place: the log has the file open and sees the
// change through the page cache.
func damageOnDisk(t *testing.T, c *Cluster, id int32, topic string, offset int64) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(c.PartitionDir(id, topic, 0), "*"+segment.LogSuffix))
	require.NoError(t, err)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for pos := 0; pos < len(data); {
			b, n, err := record.ParseBatch(data[pos:])
			require.NoError(t, err)
			if b.BaseOffset() <= offset && offset <= b.LastOffset() {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte{data[pos+n-1] ^ 0x01}, int64(pos+n-1))
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.NotEmpty(t, fileDamage(t, c, id, topic))
				return
			}
			pos += n
		}
	}
	t.Fatalf("broker %d holds no batch with offset %d", id, offset)
}

// waitSound waits until every batch on every broker's disk verifies and
// then every replica of topic-0 is in the ISR and ends at the high
// watermark. In that order: a repair first cuts the damage (the files are
// sound, the replica short), then copies the batches again.
func waitSound(t *testing.T, ctx context.Context, c *Cluster, topic string) {
	t.Helper()
	for {
		ok, why := true, ""
		for _, id := range c.Brokers() {
			if d := fileDamage(t, c, id, topic); d != "" {
				ok, why = false, fmt.Sprintf("broker %d: %s", id, d)
				break
			}
		}
		if ok {
			ok, why = c.converged(topic, 0)
		}
		if ok {
			return
		}
		require.NoError(t, sleep(ctx, 5*time.Millisecond), "replicas never became sound: %s", why)
	}
}

// A follower checks every batch it fetches (Kafka's followers do too):
// batches damaged on the way are refused, never written, and fetched again.
func TestFollowerRefusesDamagedFetch(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "d", Partitions: 1, ReplicationFactor: 2}))
	st := leaderOf(t, c, "d")
	follower := 3 - st.Leader
	c.DamageFetches(st.Leader, follower, 3)
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 10 * time.Second}
	for i := range 20 {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("r", i), 3), all)
		require.NoError(t, err)
	}
	waitSound(t, ctx, c, "d")
	require.Equal(t, 3, c.Damaged(), "the network damaged what it was asked to")
	require.Equal(t, int64(60), offsetsIncrease(t, c, follower, "d"))
}

// A follower whose own copy of a batch turns out damaged when it is read
// cuts its log before the batch and copies the rest again from the leader.
func TestFollowerRepairsDamagedLog(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 2})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "d", Partitions: 1, ReplicationFactor: 2}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 10 * time.Second}
	for i := range 20 {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("r", i), 3), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "d", 0))
	st := leaderOf(t, c, "d")
	follower := 3 - st.Leader
	damageOnDisk(t, c, follower, "d", 31)

	// A read finds the damage (the batches before it are returned).
	p, ok := c.Partition(follower, "d", 0)
	require.True(t, ok)
	buf, err := p.Log().ReadUpTo(nil, 0, 1<<20, p.EndOffset())
	require.NoError(t, err)
	require.Len(t, batches(t, buf), 10, "the ten batches before the damaged one")
	off, damaged := p.Log().Damage()
	require.True(t, damaged)
	require.EqualValues(t, 30, off)

	// The follower's copy loop notices, cuts its log at 30 and copies the
	// rest again. (Wait for the repair to be counted first: while it cuts
	// the file, the file is sound and the log still reads as whole.)
	waitRepairs(t, ctx, c, follower)
	waitSound(t, ctx, c, "d")
	require.Equal(t, st.Leader, leaderOf(t, c, "d").Leader, "a follower's repair moves no leadership")
	require.Zero(t, c.Node(follower).Stats().TruncatedCommitted, "a repair loses nothing")
	require.Equal(t, int64(60), offsetsIncrease(t, c, follower, "d"))
	_, damaged = p.Log().Damage()
	require.False(t, damaged)
}

// A leader that finds its copy of a batch damaged as it serves a follower
// does not send it: it resigns in favour of the in-sync replica that holds
// the batch, then repairs its own copy from the new leader as a follower;
// the lagging follower gets the batch intact from the new leader.
func TestLeaderWithDamagedLogResigns(t *testing.T) {
	c, ctx := newCluster(t, Options{Brokers: 3})
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "d", Partitions: 1, ReplicationFactor: 3}))
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 10 * time.Second}
	for i := range 10 {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("a", i), 3), all)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitConverged(ctx, "d", 0))
	st := leaderOf(t, c, "d")
	leader := st.Leader
	var lagging, intact int32 = -1, -1
	for _, id := range st.Replicas {
		if id != leader {
			if lagging < 0 {
				lagging = id
			} else {
				intact = id
			}
		}
	}
	// The lagging follower misses offsets 30..59, which the leader and
	// the other follower both have.
	require.NoError(t, c.Stop(lagging))
	waitLeader(t, ctx, c, "d", func(s replica.PartitionState) bool { return !s.InISR(lagging) })
	for i := range 10 {
		_, err := c.Produce(ctx, "d", 0, recs(fmt.Sprint("b", i), 3), all)
		require.NoError(t, err)
	}
	lp, _ := c.Partition(leader, "d", 0)
	ip, _ := c.Partition(intact, "d", 0)
	for ip.EndOffset() != lp.EndOffset() {
		require.NoError(t, sleep(ctx, time.Millisecond))
	}
	damageOnDisk(t, c, leader, "d", 45)

	require.NoError(t, c.Restart(lagging)) // it fetches 30.. from the leader
	now := waitLeader(t, ctx, c, "d", func(s replica.PartitionState) bool { return s.Leader != leader })
	require.Equal(t, intact, now.Leader, "the in-sync replica holding the batch takes over")
	waitRepairs(t, ctx, c, leader) // as a follower now
	waitSound(t, ctx, c, "d")
	require.Equal(t, int64(1), c.Node(leader).Stats().Resignations)
	for _, id := range c.Brokers() {
		require.Equal(t, int64(60), offsetsIncrease(t, c, id, "d"), "broker %d", id)
	}
}

// waitRepairs waits until broker id has repaired a damaged log.
func waitRepairs(t *testing.T, ctx context.Context, c *Cluster, id int32) {
	t.Helper()
	for c.Node(id).Stats().Repairs == 0 {
		require.NoError(t, sleep(ctx, time.Millisecond), "broker %d never repaired its log", id)
	}
}

// batches splits log bytes into batches, each verified.
func batches(t *testing.T, buf []byte) []record.Batch {
	t.Helper()
	var out []record.Batch
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		out = append(out, b)
		buf = buf[n:]
	}
	return out
}
