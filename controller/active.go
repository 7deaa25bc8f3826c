package controller

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/replica"
)

// This file is the active controller: what the Raft leader does once it
// has applied everything committed before its term. Every operation runs
// under opMu, reads the image, decides with the pure rules of package
// replica, and commits its records as one Raft entry; it returns only once
// the entry is applied here, so the next operation sees its effect. Broker
// sessions live in the active controller's memory only (as in KRaft): a
// new active controller starts every broker's session afresh (with half of
// it gone: see activate).

// watchLeadership turns the active controller on and off as this node's
// Raft member gains and loses leadership, and runs the session checks.
func (q *Quorum) watchLeadership() {
	defer q.wg.Done()
	tick := time.NewTicker(max(q.cfg.SessionTimeout/8, 10*time.Millisecond))
	defer tick.Stop()
	leaderCh := q.raft.LeaderCh()
	for {
		select {
		case <-q.stop:
			return
		case leading := <-leaderCh:
			if leading {
				q.activate()
			} else if q.active.Swap(false) {
				q.log.Info("no longer the active controller")
			}
		case <-tick.C:
			if q.raft.State() != raft.Leader {
				if q.active.Swap(false) {
					q.log.Info("no longer the active controller")
				}
				continue
			}
			if !q.active.Load() {
				q.activate()
				continue
			}
			q.expireSessions(time.Now())
			q.completeReassignments()
		}
	}
}

// activate makes this node the active controller once its image has
// every entry committed before its term (Barrier), with a fresh session
// for every registered broker and the cluster named.
func (q *Quorum) activate() {
	if err := q.wait(q.raft.Barrier(10 * time.Second)); err != nil {
		q.log.Debug("barrier failed; not activating yet", "err", err)
		return
	}
	q.opMu.Lock()
	defer q.opMu.Unlock()
	// Every broker's session starts afresh, but with half of it gone: a
	// live broker heartbeats every quarter session and finds the new
	// controller within a Raft heartbeat of its election, so half a
	// session tells the dead from the live - and a broker that died with
	// the old controller is fenced that much sooner.
	now := time.Now()
	im := q.Image()
	q.sessions.Clear()
	for _, b := range im.Brokers() {
		q.touch(b.ID, b.Epoch, now.Add(-q.cfg.SessionTimeout/2))
	}
	q.assign = int(im.Index())
	if im.ClusterID() == "" {
		cid := q.clusterID()
		if cid == "" {
			cid = newID()
		}
		if _, _, err := q.applyRaw(Record{Cluster: &ClusterRecord{ClusterID: cid}}); err != nil {
			q.log.Warn("cannot name the cluster", "err", err)
			return
		}
	}
	q.active.Store(true)
	q.log.Info("active controller", "metadata_index", q.Image().Index(), "cluster_id", q.Image().ClusterID())
}

func (q *Quorum) touch(id int32, epoch int64, now time.Time) {
	s := &session{epoch: epoch}
	s.lastBeat.Store(now.UnixNano())
	q.sessions.Store(id, s)
}

// sessionAlive reports whether broker incarnation (id, epoch) sent a
// heartbeat within the session timeout.
func (q *Quorum) sessionAlive(id int32, epoch int64, now time.Time) bool {
	v, ok := q.sessions.Load(id)
	if !ok {
		return false
	}
	s := v.(*session)
	return s.epoch == epoch && now.Sub(time.Unix(0, s.lastBeat.Load())) <= q.cfg.SessionTimeout
}

