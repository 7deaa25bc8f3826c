package clustertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/clustertest"
)

// TestNegativeControl shows that the checker sees loss when there is
// loss: a topic that asks for it (acks=1, min.insync.replicas 1,
// unclean.leader.election.enable) and a fault that makes an out-of-sync
// replica the leader. The followers of the only partition are cut off
// from its leader's Kafka listener - their fetches go nowhere, while
// every node still reaches the controller - for longer than the replica
// lag time, so the leader drops them from the ISR and goes on
// acknowledging alone. Then the leader is killed: the controller, with no
// ISR member alive, elects an out-of-sync follower (unclean), and every
// record the old leader acknowledged since the cut is gone. Verify must
// report those records lost - in every run. The network is healed and
// the old leader restarted before the check, so the replicas converge
// (the old leader truncates to the new leader's log) and the check of
// the replicas passes: the loss is in the records, not in divergence.
func TestNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the negative control (processes, about 40s)")
	}
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	c := clustertest.Start(t, clustertest.Options{LinkProxies: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic = "unsafe"
	require.NoError(t, c.CreateTopic(ctx, topic, 1, 3, map[string]string{
		"min.insync.replicas": "1", "unclean.leader.election.enable": "true",
	}))
	require.NoError(t, c.WaitInSync(ctx, topic))
	w, err := clustertest.StartWorkload(ctx, c, clustertest.WorkloadOptions{Topic: topic, LeaderAcks: true, Members: -1, Producers: 2})
	require.NoError(t, err)
	defer w.Stop()
	require.NoError(t, w.AwaitProgress(ctx))

	leader, err := c.Leader(ctx, topic, 0)
	require.NoError(t, err)
	for _, n := range c.Nodes() {
		if n.ID() != leader {
			c.Link(n.ID(), leader, clustertest.KafkaListener).Cut()
		}
	}
	cut := w.Ledger().Acked()
	step("followers' fetches from leader %d cut after %d acknowledgements", leader, cut)
	// The leader shrinks the ISR to itself once the followers have not
	// caught up for the replica lag time.
	require.NoError(t, clustertest.Eventually(ctx, "the leader alone in the ISR", func(ctx context.Context) error {
		ps, err := c.Partitions(ctx, topic)
		if err != nil {
			return err
		}
		if p := ps[0]; p.Leader != leader || len(p.ISR) != 1 {
			return fmt.Errorf("%v", p)
		}
		return nil
	}))
	require.NoError(t, w.AwaitProgress(ctx))
	alone := w.Ledger().Acked()
	step("ISR shrunk to the leader; %d records acknowledged since the cut", alone-cut)

	require.NoError(t, c.Node(leader).Kill())
	require.NoError(t, clustertest.Eventually(ctx, "a new leader", func(ctx context.Context) error {
		l, err := c.Leader(ctx, topic, 0)
		if err == nil && (l == leader || l < 0) {
			err = fmt.Errorf("leader %d", l)
		}
		return err
	}))
	require.NoError(t, w.AwaitProgress(ctx))
	step("leader %d killed, an out-of-sync follower elected; producing to it", leader)
	require.NoError(t, c.HealNetwork())
	require.NoError(t, c.Node(leader).Start(ctx))
	require.NoError(t, c.WaitBrokers(ctx))

	rep, err := w.Verify(ctx)
	require.NoError(t, err)
	step("verified: %v", rep)
	require.NotEmpty(t, rep.Lost, "acks=1 with an unclean election lost nothing? %v", rep)
	require.Empty(t, rep.Diverged, "the replicas converged")
	step("negative control: %d acknowledged records lost", len(rep.Lost))
}

// TestRollingRestart restarts every broker in turn (SIGTERM, a controlled
// shutdown; start; back in every ISR before the next) under a steady
// idempotent acks=all producer and a consumer group, and checks that
// nothing acknowledged was lost and the replicas converged. It logs the
// producer's latency percentiles during the restart beside those of as
// long a window before it (a figure for the README, not a pass/fail
// threshold).
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the rolling restart (processes, about 30s)")
	}
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	c := clustertest.Start(t, clustertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateTopic(ctx, faultTopic, faultPartitions, 3, map[string]string{"min.insync.replicas": "2"}))
	require.NoError(t, c.WaitInSync(ctx, faultTopic))
	w, err := clustertest.StartWorkload(ctx, c, clustertest.WorkloadOptions{Topic: faultTopic, Latencies: true})
	require.NoError(t, err)
	defer w.Stop()
	require.NoError(t, w.AwaitGroupProgress(ctx))
	require.NoError(t, c.WaitInSync(ctx))
	step("producing %d records/s", 4*250)

	// A steady state first, as long as the restart will take, for
	// comparison: at least 5 seconds.
	require.NoError(t, sleepCtx(ctx, 5*time.Second))
	began := time.Now()
	r := &clustertest.RollingRestart{Each: func(id int32, stopped time.Time) {
		step("node %d: SIGTERM, restarted, back in every ISR after %.1fs", id, time.Since(stopped).Seconds())
	}}
	require.NoError(t, r.Start(ctx, c))
	ended := time.Now()
	require.NoError(t, w.AwaitProgress(ctx))
	took := ended.Sub(began)
	before := w.Latencies(began.Add(-max(took, 5*time.Second)), began)
	during := w.Latencies(began, ended)
	step("rolling restart of %d nodes took %.1fs", len(c.Nodes()), took.Seconds())
	step("produce latency before: %d records, p50 %v p99 %v max %v", len(before),
		clustertest.Percentile(before, 0.5), clustertest.Percentile(before, 0.99), clustertest.Percentile(before, 1))
	step("produce latency during: %d records, p50 %v p99 %v max %v", len(during),
		clustertest.Percentile(during, 0.5), clustertest.Percentile(during, 0.99), clustertest.Percentile(during, 1))

	rep, err := w.Verify(ctx)
	failed, errs := w.Failed()
	step("sent %d, acknowledged %d, failed %d %v", w.Ledger().Sent(), w.Ledger().Acked(), failed, errs)
	require.NoError(t, err)
	step("verified: %v", rep)
	require.True(t, rep.OK(), "%v", rep)
}

