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
// # Sparseness, preallocation and trimming
//
// The segment adds an entry only every IndexIntervalBytes of log (4 KiB by
// default), so a lookup lands on a batch near the target and the log is
// scanned forward from there. A writable index file is allocated to its
// maximum size with real disk blocks (fallocate) before it is mapped: a full
// disk then fails the allocation with an error rather than killing the
// process with SIGBUS on a later write through the map. When a segment is
// sealed or closed cleanly the file is trimmed to its entries. Maps are
// advised for random access (MADV_RANDOM on Linux): lookups are binary
// searches, and readahead into preallocated blocks would only zero-fill
// pages nobody reads.
//
// # Trust
//
// Indexes are hints. A file whose size is not a whole number of entries, or
// whose entries are out of order, is reported as corrupt (ErrCorrupt) so the
// segment can rebuild it from the log; a reader never trusts an entry without
// checking the batch header it points at. An index left at full size by a
// crash is read up to its last in-order entry (the zeros beyond it are never
// in order).
package index
