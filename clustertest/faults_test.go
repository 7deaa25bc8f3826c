package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/clustertest"
)

// The randomized fault run's settings, from the environment.
const (
	seedEnv   = "SPOOL_CLUSTER_SEED"   // the schedule's seed; default: a random one, logged
	roundsEnv = "SPOOL_CLUSTER_ROUNDS" // how many faults; default ciRounds
	nodesEnv  = "SPOOL_CLUSTER_NODES"  // cluster size; default 3
)

// ciRounds is the randomized run's length in CI: one of each kind of fault
// (the schedule deals them from a shuffled bag).
const ciRounds = 11

// diskBytes is each node's tmpfs in the fault runs: room for the
// preallocated indexes (20 MiB per partition of the test topic, 0.5 MiB
// per __consumer_offsets partition) and a long run's records.
const diskBytes = 256 << 20

const (
	faultTopic      = "ledger"
	faultPartitions = 3
)

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "$%s", name)
	return n
}

// TestRandomized is the randomized fault run: a cluster (3 nodes, or
// $SPOOL_CLUSTER_NODES) with a proxy on every link between nodes and a
// tmpfs of its own for each node's data, a topic of 3 partitions at
// replication factor 3 and min.insync.replicas 2, idempotent acks=all
// producers and a consumer group of two members (Workload), and a
// schedule of faults drawn from a seed ($SPOOL_CLUSTER_SEED, else random
// and logged): each round deals a fault, holds it, heals it, and waits
// until the cluster has healed - every node registered, every partition of
// every topic in sync, the producers acknowledged and the group committing
// on every partition again. At the end Workload.Verify checks that no
// acknowledged record was lost, moved or duplicated, nothing was read that
// was never sent, offsets are dense, the group consumed every
// acknowledged record and its committed offsets never went back, and the
// replicas are byte-identical.
//
// $SPOOL_CLUSTER_ROUNDS sets the number of rounds (default 11: one of each
// kind of fault). Each round takes 5 to 20 seconds. Skipped under -short.
func TestRandomized(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the randomized fault run (processes, tens of seconds per round)")
	}
	seed := uint64(envInt(t, seedEnv, int(rand.Uint32())))
	rounds := envInt(t, roundsEnv, ciRounds)
	nodes := envInt(t, nodesEnv, 3)
	t.Logf("randomized fault run: %s=%d %s=%d %s=%d", seedEnv, seed, roundsEnv, rounds, nodesEnv, nodes)
	runRandomized(t, seed, rounds, nodes)
}

func runRandomized(t *testing.T, seed uint64, rounds, nodes int) {
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%7.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	opts := clustertest.Options{Nodes: nodes, LinkProxies: true}
	if err := clustertest.DiskSupported(); err != nil {
		t.Logf("no full-disk faults: %v", err)
	} else {
		opts.DiskBytes = diskBytes
	}
	c := clustertest.Start(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each wait for the cluster is bounded by a few minutes: a bound for
	// a hung cluster, not a performance requirement.
	phase := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Minute) }

	pctx, pcancel := phase()
	require.NoError(t, c.CreateTopic(pctx, faultTopic, faultPartitions, 3, map[string]string{"min.insync.replicas": "2"}))
	require.NoError(t, c.WaitInSync(pctx, faultTopic))
	w, err := clustertest.StartWorkload(pctx, c, clustertest.WorkloadOptions{Topic: faultTopic})
	require.NoError(t, err)
	defer w.Stop()
	// The group's first FindCoordinator creates __consumer_offsets: wait
	// for it to be in sync and the group to commit, so that every fault
	// hits a working group.
	require.NoError(t, w.AwaitGroupProgress(pctx))
	require.NoError(t, c.WaitInSync(pctx))
	pcancel()
	step("%d nodes serving, producing, the group committing", nodes)

	sched := clustertest.NewSchedule(c, seed, clustertest.ScheduleOptions{
		Topic: faultTopic, Partitions: faultPartitions, Group: w.Options().Group,
	})
	kinds := map[string]int{}
	for round := 1; round <= rounds; round++ {
		n, hold := sched.Next()
		pctx, pcancel := phase()
		began := time.Now()
		require.NoError(t, n.Start(pctx, c), "round %d: %v", round, n)
		step("round %d: %v, held %v", round, n, hold)
		require.NoError(t, sleepCtx(pctx, hold))
		require.NoError(t, n.Heal(pctx, c), "round %d: heal %v", round, n)
		healed := time.Now()
		require.NoError(t, awaitHealed(pctx, c, w), "round %d: after %v", round, n)
		pcancel()
		kinds[kindOf(n)]++
		step("round %d: healed %.1fs after %.1fs of fault; %d acknowledged so far",
			round, time.Since(healed).Seconds(), healed.Sub(began).Seconds(), w.Ledger().Acked())
	}

	pctx, pcancel = phase()
	defer pcancel()
	rep, err := w.Verify(pctx)
	failed, errs := w.Failed()
	step("%d rounds %v; sent %d, acknowledged %d, failed %d %v", rounds, kinds, w.Ledger().Sent(), w.Ledger().Acked(), failed, errs)
	require.NoError(t, err)
	step("verified: %v", rep)
	require.True(t, rep.OK(), "seed %d: %v", seed, rep)
}

// awaitHealed waits until the cluster has recovered from a healed fault:
// every node registered, every partition of every topic in sync, and the
// workload's producers and group getting through on every partition.
func awaitHealed(ctx context.Context, c *clustertest.Cluster, w *clustertest.Workload) error {
	if err := c.WaitBrokers(ctx); err != nil {
		return err
	}
	if err := c.WaitInSync(ctx); err != nil {
		return err
	}
	if err := w.AwaitProgress(ctx); err != nil {
		return err
	}
	return w.AwaitGroupProgress(ctx)
}

// kindOf names a nemesis's type, for the run's tally.
func kindOf(n clustertest.Nemesis) string {
	return fmt.Sprintf("%T", n)[len("*clustertest."):]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ = errors.Is
var _ = maps.Clone[map[int]int]
var _ = slices.Sort[[]int]
