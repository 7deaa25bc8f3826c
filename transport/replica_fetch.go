package transport

import (
	"errors"
	"time"

	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A follower on another broker copies a leader's log with Kafka's Fetch,
// sent with its broker id as ReplicaID, and OffsetForLeaderEpoch, also
// with its ReplicaID. On a cluster node those go to the node's replicas
// (replica.Node): the leader checks the follower's leader epoch (KIP-320),
// answers a follower whose log diverges with DivergingEpoch and no records
// (KIP-595's check, Fetch v12), records how far the follower has got (for
// the ISR and the high watermark) and reads up to its log end, not its
// high watermark.
//
// From v15 the follower names itself and its broker epoch in ReplicaState
// (KIP-903): the ISR change the leader proposes names the incarnation it
// saw fetching. Before v15 the leader takes the follower's current
// registration from its metadata instead. The
// record bytes are copied, not sent with sendfile: a follower fetch reads
// one partition, and the leader must check the follower's position first.

// isReplicaFetch reports whether a fetch comes from a follower that this
// node serves as one.
func (c *conn) isReplicaFetch(body *kmsg.FetchRequest, version int16) bool {
	return replicaID(body, version) >= 0 && c.s.b.ReplicaNode() != nil && c.s.b.Quorum() != nil
}

// replicaID is the id of the follower sending a fetch, -1 for a consumer.
func replicaID(body *kmsg.FetchRequest, version int16) int32 {
	if version >= 15 {
		return body.ReplicaState.ID
	}
	return body.ReplicaID
}

// serveReplicaFetch answers a follower's fetch. Only the last partition of
// a request may wait for records (a follower sends one at a time).
func (c *conn) serveReplicaFetch(req *request, body *kmsg.FetchRequest, unknown []bool) (responseWriter, error) {
	node := c.s.b.ReplicaNode()
	id := replicaID(body, req.version)
	var epoch int64 = -1
	if req.version >= 15 {
		epoch = body.ReplicaState.Epoch
	} else if bi, ok := c.s.b.Quorum().Image().Broker(id); ok {
		epoch = bi.Epoch
	}
	resp := body.ResponseKind().(*kmsg.FetchResponse)
	resp.SetVersion(req.version)
	total := 0
	for ti := range body.Topics {
		total += len(body.Topics[ti].Partitions)
	}
	budget := int(body.MaxBytes)
	if budget <= 0 {
		budget = fetchMaxBytes
	}
	n := 0
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		t := kmsg.NewFetchResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			n++
			out := kmsg.NewFetchResponseTopicPartition()
			out.Partition = rp.Partition
			out.PreferredReadReplica = -1
			out.RecordBatches = []byte{}
			if unknown[ti] {
				out.ErrorCode = errUnknownTopicID
				t.Partitions = append(t.Partitions, out)
				continue
			}
			wait := time.Duration(0)
			if n == total {
				wait = time.Duration(max(body.MaxWaitMillis, 0)) * time.Millisecond
			}
			fr, err := node.Fetch(c.ctx, &replica.FetchRequest{
				Topic: rt.Topic, Partition: rp.Partition, ReplicaID: id, BrokerEpoch: epoch,
				FetchOffset: rp.FetchOffset, CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch,
				MaxBytes: min(max(int(rp.PartitionMaxBytes), 1), max(budget, 1)), MaxWait: wait,
			})
			var oor *replica.OffsetOutOfRangeError
			switch {
			case errors.As(err, &oor):
				out.ErrorCode = errOffsetOutOfRange
				out.LogStartOffset, out.HighWatermark, out.LastStableOffset = oor.LogStartOffset, oor.LogEndOffset, oor.LogEndOffset
			case err != nil:
				if c.ctx.Err() != nil {
					return nil, c.ctx.Err()
				}
				out.ErrorCode = fetchErrorCode(err)
			default:
				out.HighWatermark, out.LastStableOffset, out.LogStartOffset = fr.HighWatermark, fr.LogEndOffset, fr.LogStartOffset
				if fr.Diverging != nil {
					out.DivergingEpoch.Epoch, out.DivergingEpoch.EndOffset = fr.Diverging.Epoch, fr.Diverging.EndOffset
				}
				out.RecordBatches = fr.Records
				budget -= len(fr.Records)
			}
			t.Partitions = append(t.Partitions, out)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return encoded(resp), nil
}

// replicaEndOffsetForEpoch answers a follower's OffsetForLeaderEpoch as
// the leader: no high-watermark bound, the leader's log end for its latest
// epoch.
func (c *conn) replicaEndOffsetForEpoch(topic string, rp *kmsg.OffsetForLeaderEpochRequestTopicPartition, out *kmsg.OffsetForLeaderEpochResponseTopicPartition, replicaID int32) {
	e, err := c.s.b.ReplicaNode().EndOffsetForEpoch(c.ctx, &replica.EpochRequest{Topic: topic, Partition: rp.Partition,
		ReplicaID: replicaID, CurrentLeaderEpoch: rp.CurrentLeaderEpoch, Epoch: rp.LeaderEpoch})
	if err != nil {
		out.ErrorCode = fetchErrorCode(err)
		return
	}
	out.LeaderEpoch, out.EndOffset = e.Epoch, e.EndOffset
}
