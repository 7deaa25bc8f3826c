package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WorkloadOptions describe the traffic of a Workload.
type WorkloadOptions struct {
	// Topic is the topic produced to and consumed from; it must exist.
	Topic string
	// Producers is how many goroutines produce, through one client.
	// Default 4.
	Producers int
	// Rate is how many records each producer goroutine sends per second.
	// Default 250.
	Rate int
	// LeaderAcks produces with acks=1 and without idempotence, instead of
	// idempotent acks=all: a leader acknowledges what only it has, which
	// a failover may lose. For negative controls.
	LeaderAcks bool
	// Group is the consumer group that consumes the topic and commits
	// what it consumed. Default: the topic's name + "-group".
	Group string
	// Members is how many clients the group has. Default 2; negative: no
	// group.
	Members int
	// Latencies keeps each acknowledged record's produce latency, for
	// Workload.Latencies.
	Latencies bool
	// ClientOpts are more options for every client the workload makes.
	ClientOpts []kgo.Opt
}

// Workload is the traffic that runs through a test's faults: producers of
// unique values recording what was sent and acknowledged in a Ledger
// (idempotent, acks=all unless LeaderAcks), a consumer group committing
// what its members consume (kgo's autocommit), and a watcher asking the
// group's coordinator for its committed offsets every 100ms, noting any
// that go back. Verify stops it and checks everything it recorded, and
// the cluster's replicas.
type Workload struct {
	c          *Cluster
	opts       WorkloadOptions
	partitions int
	ledger     *Ledger

	acks   []atomic.Int64 // acknowledgements per partition
	failed atomic.Int64
	errMu  sync.Mutex
	errs   []error // the first few produce failures

	latMu sync.Mutex
	lats  []latency

	consumedMu sync.Mutex
	consumed   map[string]Record

	commitsMu   sync.Mutex
	maxCommit   map[int32]int64
	backwards   []string
	commitReads atomic.Int64

	stopProducers, stopGroup context.CancelFunc
	producers, group         sync.WaitGroup
	prod                     *kgo.Client
	members                  []*kgo.Client
	stopOnce                 sync.Once

	read map[int32][]Record // what Check read, by partition
}

// latency is one acknowledged record's: when it was handed to the client,
// and how long until its acknowledgement.
type latency struct {
	sent time.Time
	took time.Duration
}