// expireSessions fences every unfenced broker whose session ran out: it
// leaves every ISR it can and its leaderships move, in one entry with the
// fence (KRaft's handleBrokerFenced).
func (q *Quorum) expireSessions(now time.Time) {
	q.opMu.Lock()
	defer q.opMu.Unlock()
	if !q.active.Load() {
		return
	}
	for _, b := range q.Image().Brokers() {
		if b.Fenced {
			continue
		}
		v, ok := q.sessions.Load(b.ID)
		if !ok || v.(*session).epoch != b.Epoch {
			q.touch(b.ID, b.Epoch, now) // registered by an entry this controller did not write
			continue
		}
		if q.sessionAlive(b.ID, b.Epoch, now) {
			continue
		}
		q.log.Warn("broker session expired; fencing", "broker", b.ID, "broker_epoch", b.Epoch, "session_timeout", q.cfg.SessionTimeout)
		fenced := true
		recs := []Record{{BrokerChange: &BrokerChangeRecord{BrokerID: b.ID, BrokerEpoch: b.Epoch, Fenced: &fenced}}}
		recs = append(recs, q.reconcileLocked(q.Image(), b.ID, except(q.Image(), b.ID))...)
		if _, _, err := q.applyLocked(recs...); err != nil {
			q.log.Warn("fencing failed", "broker", b.ID, "err", err)
			return
		}
	}
}

// except is the image's eligibility with broker id ineligible.
func except(im *Image, id int32) replica.Eligible {
	return func(b int32) bool { return b != id && im.Eligible(b) }
}

// with is the image's eligibility with broker id eligible.
func with(im *Image, id int32) replica.Eligible {
	return func(b int32) bool { return b == id || im.Eligible(b) }
}

// reconcileLocked is the partition records that bring every partition
// broker id holds in line with eligible (replica.Reconcile).
func (q *Quorum) reconcileLocked(im *Image, id int32, eligible replica.Eligible) []Record {
	var recs []Record
	for _, name := range im.Topics() {
		t, _ := im.Topic(name)
		for _, st := range t.Partitions {
			if !st.HasReplica(id) {
				continue
			}
			res := replica.Reconcile(st, eligible, t.Unclean, nil)
			if !res.Changed {
				continue
			}
			switch {
			case res.Unclean:
				q.log.Warn("unclean leader election: records the old ISR committed may be lost",
					"topic", st.Topic, "partition", st.Partition, "leader", res.State.Leader, "old_isr", st.ISR)
			case res.Offline:
				q.log.Warn("partition offline: no in-sync replica is eligible", "topic", st.Topic, "partition", st.Partition, "isr", res.State.ISR)
			}
			recs = append(recs, partitionRecord(t.ID, res.State))
		}
	}
	return recs
}

// applyLocked commits records as one entry and waits until this node has
// applied it. A failure may be ambiguous (the entry may still commit):
// callers' operations are idempotent or re-read the image.
func (q *Quorum) applyLocked(recs ...Record) (ApplyResult, uint64, error) {
	if !q.active.Load() {
		return ApplyResult{}, 0, q.notController()
	}
	return q.applyRaw(recs...)
}

// applyRaw is applyLocked without the check that this node is active.
func (q *Quorum) applyRaw(recs ...Record) (ApplyResult, uint64, error) {
	data, err := EncodeEntry(recs...)
	if err != nil {
		return ApplyResult{}, 0, err
	}
	f := q.raft.Apply(data, 10*time.Second)
	if err := q.wait(f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			q.active.Store(false)
			return ApplyResult{}, 0, q.notController()
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return ApplyResult{}, 0, ErrClosed
		}
		return ApplyResult{}, 0, fmt.Errorf("controller: %w", err)
	}
	switch r := f.Response().(type) {
	case ApplyResult:
		return r, f.Index(), nil
	case error:
		return ApplyResult{}, f.Index(), r
	}
	return ApplyResult{}, f.Index(), nil
}

// begin starts an operation: it holds opMu and checks that this node is
// the active controller. The caller unlocks.
func (q *Quorum) begin(ctx context.Context) error {
	q.opMu.Lock()
	if err := ctx.Err(); err != nil {
		q.opMu.Unlock()
		return err
	}
	if !q.active.Load() {
		q.opMu.Unlock()
		return q.notController()
	}
	return nil
}

// Registration is a broker registering an incarnation
// (BrokerRegistration).
type Registration struct {
	BrokerID      int32
	ClusterID     string
	IncarnationID string
	Kafka         Endpoint
	// Controller is the broker's controller listener, for a broker that is
	// not a voter: it joins Raft as a non-voter to follow the metadata log.
	Controller string
	Rack       string
	// Listeners are the broker's named Kafka listeners, Kafka's first
	// (the one the nodes use among themselves); none: one unnamed
	// listener, Kafka, told to every client.
	Listeners []NamedEndpoint
}

