package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
)

// Errors returned by the Broker, its producers and consumers. Errors from
// lower layers are wrapped, so errors.Is also finds log.ErrOffsetOutOfRange,
// record.ErrRecordTooLarge, log.ErrCorrupt and so on.
var (
	ErrClosed           = errors.New("spool: broker closed")
	ErrUnknownTopic     = errors.New("spool: unknown topic")
	ErrUnknownPartition = errors.New("spool: unknown partition")
	ErrTopicExists      = errors.New("spool: topic already exists")
	ErrInvalidTopic     = errors.New("spool: invalid topic name")
	ErrInvalidConfig    = errors.New("spool: invalid configuration")
	ErrRecordTooLarge   = record.ErrRecordTooLarge
	ErrOffsetOutOfRange = log.ErrOffsetOutOfRange
	// ErrLocked means another process has the data directory open.
	ErrLocked = log.ErrLocked
	// ErrStorage means a file operation in the data directory failed - a
	// full disk, an I/O error, a file in the way - and the operation that
	// needed it changed nothing: a topic or partitions that could not be
	// created are not registered and leave no files. The wrapped error
	// says what failed (errors.Is finds syscall.ENOSPC, for example).
	// Kafka's KAFKA_STORAGE_ERROR.
	ErrStorage = errors.New("spool: storage error")
	// ErrPartitionOffline means the partition could not be opened when the
	// broker was (see PartitionDescription.Offline): it serves no reads or
	// writes until the broker is reopened, while the broker serves its
	// other partitions. It matches ErrStorage too.
	ErrPartitionOffline = fmt.Errorf("%w: partition offline", ErrStorage)
)

// Toggle is an on/off setting whose zero value means "the default".
type Toggle int8

// Toggle values.
const (
	Default Toggle = iota
	Enabled
	Disabled
)

func (t Toggle) on(def bool) bool {
	switch t {
	case Enabled:
		return true
	case Disabled:
		return false
	}
	return def
}

