package log

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// FlushPolicy says when appended data is forced to stable storage. The zero
// value is Sync.
type FlushPolicy struct {
	kind     flushKind
	interval time.Duration
}

type flushKind int

const (
	flushSync flushKind = iota
	flushNone
	flushInterval
)

var (
	// Sync makes an append return only once its data is on stable storage
	// (fsync). Appends that arrive while an fsync is running share the next
	// one (group commit). The default.
	Sync = FlushPolicy{kind: flushSync}
	// None leaves flushing to the operating system (Kafka's default, which
	// relies on replication for durability): an append returns once its data
	// is in the page cache. A process crash loses nothing; a machine crash
	// may lose what the OS had not written back.
	None = FlushPolicy{kind: flushNone}
)

// Interval flushes in the background every d (Kafka's flush.ms): a machine
// crash loses at most about d of appends.
func Interval(d time.Duration) FlushPolicy {
	return FlushPolicy{kind: flushInterval, interval: d}
}

// String names the policy as the CLI spells it: sync, none, interval:D.
func (p FlushPolicy) String() string {
	switch p.kind {
	case flushNone:
		return "none"
	case flushInterval:
		return "interval:" + p.interval.String()
	}
	return "sync"
}

// ParseFlushPolicy parses "sync", "none" or "interval:D" (D a Go duration).
func ParseFlushPolicy(s string) (FlushPolicy, error) {
	switch s {
	case "sync", "":
		return Sync, nil
	case "none":
		return None, nil
	}
	if len(s) > 9 && s[:9] == "interval:" {
		d, err := time.ParseDuration(s[9:])
		if err == nil && d > 0 {
			return Interval(d), nil
		}
	}
	return Sync, fmt.Errorf("log: flush policy %q: want sync, none or interval:DURATION", s)
}

// Defaults. Each names the Kafka setting it mirrors.
const (
	DefaultSegmentBytes       = 1 << 30            // segment.bytes
	DefaultSegmentAge         = 7 * 24 * time.Hour // segment.ms
	DefaultRetentionTime      = 7 * 24 * time.Hour // retention.ms
	DefaultMaxMessageBytes    = 1 << 20            // max.message.bytes
	DefaultCheckpointInterval = time.Minute        // log.flush.offset.checkpoint.interval.ms
	DefaultRetentionCheck     = 5 * time.Minute    // log.retention.check.interval.ms
	minSegmentBytes           = record.HeaderSize  // room for one batch header
	maxSegmentBytes           = segment.MaxSize    // 32-bit index positions
	Unlimited                 = -1                 // for RetentionTime and RetentionBytes
	unlimitedBytes            = math.MaxInt64
)

// Options configure a Log. The zero value of every field means its default.
type Options struct {
	// SegmentBytes is the size at which the active segment is sealed and a
	// new one started (segment.bytes). Default 1 GiB; at most 2 GiB - 1.
	SegmentBytes int64
	// SegmentAge seals the active segment once its first batch is this old
	// (segment.ms), checked on append. Default 7 days.
	SegmentAge time.Duration
	// IndexMaxBytes is the size each index file is preallocated to; a full
	// index seals the segment (segment.index.bytes). Default 10 MiB.
	IndexMaxBytes int
	// IndexIntervalBytes is the bytes of log between index entries
	// (index.interval.bytes). Default 4096.
	IndexIntervalBytes int
	// Flush is the durability policy (flush.messages / flush.ms). Default
	// Sync.
	Flush FlushPolicy
	// RetentionTime deletes sealed segments whose newest record is older
	// than this (retention.ms). Default 7 days; Unlimited keeps everything.
	RetentionTime time.Duration
	// RetentionBytes deletes the oldest sealed segments while the log is
	// larger than this (retention.bytes). Default Unlimited.
	RetentionBytes int64
	// RetentionCheckInterval is how often the log applies retention in the
	// background (log.retention.check.interval.ms). Default 5 minutes;
	// negative: never (a broker that schedules retention itself).
	RetentionCheckInterval time.Duration
	// MaxMessageBytes is the largest batch an append accepts, after
	// compression (max.message.bytes). Default 1 MiB.
	MaxMessageBytes int
	// Compression is the codec Append uses for the batches it encodes
	// (compression.type). AppendBatch keeps a batch's own codec. Default
	// none.
	Compression record.Codec
	// CheckpointInterval is how often the recovery point is flushed and
	// recorded, bounding how much a restart after a crash has to check
	// (log.flush.offset.checkpoint.interval.ms). Default 1 minute. Rolling a
	// segment also records it.
	CheckpointInterval time.Duration
	// Logger receives warnings about recovery and failures. Default: none.
	Logger *slog.Logger

	fs  vfs.FS           // the file layer; tests inject faults here
	now func() time.Time // the clock; tests set it
}

func (o Options) withDefaults() (Options, error) {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentBytes < minSegmentBytes || o.SegmentBytes > maxSegmentBytes {
		return o, fmt.Errorf("log: SegmentBytes %d out of range [%d, %d]", o.SegmentBytes, minSegmentBytes, maxSegmentBytes)
	}
	if o.SegmentAge == 0 {
		o.SegmentAge = DefaultSegmentAge
	}
	if o.IndexMaxBytes == 0 {
		o.IndexMaxBytes = segment.DefaultIndexMaxBytes
	}
	if o.IndexMaxBytes < 4*24 || o.IndexMaxBytes > math.MaxInt32 {
		return o, fmt.Errorf("log: IndexMaxBytes %d out of range [96, 2^31)", o.IndexMaxBytes)
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = segment.DefaultIndexIntervalBytes
	}
	if o.IndexIntervalBytes < 0 {
		return o, fmt.Errorf("log: IndexIntervalBytes %d is negative", o.IndexIntervalBytes)
	}
	if o.Flush.kind == flushInterval && o.Flush.interval <= 0 {
		return o, fmt.Errorf("log: flush interval %v must be positive", o.Flush.interval)
	}
	switch {
	case o.RetentionTime == 0:
		o.RetentionTime = DefaultRetentionTime
	case o.RetentionTime < 0:
		o.RetentionTime = math.MaxInt64
	}
	if o.RetentionBytes <= 0 {
		o.RetentionBytes = unlimitedBytes
	}
	if o.RetentionCheckInterval == 0 {
		o.RetentionCheckInterval = DefaultRetentionCheck
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxMessageBytes < record.HeaderSize {
		return o, fmt.Errorf("log: MaxMessageBytes %d is less than a batch header", o.MaxMessageBytes)
	}
	if o.Compression < record.None || o.Compression > record.ZSTD {
		return o, fmt.Errorf("log: %w: %d", record.ErrUnsupportedCodec, o.Compression)
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o, nil
}

func (o Options) segmentOptions() segment.Options {
	return segment.Options{FS: o.fs, IndexIntervalBytes: o.IndexIntervalBytes, IndexMaxBytes: o.IndexMaxBytes}
}
