package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/clustertest"
)

const movingTopic = "moving"

// steadyProducer sends unique values to a one-partition topic with
// idempotent acks=all, noting each in a ledger before it is sent and each
// acknowledgement as it comes.
type steadyProducer struct {
	cl     *kgo.Client
	ledger *clustertest.Ledger
	acks   atomic.Int64
	failed atomic.Int64
	errMu  sync.Mutex
	errs   []error
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func startSteadyProducer(t *testing.T, c *clustertest.Cluster, topic string, rate int) *steadyProducer {
	cl, err := c.Client(
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond),
		kgo.ProduceRequestTimeout(5*time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	)
	require.NoError(t, err)
	p := &steadyProducer{cl: cl, ledger: clustertest.NewLedger()}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	p.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("m%d", seq)
			p.ledger.Send(v)
			// Not ctx: a record handed over is sent and answered after
			// the loop stops (finish flushes them).
			cl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err != nil {
					p.failed.Add(1)
					p.errMu.Lock()
					if len(p.errs) < 10 {
						p.errs = append(p.errs, fmt.Errorf("%s: %w", v, err))
					}
					p.errMu.Unlock()
					return
				}
				p.ledger.Ack(clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
				p.acks.Add(1)
			})
		}
	})
	t.Cleanup(func() { p.stop(); p.wg.Wait(); cl.Close() })
	return p
}

// awaitAcks waits until the producer has been acknowledged more than
// before: it gets through.
func (p *steadyProducer) awaitAcks(ctx context.Context, what string) error {
	before := p.acks.Load()
	return clustertest.Eventually(ctx, "acknowledgements "+what, func(context.Context) error {
		if n := p.acks.Load(); n <= before+10 {
			return fmt.Errorf("%d acknowledgements, %d before (failed records: %d)", n, before, p.failed.Load())
		}
		return nil
	})
}

// finish stops the producer and waits for every record handed to the
// client to be acknowledged or to fail.
func (p *steadyProducer) finish(ctx context.Context) error {
	p.stop()
	p.wg.Wait()
	return p.cl.Flush(ctx)
}

// replicaGone waits until node n no longer has a directory for the
// partition: it deleted its replica.
func replicaGone(ctx context.Context, n *clustertest.Node, topic string, partition int32) error {
	dir := filepath.Join(n.Dir(), fmt.Sprintf("%s-%d", topic, partition))
	return clustertest.Eventually(ctx, fmt.Sprintf("node %d deletes its replica of %s-%d", n.ID(), topic, partition), func(context.Context) error {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %v", dir, err)
		}
		return nil
	})
}

