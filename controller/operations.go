package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/replica"
)

// This file holds the operations an operator asks the active controller
// for: partition reassignment (KIP-455: AlterPartitionReassignments,
// ListPartitionReassignments), leader elections (KIP-460: ElectLeaders)
// and a broker's decommission (KIP-631: UnregisterBroker). Each decides
// with the pure rules of package replica (Reassign, CancelReassignment,
// CompleteReassignment, DecideElection) and commits one entry for the
// whole request, as KRaft appends one atomic batch.

// Errors of a broker's decommission (UnregisterBroker).
var (
	// ErrBrokerNotRegistered refuses to unregister a broker that is not
	// registered (BROKER_ID_NOT_REGISTERED).
	ErrBrokerNotRegistered = errors.New("controller: broker not registered")
	// ErrBrokerHoldsReplicas refuses to unregister a broker that still
	// holds replicas: reassign them first. Kafka unregisters it anyway,
	// leaving partitions with a replica nobody can serve; spool refuses
	// (INVALID_REQUEST, with this message).
	ErrBrokerHoldsReplicas = errors.New("controller: broker still holds replicas")
	// ErrBrokerAlive refuses to unregister a broker that is running: it
	// would register again at its next heartbeat. Stop it first
	// (INVALID_REQUEST, with this message).
	ErrBrokerAlive = errors.New("controller: broker is alive")
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Reassignment asks to move a partition to Replicas, in that order (the
// first is the preferred leader); nil Replicas cancels the partition's
// ongoing reassignment.
type Reassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32
}

// OngoingReassignment is a partition being reassigned: its replicas (the
// target's, then those being removed) and those being added and removed.
type OngoingReassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32
	Adding    []int32
	Removing  []int32
}

// ElectionResult is the outcome of an election for one partition: nil, or
// why no election took place (replica.ErrElectionNotNeeded,
// ErrPreferredLeaderNotAvailable, ErrEligibleLeadersNotAvailable,
// ErrUnknownTopic, ErrUnknownPartition).
type ElectionResult struct {
	Topic     string
	Partition int32
	Err       error
}

// changeSet accumulates one operation's partition changes: several
// changes of one partition in a request each build on the one before, as
// the image applies them in order.
type changeSet struct {
	im    *Image
	cur   map[TopicPartition]replica.PartitionState
	order []TopicPartition
}

func newChangeSet(im *Image) *changeSet {
	return &changeSet{im: im, cur: map[TopicPartition]replica.PartitionState{}}
}

// state is a partition's state as the changes so far leave it.
func (cs *changeSet) state(topic string, p int32) (*TopicInfo, replica.PartitionState, error) {
	t, ok := cs.im.Topic(topic)
	if !ok {
		return nil, replica.PartitionState{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, topic)
	}
	if st, ok := cs.cur[TopicPartition{topic, p}]; ok {
		return t, st, nil
	}
	st, ok := cs.im.Partition(topic, p)
	if !ok {
		return t, st, fmt.Errorf("%w: %s-%d (the topic has %d partitions)", replica.ErrUnknownPartition, topic, p, len(t.Partitions))
	}
	return t, st, nil
}

func (cs *changeSet) set(st replica.PartitionState) {
	k := TopicPartition{st.Topic, st.Partition}
	if _, ok := cs.cur[k]; !ok {
		cs.order = append(cs.order, k)
	}
	cs.cur[k] = st
}

// records are the changes, one record per change of each partition.
func (cs *changeSet) records(changes []replica.PartitionState) []Record {
	var recs []Record
	for _, st := range changes {
		t, _ := cs.im.Topic(st.Topic)
		recs = append(recs, partitionRecord(t.ID, st))
	}
	return recs
}

