package transport

import (
	"errors"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit v0-v10, served by the broker's group coordinator.
//
//   - v0 has no generation or member id: a commit from outside the group
//     protocol, allowed while the group has no members.
//   - v1 adds the generation, member id and a per-partition commit
//     timestamp; v2-v4 replace the timestamp by a retention time. Both are
//     ignored: offsets live for OffsetsRetention after the group empties, as
//     from v5 (KIP-211).
//   - v3 adds throttle time; v6 the leader epoch (KIP-320).
//   - v7 adds group.instance.id (KIP-345); v8 is the first flexible version.
//   - v9 is v8 for classic groups, except that a generation of a group that
//     does not exist is GROUP_ID_NOT_FOUND rather than ILLEGAL_GENERATION;
//     for a KIP-848 consumer group the generation is the member epoch, and
//     a stale one STALE_MEMBER_EPOCH (ILLEGAL_GENERATION before v9).
//   - v10 names topics by id.
//
// As in Kafka, partitions of unknown topics are refused first
// (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID) and the rest go to the
// coordinator, whose refusal of the committer applies to all of them.
func init() { register(kmsg.OffsetCommit, 0, 10, offsetCommit) }

func offsetCommit(c *conn, req *request, body *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	b := c.s.b
	var ids groupTopicIDs
	if req.version >= 10 {
		ids = loadGroupTopicIDs(b)
	}
	cr := group.CommitRequest{
		Group:           body.Group,
		MemberID:        body.MemberID,
		GroupInstanceID: groupString(body.InstanceID),
		Generation:      body.Generation,
		Offsets:         make(map[group.TopicPartition]group.OffsetAndMetadata),
	}
	// committed points at the response partitions that went to the
	// coordinator.
	type slot struct {
		t, p int
		tp   group.TopicPartition
	}
	var committed []slot

	resp := kmsg.NewPtrOffsetCommitResponse()
	for ti, t := range body.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		name, topicCode := t.Topic, errNone
		if req.version >= 10 {
			var ok bool
			if name, ok = ids.byID[t.TopicID]; !ok {
				topicCode = errUnknownTopicID
			}
		}
		switch {
		case !c.can(acl.OpRead, acl.ResourceGroup, body.Group):
			topicCode = errGroupAuthorizationFailed
		case topicCode == errNone && !c.can(acl.OpRead, acl.ResourceTopic, name):
			topicCode = errTopicAuthorizationFailed
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, topicCode
			if rp.ErrorCode == errNone {
				if err := b.CheckPartition(name, p.Partition); err != nil {
					rp.ErrorCode = errorCode(err)
				}
			}
			if rp.ErrorCode == errNone {
				tp := group.TopicPartition{Topic: name, Partition: p.Partition}
				cr.Offsets[tp] = group.OffsetAndMetadata{
					Offset:      p.Offset,
					LeaderEpoch: p.LeaderEpoch, // -1 before v6
					Metadata:    groupString(p.Metadata),
				}
				committed = append(committed, slot{ti, len(rt.Partitions), tp})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(committed) == 0 {
		return resp, nil
	}

	var results map[group.TopicPartition]error
	requestCode := errNone
	if body.Group == "" {
		requestCode = errInvalidGroupID
	} else {
		var err error
		results, err = b.Groups().CommitOffsets(cr)
		requestCode = errorCode(err)
		if req.version >= 9 && errors.Is(err, group.ErrIllegalGeneration) && groupMissing(b, body.Group) {
			requestCode = errGroupIDNotFound
		}
		if req.version < 9 && errors.Is(err, group.ErrStaleMemberEpoch) {
			// A KIP-848 member's epoch, sent by a client that cannot
			// read STALE_MEMBER_EPOCH.
			requestCode = errIllegalGeneration
		}
	}
	for _, s := range committed {
		code := requestCode
		if code == errNone {
			code = errorCode(results[s.tp])
		}
		resp.Topics[s.t].Partitions[s.p].ErrorCode = code
	}
	return resp, nil
}

// groupMissing reports whether the coordinator has no such group.
func groupMissing(b *spool.Broker, id string) bool {
	_, err := b.Groups().Describe(id)
	return errors.Is(err, group.ErrGroupIDNotFound)
}

// groupTopicIDs maps topic ids to names and back, for the versions of
// OffsetCommit and OffsetFetch that name topics by id (v10+).
type groupTopicIDs struct {
	byID   map[[16]byte]string
	byName map[string][16]byte
}

func loadGroupTopicIDs(b *spool.Broker) groupTopicIDs {
	names := b.Topics()
	ids := groupTopicIDs{byID: make(map[[16]byte]string, len(names)), byName: make(map[string][16]byte, len(names))}
	for _, name := range names {
		d, err := b.DescribeTopic(name)
		if err != nil || d.ID == (spool.TopicID{}) {
			continue // deleted meanwhile
		}
		ids.byID[d.ID] = name
		ids.byName[name] = d.ID
	}
	return ids
}
