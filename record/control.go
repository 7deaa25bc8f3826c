package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// Control batches (KIP-98).
//
// A transaction ends with a control batch in every partition it wrote: a
// batch with the transactional and control attribute bits set (0x30), the
// transaction's producer id and epoch, base sequence -1 and one record,
// the end transaction marker:
//
//	key:   version int16 (0) | type int16      0 ABORT, 1 COMMIT
//	value: version int16 (0) | coordinatorEpoch int32
//
// Kafka's ControlRecordType and EndTransactionMarker. Types 2-6 are
// KRaft's own control records; spool writes and accepts only ABORT and
// COMMIT in a partition log. A reader must never hand a control record
// to an application: it marks where a transaction ended.

// ControlType is a control record's type: the int16 in its key.
type ControlType int16

// Control record types of an end transaction marker.
const (
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

// String names the type as Kafka does.
func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "ABORT"
	case ControlCommit:
		return "COMMIT"
	}
	return fmt.Sprintf("UNKNOWN(%d)", int16(t))
}

// ErrBadControlRecord means a control batch or record that is not an end
// transaction marker spool understands: a key or value of the wrong size
// or version, an unknown type, or a control batch that does not hold
// exactly one such record. It wraps ErrCorrupt.
var ErrBadControlRecord = fmt.Errorf("%w: bad control record", ErrCorrupt)

// controlKeySize and markerValueSize are the sizes of a version 0 control
// record key and end transaction marker value.
const (
	controlKeySize  = 4
	markerValueSize = 6
)

// ControlRecord is a decoded end transaction marker.
type ControlRecord struct {
	// Type is ControlAbort or ControlCommit.
	Type ControlType
	// CoordinatorEpoch is the epoch of the transaction coordinator that
	// wrote the marker: the leader epoch of its __transaction_state
	// partition. A partition refuses markers from an older one.
	CoordinatorEpoch int32
}

// ParseControlRecord decodes a control record's key and value as an end
// transaction marker. Anything else - a wrong size, a version other than
// 0, a type other than ABORT or COMMIT - is an error wrapping
// ErrBadControlRecord.
func ParseControlRecord(key, value []byte) (ControlRecord, error) {
	if len(key) != controlKeySize {
		return ControlRecord{}, fmt.Errorf("%w: key of %d bytes, want %d", ErrBadControlRecord, len(key), controlKeySize)
	}
	if v := int16(binary.BigEndian.Uint16(key)); v != 0 {
		return ControlRecord{}, fmt.Errorf("%w: key version %d", ErrBadControlRecord, v)
	}
	t := ControlType(binary.BigEndian.Uint16(key[2:]))
	if t != ControlAbort && t != ControlCommit {
		return ControlRecord{}, fmt.Errorf("%w: type %d is not an end transaction marker", ErrBadControlRecord, int16(t))
	}
	// Kafka reads the value's version and then the fields it knows, so a
	// later version may append fields; version 0 is exactly 6 bytes.
	if len(value) < markerValueSize {
		return ControlRecord{}, fmt.Errorf("%w: value of %d bytes, want %d", ErrBadControlRecord, len(value), markerValueSize)
	}
	if v := int16(binary.BigEndian.Uint16(value)); v != 0 {
		return ControlRecord{}, fmt.Errorf("%w: value version %d", ErrBadControlRecord, v)
	}
	if len(value) != markerValueSize {
		return ControlRecord{}, fmt.Errorf("%w: version 0 value of %d bytes, want %d", ErrBadControlRecord, len(value), markerValueSize)
	}
	return ControlRecord{Type: t, CoordinatorEpoch: int32(binary.BigEndian.Uint32(value[2:]))}, nil
}

// ParseControlBatch decodes the marker a control batch holds. The batch is
// verified (CRC, framing) and must be a control batch with the
// transactional bit set and exactly one record that ParseControlRecord
// accepts; anything else is an error wrapping ErrCorrupt (ErrBadControlRecord
// for a batch that verifies but is no marker).
func ParseControlBatch(b Batch) (ControlRecord, error) {
	if b.IsZero() {
		return ControlRecord{}, fmt.Errorf("%w: empty batch", ErrCorrupt)
	}
	if !b.IsControl() || !b.IsTransactional() {
		return ControlRecord{}, fmt.Errorf("%w: attributes %#x are not those of a transaction marker", ErrBadControlRecord, b.Attributes())
	}
	if b.NumRecords() != 1 || b.LastOffsetDelta() != 0 {
		return ControlRecord{}, fmt.Errorf("%w: %d records, a marker has one", ErrBadControlRecord, b.NumRecords())
	}
	var it Iterator
	it.Reset(b)
	if !it.Next() {
		if err := it.Err(); err != nil {
			return ControlRecord{}, err
		}
		return ControlRecord{}, fmt.Errorf("%w: no record", ErrBadControlRecord)
	}
	r := it.Record()
	cr, err := ParseControlRecord(r.Key, r.Value)
	if err != nil {
		return ControlRecord{}, err
	}
	if it.Next() || it.Err() != nil {
		if err := it.Err(); err != nil {
			return ControlRecord{}, err
		}
		return ControlRecord{}, fmt.Errorf("%w: more than one record", ErrBadControlRecord)
	}
	return cr, nil
}

// NewControlBatch encodes an end transaction marker for producer id pid
// at epoch, as a transaction coordinator has partition leaders write it
// (Kafka's WriteTxnMarkers): attributes 0x30, base sequence -1, one record
// whose key says ABORT or COMMIT and whose value carries the coordinator
// epoch, timestamped now. Base offset 0 and leader epoch -1, for the log
// to stamp. A negative pid or epoch, or a type other than ABORT or
// COMMIT, is an error wrapping ErrBadControlRecord.
func NewControlBatch(pid int64, epoch int16, typ ControlType, coordinatorEpoch int32, now time.Time) (Batch, error) {
	if pid < 0 || epoch < 0 {
		return Batch{}, fmt.Errorf("%w: producer id %d, epoch %d", ErrBadControlRecord, pid, epoch)
	}
	if typ != ControlAbort && typ != ControlCommit {
		return Batch{}, fmt.Errorf("%w: type %d is not an end transaction marker", ErrBadControlRecord, int16(typ))
	}
	key := binary.BigEndian.AppendUint16(make([]byte, 2, controlKeySize), uint16(typ))
	value := binary.BigEndian.AppendUint32(make([]byte, 2, markerValueSize), uint32(coordinatorEpoch))
	if now.IsZero() {
		now = time.Now()
	}
	buf, err := AppendBatch(nil, []Record{{Key: key, Value: value, Timestamp: now}}, BatchOptions{
		Producer:      &ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: -1},
		Transactional: true,
	})
	if err != nil {
		return Batch{}, err
	}
	attrs := binary.BigEndian.Uint16(buf[offAttributes:]) | attrControl
	binary.BigEndian.PutUint16(buf[offAttributes:], attrs)
	binary.BigEndian.PutUint32(buf[offCRC:], crc32.Checksum(buf[offAttributes:], castagnoli))
	b, _, err := ParseBatch(buf)
	return b, err
}
