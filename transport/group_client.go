package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupClient is a group.Client that speaks the Kafka protocol: a
// group.ConsumerGroup member of a group whose coordinator is a Kafka
// broker elsewhere - a spool server, or Kafka itself. It finds the group's
// coordinator through the bootstrap address (FindCoordinator) and sends it
// JoinGroup v7, SyncGroup v5, Heartbeat v4, LeaveGroup v4,
// ConsumerGroupHeartbeat v1 (topics by id: it learns them from Metadata
// v12), OffsetCommit v9 and OffsetFetch v7. Connections are plain TCP.
// Safe for concurrent use; Close releases its connections.
type GroupClient struct {
	bootstrap string
	peers     *peers

	mu       sync.Mutex
	coords   map[string]string // group -> coordinator address
	ids      map[string][16]byte
	names    map[[16]byte]string
	counts   map[string]int32 // partitions per topic, as of countsAt
	countsAt time.Time
}

// NewGroupClient returns a GroupClient of the cluster at bootstrap
// (host:port of any broker).
func NewGroupClient(bootstrap string) *GroupClient {
	return &GroupClient{bootstrap: bootstrap, peers: newPeers(nil), coords: map[string]string{},
		ids: map[string][16]byte{}, names: map[[16]byte]string{}}
}

// Close closes the client's connections.
func (c *GroupClient) Close() { c.peers.close() }

var _ group.Client = (*GroupClient)(nil)

// groupErrorOf is the group package's error for a Kafka error code (nil
// for none), so that a ConsumerGroup reacts to a remote coordinator as to
// one in process; codes without one are kerr's errors.
func groupErrorOf(code int16, msg *string) error {
	var err error
	switch code {
	case errNone:
		return nil
	case errUnknownMemberID:
		err = group.ErrUnknownMemberID
	case errIllegalGeneration:
		err = group.ErrIllegalGeneration
	case errRebalanceInProgress:
		err = group.ErrRebalanceInProgress
	case errMemberIDRequired:
		err = group.ErrMemberIDRequired
	case errInconsistentGroupProtocol:
		err = group.ErrInconsistentProtocol
	case errInvalidSessionTimeout:
		err = group.ErrInvalidSessionTimeout
	case errFencedInstanceID:
		err = group.ErrFencedInstanceID
	case errGroupIDNotFound:
		err = group.ErrGroupIDNotFound
	case errNonEmptyGroup:
		err = group.ErrNonEmptyGroup
	case errInvalidGroupID:
		err = group.ErrInvalidGroupID
	case errGroupMaxSizeReached:
		err = group.ErrGroupMaxSizeReached
	case errOffsetMetadataTooLarge:
		err = group.ErrOffsetMetadataTooLarge
	case errNotCoordinator, errCoordinatorLoadInProgress, errCoordinatorNotAvailable:
		// Retriable: the coordinator moved, is loading or is down for a
		// while; the group is found again.
		err = group.ErrNotCoordinator
	case errFencedMemberEpoch:
		err = group.ErrFencedMemberEpoch
	case errUnreleasedInstanceID:
		err = group.ErrUnreleasedInstanceID
	case errUnsupportedAssignor:
		err = group.ErrUnsupportedAssignor
	case errStaleMemberEpoch:
		err = group.ErrStaleMemberEpoch
	case errInvalidRegularExpression:
		err = group.ErrInvalidRegularExpression
	default:
		err = kerr.ErrorForCode(code)
	}
	if msg != nil && *msg != "" {
		return fmt.Errorf("%w: %s", err, *msg)
	}
	return err
}

