package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// Filter re-encodes batch b keeping only the records keep approves, and
// appends the result to dst: what a log cleaner does to each batch. Kept
// records keep their offsets, timestamps, keys, values and headers; the new
// batch keeps b's base offset, last offset delta (so offsets after it do not
// move), codec, leader epoch and producer fields, with its record count and
// max timestamp updated. When no record is kept, dst is returned unchanged
// and kept is 0. it is reused for decoding. keep must not retain r or the
// memory it points to.
func Filter(dst []byte, b Batch, it *Iterator, keep func(r *Record) bool) (out []byte, kept int, err error) {
	it.Reset(b)
	if err := it.Err(); err != nil {
		return dst, 0, err
	}
	first := b.FirstTimestamp()
	sp := scratch.Get().(*[]byte)
	raw := (*sp)[:0]
	defer func() {
		*sp = raw[:0]
		scratch.Put(sp)
	}()
	maxTS := NoTimestamp
	for it.Next() {
		r := it.Record()
		if !keep(r) {
			continue
		}
		ts := millis(r.Timestamp)
		delta := ts - first
		if ts == NoTimestamp && first == NoTimestamp {
			delta = 0
		}
		raw = appendRecord(grow(raw, EncodedSize(r, int32(r.Offset-b.BaseOffset()), delta)), r, int32(r.Offset-b.BaseOffset()), delta)
		maxTS = max(maxTS, ts)
		kept++
	}
	if err := it.Err(); err != nil {
		return dst, 0, err
	}
	if kept == 0 {
		return dst, 0, nil
	}
	if b.LogAppendTime() {
		maxTS = b.MaxTimestamp()
	}

	start := len(dst)
	dst = grow(dst, HeaderSize+len(raw))
	dst = append(dst, b.b[:HeaderSize]...)
	if c := b.Compression(); c == None {
		dst = append(dst, raw...)
	} else if dst, err = compress(c, dst, raw); err != nil {
		return dst[:start], 0, err
	}
	size := len(dst) - start
	if size > math.MaxInt32 {
		return dst[:start], 0, fmt.Errorf("%w: filtered batch of %d bytes", ErrRecordTooLarge, size)
	}
	h := dst[start : start+HeaderSize]
	binary.BigEndian.PutUint32(h[offLength:], uint32(size-LogOverhead))
	attrs := binary.BigEndian.Uint16(h[offAttributes:]) &^ attrDeleteHorizonMask
	binary.BigEndian.PutUint16(h[offAttributes:], attrs)
	binary.BigEndian.PutUint64(h[offMaxTimestamp:], uint64(maxTS))
	binary.BigEndian.PutUint32(h[offRecordCount:], uint32(kept))
	binary.BigEndian.PutUint32(h[offCRC:], crc32.Checksum(dst[start+offAttributes:], castagnoli))
	return dst, kept, nil
}