// TestOperations is issue 11's operations on a live cluster of processes
// (three voters and a broker-only node 4), with an idempotent acks=all
// producer running throughout on a partition with replication factor 3
// and min.insync.replicas 2, one step after another:
//
//   - node 4 joins, and a follower's replica moves to it: the reassignment
//     completes once node 4 has caught up, and the old follower deletes its
//     replica;
//   - a reassignment that replaces the leader: the leadership moves to the
//     first target replica in sync, the old leader deletes its replica;
//   - the leader (node 4) crashes, the leadership moves; back and in sync,
//     a preferred election returns the leadership to it, and a second
//     election is not needed;
//   - the active controller hangs (SIGSTOP): the operations, sent to any
//     other node, reach the controller elected after it;
//   - a reassignment to a paused node stays under way (listed with its
//     adding and removing replicas) until cancelled: back to the replicas
//     before, the paused node holds nothing once it resumes;
//   - node 4's decommission: refused while it holds a replica, refused
//     while it runs once its replica has moved away (its leadership with
//     it), accepted once it has stopped; the brokers no longer list it.
//
// At the end every acknowledged record is read back exactly once at its
// offset, and the final replicas' files - two of them copied while the
// producer ran - hold every record read.
func TestOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the four-process operations test (builds the spool binary, runs about half a minute)")
	}
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	c := clustertest.New(t, clustertest.Options{Nodes: 4, Voters: 3, SessionTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	phase := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Minute) }
	pctx, pcancel := phase()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { errs[i] = c.Node(int32(i + 1)).Start(pctx) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, c.WaitBrokers(pctx))
	require.NoError(t, c.CreateTopic(pctx, movingTopic, 1, 3, map[string]string{"min.insync.replicas": "2"}))
	require.NoError(t, c.WaitInSync(pctx, movingTopic))
	pcancel()
	ps, err := c.Partitions(ctx, movingTopic)
	require.NoError(t, err)
	leader := ps[0].Leader
	followers := slices.DeleteFunc(slices.Clone(ps[0].Replicas), func(r int32) bool { return r == leader })
	p := startSteadyProducer(t, c, movingTopic, 300)
	pctx, pcancel = phase()
	require.NoError(t, p.awaitAcks(pctx, "before any operation"))
	pcancel()
	step("nodes 1-3 serving, %s-0 on %v led by %d, producing", movingTopic, ps[0].Replicas, leader)

	// A follower's replica moves to the new broker.
	pctx, pcancel = phase()
	require.NoError(t, c.Node(4).Start(pctx))
	require.NoError(t, c.WaitBrokers(pctx))
	target := []int32{leader, followers[0], 4}
	moved := time.Now()
	require.NoError(t, c.Reassign(pctx, movingTopic, 0, target))
	require.NoError(t, c.WaitReassigned(pctx, movingTopic, 0, target))
	step("reassigned to %v in %.1fs (%d acks)", target, time.Since(moved).Seconds(), p.ledger.Acked())
	require.NoError(t, replicaGone(pctx, c.Node(followers[1]), movingTopic, 0))
	ps, err = c.Partitions(pctx, movingTopic)
	require.NoError(t, err)
	require.Equal(t, leader, ps[0].Leader, "the leader was not replaced: it stays")
	require.NoError(t, p.awaitAcks(pctx, "after the move"))
	pcancel()

	// The leader is replaced: the leadership moves.
	pctx, pcancel = phase()
	target = []int32{4, followers[0], followers[1]}
	require.NoError(t, c.Reassign(pctx, movingTopic, 0, target))
	require.NoError(t, c.WaitReassigned(pctx, movingTopic, 0, target))
	ps, err = c.Partitions(pctx, movingTopic)
	require.NoError(t, err)
	require.NotEqual(t, leader, ps[0].Leader)
	step("the leader %d replaced: %v led by %d", leader, target, ps[0].Leader)
	require.NoError(t, replicaGone(pctx, c.Node(leader), movingTopic, 0))
	require.NoError(t, p.awaitAcks(pctx, "after the leader's replacement"))
	pcancel()

	// The preferred leader crashes and comes back: a preferred election
	// gives it its leadership back.
	pctx, pcancel = phase()
	require.NoError(t, clustertest.Eventually(pctx, "node 4 leads", func(ctx context.Context) error {
		l, err := c.Leader(ctx, movingTopic, 0)
		if err == nil && l != 4 {
			err = fmt.Errorf("node %d leads", l)
		}
		return err
	}))
	require.NoError(t, c.Node(4).Kill())
	require.NoError(t, clustertest.Eventually(pctx, "a new leader", func(ctx context.Context) error {
		l, err := c.Leader(ctx, movingTopic, 0)
		if err == nil && (l == 4 || l < 0) {
			err = fmt.Errorf("leader %d", l)
		}
		return err
	}))
	require.NoError(t, c.Node(4).Start(pctx))
	require.NoError(t, c.WaitInSync(pctx, movingTopic))
	l, err := c.Leader(pctx, movingTopic, 0)
	require.NoError(t, err)
	require.NotEqual(t, int32(4), l, "no election happens by itself")
	res, err := c.ElectLeaders(pctx, false, movingTopic, 0)
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.NoError(t, clustertest.Eventually(pctx, "node 4 leads again", func(ctx context.Context) error {
		l, err := c.Leader(ctx, movingTopic, 0)
		if err == nil && l != 4 {
			err = fmt.Errorf("node %d leads", l)
		}
		return err
	}))
	res, err = c.ElectLeaders(pctx, false, movingTopic, 0)
	require.NoError(t, err)
	require.ErrorIs(t, res[0], kerr.ElectionNotNeeded)
	step("node 4 killed and back; a preferred election made it the leader again")
	require.NoError(t, p.awaitAcks(pctx, "after the preferred election"))
	pcancel()

	// The active controller hangs: the operations reach the controller
	// elected after it, through any node.
	pctx, pcancel = phase()
	var ctrl int32
	require.NoError(t, clustertest.Eventually(pctx, "an agreed controller", func(ctx context.Context) (err error) {
		ctrl, err = c.Controller(ctx)
		return err
	}))
	require.NoError(t, c.Node(ctrl).Pause())
	res, err = c.ElectLeaders(pctx, false, movingTopic, 0)
	require.NoError(t, err)
	require.ErrorIs(t, res[0], kerr.ElectionNotNeeded)
	under, err := c.Reassignments(pctx, movingTopic)
	require.NoError(t, err)
	require.Empty(t, under)
	require.NoError(t, c.Node(ctrl).Resume())
	require.NoError(t, c.WaitInSync(pctx, movingTopic))
	step("with the active controller (node %d) paused, the operations reached its successor", ctrl)
	pcancel()

	// A reassignment to a node that cannot catch up (paused) stays under
	// way until cancelled.
	pctx, pcancel = phase()
	require.NoError(t, c.Node(leader).Pause())
	target = []int32{4, followers[0], leader}
	require.NoError(t, c.Reassign(pctx, movingTopic, 0, target))
	under, err = c.Reassignments(pctx, movingTopic)
	require.NoError(t, err)
	require.Equal(t, clustertest.Reassignment{Replicas: append(slices.Clone(target), followers[1]), Adding: []int32{leader}, Removing: []int32{followers[1]}}, under[0])
	require.NoError(t, p.awaitAcks(pctx, "while the reassignment is under way"))
	require.NoError(t, c.Reassign(pctx, movingTopic, 0, nil))
	under, err = c.Reassignments(pctx, movingTopic)
	require.NoError(t, err)
	require.Empty(t, under)
	require.ErrorIs(t, c.Reassign(pctx, movingTopic, 0, nil), kerr.NoReassignmentInProgress)
	require.NoError(t, c.Node(leader).Resume())
	require.NoError(t, c.WaitReassigned(pctx, movingTopic, 0, []int32{4, followers[0], followers[1]}))
	require.NoError(t, replicaGone(pctx, c.Node(leader), movingTopic, 0))
	step("a reassignment to paused node %d cancelled: back on %v", leader, []int32{4, followers[0], followers[1]})
	require.NoError(t, p.awaitAcks(pctx, "after the cancellation"))
	pcancel()

	// Node 4's decommission.
	pctx, pcancel = phase()
	err = c.UnregisterBroker(pctx, 4)
	require.ErrorIs(t, err, kerr.InvalidRequest)
	require.ErrorContains(t, err, "holds replicas")
	target = []int32{leader, followers[0], followers[1]}
	require.NoError(t, c.Reassign(pctx, movingTopic, 0, target))
	require.NoError(t, c.WaitReassigned(pctx, movingTopic, 0, target))
	require.NoError(t, replicaGone(pctx, c.Node(4), movingTopic, 0))
	err = c.UnregisterBroker(pctx, 4)
	require.ErrorIs(t, err, kerr.InvalidRequest)
	require.ErrorContains(t, err, "is running")
	code, err := c.Node(4).Stop(pctx)
	require.NoError(t, err)
	require.Zero(t, code)
	require.NoError(t, clustertest.Eventually(pctx, "node 4 unregistered", func(ctx context.Context) error {
		return c.UnregisterBroker(ctx, 4)
	}))
	require.ErrorIs(t, c.UnregisterBroker(pctx, 4), kerr.BrokerIDNotRegistered)
	for _, n := range c.Running() {
		md, err := n.Metadata(pctx)
		require.NoError(t, err)
		for _, b := range md.Brokers {
			require.NotEqual(t, int32(4), b.NodeID, "node %d still lists broker 4", n.ID())
		}
	}
	step("node 4 decommissioned: its replica moved to node %d, it stopped and was unregistered", leader)
	require.NoError(t, p.awaitAcks(pctx, "after the decommission"))
	pcancel()

	// Every acknowledged record is there, once, at its offset; the
	// replicas hold the same records.
	pctx, pcancel = phase()
	require.NoError(t, p.finish(pctx))
	require.NoError(t, c.WaitInSync(pctx, movingTopic))
	pcancel()
	p.errMu.Lock()
	step("produced %d, acknowledged %d, failed %d %v", p.ledger.Sent(), p.ledger.Acked(), p.failed.Load(), p.errs)
	p.errMu.Unlock()
	ends, err := c.EndOffsets(ctx, movingTopic)
	require.NoError(t, err)
	read := readTopic(t, ctx, c, movingTopic, ends)
	rep := p.ledger.Check(read)
	require.True(t, rep.OK(), "%v", rep)
	step("read back: %v", rep)
	var kill sync.WaitGroup
	for _, n := range c.Running() {
		kill.Go(func() { n.Kill() })
	}
	kill.Wait()
	for _, id := range target {
		recs, err := c.Node(id).ReadReplica(ctx, movingTopic, 0)
		require.NoError(t, err)
		require.Equal(t, read, recs, "node %d's replica", id)
	}
	step("nodes %v hold every record read", target)
	require.NoError(t, c.CheckExits())
}

// readTopic reads every partition of a topic from its start up to its end
// offset with a plain (group-less) consumer.
func readTopic(t *testing.T, ctx context.Context, c *clustertest.Cluster, topic string, ends map[int32]int64) []clustertest.Record {
	t.Helper()
	from := map[int32]kgo.Offset{}
	for p := range ends {
		from[p] = kgo.NewOffset().AtStart()
	}
	cl, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var out []clustertest.Record
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for !done() {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading back: next offsets %v, ends %v", next, ends)
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			next[r.Partition] = r.Offset + 1
		})
	}
	return out
}
