package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The failover test's topic: by default a partition led by each of the
// three brokers (so that the active controller leads one too), each on all
// three, acks=all needing two of them.
const failoverTopic = "failover"

// failoverClient is a producer configuration the failover test runs:
// every client produces to the partitions at the same time, so that each
// kill is measured with each.
type failoverClient struct {
	name string
	opts []kgo.Opt
}

// failoverClients are kgo with its defaults - which refreshes metadata at
// most every 5 s (MetadataMinAge) and backs off retries 250 ms, 500 ms,
// 1 s, ... up to 5 s - and kgo set up as the Java producer behaves: a
// metadata refresh at most every 100 ms (retry.backoff.ms) and retries
// backing off from 100 ms to 1 s (retry.backoff.max.ms, KIP-580).
var failoverClients = []failoverClient{
	{name: "kgo defaults"},
	{name: "Java-like", opts: []kgo.Opt{kgo.MetadataMinAge(100 * time.Millisecond), kgo.RetryBackoffFn(javaBackoff)}},
}

// javaBackoff is the Java client's retry backoff: 100 ms doubling per
// failure up to 1 s, with 20% jitter.
func javaBackoff(fails int) time.Duration {
	d := 100 * time.Millisecond << min(max(fails-1, 0), 4)
	d = min(d, time.Second)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// killResult is what one SIGKILL of a partition's leader measured. The
// durations count from the moment before the signal; a negative one was
// not observed.
type killResult struct {
	victim        int32 // the leader killed
	partition     int32 // the partition measured, one the victim led
	wasController bool  // the victim was the active controller too
	// ack: per failoverClients, the first acks=all acknowledgement for the
	// partition from another broker (what the test is about), and that
	// broker.
	ack       []time.Duration
	successor []int32
	// others: per failoverClients, when the acknowledgements resumed on the
	// partitions whose leader survived (the last of them): the first after
	// the victim was fenced. Their ISR held the victim until then.
	others []time.Duration
	// fenced: the (new) active controller logged that the victim's session
	// expired and fenced it, moving its leaderships (detection).
	fenced time.Duration
	// controller: a surviving voter logged that it became the active
	// controller (only when the victim was the controller).
	controller time.Duration
	// visible: a surviving broker's Metadata named the partition's new
	// leader (with a higher leader epoch): detection and election done, as
	// a client can see.
	visible time.Duration
	// rejoined: from the restart of the victim until it was back in the
	// ISR of every partition.
	rejoined time.Duration
}

// ackEvent is a batch acknowledged by a broker.
type ackEvent struct {
	at        time.Time
	node      int32
	partition int32
}

// ackLog collects a producer's acknowledged batches (kgo's
// HookProduceBatchWritten), to tell which broker acknowledged when.
type ackLog struct {
	mu     sync.Mutex
	events []ackEvent
}

// OnProduceBatchWritten implements kgo.HookProduceBatchWritten.
func (l *ackLog) OnProduceBatchWritten(meta kgo.BrokerMetadata, _ string, partition int32, _ kgo.ProduceBatchMetrics) {
	now := time.Now()
	l.mu.Lock()
	l.events = append(l.events, ackEvent{now, meta.NodeID, partition})
	l.mu.Unlock()
}

// first returns the first acknowledgement for partition at or after since
// by a broker other than not.
func (l *ackLog) first(since time.Time, partition, not int32) (ackEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.events, since, func(e ackEvent, t time.Time) int { return e.at.Compare(t) })
	for _, e := range l.events[i:] {
		if e.partition == partition && e.node != not {
			return e, true
		}
	}
	return ackEvent{}, false
}

// failoverConfig is the failover test's settings.
type failoverConfig struct {
	kills int
	// controllerEvery makes every controllerEvery-th kill that of the
	// active controller (which leads a partition too); 0: no kill is
	// chosen for it. In a cluster of three combined nodes a third of the
	// leaders are the controller's.
	controllerEvery int
	rate            float64       // each producer's records/s, over all partitions
	settle          time.Duration // after the victim is back in the ISR, before the next kill
	size            int
	partitions      int    // of the topic
	clientLog       string // file for the producers' kgo debug log, if set
}

// failover runs the kills on c: while a producer per failoverClients
// writes continuously to every partition of the topic, it SIGKILLs a
// partition's leader, waits for each producer's first acknowledgement from
// another broker for that partition, restarts the killed node and waits
// for it to be back in every ISR, cfg.kills times. progress gets a line per
// kill. It returns the kills and the records that failed for good (none
// should: kgo retries until it succeeds).
func failover(ctx context.Context, c *cluster, cfg failoverConfig, progress io.Writer) (results []killResult, recordErrs int64, err error) {
	if err := c.createTopic(ctx, failoverTopic, cfg.partitions, 3, 2); err != nil {
		return nil, 0, err
	}
	admin, err := c.client()
	if err != nil {
		return nil, 0, err
	}
	defer admin.Close()

	var errCount atomic.Int64
	var lastErr atomic.Pointer[error]
	pctx, stopProducing := context.WithCancel(ctx)
	var producing sync.WaitGroup
	defer func() {
		stopProducing()
		producing.Wait()
		recordErrs = errCount.Load()
		if p := lastErr.Load(); p != nil {
			fmt.Fprintf(progress, "failover: %d records failed, the last with: %v\n", recordErrs, *p)
		}
	}()
	var clientLog io.Writer
	if cfg.clientLog != "" {
		f, err := os.Create(cfg.clientLog)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		clientLog = f
	}
	acks := make([]*ackLog, len(failoverClients))
	for i, fc := range failoverClients {
		acks[i] = &ackLog{}
		opts := []kgo.Opt{kgo.DefaultProduceTopic(failoverTopic), kgo.WithHooks(acks[i]), kgo.RecordPartitioner(kgo.ManualPartitioner())}
		if clientLog != nil {
			opts = append(opts, kgo.WithLogger(kgo.BasicLogger(clientLog, kgo.LogLevelDebug, func() string {
				return time.Now().UTC().Format("15:04:05.000 ") + fc.name + " "
			})))
		}
		prod, err := c.client(append(opts, fc.opts...)...)
		if err != nil {
			return nil, 0, err
		}
		producing.Go(func() {
			defer prod.Close()
			produceSteadily(pctx, prod, cfg, func(err error) {
				errCount.Add(1)
				lastErr.Store(&err)
			})
		})
	}

	for k := range cfg.kills {
		wantController := cfg.controllerEvery > 0 && k%cfg.controllerEvery == cfg.controllerEvery-1
		r, err := killLeader(ctx, c, cfg, admin, acks, wantController, k)
		if err != nil {
			return results, 0, fmt.Errorf("kill %d: %w", k+1, err)
		}
		results = append(results, r)
		line := fmt.Sprintf("kill %2d: node %d", k+1, r.victim)
		if r.wasController {
			line += " (controller)"
		}
		line += fmt.Sprintf(", partition %d", r.partition)
		for i, fc := range failoverClients {
			line += fmt.Sprintf("; %s: first ack %v from %d, others resumed %v", fc.name, ms(r.ack[i]), r.successor[i], ms(r.others[i]))
		}
		fmt.Fprintf(progress, "%s; fenced %v, controller %v, visible %v; back in the ISRs %v after restart\n",
			line, ms(r.fenced), ms(r.controller), ms(r.visible), ms(r.rejoined))
		time.Sleep(cfg.settle)
	}
	return results, 0, nil
}

// produceSteadily produces cfg.rate records/s with prod, to the partitions
// in turn, until ctx ends, then flushes; failed is called for every record
// that failed.
func produceSteadily(ctx context.Context, prod *kgo.Client, cfg failoverConfig, failed func(error)) {
	vals := newValues(cfg.size)
	interval := time.Duration(float64(time.Second) / cfg.rate)
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		rec := &kgo.Record{Partition: int32(i % cfg.partitions), Value: vals.value(i, time.Now())}
		prod.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				failed(err)
			}
		})
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod.Flush(fctx)
}

// partitionState is a partition as a broker's metadata says.
type partitionState struct {
	leader, epoch int32
	isr           []int32
}

// failoverState returns the failover topic's n partitions from a Metadata
// response, false unless every one is there without error.
func failoverState(m *kmsg.MetadataResponse, n int) ([]partitionState, bool) {
	if len(m.Topics) != 1 || m.Topics[0].ErrorCode != 0 || len(m.Topics[0].Partitions) != n {
		return nil, false
	}
	out := make([]partitionState, n)
	for _, p := range m.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.Partition < 0 || int(p.Partition) >= n {
			return nil, false
		}
		out[p.Partition] = partitionState{leader: p.Leader, epoch: p.LeaderEpoch, isr: p.ISR}
	}
	return out, true
}

