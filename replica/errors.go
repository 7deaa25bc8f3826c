package replica

import (
	"errors"
	"fmt"

	"github.com/spoolmq/spool/log"
)

// Errors returned by the replica package, tested with errors.Is. Package
// transport maps them to Kafka's error codes (named in each comment).
var (
	// ErrNotLeader means this broker does not lead the partition (or no
	// longer does): refresh metadata and retry at the leader
	// (NOT_LEADER_OR_FOLLOWER).
	ErrNotLeader = errors.New("replica: not the partition leader")
	// ErrLeaderNotAvailable means the partition has no leader right now,
	// for example while its whole ISR is down and unclean election is off
	// (LEADER_NOT_AVAILABLE).
	ErrLeaderNotAvailable = errors.New("replica: partition has no leader")
	// ErrFencedLeaderEpoch means a request carried a leader epoch older
	// than the replica's: the sender acts on stale metadata (KIP-320,
	// FENCED_LEADER_EPOCH).
	ErrFencedLeaderEpoch = errors.New("replica: leader epoch is stale")
	// ErrUnknownLeaderEpoch means a request carried a leader epoch newer
	// than the replica knows yet (UNKNOWN_LEADER_EPOCH); retry shortly.
	ErrUnknownLeaderEpoch = errors.New("replica: leader epoch is newer than this replica knows")
	// ErrNotEnoughReplicas refuses an acks=all produce before writing
	// anything: the ISR is smaller than MinInSyncReplicas
	// (NOT_ENOUGH_REPLICAS).
	ErrNotEnoughReplicas = errors.New("replica: fewer in-sync replicas than MinInSyncReplicas")
	// ErrNotEnoughReplicasAfterAppend fails an acks=all produce that was
	// written while the ISR then fell below MinInSyncReplicas and stayed
	// there until the request timed out. The records may still become
	// committed later: the outcome is unknown, as with any timeout
	// (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
	ErrNotEnoughReplicasAfterAppend = errors.New("replica: written, but the ISR fell below MinInSyncReplicas before the records were committed")
	// ErrTimedOut fails an acks=all produce whose records were written but
	// not committed within its timeout; they may still be committed later
	// (REQUEST_TIMED_OUT).
	ErrTimedOut = errors.New("replica: timed out waiting for the in-sync replicas")
	// ErrStaleState refuses a change to a partition's leader or ISR made
	// against an older partition epoch or leader epoch than the
	// controller's (KIP-497 AlterPartition, INVALID_UPDATE_VERSION /
	// FENCED_LEADER_EPOCH).
	ErrStaleState = errors.New("replica: partition state is stale")
	// ErrIneligibleReplica refuses to add a replica to the ISR whose broker
	// restarted since the leader last heard from it (KIP-903,
	// INELIGIBLE_REPLICA).
	ErrIneligibleReplica = errors.New("replica: replica is not eligible for the ISR")
	// ErrUnknownPartition means this broker holds no replica of the
	// partition (UNKNOWN_TOPIC_OR_PARTITION).
	ErrUnknownPartition = errors.New("replica: unknown partition")
	// ErrUnreachable means a link to another broker failed: the broker is
	// down or cut off. Callers retry.
	ErrUnreachable = errors.New("replica: broker unreachable")
	// ErrClosed means the replica (or node) was closed.
	ErrClosed = errors.New("replica: closed")
	// ErrNoIntactReplica refuses a leader's resignation over a damaged
	// batch in its log: no other live in-sync replica holds the batch to
	// take over with (DecideResignation). The leader keeps the partition
	// and keeps refusing to serve the damaged batch. No Kafka code: only
	// brokers see it.
	ErrNoIntactReplica = errors.New("replica: no other in-sync replica holds the damaged batch")
	// ErrInvalidConfig reports a bad configuration or request argument.
	ErrInvalidConfig = errors.New("replica: invalid configuration")
)

