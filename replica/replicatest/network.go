package replicatest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spoolmq/spool/replica"
)

type edge struct{ from, to int32 }

// faultNetwork wraps the in-process network with cuts and delays per
// direction and the brokers' gates.
type faultNetwork struct {
	base  *replica.LocalNetwork
	gates func(id int32) *gate

	mu      sync.Mutex
	cut     map[edge]bool
	delay   map[edge]time.Duration
	damage  map[edge]int // fetch responses with records still to damage
	damaged int          // fetch responses damaged so far
}

func (f *faultNetwork) Link(from, to int32) replica.Link { return &faultLink{f: f, from: from, to: to} }

// send carries a message from -> to: a cut direction loses it, a delay
// holds it, and a paused or dead endpoint holds or loses it.
func (f *faultNetwork) send(ctx context.Context, from, to int32) error {
	f.mu.Lock()
	cut, d := f.cut[edge{from, to}], f.delay[edge{from, to}]
	f.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if cut {
		return fmt.Errorf("%w: link %d->%d is cut", replica.ErrUnreachable, from, to)
	}
	if err := f.gates(from).pass(ctx); err != nil {
		return err
	}
	return f.gates(to).pass(ctx)
}

type faultLink struct {
	f        *faultNetwork
	from, to int32
}

func (l *faultLink) Fetch(ctx context.Context, req *replica.FetchRequest) (*replica.FetchResponse, error) {
	if err := l.f.send(ctx, l.from, l.to); err != nil {
		return nil, err
	}
	resp, err := l.f.base.Link(l.from, l.to).Fetch(ctx, req)
	if serr := l.f.send(ctx, l.to, l.from); serr != nil {
		return nil, serr // the response is lost on the way back
	}
	if err == nil && len(resp.Records) > 0 {
		resp = l.f.maybeDamage(edge{l.to, l.from}, resp)
	}
	return resp, err
}

// maybeDamage flips a bit in the last byte of a fetch response's records -
// inside its last batch, so that the batches before it are sound - if
// damage on this edge is pending.
func (f *faultNetwork) maybeDamage(e edge, resp *replica.FetchResponse) *replica.FetchResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.damage[e] <= 0 {
		return resp
	}
	f.damage[e]--
	f.damaged++
	out := *resp
	out.Records = append([]byte(nil), resp.Records...)
	out.Records[len(out.Records)-1] ^= 0x01
	return &out
}

func (l *faultLink) EndOffsetForEpoch(ctx context.Context, req *replica.EpochRequest) (replica.EpochEnd, error) {
	if err := l.f.send(ctx, l.from, l.to); err != nil {
		return replica.EpochEnd{}, err
	}
	resp, err := l.f.base.Link(l.from, l.to).EndOffsetForEpoch(ctx, req)
	if serr := l.f.send(ctx, l.to, l.from); serr != nil {
		return replica.EpochEnd{}, serr
	}
	return resp, err
}