// RegisterBroker registers a broker incarnation and returns its broker
// epoch. The same incarnation registering again gets its epoch back; a new
// incarnation is refused while the old one's session is alive
// (ErrDuplicateRegistration), else it replaces it: the broker registers
// fenced, and leaves every ISR and leadership the old incarnation held
// (the new one may have lost its log's tail; KIP-966).
func (q *Quorum) RegisterBroker(ctx context.Context, r Registration) (int64, error) {
	if err := q.begin(ctx); err != nil {
		return 0, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	if cid := im.ClusterID(); r.ClusterID != "" && cid != "" && r.ClusterID != cid {
		return 0, fmt.Errorf("%w: broker %d is of cluster %s, this is %s", ErrInconsistentClusterID, r.BrokerID, r.ClusterID, cid)
	}
	if r.BrokerID < 0 || r.IncarnationID == "" {
		return 0, fmt.Errorf("%w: registration of broker %d with incarnation %q", ErrInvalidConfig, r.BrokerID, r.IncarnationID)
	}
	now := time.Now()
	if b, ok := im.Broker(r.BrokerID); ok {
		if b.IncarnationID == r.IncarnationID {
			return b.Epoch, nil
		}
		if q.sessionAlive(b.ID, b.Epoch, now) && !b.Fenced {
			return 0, fmt.Errorf("%w: broker %d (epoch %d) is alive", ErrDuplicateRegistration, b.ID, b.Epoch)
		}
	}
	recs := []Record{{RegisterBroker: &RegisterBrokerRecord{BrokerID: r.BrokerID, IncarnationID: r.IncarnationID,
		Kafka: r.Kafka, Controller: r.Controller, Rack: r.Rack, Listeners: slices.Clone(r.Listeners)}}}
	recs = append(recs, q.reconcileLocked(im, r.BrokerID, except(im, r.BrokerID))...)
	res, _, err := q.applyLocked(recs...)
	if err != nil {
		return 0, err
	}
	q.touch(r.BrokerID, res.BrokerEpoch, now)
	q.log.Info("broker registered", "broker", r.BrokerID, "broker_epoch", res.BrokerEpoch, "kafka", fmt.Sprintf("%s:%d", r.Kafka.Host, r.Kafka.Port))
	if r.Controller != "" && !slices.ContainsFunc(q.cfg.Voters, func(v Voter) bool { return v.ID == r.BrokerID }) {
		id := raft.ServerID(strconv.Itoa(int(r.BrokerID)))
		if err := q.wait(q.raft.AddNonvoter(id, raft.ServerAddress(r.Controller), 0, 10*time.Second)); err != nil {
			q.log.Warn("cannot add the broker to the metadata quorum as a non-voter", "broker", r.BrokerID, "err", err)
		}
	}
	return res.BrokerEpoch, nil
}

// Heartbeat is a broker's periodic heartbeat (BrokerHeartbeat).
type Heartbeat struct {
	BrokerID    int32
	BrokerEpoch int64
	// MetadataIndex is the last metadata entry the broker has applied.
	MetadataIndex uint64
	// WantFence keeps the broker fenced (it is still starting).
	WantFence bool
	// WantShutdown asks for a controlled shutdown.
	WantShutdown bool
}

// HeartbeatResult is the controller's answer.
type HeartbeatResult struct {
	IsCaughtUp     bool
	IsFenced       bool
	ShouldShutdown bool
}

// BrokerHeartbeat renews a broker's session. A fenced broker that is
// caught up with the metadata log (it has applied its own registration)
// and does not want to stay fenced is unfenced, and leads the partitions
// left without a leader it can lead (KRaft's calculateNextBrokerState). A
// broker that wants to shut down starts its controlled shutdown: it leaves
// every ISR it can and its leaderships move, and it is told to shut down
// once it leads nothing. An incarnation that is not the registered one is
// refused with ErrStaleBrokerEpoch: it must register again.
func (q *Quorum) BrokerHeartbeat(ctx context.Context, h Heartbeat) (HeartbeatResult, error) {
	if !q.active.Load() {
		return HeartbeatResult{}, q.notController()
	}
	now := time.Now()
	im := q.Image()
	b, ok := im.Broker(h.BrokerID)
	if !ok || b.Epoch != h.BrokerEpoch {
		return HeartbeatResult{}, fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, h.BrokerID, h.BrokerEpoch)
	}
	q.touch(b.ID, b.Epoch, now)
	caughtUp := h.MetadataIndex >= uint64(b.Epoch)
	unfence := b.Fenced && !h.WantFence && caughtUp && !h.WantShutdown && !b.InControlledShutdown
	shut := h.WantShutdown && !b.InControlledShutdown
	if unfence || shut {
		if err := q.begin(ctx); err != nil {
			return HeartbeatResult{}, err
		}
		im = q.Image()
		b, ok = im.Broker(h.BrokerID)
		if ok && b.Epoch == h.BrokerEpoch {
			var recs []Record
			switch {
			case shut && !b.InControlledShutdown:
				yes := true
				recs = append(recs, Record{BrokerChange: &BrokerChangeRecord{BrokerID: b.ID, BrokerEpoch: b.Epoch, InControlledShutdown: &yes}})
				recs = append(recs, q.reconcileLocked(im, b.ID, except(im, b.ID))...)
				q.log.Info("controlled shutdown", "broker", b.ID, "broker_epoch", b.Epoch, "leaderships", im.Leads(b.ID))
			case unfence && b.Fenced:
				no := false
				recs = append(recs, Record{BrokerChange: &BrokerChangeRecord{BrokerID: b.ID, BrokerEpoch: b.Epoch, Fenced: &no}})
				recs = append(recs, q.reconcileLocked(im, b.ID, with(im, b.ID))...)
				q.log.Info("broker unfenced", "broker", b.ID, "broker_epoch", b.Epoch)
			}
			if len(recs) > 0 {
				if _, _, err := q.applyLocked(recs...); err != nil {
					q.opMu.Unlock()
					return HeartbeatResult{}, err
				}
			}
		}
		q.opMu.Unlock()
		im = q.Image()
		b, _ = im.Broker(h.BrokerID)
	}
	done := h.WantShutdown && b.InControlledShutdown && im.Leads(b.ID) == 0
	if done && !b.Fenced {
		// Its controlled shutdown is complete: fence it now, so that
		// clients stop being sent to a broker about to exit rather than a
		// session timeout later (KRaft's SHUTDOWN_NOW).
		if err := q.begin(ctx); err == nil {
			if cur, ok := q.Image().Broker(b.ID); ok && cur.Epoch == b.Epoch && !cur.Fenced {
				yes := true
				q.applyLocked(Record{BrokerChange: &BrokerChangeRecord{BrokerID: b.ID, BrokerEpoch: b.Epoch, Fenced: &yes}})
			}
			q.opMu.Unlock()
		}
		b, _ = q.Image().Broker(h.BrokerID)
	}
	return HeartbeatResult{IsCaughtUp: caughtUp, IsFenced: b.Fenced, ShouldShutdown: done}, nil
}

