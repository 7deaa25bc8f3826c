package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// convergeAttempts bounds how many times CompareReplicas restarts the
// cluster to let a lagging replica catch up.
const convergeAttempts = 3

// settle is how long CompareReplicas lets a quiet cluster's followers
// fetch before it kills the nodes: a follower's last fetch of what the
// leader appended last. Too short only costs a restart (a replica that
// lags is a prefix of the others, and CompareReplicas tries again).
const settle = 2 * time.Second

// CompareReplicas checks that the replicas of every partition of the
// topics have converged: that every node holding one holds the same
// batches, byte for byte (ReadReplicaLog). Call it once nothing is being
// produced and the cluster has healed: it kills every node (so that the
// files are quiet) and reads their files. A replica that is a strict
// prefix of another is behind, not wrong: the cluster is then restarted,
// left to heal and killed again, up to 3 times, before it counts. extra,
// if set, is called with each replica and may return one more problem
// (that it does not hold what was read, say).
//
// It returns each divergence; the error says what could not be read or
// done. The nodes are left dead.
func (c *Cluster) CompareReplicas(ctx context.Context, extra func(*ReplicaLog) string, topics ...string) ([]Divergence, error) {
	holders := map[string][][]int32{} // topic → partition → replicas
	for _, t := range topics {
		ps, err := c.Partitions(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			holders[t] = append(holders[t], slices.Clone(p.Replicas))
		}
	}
	for attempt := 1; ; attempt++ {
		if err := sleepCtx(ctx, settle); err != nil {
			return nil, err
		}
		c.killAll()
		var diverged, lagging []Divergence
		for _, t := range topics {
			for p, replicas := range holders[t] {
				d, l, err := c.compareReplicas(t, int32(p), replicas, extra)
				if err != nil {
					return nil, err
				}
				diverged = append(diverged, d...)
				lagging = append(lagging, l...)
			}
		}
		if len(lagging) == 0 || attempt == convergeAttempts {
			for _, l := range lagging {
				l.What += fmt.Sprintf(" (still, after %d restarts)", attempt-1)
				diverged = append(diverged, l)
			}
			return diverged, nil
		}
		if err := c.StartAll(ctx); err != nil {
			return nil, err
		}
		if err := c.WaitBrokers(ctx); err != nil {
			return nil, err
		}
		if err := c.WaitInSync(ctx); err != nil {
			return nil, err
		}
	}
}

// killAll kills every running node at once.
func (c *Cluster) killAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.Kill() })
	}
	wg.Wait()
}

// compareReplicas compares the replicas of one partition: it returns the
// divergences, and the replicas that are behind another.
func (c *Cluster) compareReplicas(topic string, partition int32, replicas []int32, extra func(*ReplicaLog) string) (diverged, lagging []Divergence, err error) {
	at := func(format string, args ...any) Divergence {
		return Divergence{Topic: topic, Partition: partition, What: fmt.Sprintf(format, args...)}
	}
	var logs []*ReplicaLog
	for _, id := range replicas {
		n := c.Node(id)
		if n == nil {
			continue
		}
		l, err := n.ReadReplicaLog(topic, partition)
		if errors.Is(err, os.ErrNotExist) {
			diverged = append(diverged, at("node %d, a replica, has no directory for it", id))
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if l.Torn > 0 {
			diverged = append(diverged, at("node %d's replica ends with %d bytes of an unfinished batch", id, l.Torn))
		}
		logs = append(logs, l)
	}
	if len(logs) == 0 {
		return nil, nil, nil
	}
	// The longest replica is the reference: each other must be it, or a
	// prefix of it.
	ref := slices.MaxFunc(logs, func(a, b *ReplicaLog) int { return len(a.Batches) - len(b.Batches) })
	for _, l := range logs {
		if l == ref {
			continue
		}
		i := 0
		for i < len(l.Batches) && l.Batches[i].Sum == ref.Batches[i].Sum {
			i++
		}
		switch {
		case i == len(l.Batches) && i == len(ref.Batches):
		case i == len(l.Batches):
			lagging = append(lagging, at("node %d's replica has %d batches, node %d's %d: it lags",
				l.Node, len(l.Batches), ref.Node, len(ref.Batches)))
		default:
			diverged = append(diverged, at("the replicas differ at their batch %d: node %d has %v, node %d %v",
				i, l.Node, l.Batches[i], ref.Node, ref.Batches[i]))
		}
	}
	if len(lagging) == 0 && extra != nil {
		for _, l := range logs {
			if d := extra(l); d != "" {
				diverged = append(diverged, at("%s", d))
			}
		}
	}
	return diverged, lagging, nil
}

// sleepCtx waits for d, or until ctx ends (then returns its error).
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

// Divergence is a partition whose replicas differ when they should not.
type Divergence struct {
	Topic     string
	Partition int32
	What      string
}

func (d Divergence) String() string { return fmt.Sprintf("%s-%d: %s", d.Topic, d.Partition, d.What) }
