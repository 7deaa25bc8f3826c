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

// The failover test's topic: one partition on all three brokers, acks=all
// needing two of them.
const failoverTopic = "failover"

// failoverClient is a producer configuration the failover test runs:
// every client produces to the partition at the same time, so that each
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

// killResult is what one SIGKILL of the partition's leader measured. The
// durations count from the moment before the signal; a negative one was
// not observed.
type killResult struct {
	victim        int32 // the leader killed
	wasController bool  // the victim was the active controller too
	// ack: per failoverClients, the first acks=all acknowledgement from
	// another broker (what the test is about), and that broker.
	ack       []time.Duration
	successor []int32
	// fenced: the (new) active controller logged that the victim's session
	// expired and fenced it, moving its leaderships (detection).
	fenced time.Duration
	// controller: a surviving voter logged that it became the active
	// controller (only when the victim was the controller).
	controller time.Duration
	// visible: a surviving broker's Metadata named the new leader (with a
	// higher leader epoch): detection and election done, as a client can
	// see.
	visible time.Duration
	// rejoined: from the restart of the victim until it was back in the
	// partition's ISR.
	rejoined time.Duration
}

// ackEvent is a batch acknowledged by a broker.
type ackEvent struct {
	at   time.Time
	node int32
}

// ackLog collects the producer's acknowledged batches (kgo's
// HookProduceBatchWritten), to tell which broker acknowledged when.
type ackLog struct {
	mu     sync.Mutex
	events []ackEvent
}

// OnProduceBatchWritten implements kgo.HookProduceBatchWritten.
func (l *ackLog) OnProduceBatchWritten(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.ProduceBatchMetrics) {
	now := time.Now()
	l.mu.Lock()
	l.events = append(l.events, ackEvent{now, meta.NodeID})
	l.mu.Unlock()
}

// first returns the first acknowledgement at or after since by a broker
// other than not.
func (l *ackLog) first(since time.Time, not int32) (ackEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.events, since, func(e ackEvent, t time.Time) int { return e.at.Compare(t) })
	for _, e := range l.events[i:] {
		if e.node != not {
			return e, true
		}
	}
	return ackEvent{}, false
}

// failoverConfig is the failover test's settings.
type failoverConfig struct {
	kills  int
	rate   float64       // the producer's records/s
	settle time.Duration // after the victim is back in the ISR, before the next kill
	size   int
}

