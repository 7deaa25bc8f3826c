package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/bench/internal/report"
	"github.com/spoolmq/spool/clustertest"
)

// The reassign test (issue 11): a one-partition topic of replication
// factor 3 (min.insync.replicas 2) is filled to --reassign-bytes by a
// producer that keeps producing, unthrottled unless --reassign-rate says
// otherwise; a fourth node, a broker only, has joined; once the partition
// holds that much, it is reassigned from its leader to the new broker (target: the new broker
// first, then the two followers), so that the new replica copies the
// whole partition while the producer runs, and the leadership moves to it
// when the reassignment completes. It reports the time from the request
// to the completion (the new replica in sync, the old leader's replica
// removed), the producer's acknowledged records/s during the move against
// the last --reassign-window before it, and reads the partition back from the new leader:
// every acknowledged record must be there, at its acknowledged offset.

type reassignConfig struct {
	runs    int
	bytes   int64
	size    int
	rate    float64 // MB/s of values; 0: unthrottled
	window  time.Duration
	timeout time.Duration
	flush   string
}

type reassignResult struct {
	startRecords int64         // acknowledged when the move started
	endRecords   int64         // acknowledged when it completed
	move         time.Duration // request -> completed
	before       float64       // acknowledged records/s in the window before
	during       float64       // ... during the move
	beforeP99    time.Duration // acknowledgement latency, p99, in the window
	duringP99    time.Duration
	acked, lost  int64 // in all, and acknowledged but not read back at their offset
	failed       int64 // records the producer gave up on
	leaderAfter  int32
}

// moveAcks records each acknowledged record's offset (by its sequence
// number) and when acknowledgements came, for the rates and the check.
type moveAcks struct {
	mu      sync.Mutex
	offsets []int64 // by sequence number; -1: not acknowledged
	at      []time.Time
	lat     []time.Duration
	failed  atomic.Int64
	acked   atomic.Int64
	firstEr atomic.Pointer[error]
}

func (l *moveAcks) add(seq int64, off int64, sent time.Time) {
	now := time.Now()
	l.mu.Lock()
	for int64(len(l.offsets)) <= seq {
		l.offsets = append(l.offsets, -1)
	}
	l.offsets[seq] = off
	l.at = append(l.at, now)
	l.lat = append(l.lat, now.Sub(sent))
	l.mu.Unlock()
	l.acked.Add(1)
}

// window is the acknowledgements between from and to: records/s and the
// p99 latency.
func (l *moveAcks) window(from, to time.Time) (float64, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lat []time.Duration
	for i, at := range l.at {
		if !at.Before(from) && at.Before(to) {
			lat = append(lat, l.lat[i])
		}
	}
	slices.Sort(lat)
	return float64(len(lat)) / to.Sub(from).Seconds(), percentile(lat, 0.99)
}

func runReassign(ctx context.Context, cfg config, progress io.Writer) ([]reassignResult, error) {
	var out []reassignResult
	for r := range cfg.reassign.runs {
		dir := filepath.Join(cfg.dir, fmt.Sprintf("reassign-run%d", r))
		res, err := reassignRun(ctx, cfg, dir, progress)
		if err != nil {
			return nil, fmt.Errorf("reassign, run %d: %w (node logs in %s)", r+1, err, dir)
		}
		fmt.Fprintf(progress, "reassign run=%d: %.0f MiB moved in %v; %.0f rec/s before, %.0f during (%.2fx); lost %d; load %s\n",
			r+1, float64(res.startRecords*int64(cfg.reassign.size))/(1<<20), res.move.Round(time.Millisecond),
			res.before, res.during, res.during/res.before, res.lost, report.LoadAvg())
		out = append(out, res)
	}
	return out, nil
}

