package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
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

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

const (
	failoverTopic      = "acked"
	failoverGroup      = "watchers"
	failoverPartitions = 3
	producers          = 4
	// perProducerRate paces each producer goroutine: enough load that
	// every failover happens with produce requests in flight, little
	// enough that three nodes and the test share two cores.
	perProducerRate = 250 // records per second
)

// workload is the traffic that runs through the faults: idempotent
// acks=all producers of unique values, a consumer group committing what
// it consumes, and a watcher of the group's committed offsets.
type workload struct {
	c      *clustertest.Cluster
	ledger *clustertest.Ledger
	acks   [failoverPartitions]atomic.Int64 // acknowledgements per partition
	failed atomic.Int64                     // records the producer gave up on
	errMu  sync.Mutex
	errs   []error // the first few produce failures, for the log

	consumedMu sync.Mutex
	consumed   map[string]bool // values the group consumer polled

	commitsMu   sync.Mutex
	maxCommit   map[int32]int64 // the highest committed offset observed per partition
	backwards   []string        // observations of a committed offset lower than one observed before
	commitReads atomic.Int64

	stopProducers, stopConsumer context.CancelFunc
	producers, consumers        sync.WaitGroup
	prod                        *kgo.Client
	group                       *kgo.Client
}

func startWorkload(t *testing.T, c *clustertest.Cluster) *workload {
	w := &workload{c: c, ledger: clustertest.NewLedger(), consumed: map[string]bool{}, maxCommit: map[int32]int64{}}
	backoff := kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })
	var err error
	w.prod, err = c.Client(
		kgo.DefaultProduceTopic(failoverTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence is kgo's default, and needs acks=all
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond),
		kgo.ProduceRequestTimeout(5*time.Second),
		backoff,
	)
	require.NoError(t, err)
	w.group, err = c.Client(
		kgo.ConsumerGroup(failoverGroup),
		kgo.ConsumeTopics(failoverTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.HeartbeatInterval(300*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond),
		backoff,
	)
	require.NoError(t, err)

	pctx, pcancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithCancel(context.Background())
	w.stopProducers, w.stopConsumer = pcancel, ccancel
	for g := range producers {
		w.producers.Go(func() { w.produce(pctx, g) })
	}
	w.consumers.Go(func() { w.consume(cctx) })
	w.consumers.Go(func() { w.watchCommits(cctx) })
	return w
}

// produce sends unique values until ctx ends, recording each in the
// ledger before it is sent and each acknowledgement as it comes.
func (w *workload) produce(ctx context.Context, g int) {
	tick := time.NewTicker(time.Second / perProducerRate)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v := fmt.Sprintf("p%d-%d", g, seq)
		w.ledger.Send(v)
		// ctx ends a wait for buffer space when the producers stop; it
		// also fails buffered records not yet sent (never one sent: the
		// client is idempotent), which the ledger counts as unacknowledged.
		w.prod.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				w.failed.Add(1)
				w.errMu.Lock()
				if len(w.errs) < 10 {
					w.errs = append(w.errs, fmt.Errorf("%s: %w", v, err))
				}
				w.errMu.Unlock()
				return
			}
			w.ledger.Ack(clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			w.acks[r.Partition].Add(1)
		})
	}
}

// consume polls the group until ctx ends; kgo commits what was polled
// every AutoCommitInterval.
func (w *workload) consume(ctx context.Context) {
	for ctx.Err() == nil {
		fs := w.group.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			w.consumedMu.Lock()
			w.consumed[string(r.Value)] = true
			w.consumedMu.Unlock()
		})
	}
}

// watchCommits asks the group's coordinator for its committed offsets
// until ctx ends and notes any that went back. Errors (no agreed
// coordinator, one that is loading) are the failovers' and are retried.
func (w *workload) watchCommits(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		offs, coord, err := w.c.CommittedOffsets(ctx, failoverGroup, failoverTopic)
		if err != nil {
			continue
		}
		w.commitReads.Add(1)
		w.noteCommits(offs, coord)
	}
}

func (w *workload) noteCommits(offs map[int32]int64, coord int32) {
	w.commitsMu.Lock()
	defer w.commitsMu.Unlock()
	for p, off := range offs {
		if prev, ok := w.maxCommit[p]; ok && off < prev {
			w.backwards = append(w.backwards, fmt.Sprintf("partition %d: committed offset %d from node %d after %d was seen", p, off, coord, prev))
			continue
		}
		w.maxCommit[p] = off
	}
}

func (w *workload) committed() map[int32]int64 {
	w.commitsMu.Lock()
	defer w.commitsMu.Unlock()
	return maps.Clone(w.maxCommit)
}

func (w *workload) ackCounts() [failoverPartitions]int64 {
	var out [failoverPartitions]int64
	for p := range out {
		out[p] = w.acks[p].Load()
	}
	return out
}

