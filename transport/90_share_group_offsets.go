package transport

import (
	"maps"
	"slices"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeShareGroupOffsets v0-v1, AlterShareGroupOffsets v0 and
// DeleteShareGroupOffsets v0 (KIP-932), served by the group coordinator:
// a share group's start offset in each partition (every record below it
// done), moved or forgotten by an administrator - only while the group has
// no members (NON_EMPTY_GROUP). v1 of the describe adds each partition's
// lag: the records from the start offset to the high watermark (an upper
// bound: some in between may be done already).
func init() {
	register(kmsg.DescribeShareGroupOffsets, 0, 1, describeShareGroupOffsets)
	register(kmsg.AlterShareGroupOffsets, 0, 0, alterShareGroupOffsets)
	register(kmsg.DeleteShareGroupOffsets, 0, 0, deleteShareGroupOffsets)
}

func describeShareGroupOffsets(c *conn, req *request, body *kmsg.DescribeShareGroupOffsetsRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrDescribeShareGroupOffsetsResponse()
	for _, g := range body.Groups {
		rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		rg.GroupID = g.GroupID
		if !c.can(acl.OpDescribe, acl.ResourceGroup, g.GroupID) {
			rg.ErrorCode = errGroupAuthorizationFailed
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		offsets := b.ShareGroupOffsets(g.GroupID)
		want := map[string][]int32{}
		if g.Topics == nil {
			for tp := range offsets {
				want[tp.Topic] = append(want[tp.Topic], tp.Partition)
			}
		} else {
			for _, t := range g.Topics {
				want[t.Topic] = append(want[t.Topic], t.Partitions...)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(want)) {
			rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			rt.Topic = name
			d, derr := b.DescribeTopic(name)
			if derr == nil {
				rt.TopicID = d.ID
			}
			ps := want[name]
			slices.Sort(ps)
			for _, p := range slices.Compact(ps) {
				rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				rp.Partition, rp.LeaderEpoch = p, -1
				off, ok := offsets[spool.TopicPartition{Topic: name, Partition: p}]
				switch {
				case !c.can(acl.OpDescribe, acl.ResourceTopic, name):
					rp.ErrorCode = errTopicAuthorizationFailed
				case derr != nil:
					rp.ErrorCode = errorCode(derr)
				case !ok:
					rp.StartOffset, rp.Lag = -1, -1 // never consumed by the group
				default:
					rp.StartOffset = off
					if int(p) < len(d.Partitions) {
						rp.LeaderEpoch = d.Partitions[p].LeaderEpoch
						rp.Lag = max(d.Partitions[p].HighWatermark-off, 0)
					}
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func alterShareGroupOffsets(c *conn, req *request, body *kmsg.AlterShareGroupOffsetsRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrAlterShareGroupOffsetsResponse()
	if !c.can(acl.OpRead, acl.ResourceGroup, body.GroupID) {
		resp.ErrorCode = errGroupAuthorizationFailed
		return resp, nil
	}
	offsets := map[spool.TopicPartition]int64{}
	for _, t := range body.Topics {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		if d, err := b.DescribeTopic(t.Topic); err == nil {
			rt.TopicID = d.ID
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !c.can(acl.OpRead, acl.ResourceTopic, t.Topic):
				rp.ErrorCode = errTopicAuthorizationFailed
			default:
				if err := b.CheckPartition(t.Topic, p.Partition); err != nil {
					rp.ErrorCode = errorCode(err)
				} else {
					offsets[spool.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.StartOffset
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	ctx, stop := c.shareWaitContext()
	defer stop()
	if err := b.AlterShareGroupOffsets(ctx, body.GroupID, offsets); err != nil {
		resp.ErrorCode = errorCode(err)
		msg := err.Error()
		resp.ErrorMessage = &msg
	}
	return resp, nil
}

func deleteShareGroupOffsets(c *conn, req *request, body *kmsg.DeleteShareGroupOffsetsRequest) (kmsg.Response, error) {
	b := c.s.b
	resp := kmsg.NewPtrDeleteShareGroupOffsetsResponse()
	if !c.can(acl.OpDelete, acl.ResourceGroup, body.GroupID) {
		resp.ErrorCode = errGroupAuthorizationFailed
		return resp, nil
	}
	var topics []string
	for _, t := range body.Topics {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic = t.Topic
		if d, err := b.DescribeTopic(t.Topic); err == nil {
			rt.TopicID = d.ID
			topics = append(topics, t.Topic)
		} else {
			rt.ErrorCode = errorCode(err)
		}
		if !c.can(acl.OpRead, acl.ResourceTopic, t.Topic) {
			rt.ErrorCode = errTopicAuthorizationFailed
			topics = slices.DeleteFunc(topics, func(s string) bool { return s == t.Topic })
		}
		resp.Topics = append(resp.Topics, rt)
	}
	ctx, stop := c.shareWaitContext()
	defer stop()
	if err := b.DeleteShareGroupOffsets(ctx, body.GroupID, topics); err != nil {
		resp.ErrorCode = errorCode(err)
		msg := err.Error()
		resp.ErrorMessage = &msg
	}
	return resp, nil
}