// Errors about topics, from a Controller.
var (
	// ErrTopicExists refuses to create a topic that exists
	// (TOPIC_ALREADY_EXISTS).
	ErrTopicExists = errors.New("replica: topic already exists")
	// ErrUnknownTopic means the controller has no such topic
	// (UNKNOWN_TOPIC_OR_PARTITION).
	ErrUnknownTopic = errors.New("replica: unknown topic")
	// ErrNotEnoughBrokers refuses a replication factor larger than the
	// live brokers (INVALID_REPLICATION_FACTOR).
	ErrNotEnoughBrokers = errors.New("replica: not enough live brokers for the replication factor")
)

// Errors about reassignments and leader elections an operator asked for
// (KIP-455 AlterPartitionReassignments, KIP-460 ElectLeaders).
var (
	// ErrInvalidReplicaAssignment refuses a reassignment's target: empty,
	// naming a broker twice or one that is not registered, or a
	// cancellation that would need an unclean election the topic does not
	// allow (INVALID_REPLICA_ASSIGNMENT).
	ErrInvalidReplicaAssignment = errors.New("replica: invalid replica assignment")
	// ErrReplicationFactorChange refuses a reassignment that changes the
	// partition's replication factor when the request does not allow it
	// (KIP-860, INVALID_REPLICATION_FACTOR).
	ErrReplicationFactorChange = errors.New("replica: the reassignment would change the replication factor")
	// ErrNoReassignmentInProgress refuses to cancel a reassignment of a
	// partition that has none (NO_REASSIGNMENT_IN_PROGRESS).
	ErrNoReassignmentInProgress = errors.New("replica: no reassignment in progress")
	// ErrElectionNotNeeded answers an election for a partition already led
	// as asked: by its preferred replica, or (unclean) by anyone
	// (ELECTION_NOT_NEEDED).
	ErrElectionNotNeeded = errors.New("replica: leader election not needed")
	// ErrPreferredLeaderNotAvailable answers a preferred election whose
	// preferred replica is not an eligible ISR member
	// (PREFERRED_LEADER_NOT_AVAILABLE).
	ErrPreferredLeaderNotAvailable = errors.New("replica: the preferred leader is not available")
	// ErrEligibleLeadersNotAvailable answers an unclean election that
	// found no eligible replica at all (ELIGIBLE_LEADERS_NOT_AVAILABLE).
	ErrEligibleLeadersNotAvailable = errors.New("replica: no eligible leader is available")
	// ErrNewLeaderElected answers a leader's ISR change that was committed
	// and completed a reassignment which moved the leadership away from it
	// (NEW_LEADER_ELECTED): the change took effect; the leader waits for
	// the new state.
	ErrNewLeaderElected = errors.New("replica: the ISR change was committed and a new leader elected")
)

// OffsetOutOfRangeError is a leader's answer to a follower's fetch at an
// offset its log does not hold (OFFSET_OUT_OF_RANGE), with the range it
// does hold. errors.Is(err, log.ErrOffsetOutOfRange) is true of it. A
// follower below LogStartOffset empties its log and starts again there
// (partition.Partition.StartAt); one past LogEndOffset truncates again by
// leader epoch.
type OffsetOutOfRangeError struct {
	Offset         int64 // the fetch offset
	LogStartOffset int64 // the leader's log start offset
	LogEndOffset   int64 // the leader's log end (its committed offset)
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("%v: fetch at %d, leader holds [%d, %d)", log.ErrOffsetOutOfRange, e.Offset, e.LogStartOffset, e.LogEndOffset)
}

// Unwrap returns log.ErrOffsetOutOfRange.
func (e *OffsetOutOfRangeError) Unwrap() error { return log.ErrOffsetOutOfRange }

// NotLeaderError is ErrNotLeader with what the refusing broker knows of the
// partition's leader, so that a client can go there at once (KIP-951's
// CurrentLeader). errors.Is(err, ErrNotLeader) is true of it.
type NotLeaderError struct {
	Topic     string
	Partition int32
	// Broker is the broker that refused.
	Broker int32
	// Leader and LeaderEpoch are the leader it knows of (-1: none).
	Leader      int32
	LeaderEpoch int32
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("%v: %s-%d on broker %d (leader %d, epoch %d)", ErrNotLeader, e.Topic, e.Partition, e.Broker, e.Leader, e.LeaderEpoch)
}

// Unwrap returns ErrNotLeader.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }
