package spool

import (
	"context"
	"fmt"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
)

// replicatedTopicState is topicState for a topic of the cluster.
func (p *Producer) replicatedTopicState(ctx context.Context, name string) (*producerTopic, error) {
	own, states, err := p.b.replicatedTopic(ctx, name, true)
	if err != nil {
		return nil, err
	}
	cfg := p.b.effective(own)
	codec := p.cfg.Compression
	if codec == record.None {
		codec = cfg.Compression
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pt := p.topics[name]; pt != nil {
		return pt, nil
	}
	pt := &producerTopic{name: name, n: int32(len(states)), tp: p.cfg.Partitioner.ForTopic(name), codec: codec, max: cfg.MaxMessageBytes}
	p.setTopic(pt)
	return pt, nil
}

func (p *Producer) replicaAcks() replica.Acks {
	switch p.cfg.Acks {
	case AcksNone:
		return replica.AcksNone
	case AcksLeader:
		return replica.AcksLeader
	}
	return replica.AcksAll
}

// maxInFlight is how many writes to one partition's leader may await the
// ISR at once (max.in.flight.requests.per.connection).
const maxInFlight = 5

// sendGroup is one write to a replicated partition's leader: the batches that
// were queued together, and their results.
type sendGroup struct {
	batches []*batch
	built   []record.Batch
	results []sendResult
	todo    []int // batches to (re)send; empty once written
	rs      leaderHandle
	pd      replica.Pending
	sent    time.Time
	retry   bool // written at a leader that lost leadership, or not written: send again
}

// sendReplicated writes a replicated partition's sealed batches at its
// leader, in order. With acks=all up to maxInFlight writes await the ISR
// at once, so that replication round trips overlap; their callbacks still
// run in order. A write that fails because leadership moved (or the ISR is
// short, or the leader is down) is sent again, with every write after it,
// to the leader found afresh, until DeliveryTimeout: a record whose first
// outcome was unknown may be written twice (at least once), never out of
// order.
func (p *Producer) sendReplicated(a *accum) {
	var fl []*sendGroup
	for {
		p.mu.Lock()
		if a.queued == nil {
			a.queued = make(chan struct{}, 1)
		}
		var batches []*batch
		if len(fl) < maxInFlight && (len(fl) == 0 || !fl[len(fl)-1].retry) {
			batches = a.queue
			a.queue = nil
		}
		if len(batches) == 0 && len(fl) == 0 {
			a.sending = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		if len(batches) > 0 {
			g := p.newGroup(a, batches)
			p.write(a, g)
			fl = append(fl, g)
		}
		fl = p.settle(a, fl)
	}
}

// newGroup builds a group's batches; batches that cannot be sent (too old,
// or failing to build) carry their error from the start.
func (p *Producer) newGroup(a *accum, batches []*batch) *sendGroup {
	g := &sendGroup{batches: batches, built: make([]record.Batch, len(batches)), results: make([]sendResult, len(batches))}
	for i, bt := range batches {
		g.results[i].base = -1
		if age := time.Since(bt.created); age > p.cfg.DeliveryTimeout {
			g.results[i].err = fmt.Errorf("%w: batch waited %v", ErrDeliveryTimeout, age.Round(time.Millisecond))
		} else if g.results[i].err = p.stamp(a, bt); g.results[i].err != nil {
		} else if g.built[i], g.results[i].err = bt.bld.Build(); g.results[i].err == nil {
			p.built(bt, g.built[i])
			g.todo = append(g.todo, i)
		}
	}
	return g
}

// write sends g's batches to the leader without waiting for the ISR. On
// any failure to write them all, g is marked for a retry.
func (p *Producer) write(a *accum, g *sendGroup) {
	if len(g.todo) == 0 {
		return
	}
	if a.leader == nil || !a.leader.IsLeader() {
		rs, err := p.b.leaderFor(context.Background(), a.topic, a.id)
		if err != nil {
			a.leader = nil
			g.fail(err)
			return
		}
		a.leader = rs
	}
	if err := p.checkLeader(a.leader); err != nil {
		g.fail(err)
		return
	}
	send := make([]record.Batch, len(g.todo))
	for k, i := range g.todo {
		send[k] = g.built[i]
	}
	res, pd := a.leader.WriteBatches(send, replica.AppendOptions{Acks: p.replicaAcks(), Trusted: true, Idempotent: p.cfg.Idempotent})
	for k, i := range g.todo {
		if k < len(res.Bases) {
			g.results[i] = sendResult{base: res.Bases[k], err: res.AckErr}
		} else {
			g.results[i] = sendResult{base: -1, err: res.Err}
		}
	}
	g.rs, g.pd, g.sent = a.leader, pd, time.Now()
	if len(res.Bases) == len(g.todo) && res.AckErr == nil {
		g.todo = nil
		return
	}
	a.leader = nil
	err := res.Err
	if res.AckErr != nil {
		err = res.AckErr
	}
	g.fail(err)
}

// fail records err for the group's unsent batches and marks it for a retry
// if err allows one.
func (g *sendGroup) fail(err error) {
	for _, i := range g.todo {
		g.results[i] = sendResult{base: -1, err: err}
	}
	g.retry = retriable(err)
	if !g.retry {
		g.todo = nil
	}
}

// settle completes the in-flight groups at the head that are done, in
// order, and waits (until a group may be done or a batch is queued) when
// the head is not. It returns the groups still in flight.
func (p *Producer) settle(a *accum, fl []*sendGroup) []*sendGroup {
	for len(fl) > 0 {
		g := fl[0]
		if g.retry {
			// Resend it, and everything written after it, in order.
			p.resend(a, g)
			for _, later := range fl[1:] {
				later.markResend()
			}
			p.completeGroup(a, g)
			fl = fl[1:]
			continue
		}
		if len(g.todo) > 0 || g.rs == nil || p.replicaAcks() != replica.AcksAll {
			p.completeGroup(a, g) // failed for good, or needs no ISR wait
			fl = fl[1:]
			continue
		}
		done, changed, err := g.rs.Commit(g.pd)
		if !done && time.Since(g.sent) >= p.cfg.RequestTimeout {
			done, err = true, g.rs.TimeoutError(p.cfg.RequestTimeout)
		}
		if done && err != nil && retriable(err) {
			g.markResend()
			continue
		}
		if done {
			for i := range g.results {
				if g.results[i].err == nil {
					g.results[i].err = err
				}
			}
			p.completeGroup(a, g)
			fl = fl[1:]
			continue
		}
		// The head is pending: wait for it, or go back to write more.
		p.mu.Lock()
		more := len(a.queue) > 0 && len(fl) < maxInFlight
		p.mu.Unlock()
		if more {
			return fl
		}
		timer := time.NewTimer(p.cfg.RequestTimeout - time.Since(g.sent))
		select {
		case <-changed:
		case <-a.queued:
		case <-timer.C:
		case <-p.stop:
			// Close gave up waiting (its Flush timed out): what is
			// still in flight has an unknown outcome.
			timer.Stop()
			for _, g := range fl {
				for i := range g.results {
					if g.results[i].err == nil {
						g.results[i].err = fmt.Errorf("%w: closed while the write awaited the in-sync replicas", ErrProducerClosed)
					}
				}
				p.completeGroup(a, g)
			}
			return nil
		}
		timer.Stop()
		if len(fl) < maxInFlight {
			return fl // write what was queued meanwhile, then settle again
		}
	}
	return fl
}

// markResend marks a group written at a leader to be sent again: its
// outcome is unknown.
func (g *sendGroup) markResend() {
	if g.retry {
		return
	}
	g.retry = true
	g.todo = g.todo[:0]
	for i := range g.results {
		if g.results[i].base >= 0 || g.results[i].err == nil || retriable(g.results[i].err) {
			g.todo = append(g.todo, i)
		}
	}
}

// resend sends g's todo batches again, blocking, until they are
// acknowledged, fail for good, or DeliveryTimeout passes.
func (p *Producer) resend(a *accum, g *sendGroup) {
	todo := g.todo
	for len(todo) > 0 {
		if p.b.closed.Load() || p.stopped() {
			err := ErrClosed
			if !p.b.closed.Load() {
				err = ErrProducerClosed
			}
			for _, i := range todo {
				g.results[i] = sendResult{base: -1, err: err}
			}
			return
		}
		todo = p.sendOnce(a, g.built, todo, g.results)
		if len(todo) == 0 {
			return
		}
		last := g.results[todo[0]].err
		if time.Now().Add(p.cfg.RetryBackoff).After(g.batches[todo[0]].created.Add(p.cfg.DeliveryTimeout)) {
			for _, i := range todo {
				g.results[i] = sendResult{base: -1, err: fmt.Errorf("%w (last error: %w)", ErrDeliveryTimeout, last)}
			}
			return
		}
		backoff := time.NewTimer(p.cfg.RetryBackoff)
		select {
		case <-backoff.C:
		case <-p.stop: // Close: the next round fails what is left
		}
		backoff.Stop()
	}
}

func (p *Producer) completeGroup(a *accum, g *sendGroup) {
	for i, bt := range g.batches {
		p.complete(a, bt, g.results[i].base, p.b.wrapClosed(g.results[i].err))
	}
}

// sendOnce sends the batches todo indexes to the partition's leader and
// records their results. It returns the indexes to send again: those whose
// failure was retriable (leadership moved, the leader is down, the ISR is
// too small).
func (p *Producer) sendOnce(a *accum, built []record.Batch, todo []int, results []sendResult) []int {
	fail := func(err error) []int {
		a.leader = nil
		for _, i := range todo {
			results[i] = sendResult{base: -1, err: err}
		}
		if retriable(err) {
			return todo
		}
		return nil
	}
	ctx := context.Background()
	if a.leader == nil || !a.leader.IsLeader() {
		rs, err := p.b.leaderFor(ctx, a.topic, a.id)
		if err != nil {
			return fail(err)
		}
		a.leader = rs
	}
	if err := p.checkLeader(a.leader); err != nil {
		return fail(err)
	}
	send := make([]record.Batch, len(todo))
	for k, i := range todo {
		send[k] = built[i]
	}
	res := a.leader.AppendBatches(ctx, send, replica.AppendOptions{Acks: p.replicaAcks(), Timeout: p.cfg.RequestTimeout, Trusted: true, Idempotent: p.cfg.Idempotent})
	var retry []int
	for k, i := range todo {
		err := res.Err
		if k < len(res.Bases) {
			err = res.AckErr
		}
		if err == nil {
			results[i] = sendResult{base: res.Bases[k]}
			continue
		}
		results[i] = sendResult{base: -1, err: err}
		if retriable(err) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		a.leader = nil // look the leader up again
	}
	return retry
}

// produceReplicated is Broker.Produce for a replicated topic: one record,
// acks=all, at the partition's leader, retried at the new leader while
// leadership moves, until ctx ends or DefaultDeliveryTimeout passes.
func (b *Broker) produceReplicated(ctx context.Context, rec Record) (RecordMetadata, error) {
	_, states, err := b.replicatedTopic(ctx, rec.Topic, true)
	if err != nil {
		return RecordMetadata{}, err
	}
	n := b.choosePartition(rec.Topic, &rec, int32(len(states)))
	if n < 0 || int(n) >= len(states) {
		return RecordMetadata{}, fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, rec.Topic, rec.Partition, len(states))
	}
	ts := rec.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	batch, err := record.NewBatch([]record.Record{{Timestamp: ts, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}}, record.BatchOptions{})
	if err != nil {
		return RecordMetadata{}, err
	}
	deadline := time.Now().Add(DefaultDeliveryTimeout)
	for {
		rs, err := b.leaderFor(ctx, rec.Topic, n)
		if err == nil {
			var off int64
			off, err = rs.Append(ctx, batch, replica.AppendOptions{Acks: replica.AcksAll, Trusted: true})
			if l, ok := rs.(*replica.ReplicaSet); ok && err == nil {
				b.holderOf(l.Partition()).metrics.produced(rec.Topic, 1, batch.Size(), nil)
			}
			if err == nil {
				return RecordMetadata{Topic: rec.Topic, Partition: n, Offset: off, Timestamp: ts.Truncate(time.Millisecond)}, nil
			}
		}
		if !retriable(err) || time.Now().After(deadline) {
			return RecordMetadata{}, b.wrapClosed(err)
		}
		if serr := sleepCtx(ctx, 100*time.Millisecond); serr != nil {
			return RecordMetadata{}, fmt.Errorf("%w (last error: %w)", serr, err)
		}
	}
}