// AlterPartitionReassignments starts or cancels partition reassignments
// (KIP-455), all in one entry, and returns each one's error (nil: started,
// cancelled, completed at once, or nothing to do) in the order given; err
// is a failure of the whole request. With allowRFChange false a target
// must keep the partition's replication factor (KIP-860). The replicas a
// reassignment adds are created on their brokers, catch up as followers
// and join the ISR; the reassignment completes when they all have
// (replica.CompleteReassignment).
func (q *Quorum) AlterPartitionReassignments(ctx context.Context, rs []Reassignment, allowRFChange bool) ([]error, error) {
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	cs := newChangeSet(im)
	registered := func(id int32) bool { _, ok := im.Broker(id); return ok }
	errs := make([]error, len(rs))
	var changes []replica.PartitionState
	for i, r := range rs {
		t, st, err := cs.state(r.Topic, r.Partition)
		if err != nil {
			errs[i] = err
			continue
		}
		var next replica.PartitionState
		changed := true
		if r.Replicas == nil {
			next, err = replica.CancelReassignment(st, t.Unclean, im.Eligible)
		} else {
			next, changed, err = replica.Reassign(st, r.Replicas, allowRFChange, registered, im.Eligible)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		if changed {
			cs.set(next)
			changes = append(changes, next)
		}
	}
	if len(changes) == 0 {
		return errs, nil
	}
	if _, _, err := q.applyLocked(cs.records(changes)...); err != nil {
		return nil, err
	}
	for _, st := range changes {
		switch {
		case st.Reassigning():
			q.log.Info("reassignment started", "topic", st.Topic, "partition", st.Partition, "replicas", st.Replicas,
				"adding", st.AddingReplicas, "removing", st.RemovingReplicas)
		default:
			q.log.Info("partition replicas changed", "topic", st.Topic, "partition", st.Partition, "replicas", st.Replicas,
				"leader", st.Leader, "leader_epoch", st.LeaderEpoch)
		}
	}
	return errs, nil
}

// ListPartitionReassignments lists the ongoing reassignments of the
// partitions asked for, or of every partition if parts is nil; partitions
// that are unknown or not being reassigned are left out (as Kafka does).
// It reads the image this node has applied: call it on the active
// controller to see its latest changes.
func (q *Quorum) ListPartitionReassignments(parts []TopicPartition) []OngoingReassignment {
	im := q.Image()
	var out []OngoingReassignment
	add := func(st replica.PartitionState) {
		if st.Reassigning() {
			st = st.Clone()
			out = append(out, OngoingReassignment{Topic: st.Topic, Partition: st.Partition, Replicas: st.Replicas,
				Adding: st.AddingReplicas, Removing: st.RemovingReplicas})
		}
	}
	if parts == nil {
		for _, name := range im.Topics() {
			t, _ := im.Topic(name)
			for _, st := range t.Partitions {
				add(st)
			}
		}
		return out
	}
	seen := map[TopicPartition]bool{}
	for _, tp := range parts {
		if seen[tp] {
			continue
		}
		seen[tp] = true
		if st, ok := im.Partition(tp.Topic, tp.Partition); ok {
			add(st)
		}
	}
	return out
}

// ElectLeaders holds leader elections an operator asks for (KIP-460):
// preferred or unclean (replica.DecideElection), for the partitions given
// or, if parts is nil, for every partition - then the partitions that need
// none are left out of the results, as Kafka does. The elections that
// happen are committed as one entry.
func (q *Quorum) ElectLeaders(ctx context.Context, typ replica.ElectionType, parts []TopicPartition) ([]ElectionResult, error) {
	if typ != replica.PreferredElection && typ != replica.UncleanElection {
		return nil, fmt.Errorf("%w: election type %d", ErrInvalidConfig, typ)
	}
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	all := parts == nil
	if all {
		for _, name := range im.Topics() {
			t, _ := im.Topic(name)
			for _, st := range t.Partitions {
				parts = append(parts, TopicPartition{name, st.Partition})
			}
		}
	}
	cs := newChangeSet(im)
	var out []ElectionResult
	var changes []replica.PartitionState
	for _, tp := range parts {
		_, st, err := cs.state(tp.Topic, tp.Partition)
		if err == nil {
			var next replica.PartitionState
			next, err = replica.DecideElection(st, typ, im.Eligible)
			if err == nil {
				cs.set(next)
				changes = append(changes, next)
				q.log.Info("leader elected on request", "topic", tp.Topic, "partition", tp.Partition, "type", typ,
					"leader", next.Leader, "leader_epoch", next.LeaderEpoch, "isr", next.ISR)
			}
		}
		if all && errors.Is(err, replica.ErrElectionNotNeeded) {
			continue
		}
		out = append(out, ElectionResult{Topic: tp.Topic, Partition: tp.Partition, Err: err})
	}
	if len(changes) > 0 {
		if _, _, err := q.applyLocked(cs.records(changes)...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UnregisterBroker removes a broker's registration (KIP-631), the last
// step of its decommission. It is refused for a broker that is not
// registered (ErrBrokerNotRegistered), that still holds a replica of any
// partition (ErrBrokerHoldsReplicas: reassign them away first) or that is
// alive - unfenced, or heartbeating within the session timeout
// (ErrBrokerAlive: stop it first). A broker-only node also leaves the
// metadata quorum it followed as a non-voter.
func (q *Quorum) UnregisterBroker(ctx context.Context, id int32) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	b, ok := im.Broker(id)
	if !ok {
		return fmt.Errorf("%w: broker %d", ErrBrokerNotRegistered, id)
	}
	var held []string
	n := 0
	for _, name := range im.Topics() {
		t, _ := im.Topic(name)
		for _, st := range t.Partitions {
			if st.HasReplica(id) {
				n++
				if len(held) < 5 {
					held = append(held, fmt.Sprintf("%s-%d", name, st.Partition))
				}
			}
		}
	}
	if n > 0 {
		more := ""
		if n > len(held) {
			more = fmt.Sprintf(" and %d more", n-len(held))
		}
		return fmt.Errorf("%w: broker %d holds replicas of %d partitions (%s%s): reassign them to other brokers first",
			ErrBrokerHoldsReplicas, id, n, strings.Join(held, ", "), more)
	}
	if !b.Fenced || q.sessionAlive(b.ID, b.Epoch, time.Now()) {
		return fmt.Errorf("%w: broker %d (epoch %d) is running: stop it, then unregister it once its session has ended (%v)",
			ErrBrokerAlive, id, b.Epoch, q.cfg.SessionTimeout)
	}
	if _, _, err := q.applyLocked(Record{UnregisterBroker: &UnregisterBrokerRecord{BrokerID: id, BrokerEpoch: b.Epoch}}); err != nil {
		return err
	}
	q.sessions.Delete(id)
	q.log.Info("broker unregistered", "broker", id, "broker_epoch", b.Epoch)
	if !slices.ContainsFunc(q.cfg.Voters, func(v Voter) bool { return v.ID == id }) {
		sid := raft.ServerID(strconv.Itoa(int(id)))
		if err := q.wait(q.raft.RemoveServer(sid, 0, 10*time.Second)); err != nil {
			q.log.Warn("cannot remove the broker from the metadata quorum's non-voters", "broker", id, "err", err)
		}
	}
	return nil
}

// completeReassignments completes every reassignment whose added replicas
// are all in sync: a check behind the one each ISR change makes
// (AlterPartition), for completions that change alone cannot see - a
// broker's fencing left the ISR so, or the controller moved between the
// change and its check.
func (q *Quorum) completeReassignments() {
	pending := func(im *Image) []replica.PartitionState {
		var out []replica.PartitionState
		for _, name := range im.Topics() {
			t, _ := im.Topic(name)
			for _, st := range t.Partitions {
				if next, ok := replica.CompleteReassignment(st, im.Eligible); ok {
					out = append(out, next)
				}
			}
		}
		return out
	}
	if len(pending(q.Image())) == 0 {
		return
	}
	q.opMu.Lock()
	defer q.opMu.Unlock()
	if !q.active.Load() {
		return
	}
	im := q.Image()
	changes := pending(im)
	if len(changes) == 0 {
		return
	}
	if _, _, err := q.applyLocked(newChangeSet(im).records(changes)...); err != nil {
		q.log.Warn("completing reassignments", "err", err)
		return
	}
	for _, st := range changes {
		q.log.Info("reassignment completed", "topic", st.Topic, "partition", st.Partition, "replicas", st.Replicas,
			"leader", st.Leader, "leader_epoch", st.LeaderEpoch)
	}
}
