package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Nemesis is a fault dealt to a running cluster: Start deals it, Heal
// undoes its cause (restarts what it killed, resumes what it paused,
// heals the links it cut). Neither waits for the cluster to recover from
// it - that is the test's to wait for (WaitInSync, a workload's
// progress), and the time it takes is what the test is about. A Nemesis
// is used once: Start, then Heal. String names the fault and, once it
// has started, the nodes it hit.
type Nemesis interface {
	Start(ctx context.Context, c *Cluster) error
	Heal(ctx context.Context, c *Cluster) error
	String() string
}

// Target picks the node a fault hits, when the fault starts: a node by
// id, or by its role in the cluster at that moment.
type Target struct {
	// Name describes the choice: "node 2", "leader of t-0", ...
	Name string
	pick func(ctx context.Context, c *Cluster) (int32, error)
}

func (t Target) String() string { return t.Name }

// NodeTarget is the node with an id.
func NodeTarget(id int32) Target {
	return Target{Name: fmt.Sprintf("node %d", id), pick: func(context.Context, *Cluster) (int32, error) { return id, nil }}
}

// LeaderTarget is the leader of a topic's partition, as the freshest
// metadata names it (Cluster.Leader), once it has one.
func LeaderTarget(topic string, partition int32) Target {
	return Target{Name: fmt.Sprintf("leader of %s-%d", topic, partition), pick: func(ctx context.Context, c *Cluster) (int32, error) {
		var id int32
		err := Eventually(ctx, "a leader of "+topic, func(ctx context.Context) (err error) {
			id, err = c.Leader(ctx, topic, partition)
			if err == nil && id < 0 {
				err = fmt.Errorf("%s-%d has no leader", topic, partition)
			}
			return err
		})
		return id, err
	}}
}

// ControllerTarget is the active controller, once the nodes agree on it.
func ControllerTarget() Target {
	return Target{Name: "the controller", pick: func(ctx context.Context, c *Cluster) (int32, error) {
		var id int32
		err := Eventually(ctx, "an agreed controller", func(ctx context.Context) (err error) {
			id, err = c.Controller(ctx)
			return err
		})
		return id, err
	}}
}

// CoordinatorTarget is a consumer group's coordinator, once the nodes
// agree on it.
func CoordinatorTarget(group string) Target {
	return Target{Name: "coordinator of " + group, pick: func(ctx context.Context, c *Cluster) (int32, error) {
		var id int32
		err := Eventually(ctx, "an agreed coordinator of "+group, func(ctx context.Context) (err error) {
			id, err = c.Coordinator(ctx, group)
			return err
		})
		return id, err
	}}
}

// resolve picks a target's node and checks it is one of the cluster's.
func (t Target) resolve(ctx context.Context, c *Cluster) (int32, error) {
	if t.pick == nil {
		return 0, errors.New("clustertest: the zero Target names no node")
	}
	id, err := t.pick(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("clustertest: %s: %w", t.Name, err)
	}
	if c.Node(id) == nil {
		return 0, fmt.Errorf("clustertest: %s is %d, not a node of the cluster", t.Name, id)
	}
	return id, nil
}

// hit records the nodes a nemesis hit, for its String.
type hit struct {
	mu  sync.Mutex
	ids []int32
}

func (h *hit) set(ids ...int32) {
	h.mu.Lock()
	h.ids = slices.Clone(ids)
	h.mu.Unlock()
}

func (h *hit) get() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ids)
}

func (h *hit) String() string {
	ids := h.get()
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf(" = %v", ids)
}

// Kill is a crash and a restart: Start sends the target SIGKILL, Heal
// starts it again (same data directory, same ports).
type Kill struct {
	Target Target
	hit    hit
}

func (k *Kill) String() string { return "SIGKILL " + k.Target.Name + k.hit.String() }

// Start kills the target.
func (k *Kill) Start(ctx context.Context, c *Cluster) error {
	id, err := k.Target.resolve(ctx, c)
	if err != nil {
		return err
	}
	k.hit.set(id)
	return c.Node(id).Kill()
}

// Heal restarts the killed node and waits until it listens.
func (k *Kill) Heal(ctx context.Context, c *Cluster) error {
	return startNodes(ctx, c, k.hit.get())
}

