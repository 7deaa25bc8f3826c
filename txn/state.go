package txn

import (
	"cmp"
	"fmt"
)

// State is the state of a transactional id in Kafka's transaction state
// machine (see the package documentation). Its numeric value is what
// __transaction_state records store (TransactionStatus).
type State int8

// Transaction states, with the ids Kafka stores. Their String forms are the
// names DescribeTransactions and ListTransactions return.
const (
	// Empty: no transaction is open; the producer id and epoch are
	// assigned.
	Empty State = 0
	// Ongoing: partitions have been added; the transaction timeout runs.
	Ongoing State = 1
	// PrepareCommit: the commit is decided and durable; markers are being
	// written.
	PrepareCommit State = 2
	// PrepareAbort: the abort is decided and durable; markers are being
	// written.
	PrepareAbort State = 3
	// CompleteCommit: every commit marker has been written.
	CompleteCommit State = 4
	// CompleteAbort: every abort marker has been written.
	CompleteAbort State = 5
	// Dead: the transactional id has expired; its tombstone is being
	// written.
	Dead State = 6
	// PrepareEpochFence: the producer epoch is being bumped to fence a
	// zombie before its open transaction is aborted. It is only ever a
	// pending state, never stored.
	PrepareEpochFence State = 7
)

var stateNames = [...]string{
	Empty:             "Empty",
	Ongoing:           "Ongoing",
	PrepareCommit:     "PrepareCommit",
	PrepareAbort:      "PrepareAbort",
	CompleteCommit:    "CompleteCommit",
	CompleteAbort:     "CompleteAbort",
	Dead:              "Dead",
	PrepareEpochFence: "PrepareEpochFence",
}

// String returns Kafka's name of the state.
func (s State) String() string {
	if s.valid() {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

func (s State) valid() bool { return s >= Empty && s <= PrepareEpochFence }

// ParseState returns the state Kafka names name ("Ongoing", ...); ok is
// false for any other string (ListTransactions echoes such filters back as
// unknown).
func ParseState(name string) (s State, ok bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// preparing reports whether the outcome is decided and markers are being
// written.
func (s State) preparing() bool { return s == PrepareCommit || s == PrepareAbort }

// complete reports whether the state has no open transaction: a producer may
// begin a new one.
func (s State) complete() bool { return s == Empty || s == CompleteCommit || s == CompleteAbort }

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
