package spool

import (
	"time"

	"github.com/spoolmq/spool/record"
)

// Header is a record header: a key and an optional value.
type Header = record.Header

// Record is a record produced to or consumed from a topic.
type Record struct {
	// Topic is the record's topic.
	Topic string
	// Partition is the record's partition. A producer uses it only with
	// partition.ManualPartitioner; other partitioners choose one.
	Partition int32
	// Offset is the record's offset, set when it is consumed.
	Offset int64
	// Timestamp is the record's time, kept to the millisecond. Zero when
	// producing means "now".
	Timestamp time.Time
	// Key is nil for a record without a key.
	Key []byte
	// Value is nil for a tombstone.
	Value []byte
	// Headers are application metadata.
	Headers []Header
}

// RecordMetadata says where a produced record was written.
type RecordMetadata struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
}
