package group

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of Options, Kafka's unless noted.
const (
	DefaultMinSessionTimeout             = 6 * time.Second  // group.min.session.timeout.ms
	DefaultMaxSessionTimeout             = 30 * time.Minute // group.max.session.timeout.ms
	DefaultMaxOffsetMetadataBytes        = 4096             // offset.metadata.max.bytes
	DefaultOffsetsRetention              = 7 * 24 * time.Hour
	DefaultOffsetsRetentionCheckInterval = 10 * time.Minute
	DefaultTickInterval                  = 100 * time.Millisecond // spool's own

	// NewMemberJoinTimeout is how long a member that joined for the first
	// time may wait in a rebalance before it is dropped (Kafka's
	// NewMemberJoinTimeoutMs): new members cannot heartbeat, so their
	// session timeout does not protect the group from defunct joins.
	NewMemberJoinTimeout = 5 * time.Minute
)

// ConsumerProtocolType is the protocol type of Kafka consumer groups, whose
// protocol metadata is a Subscription and whose assignments are Assignments.
const ConsumerProtocolType = "consumer"

// Options configure a Coordinator. The zero value of every field is its
// default.
type Options struct {
	// Now is the clock. Default time.Now; tests inject a fake clock.
	Now func() time.Time
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (group.min.session.timeout.ms and
	// group.max.session.timeout.ms). Defaults 6 s and 30 min.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay is how long the first rebalance of an empty
	// group waits for more members before completing; each member arriving
	// in the window extends it by as much again, up to the rebalance
	// timeout (group.initial.rebalance.delay.ms). Default 0, for embedded
	// use: Kafka's default is 3 s.
	InitialRebalanceDelay time.Duration
	// MaxGroupSize caps the members of a group (group.max.size). Default
	// unlimited.
	MaxGroupSize int
	// MaxOffsetMetadataBytes caps the metadata string of a committed offset
	// (offset.metadata.max.bytes). Default 4096.
	MaxOffsetMetadataBytes int
	// OffsetsRetention is how long the committed offsets of a group outlive
	// its last member (offsets.retention.minutes); the timer goroutine
	// applies it every OffsetsRetentionCheckInterval
	// (offsets.retention.check.interval.ms). Defaults 7 days and 10 min.
	// A negative OffsetsRetention turns the automatic expiry off
	// (ExpireOffsets still works).
	OffsetsRetention, OffsetsRetentionCheckInterval time.Duration
	// Owns, if set, reports whether this coordinator coordinates a group
	// now, nil if so: every request for a group it does not own fails with
	// its error (in a cluster, a group belongs to the broker leading its
	// offsets partition; ErrNotCoordinator sends the member looking for
	// it). Default: every group.
	Owns func(group string) error
	// Store persists committed offsets; nil keeps them in memory only.
	// Offsets are loaded back with LoadOffsets.
	Store OffsetStore
	// ManualTick turns the timer goroutine off: session timeouts, rebalance
	// timeouts and offset expiry then happen only when the caller calls
	// Tick (and ExpireOffsets). Tests combine it with a fake Now.
	ManualTick bool
	// TickInterval is how often the timer goroutine calls Tick, which
	// bounds how late a timeout is noticed. Default 100 ms.
	TickInterval time.Duration
	// Logger receives the coordinator's warnings; silent by default.
	Logger *slog.Logger

	// PartitionCount reports how many partitions a topic has, -1 if there
	// is no such topic: KIP-848 consumer groups assign partitions
	// themselves. Nil: no topic exists.
	PartitionCount func(topic string) int32
	// TopicNames lists the topics that exist, for regular-expression
	// subscriptions. Nil: none.
	TopicNames func() []string
	// ConsumerSessionTimeout and ConsumerHeartbeatInterval are a consumer
	// group member's session timeout and heartbeat interval
	// (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms).
	// Defaults 45 s and 5 s.
	ConsumerSessionTimeout, ConsumerHeartbeatInterval time.Duration
	// ShareMemberGone, if set, is told of every share group member that
	// left or whose session expired (after the group's lock is released),
	// so that the records it holds go to others at once.
	ShareMemberGone func(group, member string)
}

func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MinSessionTimeout == 0 {
		o.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if o.MaxSessionTimeout == 0 {
		o.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if o.InitialRebalanceDelay < 0 {
		o.InitialRebalanceDelay = 0
	}
	if o.MaxOffsetMetadataBytes <= 0 {
		o.MaxOffsetMetadataBytes = DefaultMaxOffsetMetadataBytes
	}
	if o.OffsetsRetention == 0 {
		o.OffsetsRetention = DefaultOffsetsRetention
	}
	if o.OffsetsRetentionCheckInterval <= 0 {
		o.OffsetsRetentionCheckInterval = DefaultOffsetsRetentionCheckInterval
	}
	if o.TickInterval <= 0 {
		o.TickInterval = DefaultTickInterval
	}
	if o.ConsumerSessionTimeout <= 0 {
		o.ConsumerSessionTimeout = DefaultConsumerSessionTimeout
	}
	if o.ConsumerHeartbeatInterval <= 0 {
		o.ConsumerHeartbeatInterval = DefaultConsumerHeartbeatInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// State is the state of a group in the classic protocol's state machine
// (see the package documentation).
type State int8

// Group states. Their String forms are Kafka's, as DescribeGroups and
// ListGroups report them.
const (
	// Empty: no members. The group may still hold committed offsets.
	Empty State = iota
	// PreparingRebalance: waiting for the members to (re)join.
	PreparingRebalance
	// CompletingRebalance: the members have joined; waiting for the
	// leader's assignment (Kafka's older name: AwaitingSync).
	CompletingRebalance
	// Stable: every member has an assignment for the current generation.
	Stable
	// Dead: the group has been deleted.
	Dead
	// Reconciling: a consumer group (KIP-848) some member of which has not
	// reached its target assignment.
	Reconciling
)

// String returns Kafka's name of the state.
func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case PreparingRebalance:
		return "PreparingRebalance"
	case CompletingRebalance:
		return "CompletingRebalance"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	case Reconciling:
		return "Reconciling"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// String formats the partition as Kafka does: topic-partition.
func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// compareTP orders partitions by topic, then partition number.
func compareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// Protocol is one of the protocols a member supports, with the metadata it
// sends for it. For consumer groups the name is an assignor's ("range",
// "cooperative-sticky", …) and the metadata an encoded Subscription.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinRequest is a JoinGroup request.
type JoinRequest struct {
	Group string
	// MemberID is "" for a member joining for the first time (or after
	// ErrUnknownMemberID), else the id the coordinator gave it.
	MemberID string
	// GroupInstanceID makes the member static (KIP-345,
	// group.instance.id): it keeps its assignment across restarts within
	// its session timeout. "" for a dynamic member.
	GroupInstanceID string
	ClientID        string
	ClientHost      string
	// ProtocolType is the kind of group, ConsumerProtocolType for
	// consumers.
	ProtocolType string
	// Protocols are the protocols the member supports, most preferred
	// first.
	Protocols []Protocol
	// SessionTimeout is how long the member may go without a heartbeat
	// before it is removed (session.timeout.ms).
	SessionTimeout time.Duration
	// RebalanceTimeout is how long a rebalance waits for the member to
	// rejoin (max.poll.interval.ms for Kafka consumers, KIP-62). Zero means
	// SessionTimeout, as JoinGroup v0 does.
	RebalanceTimeout time.Duration
	// RequireKnownMemberID asks for KIP-394's handshake, as JoinGroup v4+
	// clients do: a new dynamic member gets ErrMemberIDRequired with its
	// id and must join again with it.
	RequireKnownMemberID bool
}

// JoinResponse is a JoinGroup response. With an error, only MemberID is
// meaningful: the request's, or for ErrMemberIDRequired the id to join with.
type JoinResponse struct {
	Generation   int32
	ProtocolType string
	// Protocol is the protocol the group chose: one every member supports,
	// the one most members prefer.
	Protocol string
	LeaderID string
	MemberID string
	// Members are the members of the new generation with their metadata
	// for Protocol. Only the leader gets them: it computes the assignment.
	Members []MemberMetadata
}

// MemberMetadata is a member as the leader sees it in a JoinResponse.
type MemberMetadata struct {
	MemberID        string
	GroupInstanceID string
	Metadata        []byte
}

// SyncRequest is a SyncGroup request.
type SyncRequest struct {
	Group           string
	Generation      int32
	MemberID        string
	GroupInstanceID string
	// ProtocolType and Protocol, when not "", must match the group's
	// (SyncGroup v5+).
	ProtocolType string
	Protocol     string
	// Assignments maps member ids to their assignments; only the leader
	// sends them. Members it leaves out get an empty assignment.
	Assignments map[string][]byte
}

// SyncResponse is a SyncGroup response: the member's assignment for the
// generation.
type SyncResponse struct {
	ProtocolType string
	Protocol     string
	Assignment   []byte
}

// HeartbeatRequest is a Heartbeat request.
type HeartbeatRequest struct {
	Group           string
	MemberID        string
	GroupInstanceID string
	Generation      int32
}

// LeaveRequest is a LeaveGroup request for one or more members (KIP-345's
// batch leave).
type LeaveRequest struct {
	Group   string
	Members []LeaveMember
}

// LeaveMember names a leaving member: by MemberID, or, with MemberID "", by
// GroupInstanceID alone (an administrator removing a static member).
type LeaveMember struct {
	MemberID        string
	GroupInstanceID string
}

// Description describes a group (DescribeGroups).
type Description struct {
	Group        string
	State        State
	ProtocolType string
	// Protocol is the chosen protocol; "" unless the group is Stable, as in
	// Kafka.
	Protocol   string
	Generation int32
	LeaderID   string
	// Members are listed in the order they joined.
	Members []MemberDescription
}

// MemberDescription describes a member of a group. Metadata and Assignment
// are set only while the group is Stable, as in Kafka.
type MemberDescription struct {
	MemberID        string
	GroupInstanceID string
	ClientID        string
	ClientHost      string
	Metadata        []byte
	Assignment      []byte
}

// Listing is a group as ListGroups shows it.
type Listing struct {
	Group        string
	ProtocolType string
	State        State
	// Type is "classic", "consumer" for a KIP-848 consumer group with
	// members, or "share" for a KIP-932 share group.
	Type string
}

// OffsetAndMetadata is a committed offset.
type OffsetAndMetadata struct {
	// Offset is the next offset the group will consume.
	Offset int64
	// LeaderEpoch is the leader epoch of the last consumed record, or -1.
	LeaderEpoch int32
	// Metadata is the committer's free-form string.
	Metadata string
	// CommitTime is when the coordinator accepted the commit; it sets it
	// itself (what a commit request carries here is ignored).
	CommitTime time.Time
}

// CommitRequest is an OffsetCommit request.
type CommitRequest struct {
	Group string
	// MemberID, GroupInstanceID and Generation identify a member of the
	// current generation. Generation -1 with no member id is a commit from
	// outside the group protocol (an administrator or a consumer that
	// assigns itself partitions), allowed only while the group is Empty.
	MemberID        string
	GroupInstanceID string
	Generation      int32
	Offsets         map[TopicPartition]OffsetAndMetadata
}

// OffsetStore persists committed offsets.
type OffsetStore interface {
	// StoreOffsets durably records commits (or, with Delete set, their
	// removal) before returning. An error fails the commit: the coordinator
	// changes nothing in memory.
	StoreOffsets(group string, commits []StoredOffset) error
}

// StoredOffset is one record handed to an OffsetStore.
type StoredOffset struct {
	TopicPartition
	OffsetAndMetadata
	// Delete means the group's offset for the partition is gone; the other
	// fields are zero.
	Delete bool
}
