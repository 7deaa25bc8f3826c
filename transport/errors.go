package transport

import (
	"context"
	"errors"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
)

// Kafka error codes this package answers with (apache/kafka Errors.java).
const (
	errNone                               int16 = 0
	errUnknownServerError                 int16 = -1
	errOffsetOutOfRange                   int16 = 1
	errCorruptMessage                     int16 = 2
	errUnknownTopicOrPartition            int16 = 3
	errInvalidFetchSize                   int16 = 4
	errLeaderNotAvailable                 int16 = 5
	errNotLeaderOrFollower                int16 = 6
	errRequestTimedOut                    int16 = 7
	errMessageTooLarge                    int16 = 10
	errOffsetMetadataTooLarge             int16 = 12
	errCoordinatorLoadInProgress          int16 = 14
	errCoordinatorNotAvailable            int16 = 15
	errNotCoordinator                     int16 = 16
	errInvalidTopicException              int16 = 17
	errRecordListTooLarge                 int16 = 18
	errNotEnoughReplicas                  int16 = 19
	errInvalidRequiredAcks                int16 = 21
	errIllegalGeneration                  int16 = 22
	errInconsistentGroupProtocol          int16 = 23
	errInvalidGroupID                     int16 = 24
	errUnknownMemberID                    int16 = 25
	errInvalidSessionTimeout              int16 = 26
	errRebalanceInProgress                int16 = 27
	errInvalidCommitOffsetSize            int16 = 28
	errTopicAuthorizationFailed           int16 = 29
	errGroupAuthorizationFailed           int16 = 30
	errClusterAuthorizationFailed         int16 = 31
	errInvalidTimestamp                   int16 = 32
	errUnsupportedSASLMechanism           int16 = 33
	errIllegalSASLState                   int16 = 34
	errUnsupportedVersion                 int16 = 35
	errTopicAlreadyExists                 int16 = 36
	errInvalidPartitions                  int16 = 37
	errInvalidReplicationFactor           int16 = 38
	errInvalidReplicaAssignment           int16 = 39
	errInvalidConfig                      int16 = 40
	errNotController                      int16 = 41
	errInvalidRequest                     int16 = 42
	errUnsupportedForMessageFormat        int16 = 43
	errPolicyViolation                    int16 = 44
	errOutOfOrderSequenceNumber           int16 = 45
	errDuplicateSequenceNumber            int16 = 46
	errInvalidProducerEpoch               int16 = 47
	errInvalidTxnState                    int16 = 48
	errTransactionCoordinatorFenced       int16 = 52
	errInvalidProducerIDMapping           int16 = 49
	errInvalidTransactionTimeout          int16 = 50
	errConcurrentTransactions             int16 = 51
	errKafkaStorageError                  int16 = 56
	errSASLAuthenticationFailed           int16 = 58
	errUnknownProducerID                  int16 = 59
	errNonEmptyGroup                      int16 = 68
	errGroupIDNotFound                    int16 = 69
	errFencedLeaderEpoch                  int16 = 74
	errUnknownLeaderEpoch                 int16 = 75
	errOffsetNotAvailable                 int16 = 78
	errMemberIDRequired                   int16 = 79
	errGroupMaxSizeReached                int16 = 81
	errFencedInstanceID                   int16 = 82
	errGroupSubscribedToTopic             int16 = 86
	errInvalidRecord                      int16 = 87
	errUnknownTopicID                     int16 = 100
	errInconsistentTopicID                int16 = 103
	errTransactionalIDAuthorizationFailed int16 = 53
	errFetchSessionIDNotFound             int16 = 70
	errInvalidFetchSessionEpoch           int16 = 71
	errUnsupportedCompressionType         int16 = 76
	errNotEnoughReplicasAfterAppend       int16 = 20
	errStaleBrokerEpoch                   int16 = 77
	errDuplicateBrokerRegistration        int16 = 101
	errInconsistentClusterID              int16 = 104
	errFencedMemberEpoch                  int16 = 110
	errUnreleasedInstanceID               int16 = 111
	errUnsupportedAssignor                int16 = 112
	errStaleMemberEpoch                   int16 = 113
	errIneligibleReplica                  int16 = 107
	errInvalidUpdateVersion               int16 = 95
	errNewLeaderElected                   int16 = 108
	errPreferredLeaderNotAvailable        int16 = 80
	errEligibleLeadersNotAvailable        int16 = 83
	errElectionNotNeeded                  int16 = 84
	errNoReassignmentInProgress           int16 = 85
	errBrokerIDNotRegistered              int16 = 102
	errMismatchedEndpointType             int16 = 114 // KIP-919
	errUnsupportedEndpointType            int16 = 115 // KIP-919

	// Transactions (KIP-98, KIP-447, KIP-588, KIP-664, KIP-890).
	errOperationNotAttempted    int16 = 55
	errUnstableOffsetCommit     int16 = 88
	errProducerFenced           int16 = 90
	errTransactionalIDNotFound  int16 = 105
	errTransactionAbortable     int16 = 120
	errInvalidRegularExpression int16 = 128
)

