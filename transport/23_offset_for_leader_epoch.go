package transport

import (
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/partition"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch v0 to v4 (KIP-101, KIP-279; v2 adds
// CurrentLeaderEpoch for KIP-320 fencing, v3 the ReplicaID of KIP-392, v4
// is flexible). Consumers (kgo among them) use it to check, after a leader
// change or when resuming from a committed offset with its epoch, that the
// log they read was not truncated under them.
func init() { register(kmsg.OffsetForLeaderEpoch, 0, 4, offsetForLeaderEpoch) }

func offsetForLeaderEpoch(c *conn, req *request, body *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = make([]kmsg.OffsetForLeaderEpochResponseTopic, len(body.Topics))
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		t := &resp.Topics[ti]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(rt.Partitions))
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			out := &t.Partitions[pi]
			out.Default()
			out.Partition = rp.Partition
			out.LeaderEpoch, out.EndOffset = -1, -1
			if !c.canCluster(acl.OpClusterAction) && !c.can(acl.OpDescribe, acl.ResourceTopic, rt.Topic) {
				out.ErrorCode = errTopicAuthorizationFailed
				continue
			}
			if req.version >= 3 && body.ReplicaID >= 0 && c.s.b.ReplicaNode() != nil && c.s.b.Quorum() != nil {
				c.replicaEndOffsetForEpoch(rt.Topic, rp, out, body.ReplicaID)
				continue
			}
			p, err := c.s.b.LeaderPartition(rt.Topic, rp.Partition, -1)
			if err != nil {
				out.ErrorCode = fetchErrorCode(err)
				continue
			}
			if req.version >= 2 {
				if out.ErrorCode = checkLeaderEpoch(p, rp.CurrentLeaderEpoch); out.ErrorCode != errNone {
					continue
				}
			}
			epoch, end := endOffsetForEpoch(p, rp.LeaderEpoch)
			if body.ReplicaID == -1 && end > p.HighWatermark() {
				// KIP-392: a consumer is told no more than it may read.
				end = p.HighWatermark()
			}
			out.LeaderEpoch, out.EndOffset = epoch, end
		}
	}
	return resp, nil
}

// checkLeaderEpoch checks the leader epoch a client believes current
// against the partition's (KIP-320): -1 skips the check; an older epoch
// is FENCED_LEADER_EPOCH (the client's metadata is stale), a newer one
// UNKNOWN_LEADER_EPOCH (the broker's is).
func checkLeaderEpoch(p *partition.Partition, current int32) int16 {
	switch leader := p.LeaderEpoch(); {
	case current < 0:
		return errNone
	case current < leader:
		return errFencedLeaderEpoch
	case current > leader:
		return errUnknownLeaderEpoch
	}
	return errNone
}

// endOffsetForEpoch is Kafka's answer to "where did epoch end?"
// (LeaderEpochFileCache.endOffsetFor): the largest known epoch <= epoch and
// the offset where it ended - the start of the next epoch, or the log end
// offset for the latest. An epoch older than every known one gets itself
// and the first known start offset (the log was trimmed; read from there).
// An undefined (negative) epoch, an epoch newer than the latest, or an
// empty cache get UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET (-1, -1).
func endOffsetForEpoch(p *partition.Partition, epoch int32) (int32, int64) {
	cache := p.Epochs()
	latest := cache.Latest()
	if epoch < 0 || latest < 0 || epoch > latest {
		return -1, -1
	}
	return cache.EndOffsetFor(epoch, p.EndOffset())
}