// coordinator is the address of the group's coordinator.
func (c *GroupClient) coordinator(ctx context.Context, g string) (string, error) {
	c.mu.Lock()
	addr, ok := c.coords[g]
	c.mu.Unlock()
	if ok {
		return addr, nil
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorKey, req.CoordinatorType = 3, g, coordinatorGroup
	resp, err := c.peers.request(ctx, c.bootstrap, req)
	if err != nil {
		return "", err
	}
	r := resp.(*kmsg.FindCoordinatorResponse)
	if err := groupErrorOf(r.ErrorCode, r.ErrorMessage); err != nil {
		return "", fmt.Errorf("find the coordinator of group %q: %w", g, err)
	}
	addr = net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
	c.mu.Lock()
	c.coords[g] = addr
	c.mu.Unlock()
	return addr, nil
}

// send sends a request to the group's coordinator; code reads the
// response's error. A coordinator that moved or is unreachable is
// forgotten and looked up again, once.
func (c *GroupClient) send(ctx context.Context, g string, req kmsg.Request, code func(kmsg.Response) error) (kmsg.Response, error) {
	for attempt := 0; ; attempt++ {
		addr, err := c.coordinator(ctx, g)
		if err != nil {
			return nil, err
		}
		resp, err := c.peers.request(ctx, addr, req)
		if err == nil {
			err = code(resp)
		}
		if err != nil && attempt == 0 && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) &&
			(errors.Is(err, group.ErrNotCoordinator) || errors.Is(err, group.ErrCoordinatorClosed) || resp == nil) {
			c.mu.Lock()
			delete(c.coords, g)
			c.mu.Unlock()
			continue
		}
		return resp, err
	}
}

// waitContext bounds a request the coordinator holds until the group
// decides (JoinGroup, SyncGroup): its rebalance timeout and then some.
func waitContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d+10*time.Second)
}

// Join sends JoinGroup v7.
func (c *GroupClient) Join(ctx context.Context, jr group.JoinRequest) (group.JoinResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 7
	req.Group, req.MemberID, req.InstanceID, req.ProtocolType = jr.Group, jr.MemberID, groupNullable(jr.GroupInstanceID), jr.ProtocolType
	req.SessionTimeoutMillis = int32(jr.SessionTimeout / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(jr.RebalanceTimeout / time.Millisecond)
	for _, p := range jr.Protocols {
		rp := kmsg.NewJoinGroupRequestProtocol()
		rp.Name, rp.Metadata = p.Name, p.Metadata
		req.Protocols = append(req.Protocols, rp)
	}
	ctx, cancel := waitContext(ctx, jr.RebalanceTimeout)
	defer cancel()
	var out group.JoinResponse
	_, err := c.send(ctx, jr.Group, req, func(resp kmsg.Response) error {
		r := resp.(*kmsg.JoinGroupResponse)
		out = group.JoinResponse{MemberID: r.MemberID, Generation: r.Generation, LeaderID: r.LeaderID}
		if r.Protocol != nil {
			out.Protocol = *r.Protocol
		}
		if r.ProtocolType != nil {
			out.ProtocolType = *r.ProtocolType
		}
		for _, m := range r.Members {
			out.Members = append(out.Members, group.MemberMetadata{MemberID: m.MemberID, GroupInstanceID: groupString(m.InstanceID), Metadata: m.ProtocolMetadata})
		}
		return groupErrorOf(r.ErrorCode, nil)
	})
	return out, err
}

// Sync sends SyncGroup v5.
func (c *GroupClient) Sync(ctx context.Context, sr group.SyncRequest) (group.SyncResponse, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group, req.Generation, req.MemberID, req.InstanceID = sr.Group, sr.Generation, sr.MemberID, groupNullable(sr.GroupInstanceID)
	req.ProtocolType, req.Protocol = groupNullable(sr.ProtocolType), groupNullable(sr.Protocol)
	for id, a := range sr.Assignments {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, a
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	ctx, cancel := waitContext(ctx, 5*time.Minute)
	defer cancel()
	var out group.SyncResponse
	_, err := c.send(ctx, sr.Group, req, func(resp kmsg.Response) error {
		r := resp.(*kmsg.SyncGroupResponse)
		out.Assignment = r.MemberAssignment
		return groupErrorOf(r.ErrorCode, nil)
	})
	return out, err
}

// Heartbeat sends Heartbeat v4.
func (c *GroupClient) Heartbeat(ctx context.Context, hr group.HeartbeatRequest) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group, req.MemberID, req.Generation, req.InstanceID = hr.Group, hr.MemberID, hr.Generation, groupNullable(hr.GroupInstanceID)
	_, err := c.send(ctx, hr.Group, req, func(resp kmsg.Response) error {
		return groupErrorOf(resp.(*kmsg.HeartbeatResponse).ErrorCode, nil)
	})
	return err
}

// Leave sends LeaveGroup v4.
func (c *GroupClient) Leave(ctx context.Context, lr group.LeaveRequest) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 4
	req.Group = lr.Group
	for _, m := range lr.Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID, lm.InstanceID = m.MemberID, groupNullable(m.GroupInstanceID)
		req.Members = append(req.Members, lm)
	}
	_, err := c.send(ctx, lr.Group, req, func(resp kmsg.Response) error {
		r := resp.(*kmsg.LeaveGroupResponse)
		errs := []error{groupErrorOf(r.ErrorCode, nil)}
		for _, m := range r.Members {
			errs = append(errs, groupErrorOf(m.ErrorCode, nil))
		}
		return errors.Join(errs...)
	})
	return err
}

