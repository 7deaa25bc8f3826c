package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sync"
	"time"
)

// ProducerInfo identifies an idempotent producer's batch: its producer id and
// epoch and the sequence number of the batch's first record.
type ProducerInfo struct {
	ID           int64
	Epoch        int16
	BaseSequence int32
}

// BatchOptions are the batch-level settings for AppendBatch and NewBatch.
// The zero value makes an uncompressed, non-idempotent batch.
type BatchOptions struct {
	// Compression is the codec for the records block.
	Compression Codec
	// Producer, when set, is written into the batch header; when nil the
	// producer id, epoch and base sequence are -1.
	Producer *ProducerInfo
	// Transactional marks the batch as part of a transaction.
	Transactional bool
	// Now is the timestamp given to records whose Timestamp is zero. If it
	// is zero too, such records get NoTimestamp.
	Now time.Time
}

// scratch buffers hold the uncompressed records block of a compressed batch.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// NewBatch encodes records into a new batch with base offset 0 and leader
// epoch -1. See AppendBatch.
func NewBatch(recs []Record, o BatchOptions) (Batch, error) {
	buf, err := AppendBatch(nil, recs, o)
	if err != nil {
		return Batch{}, err
	}
	b, _, err := ParseBatch(buf)
	return b, err
}

// AppendBatch encodes records as one batch, appended to dst, and returns the
// extended slice. The batch has base offset 0 and leader epoch -1 (the log
// stamps both) and record offset deltas 0..len(recs)-1; record Offsets are
// ignored. With a dst of enough capacity it does not allocate.
//
// An empty recs, a record timestamp before 1970, or a batch over 2 GiB is an
// error; dst is then returned unchanged.
func AppendBatch(dst []byte, recs []Record, o BatchOptions) ([]byte, error) {
	if len(recs) == 0 {
		return dst, fmt.Errorf("%w: a batch needs at least one record", ErrCorrupt)
	}
	if len(recs) > math.MaxInt32 {
		return dst, fmt.Errorf("%w: %d records in one batch", ErrRecordTooLarge, len(recs))
	}
	if o.Compression < None || o.Compression > ZSTD {
		return dst, fmt.Errorf("%w: %d", ErrUnsupportedCodec, o.Compression)
	}
	now := millis(o.Now)
	first := tsOf(&recs[0], now)
	// One pass checks timestamps and sizes the records block.
	maxTS, need := NoTimestamp, 0
	for i := range recs {
		ts := tsOf(&recs[i], now)
		if ts < 0 && !recs[i].Timestamp.IsZero() {
			return dst, fmt.Errorf("%w: record %d has timestamp %v, before 1970", ErrCorrupt, i, recs[i].Timestamp)
		}
		maxTS = max(maxTS, ts)
		need += EncodedSize(&recs[i], int32(i), ts-first)
	}

	start := len(dst)
	dst = grow(dst, HeaderSize)
	dst = dst[:start+HeaderSize]

	var err error
	if o.Compression == None {
		dst, err = appendRecords(dst, recs, first, now, need)
	} else {
		sp := scratch.Get().(*[]byte)
		raw, rerr := appendRecords((*sp)[:0], recs, first, now, need)
		if rerr == nil {
			dst, err = compress(o.Compression, dst, raw)
		} else {
			err = rerr
		}
		*sp = raw[:0]
		scratch.Put(sp)
	}
	if err != nil {
		return dst[:start], err
	}
	size := len(dst) - start
	if size > math.MaxInt32 {
		return dst[:start], fmt.Errorf("%w: batch of %d bytes", ErrRecordTooLarge, size)
	}

	writeHeader(dst[start:], o, int32(len(recs)), first, maxTS)
	return dst, nil
}

// writeHeader fills in the header of the batch that batch holds (header
// and records) and its CRC: base offset 0 and leader epoch -1, for the log
// to stamp.
func writeHeader(batch []byte, o BatchOptions, count int32, firstTS, maxTS int64) {
	h := batch[:HeaderSize]
	binary.BigEndian.PutUint64(h[offBaseOffset:], 0)
	binary.BigEndian.PutUint32(h[offLength:], uint32(len(batch)-LogOverhead))
	binary.BigEndian.PutUint32(h[offLeaderEpoch:], math.MaxUint32) // -1
	h[offMagic] = Magic
	attrs := int16(o.Compression)
	if o.Transactional {
		attrs |= attrTransactional
	}
	binary.BigEndian.PutUint16(h[offAttributes:], uint16(attrs))
	binary.BigEndian.PutUint32(h[offLastOffsetDelta:], uint32(count-1))
	binary.BigEndian.PutUint64(h[offFirstTimestamp:], uint64(firstTS))
	binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(maxTS))
	p := ProducerInfo{ID: -1, Epoch: -1, BaseSequence: -1}
	if o.Producer != nil {
		p = *o.Producer
	}
	binary.BigEndian.PutUint64(h[offProducerID:], uint64(p.ID))
	binary.BigEndian.PutUint16(h[offProducerEpoch:], uint16(p.Epoch))
	binary.BigEndian.PutUint32(h[offBaseSequence:], uint32(p.BaseSequence))
	binary.BigEndian.PutUint32(h[offRecordCount:], uint32(count))
	binary.BigEndian.PutUint32(h[offCRC:], crc32.Checksum(batch[offAttributes:], castagnoli))
}

// appendRecords appends the records block (uncompressed), need bytes, to
// dst.
func appendRecords(dst []byte, recs []Record, firstTS, now int64, need int) ([]byte, error) {
	dst = grow(dst, need)
	for i := range recs {
		dst = appendRecord(dst, &recs[i], int32(i), tsOf(&recs[i], now)-firstTS)
	}
	return dst, nil
}

// appendRecord appends one encoded record.
func appendRecord(dst []byte, r *Record, offsetDelta int32, tsDelta int64) []byte {
	dst = appendVarint(dst, int64(bodySize(r, offsetDelta, tsDelta)))
	dst = append(dst, 0) // attributes
	dst = appendVarint(dst, tsDelta)
	dst = appendVarint(dst, int64(offsetDelta))
	dst = appendBytesField(dst, r.Key)
	dst = appendBytesField(dst, r.Value)
	dst = appendVarint(dst, int64(len(r.Headers)))
	for j := range r.Headers {
		h := &r.Headers[j]
		dst = appendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytesField(dst, h.Value)
	}
	return dst
}

func tsOf(r *Record, now int64) int64 {
	if r.Timestamp.IsZero() {
		return now
	}
	return r.Timestamp.UnixMilli()
}

func appendBytesField(dst, b []byte) []byte {
	if b == nil {
		return appendVarint(dst, -1)
	}
	dst = appendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