// awaitProgress waits until every partition has had more acknowledgements
// than before: the producer gets through. It returns, for the log, when
// each partition was first acknowledged again after since (to within the
// 50ms it polls at).
func (w *workload) awaitProgress(ctx context.Context, what string, since time.Time) (string, error) {
	before := w.ackCounts()
	progressed := make([]time.Duration, len(before))
	err := clustertest.Eventually(ctx, "acknowledgements on every partition "+what, func(context.Context) error {
		now := w.ackCounts()
		var stuck error
		for p := range now {
			switch {
			case now[p] <= before[p]:
				stuck = fmt.Errorf("partition %d: %d acknowledgements, none new (failed records: %d)", p, now[p], w.failed.Load())
			case progressed[p] == 0:
				progressed[p] = time.Since(since)
			}
		}
		return stuck
	})
	return fmt.Sprint(progressed), err
}

// awaitGroupProgress waits until the group has committed, on every
// partition, more than before: it keeps consuming.
func (w *workload) awaitGroupProgress(ctx context.Context, before map[int32]int64) error {
	return clustertest.Eventually(ctx, "the group committing on every partition", func(context.Context) error {
		now := w.committed()
		for p := range int32(failoverPartitions) {
			if now[p] <= before[p] {
				return fmt.Errorf("partition %d: committed %d, as before", p, now[p])
			}
		}
		return nil
	})
}

// stopProducing stops the producers and waits for every record handed to
// the client to be acknowledged or to fail.
func (w *workload) stopProducing(t *testing.T, ctx context.Context) {
	w.stopProducers()
	w.producers.Wait()
	require.NoError(t, w.prod.Flush(ctx))
}

// stop stops every goroutine of the workload.
func (w *workload) stop() {
	w.stopProducers()
	w.stopConsumer()
	w.producers.Wait()
	w.consumers.Wait()
}

