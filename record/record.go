package record

import "time"

// Header is one record header: a key and an optional value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record.
//
// A Record returned by an Iterator aliases the iterator's buffers: its Key,
// Value and header values are valid until the iterator moves on. Copy them
// (Clone) to keep them.
type Record struct {
	// Offset is the record's position in its partition. It is assigned by
	// the log on append; it is ignored when a record is encoded.
	Offset int64
	// Timestamp is the record's timestamp, kept to the millisecond. The zero
	// time means "none given": the log substitutes the append time.
	Timestamp time.Time
	// Key is nil for a record without a key.
	Key []byte
	// Value is nil for a tombstone (a deletion marker in compacted topics).
	Value []byte
	// Headers are application metadata carried with the record.
	Headers []Header
}

// Clone returns a deep copy of r that shares no memory with it.
func (r *Record) Clone() Record {
	c := Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: cloneBytes(r.Key), Value: cloneBytes(r.Value)}
	if r.Headers != nil {
		c.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = Header{Key: h.Key, Value: cloneBytes(h.Value)}
		}
	}
	return c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// EncodedSize is the number of bytes r takes in an uncompressed batch, given
// its offset and timestamp deltas from the batch's base.
func EncodedSize(r *Record, offsetDelta int32, timestampDelta int64) int {
	body := bodySize(r, offsetDelta, timestampDelta)
	return varintSize(int64(body)) + body
}

func bodySize(r *Record, offsetDelta int32, timestampDelta int64) int {
	n := 1 + varintSize(timestampDelta) + varintSize(int64(offsetDelta))
	n += bytesFieldSize(r.Key) + bytesFieldSize(r.Value)
	n += varintSize(int64(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		n += varintSize(int64(len(h.Key))) + len(h.Key) + bytesFieldSize(h.Value)
	}
	return n
}

func bytesFieldSize(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return varintSize(int64(len(b))) + len(b)
}
