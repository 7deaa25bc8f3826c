// Package record implements Kafka's record batch (message format v2, "magic
// 2"): the unit spool writes to disk, sends over the network and verifies.
//
// A Batch is the bytes of one RecordBatch exactly as Kafka puts them on the
// wire and in its .log files. Its header fields are read in place, without
// copying or decoding (zero-copy accessors); its records are decoded by an
// Iterator, which first checks the CRC, so a corrupt byte is never returned as
// record data.
//
// # Batch layout
//
// All integers are big-endian. Offsets are byte positions inside the batch.
//
//	 0                   8        12                16 17        21
//	+-------------------+--------+-----------------+--+---------+
//	| baseOffset int64  | length | partitionLeader |m | crc     |
//	|                   | int32  | Epoch int32     |a | uint32  |
//	+-------------------+--------+-----------------+--+---------+
//	21       23                27                  35
//	+--------+-----------------+-------------------+
//	| attrs  | lastOffsetDelta | firstTimestamp    |
//	| int16  | int32           | int64             |
//	+--------+-----------------+-------------------+
//	35                  43                  51       53          57       61
//	+-------------------+-------------------+--------+-----------+--------+
//	| maxTimestamp      | producerId int64  | prod.  | baseSeq.  | count  |
//	| int64             |                   | epoch  | int32     | int32  |
//	+-------------------+-------------------+--------+-----------+--------+
//	61
//	+--------------------------------------------------------------------+
//	| records: count records, compressed as one block by attrs' codec    |
//	+--------------------------------------------------------------------+
//
// length counts the bytes after the length field (size - 12). magic is 2.
// The CRC is CRC-32C (Castagnoli) over the bytes from attrs to the end, so
// baseOffset and partitionLeaderEpoch, which a broker assigns, can be stamped
// into a batch without recomputing it.
//
// attrs: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3
// timestamp type (0 create time, 1 log-append time), bit 4 transactional, bit
// 5 control batch, bit 6 delete horizon set (compaction).
//
// # Record layout
//
// Inside the (decompressed) records block each record is:
//
//	length          varint  bytes that follow
//	attributes      int8    unused, 0
//	timestampDelta  varlong from firstTimestamp, in milliseconds
//	offsetDelta     varint  from baseOffset
//	keyLength       varint  -1 for a null key
//	key             bytes
//	valueLength     varint  -1 for a null value (a tombstone)
//	value           bytes
//	headerCount     varint
//	headers         headerCount × (keyLength varint, key, valueLength varint, value)
//
// Varints are zig-zag encoded, as in protocol buffers' sint32/sint64.
//
// # Compression
//
// gzip, snappy, lz4 and zstd compress the records block as a whole. Snappy is
// written as a raw block; the "xerial" framing the Java client writes is also
// read. LZ4 is the LZ4 frame format. Decompression is capped (see
// Iterator.MaxUncompressedBytes) so a small batch cannot expand into
// unbounded memory.
package record