// AlterPartition changes a partition's ISR on its leader's request
// (KIP-497), checked by replica.CheckAlterPartition: a new member must be
// registered, unfenced, not shutting down and fetching with its current
// broker epoch (KIP-903).
func (q *Quorum) AlterPartition(ctx context.Context, req replica.AlterPartitionRequest) (replica.PartitionState, error) {
	if err := q.begin(ctx); err != nil {
		return replica.PartitionState{}, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	t, ok := im.Topic(req.Topic)
	if !ok {
		return replica.PartitionState{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, req.Topic)
	}
	st, ok := im.Partition(req.Topic, req.Partition)
	if !ok {
		return replica.PartitionState{}, fmt.Errorf("%w: %s-%d", replica.ErrUnknownPartition, req.Topic, req.Partition)
	}
	next, err := replica.DecideAlterPartition(st, req, func(id int32, seen int64) bool {
		b, ok := im.Broker(id)
		return !ok || !b.Eligible() || b.Epoch != seen
	}, im.Eligible)
	if err != nil {
		return next, err
	}
	if _, _, err := q.applyLocked(partitionRecord(t.ID, next)); err != nil {
		return st, err
	}
	q.log.Info("ISR changed", "topic", req.Topic, "partition", req.Partition, "from", st.ISR, "to", next.ISR, "partition_epoch", next.PartitionEpoch)
	if st.Reassigning() && !next.Reassigning() {
		q.log.Info("reassignment completed", "topic", req.Topic, "partition", req.Partition, "replicas", next.Replicas,
			"leader", next.Leader, "leader_epoch", next.LeaderEpoch)
	}
	if next.Leader != req.Leader {
		// Committed, and the leadership moved with the reassignment it
		// completed: the old leader learns its role from the metadata.
		return next, fmt.Errorf("%w: %s-%d is led by %d in epoch %d", replica.ErrNewLeaderElected, req.Topic, req.Partition, next.Leader, next.LeaderEpoch)
	}
	return next, nil
}

// TopicRequest asks for a new topic.
type TopicRequest struct {
	Name              string
	Partitions        int
	ReplicationFactor int
	// Config is the topic's own settings in the broker's encoding; Unclean
	// and MinISR the two the rules need.
	Config  json.RawMessage
	Unclean bool
	MinISR  int
}

// CreateTopic creates a topic: its partitions' replicas go round-robin
// over the eligible brokers (replica.AssignReplicas), the first replica
// leads, every replica starts in the ISR. It returns the topic as
// committed.
func (q *Quorum) CreateTopic(ctx context.Context, r TopicRequest) (*TopicInfo, error) {
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	if _, ok := im.Topic(r.Name); ok {
		return nil, fmt.Errorf("%w: %q", replica.ErrTopicExists, r.Name)
	}
	if r.Partitions < 1 || r.ReplicationFactor < 1 {
		return nil, fmt.Errorf("%w: %d partitions, replication factor %d", replica.ErrInvalidConfig, r.Partitions, r.ReplicationFactor)
	}
	live := q.eligibleBrokers(im)
	if r.ReplicationFactor > len(live) {
		return nil, fmt.Errorf("%w: replication factor %d, %d eligible brokers", replica.ErrNotEnoughBrokers, r.ReplicationFactor, len(live))
	}
	assign, err := replica.AssignReplicas(live, r.Partitions, r.ReplicationFactor, q.assign)
	if err != nil {
		return nil, err
	}
	q.assign += r.Partitions
	id := newID()
	recs := []Record{{Topic: &TopicRecord{Name: r.Name, ID: id, Config: r.Config, Unclean: r.Unclean, MinISR: r.MinISR}}}
	for _, st := range replica.NewPartitionStates(r.Name, 0, assign) {
		recs = append(recs, partitionRecord(id, st))
	}
	if _, _, err := q.applyLocked(recs...); err != nil {
		return nil, err
	}
	t, ok := q.Image().Topic(r.Name)
	if !ok || t.ID != id {
		return nil, fmt.Errorf("controller: topic %q was not created", r.Name)
	}
	q.log.Info("topic created", "topic", r.Name, "topic_id", id, "partitions", r.Partitions, "replication_factor", r.ReplicationFactor)
	return t, nil
}

func (q *Quorum) eligibleBrokers(im *Image) []int32 {
	var live []int32
	for _, b := range im.Brokers() {
		if b.Eligible() {
			live = append(live, b.ID)
		}
	}
	return live
}

// DeleteTopic deletes a topic; brokers delete their replicas when they
// apply it.
func (q *Quorum) DeleteTopic(ctx context.Context, name string) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	defer q.opMu.Unlock()
	t, ok := q.Image().Topic(name)
	if !ok {
		return fmt.Errorf("%w: %q", replica.ErrUnknownTopic, name)
	}
	if _, _, err := q.applyLocked(Record{RemoveTopic: &RemoveTopicRecord{Name: name, ID: t.ID}}); err != nil {
		return err
	}
	q.log.Info("topic deleted", "topic", name, "topic_id", t.ID)
	return nil
}