// errorCode maps an error from spool's layers to the Kafka error code a
// client acts on.
func errorCode(err error) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, spool.ErrStorage):
		// A full disk, an I/O error, an offline partition: Kafka's
		// answer for a failed log directory, retriable for clients.
		// First, so that the reason it wraps (a corrupt log, say)
		// does not decide the code.
		return errKafkaStorageError
	case errors.As(err, new(*controller.NotControllerError)):
		return errNotController
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrClosed):
		return errNotLeaderOrFollower
	case errors.Is(err, replica.ErrLeaderNotAvailable):
		return errLeaderNotAvailable
	case errors.Is(err, replica.ErrFencedLeaderEpoch):
		return errFencedLeaderEpoch
	case errors.Is(err, replica.ErrUnknownLeaderEpoch):
		return errUnknownLeaderEpoch
	case errors.Is(err, replica.ErrNotEnoughReplicas):
		return errNotEnoughReplicas
	case errors.Is(err, replica.ErrNotEnoughReplicasAfterAppend):
		return errNotEnoughReplicasAfterAppend
	case errors.Is(err, replica.ErrTimedOut):
		return errRequestTimedOut
	case errors.Is(err, replica.ErrStaleState):
		return errInvalidUpdateVersion
	case errors.Is(err, replica.ErrNewLeaderElected):
		return errNewLeaderElected
	case errors.Is(err, replica.ErrInvalidReplicaAssignment):
		return errInvalidReplicaAssignment
	case errors.Is(err, replica.ErrReplicationFactorChange):
		return errInvalidReplicationFactor
	case errors.Is(err, replica.ErrNoReassignmentInProgress):
		return errNoReassignmentInProgress
	case errors.Is(err, replica.ErrElectionNotNeeded):
		return errElectionNotNeeded
	case errors.Is(err, replica.ErrPreferredLeaderNotAvailable):
		return errPreferredLeaderNotAvailable
	case errors.Is(err, replica.ErrEligibleLeadersNotAvailable):
		return errEligibleLeadersNotAvailable
	case errors.Is(err, controller.ErrBrokerNotRegistered):
		return errBrokerIDNotRegistered
	case errors.Is(err, controller.ErrBrokerHoldsReplicas), errors.Is(err, controller.ErrBrokerAlive):
		// Kafka unregisters such a broker; spool refuses, and says why.
		return errInvalidRequest
	case errors.Is(err, spool.ErrNotSupportedHere):
		return errInvalidRequest
	case errors.Is(err, replica.ErrIneligibleReplica):
		return errIneligibleReplica
	case errors.Is(err, replica.ErrUnknownTopic), errors.Is(err, replica.ErrUnknownPartition):
		return errUnknownTopicOrPartition
	case errors.Is(err, replica.ErrTopicExists):
		return errTopicAlreadyExists
	case errors.Is(err, replica.ErrNotEnoughBrokers):
		return errInvalidReplicationFactor
	case errors.Is(err, controller.ErrStaleBrokerEpoch):
		return errStaleBrokerEpoch
	case errors.Is(err, controller.ErrDuplicateRegistration):
		return errDuplicateBrokerRegistration
	case errors.Is(err, controller.ErrInconsistentClusterID):
		return errInconsistentClusterID
	case errors.Is(err, controller.ErrConfigChanged):
		return errInvalidUpdateVersion
	case errors.Is(err, spool.ErrNotCoordinator), errors.Is(err, group.ErrNotCoordinator):
		return errNotCoordinator
	case errors.Is(err, spool.ErrCoordinatorLoadInProgress):
		return errCoordinatorLoadInProgress
	case errors.Is(err, spool.ErrCoordinatorNotAvailable):
		return errCoordinatorNotAvailable
	case errors.Is(err, spool.ErrUnknownTopic), errors.Is(err, spool.ErrUnknownPartition):
		return errUnknownTopicOrPartition
	case errors.Is(err, log.ErrOffsetOutOfRange):
		return errOffsetOutOfRange
	case errors.Is(err, record.ErrRecordTooLarge):
		return errMessageTooLarge
	case errors.Is(err, record.ErrCorrupt):
		return errCorruptMessage
	case errors.Is(err, spool.ErrTopicExists):
		return errTopicAlreadyExists
	case errors.Is(err, spool.ErrInvalidTopic):
		return errInvalidTopicException
	case errors.Is(err, spool.ErrInvalidConfig):
		return errInvalidConfig
	case errors.Is(err, group.ErrUnknownMemberID):
		return errUnknownMemberID
	case errors.Is(err, group.ErrIllegalGeneration):
		return errIllegalGeneration
	case errors.Is(err, group.ErrRebalanceInProgress):
		return errRebalanceInProgress
	case errors.Is(err, group.ErrMemberIDRequired):
		return errMemberIDRequired
	case errors.Is(err, group.ErrInconsistentProtocol):
		return errInconsistentGroupProtocol
	case errors.Is(err, group.ErrInvalidSessionTimeout):
		return errInvalidSessionTimeout
	case errors.Is(err, group.ErrFencedInstanceID):
		return errFencedInstanceID
	case errors.Is(err, group.ErrGroupIDNotFound):
		return errGroupIDNotFound
	case errors.Is(err, group.ErrNonEmptyGroup):
		return errNonEmptyGroup
	case errors.Is(err, group.ErrInvalidGroupID):
		return errInvalidGroupID
	case errors.Is(err, group.ErrGroupMaxSizeReached):
		return errGroupMaxSizeReached
	case errors.Is(err, group.ErrFencedMemberEpoch):
		return errFencedMemberEpoch
	case errors.Is(err, group.ErrUnreleasedInstanceID):
		return errUnreleasedInstanceID
	case errors.Is(err, group.ErrUnsupportedAssignor):
		return errUnsupportedAssignor
	case errors.Is(err, group.ErrStaleMemberEpoch):
		return errStaleMemberEpoch
	case errors.Is(err, group.ErrInvalidRegularExpression):
		return errInvalidRegularExpression
	case errors.Is(err, group.ErrInvalidHeartbeat):
		return errInvalidRequest
	case errors.Is(err, group.ErrGroupSubscribedToTopic):
		return errGroupSubscribedToTopic
	case errors.Is(err, group.ErrOffsetMetadataTooLarge):
		return errOffsetMetadataTooLarge
	case errors.Is(err, group.ErrCoordinatorClosed), errors.Is(err, spool.ErrClosed), errors.Is(err, log.ErrClosed):
		return errCoordinatorNotAvailable
	case errors.Is(err, log.ErrFailed):
		return errKafkaStorageError
	case errors.Is(err, context.DeadlineExceeded):
		return errRequestTimedOut
	}
	return errUnknownServerError
}