// killLeader kills a partition's leader once every partition has its full
// ISR and every producer is being acknowledged, measures until each
// producer's first acknowledgement from the successor, and restarts the
// victim. With wantController the victim is the active controller (if it
// leads a partition), else a leader that is not the controller (if there
// is one), the k-th such in turn.
func killLeader(ctx context.Context, c *cluster, cfg failoverConfig, admin *kgo.Client, acks []*ackLog, wantController bool, k int) (killResult, error) {
	r := killResult{ack: make([]time.Duration, len(acks)), successor: make([]int32, len(acks)), others: make([]time.Duration, len(acks))}
	var before []partitionState
	err := poll(ctx, 60*time.Second, "full ISRs and acknowledgements from every leader", func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, admin, failoverTopic)
		if err != nil {
			return false, nil
		}
		st, ok := failoverState(m, cfg.partitions)
		if !ok {
			return false, nil
		}
		for _, p := range st {
			if p.leader < 0 || len(p.isr) != len(c.nodes) {
				return false, nil
			}
		}
		before = st
		for _, a := range acks {
			for p := range len(before) {
				if _, ok := a.first(time.Now().Add(-200*time.Millisecond), int32(p), -2); !ok {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return r, err
	}
	controller := int32(-1)
	dreq := kmsg.NewPtrDescribeClusterRequest()
	if dresp, err := dreq.RequestWith(ctx, admin); err == nil && dresp.ErrorCode == 0 {
		controller = dresp.ControllerID
	}
	var others []int32 // leaders that are not the controller
	leadsSome := false
	for _, p := range before {
		if p.leader == controller {
			leadsSome = true
		} else if !slices.Contains(others, p.leader) {
			others = append(others, p.leader)
		}
	}
	slices.Sort(others)
	switch {
	case (wantController || len(others) == 0) && leadsSome:
		r.victim = controller
	case len(others) > 0:
		r.victim = others[k%len(others)]
	default:
		return r, fmt.Errorf("no partition leader to kill (controller %d, partitions %v)", controller, before)
	}
	r.wasController = r.victim == controller
	r.partition = int32(slices.IndexFunc(before, func(p partitionState) bool { return p.leader == r.victim }))
	victim := c.byID(r.victim)
	if victim == nil {
		return r, fmt.Errorf("the leader %d is no node of the cluster", r.victim)
	}
	epoch := before[r.partition].epoch

	// Watch each survivor's metadata for the partition's new leader.
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	visible := make(chan time.Time, len(c.nodes))
	for _, nd := range c.nodes {
		if nd == victim {
			continue
		}
		go func(b *kgo.Broker) {
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(failoverTopic)
			req.Topics = append(req.Topics, rt)
			for wctx.Err() == nil {
				rctx, cancel := context.WithTimeout(wctx, time.Second)
				resp, err := b.Request(rctx, req)
				cancel()
				if err == nil {
					if st, ok := failoverState(resp.(*kmsg.MetadataResponse), cfg.partitions); ok {
						if p := st[r.partition]; p.leader >= 0 && p.leader != victim.id && p.epoch > epoch {
							visible <- time.Now()
							return
						}
					}
				}
				select {
				case <-wctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}(admin.Broker(int(nd.id)))
	}

	t0 := time.Now()
	if err := victim.kill(); err != nil {
		return r, err
	}
	for i, a := range acks {
		err = poll(ctx, 60*time.Second, "an acknowledgement from the successor", func(context.Context) (bool, error) {
			e, ok := a.first(t0, r.partition, victim.id)
			if ok {
				r.ack[i], r.successor[i] = e.at.Sub(t0), e.node
			}
			return ok, nil
		})
		if err != nil {
			return r, fmt.Errorf("%s: %w", failoverClients[i].name, err)
		}
	}
	select {
	case at := <-visible:
		r.visible = at.Sub(t0)
	case <-time.After(10 * time.Second):
		r.visible = -1
	}
	stopWatching()
	r.fenced, r.controller = -1, -1
	broker := "broker=" + strconv.Itoa(int(victim.id))
	for _, nd := range c.nodes {
		if nd == victim {
			continue
		}
		if e, ok := nd.findLog(t0, `msg="broker session expired; fencing"`, broker+" "); ok {
			if d := e.at.Sub(t0); r.fenced < 0 || d < r.fenced {
				r.fenced = d
			}
		}
		if r.wasController {
			if e, ok := nd.findLog(t0, `msg="active controller"`); ok {
				if d := e.at.Sub(t0); r.controller < 0 || d < r.controller {
					r.controller = d
				}
			}
		}
	}

	from := t0.Add(max(r.fenced, r.visible, 0))
	for i, a := range acks {
		r.others[i] = -1
		for p, st := range before {
			if st.leader == victim.id {
				continue
			}
			err = poll(ctx, 60*time.Second, fmt.Sprintf("acknowledgements for partition %d", p), func(context.Context) (bool, error) {
				e, ok := a.first(from, int32(p), -2)
				if ok {
					r.others[i] = max(r.others[i], e.at.Sub(t0))
				}
				return ok, nil
			})
			if err != nil {
				return r, fmt.Errorf("%s: %w", failoverClients[i].name, err)
			}
		}
	}

	// Restart the victim and wait until it is back in every ISR.
	restarted := time.Now()
	if err := c.start(victim); err != nil {
		return r, err
	}
	if err := c.waitListening(ctx, victim); err != nil {
		return r, err
	}
	err = poll(ctx, 120*time.Second, fmt.Sprintf("node %d back in the ISRs", victim.id), func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, admin, failoverTopic)
		if err != nil {
			return false, nil
		}
		st, ok := failoverState(m, cfg.partitions)
		if !ok {
			return false, nil
		}
		for _, p := range st {
			if !slices.Contains(p.isr, victim.id) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return r, fmt.Errorf("%w (log: %s)", err, tail(victim.logPath, 10))
	}
	r.rejoined = time.Since(restarted)
	return r, nil
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), n)
}

// ms prints a duration in milliseconds, "-" if not observed.
func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}
