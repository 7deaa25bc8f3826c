package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// Batch header geometry. The names are those of Kafka's DefaultRecordBatch.
const (
	// HeaderSize is the size of a batch header: the batch holds its records
	// after these bytes.
	HeaderSize = 61
	// LogOverhead is the size of the baseOffset and length fields, the part
	// of a batch that length does not count.
	LogOverhead = 12
	// Magic is the message format version this package reads and writes.
	Magic = 2

	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	attrCodecMask         = 0x07
	attrLogAppendTime     = 0x08
	attrTransactional     = 0x10
	attrControl           = 0x20
	attrDeleteHorizonMask = 0x40
)

// NoTimestamp is Kafka's "no timestamp" value (-1) for a timestamp field.
const NoTimestamp int64 = -1

// Sentinel errors. Errors returned by this package wrap one of them, with
// details, and are tested with errors.Is.
var (
	// ErrCorrupt means bytes are not a valid batch: a wrong magic byte, a
	// length out of range, a CRC mismatch, or records that do not parse.
	ErrCorrupt = errors.New("record: corrupt batch")
	// ErrTruncated means the buffer ends before the batch it starts does.
	ErrTruncated = errors.New("record: truncated batch")
	// ErrRecordTooLarge means a batch or record exceeds a configured limit.
	ErrRecordTooLarge = errors.New("record: too large")
	// ErrUnsupportedCodec means a compression codec this package does not
	// know (attribute values 5-7).
	ErrUnsupportedCodec = errors.New("record: unsupported compression codec")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch is one Kafka RecordBatch (v2) as bytes. Accessors read header fields
// in place. A Batch made by ParseBatch is at least HeaderSize long and exactly
// as long as its length field says, so no accessor can fail; its CRC and its
// records are checked by Verify and by an Iterator.
//
// A Batch aliases the memory it was parsed from.
type Batch struct {
	b []byte
	// crcChecked: CheckCRC found the CRC to match, so Verify need not
	// compute it again. Only CheckCRC sets it; every other way of making
	// a Batch leaves it false.
	crcChecked bool
}

// ParseBatch returns the batch at the start of buf and its size in bytes. It
// checks only framing: that buf holds a whole header and as many bytes as the
// length field claims, that the length is at least a header's and the magic
// byte is 2. It returns an error wrapping ErrTruncated when buf is shorter than
// the batch (more bytes may complete it), and ErrCorrupt when the framing is
// impossible. The CRC is not checked: see Verify.
func ParseBatch(buf []byte) (Batch, int, error) {
	if len(buf) < LogOverhead {
		return Batch{}, 0, fmt.Errorf("%w: %d bytes, need %d for the length field", ErrTruncated, len(buf), LogOverhead)
	}
	length := int32(binary.BigEndian.Uint32(buf[offLength:]))
	if length < HeaderSize-LogOverhead {
		return Batch{}, 0, fmt.Errorf("%w: length %d is less than a header (%d)", ErrCorrupt, length, HeaderSize-LogOverhead)
	}
	size := int(length) + LogOverhead
	if len(buf) <= offMagic {
		return Batch{}, 0, fmt.Errorf("%w: %d bytes, need %d for the header", ErrTruncated, len(buf), HeaderSize)
	}
	if m := buf[offMagic]; m != Magic {
		return Batch{}, 0, fmt.Errorf("%w: magic %d, want %d", ErrCorrupt, int8(m), Magic)
	}
	if len(buf) < size {
		return Batch{}, 0, fmt.Errorf("%w: %d bytes, batch is %d", ErrTruncated, len(buf), size)
	}
	return Batch{b: buf[:size:size]}, size, nil
}

// PeekHeader reads the base offset and size of the batch that starts at
// the beginning of hdr, which needs only LogOverhead bytes. It checks the
// length is at least a header's; it does not check the magic byte.
func PeekHeader(hdr []byte) (baseOffset int64, size int, err error) {
	if len(hdr) < LogOverhead {
		return 0, 0, fmt.Errorf("%w: %d bytes, need %d", ErrTruncated, len(hdr), LogOverhead)
	}
	length := int32(binary.BigEndian.Uint32(hdr[offLength:]))
	if length < HeaderSize-LogOverhead {
		return 0, 0, fmt.Errorf("%w: length %d is less than a header (%d)", ErrCorrupt, length, HeaderSize-LogOverhead)
	}
	return int64(binary.BigEndian.Uint64(hdr)), int(length) + LogOverhead, nil
}

// Bytes returns the batch's bytes. They alias the batch.
func (b Batch) Bytes() []byte { return b.b }

// Size is the batch's size in bytes, header included.
func (b Batch) Size() int { return len(b.b) }

// IsZero reports whether b is the zero Batch (not parsed from anything).
func (b Batch) IsZero() bool { return b.b == nil }

// BaseOffset is the offset of the batch's first record.
func (b Batch) BaseOffset() int64 { return int64(binary.BigEndian.Uint64(b.b[offBaseOffset:])) }

// SetBaseOffset stamps the base offset. The CRC does not cover it.
func (b Batch) SetBaseOffset(off int64) { binary.BigEndian.PutUint64(b.b[offBaseOffset:], uint64(off)) }

// Length is the batch's length field: its size less LogOverhead.
func (b Batch) Length() int32 { return int32(binary.BigEndian.Uint32(b.b[offLength:])) }

// PartitionLeaderEpoch is the leader epoch of the replica that appended the
// batch, or -1.
func (b Batch) PartitionLeaderEpoch() int32 {
	return int32(binary.BigEndian.Uint32(b.b[offLeaderEpoch:]))
}

// SetPartitionLeaderEpoch stamps the leader epoch. The CRC does not cover it.
func (b Batch) SetPartitionLeaderEpoch(epoch int32) {
	binary.BigEndian.PutUint32(b.b[offLeaderEpoch:], uint32(epoch))
}

// Magic is the format version byte; always 2 for a parsed batch.
func (b Batch) Magic() int8 { return int8(b.b[offMagic]) }

// CRC is the stored CRC-32C.
func (b Batch) CRC() uint32 { return binary.BigEndian.Uint32(b.b[offCRC:]) }

// ComputeCRC computes the CRC-32C of the bytes the CRC covers.
func (b Batch) ComputeCRC() uint32 { return crc32.Checksum(b.b[offAttributes:], castagnoli) }

// CheckCRC computes the batch's CRC-32C and, if it matches the header's,
// returns the batch marked as checked: Verify of the returned batch, and
// an Iterator reset to it, then check everything else but do not compute
// the CRC again. A batch checked where it arrives (a Kafka server's
// produce handler) is so checksummed once, not once there and once more
// by the log that validates it. The mark vouches for the bytes as they
// were: the holder must not change the bytes the CRC covers afterwards
// (SetBaseOffset and SetPartitionLeaderEpoch change none). A mismatch is
// an error wrapping ErrCorrupt.
func (b Batch) CheckCRC() (Batch, error) {
	if len(b.b) < HeaderSize {
		return b, fmt.Errorf("%w: %d bytes is less than a header", ErrCorrupt, len(b.b))
	}
	if got, want := b.ComputeCRC(), b.CRC(); got != want {
		return b, fmt.Errorf("%w: crc32c is %08x, header says %08x", ErrCorrupt, got, want)
	}
	b.crcChecked = true
	return b, nil
}

// Attributes is the raw attributes field.
func (b Batch) Attributes() int16 { return int16(binary.BigEndian.Uint16(b.b[offAttributes:])) }

// Compression is the codec the records are compressed with.
func (b Batch) Compression() Codec { return Codec(b.Attributes() & attrCodecMask) }

// LogAppendTime reports whether the timestamps are the broker's append time
// rather than the producer's create time.
func (b Batch) LogAppendTime() bool { return b.Attributes()&attrLogAppendTime != 0 }

// IsTransactional reports whether the batch belongs to a transaction.
func (b Batch) IsTransactional() bool { return b.Attributes()&attrTransactional != 0 }

// IsControl reports whether the batch holds a transaction control record.
func (b Batch) IsControl() bool { return b.Attributes()&attrControl != 0 }

// HasDeleteHorizon reports whether the compactor set a delete horizon in the
// first-timestamp field.
func (b Batch) HasDeleteHorizon() bool { return b.Attributes()&attrDeleteHorizonMask != 0 }

// LastOffsetDelta is the offset of the last record relative to the base.
func (b Batch) LastOffsetDelta() int32 {
	return int32(binary.BigEndian.Uint32(b.b[offLastOffsetDelta:]))
}

// LastOffset is the offset of the batch's last record.
func (b Batch) LastOffset() int64 { return b.BaseOffset() + int64(b.LastOffsetDelta()) }

// NextOffset is the offset just after the batch.
func (b Batch) NextOffset() int64 { return b.LastOffset() + 1 }

// FirstTimestamp is the timestamp (Unix milliseconds) the record timestamp
// deltas are relative to.
func (b Batch) FirstTimestamp() int64 { return int64(binary.BigEndian.Uint64(b.b[offFirstTimestamp:])) }

// MaxTimestamp is the greatest record timestamp in the batch (Unix
// milliseconds), or NoTimestamp.
func (b Batch) MaxTimestamp() int64 { return int64(binary.BigEndian.Uint64(b.b[offMaxTimestamp:])) }

// ProducerID is the idempotent producer's id, or -1.
func (b Batch) ProducerID() int64 { return int64(binary.BigEndian.Uint64(b.b[offProducerID:])) }

// ProducerEpoch is the idempotent producer's epoch, or -1.
func (b Batch) ProducerEpoch() int16 { return int16(binary.BigEndian.Uint16(b.b[offProducerEpoch:])) }

// BaseSequence is the producer's sequence number of the first record, or -1.
func (b Batch) BaseSequence() int32 { return int32(binary.BigEndian.Uint32(b.b[offBaseSequence:])) }

// NumRecords is the record count field.
func (b Batch) NumRecords() int32 { return int32(binary.BigEndian.Uint32(b.b[offRecordCount:])) }

// Verify checks what can be checked without decoding records: the magic
// byte, the length against the slice, the CRC-32C, and that the header's
// offsets and count are consistent (a non-negative last offset delta, a count
// no greater than the offsets the batch spans, no int64 overflow of the last
// offset). Errors wrap ErrCorrupt.
func (b Batch) Verify() error {
	if len(b.b) < HeaderSize {
		return fmt.Errorf("%w: %d bytes is less than a header", ErrCorrupt, len(b.b))
	}
	if int(b.Length())+LogOverhead != len(b.b) {
		return fmt.Errorf("%w: length field %d does not match %d bytes", ErrCorrupt, b.Length(), len(b.b))
	}
	if b.Magic() != Magic {
		return fmt.Errorf("%w: magic %d, want %d", ErrCorrupt, b.Magic(), Magic)
	}
	if b.crcChecked {
		// CheckCRC computed it on these bytes.
	} else if got, want := b.ComputeCRC(), b.CRC(); got != want {
		return fmt.Errorf("%w: crc32c is %08x, header says %08x", ErrCorrupt, got, want)
	}
	return VerifyHeader(b.b[:HeaderSize], len(b.b))
}

// VerifyHeader checks the fields of a batch header (its first HeaderSize
// bytes) for consistency with each other and with the batch's size: what
// Verify checks besides the framing and the CRC. It lets a caller that
// checks the CRC of a large batch piece by piece check the rest without
// holding the whole batch.
func VerifyHeader(hdr []byte, size int) error {
	if len(hdr) < HeaderSize {
		return fmt.Errorf("%w: %d bytes is less than a header", ErrCorrupt, len(hdr))
	}
	return Batch{b: hdr}.checkHeader(size)
}

// checkHeader checks the header fields for consistency; size is the whole
// batch's size.
func (b Batch) checkHeader(size int) error {
	delta, count := b.LastOffsetDelta(), b.NumRecords()
	if delta < 0 {
		return fmt.Errorf("%w: negative last offset delta %d", ErrCorrupt, delta)
	}
	if count < 0 || int64(count) > int64(delta)+1 {
		return fmt.Errorf("%w: record count %d with last offset delta %d", ErrCorrupt, count, delta)
	}
	if base := b.BaseOffset(); base < 0 || base > math.MaxInt64-int64(delta) {
		return fmt.Errorf("%w: base offset %d with last offset delta %d is out of range", ErrCorrupt, base, delta)
	}
	if c := b.Compression(); c > ZSTD {
		return fmt.Errorf("%w: %w %d", ErrCorrupt, ErrUnsupportedCodec, c)
	}
	if b.Compression() == None && count > 0 && int64(size-HeaderSize) < int64(count)*minRecordSize {
		return fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrCorrupt, count, size-HeaderSize)
	}
	return nil
}

// minRecordSize is the smallest encoded record: a 1-byte length and six
// 1-byte fields (attributes, timestamp delta, offset delta, key length, value
// length, header count).
const minRecordSize = 7

// String describes the batch header, for logs and tools.
func (b Batch) String() string {
	if len(b.b) < HeaderSize {
		return fmt.Sprintf("Batch(%d bytes, short)", len(b.b))
	}
	return fmt.Sprintf("Batch(offsets %d-%d, %d records, %d bytes, %s, epoch %d)",
		b.BaseOffset(), b.LastOffset(), b.NumRecords(), len(b.b), b.Compression(), b.PartitionLeaderEpoch())
}

// millis converts a time to Unix milliseconds; the zero time is NoTimestamp.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return NoTimestamp
	}
	return t.UnixMilli()
}

// TimeOf converts Unix milliseconds to a time; NoTimestamp (or any negative
// value) is the zero time.
func TimeOf(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
