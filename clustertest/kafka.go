package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrUnsettled reports that the running nodes do not agree (yet) on what
// was asked (the controller, a group's coordinator, a partition's ISR):
// usually a moment after a failure, while the news spreads. Ask again.
var ErrUnsettled = errors.New("clustertest: the nodes disagree")

// requestTimeout bounds each request the cluster's queries send to one
// node, so that a paused or dying node does not hold a query up.
const requestTimeout = 3 * time.Second

// pollInterval is how often Eventually asks again.
const pollInterval = 50 * time.Millisecond

// PartitionState is a partition as a node's metadata describes it.
type PartitionState struct {
	Topic       string
	Partition   int32
	Leader      int32 // -1 without a leader
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	Offline     []int32
	// From is the node whose metadata this is.
	From int32
}

// InSync reports whether the partition has a leader and every replica in
// its ISR.
func (p PartitionState) InSync() bool {
	if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
		return false
	}
	for _, r := range p.Replicas {
		if !slices.Contains(p.ISR, r) {
			return false
		}
	}
	return true
}

func (p PartitionState) String() string {
	return fmt.Sprintf("%s-%d leader %d epoch %d replicas %v isr %v offline %v (node %d's view)",
		p.Topic, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, p.Offline, p.From)
}

// answering are the running nodes that are not paused: the ones a query
// asks.
func (c *Cluster) answering() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// Metadata asks this node for metadata: of the topics named, or of every
// topic if none is.
func (n *Node) Metadata(ctx context.Context, topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	if len(topics) > 0 {
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := n.Request(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// partitionStates turns a metadata response's topics into states.
func partitionStates(from int32, resp *kmsg.MetadataResponse) (map[string][]PartitionState, error) {
	out := map[string][]PartitionState{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("clustertest: node %d: metadata of %s: %w", from, *t.Topic, err)
		}
		for _, p := range t.Partitions {
			out[*t.Topic] = append(out[*t.Topic], PartitionState{
				Topic: *t.Topic, Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, Offline: p.OfflineReplicas, From: from,
			})
		}
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b PartitionState) int { return int(a.Partition - b.Partition) })
	}
	return out, nil
}

// Partitions describes a topic's partitions as the freshest metadata of
// the running nodes has them: for each partition, the answer with the
// highest leader epoch (a node that missed the latest election still
// names the old leader). It fails if no running node knows the topic.
func (c *Cluster) Partitions(ctx context.Context, topic string) ([]PartitionState, error) {
	var best []PartitionState
	var lastErr error
	for _, n := range c.answering() {
		resp, err := n.Metadata(ctx, topic)
		if err == nil {
			var states map[string][]PartitionState
			states, err = partitionStates(n.id, resp)
			if err == nil {
				ps := states[topic]
				if len(ps) > len(best) {
					best = append(best, ps[len(best):]...)
				}
				for i := range ps {
					if ps[i].LeaderEpoch > best[i].LeaderEpoch {
						best[i] = ps[i]
					}
				}
				continue
			}
		}
		lastErr = err
	}
	if best == nil {
		if lastErr == nil {
			lastErr = ErrNotRunning
		}
		return nil, fmt.Errorf("clustertest: partitions of %s: %w", topic, lastErr)
	}
	return best, nil
}

// Leader returns the id of a partition's leader (-1 while it has none),
// as the freshest metadata has it (see Partitions).
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (int32, error) {
	ps, err := c.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	if int(partition) >= len(ps) || partition < 0 {
		return 0, fmt.Errorf("clustertest: %s has no partition %d (%d partitions)", topic, partition, len(ps))
	}
	return ps[partition].Leader, nil
}

// agree asks every answering node the same question and returns the
// answer they all give, ErrUnsettled if they differ.
func (c *Cluster) agree(ctx context.Context, what string, ask func(context.Context, *Node) (int32, error)) (int32, error) {
	nodes := c.answering()
	if len(nodes) == 0 {
		return 0, fmt.Errorf("clustertest: %s: %w", what, ErrNotRunning)
	}
	answers := map[int32][]int32{}
	for _, n := range nodes {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		id, err := ask(rctx, n)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("clustertest: %s: %w", what, err)
		}
		answers[id] = append(answers[id], n.id)
	}
	if len(answers) > 1 {
		return 0, fmt.Errorf("clustertest: %s: %w: answers (id: asked nodes) %v", what, ErrUnsettled, answers)
	}
	for id := range answers {
		return id, nil
	}
	panic("unreachable")
}

