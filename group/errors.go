package group

import "errors"

// Errors returned by the Coordinator. Each one stands for exactly one Kafka
// error code (named in its comment), so that the transport layer can map
// them one to one; they are returned wrapped with context, so test them with
// errors.Is.
var (
	// ErrUnknownMemberID (UNKNOWN_MEMBER_ID): the member id is not, or no
	// longer, in the group; the member should rejoin with an empty id.
	ErrUnknownMemberID = errors.New("group: unknown member id")
	// ErrIllegalGeneration (ILLEGAL_GENERATION): the request carries a
	// generation other than the group's current one.
	ErrIllegalGeneration = errors.New("group: illegal generation")
	// ErrRebalanceInProgress (REBALANCE_IN_PROGRESS): the group is
	// rebalancing; the member should rejoin.
	ErrRebalanceInProgress = errors.New("group: rebalance in progress")
	// ErrMemberIDRequired (MEMBER_ID_REQUIRED, KIP-394): a new dynamic
	// member was given a member id (in JoinResponse.MemberID) and must join
	// again with it.
	ErrMemberIDRequired = errors.New("group: member id required")
	// ErrInconsistentProtocol (INCONSISTENT_GROUP_PROTOCOL): the member's
	// protocol type differs from the group's, it supports none of the
	// protocols every member supports, or it names no protocol at all.
	ErrInconsistentProtocol = errors.New("group: inconsistent group protocol")
	// ErrInvalidSessionTimeout (INVALID_SESSION_TIMEOUT): the session timeout
	// is outside [MinSessionTimeout, MaxSessionTimeout].
	ErrInvalidSessionTimeout = errors.New("group: invalid session timeout")
	// ErrFencedInstanceID (FENCED_INSTANCE_ID, KIP-345): another member id
	// now holds the request's group instance id; the caller is a zombie and
	// should stop.
	ErrFencedInstanceID = errors.New("group: fenced instance id")
	// ErrGroupIDNotFound (GROUP_ID_NOT_FOUND): no such group.
	ErrGroupIDNotFound = errors.New("group: group id not found")
	// ErrNonEmptyGroup (NON_EMPTY_GROUP): the operation needs the group to
	// have no members.
	ErrNonEmptyGroup = errors.New("group: group is not empty")
	// ErrCoordinatorClosed (COORDINATOR_NOT_AVAILABLE): the Coordinator has
	// been closed.
	ErrCoordinatorClosed = errors.New("group: coordinator closed")
	// ErrNotCoordinator (NOT_COORDINATOR): this broker no longer
	// coordinates the group (its offsets partition's leadership moved):
	// find the coordinator again.
	ErrNotCoordinator = errors.New("group: not the group's coordinator")
	// ErrInvalidGroupID (INVALID_GROUP_ID): the group id is empty where the
	// group membership protocol needs one.
	ErrInvalidGroupID = errors.New("group: invalid group id")
	// ErrGroupMaxSizeReached (GROUP_MAX_SIZE_REACHED): the group already has
	// Options.MaxGroupSize members.
	ErrGroupMaxSizeReached = errors.New("group: group max size reached")
	// ErrGroupSubscribedToTopic (GROUP_SUBSCRIBED_TO_TOPIC): DeleteOffsets of
	// a partition whose topic the (non-empty) group consumes.
	ErrGroupSubscribedToTopic = errors.New("group: group is subscribed to the topic")
	// ErrOffsetMetadataTooLarge (OFFSET_METADATA_TOO_LARGE): a committed
	// offset's metadata is longer than Options.MaxOffsetMetadataBytes.
	ErrOffsetMetadataTooLarge = errors.New("group: offset metadata too large")
)

// ErrMalformedMetadata means consumer protocol bytes (a subscription or an
// assignment) could not be decoded. The Coordinator relays these bytes
// without judging them; it reads subscriptions only to learn which topics a
// consumer group uses, and treats an undecodable one as "any topic".
var ErrMalformedMetadata = errors.New("group: malformed consumer protocol data")
