package clustertest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
	votersEnv = "SPOOL_CLUSTER_VOTERS" // how many nodes are voters; default all
)

// diskBytes is each node's tmpfs in the fault runs: room for a long run's
// records and their indexes (which grow with their entries; until issue 16
// they were preallocated, 20 MiB per partition of the test topic and 0.5
// MiB per __consumer_offsets partition, which this size was chosen for).
const diskBytes = 256 << 20

// The fault runs' topics: one at min.insync.replicas 2, one at Kafka's
// default, 1 - where acks=all still promises that an acknowledged record
// is on every replica of the ISR, and an isolated leader must not shrink
// the ISR to itself without the controller.
const (
	faultTopic      = "ledger"
	faultTopicISR1  = "ledger-isr1"
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
// $SPOOL_CLUSTER_NODES, of which $SPOOL_CLUSTER_VOTERS are voters) with a
// proxy on every link between nodes and a tmpfs of its own for each
// node's data; two topics of 3 partitions at replication factor 3, one
// at min.insync.replicas 2 and one at 1; on each, idempotent acks=all
// producers and a consumer group of two members (a Workload); and a
// schedule of faults drawn from a seed ($SPOOL_CLUSTER_SEED, else random
// and logged): each round deals a fault, holds it, heals it, and waits
// until the cluster has healed - every node registered, every partition
// of every topic in sync, the producers acknowledged and the groups
// committing on every partition again. At the end VerifyAll checks that
// no acknowledged record was lost, moved or duplicated, nothing was read
// that was never sent, offsets are dense, the groups consumed every
// acknowledged record and their committed offsets never went back, and
// the replicas are byte-identical.
//
// $SPOOL_CLUSTER_ROUNDS sets the number of rounds (default 11: one of each
// kind of fault; 4 under -race). A round takes 3 to 20 seconds. Skipped
// under -short.
func TestRandomized(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the randomized fault run (processes, tens of seconds per round)")
	}
	seed := uint64(envInt(t, seedEnv, int(rand.Uint32())))
	rounds := envInt(t, roundsEnv, ciRounds)
	nodes := envInt(t, nodesEnv, 3)
	voters := envInt(t, votersEnv, nodes)
	t.Logf("randomized fault run: %s=%d %s=%d %s=%d %s=%d", seedEnv, seed, roundsEnv, rounds, nodesEnv, nodes, votersEnv, voters)
	runRandomized(t, seed, rounds, nodes, voters)
}

func runRandomized(t *testing.T, seed uint64, rounds, nodes, voters int) {
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%7.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	opts := clustertest.Options{Nodes: nodes, Voters: voters, LinkProxies: true}
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
	var ws []*clustertest.Workload
	for _, topic := range []struct{ name, minISR string }{{faultTopic, "2"}, {faultTopicISR1, "1"}} {
		require.NoError(t, c.CreateTopic(pctx, topic.name, faultPartitions, 3, map[string]string{"min.insync.replicas": topic.minISR}))
		require.NoError(t, c.WaitInSync(pctx, topic.name))
		w, err := clustertest.StartWorkload(pctx, c, clustertest.WorkloadOptions{Topic: topic.name, Producers: 2})
		require.NoError(t, err)
		defer w.Stop()
		ws = append(ws, w)
	}
	// The groups' first FindCoordinator creates __consumer_offsets: wait
	// for it to be in sync and the groups to commit, so that every fault
	// hits working groups.
	for _, w := range ws {
		require.NoError(t, w.AwaitGroupProgress(pctx))
	}
	require.NoError(t, c.WaitInSync(pctx))
	pcancel()
	step("%d nodes (%d voters) serving; producing to %s and %s, the groups committing", nodes, voters, faultTopic, faultTopicISR1)

	sched := clustertest.NewSchedule(c, seed, clustertest.ScheduleOptions{
		Topics: []string{faultTopic, faultTopicISR1}, Partitions: faultPartitions, Group: ws[0].Options().Group,
	})
	kinds := map[clustertest.Kind]int{}
	for round := 1; round <= rounds; round++ {
		f := sched.Next()
		n, hold := f.Nemesis, f.Hold
		pctx, pcancel := phase()
		began := time.Now()
		require.NoError(t, n.Start(pctx, c), "round %d: %v", round, n)
		step("round %d: %v, held %v", round, n, hold)
		require.NoError(t, sleepCtx(pctx, hold))
		require.NoError(t, n.Heal(pctx, c), "round %d: heal %v", round, n)
		healed := time.Now()
		require.NoError(t, awaitHealed(pctx, c, ws...), "round %d: after %v", round, n)
		pcancel()
		kinds[f.Kind]++
		step("round %d: healed %.1fs after %.1fs of fault; %d and %d acknowledged so far",
			round, time.Since(healed).Seconds(), healed.Sub(began).Seconds(), ws[0].Ledger().Acked(), ws[1].Ledger().Acked())
	}

	pctx, pcancel = phase()
	defer pcancel()
	reps, err := clustertest.VerifyAll(pctx, ws...)
	step("%d rounds %v", rounds, kinds)
	for _, w := range ws {
		failed, errs := w.Failed()
		step("%s: sent %d, acknowledged %d, failed %d %v", w.Options().Topic, w.Ledger().Sent(), w.Ledger().Acked(), failed, errs)
	}
	require.NoError(t, err)
	for i, rep := range reps {
		step("verified %s: %v", ws[i].Options().Topic, rep)
	}
	for i, rep := range reps {
		require.True(t, rep.OK(), "seed %d, %s: %v", seed, ws[i].Options().Topic, rep)
	}
}

// awaitHealed waits until the cluster has recovered from a healed fault:
// every node registered, every partition of every topic in sync, and the
// workloads' producers and groups getting through on every partition.
func awaitHealed(ctx context.Context, c *clustertest.Cluster, ws ...*clustertest.Workload) error {
	if err := c.WaitBrokers(ctx); err != nil {
		return err
	}
	if err := c.WaitInSync(ctx); err != nil {
		return err
	}
	for _, w := range ws {
		if err := w.AwaitProgress(ctx); err != nil {
			return fmt.Errorf("%s: %w", w.Options().Topic, err)
		}
		if err := w.AwaitGroupProgress(ctx); err != nil {
			return fmt.Errorf("%s: %w", w.Options().Topic, err)
		}
	}
	return nil
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