// CreatePartitions grows a topic to total partitions, placed as a new
// topic's with the topic's replication factor.
func (q *Quorum) CreatePartitions(ctx context.Context, name string, total int) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	t, ok := im.Topic(name)
	if !ok {
		return fmt.Errorf("%w: %q", replica.ErrUnknownTopic, name)
	}
	have := len(t.Partitions)
	if total <= have {
		return fmt.Errorf("%w: %q has %d partitions; partitions can only be added (asked for %d)", replica.ErrInvalidConfig, name, have, total)
	}
	rf := t.Partitions[0].ReplicationFactor() // not counting what a reassignment adds
	live := q.eligibleBrokers(im)
	if rf > len(live) {
		return fmt.Errorf("%w: replication factor %d, %d eligible brokers", replica.ErrNotEnoughBrokers, rf, len(live))
	}
	assign, err := replica.AssignReplicas(live, total-have, rf, q.assign)
	if err != nil {
		return err
	}
	q.assign += total - have
	var recs []Record
	for _, st := range replica.NewPartitionStates(name, int32(have), assign) {
		recs = append(recs, partitionRecord(t.ID, st))
	}
	_, _, err = q.applyLocked(recs...)
	return err
}

// TopicConfigChange replaces a topic's own settings.
type TopicConfigChange struct {
	Name string
	// BaseVersion is the config version the change was computed from
	// (TopicInfo.ConfigVersion); a change made meanwhile refuses this one
	// with ErrConfigChanged.
	BaseVersion int64
	Config      json.RawMessage
	Unclean     bool
	MinISR      int
}

