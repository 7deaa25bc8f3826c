package log

import (
	"fmt"
	"github.com/spoolmq/spool/stats"
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

// CleanupPolicy is what happens to old records (cleanup.policy).
type CleanupPolicy int8

// Cleanup policies.
const (
	// Delete removes whole old segments by RetentionTime and
	// RetentionBytes. The default.
	Delete CleanupPolicy = iota
	// Compact keeps the latest record of each key (see Clean) and
	// retains the log otherwise.
	Compact
	// CompactDelete does both.
	CompactDelete
)

// String is the policy as Kafka spells it.
func (p CleanupPolicy) String() string {
	switch p {
	case Compact:
		return "compact"
	case CompactDelete:
		return "compact,delete"
	}
	return "delete"
}

// ParseCleanupPolicy parses Kafka's spelling: delete, compact, or both
// separated by a comma in either order.
func ParseCleanupPolicy(s string) (CleanupPolicy, error) {
	switch s {
	case "delete", "":
		return Delete, nil
	case "compact":
		return Compact, nil
	case "compact,delete", "delete,compact":
		return CompactDelete, nil
	}
	return Delete, fmt.Errorf("log: cleanup policy %q: want delete, compact or compact,delete", s)
}

func (p CleanupPolicy) compacts() bool { return p == Compact || p == CompactDelete }
func (p CleanupPolicy) deletes() bool  { return p == Delete || p == CompactDelete }

// Defaults. Each names the Kafka setting it mirrors.
const (
	DefaultSegmentBytes       = 1 << 30            // segment.bytes
	DefaultSegmentAge         = 7 * 24 * time.Hour // segment.ms
	DefaultRetentionTime      = 7 * 24 * time.Hour // retention.ms
	DefaultMaxMessageBytes    = 1 << 20            // max.message.bytes
	DefaultCheckpointInterval = time.Minute        // log.flush.offset.checkpoint.interval.ms
	DefaultRetentionCheck     = 5 * time.Minute    // log.retention.check.interval.ms
	DefaultDeleteRetention    = 24 * time.Hour     // delete.retention.ms
	DefaultDirtyRatio         = 0.5                // min.cleanable.dirty.ratio
	DefaultCleanerBufferBytes = 32 << 20           // log.cleaner.dedupe.buffer.size (per clean)
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
	// IndexMaxBytes is the most each index file may grow to; a full index
	// seals the segment (segment.index.bytes). The files take disk space
	// in steps as entries arrive, not all of it up front. Default 10 MiB.
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
	// RetentionLimit, if set, bounds what retention and
	// DeleteRecordsBefore may delete: never a record at or past the offset
	// it returns. A replicated partition passes its high watermark, as
	// Kafka does, so a leader never deletes records its followers have yet
	// to copy. Called with the log's state locked: it must not call back
	// into the log.
	RetentionLimit func() int64
	// CleanLimit, if set, bounds compaction: Clean never maps or rewrites
	// a segment holding an offset at or past the offset it returns. A
	// partition passes its last stable offset, as Kafka's cleaner stops
	// at the first unstable offset: a transaction still open there may
	// yet abort, and its records must not shadow committed ones. Called
	// once per Clean before any of the log's locks is taken.
	CleanLimit func() int64
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
	// Cleanup is what happens to old records (cleanup.policy). Default
	// Delete.
	Cleanup CleanupPolicy
	// DeleteRetention is how long a tombstone (a record with a key and a
	// nil value) outlives its timestamp in a compacted log, so that readers
	// see the deletion (delete.retention.ms). Default 1 day.
	DeleteRetention time.Duration
	// MinCompactionLag keeps records younger than this out of compaction
	// (min.compaction.lag.ms). Default 0.
	MinCompactionLag time.Duration
	// MaxCompactionLag makes a log eligible for cleaning, whatever its
	// dirty ratio, once a dirty record is older than this
	// (max.compaction.lag.ms). Default: no limit.
	MaxCompactionLag time.Duration
	// MinCleanableDirtyRatio is the share of the cleanable part of the log
	// not yet cleaned above which Clean does its work
	// (min.cleanable.dirty.ratio). Default 0.5.
	MinCleanableDirtyRatio float64
	// CleanerBufferBytes bounds the memory of the key map one clean builds
	// (24 bytes a key); a log with more distinct dirty keys is cleaned in
	// several passes (log.cleaner.dedupe.buffer.size). Default 32 MiB.
	CleanerBufferBytes int
	// Logger receives warnings about recovery and failures. Default: none.
	Logger *slog.Logger
	// FlushTimes, if set, records how long each fsync of the log's data
	// took (log.flush's latency; several logs may share one).
	FlushTimes *stats.Histogram
	// FS is the file layer the log's files go through. Default: the
	// operating system's. Tests of the layers above inject faults through
	// it (a full disk, a failing fsync); vfs is internal to this module.
	FS vfs.FS
	// Scheduler runs the log's background work: the Interval flush,
	// checkpoints and retention. Many logs share one, so that each open
	// log costs no goroutine. Default: one the package shares between the
	// logs opened without one.
	Scheduler *Scheduler
	// Files, if set, bounds the segment files open at once across the
	// logs that share it: a segment's .log file opens on first use and
	// may be closed while not in use (see FilePool). Durability does not
	// change: a file with writes not yet fsynced is fsynced before it is
	// closed, and a failure then fails the log's next flush as a failed
	// fsync would. Default nil: every segment keeps its file open while
	// the log is open (a process with many partitions then needs as many
	// file descriptors as segments).
	Files *FilePool
	// DirLocked says that the caller holds a lock that excludes every
	// other process from the log's directory - as a Broker's lock on its
	// data directory does for the partitions under it - and opens the
	// directory in at most one Log at a time. Open then takes no lock of
	// its own (an flock on <dir>/.lock, held open while the log is), which
	// spares each of many partitions a file descriptor. Default false:
	// Open locks the directory, and fails if another Log holds it.
	DirLocked bool

	fs  vfs.FS           // FS or the default; this package's tests may set it directly
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
	if o.Cleanup < Delete || o.Cleanup > CompactDelete {
		return o, fmt.Errorf("log: cleanup policy %d", o.Cleanup)
	}
	if o.DeleteRetention == 0 {
		o.DeleteRetention = DefaultDeleteRetention
	}
	if o.MaxCompactionLag <= 0 {
		o.MaxCompactionLag = math.MaxInt64
	}
	if o.MinCleanableDirtyRatio == 0 {
		o.MinCleanableDirtyRatio = DefaultDirtyRatio
	}
	if o.MinCleanableDirtyRatio < 0 || o.MinCleanableDirtyRatio > 1 {
		return o, fmt.Errorf("log: MinCleanableDirtyRatio %v out of [0, 1]", o.MinCleanableDirtyRatio)
	}
	if o.CleanerBufferBytes == 0 {
		o.CleanerBufferBytes = DefaultCleanerBufferBytes
	}
	if o.CleanerBufferBytes < 1024 {
		return o, fmt.Errorf("log: CleanerBufferBytes %d is too small", o.CleanerBufferBytes)
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.fs == nil {
		o.fs = o.FS
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.Scheduler == nil {
		o.Scheduler = defaultScheduler
	}
	return o, nil
}

func (o Options) segmentOptions() segment.Options {
	return segment.Options{FS: o.fs, IndexIntervalBytes: o.IndexIntervalBytes, IndexMaxBytes: o.IndexMaxBytes, Files: o.Files}
}

// FilePool bounds the segment files open at once across the logs that
// share it (Options.Files): at most its limit, plus the files in use at that
// moment (a read, a write, an fsync, a sendfile in flight), which are never
// closed under their user. Files not in use are closed least recently used
// first, and reopened on their next use. Its Stats say how many are open.
type FilePool = vfs.FilePool

// NewFilePool returns a FilePool that keeps at most limit files open while
// they are not in use; limit is at least 1.
func NewFilePool(limit int) *FilePool { return vfs.NewFilePool(limit) }
