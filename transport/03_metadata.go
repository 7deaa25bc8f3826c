package transport

import (
	"errors"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metadata v0-13. This node is the only broker, the controller and the
// leader and only replica of every partition. Topic IDs (v10+) are spool's
// TopicIDs: random, stable across restarts, new for a topic deleted and
// created again. v13 only adds a top-level error code (KIP-1102), always 0.
// In a cluster whose brokers have several listeners, a partition led by a
// broker without the listener the client came in on is answered
// LISTENER_NOT_FOUND, as Kafka does (that broker is not among Brokers).
//
// A partition that could not be opened (spool.PartitionDescription.Offline)
// has no leader: LEADER_NOT_AVAILABLE, this node in its offline replicas;
// requests to it answer KAFKA_STORAGE_ERROR.
func init() { register(kmsg.Metadata, 0, 13, metadata) }

func metadata(c *conn, req *request, body *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrMetadataResponse()
	b := c.s.b
	resp.Brokers, resp.ControllerID = c.s.brokers(c.ln)
	clusterID := c.s.ClusterID()
	resp.ClusterID = &clusterID

	defer func() {
		if req.version >= 8 && req.version <= 10 && body.IncludeClusterAuthorizedOperations {
			resp.AuthorizedOperations = c.authorizedOps(acl.ResourceCluster, acl.ClusterName, clusterOps)
		}
		if req.version >= 8 && body.IncludeTopicAuthorizedOperations {
			for i := range resp.Topics {
				if t := &resp.Topics[i]; t.ErrorCode == errNone && t.Topic != nil {
					t.AuthorizedOperations = c.authorizedOps(acl.ResourceTopic, *t.Topic, topicOps)
				}
			}
		}
	}()

	// v0: an empty list means every topic; v1+: a null one does.
	if body.Topics == nil || req.version == 0 && len(body.Topics) == 0 {
		for _, name := range b.Topics() {
			if !c.can(acl.OpDescribe, acl.ResourceTopic, name) {
				continue // as if it did not exist
			}
			if d, err := b.DescribeTopic(name); err == nil { // else deleted meanwhile
				resp.Topics = append(resp.Topics, c.topicMetadata(d))
			}
		}
		return resp, nil
	}
	autoCreate := b.AutoCreateTopics() && (req.version < 4 || body.AllowAutoTopicCreation)
	seenNames, seenIDs := map[string]bool{}, map[[16]byte]bool{}
	for _, rt := range body.Topics {
		switch {
		case rt.Topic != nil:
			if seenNames[*rt.Topic] {
				continue
			}
			seenNames[*rt.Topic] = true
			resp.Topics = append(resp.Topics, c.metadataByName(*rt.Topic, autoCreate))
		case rt.TopicID != [16]byte{} && req.version >= 12:
			if seenIDs[rt.TopicID] {
				continue
			}
			seenIDs[rt.TopicID] = true
			if d, ok := c.s.topicByID(rt.TopicID); ok {
				if !c.can(acl.OpDescribe, acl.ResourceTopic, d.Name) {
					t := kmsg.NewMetadataResponseTopic()
					t.ErrorCode, t.TopicID = errTopicAuthorizationFailed, rt.TopicID
					resp.Topics = append(resp.Topics, t)
					continue
				}
				resp.Topics = append(resp.Topics, c.topicMetadata(d))
				continue
			}
			t := kmsg.NewMetadataResponseTopic()
			t.ErrorCode, t.TopicID = errUnknownTopicID, rt.TopicID
			resp.Topics = append(resp.Topics, t)
		default:
			// Kafka takes topic IDs from v12 ("Topic IDs are not supported
			// in requests for version 10"); an entry needs a name or an ID.
			t := kmsg.NewMetadataResponseTopic()
			t.ErrorCode, t.TopicID = errInvalidRequest, rt.TopicID
			resp.Topics = append(resp.Topics, t)
		}
	}
	return resp, nil
}

// metadataByName describes a requested topic, creating it first if it does
// not exist and auto-creation is on. A created topic is complete when
// CreateTopic returns, so its partitions already have a leader: kafka-go
// fails a write on LEADER_NOT_AVAILABLE rather than retrying.
func (c *conn) metadataByName(name string, autoCreate bool) kmsg.MetadataResponseTopic {
	b := c.s.b
	if !c.can(acl.OpDescribe, acl.ResourceTopic, name) {
		// Whether it exists is not disclosed.
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.ErrorCode = &name, errTopicAuthorizationFailed
		return t
	}
	d, err := b.DescribeTopic(name)
	if errors.Is(err, spool.ErrUnknownTopic) {
		if verr := spool.ValidTopicName(name); verr != nil {
			err = verr
		} else if autoCreate && name != spool.OffsetsTopic && !c.canCreateTopic(name) {
			t := kmsg.NewMetadataResponseTopic()
			t.Topic, t.ErrorCode = &name, errTopicAuthorizationFailed
			return t
		} else if autoCreate && name != spool.OffsetsTopic {
			if cerr := b.CreateTopic(c.ctx, name, spool.TopicConfig{}); cerr != nil && !errors.Is(cerr, spool.ErrTopicExists) {
				err = cerr
			} else {
				d, err = b.DescribeTopic(name)
			}
		}
	}
	if err != nil {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.ErrorCode = &name, errorCode(err)
		return t
	}
	return c.topicMetadata(d)
}

// errListenerNotFound is LISTENER_NOT_FOUND: the partition's leader has
// no listener of the name the client came in on.
const errListenerNotFound int16 = 72

func (c *conn) topicMetadata(d spool.TopicDescription) kmsg.MetadataResponseTopic {
	node := c.s.opts.NodeID
	info, clustered := c.s.b.Cluster()
	unreachable := map[int32]bool{} // live brokers without the client's listener
	if clustered && c.ln.Name != controllerListenerName {
		for _, br := range info.Brokers {
			if _, _, ok := br.Endpoint(c.ln.Name); !ok {
				unreachable[br.ID] = true
			}
		}
	}
	t := kmsg.NewMetadataResponseTopic()
	name := d.Name
	t.Topic, t.TopicID, t.IsInternal = &name, d.ID, d.Internal
	t.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(d.Partitions))
	for _, p := range d.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.LeaderEpoch = p.Partition, p.LeaderEpoch
		switch {
		case clustered:
			mp.Leader, mp.Replicas, mp.ISR, mp.OfflineReplicas = p.Leader, p.Replicas, p.ISR, p.OfflineReplicas
			switch {
			case p.Leader < 0:
				mp.ErrorCode = errLeaderNotAvailable
			case unreachable[p.Leader]:
				mp.ErrorCode = errListenerNotFound
			}
		case p.Offline != nil:
			// The only replica is on a failed log: no leader, as Kafka
			// reports a partition whose every replica is offline.
			mp.ErrorCode, mp.Leader = errLeaderNotAvailable, -1
			mp.Replicas, mp.ISR, mp.OfflineReplicas = []int32{node}, []int32{}, []int32{node}
		default:
			mp.Leader, mp.Replicas, mp.ISR, mp.OfflineReplicas = node, []int32{node}, []int32{node}, []int32{}
		}
		t.Partitions = append(t.Partitions, mp)
	}
	return t
}