// startNodes starts the nodes that are not running, all at once (a
// quorum that lost its majority forms again only once enough voters run).
func startNodes(ctx context.Context, c *Cluster, ids []int32) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		if n := c.Node(id); n != nil && !n.Running() {
			wg.Go(func() { errs[i] = n.Start(ctx) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pause is a process that hangs with its sockets open - a long GC pause, a
// stuck disk, a VM migration: Start sends the target SIGSTOP, Heal
// SIGCONT. Held for longer than the session timeout, the node is fenced
// while it cannot know it, and wakes up believing what it believed.
type Pause struct {
	Target Target
	hit    hit
}

func (p *Pause) String() string { return "SIGSTOP " + p.Target.Name + p.hit.String() }

// Start pauses the target.
func (p *Pause) Start(ctx context.Context, c *Cluster) error {
	id, err := p.Target.resolve(ctx, c)
	if err != nil {
		return err
	}
	p.hit.set(id)
	return c.Node(id).Pause()
}

// Heal resumes it.
func (p *Pause) Heal(ctx context.Context, c *Cluster) error {
	for _, id := range p.hit.get() {
		if err := c.Node(id).Resume(); err != nil {
			return err
		}
	}
	return nil
}

// Isolate cuts each target from every other node, both ways (needs
// Options.LinkProxies); clients still reach it. Isolating a partition's
// leader is the classic case: it keeps accepting produce requests from
// the clients that reach it while the others elect a new leader.
type Isolate struct {
	Targets []Target
	hit     hit
}

func (s *Isolate) String() string {
	return "isolate " + targetNames(s.Targets) + s.hit.String()
}

func targetNames(ts []Target) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// Start cuts the targets off.
func (s *Isolate) Start(ctx context.Context, c *Cluster) error {
	var ids []int32
	for _, t := range s.Targets {
		id, err := t.resolve(ctx, c)
		if err != nil {
			return err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	s.hit.set(ids...)
	return c.Isolate(ids...)
}

// Heal heals every link.
func (s *Isolate) Heal(ctx context.Context, c *Cluster) error { return c.HealNetwork() }

// Partition splits the nodes into groups that cannot reach each other
// (needs Options.LinkProxies): Cluster.Partition.
type Partition struct {
	Groups [][]int32
}

func (p *Partition) String() string { return fmt.Sprintf("partition %v", p.Groups) }

// Start cuts the links between the groups.
func (p *Partition) Start(ctx context.Context, c *Cluster) error { return c.Partition(p.Groups...) }

// Heal heals every link.
func (p *Partition) Heal(ctx context.Context, c *Cluster) error { return c.HealNetwork() }

// OneWay stops the bytes From sends to each node of To (every other node
// if To is empty), while theirs reach it (Cluster.BlockOneWay; needs
// Options.LinkProxies). From hears everything and acts on it - the
// others' fetches, heartbeats and votes reach it - but is never heard:
// its own requests and its answers to theirs are held until Heal. A To
// that names From itself when the fault starts stands for the node after
// it (by id, around).
type OneWay struct {
	From Target
	To   []Target
	hit  hit
}

func (o *OneWay) String() string {
	to := "every other node"
	if len(o.To) > 0 {
		to = targetNames(o.To)
	}
	ids := o.hit.get()
	if len(ids) > 0 {
		return fmt.Sprintf("block bytes from %s to %s = %d→%v", o.From.Name, to, ids[0], ids[1:])
	}
	return fmt.Sprintf("block bytes from %s to %s", o.From.Name, to)
}

// Start blocks the bytes.
func (o *OneWay) Start(ctx context.Context, c *Cluster) error {
	from, err := o.From.resolve(ctx, c)
	if err != nil {
		return err
	}
	var to []int32
	for _, t := range o.To {
		id, err := t.resolve(ctx, c)
		if err != nil {
			return err
		}
		if id == from {
			id = from%int32(len(c.nodes)) + 1
		}
		if !slices.Contains(to, id) {
			to = append(to, id)
		}
	}
	if len(o.To) == 0 {
		for _, n := range c.nodes {
			if n.id != from {
				to = append(to, n.id)
			}
		}
	}
	o.hit.set(append([]int32{from}, to...)...)
	for _, t := range to {
		if err := c.BlockOneWay(from, t); err != nil {
			return err
		}
	}
	return nil
}

// Heal heals every link.
func (o *OneWay) Heal(ctx context.Context, c *Cluster) error { return c.HealNetwork() }

// Slow delays every byte between the target and every other node by Delay,
// each way (Cluster.Slow; needs Options.LinkProxies).
type Slow struct {
	Target Target
	Delay  time.Duration
	hit    hit
}

func (s *Slow) String() string {
	return fmt.Sprintf("slow links of %s%s by %v", s.Target.Name, s.hit.String(), s.Delay)
}

// Start slows the target's links.
func (s *Slow) Start(ctx context.Context, c *Cluster) error {
	id, err := s.Target.resolve(ctx, c)
	if err != nil {
		return err
	}
	s.hit.set(id)
	return c.Slow(id, s.Delay)
}

// Heal heals every link.
func (s *Slow) Heal(ctx context.Context, c *Cluster) error { return c.HealNetwork() }

// QuorumLoss takes a majority of the controller quorum's voters away - the
// active controller first, then the lowest other ids - by SIGKILL, or with
// Partition set by cutting each from every other node (a voter apart from
// the others cannot form a majority with them). Heal restarts them, or
// heals the network.
type QuorumLoss struct {
	Partition bool
	hit       hit
}

func (q *QuorumLoss) String() string {
	how := "SIGKILL"
	if q.Partition {
		how = "isolate"
	}
	return fmt.Sprintf("%s a majority of the voters%s", how, q.hit.String())
}

// Start takes the majority away.
func (q *QuorumLoss) Start(ctx context.Context, c *Cluster) error {
	voters := c.VoterIDs()
	var ids []int32
	if ctrl, err := c.Controller(ctx); err == nil && slices.Contains(voters, ctrl) {
		ids = append(ids, ctrl)
	}
	for _, v := range voters {
		if len(ids) == len(voters)/2+1 {
			break
		}
		if !slices.Contains(ids, v) {
			ids = append(ids, v)
		}
	}
	q.hit.set(ids...)
	if q.Partition {
		return c.Isolate(ids...)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() { errs[i] = c.Node(id).Kill() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Heal brings the voters back.
func (q *QuorumLoss) Heal(ctx context.Context, c *Cluster) error {
	if q.Partition {
		return c.HealNetwork()
	}
	return startNodes(ctx, c, q.hit.get())
}

// FullDisk fills the target's disk (Node.FillDisk; needs
// Options.DiskBytes): every write that needs a new block fails with
// ENOSPC. Heal gives the space back (Node.FreeDisk) and, if Restart is
// set, restarts the node afterwards with SIGTERM (SIGKILL if that does not
// end it), as an operator would; a node that exited because of the full
// disk is restarted as well.
type FullDisk struct {
	Target  Target
	Restart bool
	hit     hit
}

func (f *FullDisk) String() string { return "fill the disk of " + f.Target.Name + f.hit.String() }

// Start fills the disk.
func (f *FullDisk) Start(ctx context.Context, c *Cluster) error {
	id, err := f.Target.resolve(ctx, c)
	if err != nil {
		return err
	}
	f.hit.set(id)
	return c.Node(id).FillDisk()
}

// Heal frees the disk.
func (f *FullDisk) Heal(ctx context.Context, c *Cluster) error {
	for _, id := range f.hit.get() {
		n := c.Node(id)
		if err := n.FreeDisk(); err != nil {
			return err
		}
		if f.Restart && n.Running() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := n.Stop(sctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		if !n.Running() {
			if err := n.Start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// RollingRestart restarts every node in turn, as an upgrade does: SIGTERM
// (a controlled shutdown, which must exit 0), wait until no running node
// lists it among the brokers (so that what follows is not read from
// metadata older than its shutdown), start it again, and wait until it is
// back in the ISR of every partition of every topic before the next. It does it all in Start; Heal has nothing to undo. Each
// node's wait is bounded by Timeout (default 2 minutes).
type RollingRestart struct {
	Timeout time.Duration
	// Each, if set, is called after each node is back in sync, with its
	// id and when it was sent SIGTERM.
	Each func(id int32, stopped time.Time)
}

func (r *RollingRestart) String() string { return "rolling restart" }

// Start restarts every node in turn.
func (r *RollingRestart) Start(ctx context.Context, c *Cluster) error {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		nctx, cancel := context.WithTimeout(ctx, timeout)
		stopped := time.Now()
		code, err := n.Stop(nctx)
		if err == nil && code != 0 {
			err = fmt.Errorf("clustertest: rolling restart: node %d exited %d after SIGTERM", n.id, code)
		}
		if err == nil {
			err = c.waitGone(nctx, n.id)
		}
		if err == nil {
			err = n.Start(nctx)
		}
		if err == nil {
			err = c.WaitBrokers(nctx)
		}
		if err == nil {
			err = c.WaitInSync(nctx)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("clustertest: rolling restart: node %d: %w", n.id, err)
		}
		if r.Each != nil {
			r.Each(n.id, stopped)
		}
	}
	return nil
}

// Heal does nothing: every node was back when Start returned.
func (r *RollingRestart) Heal(context.Context, *Cluster) error { return nil }

// waitGone waits until no answering node lists node id among the brokers
// of its metadata.
func (c *Cluster) waitGone(ctx context.Context, id int32) error {
	return Eventually(ctx, fmt.Sprintf("node %d gone from every node's brokers", id), func(ctx context.Context) error {
		for _, n := range c.answering() {
			resp, err := n.Metadata(ctx)
			if err != nil {
				return err
			}
			for _, b := range resp.Brokers {
				if b.NodeID == id {
					return fmt.Errorf("node %d lists node %d", n.id, id)
				}
			}
		}
		return nil
	})
}

// VoterIDs are the ids of the controller quorum's voters.
func (c *Cluster) VoterIDs() []int32 {
	out := make([]int32, 0, c.opts.Voters)
	for i := range c.opts.Voters {
		out = append(out, int32(i+1))
	}
	return out
}
