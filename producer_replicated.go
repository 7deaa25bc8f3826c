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
	p.topics[name] = pt
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

// sendReplicated writes a replicated partition's sealed batches at its
// leader, in order, each group of queued batches in one AppendBatches call.
// Batches that fail because leadership moved (or the ISR is too small, or
// the leader is down) are sent again to the leader found afresh, until
// DeliveryTimeout: a batch written but not acknowledged may then be written
// twice.
func (p *Producer) sendReplicated(a *accum) {
	for {
		p.mu.Lock()
		batches := a.queue
		a.queue = nil
		if len(batches) == 0 {
			a.sending = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		built := make([]record.Batch, len(batches))
		results := make([]sendResult, len(batches))
		todo := make([]int, 0, len(batches)) // indexes still to send, in order
		for i, bt := range batches {
			results[i].base = -1
			if age := time.Since(bt.created); age > p.cfg.DeliveryTimeout {
				results[i].err = fmt.Errorf("%w: batch waited %v", ErrDeliveryTimeout, age.Round(time.Millisecond))
			} else if built[i], results[i].err = bt.bld.Build(); results[i].err == nil {
				todo = append(todo, i)
			}
		}
		for len(todo) > 0 {
			if p.b.closed.Load() {
				for _, i := range todo {
					results[i] = sendResult{base: -1, err: ErrClosed}
				}
				break
			}
			todo = p.sendOnce(a, built, todo, results)
			if len(todo) == 0 {
				break
			}
			last := results[todo[0]].err
			if time.Now().Add(p.cfg.RetryBackoff).After(batches[todo[0]].created.Add(p.cfg.DeliveryTimeout)) {
				for _, i := range todo {
					results[i] = sendResult{base: -1, err: fmt.Errorf("%w (last error: %w)", ErrDeliveryTimeout, last)}
				}
				break
			}
			time.Sleep(p.cfg.RetryBackoff)
		}
		for i, bt := range batches {
			p.complete(a, bt, results[i].base, p.b.wrapClosed(results[i].err))
		}
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
		rs, err := p.b.opts.Cluster.leader(ctx, a.topic, a.id)
		if err != nil {
			return fail(err)
		}
		a.leader = rs
	}
	send := make([]record.Batch, len(todo))
	for k, i := range todo {
		send[k] = built[i]
	}
	res := a.leader.AppendBatches(ctx, send, replica.AppendOptions{Acks: p.replicaAcks(), Timeout: p.cfg.RequestTimeout, Trusted: true})
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