// brokers are the brokers clients are told of, and the controller id they
// see: this node alone on a standalone broker, at the address of the
// listener ln the client came in on; in a cluster every live broker with a
// listener of ln's name (Kafka's rule), at its endpoint there, and the
// active controller (any live broker while there is none: clients
// send it only administration, which every broker forwards).
func (s *Server) brokers(ln *listener) ([]kmsg.MetadataResponseBroker, int32) {
	info, ok := s.b.Cluster()
	if !ok {
		host, port := s.advertised()
		if ln != nil && ln.addr != nil {
			host, port = ln.advertised()
		}
		return []kmsg.MetadataResponseBroker{{NodeID: s.opts.NodeID, Host: host, Port: port}}, s.opts.NodeID
	}
	out := make([]kmsg.MetadataResponseBroker, 0, len(info.Brokers))
	ctrl := int32(-1)
	for _, br := range info.Brokers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = br.ID, br.Host, br.Port
		if ln != nil && ln.Name != controllerListenerName {
			// The broker's endpoint on the client's listener; a broker
			// without that listener is not one this client can reach.
			var ok bool
			if mb.Host, mb.Port, ok = br.Endpoint(ln.Name); !ok {
				continue
			}
		}
		if br.Rack != "" {
			rack := br.Rack
			mb.Rack = &rack
		}
		out = append(out, mb)
		if br.ID == info.Controller || ctrl < 0 {
			ctrl = br.ID
		}
	}
	return out, ctrl
}

// topicByID finds a topic by its ID.
func (s *Server) topicByID(id [16]byte) (spool.TopicDescription, bool) {
	name, ok := s.b.TopicName(spool.TopicID(id))
	if !ok {
		return spool.TopicDescription{}, false
	}
	d, err := s.b.DescribeTopic(name)
	return d, err == nil
}
