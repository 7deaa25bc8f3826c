package replicatest

import (
	"context"
	"fmt"
	"sync"

	"github.com/spoolmq/spool/replica"
)

// gate is one broker's "process": running, paused (calls in and out block
// until it resumes) or dead (calls fail at once).
type gate struct {
	id     int32
	mu     sync.Mutex
	paused chan struct{} // closed on resume; nil while running
	dead   bool
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil && !g.dead {
		g.paused = make(chan struct{})
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

func (g *gate) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dead = true
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

// pass waits while the broker is paused and fails if it is dead.
func (g *gate) pass(ctx context.Context) error {
	for {
		g.mu.Lock()
		dead, paused := g.dead, g.paused
		g.mu.Unlock()
		if dead {
			return fmt.Errorf("%w: broker %d is down", replica.ErrUnreachable, g.id)
		}
		if paused == nil {
			return nil
		}
		select {
		case <-paused:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// down reports whether the broker is dead.
func (g *gate) down() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// running reports, without waiting, whether the broker would answer now.
func (g *gate) running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.dead && g.paused == nil
}

// gatedController is the controller as one broker reaches it: nothing gets
// through while the broker is paused or dead, and what the controller sends
// the broker waits too.
type gatedController struct {
	replica.Controller
	g *gate
}

func (c gatedController) Register(ctx context.Context, id int32, m replica.Member) (int64, error) {
	if err := c.g.pass(ctx); err != nil {
		return 0, err
	}
	return c.Controller.Register(ctx, id, gatedMember{m, c.g})
}

func (c gatedController) Heartbeat(ctx context.Context, id int32, epoch int64) error {
	if err := c.g.pass(ctx); err != nil {
		return err
	}
	return c.Controller.Heartbeat(ctx, id, epoch)
}

func (c gatedController) AlterPartition(ctx context.Context, req replica.AlterPartitionRequest) (replica.PartitionState, error) {
	if err := c.g.pass(ctx); err != nil {
		return replica.PartitionState{}, err
	}
	st, err := c.Controller.AlterPartition(ctx, req)
	if perr := c.g.pass(ctx); perr != nil {
		return replica.PartitionState{}, perr // the answer is lost
	}
	return st, err
}

func (c gatedController) Resign(ctx context.Context, req replica.ResignRequest) (replica.PartitionState, error) {
	if err := c.g.pass(ctx); err != nil {
		return replica.PartitionState{}, err
	}
	st, err := c.Controller.Resign(ctx, req)
	if perr := c.g.pass(ctx); perr != nil {
		return replica.PartitionState{}, perr
	}
	return st, err
}

type gatedMember struct {
	m replica.Member
	g *gate
}

func (m gatedMember) UpdatePartition(st replica.PartitionState) {
	if m.g.pass(context.Background()) == nil {
		m.m.UpdatePartition(st)
	}
}

func (m gatedMember) LogEnd(topic string, partition int32) (int32, int64, bool) {
	if !m.g.running() {
		return 0, 0, false
	}
	return m.m.LogEnd(topic, partition)
}
