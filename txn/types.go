package txn

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/spoolmq/spool/record"
)

// Defaults of Config, Kafka's unless noted.
const (
	DefaultMaxTimeout   = 15 * time.Minute   // transaction.max.timeout.ms
	DefaultIDExpiration = 7 * 24 * time.Hour // transactional.id.expiration.ms
	// DefaultTickInterval is how often timed-out transactions are looked
	// for (transaction.abort.timed.out.transaction.cleanup.interval.ms).
	DefaultTickInterval = 10 * time.Second
	// DefaultMarkerRetryBackoff is the pause before markers that failed are
	// sent again (spool's own).
	DefaultMarkerRetryBackoff = 100 * time.Millisecond
	// OffsetsTopic is the topic of consumer groups' committed offsets,
	// whose partition AddOffsets adds to a transaction.
	OffsetsTopic = "__consumer_offsets"
)

// Config configures a Coordinator. Store, Markers and NewProducerID are
// required; the zero value of every other field is its default.
type Config struct {
	// Partitions is the partition count of StateTopic
	// (transaction.state.log.num.partitions). Default 50.
	Partitions int
	// Store appends records to StateTopic partitions.
	Store Store
	// Markers writes transaction markers to partition leaders.
	Markers MarkerWriter
	// NewProducerID allocates a producer id never used before, in the
	// cluster (from the controller's producer-id blocks).
	NewProducerID func(ctx context.Context) (int64, error)
	// PartitionExists reports whether a partition exists; AddPartitions
	// refuses the others with ErrUnknownTopicOrPartition. Default: every
	// partition exists.
	PartitionExists func(TopicPartition) bool
	// GroupPartition returns the OffsetsTopic partition of a consumer
	// group, which AddOffsets adds. Default: Kafka's placement over 50
	// partitions.
	GroupPartition func(groupID string) TopicPartition
	// MaxTimeout caps the transaction timeout producers may ask for
	// (transaction.max.timeout.ms). Default 15 min.
	MaxTimeout time.Duration
	// IDExpiration is how long a transactional id may stay without an open
	// transaction or any change before Tick forgets it, writing a tombstone
	// (transactional.id.expiration.ms). Default 7 days; negative: never.
	IDExpiration time.Duration
	// ManualTick turns the timer goroutine off: timed-out transactions are
	// aborted and idle ids expired only when the caller calls Tick. Tests
	// combine it with a fake Now.
	ManualTick bool
	// TickInterval is how often the timer goroutine calls Tick. Default
	// 10 s.
	TickInterval time.Duration
	// MarkerRetryBackoff is the pause before failed markers (or a failed
	// Complete* record) are retried. Default 100 ms.
	MarkerRetryBackoff time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the coordinator's warnings; silent by default.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, errors.New("txn: Config.Store is required")
	case c.Markers == nil:
		return c, errors.New("txn: Config.Markers is required")
	case c.NewProducerID == nil:
		return c, errors.New("txn: Config.NewProducerID is required")
	}
	if c.Partitions <= 0 {
		c.Partitions = DefaultStatePartitions
	}
	if c.PartitionExists == nil {
		c.PartitionExists = func(TopicPartition) bool { return true }
	}
	if c.GroupPartition == nil {
		c.GroupPartition = func(g string) TopicPartition {
			return TopicPartition{Topic: OffsetsTopic, Partition: PartitionFor(g, 50)}
		}
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.IDExpiration == 0 {
		c.IDExpiration = DefaultIDExpiration
	}
	if c.TickInterval <= 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.MarkerRetryBackoff <= 0 {
		c.MarkerRetryBackoff = DefaultMarkerRetryBackoff
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Store persists the coordinator's records in StateTopic.
type Store interface {
	// Append appends recs (keys and values encoded by EncodeKey and
	// EncodeValue; a nil value is a tombstone) to the given StateTopic
	// partition as one batch, and returns once they are committed: durable
	// and, in a cluster, replicated to the in-sync replicas (acks=all).
	// coordinatorEpoch is the leader epoch the partition was loaded at
	// (Load): an Append while the partition's leader epoch is another must
	// fail.
	//
	// An error fails the request that caused the write and changes nothing
	// in memory: an error wrapping ErrNotCoordinator (this broker no longer
	// leads the partition) is answered NOT_COORDINATOR, any other
	// COORDINATOR_NOT_AVAILABLE. ctx ends when the partition is unloaded or
	// the Coordinator closed.
	Append(ctx context.Context, partition, coordinatorEpoch int32, recs []record.Record) error
}

// MarkerWriter delivers transaction markers (WriteTxnMarkers) to the leaders
// of the partitions of a transaction.
type MarkerWriter interface {
	// WriteMarkers writes a COMMIT (commit true) or ABORT marker for the
	// producer id at the producer epoch to each partition, carrying
	// coordinatorEpoch, and returns one error per partition, in order: nil
	// once the marker is in that partition's log. The Coordinator sends the
	// partitions that failed again, after Config.MarkerRetryBackoff, until
	// all succeed, except that a partition whose error wraps
	// ErrUnknownTopicOrPartition is given up (it was deleted, as Kafka
	// does), and an error wrapping ErrCoordinatorFenced or
	// ErrInvalidProducerEpoch stops the transaction's markers altogether (a
	// newer coordinator owns it). A result of another length counts as
	// every partition failed. ctx ends when the partition is unloaded or
	// the Coordinator closed.
	WriteMarkers(ctx context.Context, producerID int64, producerEpoch int16, commit bool, coordinatorEpoch int32, partitions []TopicPartition) []error
}

// Description describes a transactional id (DescribeTransactions).
type Description struct {
	TransactionalID string
	// Err is ErrNotCoordinator, ErrCoordinatorLoadInProgress or
	// ErrTransactionalIDNotFound when the id cannot be described; the
	// other fields are then zero.
	Err           error
	State         State
	ProducerID    int64
	ProducerEpoch int16
	Timeout       time.Duration
	// Start is when the current transaction began; zero if none (Kafka
	// reports -1).
	Start time.Time
	// Partitions are the partitions of the current transaction, sorted.
	Partitions []TopicPartition
}

// ListFilter selects transactional ids for List (ListTransactions). Each
// set field narrows the listing; the zero value lists every id.
type ListFilter struct {
	// States are state names as Kafka spells them ("Ongoing", ...); names
	// that are not states come back from List as unknown, and if none of
	// the names is a state nothing is listed.
	States []string
	// ProducerIDs keeps ids whose current producer id is one of these.
	ProducerIDs []int64
	// MinDuration, if positive, keeps transactions that began more than
	// this long ago (ListTransactions v1 DurationFilter). Ids without a
	// transaction never match (Kafka compares their start time, -1, which
	// lets them all through).
	MinDuration time.Duration
	// IDPattern, if not "", keeps ids it matches (ListTransactions v2).
	// It is Go's RE2 syntax, not Java's: the simple patterns clients send
	// mean the same in both; a pattern that does not compile is
	// ErrInvalidRegularExpression.
	IDPattern string
}

// Listing is a transactional id as ListTransactions shows it.
type Listing struct {
	TransactionalID string
	ProducerID      int64
	State           State
}
