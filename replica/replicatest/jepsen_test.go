package replicatest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/stretchr/testify/require"
)

// This file is a Jepsen-style test: producers write unique values while a
// nemesis crashes, restarts, pauses and cuts brokers at random; a reader
// follows the committed log; at the end the cluster heals and a checker
// compares what was acknowledged and read with what the replicas hold.
//
// SPOOL_JEPSEN_SEED and SPOOL_JEPSEN_ROUNDS reproduce or lengthen a run.

// history is what the clients saw.
type history struct {
	mu        sync.Mutex
	acked     map[string]int64 // value -> offset the produce returned
	attempted map[string]bool  // every value sent, acknowledged or not
	reads     map[int64]string // offset -> value a reader saw below the HW
	conflicts []string         // an offset read twice with different values
	failed    map[string]int   // produce errors by kind
}

func newHistory() *history {
	return &history{acked: map[string]int64{}, attempted: map[string]bool{}, reads: map[int64]string{}, failed: map[string]int{}}
}

// verdict is what the checker found.
type verdict struct {
	acked, indeterminate, duplicates, reads int
	lost                                    []string // acknowledged, not in the final log at its offset
	vanished                                []string // read below the HW, not in the final log at that offset
	phantoms                                []string // in the final log, never sent
	diverged                                []string // replicas that differ from the leader
}

func (v verdict) String() string {
	return fmt.Sprintf("acked %d, indeterminate %d, duplicates %d, reads %d, lost %d, vanished %d, phantoms %d, diverged %d",
		v.acked, v.indeterminate, v.duplicates, v.reads, len(v.lost), len(v.vanished), len(v.phantoms), len(v.diverged))
}

func (v verdict) safe() bool {
	return len(v.lost) == 0 && len(v.vanished) == 0 && len(v.phantoms) == 0 && len(v.diverged) == 0
}

type jepsenConfig struct {
	seed      uint64
	rounds    int
	acks      replica.Acks
	unclean   bool
	producers int
	flush     log.FlushPolicy
}

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return def
}

// TestJepsen runs the randomized fault test with the settings that must not
// lose anything: RF=3, MinInSyncReplicas=2, acks=all, clean election.
func TestJepsen(t *testing.T) {
	seed := uint64(envInt("SPOOL_JEPSEN_SEED", 20261130))
	rounds := envInt("SPOOL_JEPSEN_ROUNDS", 200)
	if testing.Short() {
		rounds = 40
	}
	v := runJepsen(t, jepsenConfig{seed: seed, rounds: rounds, acks: replica.AcksAll, producers: 3, flush: log.Sync})
	t.Logf("seed %d, %d rounds: %s", seed, rounds, v)
	require.Empty(t, v.lost, "acknowledged records lost")
	require.Empty(t, v.vanished, "committed records read and later gone")
	require.Empty(t, v.phantoms)
	require.Empty(t, v.diverged, "replicas differ after quiescence")
	require.Greater(t, v.acked, rounds, "the workload made progress")
}

// TestJepsenNegativeControl runs the same nemesis with acks=1, which Kafka
// documents as lossy when a leader fails before its followers copy a
// record: the checker must see the loss, or it proves nothing.
func TestJepsenNegativeControl(t *testing.T) {
	seed := uint64(envInt("SPOOL_JEPSEN_SEED", 20261130))
	var total verdict
	for i := uint64(0); i < 5 && len(total.lost) == 0; i++ {
		v := runJepsen(t, jepsenConfig{seed: seed + i, rounds: 60, acks: replica.AcksLeader, producers: 3, flush: log.Sync, unclean: true})
		t.Logf("acks=1, unclean election, seed %d: %s", seed+i, v)
		total.lost = append(total.lost, v.lost...)
		require.Empty(t, v.diverged, "even lossy settings must leave identical replicas")
	}
	require.NotEmpty(t, total.lost, "acks=1 with leader crashes lost nothing: the checker cannot see loss")
}

