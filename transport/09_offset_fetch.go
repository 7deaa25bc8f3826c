package transport

import (
	"cmp"
	"slices"

	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetFetch v0-v10, served by the broker's group coordinator. A partition
// without a committed offset answers offset -1, empty metadata and no error;
// so does every partition of a group that does not exist.
//
//   - v1 is v0 (Kafka's v0 read ZooKeeper; both read the coordinator here).
//   - v2 adds a top-level error code and null topics for "all committed".
//   - v3 adds throttle time; v5 the leader epoch (KIP-320); v6 is the first
//     flexible version.
//   - v7 adds RequireStable (KIP-447): a partition with offsets a
//     transaction committed and whose marker has not arrived yet answers
//     UNSTABLE_OFFSET_COMMIT (retriable; offset -1) instead of the offset
//     committed before, which the transaction may be about to replace.
//   - v8 fetches several groups at once (KIP-709).
//   - v9 adds a member id and epoch that only KIP-848 consumer groups check;
//     classic groups ignore them, as Kafka does.
//   - v10 names topics by id.
func init() { register(kmsg.OffsetFetch, 0, 10, offsetFetch) }

// offsetFetchTopic is one topic of an OffsetFetch request: name (or, v10+, id)
// and partitions.
type offsetFetchTopic struct {
	name       string
	id         [16]byte
	partitions []int32
}

// offsetFetchedTopic is one topic of an OffsetFetch answer.
type offsetFetchedTopic struct {
	name       string
	id         [16]byte
	partitions []kmsg.OffsetFetchResponseGroupTopicPartition
}

func offsetFetch(c *conn, req *request, body *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	var ids groupTopicIDs
	if req.version >= 10 {
		ids = loadGroupTopicIDs(c.s.b)
	}
	resp := kmsg.NewPtrOffsetFetchResponse()
	if req.version >= 8 {
		for _, g := range body.Groups {
			var topics []offsetFetchTopic
			if g.Topics != nil {
				topics = make([]offsetFetchTopic, 0, len(g.Topics))
				for _, t := range g.Topics {
					topics = append(topics, offsetFetchTopic{name: t.Topic, id: t.TopicID, partitions: t.Partitions})
				}
			}
			fetched, code := c.fetchGroupOffsets(g.Group, topics, req.version, ids, body.RequireStable)
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			for _, t := range fetched {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic, rt.TopicID, rt.Partitions = t.name, t.id, t.partitions
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}

	// v0-v7: one group. Null topics mean "all" from v2; before, the field
	// is not nullable.
	topics := make([]offsetFetchTopic, 0, len(body.Topics))
	for _, t := range body.Topics {
		topics = append(topics, offsetFetchTopic{name: t.Topic, partitions: t.Partitions})
	}
	if body.Topics == nil && req.version >= 2 {
		topics = nil
	}
	fetched, code := c.fetchGroupOffsets(body.Group, topics, req.version, ids, body.RequireStable && req.version >= 7)
	if req.version >= 2 {
		resp.ErrorCode = code
	}
	for _, t := range fetched {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.name
		for _, p := range t.partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
			if req.version < 2 && code != errNone {
				rp.ErrorCode = code // no top-level error code before v2
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// fetchGroupOffsets answers one group of an OffsetFetch: the requested
// topics, or with nil topics every committed one, and the group's error
// code. With requireStable a partition with pending transactional offsets
// answers UNSTABLE_OFFSET_COMMIT.
func (c *conn) fetchGroupOffsets(groupID string, topics []offsetFetchTopic, version int16, ids groupTopicIDs, requireStable bool) ([]offsetFetchedTopic, int16) {
	byID := version >= 10
	noOffset := func(p int32, code int16) kmsg.OffsetFetchResponseGroupTopicPartition {
		rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		rp.Partition, rp.Offset, rp.ErrorCode = p, -1, code
		rp.Metadata = new(string)
		return rp
	}
	// A group-level error: from v2 the response carries it alone; before,
	// each requested partition does (the caller sets it).
	failAll := func(code int16) ([]offsetFetchedTopic, int16) {
		if version >= 2 {
			return nil, code
		}
		var out []offsetFetchedTopic
		for _, t := range topics {
			ft := offsetFetchedTopic{name: t.name, id: t.id}
			for _, p := range t.partitions {
				ft.partitions = append(ft.partitions, noOffset(p, errNone))
			}
			out = append(out, ft)
		}
		return out, code
	}
	if groupID == "" {
		return failAll(errInvalidGroupID)
	}
	if !c.can(acl.OpDescribe, acl.ResourceGroup, groupID) {
		return failAll(errGroupAuthorizationFailed)
	}

	var want []group.TopicPartition // nil: all
	if topics != nil {
		want = []group.TopicPartition{}
		for _, t := range topics {
			name := t.name
			if byID {
				name = ids.byID[t.id]
			}
			for _, p := range t.partitions {
				want = append(want, group.TopicPartition{Topic: name, Partition: p})
			}
		}
	}
	offsets, err := c.s.b.Groups().FetchOffsets(groupID, want)
	if err != nil {
		return failAll(errorCode(err))
	}
	unstable := map[group.TopicPartition]bool{}
	if requireStable {
		tps, err := c.s.b.Groups().UnstableOffsets(groupID, want)
		if err != nil {
			return failAll(errorCode(err))
		}
		for _, tp := range tps {
			unstable[tp] = true
		}
	}
	answer := func(tp group.TopicPartition) kmsg.OffsetFetchResponseGroupTopicPartition {
		if unstable[tp] {
			return noOffset(tp.Partition, errUnstableOffsetCommit)
		}
		o, ok := offsets[tp]
		if !ok {
			return noOffset(tp.Partition, errNone)
		}
		rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = tp.Partition, o.Offset, o.LeaderEpoch
		rp.Metadata = &o.Metadata
		return rp
	}

	var out []offsetFetchedTopic
	if topics != nil {
		for _, t := range topics {
			ft := offsetFetchedTopic{name: t.name, id: t.id}
			name, known := t.name, true
			if byID {
				name, known = ids.byID[t.id]
			}
			for _, p := range t.partitions {
				if !known {
					ft.partitions = append(ft.partitions, noOffset(p, errUnknownTopicID))
					continue
				}
				if !c.can(acl.OpDescribe, acl.ResourceTopic, name) {
					ft.partitions = append(ft.partitions, noOffset(p, errTopicAuthorizationFailed))
					continue
				}
				ft.partitions = append(ft.partitions, answer(group.TopicPartition{Topic: name, Partition: p}))
			}
			out = append(out, ft)
		}
		return out, errNone
	}

	// All committed offsets, by topic and partition.
	tps := make([]group.TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b group.TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for _, tp := range tps {
		if !c.can(acl.OpDescribe, acl.ResourceTopic, tp.Topic) {
			continue // not disclosed
		}
		if len(out) == 0 || out[len(out)-1].name != tp.Topic {
			ft := offsetFetchedTopic{name: tp.Topic}
			if byID {
				id, ok := ids.byName[tp.Topic]
				if !ok {
					continue // a deleted topic has no id to answer with
				}
				ft.id = id
			}
			out = append(out, ft)
		}
		out[len(out)-1].partitions = append(out[len(out)-1].partitions, answer(tp))
	}
	return out, errNone
}
