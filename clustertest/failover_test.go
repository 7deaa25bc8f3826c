package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/spoolmq/spool/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

const (
	failoverTopic      = "acked"
	failoverPartitions = 3
)

// TestFailovers is issue 10's multi-process test: three spool serve
// processes, a topic with three partitions at replication factor 3 and
// min.insync.replicas 2, idempotent acks=all producers of unique values
// and a consumer group (a Workload), through these faults, one after another, each
// healed (the node back in every ISR) before the next:
//
//   - SIGKILL of each partition's leader in turn, then its restart;
//   - SIGKILL of the active controller, then its restart;
//   - SIGTERM of a broker under load (a controlled shutdown: exit 0), then
//     its restart;
//   - SIGKILL of the group's coordinator: the committed offsets are still
//     there, from the new coordinator.
//
// While one node is down the producers keep being acknowledged on every
// partition (two replicas remain, min.insync.replicas is met); after each
// fault the group commits further on every partition; and its committed
// offsets, watched throughout, never go back. At the end Workload.Verify
// finds every acknowledged record read back exactly once at its
// acknowledged offset by a plain consumer, the group has consumed every
// acknowledged record and committed up to the end, and every node's files
// hold the same batches, byte for byte, and the records the consumer read
// (the replicas converged).
//
// It builds the spool binary (or takes $SPOOL_BIN) and runs for about a
// minute; -short skips it.
func TestFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the three-process failover test (builds the spool binary, runs about a minute)")
	}
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	c := clustertest.Start(t, clustertest.Options{SessionTimeout: time.Second})
	step("3 nodes serving")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Each wait for the cluster to heal or make progress gets a minute:
	// a bound for a hung cluster, not a performance requirement.
	phase := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Minute) }

	require.NoError(t, c.CreateTopic(ctx, failoverTopic, failoverPartitions, 3, map[string]string{"min.insync.replicas": "2"}))
	pctx, pcancel := phase()
	require.NoError(t, c.WaitInSync(pctx, failoverTopic))
	w, err := clustertest.StartWorkload(pctx, c, clustertest.WorkloadOptions{Topic: failoverTopic})
	require.NoError(t, err)
	defer w.Stop()
	// The group's first FindCoordinator creates __consumer_offsets: wait
	// until it is in sync and the group has committed, so that every
	// fault below hits a working group.
	require.NoError(t, w.AwaitGroupProgress(pctx))
	require.NoError(t, c.WaitInSync(pctx))
	pcancel()
	step("topic in sync, producing, group committing")

	// heal restarts a node and waits until every partition of every topic
	// has all its replicas in sync again, the producers get through and
	// the group commits on every partition.
	heal := func(n *clustertest.Node) {
		t.Helper()
		pctx, pcancel := phase()
		defer pcancel()
		restarted := time.Now()
		require.NoError(t, n.Start(pctx))
		require.NoError(t, c.WaitBrokers(pctx))
		require.NoError(t, c.WaitInSync(pctx))
		step("node %d restarted, every partition in sync after %.1fs (%d acks)", n.ID(), time.Since(restarted).Seconds(), w.Ledger().Acked())
		require.NoError(t, w.AwaitProgress(pctx), "after node %d's restart", n.ID())
		require.NoError(t, w.AwaitGroupProgress(pctx), "after node %d's restart", n.ID())
	}
	// awaitFailover waits until the freshest metadata names a leader
	// other than the dead node for every partition, and the producers
	// get through on every partition.
	awaitFailover := func(dead int32, since time.Time) {
		t.Helper()
		pctx, pcancel := phase()
		defer pcancel()
		require.NoError(t, clustertest.Eventually(pctx, fmt.Sprintf("no partition led by dead node %d", dead), func(ctx context.Context) error {
			ps, err := c.Partitions(ctx, failoverTopic)
			if err != nil {
				return err
			}
			for _, p := range ps {
				if p.Leader == dead || p.Leader < 0 {
					return fmt.Errorf("%v", p)
				}
			}
			return nil
		}))
		led := time.Since(since)
		require.NoError(t, w.AwaitProgress(pctx), "with node %d down", dead)
		step("node %d down: new leaders after %.1fs; every partition acknowledged again after %.1fs", dead, led.Seconds(), time.Since(since).Seconds())
	}

	for p := range int32(failoverPartitions) {
		leader, err := c.Leader(ctx, failoverTopic, p)
		require.NoError(t, err)
		require.GreaterOrEqual(t, leader, int32(1), "partition %d has a leader", p)
		n := c.Node(leader)
		killed := time.Now()
		require.NoError(t, n.Kill())
		step("SIGKILL node %d, leader of partition %d", leader, p)
		awaitFailover(leader, killed)
		heal(n)
	}

	pctx, pcancel = phase()
	var ctrl int32
	require.NoError(t, clustertest.Eventually(pctx, "an agreed controller", func(ctx context.Context) (err error) {
		ctrl, err = c.Controller(ctx)
		return err
	}))
	pcancel()
	killed := time.Now()
	require.NoError(t, c.Node(ctrl).Kill())
	step("SIGKILL node %d, the active controller", ctrl)
	pctx, pcancel = phase()
	require.NoError(t, clustertest.Eventually(pctx, "a new controller", func(ctx context.Context) error {
		id, err := c.Controller(ctx)
		if err == nil && id == ctrl {
			return fmt.Errorf("still node %d", id)
		}
		return err
	}))
	pcancel()
	awaitFailover(ctrl, killed)
	step("a new controller is active")
	heal(c.Node(ctrl))

	// Controlled shutdown under load: the broker leading the most
	// partitions of the topic moves them away and exits 0.
	ps, err := c.Partitions(ctx, failoverTopic)
	require.NoError(t, err)
	led := map[int32]int{}
	for _, p := range ps {
		led[p.Leader]++
	}
	busiest := slices.MaxFunc(slices.Collect(maps.Keys(led)), func(a, b int32) int { return led[a] - led[b] })
	pctx, pcancel = phase()
	stopped := time.Now()
	code, err := c.Node(busiest).Stop(pctx)
	pcancel()
	require.NoError(t, err)
	require.Equal(t, 0, code, "spool serve exits 0 after a controlled shutdown")
	step("SIGTERM node %d (leading %d partitions): exited 0", busiest, led[busiest])
	awaitFailover(busiest, stopped)
	heal(c.Node(busiest))

	// The coordinator's death: what the group committed before it stays.
	group := w.Options().Group
	pctx, pcancel = phase()
	var before map[int32]int64
	var coord int32
	require.NoError(t, clustertest.Eventually(pctx, "the group's committed offsets", func(ctx context.Context) (err error) {
		before, coord, err = c.CommittedOffsets(ctx, group, failoverTopic)
		if err == nil && len(before) < failoverPartitions {
			err = fmt.Errorf("offsets committed for %d partitions", len(before))
		}
		return err
	}))
	pcancel()
	killed = time.Now()
	require.NoError(t, c.Node(coord).Kill())
	step("SIGKILL node %d, the group's coordinator; committed before: %v", coord, before)
	pctx, pcancel = phase()
	var after map[int32]int64
	var newCoord int32
	require.NoError(t, clustertest.Eventually(pctx, "the committed offsets from a new coordinator", func(ctx context.Context) (err error) {
		after, newCoord, err = c.CommittedOffsets(ctx, group, failoverTopic)
		if err != nil && !kerr.IsRetriable(err) && !errors.Is(err, clustertest.ErrUnsettled) && !errors.Is(err, clustertest.ErrNotRunning) {
			// Worth a line: a failover answers NOT_COORDINATOR and
			// COORDINATOR_LOAD_IN_PROGRESS; anything else is news.
			t.Logf("OffsetFetch: %v", err)
		}
		return err
	}))
	pcancel()
	require.NotEqual(t, coord, newCoord)
	for p, off := range before {
		require.GreaterOrEqual(t, after[p], off, "partition %d: the offset committed before coordinator %d died survives at coordinator %d", p, coord, newCoord)
	}
	step("node %d coordinates the group now; committed: %v", newCoord, after)
	awaitFailover(coord, killed)
	heal(c.Node(coord))

	// Every acknowledged record read back once at its offset, the group
	// consumed them all and its commits never went back, the replicas
	// byte-identical.
	pctx, pcancel = phase()
	defer pcancel()
	rep, err := w.Verify(pctx)
	failed, errs := w.Failed()
	step("produced %d, acknowledged %d, failed %d %v", w.Ledger().Sent(), w.Ledger().Acked(), failed, errs)
	require.NoError(t, err)
	step("verified: %v", rep)
	require.True(t, rep.OK(), "%v", rep)
	require.NoError(t, c.CheckExits())
}
