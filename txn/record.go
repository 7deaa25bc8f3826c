package txn

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file is the codec of StateTopic records, Kafka's TransactionLogKey
// and TransactionLogValue (drawn in the package documentation). Decoding
// never trusts a length: every count is checked against the bytes left
// before anything is allocated, so malformed input costs at most its own
// size and ends in ErrMalformedRecord.

// Record versions.
const (
	keyVersion = 0
	// valueVersion0 is the classic layout; valueVersion1 the flexible one
	// (KIP-915), written only when a tagged field differs from its default.
	valueVersion0 = 0
	valueVersion1 = 1
)

// Tags of TransactionLogValue version 1.
const (
	tagPreviousProducerID       = 0
	tagNextProducerID           = 1
	tagClientTransactionVersion = 2
)

// Value is a TransactionLogValue: the state of one transactional id.
// Timestamps are milliseconds since the epoch, as stored.
type Value struct {
	ProducerID    int64
	ProducerEpoch int16
	// TimeoutMs is the transaction timeout (transaction.timeout.ms).
	TimeoutMs int32
	State     State
	// Partitions are the partitions of the open transaction, in the order
	// stored. Nil is stored as a null array (Kafka writes null for Empty);
	// a non-nil empty slice as an empty one.
	Partitions []TopicPartition
	// LastUpdateMs is when the id last changed; StartMs when its current
	// transaction began, -1 if none.
	LastUpdateMs, StartMs int64
	// PreviousProducerID (tag 0), NextProducerID (tag 1) and
	// ClientTransactionVersion (tag 2) exist only in version 1; their
	// defaults (-1, -1, 0) are not written, and a value whose three fields
	// all have their defaults is written as version 0. This package stores
	// in PreviousProducerID the producer id whose epoch the last KIP-360
	// InitProducerId continued (see Coordinator.InitProducerID).
	PreviousProducerID, NextProducerID int64
	ClientTransactionVersion           int16
}

// EncodeKey returns the record key of a transactional id: int16 version 0,
// then the id as an int16-length string.
func EncodeKey(transactionalID string) []byte {
	b := make([]byte, 0, 4+len(transactionalID))
	b = binary.BigEndian.AppendUint16(b, keyVersion)
	return appendString(b, transactionalID)
}

// DecodeKey returns the transactional id of a record key. A key of another
// version gets ErrUnknownKeyVersion (skip the record); bytes that do not
// frame a key get ErrMalformedRecord.
func DecodeKey(b []byte) (string, error) {
	r := reader{b: b}
	v := r.int16()
	if r.err != nil {
		return "", r.err
	}
	if v != keyVersion {
		return "", fmt.Errorf("%w: %d", ErrUnknownKeyVersion, v)
	}
	id := r.string(false)
	r.end()
	return id, r.err
}