// TestLinkProxies: with Options.LinkProxies every connection between
// nodes goes through the test's proxies - followers' fetches, Raft,
// heartbeats - so that cutting a node's links cuts it off: the others
// fence it and lead its partitions, while clients still reach it. Healed,
// it rejoins every ISR.
func TestLinkProxies(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips a three-process test")
	}
	c := clustertest.Start(t, clustertest.Options{LinkProxies: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "routed"
	require.NoError(t, c.CreateTopic(ctx, topic, 3, 3, map[string]string{"min.insync.replicas": "2"}))
	require.NoError(t, c.WaitInSync(ctx, topic))
	require.Len(t, c.Links(), 3*2*2, "a link per ordered pair of nodes and listener")

	// A record acknowledged by all three replicas of each partition:
	// every follower fetched it from its leader - through its link.
	cl, err := c.Client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	for p := range int32(3) {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("x")}).FirstErr())
	}
	ps, err := c.Partitions(ctx, topic)
	require.NoError(t, err)
	for _, p := range ps {
		require.Len(t, p.ISR, 3, "%v", p)
		for _, r := range p.Replicas {
			if r != p.Leader {
				k := c.Link(r, p.Leader, clustertest.KafkaListener)
				require.Positive(t, k.Bytes(clustertest.Backward), "%v: follower %d fetched through %v", p, r, k)
			}
		}
	}
	// Every node spoke to every voter's controller listener through its
	// link.
	for _, from := range c.Nodes() {
		for _, to := range c.VoterIDs() {
			if from.ID() != to {
				k := c.Link(from.ID(), to, clustertest.ControllerListener)
				require.Positive(t, k.Accepted(), "node %d dialed voter %d's controller listener through %v", from.ID(), to, k)
			}
		}
	}

	// Cut off the leader of partition 0: the others fence it and elect
	// new leaders; it still answers clients.
	isolated := ps[0].Leader
	require.NoError(t, c.Isolate(isolated))
	require.NoError(t, clustertest.Eventually(ctx, fmt.Sprintf("node %d fenced by the others", isolated), func(ctx context.Context) error {
		for _, n := range c.Nodes() {
			if n.ID() == isolated {
				continue
			}
			resp, err := n.Metadata(ctx, topic)
			if err != nil {
				return err
			}
			for _, b := range resp.Brokers {
				if b.NodeID == isolated {
					return fmt.Errorf("node %d lists node %d", n.ID(), isolated)
				}
			}
			for _, p := range resp.Topics[0].Partitions {
				if p.Leader == isolated {
					return fmt.Errorf("node %d: partition %d led by %d", n.ID(), p.Partition, isolated)
				}
			}
		}
		return nil
	}))
	_, err = c.Node(isolated).Metadata(ctx, topic)
	require.NoError(t, err, "clients still reach the isolated node")

	require.NoError(t, c.HealNetwork())
	require.True(t, c.NetworkHealthy())
	require.NoError(t, c.WaitBrokers(ctx))
	require.NoError(t, c.WaitInSync(ctx, topic))
}

// TestFullDiskVoterSurvivesElection: a voter whose disk is full goes on
// taking part in elections. Before the stable store kept space in reserve,
// hashicorp/raft panicked in such a node as soon as it had to record the
// new term of an election (its quorum-state file replaced whole, which a
// full disk refused): the node died (found by the randomized run, seed 102).
func TestFullDiskVoterSurvivesElection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips a three-process test")
	}
	if err := clustertest.DiskSupported(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	c := clustertest.Start(t, clustertest.Options{DiskBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctl, err := c.Controller(ctx)
	require.NoError(t, err)
	var full int32
	for _, n := range c.Nodes() {
		if n.ID() != ctl {
			full = n.ID()
			break
		}
	}
	require.NoError(t, c.Node(full).FillDisk())
	require.NoError(t, c.Node(ctl).Kill())
	// A new controller among the other two: a new term, which the full
	// node records.
	require.NoError(t, clustertest.Eventually(ctx, "a new controller", func(ctx context.Context) error {
		id, err := c.Controller(ctx)
		if err == nil && id == ctl {
			err = fmt.Errorf("still %d", id)
		}
		return err
	}))
	time.Sleep(2 * time.Second)
	require.NoError(t, c.CheckExits(), "the node with the full disk is alive")
	require.NoError(t, c.Node(full).FreeDisk())
	require.NoError(t, c.Node(ctl).Start(ctx))
	require.NoError(t, c.WaitBrokers(ctx))
}