func runJepsen(t *testing.T, cfg jepsenConfig) verdict {
	t.Helper()
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed))
	var logger *slog.Logger
	if os.Getenv("SPOOL_JEPSEN_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(Options{Dir: t.TempDir(), MinInSyncReplicas: 2, Flush: cfg.flush, SegmentBytes: 16 << 10, Logger: logger})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateTopic(ctx, replica.TopicSpec{Name: "j", Partitions: 1, ReplicationFactor: 3, UncleanLeaderElection: cfg.unclean}))

	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := 0; p < cfg.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produceLoop(ctx, c, h, p, cfg.acks, stop)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		readLoop(ctx, c, h, stop)
	}()

	faults := map[string]int{}
	for round := 0; round < cfg.rounds; round++ {
		name := nemesis(ctx, t, c, rng)
		if logger != nil {
			logger.Info("NEMESIS round", "round", round, "fault", name)
		}
		faults[name]++
	}
	close(stop)
	wg.Wait()
	c.Heal()
	for _, id := range c.Brokers() {
		if !c.Running(id) {
			require.NoError(t, c.Restart(id))
		}
	}
	require.NoError(t, c.WaitConverged(ctx, "j", 0))
	t.Logf("faults: %v; produce errors: %v", faults, h.failed)
	return check(t, c, h)
}

// produceLoop writes unique values, one record per batch, until stop.
func produceLoop(ctx context.Context, c *Cluster, h *history, id int, acks replica.Acks, stop <-chan struct{}) {
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		v := fmt.Sprintf("p%d-%d", id, seq)
		h.mu.Lock()
		h.attempted[v] = true
		h.mu.Unlock()
		octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		off, err := c.Produce(octx, "j", 0, []record.Record{{Value: []byte(v)}}, replica.AppendOptions{Acks: acks, Timeout: 400 * time.Millisecond})
		cancel()
		h.mu.Lock()
		if err == nil {
			h.acked[v] = off
		} else {
			h.failed[errKind(err)]++
		}
		h.mu.Unlock()
		if err != nil {
			time.Sleep(2 * time.Millisecond) // a client backs off too
		}
	}
}

func errKind(err error) string {
	for _, e := range []error{replica.ErrNotEnoughReplicas, replica.ErrNotEnoughReplicasAfterAppend, replica.ErrTimedOut,
		replica.ErrNotLeader, replica.ErrUnreachable, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			s := e.Error()
			return s[strings.LastIndex(s, ":")+1:]
		}
	}
	return err.Error()
}