// StartWorkload starts producing to opts.Topic and consuming it with a
// group. Stop it with Verify (or Stop).
func StartWorkload(ctx context.Context, c *Cluster, opts WorkloadOptions) (*Workload, error) {
	if opts.Topic == "" {
		return nil, errors.New("clustertest: workload: no topic")
	}
	if opts.Producers <= 0 {
		opts.Producers = 4
	}
	if opts.Rate <= 0 {
		opts.Rate = 250
	}
	if opts.Group == "" {
		opts.Group = opts.Topic + "-group"
	}
	if opts.Members == 0 {
		opts.Members = 2
	}
	ps, err := c.Partitions(ctx, opts.Topic)
	if err != nil {
		return nil, fmt.Errorf("clustertest: workload: %w", err)
	}
	w := &Workload{c: c, opts: opts, partitions: len(ps), ledger: NewLedger(), acks: make([]atomic.Int64, len(ps)),
		consumed: map[string]Record{}, maxCommit: map[int32]int64{}}
	// Retries come quickly: a failover is over in about a session
	// timeout, and the test is about how soon the client gets through.
	backoff := kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond })
	popts := []kgo.Opt{
		kgo.DefaultProduceTopic(opts.Topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.ProduceRequestTimeout(5 * time.Second),
		backoff,
	}
	if opts.LeaderAcks {
		popts = append(popts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	} else {
		popts = append(popts, kgo.RequiredAcks(kgo.AllISRAcks())) // idempotent by default
	}
	w.prod, err = c.Client(append(popts, opts.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	for range max(opts.Members, 0) {
		m, err := c.Client(append([]kgo.Opt{
			kgo.ConsumerGroup(opts.Group),
			kgo.ConsumeTopics(opts.Topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.AutoCommitInterval(200 * time.Millisecond),
			kgo.HeartbeatInterval(300 * time.Millisecond),
			kgo.SessionTimeout(10 * time.Second),
			kgo.FetchMaxWait(200 * time.Millisecond),
			kgo.MetadataMinAge(100 * time.Millisecond),
			backoff,
		}, opts.ClientOpts...)...)
		if err != nil {
			w.prod.Close()
			for _, m := range w.members {
				m.Close()
			}
			return nil, err
		}
		w.members = append(w.members, m)
	}
	pctx, pcancel := context.WithCancel(context.Background())
	gctx, gcancel := context.WithCancel(context.Background())
	w.stopProducers, w.stopGroup = pcancel, gcancel
	for g := range opts.Producers {
		w.producers.Go(func() { w.produce(pctx, g) })
	}
	for _, m := range w.members {
		w.group.Go(func() { w.consume(gctx, m) })
	}
	if len(w.members) > 0 {
		w.group.Go(func() { w.watchCommits(gctx) })
	}
	return w, nil
}

// Ledger is what the producers sent and were acknowledged.
func (w *Workload) Ledger() *Ledger { return w.ledger }

// Options are the workload's options, defaults filled in.
func (w *Workload) Options() WorkloadOptions { return w.opts }

// produce sends unique values until ctx ends.
func (w *Workload) produce(ctx context.Context, g int) {
	tick := time.NewTicker(time.Second / time.Duration(w.opts.Rate))
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v := fmt.Sprintf("p%d-%d", g, seq)
		w.ledger.Send(v)
		sent := time.Now()
		// ctx ends a wait for buffer space when the producers stop; it
		// also fails buffered records not yet sent (never one sent: an
		// idempotent client does not give up on those), which the ledger
		// counts as unacknowledged.
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
			w.ledger.Ack(Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			if int(r.Partition) < len(w.acks) {
				w.acks[r.Partition].Add(1)
			}
			if w.opts.Latencies {
				w.latMu.Lock()
				w.lats = append(w.lats, latency{sent: sent, took: time.Since(sent)})
				w.latMu.Unlock()
			}
		})
	}
}

// consume polls one member until ctx ends; kgo commits what was polled
// every AutoCommitInterval.
func (w *Workload) consume(ctx context.Context, m *kgo.Client) {
	for ctx.Err() == nil {
		fs := m.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			w.consumedMu.Lock()
			w.consumed[string(r.Value)] = Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)}
			w.consumedMu.Unlock()
		})
	}
}

// watchCommits asks for the group's committed offsets until ctx ends.
// Errors - no agreed coordinator, one that is loading - are a failover's,
// and are asked again.
func (w *Workload) watchCommits(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		offs, coord, err := w.c.CommittedOffsets(ctx, w.opts.Group, w.opts.Topic)
		if err != nil {
			continue
		}
		w.commitReads.Add(1)
		w.noteCommits(offs, coord)
	}
}