// topicIDs maps topic names to ids and back, asking the bootstrap broker's
// Metadata for names it does not know yet.
func (c *GroupClient) topicIDs(ctx context.Context, names []string, ids [][16]byte) error {
	c.mu.Lock()
	missing := false
	for _, n := range names {
		if _, ok := c.ids[n]; !ok {
			missing = true
		}
	}
	for _, id := range ids {
		if _, ok := c.names[id]; !ok {
			missing = true
		}
	}
	c.mu.Unlock()
	if !missing {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12 // all topics, with their ids
	resp, err := c.peers.request(ctx, c.bootstrap, req)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learn(resp.(*kmsg.MetadataResponse))
	return nil
}

// learn records what a Metadata response says of the topics. Called with
// c.mu held.
func (c *GroupClient) learn(resp *kmsg.MetadataResponse) {
	c.counts, c.countsAt = map[string]int32{}, time.Now()
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == errNone {
			c.ids[*t.Topic], c.names[t.TopicID] = t.TopicID, *t.Topic
			c.counts[*t.Topic] = int32(len(t.Partitions))
		}
	}
}

// PartitionCount reports how many partitions a topic has (-1: no such
// topic), from the cluster's Metadata at most a second old: what a classic
// group.ConsumerGroup's ConsumerGroupConfig.PartitionCount needs. -1 too
// when the bootstrap broker cannot be asked.
func (c *GroupClient) PartitionCount(topic string) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.countsAt) > time.Second {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.peers.request(ctx, c.bootstrap, req)
		cancel()
		if err != nil {
			return -1
		}
		c.learn(resp.(*kmsg.MetadataResponse))
	}
	if n, ok := c.counts[topic]; ok {
		return n
	}
	return -1
}

