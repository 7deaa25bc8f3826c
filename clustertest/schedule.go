package clustertest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault a Schedule deals.
type Kind string

// The kinds of fault.
const (
	KindKill           Kind = "kill"            // Kill a node
	KindPause          Kind = "pause"           // Pause a node
	KindIsolate        Kind = "isolate"         // Isolate a node (a leader, the controller, ...)
	KindIsolatedLeader Kind = "isolated-leader" // Isolate a partition's leader
	KindPartition      Kind = "partition"       // Partition the nodes in two
	KindOneWay         Kind = "one-way"         // OneWay from a node
	KindSlow           Kind = "slow"            // Slow a node's links
	KindQuorumKill     Kind = "quorum-kill"     // QuorumLoss by SIGKILL
	KindQuorumCut      Kind = "quorum-cut"      // QuorumLoss by partition
	KindFullDisk       Kind = "full-disk"       // FullDisk
	KindRolling        Kind = "rolling-restart" // RollingRestart
)

// ScheduleOptions describe what a Schedule may do.
type ScheduleOptions struct {
	// Topics and Partitions name the partitions whose leaders faults
	// may target (each topic's first Partitions); Group, the group whose
	// coordinator they may.
	Topics     []string
	Partitions int
	Group      string
	// Kinds are the kinds of fault to deal. Default: every kind the
	// cluster allows - the network faults need Options.LinkProxies, the
	// full disk Options.DiskBytes.
	Kinds []Kind
	// MinHold and MaxHold bound how long a fault is held before it is
	// healed. Defaults 2s and 12s: some shorter than a session timeout
	// of a few seconds, some longer than the default replica lag time
	// (10s).
	MinHold, MaxHold time.Duration
}

// Schedule deals faults drawn from a seed: the same seed gives the same
// sequence of kinds, targets (by role: "the leader of t-2", "the
// controller", "node 3"), durations and delays. Which node a role names
// is decided when each fault starts, by the cluster's state then, and
// that, like the interleaving of processes, is not reproducible: a seed
// replays the schedule, not the run.
//
// Kinds are drawn from a shuffled bag, refilled when empty, so that every
// kind comes once in every len(Kinds) faults.
type Schedule struct {
	c    *Cluster
	opts ScheduleOptions
	rng  *rand.Rand
	bag  []Kind
}

// NewSchedule returns the schedule a seed draws for a cluster.
func NewSchedule(c *Cluster, seed uint64, opts ScheduleOptions) *Schedule {
	if opts.Kinds == nil {
		opts.Kinds = c.Kinds()
	}
	if opts.MinHold <= 0 {
		opts.MinHold = 2 * time.Second
	}
	if opts.MaxHold < opts.MinHold {
		opts.MaxHold = max(opts.MinHold, 12*time.Second)
	}
	return &Schedule{c: c, opts: opts, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// Kinds are the kinds of fault this cluster allows.
func (c *Cluster) Kinds() []Kind {
	kinds := []Kind{KindKill, KindPause, KindQuorumKill, KindRolling}
	if c.links != nil {
		kinds = append(kinds, KindIsolate, KindIsolatedLeader, KindPartition, KindOneWay, KindSlow, KindQuorumCut)
	}
	if c.opts.DiskBytes > 0 {
		kinds = append(kinds, KindFullDisk)
	}
	return kinds
}

// Fault is one fault of a Schedule: its kind, the nemesis that deals it,
// and how long to hold it before the heal (0 for a rolling restart, which
// is over when it has started).
type Fault struct {
	Kind    Kind
	Nemesis Nemesis
	Hold    time.Duration
}

// Next draws the next fault.
func (s *Schedule) Next() Fault {
	kind, n, hold := s.next()
	return Fault{Kind: kind, Nemesis: n, Hold: hold}
}

func (s *Schedule) next() (Kind, Nemesis, time.Duration) {
	if len(s.bag) == 0 {
		s.bag = slices.Clone(s.opts.Kinds)
		s.rng.Shuffle(len(s.bag), func(i, j int) { s.bag[i], s.bag[j] = s.bag[j], s.bag[i] })
	}
	kind := s.bag[0]
	s.bag = s.bag[1:]
	// Drawn for every fault, used or not, so that a fault's draws do not
	// depend on the kinds before it.
	hold := s.opts.MinHold + time.Duration(s.rng.Int64N(int64(s.opts.MaxHold-s.opts.MinHold)/int64(100*time.Millisecond)+1))*100*time.Millisecond
	target := s.target()
	other := int32(s.rng.IntN(len(s.c.nodes)) + 1)
	delay := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, time.Second}[s.rng.IntN(4)]
	split := s.split()
	leader := s.leader()
	switch kind {
	case KindKill:
		return kind, &Kill{Target: target}, hold
	case KindPause:
		return kind, &Pause{Target: target}, hold
	case KindIsolate:
		return kind, &Isolate{Targets: []Target{target}}, hold
	case KindIsolatedLeader:
		return kind, &Isolate{Targets: []Target{leader}}, hold
	case KindPartition:
		return kind, &Partition{Groups: split}, hold
	case KindOneWay:
		// Half the time to every other node, half to one.
		var to []Target
		if s.rng.IntN(2) == 0 {
			to = []Target{NodeTarget(other)}
		}
		return kind, &OneWay{From: target, To: to}, hold
	case KindSlow:
		return kind, &Slow{Target: target, Delay: delay}, hold
	case KindQuorumKill:
		return kind, &QuorumLoss{}, hold
	case KindQuorumCut:
		return kind, &QuorumLoss{Partition: true}, hold
	case KindFullDisk:
		// Restarted after the heal: spool, like Kafka, needs a restart
		// to use a log whose write failed (see FullDisk).
		return kind, &FullDisk{Target: target, Restart: true}, hold
	case KindRolling:
		return kind, &RollingRestart{}, 0
	}
	panic(fmt.Sprintf("clustertest: schedule: unknown kind %q", kind))
}

// leader draws the leader of one of the topics' partitions; a node by id
// if there are no topics.
func (s *Schedule) leader() Target {
	topic := s.rng.IntN(max(len(s.opts.Topics), 1))
	partition := int32(s.rng.IntN(max(s.opts.Partitions, 1)))
	if len(s.opts.Topics) == 0 {
		return NodeTarget(int32(s.rng.IntN(len(s.c.nodes)) + 1))
	}
	return LeaderTarget(s.opts.Topics[topic], partition)
}

// target draws a node by role.
func (s *Schedule) target() Target {
	switch s.rng.IntN(4) {
	case 0:
		return s.leader()
	case 1:
		return ControllerTarget()
	case 2:
		if s.opts.Group != "" {
			return CoordinatorTarget(s.opts.Group)
		}
	}
	return NodeTarget(int32(s.rng.IntN(len(s.c.nodes)) + 1))
}

// split draws a partition of the nodes in two: a minority of one to half
// of them, and the rest.
func (s *Schedule) split() [][]int32 {
	ids := make([]int32, len(s.c.nodes))
	for i := range ids {
		ids[i] = int32(i + 1)
	}
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	k := 1 + s.rng.IntN(max(len(ids)/2, 1))
	a, b := slices.Clone(ids[:k]), slices.Clone(ids[k:])
	slices.Sort(a)
	slices.Sort(b)
	return [][]int32{a, b}
}