// readLoop follows the partition's committed records on whoever leads,
// remembering the value at each offset.
func readLoop(ctx context.Context, c *Cluster, h *history, stop <-chan struct{}) {
	next := int64(0)
	for {
		select {
		case <-stop:
			return
		default:
		}
		st, err := c.Leader("j", 0)
		if err != nil || st.Leader < 0 {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		p, ok := c.Partition(st.Leader, "j", 0)
		if !ok {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		res, err := p.Fetch(fctx, next, 1, 64<<10, 20*time.Millisecond)
		cancel()
		if err != nil {
			if errors.Is(err, log.ErrOffsetOutOfRange) {
				next = 0 // a new leader's log may be shorter for a moment; read again
			}
			continue
		}
		for buf := res.Batches; len(buf) > 0; {
			b, n, err := record.ParseBatch(buf)
			if err != nil {
				break
			}
			rs, err := b.Records()
			if err != nil {
				break
			}
			h.mu.Lock()
			for _, r := range rs {
				if r.Offset < next || r.Offset >= res.HighWatermark {
					continue
				}
				if old, ok := h.reads[r.Offset]; ok && old != string(r.Value) {
					h.conflicts = append(h.conflicts, fmt.Sprintf("offset %d read as %q then %q", r.Offset, old, r.Value))
				}
				h.reads[r.Offset] = string(r.Value)
			}
			h.mu.Unlock()
			next = max(next, b.NextOffset())
			buf = buf[n:]
		}
	}
}

// nemesis applies one random fault, lets the workload run under it, and
// heals it. It returns the fault's name.
func nemesis(ctx context.Context, t *testing.T, c *Cluster, rng *rand.Rand) string {
	st, err := c.Leader("j", 0)
	require.NoError(t, err)
	ids := c.Brokers()
	victim := ids[rng.IntN(len(ids))]
	leader := st.Leader
	if leader < 0 {
		leader = victim
	}
	other := ids[rng.IntN(len(ids))]
	for other == victim {
		other = ids[rng.IntN(len(ids))]
	}
	under := time.Duration(10+rng.IntN(50)) * time.Millisecond
	var name string
	var heal func()
	switch k := rng.IntN(9); k {
	case 0, 1:
		drop := rng.IntN(2) == 0
		name = fmt.Sprintf("crash leader (drop unsynced %v)", drop)
		require.NoError(t, c.Crash(leader, drop))
		heal = func() { require.NoError(t, c.Restart(leader)) }
	case 2:
		name = "crash follower"
		f := victim
		if f == leader {
			f = other
		}
		require.NoError(t, c.Crash(f, rng.IntN(2) == 0))
		heal = func() { require.NoError(t, c.Restart(f)) }
	case 3:
		name = "crash two"
		require.NoError(t, c.Crash(leader, false))
		o := other
		if o == leader {
			o = victim
		}
		require.NoError(t, c.Crash(o, rng.IntN(2) == 0))
		heal = func() {
			require.NoError(t, c.Restart(o))
			require.NoError(t, c.Restart(leader))
		}
	case 4:
		name = "pause leader"
		c.Pause(leader)
		under *= 4 // long enough, often, for the session to expire
		heal = func() { c.Resume(leader) }
	case 5:
		name = "pause broker"
		c.Pause(victim)
		heal = func() { c.Resume(victim) }
	case 6:
		name = "cut link"
		c.Cut(victim, other)
		under *= 4
		heal = c.Heal
	case 7:
		name = "isolate leader from followers"
		for _, id := range ids {
			if id != leader {
				c.Cut(leader, id)
				c.Cut(id, leader)
			}
		}
		under *= 4
		heal = c.Heal
	case 8:
		name = "slow link"
		c.Delay(victim, other, time.Duration(5+rng.IntN(30))*time.Millisecond)
		heal = c.Heal
	}
	time.Sleep(under)
	heal()
	time.Sleep(time.Duration(5+rng.IntN(25)) * time.Millisecond)
	return name
}

// check compares the history with the converged replicas.
func check(t *testing.T, c *Cluster, h *history) verdict {
	t.Helper()
	st, err := c.Leader("j", 0)
	require.NoError(t, err)
	final := map[int64]string{}
	seen := map[string]int{}
	p, ok := c.Partition(st.Leader, "j", 0)
	require.True(t, ok)
	buf := logBytes(t, c, st.Leader, "j", 0)
	prev := p.StartOffset() - 1
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		rs, err := b.Records()
		require.NoError(t, err)
		for _, r := range rs {
			require.Equal(t, prev+1, r.Offset, "offsets increase one by one")
			prev = r.Offset
			final[r.Offset] = string(r.Value)
			seen[string(r.Value)]++
		}
		buf = buf[n:]
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	var v verdict
	v.acked = len(h.acked)
	v.indeterminate = len(h.attempted) - len(h.acked)
	v.reads = len(h.reads)
	for val, off := range h.acked {
		if final[off] != val {
			v.lost = append(v.lost, fmt.Sprintf("%s@%d (now %q)", val, off, final[off]))
		}
	}
	for off, val := range h.reads {
		if final[off] != val {
			v.vanished = append(v.vanished, fmt.Sprintf("%s@%d (now %q)", val, off, final[off]))
		}
	}
	v.vanished = append(v.vanished, h.conflicts...)
	for val, n := range seen {
		if !h.attempted[val] {
			v.phantoms = append(v.phantoms, val)
		}
		if n > 1 {
			v.duplicates += n - 1 // a produce retried after an unknown outcome
		}
	}
	ref := logBytes(t, c, st.Leader, "j", 0)
	for _, id := range st.Replicas {
		if got := logBytes(t, c, id, "j", 0); string(got) != string(ref) {
			v.diverged = append(v.diverged, fmt.Sprintf("broker %d", id))
		}
	}
	sort.Strings(v.lost)
	if len(v.lost) > 5 {
		t.Logf("lost (first 5): %v", v.lost[:5])
	} else if len(v.lost) > 0 {
		t.Logf("lost: %v", v.lost)
	}
	if len(v.vanished) > 0 {
		t.Logf("vanished: %v", v.vanished[:min(5, len(v.vanished))])
	}
	return v
}
