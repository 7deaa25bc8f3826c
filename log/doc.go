// Package log implements one partition's durable log: a directory of
// segments (package segment) that grows at the end, is read from anywhere
// by offset, and is trimmed at the start by retention.
//
// # Directory
//
//	<dir>/
//	  .lock                          flock: one process per directory
//	  checkpoint                     recovery point, log start offset, clean flag
//	  00000000000000000000.log       segment: RecordBatch v2 bytes
//	  00000000000000000000.index     its offset index
//	  00000000000000000000.timeindex its time index
//	  00000000000000368769.log       the next segment, and so on
//	  ...
//
// Offsets are assigned by the log: dense, strictly increasing, never
// reused. A batch's records have consecutive offsets. The last segment is
// the active one; the others are sealed and never change again (retention
// deletes them whole).
//
// # Appending
//
// Append encodes records into one batch; AppendBatch takes a batch a Kafka
// producer encoded, after checking it (framing, CRC-32C, header fields, every
// record). Either way the log stamps the base offset (the CRC does not cover
// it) and writes the batch at the end of the active segment, rolling to a
// new segment when the batch does not fit in SegmentBytes, the indexes are
// full, or the segment is older than SegmentAge. Appends are serialised; one
// write system call each.
//
// # Durability
//
// The FlushPolicy decides when an append is on stable storage:
//
//	Sync         the append returns after fsync. Appends that arrive while
//	             an fsync runs share the next one (group commit), so many
//	             concurrent appenders cost few fsyncs. The default.
//	Interval(d)  fsync in the background every d (Kafka's flush.ms).
//	None         never fsync on the write path: the page cache holds the data
//	             (Kafka's default, relying on replication).
//
// Readers see only committed data: under Sync, what is on stable storage;
// otherwise, what has been written. New segment files and deletions are made
// durable with an fsync of the directory. A failed write or fsync is fatal:
// the log refuses every later write (ErrFailed) until it is reopened, because
// after a failed fsync the kernel may have dropped the data while a retried
// fsync reports success.
//
// # Recovery
//
// The checkpoint file records the recovery point - the offset, segment and
// byte position before which every batch and index entry is on stable
// storage - and whether the log was closed cleanly. It is rewritten
// atomically with its own CRC when a segment rolls, every
// CheckpointInterval, on Sync and on Close.
//
// The clean mark is not taken down when a log opens: Open keeps the clean
// close's checkpoint while the files are exactly as it describes them, and
// replaces it with one that says "not closed cleanly", durably, before the
// first change to them - an append, a roll, a truncation, a reset, a
// deletion by retention or DeleteRecordsBefore, a compaction's swap, a
// .txnindex entry written or cut. So a crash never leaves a clean mark
// over files it does not describe, and opening and closing a log nobody
// wrote to costs no fsync at all (a Close that finds the mark still there
// has nothing to record).
//
// A log runs no goroutine of its own. Its background work - the Interval
// flush, the checkpoints, retention - is jobs it registers with a
// Scheduler (Options.Scheduler; by default one the package shares), which
// runs the jobs of all its logs on one timer goroutine and a few workers,
// one job of a log at a time. A checkpoint of a log that has not changed
// since the last one does nothing, so idle logs cost neither goroutines
// nor I/O, however many are open.
//
// Opening a log that was closed cleanly checks nothing: the sealed segments'
// indexes load on first use (two header reads confirm each) and the active
// segment resumes from its last index entry. After a crash, Open checks
// every batch from the recovery point on - length, magic, CRC-32C, offsets
// increasing - and rebuilds the index entries there; how long that takes is
// proportional to what was written since the last checkpoint, not to the
// size of the log.
//
// An invalid batch at the end of the last segment, with nothing valid after
// it, is a torn write from the crash: it and what follows are cut off. An
// invalid batch with valid batches after it is damage inside data that may
// have been acknowledged: under Sync, Open refuses with an error naming the
// file and position (see `spool check`); under None and Interval it is cut,
// with everything after it, as Kafka does, and reported in RecoveryInfo and
// the log. Damage found later by a read (a bit flip in a sealed segment) is
// returned as an error wrapping ErrCorrupt, never as data: a read returns
// the batches before the damaged one, and one that begins with it fails.
// Span.Verify checks a zero-copy span the same way before it is sent. The
// log remembers the damage reads find - logged and counted once (Stats),
// and reported by Damage, where a replica cuts its log to copy the batches
// again from a healthy one.
//
// # Reading
//
// Read returns whole batches from the one holding an offset; a Reader
// follows the log and waits for new batches. Readers take no lock: the
// segment list is an immutable snapshot swapped atomically, and segments are
// reference counted, so retention can delete a segment a reader is using
// (the reader finishes with the unlinked file).
package log