// ErrConfigChanged refuses a change to a topic's settings or to a
// settings document computed from a version that changed meanwhile: read
// them again and retry.
var ErrConfigChanged = errors.New("controller: settings changed meanwhile")

// AlterTopicConfig replaces a topic's settings. Turning unclean leader
// election on elects leaders for the topic's leaderless partitions at once.
func (q *Quorum) AlterTopicConfig(ctx context.Context, c TopicConfigChange) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	t, ok := im.Topic(c.Name)
	if !ok {
		return fmt.Errorf("%w: %q", replica.ErrUnknownTopic, c.Name)
	}
	if t.ConfigVersion != c.BaseVersion {
		return fmt.Errorf("%w: %q is at version %d, the change was made from %d", ErrConfigChanged, c.Name, t.ConfigVersion, c.BaseVersion)
	}
	recs := []Record{{TopicConfig: &TopicConfigRecord{Name: c.Name, ID: t.ID, Version: t.ConfigVersion + 1, Config: c.Config, Unclean: c.Unclean, MinISR: c.MinISR}}}
	if c.Unclean && !t.Unclean {
		for _, st := range t.Partitions {
			if st.Leader >= 0 {
				continue
			}
			if res := replica.Reconcile(st, im.Eligible, true, nil); res.Changed {
				recs = append(recs, partitionRecord(t.ID, res.State))
			}
		}
	}
	_, _, err := q.applyLocked(recs...)
	return err
}

// SettingsChange replaces a settings document (SettingsRecord).
type SettingsChange struct {
	Kind SettingsKind
	// BaseVersion is the version the change was computed from
	// (Image.Settings); a change made meanwhile refuses this one with
	// ErrConfigChanged.
	BaseVersion int64
	Data        json.RawMessage
	// ID names the change, unique per change (a retry of the same change
	// keeps it): a change already applied - its first attempt committed,
	// the answer lost - is answered as done rather than as stale.
	ID string
}