// TestFailovers is issue 10's multi-process test: three spool serve
// processes, a topic with three partitions at replication factor 3 and
// min.insync.replicas 2, idempotent acks=all producers of unique values
// and a consumer group, through these faults, one after another, each
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
// offsets, watched throughout, never go back. At the end
// every acknowledged record is read back exactly once at its acknowledged
// offset by a plain consumer, the group has consumed every acknowledged
// record and committed up to the end, and every node's files hold the same
// records as the consumer read (the replicas converged).
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
	pcancel()
	w := startWorkload(t, c)
	defer w.stop()
	// The group's first FindCoordinator creates __consumer_offsets: wait
	// until it is in sync and the group has committed, so that every
	// fault below hits a working group.
	pctx, pcancel = phase()
	require.NoError(t, clustertest.Eventually(pctx, "the group's first commit", func(context.Context) error {
		if len(w.committed()) < failoverPartitions {
			return fmt.Errorf("committed offsets seen: %v", w.committed())
		}
		return nil
	}))
	require.NoError(t, c.WaitInSync(pctx))
	pcancel()
	step("topic in sync, producing %d records/s, group committing", producers*perProducerRate)

	// heal restarts a node and waits until every partition of every topic
	// has all its replicas in sync again and the producer gets through.
	heal := func(n *clustertest.Node, committed map[int32]int64) {
		t.Helper()
		pctx, pcancel := phase()
		defer pcancel()
		restarted := time.Now()
		require.NoError(t, n.Start(pctx))
		require.NoError(t, c.WaitBrokers(pctx))
		require.NoError(t, c.WaitInSync(pctx))
		step("node %d restarted, every partition in sync after %.1fs (%d acks)", n.ID(), time.Since(restarted).Seconds(), w.ledger.Acked())
		_, err := w.awaitProgress(pctx, fmt.Sprintf("after node %d's restart", n.ID()), restarted)
		require.NoError(t, err)
		require.NoError(t, w.awaitGroupProgress(pctx, committed), "since node %d went down", n.ID())
	}
	// awaitLeaderMoved waits until the freshest metadata names a leader
	// other than the dead node for every partition it led.
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
		progressed, err := w.awaitProgress(pctx, fmt.Sprintf("with node %d down", dead), since)
		require.NoError(t, err)
		step("node %d down: new leaders after %.1fs; each partition acknowledged again after %s", dead, led.Seconds(), progressed)
	}

	for p := range int32(failoverPartitions) {
		leader, err := c.Leader(ctx, failoverTopic, p)
		require.NoError(t, err)
		require.GreaterOrEqual(t, leader, int32(1), "partition %d has a leader", p)
		n := c.Node(leader)
		committed := w.committed()
		killed := time.Now()
		require.NoError(t, n.Kill())
		step("SIGKILL node %d, leader of partition %d", leader, p)
		awaitFailover(leader, killed)
		heal(n, committed)
	}

	pctx, pcancel = phase()
	var ctrl int32
	require.NoError(t, clustertest.Eventually(pctx, "an agreed controller", func(ctx context.Context) (err error) {
		ctrl, err = c.Controller(ctx)
		return err
	}))
	pcancel()
	committed := w.committed()
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
	heal(c.Node(ctrl), committed)

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
	committed = w.committed()
	stopped := time.Now()
	code, err := c.Node(busiest).Stop(pctx)
	pcancel()
	require.NoError(t, err)
	require.Equal(t, 0, code, "spool serve exits 0 after a controlled shutdown")
	step("SIGTERM node %d (leading %d partitions): exited 0", busiest, led[busiest])
	awaitFailover(busiest, stopped)
	heal(c.Node(busiest), committed)

	// The coordinator's death: what the group committed before it stays.
	pctx, pcancel = phase()
	var before map[int32]int64
	var coord int32
	require.NoError(t, clustertest.Eventually(pctx, "the group's committed offsets", func(ctx context.Context) (err error) {
		before, coord, err = c.CommittedOffsets(ctx, failoverGroup, failoverTopic)
		if err == nil && len(before) < failoverPartitions {
			err = fmt.Errorf("offsets committed for %d partitions", len(before))
		}
		return err
	}))
	pcancel()
	committed = w.committed()
	killed = time.Now()
	require.NoError(t, c.Node(coord).Kill())
	step("SIGKILL node %d, the group's coordinator; committed before: %v", coord, before)
	pctx, pcancel = phase()
	var after map[int32]int64
	var newCoord int32
	require.NoError(t, clustertest.Eventually(pctx, "the committed offsets from a new coordinator", func(ctx context.Context) (err error) {
		after, newCoord, err = c.CommittedOffsets(ctx, failoverGroup, failoverTopic)
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
	heal(c.Node(coord), committed)

	// Quiesce: stop producing, wait for every record to be acknowledged
	// or to fail, and for the cluster to be in sync.
	pctx, pcancel = phase()
	w.stopProducing(t, pctx)
	require.NoError(t, c.WaitInSync(pctx))
	pcancel()
	w.errMu.Lock()
	step("produced %d, acknowledged %d, failed %d %v", w.ledger.Sent(), w.ledger.Acked(), w.failed.Load(), w.errs)
	w.errMu.Unlock()

	ends, err := c.EndOffsets(ctx, failoverTopic)
	require.NoError(t, err)
	read := readAll(t, ctx, c, ends)
	rep := w.ledger.Check(read)
	require.True(t, rep.OK(), "%v", rep)
	step("read back from the start: %v", rep)

	// The group consumed every acknowledged record and committed to the
	// end; its committed offsets never went back.
	pctx, pcancel = phase()
	require.NoError(t, clustertest.Eventually(pctx, "the group at the end", func(ctx context.Context) error {
		offs, coord, err := c.CommittedOffsets(ctx, failoverGroup, failoverTopic)
		if err != nil {
			return err
		}
		w.noteCommits(offs, coord)
		if !maps.Equal(offs, ends) {
			return fmt.Errorf("committed %v, end offsets %v", offs, ends)
		}
		return nil
	}))
	pcancel()
	w.stop()
	w.consumedMu.Lock()
	var notConsumed []clustertest.Record
	for _, r := range w.ledger.AckedRecords() {
		if !w.consumed[r.Value] {
			notConsumed = append(notConsumed, r)
		}
	}
	w.consumedMu.Unlock()
	require.Empty(t, notConsumed, "acknowledged records the group never consumed")
	w.commitsMu.Lock()
	require.Empty(t, w.backwards, "committed offsets that went back")
	w.commitsMu.Unlock()
	step("the group consumed every acknowledged record; %d reads of its committed offsets, none went back", w.commitReads.Load())

	// The replicas converged: with nothing produced, every node's files
	// hold exactly what the consumer read. The nodes are killed, not
	// stopped: a controlled shutdown needs a controller quorum, which the
	// last two nodes to stop would not have.
	w.prod.Close()
	w.group.Close()
	byPartition := map[int32][]clustertest.Record{}
	for _, r := range read {
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Go(func() { n.Kill() })
	}
	wg.Wait()
	for _, n := range c.Nodes() {
		for p := range int32(failoverPartitions) {
			recs, err := n.ReadReplica(ctx, failoverTopic, p)
			require.NoError(t, err)
			require.Equal(t, len(byPartition[p]), len(recs), "node %d's replica of partition %d: records", n.ID(), p)
			require.Equal(t, byPartition[p], recs, "node %d's replica of partition %d", n.ID(), p)
		}
	}
	step("every node's replica of every partition holds the records read")
	require.NoError(t, c.CheckExits())
}

// readAll reads every partition of the topic from its start up to its end
// offset with a plain (group-less) consumer.
func readAll(t *testing.T, ctx context.Context, c *clustertest.Cluster, ends map[int32]int64) []clustertest.Record {
	t.Helper()
	from := map[int32]kgo.Offset{}
	for p := range ends {
		from[p] = kgo.NewOffset().AtStart()
	}
	cl, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{failoverTopic: from}), kgo.FetchMaxWait(100*time.Millisecond))
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
		fs.EachError(func(topic string, p int32, err error) { t.Logf("reading back %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			next[r.Partition] = r.Offset + 1
		})
	}
	return out
}
