// Package index implements a log segment's two sparse indexes, in Kafka's
// file formats: the offset index (.index) maps offsets to byte positions in
// the segment's .log file, and the time index (.timeindex) maps timestamps to
// offsets. Both are arrays of fixed-size big-endian entries, memory-mapped
// and searched by binary search.
//
// # Offset index (.index), 8-byte entries
//
//	+----------------------------+----------------------------+
//	| relative offset  uint32    | position  uint32           |
//	+----------------------------+----------------------------+
//
// relative offset = the last offset of a batch minus the segment's base
// offset; position = the byte position of that batch in the .log file.
// Entries strictly increase in both fields.
//
// # Time index (.timeindex), 12-byte entries
//
//	+-----------------------------------+----------------------+
//	| timestamp  int64 (Unix ms)        | relative offset      |
//	|                                   | uint32               |
//	+-----------------------------------+----------------------+
//
// timestamp = the greatest record timestamp in the segment so far; relative
// offset = the last offset of the batch that carried it. Timestamps strictly
// increase; offsets never decrease.
//
// # Sparseness, growth and trimming
//
// The segment adds an entry only every IndexIntervalBytes of log (4 KiB by
// default), so a lookup lands on a batch near the target and the log is
// scanned forward from there.
//
// A writable index is mapped at its maximum size (IndexMaxBytes, 10 MiB by
// default) - address space only - but its file holds disk blocks only for
// the entries written so far and the rest of the step that made room for
// them. The file grows by fallocate before an entry beyond it is written:
// 4 KiB first, then doubling up to steps of 1 MiB, to at most the maximum.
// A full disk thus fails the growth, and with it the append, with an error
// (nothing written), instead of killing the process with SIGBUS on a write
// through the map to a page with no block behind it. An open partition's
// idle segment costs a step per index, not its maximum.
//
//	0                  n*size                file size          maximum
//	+------------------+---------------------+- - - - - - - - - - - - +
//	| e0 e1 ... e(n-1) | 0 0 0 0 ... 0 0 0 0 |  mapped, no file behind  |
//	+------------------+---------------------+- - - - - - - - - - - - +
//	   the entries       rest of the last       never touched
//	                     growth step
//
// An open index holds no file descriptor: the map keeps the file, and the
// rare operations that need a descriptor - a growth, a trim, a sync - open
// the file again by path for the call (and refuse, with ErrReopen, when
// the path names another file). A process can keep many idle segments
// open without two descriptors each.
//
// When a segment is sealed or closed cleanly the file is trimmed - cut to
// its entries. Maps are advised for random access (MADV_RANDOM on Linux):
// lookups are binary searches, and readahead would only read pages nobody
// asked for.
//
// # Trust
//
// Indexes are hints. Every size an index file has is whole entries, and its
// contents are a run of in-order entries followed by nothing but zero bytes:
// none after a trim, the unwritten rest of a growth step after a crash or
// while the log is open (Untrimmed). A file that breaks that rule - a size
// that is not whole entries, an entry out of order, a non-zero byte in the
// zeros after the run (a flipped bit) - is reported as corrupt (ErrCorrupt)
// so the segment can rebuild it from the log; and a reader never trusts an
// entry without checking the batch header it points at.
package index