// Options configure a Broker. The zero value of every field is its default.
type Options struct {
	// Flush is the durability policy of every partition's log (flush.ms /
	// flush.messages). Default log.Sync: an acknowledged record is on
	// stable storage.
	Flush log.FlushPolicy
	// AutoCreateTopics creates a topic the first time a record is produced
	// to it (auto.create.topics.enable). Default Enabled.
	AutoCreateTopics Toggle
	// DefaultPartitions is the partition count of auto-created topics and
	// of topics created with Partitions 0 (num.partitions). Default 1.
	DefaultPartitions int32
	// Topic holds the defaults for every topic's settings; a topic's own
	// TopicConfig overrides them field by field (the broker-level log.*
	// settings in Kafka).
	Topic TopicConfig
	// Partitioner chooses partitions for Broker.Produce and is the default
	// for producers. Default partition.DefaultPartitioner().
	Partitioner partition.Partitioner
	// RetentionCheckInterval is how often retention and age-based segment
	// rolls run (log.retention.check.interval.ms). Default 5 minutes.
	RetentionCheckInterval time.Duration
	// CleanerBackoff is how often compacted topics are checked for
	// cleaning (log.cleaner.backoff.ms). Default 15 s.
	CleanerBackoff time.Duration
	// CleanerBufferBytes bounds the key map of one clean
	// (log.cleaner.dedupe.buffer.size). Default 32 MiB.
	CleanerBufferBytes int
	// OffsetsTopicPartitions is the partition count of __consumer_offsets,
	// fixed when it is first created (offsets.topic.num.partitions).
	// Default 50.
	OffsetsTopicPartitions int32
	// TransactionStatePartitions is the partition count of
	// __transaction_state, fixed when it is first created
	// (transaction.state.log.num.partitions). Default 50.
	TransactionStatePartitions int32
	// TransactionMaxTimeout caps the transaction timeout a transactional
	// producer may ask for (transaction.max.timeout.ms). Default 15 min.
	TransactionMaxTimeout time.Duration
	// OffsetsRetention is how long a group's committed offsets outlive its
	// last member (offsets.retention.minutes). Default 7 days; negative:
	// forever.
	OffsetsRetention time.Duration
	// GroupMinSessionTimeout and GroupMaxSessionTimeout bound the session
	// timeout a group member may ask for (group.min.session.timeout.ms,
	// group.max.session.timeout.ms). Defaults 6 s and 30 min.
	GroupMinSessionTimeout, GroupMaxSessionTimeout time.Duration
	// GroupInitialRebalanceDelay lets a new group's first members gather
	// before the first generation forms (group.initial.rebalance.delay.ms).
	// Default 0 (Kafka's is 3 s).
	GroupInitialRebalanceDelay time.Duration
	// GroupConsumerSessionTimeout and GroupConsumerHeartbeatInterval are
	// the session timeout and heartbeat interval of KIP-848 consumer group
	// members, which the coordinator sets rather than the member
	// (group.consumer.session.timeout.ms,
	// group.consumer.heartbeat.interval.ms). A member moves partitions
	// between heartbeats, so the interval paces a rebalance. Defaults 45 s
	// and 5 s.
	GroupConsumerSessionTimeout, GroupConsumerHeartbeatInterval time.Duration
	// ShareLockDuration, ShareDeliveryLimit and ShareMaxInFlight bound the
	// share groups' deliveries (see ShareConsumer): how long a record
	// stays with a consumer unacknowledged, how many times it is delivered
	// before it is archived (or dead-lettered), and how many records of a
	// partition may be in flight (group.share.record.lock.duration.ms,
	// group.share.delivery.count.limit,
	// group.share.partition.max.record.locks). Defaults 30 s, 5 and 2000.
	ShareLockDuration  time.Duration
	ShareDeliveryLimit int
	ShareMaxInFlight   int
	// MaxOpenSegmentFiles bounds the segment (.log) files the broker
	// keeps open across all its partitions: a segment's file opens when
	// it is read or written and, while not in use, may be closed to make
	// room for another, least recently used first (log.FilePool). Files
	// in use - a read, an append, an fsync, a zero-copy send - are never
	// closed, so the process may hold this many plus those in use at one
	// moment. A file with unsynced writes is fsynced before it closes, and
	// a failure there fails its partition's next flush, as a failed fsync
	// does. spool's own setting (spool.log.max.open.segment.files; Kafka
	// has none and needs a descriptor per segment). Default: half the
	// process's soft limit on open files (RLIMIT_NOFILE), at least
	// MinOpenSegmentFiles; negative: no bound - every segment keeps its
	// file open.
	MaxOpenSegmentFiles int
	// Logger receives the broker's warnings; silent by default.
	Logger *slog.Logger

	// Cluster makes the broker a node of an in-process replicated cluster:
	// every topic but __consumer_offsets is then the cluster's, placed on
	// its ReplicationFactor brokers. nil: a standalone broker.
	Cluster *LocalCluster
	// NodeID is the broker's id in its cluster (broker.id / node.id).
	NodeID int32
	// Node makes the broker a node of a cluster of processes: a member of
	// its controller quorum and a broker whose replicas the cluster's
	// controller places and elects. transport.StartNode sets it; nil: a
	// standalone broker (or, with Cluster, an in-process one).
	Node *NodeOptions

	// fs is the file layer of the data directory: the registry, partition
	// directories and their logs. Default vfs.Default; tests inject faults.
	fs vfs.FS
}