// AlterSettings replaces a settings document, if it is still at
// c.BaseVersion. The document must pass Config.ValidateSettings: one
// that some node could not read would leave that node behind for good.
func (q *Quorum) AlterSettings(ctx context.Context, c SettingsChange) error {
	if !c.Kind.Valid() {
		return fmt.Errorf("%w: settings kind %q", ErrInvalidConfig, c.Kind)
	}
	if !json.Valid(c.Data) {
		return fmt.Errorf("%w: settings %q are not JSON", ErrInvalidConfig, c.Kind)
	}
	if v := q.cfg.ValidateSettings; v != nil {
		if err := v(c.Kind, c.Data); err != nil {
			return fmt.Errorf("%w: %s settings: %v", ErrInvalidConfig, c.Kind, err)
		}
	}
	if err := q.begin(ctx); err != nil {
		return err
	}
	defer q.opMu.Unlock()
	if cur := q.Image().Settings(c.Kind); cur.Version != c.BaseVersion {
		if c.ID != "" && slices.Contains(cur.Recent, c.ID) {
			return nil // applied by an earlier attempt
		}
		return fmt.Errorf("%w: %s settings are at version %d, the change was made from %d", ErrConfigChanged, c.Kind, cur.Version, c.BaseVersion)
	}
	res, _, err := q.applyLocked(Record{Settings: &SettingsRecord{Kind: c.Kind, Version: c.BaseVersion + 1, Data: c.Data, ID: c.ID}})
	if err == nil && res.Skipped > 0 {
		err = fmt.Errorf("%w: %s settings moved past version %d as the change was applied", ErrConfigChanged, c.Kind, c.BaseVersion)
	}
	return err
}

// ProducerIDBlock is how many producer ids one allocation hands out.
const ProducerIDBlock = 1000

// AllocateProducerIDs hands broker (at brokerEpoch) the next block of
// producer ids: [first, first+ProducerIDBlock).
func (q *Quorum) AllocateProducerIDs(ctx context.Context, broker int32, brokerEpoch int64) (first int64, err error) {
	if err := q.begin(ctx); err != nil {
		return 0, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	if b, ok := im.Broker(broker); !ok || b.Epoch != brokerEpoch {
		return 0, fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, broker, brokerEpoch)
	}
	first = im.NextProducerID()
	_, _, err = q.applyLocked(Record{ProducerIDs: &ProducerIDsRecord{BrokerID: broker, BrokerEpoch: brokerEpoch, NextProducerID: first + ProducerIDBlock}})
	return first, err
}

// ElectPreferredLeaders moves each partition's leadership to its preferred
// replica where that replica is eligible and in sync, and returns how many
// moved.
func (q *Quorum) ElectPreferredLeaders(ctx context.Context) (int, error) {
	if err := q.begin(ctx); err != nil {
		return 0, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	var recs []Record
	for _, name := range im.Topics() {
		t, _ := im.Topic(name)
		for _, st := range t.Partitions {
			if next, ok := replica.ElectPreferred(st, im.Eligible); ok {
				recs = append(recs, partitionRecord(t.ID, next))
			}
		}
	}
	if len(recs) == 0 {
		return 0, nil
	}
	_, _, err := q.applyLocked(recs...)
	return len(recs), err
}

// newID is a random 16-byte id in Kafka's notation (URL-safe base64
// without padding), as topic ids and cluster ids are.
func newID() string {
	var id [16]byte
	for id == ([16]byte{}) {
		rand.Read(id[:])
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// Resign moves a partition's leadership away from a leader that found a
// damaged batch in its own log (replica.DecideResignation): to another
// in-sync replica, the old leader leaving the ISR until it has repaired its
// copy. The metadata knows no replica's log end, so every other live ISR
// member counts as holding the committed records.
func (q *Quorum) Resign(ctx context.Context, req replica.ResignRequest) (replica.PartitionState, error) {
	if err := q.begin(ctx); err != nil {
		return replica.PartitionState{}, err
	}
	defer q.opMu.Unlock()
	im := q.Image()
	t, ok := im.Topic(req.Topic)
	if !ok {
		return replica.PartitionState{}, fmt.Errorf("%w: %q", replica.ErrUnknownTopic, req.Topic)
	}
	st, ok := im.Partition(req.Topic, req.Partition)
	if !ok {
		return replica.PartitionState{}, fmt.Errorf("%w: %s-%d", replica.ErrUnknownPartition, req.Topic, req.Partition)
	}
	next, err := replica.DecideResignation(st, req, im.Eligible, nil)
	if err != nil {
		return st, err
	}
	if _, _, err := q.applyLocked(partitionRecord(t.ID, next)); err != nil {
		return st, err
	}
	q.log.Warn("leader resigned over a damaged batch", "topic", req.Topic, "partition", req.Partition, "old_leader", req.Leader, "new_leader", next.Leader, "offset", req.Offset)
	return next, nil
}
