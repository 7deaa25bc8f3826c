package transport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spoolmq/spool"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics v0-7. One node holds every partition, so the replication
// factor is 1 (or -1, the default; v4+) and a manual replica assignment
// may only name this node, one replica per partition. Settings are the
// topic settings of DescribeConfigs; an unknown one is INVALID_CONFIG. v1
// adds ValidateOnly and error messages, v5 returns the topic's partitions,
// replication factor and settings, v7 its ID. Creation is synchronous: the
// timeout is not needed. A creation the disk cannot take (a full one)
// changes nothing and answers KAFKA_STORAGE_ERROR with the reason, as Kafka
// answers for a failed log directory; so does auto-creation by Metadata
// and Produce.
func init() { register(kmsg.CreateTopics, 0, 7, createTopics) }

func createTopics(c *conn, req *request, body *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrCreateTopicsResponse()
	count := map[string]int{}
	for _, t := range body.Topics {
		count[t.Topic]++
	}
	for _, t := range body.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		var err error
		if count[t.Topic] > 1 {
			err = &apiError{errInvalidRequest, fmt.Sprintf("Create topics request contains multiple entries for topic %s", t.Topic)}
		} else if !c.canCreateTopic(t.Topic) {
			err = &apiError{errTopicAuthorizationFailed, "Authorization failed."}
		} else if !body.ValidateOnly && c.createMutations(t) > 0 && !c.s.topicExists(t.Topic) {
			if err = c.mutationQuota(req, c.createMutations(t), req.version >= 6, resp); err == nil {
				err = c.createTopic(&rt, t, body.ValidateOnly, req.version)
			}
		} else {
			err = c.createTopic(&rt, t, body.ValidateOnly, req.version)
		}
		if err != nil {
			rt = kmsg.NewCreateTopicsResponseTopic()
			rt.Topic = t.Topic
			rt.ErrorCode, rt.ErrorMessage = errorAndMessage(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// createTopic creates (or with validateOnly checks) one topic and fills in
// what v5+ reports of it.
func (c *conn) createTopic(rt *kmsg.CreateTopicsResponseTopic, t kmsg.CreateTopicsRequestTopic, validateOnly bool, version int16) error {
	b := c.s.b
	node := c.s.opts.NodeID
	_, clustered := b.Cluster()
	if err := spool.ValidTopicName(t.Topic); err != nil {
		return err
	}
	existing := b.Topics()
	for _, name := range existing {
		if name == t.Topic {
			return topicExists(t.Topic)
		}
	}
	// Kafka refuses names that differ only in '.' and '_': its metric
	// names cannot tell them apart.
	for _, name := range existing {
		if collides(name, t.Topic) {
			return &apiError{errInvalidTopicException, fmt.Sprintf("Topic '%s' collides with existing topic: %s", t.Topic, name)}
		}
	}

	partitions := t.NumPartitions
	switch {
	case len(t.ReplicaAssignment) > 0:
		if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
			return &apiError{errInvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."}
		}
		seen := make([]bool, len(t.ReplicaAssignment))
		for _, a := range t.ReplicaAssignment {
			if a.Partition < 0 || int(a.Partition) >= len(seen) || seen[a.Partition] {
				return &apiError{errInvalidReplicaAssignment, "Partitions should be consecutive, starting at 0, each assigned once"}
			}
			seen[a.Partition] = true
			if clustered {
				return &apiError{errInvalidReplicaAssignment, "spool places a topic's replicas itself: give a partition count and a replication factor"}
			}
			if len(a.Replicas) != 1 || a.Replicas[0] != node {
				return &apiError{errInvalidReplicaAssignment, fmt.Sprintf("Partition %d: replicas %v; this cluster has one broker, %d", a.Partition, a.Replicas, node)}
			}
		}
		partitions = int32(len(t.ReplicaAssignment))
	case t.NumPartitions == -1:
		partitions = 0 // the broker's default
	case t.NumPartitions <= 0:
		return &apiError{errInvalidPartitions, "Number of partitions was set to an invalid non-positive value."}
	}
	rf := int16(1)
	if len(t.ReplicaAssignment) == 0 {
		brokers := 1
		if info, ok := b.Cluster(); ok {
			brokers = len(info.Brokers)
		}
		switch rf = t.ReplicationFactor; {
		case rf == 0 || rf < -1:
			return &apiError{errInvalidReplicationFactor, "Replication factor must be larger than 0, or -1 to use the default value."}
		case rf == -1:
			rf = int16(max(b.TopicDefaults().ReplicationFactor, 1))
		}
		if int(rf) > brokers {
			return &apiError{errInvalidReplicationFactor, fmt.Sprintf("Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.", rf, rf, brokers)}
		}
	}

	entries := make([]configEntry, len(t.Configs))
	for i, e := range t.Configs {
		if e.Value == nil {
			return invalidConfig("Null value not supported for topic configs: %s", e.Name)
		}
		entries[i] = configEntry{e.Name, e.Value}
	}
	defaults := b.TopicDefaults()
	own, err := topicConfigFrom(entries, defaults)
	if err != nil {
		return err
	}
	own.Partitions = partitions
	if clustered {
		own.ReplicationFactor = int(rf)
	}
	if err := b.CheckTopicConfig(own); err != nil {
		return err
	}
	if !validateOnly {
		if err := b.CreateTopic(c.ctx, t.Topic, own); err != nil {
			if errors.Is(err, spool.ErrTopicExists) {
				return topicExists(t.Topic)
			}
			return err
		}
	}
	if version < 5 {
		return nil
	}
	rt.NumPartitions, rt.ReplicationFactor = partitions, rf
	if partitions == 0 {
		rt.NumPartitions = defaults.Partitions
	}
	if !validateOnly {
		if d, err := b.DescribeTopic(t.Topic); err == nil {
			rt.TopicID = d.ID
		}
	}
	own.Partitions, own.ReplicationFactor = 0, 0
	for _, v := range topicViews(own, defaults, b.Options().Topic) {
		value := v.value
		rt.Configs = append(rt.Configs, kmsg.CreateTopicsResponseTopicConfig{
			Name: v.name, Value: &value, ReadOnly: v.readOnly, Source: int8(v.source),
		})
	}
	return nil
}

func topicExists(name string) error {
	return &apiError{errTopicAlreadyExists, fmt.Sprintf("Topic '%s' already exists.", name)}
}

// collides reports whether two different names are the same once '.' is
// read as '_'.
func collides(a, b string) bool {
	return a != b && strings.ReplaceAll(a, ".", "_") == strings.ReplaceAll(b, ".", "_")
}

// createMutations is the partitions a CreateTopics topic creates, for
// controller_mutation_rate: its count, or its assignment's, or one for the
// broker's default.
func (c *conn) createMutations(t kmsg.CreateTopicsRequestTopic) int {
	if t.NumPartitions > 0 {
		return int(t.NumPartitions)
	}
	return max(len(t.ReplicaAssignment), 1)
}

// topicExists reports whether a topic exists: creating it again mutates
// nothing.
func (s *Server) topicExists(name string) bool {
	_, err := s.b.DescribeTopic(name)
	return err == nil
}