func (o Options) withDefaults() (Options, error) {
	if o.DefaultPartitions == 0 {
		o.DefaultPartitions = 1
	}
	if o.DefaultPartitions < 0 {
		return o, invalidConfig("Options.DefaultPartitions", o.DefaultPartitions, "want 0 (the default, 1) or more")
	}
	if o.Partitioner == nil {
		o.Partitioner = partition.DefaultPartitioner()
	}
	if o.RetentionCheckInterval <= 0 {
		o.RetentionCheckInterval = log.DefaultRetentionCheck
	}
	if o.CleanerBackoff <= 0 {
		o.CleanerBackoff = 15 * time.Second
	}
	if o.OffsetsTopicPartitions == 0 {
		o.OffsetsTopicPartitions = DefaultOffsetsTopicPartitions
	}
	if o.OffsetsTopicPartitions < 0 {
		return o, invalidConfig("Options.OffsetsTopicPartitions", o.OffsetsTopicPartitions, "want 0 (the default) or more")
	}
	if o.CleanerBufferBytes < 0 {
		return o, invalidConfig("Options.CleanerBufferBytes", o.CleanerBufferBytes, "want 0 (the default) or more")
	}
	if o.TransactionStatePartitions == 0 {
		o.TransactionStatePartitions = DefaultTransactionStatePartitions
	}
	if o.TransactionStatePartitions < 0 {
		return o, invalidConfig("Options.TransactionStatePartitions", o.TransactionStatePartitions, "want 0 (the default) or more")
	}
	if o.TransactionMaxTimeout < 0 {
		return o, invalidConfig("Options.TransactionMaxTimeout", o.TransactionMaxTimeout, "want 0 (the default) or more")
	}
	if o.OffsetsRetention == 0 {
		o.OffsetsRetention = 7 * 24 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.MaxOpenSegmentFiles == 0 {
		o.MaxOpenSegmentFiles = defaultOpenSegmentFiles()
	}
	if err := o.Topic.validate(); err != nil {
		return o, err
	}
	if o.NodeID < 0 {
		return o, invalidConfig("Options.NodeID", o.NodeID, "want 0 or more")
	}
	return o, nil
}

// CleanupPolicy says what happens to old records (cleanup.policy).
type CleanupPolicy string

// Cleanup policies.
const (
	// CleanupDelete deletes whole old segments by time and size. The
	// default.
	CleanupDelete CleanupPolicy = "delete"
	// CleanupCompact keeps the latest record of each key (a changelog).
	CleanupCompact CleanupPolicy = "compact"
	// CleanupCompactDelete compacts and also deletes by time and size.
	CleanupCompactDelete CleanupPolicy = "compact,delete"
)

func (p CleanupPolicy) log() log.CleanupPolicy {
	switch p {
	case CleanupCompact:
		return log.Compact
	case CleanupCompactDelete, "delete,compact":
		return log.CompactDelete
	}
	return log.Delete
}

func (p CleanupPolicy) compacts() bool { return p.log() != log.Delete }

// TopicConfig is a topic's settings. Each zero field takes the broker's
// default (Options.Topic), and then the library's; each names the Kafka topic
// setting it mirrors.
type TopicConfig struct {
	// Partitions is the number of partitions. Default
	// Options.DefaultPartitions.
	Partitions int32
	// SegmentBytes is the size at which a partition's active segment rolls
	// (segment.bytes). Default 1 GiB.
	SegmentBytes int64
	// SegmentAge rolls a segment once its first record is this old
	// (segment.ms). Default 7 days.
	SegmentAge time.Duration
	// RetentionTime deletes segments whose newest record is older
	// (retention.ms). Default 7 days; any negative value keeps everything
	// (Kafka's -1).
	RetentionTime time.Duration
	// RetentionBytes deletes a partition's oldest segments while it is
	// larger (retention.bytes). Default, or any negative value: unlimited.
	RetentionBytes int64
	// CleanupPolicy is what retention does (cleanup.policy): delete old
	// segments, compact (keep the latest record per key), or both. Default
	// delete.
	CleanupPolicy CleanupPolicy
	// DeleteRetention is how long a tombstone outlives its timestamp in a
	// compacted topic (delete.retention.ms). Default 1 day.
	DeleteRetention time.Duration
	// MinCompactionLag and MaxCompactionLag bound how long a record waits
	// for compaction (min.compaction.lag.ms, max.compaction.lag.ms).
	// Defaults 0 and unlimited.
	MinCompactionLag, MaxCompactionLag time.Duration
	// MinCleanableDirtyRatio is the dirty share above which a compacted
	// partition is cleaned (min.cleanable.dirty.ratio). Default 0.5.
	MinCleanableDirtyRatio float64
	// Compression is the codec records produced in this process are
	// batched with (compression.type), unless the producer sets its own.
	// Default none.
	Compression record.Codec
	// MaxMessageBytes is the largest batch a partition accepts, after
	// compression (max.message.bytes). Default 1 MiB.
	MaxMessageBytes int
	// ReplicationFactor is how many brokers hold each partition
	// (replication.factor, default.replication.factor). Default 1; more
	// needs Options.Cluster. Fixed at creation.
	ReplicationFactor int
	// MinInSyncReplicas is the smallest in-sync replica set that accepts
	// an acks=all produce and commits records (min.insync.replicas).
	// Default 1. Fixed at creation.
	MinInSyncReplicas int
	// UncleanLeaderElection lets a replica outside the ISR become leader
	// when every ISR member is down: the partition comes back sooner, and
	// records only the lost ISR held are gone
	// (unclean.leader.election.enable). Default false.
	UncleanLeaderElection bool
}

// nonNegative is a setting that must not be negative (0 is its default):
// its field's name, its value and whether it is negative.
type nonNegative struct {
	field string
	value any
	bad   bool
}

// firstNegative names the first of fields that is negative, prefixing its
// name with the config type's.
func firstNegative(prefix string, fields ...nonNegative) error {
	for _, n := range fields {
		if n.bad {
			return invalidConfig(prefix+n.field, n.value, "want 0 (the default) or more")
		}
	}
	return nil
}

func (c TopicConfig) validate() error {
	const f = "TopicConfig."
	if err := firstNegative(f,
		nonNegative{"Partitions", c.Partitions, c.Partitions < 0},
		nonNegative{"SegmentBytes", c.SegmentBytes, c.SegmentBytes < 0},
		nonNegative{"SegmentAge", c.SegmentAge, c.SegmentAge < 0},
		nonNegative{"MaxMessageBytes", c.MaxMessageBytes, c.MaxMessageBytes < 0},
		nonNegative{"DeleteRetention", c.DeleteRetention, c.DeleteRetention < 0},
		nonNegative{"MinCompactionLag", c.MinCompactionLag, c.MinCompactionLag < 0},
		nonNegative{"MaxCompactionLag", c.MaxCompactionLag, c.MaxCompactionLag < 0},
		nonNegative{"ReplicationFactor", c.ReplicationFactor, c.ReplicationFactor < 0},
		nonNegative{"MinInSyncReplicas", c.MinInSyncReplicas, c.MinInSyncReplicas < 0},
	); err != nil {
		return err
	}
	switch {
	case c.CleanupPolicy != "" && c.CleanupPolicy != CleanupDelete && c.CleanupPolicy != CleanupCompact &&
		c.CleanupPolicy != CleanupCompactDelete && c.CleanupPolicy != "delete,compact":
		return invalidConfig(f+"CleanupPolicy", c.CleanupPolicy, "want delete, compact or compact,delete")
	case c.MinCleanableDirtyRatio < 0, c.MinCleanableDirtyRatio > 1:
		return invalidConfig(f+"MinCleanableDirtyRatio", c.MinCleanableDirtyRatio, "want 0 (the default) to 1")
	case c.Compression < record.None || c.Compression > record.ZSTD:
		return invalidConfig(f+"Compression", c.Compression, "want none, gzip, snappy, lz4 or zstd")
	}
	return nil
}

// merged returns c with its zero fields taken from def.
func (c TopicConfig) merged(def TopicConfig) TopicConfig {
	if c.Partitions == 0 {
		c.Partitions = def.Partitions
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = def.SegmentBytes
	}
	if c.SegmentAge == 0 {
		c.SegmentAge = def.SegmentAge
	}
	if c.RetentionTime == 0 {
		c.RetentionTime = def.RetentionTime
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = def.RetentionBytes
	}
	if c.CleanupPolicy == "" {
		c.CleanupPolicy = def.CleanupPolicy
	}
	if c.Compression == record.None {
		c.Compression = def.Compression
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = def.MaxMessageBytes
	}
	if c.DeleteRetention == 0 {
		c.DeleteRetention = def.DeleteRetention
	}
	if c.MinCompactionLag == 0 {
		c.MinCompactionLag = def.MinCompactionLag
	}
	if c.MaxCompactionLag == 0 {
		c.MaxCompactionLag = def.MaxCompactionLag
	}
	if c.MinCleanableDirtyRatio == 0 {
		c.MinCleanableDirtyRatio = def.MinCleanableDirtyRatio
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = def.ReplicationFactor
	}
	if c.MinInSyncReplicas == 0 {
		c.MinInSyncReplicas = def.MinInSyncReplicas
	}
	c.UncleanLeaderElection = c.UncleanLeaderElection || def.UncleanLeaderElection
	return c
}

// effective returns the topic's settings with every default filled in.
func (b *Broker) effective(c TopicConfig) TopicConfig {
	c = c.merged(b.opts.Topic)
	if c.Partitions == 0 {
		c.Partitions = b.opts.DefaultPartitions
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = log.DefaultSegmentBytes
	}
	if c.SegmentAge == 0 {
		c.SegmentAge = log.DefaultSegmentAge
	}
	if c.RetentionTime == 0 {
		c.RetentionTime = log.DefaultRetentionTime
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = log.Unlimited
	}
	if c.CleanupPolicy == "" {
		c.CleanupPolicy = CleanupDelete
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = log.DefaultMaxMessageBytes
	}
	if c.DeleteRetention == 0 {
		c.DeleteRetention = log.DefaultDeleteRetention
	}
	if c.MinCleanableDirtyRatio == 0 {
		c.MinCleanableDirtyRatio = log.DefaultDirtyRatio
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
	if c.MinInSyncReplicas == 0 {
		c.MinInSyncReplicas = 1
	}
	return c
}

// logOptions are the log settings of a partition of a topic with settings c
// (already effective).
func (b *Broker) logOptions(c TopicConfig) log.Options {
	return log.Options{
		SegmentBytes:           c.SegmentBytes,
		SegmentAge:             c.SegmentAge,
		RetentionTime:          c.RetentionTime,
		RetentionBytes:         c.RetentionBytes,
		RetentionCheckInterval: -1, // the broker schedules retention
		MaxMessageBytes:        c.MaxMessageBytes,
		Compression:            c.Compression,
		Flush:                  b.opts.Flush,
		Cleanup:                c.CleanupPolicy.log(),
		DeleteRetention:        c.DeleteRetention,
		MinCompactionLag:       c.MinCompactionLag,
		MaxCompactionLag:       c.MaxCompactionLag,
		MinCleanableDirtyRatio: c.MinCleanableDirtyRatio,
		CleanerBufferBytes:     b.opts.CleanerBufferBytes,
		Logger:                 b.logger,
		FS:                     b.opts.fs,
		FlushTimes:             &b.metrics.flush,
		Scheduler:              b.sched,
		Files:                  b.files,
		// The broker's lock on its data directory keeps other processes
		// out of every partition under it, and it opens each partition
		// once: a lock per partition would only cost a descriptor each.
		DirLocked: true,
	}
}

// MinOpenSegmentFiles is the least default of Options.MaxOpenSegmentFiles,
// whatever the process's limit on open files.
const MinOpenSegmentFiles = 64

// defaultOpenSegmentFiles is half the process's soft limit on open files,
// at least MinOpenSegmentFiles: the other half is left to sockets, index
// files and everything else.
func defaultOpenSegmentFiles() int {
	return max(openFilesLimit()/2, MinOpenSegmentFiles)
}

// invalidConfig is the error for one bad setting: it wraps ErrInvalidConfig
// and names the field and its value, and what is wanted instead, so that
// the error alone says what to fix - never the whole struct.
func invalidConfig(field string, value any, want string) error {
	return fmt.Errorf("%w: %s = %s: %s", ErrInvalidConfig, field, quoteValue(value), want)
}

// quoteValue formats a setting's value for an error: strings (and types
// over string) quoted, so that an empty or spaced value shows as one.
func quoteValue(v any) string {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return strconv.Quote(rv.String())
	}
	return fmt.Sprint(v)
}
