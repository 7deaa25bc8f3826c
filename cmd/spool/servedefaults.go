package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/spoolmq/spool"
)

// brokerDefaults are spool serve's flags for the broker's defaults of
// topics, groups and transactions: Kafka's broker-wide log.*, num.*,
// offsets.* and group.* settings (the names in parentheses), which a
// server.properties file sets too. A zero value is spool's default.
type brokerDefaults struct {
	partitions, offsetsPartitions, txnPartitions int
	autoCreate, unclean                          bool
	retention, roll, retentionCheck              time.Duration
	retentionBytes, segmentBytes                 int64
	cleanupPolicy                                string
	maxMessage                                   int
	maxOpenSegmentFiles                          int
	offsetsRetention, initialRebalance           time.Duration
	minSession, maxSession, txnMaxTimeout        time.Duration
}

// addBrokerDefaultFlags defines the brokerDefaults flags on fs.
func addBrokerDefaultFlags(fs *flag.FlagSet) *brokerDefaults {
	d := &brokerDefaults{}
	fs.IntVar(&d.partitions, "num-partitions", 0, "the partitions of a topic created without a count, auto-created ones included (num.partitions) (default 1)")
	fs.BoolVar(&d.autoCreate, "auto-create-topics", true, "create a topic when a client first produces to it or asks for its metadata (auto.create.topics.enable)")
	fs.DurationVar(&d.retention, "log-retention", 0, "delete a topic's segments whose newest record is older than this `duration` (log.retention.ms, .minutes, .hours); negative: keep everything (default 168h)")
	fs.Int64Var(&d.retentionBytes, "log-retention-bytes", 0, "delete a partition's oldest segments while it holds more `bytes` (log.retention.bytes) (default -1, unlimited)")
	fs.Int64Var(&d.segmentBytes, "log-segment-bytes", 0, "roll a partition's segment at this size in `bytes` (log.segment.bytes) (default 1 GiB)")
	fs.DurationVar(&d.roll, "log-roll", 0, "roll a segment once its first record is this `duration` old (log.roll.ms, .hours) (default 168h)")
	fs.DurationVar(&d.retentionCheck, "log-retention-check-interval", 0, "how often retention and age-based rolls run, a `duration` (log.retention.check.interval.ms) (default 5m)")
	fs.IntVar(&d.maxOpenSegmentFiles, "log-max-open-segment-files", 0, "keep at most this many segment `files` open across all partitions, closing the least recently used idle ones (spool.log.max.open.segment.files); negative: no bound (default half the process's open-file limit, at least 64)")
	fs.StringVar(&d.cleanupPolicy, "log-cleanup-policy", "", "what retention does to old records, `policy` delete, compact or compact,delete (log.cleanup.policy) (default delete)")
	fs.IntVar(&d.maxMessage, "message-max-bytes", 0, "the largest record batch a topic accepts, after compression, in `bytes` (message.max.bytes) (default 1 MiB)")
	fs.BoolVar(&d.unclean, "unclean-leader-election", false, "let a replica outside the ISR become leader when no in-sync one is left, losing what only the ISR held (unclean.leader.election.enable)")
	fs.DurationVar(&d.offsetsRetention, "offsets-retention", 0, "how long a group's committed offsets outlive its last member, a `duration` (offsets.retention.minutes) (default 168h); negative: forever")
	fs.IntVar(&d.offsetsPartitions, "offsets-topic-partitions", 0, "the `partitions` of __consumer_offsets, fixed when it is first created (offsets.topic.num.partitions) (default 50)")
	fs.IntVar(&d.txnPartitions, "transaction-state-partitions", 0, "the `partitions` of __transaction_state, fixed when it is first created (transaction.state.log.num.partitions) (default 50)")
	fs.DurationVar(&d.txnMaxTimeout, "transaction-max-timeout", 0, "the longest transaction timeout a producer may ask for, a `duration` (transaction.max.timeout.ms) (default 15m)")
	fs.DurationVar(&d.initialRebalance, "group-initial-rebalance-delay", 0, "how long a new classic group waits for more members before its first generation, a `duration` (group.initial.rebalance.delay.ms) (default 0s)")
	fs.DurationVar(&d.minSession, "group-min-session-timeout", 0, "the shortest session timeout a classic group member may ask for, a `duration` (group.min.session.timeout.ms) (default 6s)")
	fs.DurationVar(&d.maxSession, "group-max-session-timeout", 0, "the longest session timeout a classic group member may ask for, a `duration` (group.max.session.timeout.ms) (default 30m)")
	return d
}

// apply checks the flags and sets them on o. An error names the flag.
func (d *brokerDefaults) apply(o *spool.Options) error {
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"--num-partitions", d.partitions < 0 || d.partitions > 1<<31-1},
		{"--log-retention-bytes", d.retentionBytes < -1},
		{"--log-segment-bytes", d.segmentBytes < 0},
		{"--log-roll", d.roll < 0},
		{"--log-retention-check-interval", d.retentionCheck < 0},
		{"--message-max-bytes", d.maxMessage < 0},
		{"--offsets-topic-partitions", d.offsetsPartitions < 0 || d.offsetsPartitions > 1<<31-1},
		{"--transaction-state-partitions", d.txnPartitions < 0 || d.txnPartitions > 1<<31-1},
		{"--transaction-max-timeout", d.txnMaxTimeout < 0},
		{"--group-initial-rebalance-delay", d.initialRebalance < 0},
		{"--group-min-session-timeout", d.minSession < 0},
		{"--group-max-session-timeout", d.maxSession < 0},
	} {
		if f.bad {
			return fmt.Errorf("%s must not be negative", f.name)
		}
	}
	switch spool.CleanupPolicy(d.cleanupPolicy) {
	case "", spool.CleanupDelete, spool.CleanupCompact, spool.CleanupCompactDelete, "delete,compact":
	default:
		return fmt.Errorf("--log-cleanup-policy %q: want delete, compact or compact,delete", d.cleanupPolicy)
	}
	if d.minSession != 0 && d.maxSession != 0 && d.minSession > d.maxSession {
		return fmt.Errorf("--group-min-session-timeout %v is above --group-max-session-timeout %v", d.minSession, d.maxSession)
	}
	o.DefaultPartitions = int32(d.partitions)
	if !d.autoCreate {
		o.AutoCreateTopics = spool.Disabled
	}
	o.Topic.RetentionTime, o.Topic.RetentionBytes = d.retention, d.retentionBytes
	o.Topic.SegmentBytes, o.Topic.SegmentAge = d.segmentBytes, d.roll
	o.Topic.CleanupPolicy = spool.CleanupPolicy(d.cleanupPolicy)
	o.Topic.MaxMessageBytes = d.maxMessage
	o.Topic.UncleanLeaderElection = d.unclean
	o.RetentionCheckInterval = d.retentionCheck
	o.MaxOpenSegmentFiles = d.maxOpenSegmentFiles
	o.OffsetsRetention = d.offsetsRetention
	o.OffsetsTopicPartitions, o.TransactionStatePartitions = int32(d.offsetsPartitions), int32(d.txnPartitions)
	o.TransactionMaxTimeout = d.txnMaxTimeout
	o.GroupInitialRebalanceDelay = d.initialRebalance
	o.GroupMinSessionTimeout, o.GroupMaxSessionTimeout = d.minSession, d.maxSession
	return nil
}