// EncodeValue returns the record value of v: version 0 unless a version-1
// tagged field differs from its default. A string longer than Kafka can
// frame (32767 bytes) is cut; the Coordinator never produces one.
func EncodeValue(v Value) []byte {
	flexible := v.PreviousProducerID != -1 || v.NextProducerID != -1 || v.ClientTransactionVersion != 0
	b := make([]byte, 0, 64+16*len(v.Partitions))
	if flexible {
		b = binary.BigEndian.AppendUint16(b, valueVersion1)
	} else {
		b = binary.BigEndian.AppendUint16(b, valueVersion0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(v.ProducerID))
	b = binary.BigEndian.AppendUint16(b, uint16(v.ProducerEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(v.TimeoutMs))
	b = append(b, byte(v.State))
	b = appendPartitions(b, v.Partitions, flexible)
	b = binary.BigEndian.AppendUint64(b, uint64(v.LastUpdateMs))
	b = binary.BigEndian.AppendUint64(b, uint64(v.StartMs))
	if flexible {
		n := 0
		for _, set := range []bool{v.PreviousProducerID != -1, v.NextProducerID != -1, v.ClientTransactionVersion != 0} {
			if set {
				n++
			}
		}
		b = binary.AppendUvarint(b, uint64(n))
		// Tagged fields in increasing tag order, as Kafka writes them.
		if v.PreviousProducerID != -1 {
			b = appendTag(b, tagPreviousProducerID, binary.BigEndian.AppendUint64(nil, uint64(v.PreviousProducerID)))
		}
		if v.NextProducerID != -1 {
			b = appendTag(b, tagNextProducerID, binary.BigEndian.AppendUint64(nil, uint64(v.NextProducerID)))
		}
		if v.ClientTransactionVersion != 0 {
			b = appendTag(b, tagClientTransactionVersion, binary.BigEndian.AppendUint16(nil, uint16(v.ClientTransactionVersion)))
		}
	}
	return b
}

// appendPartitions writes the partitions grouped into runs of one topic
// ([{Topic, [PartitionIds]}]), keeping their order, so that decoding gives
// the same list back.
func appendPartitions(b []byte, tps []TopicPartition, flexible bool) []byte {
	if tps == nil {
		if flexible {
			return append(b, 0) // compact null
		}
		return binary.BigEndian.AppendUint32(b, math.MaxUint32) // -1
	}
	var runs [][]TopicPartition
	for i, tp := range tps {
		if i == 0 || tp.Topic != tps[i-1].Topic {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], tp)
	}
	b = appendArrayLen(b, len(runs), flexible)
	for _, run := range runs {
		if flexible {
			b = appendCompactString(b, run[0].Topic)
		} else {
			b = appendString(b, run[0].Topic)
		}
		b = appendArrayLen(b, len(run), flexible)
		for _, tp := range run {
			b = binary.BigEndian.AppendUint32(b, uint32(tp.Partition))
		}
		if flexible {
			b = append(b, 0) // no tagged fields
		}
	}
	return b
}

func appendArrayLen(b []byte, n int, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(b, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

func appendString(b []byte, s string) []byte {
	s = s[:min(len(s), math.MaxInt16)]
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendCompactString(b []byte, s string) []byte {
	s = s[:min(len(s), math.MaxInt16)]
	b = binary.AppendUvarint(b, uint64(len(s))+1)
	return append(b, s...)
}

func appendTag(b []byte, tag uint64, data []byte) []byte {
	b = binary.AppendUvarint(b, tag)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

// DecodeValue parses a record value. Version 0 is the classic layout;
// version 1 and later are read as version 1 (KIP-915: later versions only
// add tagged fields), skipping tags this package does not know. A null value
// is a tombstone, not a Value: check for it before calling DecodeValue.
func DecodeValue(b []byte) (Value, error) {
	r := reader{b: b}
	version := r.int16()
	if r.err == nil && version < 0 {
		r.fail("value version %d", version)
	}
	flexible := version >= valueVersion1
	v := Value{PreviousProducerID: -1, NextProducerID: -1}
	v.ProducerID = r.int64()
	v.ProducerEpoch = r.int16()
	v.TimeoutMs = r.int32()
	v.State = State(r.int8())
	if r.err == nil && !v.State.valid() {
		r.fail("transaction state %d", v.State)
	}
	v.Partitions = r.partitions(flexible)
	v.LastUpdateMs = r.int64()
	v.StartMs = r.int64()
	if flexible {
		r.tags(func(tag uint64, data []byte) {
			switch tag {
			case tagPreviousProducerID, tagNextProducerID:
				if len(data) != 8 {
					r.fail("tag %d of %d bytes", tag, len(data))
					return
				}
				id := int64(binary.BigEndian.Uint64(data))
				if tag == tagPreviousProducerID {
					v.PreviousProducerID = id
				} else {
					v.NextProducerID = id
				}
			case tagClientTransactionVersion:
				if len(data) != 2 {
					r.fail("tag %d of %d bytes", tag, len(data))
					return
				}
				v.ClientTransactionVersion = int16(binary.BigEndian.Uint16(data))
			}
		})
	}
	r.end()
	if r.err != nil {
		return Value{}, r.err
	}
	return v, nil
}

// reader reads Kafka's primitive types; the first failure sticks and every
// later read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformedRecord}, args...)...)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("%d bytes needed, %d left", n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) int8() int8 {
	if b := r.take(1); b != nil {
		return int8(b[0])
	}
	return 0
}

func (r *reader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) int64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

// uvarint reads an unsigned varint of at most max.
func (r *reader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.fail("bad unsigned varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// length reads a string or array length: an int16 or int32, or, flexible, a
// compact uvarint (n+1). It returns -1 for null.
func (r *reader) length(flexible, array bool) int {
	switch {
	case flexible:
		return int(r.uvarint(math.MaxInt32)) - 1
	case array:
		return int(r.int32())
	default:
		return int(r.int16())
	}
}

// string reads a non-nullable string.
func (r *reader) string(flexible bool) string {
	n := r.length(flexible, false)
	if r.err == nil && n < 0 {
		r.fail("null string")
	}
	return string(r.take(n))
}

// partitions reads TransactionPartitions: nil for null.
func (r *reader) partitions(flexible bool) []TopicPartition {
	n := r.length(flexible, true)
	if r.err != nil || n == -1 {
		return nil
	}
	// Each entry takes at least 2 bytes (a compact topic and a compact
	// array, 6 classic): refuse counts the bytes left cannot hold.
	if n < -1 || n > len(r.b)/2 {
		r.fail("partitions count %d", n)
		return nil
	}
	out := []TopicPartition{}
	for range n {
		topic := r.string(flexible)
		k := r.length(flexible, true)
		if r.err == nil && (k < 0 || k > len(r.b)/4) {
			r.fail("partition ids count %d", k)
		}
		if r.err != nil {
			return nil
		}
		for range k {
			out = append(out, TopicPartition{Topic: topic, Partition: r.int32()})
		}
		if flexible {
			r.tags(func(uint64, []byte) {})
		}
	}
	return out
}

// tags reads a tagged-fields section, calling fn for each field.
func (r *reader) tags(fn func(tag uint64, data []byte)) {
	n := r.uvarint(math.MaxInt32)
	for i := uint64(0); i < n && r.err == nil; i++ {
		tag := r.uvarint(math.MaxInt32)
		size := r.uvarint(math.MaxInt32)
		data := r.take(int(size))
		if r.err == nil {
			fn(tag, data)
		}
	}
}

// end fails if bytes are left over.
func (r *reader) end() {
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
}