// Controller returns the id of the active controller, as every answering
// node names it in DescribeCluster (Metadata's ControllerID says the
// same); ErrUnsettled if they do not agree.
func (c *Cluster) Controller(ctx context.Context) (int32, error) {
	return c.agree(ctx, "controller", func(ctx context.Context, n *Node) (int32, error) {
		resp, err := n.Request(ctx, kmsg.NewPtrDescribeClusterRequest())
		if err != nil {
			return 0, err
		}
		r := resp.(*kmsg.DescribeClusterResponse)
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return 0, fmt.Errorf("node %d: %w", n.id, err)
		}
		return r.ControllerID, nil
	})
}

// Coordinator returns the id of a consumer group's coordinator, as every
// answering node names it in FindCoordinator: the leader of the group's
// __consumer_offsets partition. ErrUnsettled if they do not agree.
func (c *Cluster) Coordinator(ctx context.Context, group string) (int32, error) {
	return c.agree(ctx, "coordinator of group "+group, func(ctx context.Context, n *Node) (int32, error) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = group, []string{group} // v0-3, v4+
		resp, err := n.Request(ctx, req)
		if err != nil {
			return 0, err
		}
		r := resp.(*kmsg.FindCoordinatorResponse)
		id, code := r.NodeID, r.ErrorCode
		if r.Version >= 4 {
			if len(r.Coordinators) != 1 {
				return 0, fmt.Errorf("node %d: FindCoordinator answered %d coordinators for one key", n.id, len(r.Coordinators))
			}
			id, code = r.Coordinators[0].NodeID, r.Coordinators[0].ErrorCode
		}
		if err := kerr.ErrorForCode(code); err != nil {
			return 0, fmt.Errorf("node %d: %w", n.id, err)
		}
		return id, nil
	})
}

// maxVersionRequest caps the version a request is sent at: kgo sends the
// highest both sides support, and a request's single-group fields apply
// only below some version (OffsetFetch v8 batches groups, v10 names topics
// by id).
type maxVersionRequest struct {
	kmsg.Request
	max int16
}

func (r maxVersionRequest) MaxVersion() int16 { return min(r.max, r.Request.MaxVersion()) }

