// Package segment implements one segment of a partition's log: a .log file
// of record batches, the two sparse indexes that find things in it, and
// the index of the transactions aborted in it.
//
// # Files
//
// A segment is named by its base offset, the offset of its first record,
// zero-padded to 20 digits:
//
//	00000000000000368769.log        record batches, back to back
//	00000000000000368769.index      offset -> position   (package index)
//	00000000000000368769.timeindex  timestamp -> offset  (package index)
//	00000000000000368769.txnindex   aborted transactions (see txnindex.go)
//
// The .log file is nothing but Kafka RecordBatch v2 bytes (package record),
// exactly as they arrived and as a fetch sends them:
//
//	position 0          p1                 p2                     size
//	+-------------------+------------------+-- ... --+-----------+
//	| batch             | batch            |         | batch     |
//	| offsets b..b+k    | offsets ..       |         | .. next-1 |
//	+-------------------+------------------+-- ... --+-----------+
//
// Each batch starts with its base offset (8 bytes) and length (4 bytes), so
// the file can be walked header to header without decoding records. Offsets
// increase strictly from batch to batch; after compaction there may be gaps.
//
// # Finding an offset
//
// Find looks the offset up in the offset index (the last indexed batch at or
// before it), then walks batch headers forward from that position to the
// first batch whose last offset is >= the target. Index entries are hints:
// the header at an entry's position must agree with the entry, or the walk
// starts from the beginning of the file and the index is rebuilt.
//
// # Recovery
//
// Recover validates every batch from a position to the end of the file -
// framing, magic, CRC-32C, offsets increasing and within the segment - and
// rebuilds the index entries past that position. It reports the first
// invalid batch; the log decides whether to truncate there (a torn tail
// after a crash) or to refuse (damage in the middle of acknowledged data).
//
// Index files grow in steps as entries arrive, up to IndexMaxBytes (package
// index). A segment being created gets the first step of each or fails (a
// full disk is an error). Before each append the indexes are grown, if
// need be, to hold what the append and a later seal may add: a full disk
// fails the append there, before anything is written, and the segment
// stays as it was. A segment being reopened, recovered or re-indexed
// allocates nothing up front: its indexes take what its data needs as the
// entries are rebuilt, so recovery never needs much more free space than
// the data already holds.
//
// # Concurrency
//
// One writer (the log, under its lock) appends, truncates and seals. Readers
// run concurrently without locks: the written size and the committed size
// (what readers may see) are published atomically after the bytes are
// written. Readers hold a reference (Acquire/Release) so a segment deleted by
// retention stays open until the last reader lets go.
//
// # Open files
//
// With a file pool (Options.Files) a segment's .log file is open only while
// it is used or the pool has room for it: every read, write, fsync and
// truncation takes the file for its duration (an atomic count; the pool
// never closes a file in use), and AcquireFile holds it for a zero-copy
// send. A sealed segment opened read-only opens its file on first use. The
// pool closes a file with writes not yet fsynced only after fsyncing it,
// and a failure there is the segment's sticky fsync error (see Sync). Before
// a segment's path is removed or given to another file (Delete, a
// compaction's swap: HoldOpen) its file is opened and kept until the
// segment closes, so a reader never opens whatever the path names next.
package segment