func reassignRun(ctx context.Context, cfg config, dir string, progress io.Writer) (reassignResult, error) {
	var res reassignResult
	rc := cfg.reassign
	args := append([]string{"--flush", rc.flush}, cfg.nodeFlags()...)
	st := cfg.sessionTimeout
	if st <= 0 {
		st = 2 * time.Second
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	c, err := clustertest.NewCluster(clustertest.Options{Nodes: 4, Voters: 3, Binary: cfg.bin, Dir: dir, Args: args,
		SessionTimeout: st, LogLines: -1})
	if err != nil {
		return res, err
	}
	defer func() {
		if err := c.Close(); err != nil {
			cfg.warn(fmt.Errorf("reassign: %w", err))
		}
		for _, n := range c.Nodes() {
			os.RemoveAll(n.Dir())
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { errs[i] = c.Node(int32(i + 1)).Start(sctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	const topic = "moved"
	if err := c.WaitBrokers(sctx); err != nil {
		return res, err
	}
	if err := c.CreateTopic(sctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		return res, err
	}
	if err := c.WaitInSync(sctx, topic); err != nil {
		return res, err
	}
	ps, err := c.Partitions(sctx, topic)
	if err != nil {
		return res, err
	}
	leader := ps[0].Leader
	target := []int32{4}
	for _, r := range ps[0].Replicas {
		if r != leader {
			target = append(target, r)
		}
	}
	// The new broker joins (holding nothing) before anything is measured.
	if err := c.Node(4).Start(sctx); err != nil {
		return res, err
	}
	if err := c.WaitBrokers(sctx); err != nil {
		return res, err
	}

	cl, err := c.Client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(sctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return res, fmt.Errorf("warm-up produce: %w", err)
	}
	acks := &moveAcks{}
	vals := newValues(rc.size)
	// stopProducing ends the loop; the records it handed to the client
	// are still sent and acknowledged (Flush below).
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var producing sync.WaitGroup
	producing.Go(func() {
		// Paced by when each record is due, catching up after a late
		// wake-up: a ticker per record cannot tick every 50 µs.
		start := time.Now()
		every := 0.0
		if rc.rate > 0 {
			every = float64(time.Second) * float64(rc.size) / (rc.rate * 1e6)
		}
		for seq := int64(0); pctx.Err() == nil; seq++ {
			if d := time.Until(start.Add(time.Duration(float64(seq) * every))); d > time.Millisecond {
				select {
				case <-time.After(d):
				case <-pctx.Done():
					return
				}
			}
			sent := time.Now()
			cl.Produce(ctx, &kgo.Record{Value: vals.value(int(seq), sent)}, func(r *kgo.Record, err error) {
				if err != nil {
					acks.failed.Add(1)
					acks.firstEr.CompareAndSwap(nil, &err)
					return
				}
				acks.add(int64(binary.BigEndian.Uint64(r.Value)), r.Offset, stamp(r.Value))
			})
		}
	})

	// Fill; the window before the move is the end of the filling.
	fill := rc.bytes / int64(rc.size)
	fillStart := time.Now()
	if err := poll(ctx, 30*time.Minute, fmt.Sprintf("%d records acknowledged", fill), func(context.Context) (bool, error) {
		if p := acks.firstEr.Load(); p != nil {
			return false, *p
		}
		return acks.acked.Load() >= fill, nil
	}); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "reassign: filled %d MiB in %v (%.0f MB/s)\n", rc.bytes>>20, time.Since(fillStart).Round(time.Millisecond),
		float64(rc.bytes)/1e6/time.Since(fillStart).Seconds())
	// The move.
	moveStart := time.Now()
	windowStart := moveStart.Add(-rc.window)
	if windowStart.Before(fillStart) {
		return res, fmt.Errorf("the filling took %v, less than --reassign-window %v: make --reassign-bytes larger or the window shorter",
			moveStart.Sub(fillStart).Round(time.Millisecond), rc.window)
	}
	res.startRecords = acks.acked.Load()
	mctx, mcancel := context.WithTimeout(ctx, rc.timeout)
	defer mcancel()
	if err := c.Reassign(mctx, topic, 0, target); err != nil {
		return res, err
	}
	if err := c.WaitReassigned(mctx, topic, 0, target); err != nil {
		return res, err
	}
	moveEnd := time.Now()
	res.endRecords = acks.acked.Load()
	res.move = moveEnd.Sub(moveStart)
	res.before, res.beforeP99 = acks.window(windowStart, moveStart)
	res.during, res.duringP99 = acks.window(moveStart, moveEnd)
	stopProducing()
	producing.Wait()
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	defer fcancel()
	if err := cl.Flush(fctx); err != nil {
		return res, err
	}
	res.failed = acks.failed.Load()
	if res.leaderAfter, err = c.Leader(fctx, topic, 0); err != nil {
		return res, err
	}
	old := filepath.Join(c.Node(leader).Dir(), topic+"-0")
	if err := clustertest.Eventually(fctx, "the old leader's replica deleted", func(context.Context) error {
		if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %v", old, err)
		}
		return nil
	}); err != nil {
		return res, err
	}

	// Read everything back from the new leader.
	ends, err := c.EndOffsets(fctx, topic)
	if err != nil {
		return res, err
	}
	read, err := readOffsets(ctx, c, topic, ends[0])
	if err != nil {
		return res, err
	}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for seq, off := range acks.offsets {
		if off < 0 {
			continue
		}
		res.acked++
		if off >= int64(len(read)) || read[off] != int64(seq) {
			res.lost++
		}
	}
	return res, nil
}

// readOffsets reads a one-partition topic from its start to end and
// returns each offset's sequence number (-1 for the warm-up record).
func readOffsets(ctx context.Context, c *clustertest.Cluster, topic string, end int64) ([]int64, error) {
	cl, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(32<<20), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := make([]int64, end)
	for i := range out {
		out[i] = -2
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	next := int64(0)
	for next < end {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, fmt.Errorf("reading back: at %d of %d: %w", next, end, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end {
				out[r.Offset] = -1
				if len(r.Value) >= 16 {
					out[r.Offset] = int64(binary.BigEndian.Uint64(r.Value))
				}
			}
			next = r.Offset + 1
		})
	}
	return out, nil
}

func printReassign(out io.Writer, cfg config, res []reassignResult) {
	rc := cfg.reassign
	rate := "unthrottled (kgo's defaults)"
	if rc.rate > 0 {
		rate = fmt.Sprintf("%.0f MB/s", rc.rate)
	}
	fmt.Fprintf(out, "\nreassign: a one-partition RF3 topic (min.insync.replicas 2) filled to %d MiB of %s records, --flush %s; a producer keeps writing, %s (acks=all, idempotent, linger 10 ms); then the partition moves from its leader to a fourth node (a broker only), which leads once it is in sync; before = the last %v before the move; then every acknowledged record is read back from the new leader\n",
		rc.bytes>>20, report.SizeName(rc.size), rc.flush, rate, rc.window)
	header := []string{"run", "MiB at start", "MiB at end", "move", "copied MB/s", "rec/s before", "rec/s during", "during/before", "ack p99 before", "ack p99 during", "acked", "lost", "failed", "leader after"}
	var lines [][]string
	mib := func(n int64) string { return fmt.Sprintf("%.0f", float64(n*int64(rc.size))/(1<<20)) }
	for i, r := range res {
		lines = append(lines, []string{fmt.Sprint(i + 1), mib(r.startRecords), mib(r.endRecords), r.move.Round(time.Millisecond).String(),
			fmt.Sprintf("%.0f", float64(r.endRecords*int64(rc.size))/1e6/r.move.Seconds()),
			fmt.Sprintf("%.0f", r.before), fmt.Sprintf("%.0f", r.during), fmt.Sprintf("%.2fx", r.during/r.before),
			ms(r.beforeP99), ms(r.duringP99), fmt.Sprint(r.acked), fmt.Sprint(r.lost), fmt.Sprint(r.failed), fmt.Sprint(r.leaderAfter)})
	}
	if len(res) > 1 {
		lines = append(lines, []string{"median", "", "",
			medianDur(mapf(res, func(r reassignResult) time.Duration { return r.move })).Round(time.Millisecond).String(),
			fmt.Sprintf("%.0f", medianOf(mapf(res, func(r reassignResult) float64 {
				return float64(r.endRecords*int64(rc.size)) / 1e6 / r.move.Seconds()
			}))),
			fmt.Sprintf("%.0f", medianOf(mapf(res, func(r reassignResult) float64 { return r.before }))),
			fmt.Sprintf("%.0f", medianOf(mapf(res, func(r reassignResult) float64 { return r.during }))),
			fmt.Sprintf("%.2fx", medianOf(mapf(res, func(r reassignResult) float64 { return r.during / r.before }))),
			ms(medianDur(mapf(res, func(r reassignResult) time.Duration { return r.beforeP99 }))),
			ms(medianDur(mapf(res, func(r reassignResult) time.Duration { return r.duringP99 }))),
			"", fmt.Sprint(slices.Max(mapf(res, func(r reassignResult) int64 { return r.lost }))), "", ""})
	}
	report.Table(out, cfg.markdown, header, lines)
}