func (w *Workload) noteCommits(offs map[int32]int64, coord int32) {
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

// Committed is the highest committed offset of the group observed on each
// partition.
func (w *Workload) Committed() map[int32]int64 {
	w.commitsMu.Lock()
	defer w.commitsMu.Unlock()
	return maps.Clone(w.maxCommit)
}

// Acks are the acknowledgements so far, per partition.
func (w *Workload) Acks() []int64 {
	out := make([]int64, len(w.acks))
	for p := range out {
		out[p] = w.acks[p].Load()
	}
	return out
}

// Failed is how many records the producer gave up on, with the first few
// errors.
func (w *Workload) Failed() (int64, []error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.failed.Load(), slices.Clone(w.errs)
}

// AwaitProgress waits until every partition has more acknowledgements than
// when it was called: the producers get through everywhere.
func (w *Workload) AwaitProgress(ctx context.Context) error {
	before := w.Acks()
	return Eventually(ctx, "acknowledgements on every partition", func(context.Context) error {
		now := w.Acks()
		for p := range now {
			if now[p] <= before[p] {
				n, _ := w.Failed()
				return fmt.Errorf("partition %d: %d acknowledgements, none new (failed records: %d)", p, now[p], n)
			}
		}
		return nil
	})
}

// AwaitGroupProgress waits until the group has committed, on every
// partition, beyond what was observed when it was called.
func (w *Workload) AwaitGroupProgress(ctx context.Context) error {
	if len(w.members) == 0 {
		return nil
	}
	before := w.Committed()
	return Eventually(ctx, "the group committing on every partition", func(context.Context) error {
		now := w.Committed()
		for p := range int32(w.partitions) {
			b, ok := before[p]
			if !ok {
				b = -1
			}
			if n, ok := now[p]; !ok || n <= b {
				return fmt.Errorf("partition %d: committed %v, as before", p, now[p])
			}
		}
		return nil
	})
}

// Latencies returns the produce latencies of the records acknowledged so
// far that were handed to the client in [from, to), sorted
// (WorkloadOptions.Latencies).
func (w *Workload) Latencies(from, to time.Time) []time.Duration {
	w.latMu.Lock()
	defer w.latMu.Unlock()
	var out []time.Duration
	for _, l := range w.lats {
		if !l.sent.Before(from) && l.sent.Before(to) {
			out = append(out, l.took)
		}
	}
	slices.Sort(out)
	return out
}

// Percentile returns the q-quantile (0 to 1) of sorted durations, 0 if
// there are none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// StopProducing stops the producers and waits until every record handed
// to the client has been acknowledged or has failed.
func (w *Workload) StopProducing(ctx context.Context) error {
	w.stopProducers()
	w.producers.Wait()
	if err := w.prod.Flush(ctx); err != nil {
		return fmt.Errorf("clustertest: workload: flushing the producer: %w", err)
	}
	return nil
}

// Stop stops every goroutine of the workload and closes its clients.
func (w *Workload) Stop() {
	w.stopOnce.Do(func() {
		w.stopProducers()
		w.stopGroup()
		w.producers.Wait()
		w.group.Wait()
		w.prod.Close()
		for _, m := range w.members {
			m.Close()
		}
	})
}

// Verify ends the run and checks it: Check, then the replicas of the
// topic and of __consumer_offsets compared with each other and with what
// was read (CompareReplicas - which kills every node). Problems found go
// in the Report; the error says what could not be checked (a cluster that
// did not heal within ctx, say). To check several workloads of one
// cluster, use VerifyAll.
func (w *Workload) Verify(ctx context.Context) (*Report, error) {
	reps, err := VerifyAll(ctx, w)
	if len(reps) == 0 {
		return nil, err
	}
	return reps[0], err
}

// VerifyAll checks each workload (Check), then compares the replicas of
// their topics and of __consumer_offsets once (CompareReplicas, which
// kills every node), adding each divergence to the report of the
// workload whose topic it is in (to the first report for
// __consumer_offsets). The workloads must be of one cluster.
func VerifyAll(ctx context.Context, ws ...*Workload) ([]*Report, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	var reps []*Report
	byTopic := map[string]int{}
	topics := []string{}
	group := false
	for i, w := range ws {
		rep, err := w.Check(ctx)
		if err != nil {
			return reps, err
		}
		reps = append(reps, rep)
		byTopic[w.opts.Topic] = i
		topics = append(topics, w.opts.Topic)
		group = group || len(w.members) > 0
	}
	if group {
		topics = append(topics, OffsetsTopic)
	}
	diverged, err := ws[0].c.CompareReplicas(ctx, func(l *ReplicaLog) string {
		if i, ok := byTopic[l.Topic]; ok {
			return ws[i].compareRead(l)
		}
		return ""
	}, topics...)
	for _, d := range diverged {
		i := byTopic[d.Topic] // __consumer_offsets: the first
		reps[i].Diverged = append(reps[i].Diverged, d.String())
	}
	return reps, err
}

// Check ends the run and checks what can be checked with the cluster
// running: it stops the producers (waiting for each record's fate) and,
// once every partition of every topic is in sync, reads the topic back
// from the start with a plain consumer and checks it against the ledger
// (Ledger.Check: acknowledged records lost or moved, duplicates, records
// never sent, offsets not dense); then waits until the group has
// committed up to the end of every partition, checks that it consumed
// every acknowledged record and nothing never sent, and that its
// committed offsets, as observed all along, never went back; and stops
// the group.
func (w *Workload) Check(ctx context.Context) (*Report, error) {
	if err := w.StopProducing(ctx); err != nil {
		return nil, err
	}
	if err := w.c.WaitInSync(ctx); err != nil {
		return nil, fmt.Errorf("clustertest: check: %w", err)
	}
	// In sync is not yet caught up: a follower within the replica lag
	// time counts as in sync while the leader's high watermark (what
	// EndOffsets answers) still waits for its next fetch. With the
	// producers stopped the end offsets only grow until every replica
	// has everything; read once they stay put, so that what is read is
	// what the replicas hold (compareRead).
	var ends map[int32]int64
	if err := Eventually(ctx, "end offsets that stay put", func(ctx context.Context) error {
		before, err := w.c.EndOffsets(ctx, w.opts.Topic)
		if err != nil {
			return err
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		ends, err = w.c.EndOffsets(ctx, w.opts.Topic)
		if err != nil {
			return err
		}
		if !maps.Equal(before, ends) {
			return fmt.Errorf("end offsets moved from %v to %v", before, ends)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	read, err := w.c.ReadAll(ctx, w.opts.Topic, ends)
	if err != nil {
		return nil, err
	}
	w.read = map[int32][]Record{}
	for _, r := range read {
		w.read[r.Partition] = append(w.read[r.Partition], r)
	}
	rep := w.ledger.Check(read)

	if len(w.members) > 0 {
		err := Eventually(ctx, "the group committed to the end", func(ctx context.Context) error {
			offs, coord, err := w.c.CommittedOffsets(ctx, w.opts.Group, w.opts.Topic)
			if err != nil {
				return err
			}
			w.noteCommits(offs, coord)
			for p, end := range ends {
				if offs[p] < end {
					return fmt.Errorf("committed %v, end offsets %v", offs, ends)
				}
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
		w.stopGroup()
		w.group.Wait()
		w.consumedMu.Lock()
		for _, r := range w.ledger.AckedRecords() {
			if _, ok := w.consumed[r.Value]; !ok {
				rep.NotConsumed = append(rep.NotConsumed, r)
			}
		}
		for v, r := range w.consumed {
			if !w.ledger.WasSent(v) {
				rep.Unknown = append(rep.Unknown, r)
			}
		}
		w.consumedMu.Unlock()
		w.commitsMu.Lock()
		rep.CommitsBackwards = slices.Clone(w.backwards)
		rep.CommitsObserved = int(w.commitReads.Load())
		w.commitsMu.Unlock()
	}
	w.Stop()
	return rep, nil
}

// compareRead reports a replica of the workload's topic that does not
// hold exactly what Check read.
func (w *Workload) compareRead(l *ReplicaLog) string {
	got, want := l.Records(), w.read[l.Partition]
	if slices.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf("node %d's replica holds %d records, the reader read %d (first difference: %s)",
		l.Node, len(got), len(want), firstDifference(got, want))
}

// OffsetsTopic is the topic that holds consumer groups' committed offsets.
const OffsetsTopic = "__consumer_offsets"

func firstDifference(a, b []Record) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%v vs %v", a[i], b[i])
		}
	}
	if len(a) > len(b) {
		return fmt.Sprintf("%v and after, beyond what was read", a[len(b)])
	}
	if len(b) > len(a) {
		return fmt.Sprintf("%v and after, missing", b[len(a)])
	}
	return "none"
}

// ReadAll reads each partition of a topic from its start up to the offset
// ends gives for it, with a plain consumer (no group), and returns the
// records in the order read.
func (c *Cluster) ReadAll(ctx context.Context, topic string, ends map[int32]int64) ([]Record, error) {
	from := map[int32]kgo.Offset{}
	for p := range ends {
		from[p] = kgo.NewOffset().AtStart()
	}
	cl, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []Record
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	var lastErr error
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("clustertest: reading %s back: next offsets %v, ends %v: %w (last fetch error: %v)", topic, next, ends, ctx.Err(), lastErr)
		}
		fs.EachError(func(_ string, p int32, err error) { lastErr = fmt.Errorf("partition %d: %w", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				out = append(out, Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			}
			next[r.Partition] = r.Offset + 1
		})
	}
	return out, nil
}