// failover runs the kills on c: while a producer per failoverClients
// writes continuously to the topic's one partition, it SIGKILLs the
// partition's leader, waits for each producer's first acknowledgement from
// another broker, restarts the killed node and waits for it to be back in
// the ISR, cfg.kills times. progress gets a line per kill. It returns the
// kills and the records that failed for good (none should: kgo retries
// until it succeeds).
func failover(ctx context.Context, c *cluster, cfg failoverConfig, progress io.Writer) (results []killResult, recordErrs int64, err error) {
	if err := c.createTopic(ctx, failoverTopic, 1, 3, 2); err != nil {
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
	acks := make([]*ackLog, len(failoverClients))
	for i, fc := range failoverClients {
		acks[i] = &ackLog{}
		prod, err := c.client(append([]kgo.Opt{kgo.DefaultProduceTopic(failoverTopic), kgo.WithHooks(acks[i])}, fc.opts...)...)
		if err != nil {
			stopProducing()
			producing.Wait()
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
	defer func() {
		stopProducing()
		producing.Wait()
		recordErrs = errCount.Load()
		if p := lastErr.Load(); p != nil {
			fmt.Fprintf(progress, "failover: %d records failed, the last with: %v\n", recordErrs, *p)
		}
	}()

	for k := range cfg.kills {
		r, err := killLeader(ctx, c, admin, acks)
		if err != nil {
			return results, 0, fmt.Errorf("kill %d: %w", k+1, err)
		}
		results = append(results, r)
		line := fmt.Sprintf("kill %2d: node %d", k+1, r.victim)
		if r.wasController {
			line += " (controller)"
		}
		for i, fc := range failoverClients {
			line += fmt.Sprintf("; %s: first ack %v from %d", fc.name, ms(r.ack[i]), r.successor[i])
		}
		fmt.Fprintf(progress, "%s; fenced %v, controller %v, visible %v; back in ISR %v after restart\n",
			line, ms(r.fenced), ms(r.controller), ms(r.visible), ms(r.rejoined))
		time.Sleep(cfg.settle)
	}
	return results, 0, nil
}

// produceSteadily produces cfg.rate records/s with prod until ctx ends,
// then flushes; failed is called for every record that failed.
func produceSteadily(ctx context.Context, prod *kgo.Client, cfg failoverConfig, failed func(error)) {
	vals := newValues(cfg.size)
	interval := time.Duration(float64(time.Second) / cfg.rate)
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		prod.Produce(ctx, &kgo.Record{Value: vals.value(i, time.Now())}, func(_ *kgo.Record, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				failed(err)
			}
		})
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod.Flush(fctx)
}

// partitionState is the failover partition as a broker's metadata says.
type partitionState struct {
	leader, epoch int32
	isr           []int32
}

func failoverPartition(m *kmsg.MetadataResponse) (partitionState, bool) {
	if len(m.Topics) != 1 || m.Topics[0].ErrorCode != 0 || len(m.Topics[0].Partitions) != 1 {
		return partitionState{}, false
	}
	p := m.Topics[0].Partitions[0]
	return partitionState{leader: p.Leader, epoch: p.LeaderEpoch, isr: p.ISR}, p.ErrorCode == 0
}

// killLeader kills the partition's leader once the producer is being
// acknowledged by it, measures until the successor's first
// acknowledgement, and restarts the victim.
func killLeader(ctx context.Context, c *cluster, admin *kgo.Client, acks []*ackLog) (killResult, error) {
	r := killResult{ack: make([]time.Duration, len(acks)), successor: make([]int32, len(acks))}
	var before partitionState
	// A healthy start: full ISR, and the leader acknowledging now.
	err := poll(ctx, 60*time.Second, "a full ISR and acknowledgements from the leader", func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, admin, failoverTopic)
		if err != nil {
			return false, nil
		}
		st, ok := failoverPartition(m)
		if !ok || st.leader < 0 || len(st.isr) != len(c.nodes) {
			return false, nil
		}
		before = st
		for _, a := range acks {
			if _, ok := a.first(time.Now().Add(-100*time.Millisecond), -2); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return r, err
	}
	victim := c.byID(before.leader)
	if victim == nil {
		return r, fmt.Errorf("the leader %d is no node of the cluster", before.leader)
	}
	r.victim = victim.id
	dreq := kmsg.NewPtrDescribeClusterRequest()
	if dresp, err := dreq.RequestWith(ctx, admin); err == nil && dresp.ErrorCode == 0 {
		r.wasController = dresp.ControllerID == victim.id
	}

	// Watch each survivor's metadata for the new leader.
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
					st, ok := failoverPartition(resp.(*kmsg.MetadataResponse))
					if ok && st.leader >= 0 && st.leader != victim.id && st.epoch > before.epoch {
						visible <- time.Now()
						return
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
			e, ok := a.first(t0, victim.id)
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

	// Restart the victim and wait until it is back in the ISR.
	restarted := time.Now()
	if err := c.start(victim); err != nil {
		return r, err
	}
	if err := c.waitListening(ctx, victim); err != nil {
		return r, err
	}
	err = poll(ctx, 120*time.Second, fmt.Sprintf("node %d back in the ISR", victim.id), func(ctx context.Context) (bool, error) {
		m, err := metadata(ctx, admin, failoverTopic)
		if err != nil {
			return false, nil
		}
		st, ok := failoverPartition(m)
		return ok && slices.Contains(st.isr, victim.id), nil
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