// ConsumerHeartbeat sends ConsumerGroupHeartbeat v1.
func (c *GroupClient) ConsumerHeartbeat(ctx context.Context, hr group.ConsumerHeartbeatRequest) (group.ConsumerHeartbeatResponse, error) {
	out := group.ConsumerHeartbeatResponse{MemberID: hr.MemberID, MemberEpoch: hr.MemberEpoch}
	var owned []string
	for t := range hr.Owned {
		owned = append(owned, t)
	}
	if err := c.topicIDs(ctx, owned, nil); err != nil {
		return out, err
	}
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = hr.Group, hr.MemberID, hr.MemberEpoch
	req.InstanceID, req.RackID, req.ServerAssignor = groupNullable(hr.InstanceID), groupNullable(hr.RackID), groupNullable(hr.ServerAssignor)
	req.RebalanceTimeoutMillis = -1
	if hr.RebalanceTimeout > 0 {
		req.RebalanceTimeoutMillis = int32(hr.RebalanceTimeout / time.Millisecond)
	}
	req.SubscribedTopicNames, req.SubscribedTopicRegex = hr.SubscribedTopics, hr.SubscribedRegex
	if hr.Owned != nil {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		c.mu.Lock()
		for t, ps := range hr.Owned {
			rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			rt.TopicID, rt.Partitions = c.ids[t], ps
			req.Topics = append(req.Topics, rt)
		}
		c.mu.Unlock()
	}
	var assigned *kmsg.ConsumerGroupHeartbeatResponseAssignment
	_, err := c.send(ctx, hr.Group, req, func(resp kmsg.Response) error {
		r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
		if r.MemberID != nil {
			out.MemberID = *r.MemberID
		}
		out.MemberEpoch, assigned = r.MemberEpoch, r.Assignment
		out.HeartbeatInterval = time.Duration(r.HeartbeatIntervalMillis) * time.Millisecond
		return groupErrorOf(r.ErrorCode, r.ErrorMessage)
	})
	if err != nil || assigned == nil {
		return out, err
	}
	var ids [][16]byte
	for _, t := range assigned.Topics {
		ids = append(ids, t.TopicID)
	}
	if err := c.topicIDs(ctx, nil, ids); err != nil {
		return out, err
	}
	out.Assignment = map[string][]int32{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range assigned.Topics {
		name, ok := c.names[t.TopicID]
		if !ok {
			return out, fmt.Errorf("group %q: assigned a topic id %x that Metadata does not name", hr.Group, t.TopicID)
		}
		out.Assignment[name] = t.Partitions
	}
	return out, nil
}

// CommitOffsets sends OffsetCommit v9.
func (c *GroupClient) CommitOffsets(ctx context.Context, cr group.CommitRequest) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group, req.Generation, req.MemberID, req.InstanceID = cr.Group, cr.Generation, cr.MemberID, groupNullable(cr.GroupInstanceID)
	byTopic := map[string][]kmsg.OffsetCommitRequestTopicPartition{}
	for tp, o := range cr.Offsets {
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = tp.Partition, o.Offset, o.LeaderEpoch
		if o.Metadata != "" {
			p.Metadata = &o.Metadata
		}
		byTopic[tp.Topic] = append(byTopic[tp.Topic], p)
	}
	for t, ps := range byTopic {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic, rt.Partitions = t, ps
		req.Topics = append(req.Topics, rt)
	}
	_, err := c.send(ctx, cr.Group, req, func(resp kmsg.Response) error {
		var errs []error
		for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
			for _, p := range t.Partitions {
				if err := groupErrorOf(p.ErrorCode, nil); err != nil {
					errs = append(errs, fmt.Errorf("%s-%d: %w", t.Topic, p.Partition, err))
				}
			}
		}
		return errors.Join(errs...)
	})
	return err
}

// FetchOffsets sends OffsetFetch v7.
func (c *GroupClient) FetchOffsets(ctx context.Context, g string, tps []group.TopicPartition) (map[group.TopicPartition]group.OffsetAndMetadata, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = g
	if tps != nil {
		byTopic := map[string][]int32{}
		for _, tp := range tps {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
		}
		for t, ps := range byTopic {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = t, ps
			req.Topics = append(req.Topics, rt)
		}
	}
	out := map[group.TopicPartition]group.OffsetAndMetadata{}
	_, err := c.send(ctx, g, req, func(resp kmsg.Response) error {
		r := resp.(*kmsg.OffsetFetchResponse)
		if err := groupErrorOf(r.ErrorCode, nil); err != nil {
			return err
		}
		var errs []error
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if err := groupErrorOf(p.ErrorCode, nil); err != nil {
					errs = append(errs, fmt.Errorf("%s-%d: %w", t.Topic, p.Partition, err))
					continue
				}
				if p.Offset < 0 {
					continue // never committed
				}
				out[group.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = group.OffsetAndMetadata{
					Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: groupString(p.Metadata)}
			}
		}
		return errors.Join(errs...)
	})
	return out, err
}
