package transport

import (
	"context"
	"time"

	"github.com/spoolmq/spool/controller"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AlterPartitionReassignments v0-1 (KIP-455): each partition's target
// replicas, or null to cancel its reassignment. The partition's replicas
// become the target's followed by those it removes; the added replicas
// catch up and join the ISR, and then the reassignment completes (see
// package replica). Per partition: INVALID_REPLICA_ASSIGNMENT (empty,
// duplicated or unregistered brokers; a cancellation needing an unclean
// election the topic does not allow), NO_REASSIGNMENT_IN_PROGRESS,
// UNKNOWN_TOPIC_OR_PARTITION, v1's INVALID_REPLICATION_FACTOR when
// AllowReplicationFactorChange is false and the target changes it
// (KIP-860), or 0 once the change is committed. Any broker takes it: a
// node that is not the active controller sends it there.
func init() { register(kmsg.AlterPartitionAssignments, 0, 1, alterPartitionReassignments) }

func alterPartitionReassignments(c *conn, req *request, body *kmsg.AlterPartitionAssignmentsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	allowRF := req.version < 1 || body.AllowReplicationFactorChange
	resp.AllowReplicationFactorChange = allowRF
	var rs []controller.Reassignment
	for _, t := range body.Topics {
		for _, p := range t.Partitions {
			rs = append(rs, controller.Reassignment{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
		}
	}
	ctx, cancel := opContext(c, body.TimeoutMillis)
	defer cancel()
	errs, err := c.s.b.AlterPartitionReassignments(ctx, rs, allowRF)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorAndMessage(err)
		return resp, nil
	}
	i := 0
	for _, t := range body.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode, rp.ErrorMessage = errorAndMessage(errs[i])
			i++
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// opContext bounds an operation forwarded to the active controller by the
// request's timeout (TimeoutMillis; none if not positive): past it the
// client hears REQUEST_TIMED_OUT rather than waiting while no controller
// is elected. The operation may still be committed, as with Kafka.
func opContext(c *conn, timeoutMillis int32) (context.Context, context.CancelFunc) {
	if timeoutMillis <= 0 {
		return context.WithCancel(c.ctx)
	}
	return context.WithTimeout(c.ctx, time.Duration(timeoutMillis)*time.Millisecond)
}