// CommittedOffsets returns a group's committed offsets for a topic's
// partitions (partitions without one are left out), fetched with
// OffsetFetch from the group's coordinator (Coordinator). It returns the
// coordinator's id too. An error code in the answer - NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS while a new coordinator reloads the
// offsets - is returned as a kerr error, so callers can retry on
// kerr.IsRetriable.
func (c *Cluster) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, int32, error) {
	coord, err := c.Coordinator(ctx, group)
	if err != nil {
		return nil, -1, err
	}
	n := c.Node(coord)
	if n == nil {
		return nil, coord, fmt.Errorf("clustertest: group %s: coordinator %d is not a node of the cluster", group, coord)
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	ps, err := c.Partitions(ctx, topic)
	if err != nil {
		return nil, coord, err
	}
	for _, p := range ps {
		rt.Partitions = append(rt.Partitions, p.Partition)
	}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := n.Request(rctx, maxVersionRequest{req, 7})
	if err != nil {
		return nil, coord, err
	}
	r := resp.(*kmsg.OffsetFetchResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return nil, coord, fmt.Errorf("clustertest: OffsetFetch of group %s from node %d: %w", group, coord, err)
	}
	out := map[int32]int64{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, coord, fmt.Errorf("clustertest: OffsetFetch of group %s from node %d: %s-%d: %w", group, coord, t.Topic, p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, coord, nil
}

// CreateTopic creates a topic through one of the running nodes (any
// broker forwards it to the active controller), with the topic configs
// given (min.insync.replicas, ...). It does not wait for its replicas to
// be in sync: see WaitInSync.
func (c *Cluster) CreateTopic(ctx context.Context, name string, partitions, replicationFactor int, configs map[string]string) error {
	nodes := c.answering()
	if len(nodes) == 0 {
		return fmt.Errorf("clustertest: create topic %s: %w", name, ErrNotRunning)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(requestTimeout / time.Millisecond)
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, int32(partitions), int16(replicationFactor)
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = []kmsg.CreateTopicsRequestTopic{rt}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := nodes[0].Request(rctx, req)
	if err != nil {
		return fmt.Errorf("clustertest: create topic %s: %w", name, err)
	}
	r := resp.(*kmsg.CreateTopicsResponse)
	if len(r.Topics) != 1 {
		return fmt.Errorf("clustertest: create topic %s: %d topics in the answer", name, len(r.Topics))
	}
	if err := kerr.ErrorForCode(r.Topics[0].ErrorCode); err != nil {
		msg := ""
		if m := r.Topics[0].ErrorMessage; m != nil {
			msg = ": " + *m
		}
		return fmt.Errorf("clustertest: create topic %s: %w%s", name, err, msg)
	}
	return nil
}

// Eventually calls cond until it returns nil, every 50ms, and returns nil
// then; when ctx ends first, it returns an error naming what was awaited
// and cond's last complaint.
func Eventually(ctx context.Context, what string, cond func(context.Context) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var last error
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		// A condition cut short by ctx's end says only that; the one
		// before it says why the wait was in vain.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clustertest: %s: %w; last: %w", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// WaitBrokers waits until every answering node lists every running node
// among the brokers of its metadata: each has registered with the
// controller and been unfenced, and the others know it.
func (c *Cluster) WaitBrokers(ctx context.Context) error {
	return Eventually(ctx, "every running node listed as a broker", func(ctx context.Context) error {
		want := map[int32]bool{}
		for _, n := range c.Running() {
			want[n.id] = true
		}
		for _, n := range c.answering() {
			resp, err := n.Metadata(ctx)
			if err != nil {
				return err
			}
			var have []int32
			for _, b := range resp.Brokers {
				have = append(have, b.NodeID)
			}
			for id := range want {
				if !slices.Contains(have, id) {
					return fmt.Errorf("node %d lists brokers %v, not %d", n.id, have, id)
				}
			}
		}
		return nil
	})
}

// WaitInSync waits until every answering node's metadata has every
// partition of the topics (of every topic if none is named) with a
// running leader and all its replicas in the ISR, at the same leader
// epoch: the cluster has healed.
func (c *Cluster) WaitInSync(ctx context.Context, topics ...string) error {
	return Eventually(ctx, fmt.Sprintf("partitions of %v in sync", topics), func(ctx context.Context) error {
		return c.inSync(ctx, topics)
	})
}

func (c *Cluster) inSync(ctx context.Context, topics []string) error {
	nodes := c.answering()
	if len(nodes) == 0 {
		return ErrNotRunning
	}
	var first map[string][]PartitionState
	var firstID int32
	for _, n := range nodes {
		resp, err := n.Metadata(ctx, topics...)
		if err != nil {
			return err
		}
		states, err := partitionStates(n.id, resp)
		if err != nil {
			return err
		}
		for _, t := range topics {
			if len(states[t]) == 0 {
				return fmt.Errorf("node %d does not know topic %s", n.id, t)
			}
		}
		for _, ps := range states {
			for _, p := range ps {
				if !p.InSync() {
					return fmt.Errorf("not in sync: %v", p)
				}
				if l := c.Node(p.Leader); l == nil || !l.Running() {
					return fmt.Errorf("leader not running: %v", p)
				}
			}
		}
		if first == nil {
			first, firstID = states, n.id
			continue
		}
		for t, ps := range states {
			if len(first[t]) != len(ps) {
				return fmt.Errorf("%w: topic %s: node %d has %d partitions, node %d %d", ErrUnsettled, t, firstID, len(first[t]), n.id, len(ps))
			}
			for i, p := range ps {
				if f := first[t][i]; f.Leader != p.Leader || f.LeaderEpoch != p.LeaderEpoch {
					return fmt.Errorf("%w: %v; %v", ErrUnsettled, f, p)
				}
			}
		}
	}
	return nil
}

// EndOffsets returns the high watermark of each of a topic's partitions:
// the offset after the last committed record, what a consumer reads up
// to. Each is asked of the partition's leader (ListOffsets, latest).
func (c *Cluster) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	ps, err := c.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, p := range ps {
		n := c.Node(p.Leader)
		if n == nil {
			return nil, fmt.Errorf("clustertest: end offset of %v: no leader", p)
		}
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.Partition, -1, p.LeaderEpoch
		rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
		req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := n.Request(rctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		r := resp.(*kmsg.ListOffsetsResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			return nil, fmt.Errorf("clustertest: ListOffsets of %s-%d from node %d: malformed answer", topic, p.Partition, n.id)
		}
		rp2 := r.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rp2.ErrorCode); err != nil {
			return nil, fmt.Errorf("clustertest: ListOffsets of %s-%d from node %d: %w", topic, p.Partition, n.id, err)
		}
		out[p.Partition] = rp2.Offset
	}
	return out, nil
}
