package record

import (
	"fmt"
	"math"
)

// Iterator decodes the records of a batch. The zero value is ready to use;
// an Iterator keeps its buffers across Resets, so reusing one decodes without
// allocating (header keys excepted: they become strings).
//
//	var it record.Iterator
//	it.Reset(batch)
//	for it.Next() {
//		r := it.Record()
//		...
//	}
//	if err := it.Err(); err != nil { ... }
//
// Reset verifies the batch (Verify) before anything is decoded, and Next
// checks every record's framing, so corrupt bytes end the iteration with an
// error wrapping ErrCorrupt instead of coming out as records.
type Iterator struct {
	// MaxUncompressedBytes caps the decompressed size of a batch's records;
	// zero means DefaultMaxUncompressedBytes.
	MaxUncompressedBytes int

	batch     Batch
	data      []byte // the records block, decompressed
	buf       []byte // decompression buffer, reused
	left      int32  // records still to decode
	index     int32  // records decoded so far
	lastDelta int32  // offset delta of the previous record, -1 before the first
	rec       Record
	headers   []Header
	err       error
}

// Reset starts iterating over b's records.
func (it *Iterator) Reset(b Batch) {
	it.batch = b
	it.data = nil
	it.left, it.index, it.lastDelta = 0, 0, -1
	it.err = nil
	if err := b.Verify(); err != nil {
		it.err = err
		return
	}
	body := b.b[HeaderSize:]
	if c := b.Compression(); c == None {
		it.data = body
	} else {
		max := it.MaxUncompressedBytes
		if max <= 0 {
			max = DefaultMaxUncompressedBytes
		}
		out, err := decompress(c, it.buf[:0], body, max)
		if cap(out) > cap(it.buf) {
			it.buf = out[:0]
		}
		if err != nil {
			it.err = fmt.Errorf("batch at offset %d: %w", b.BaseOffset(), err)
			return
		}
		it.data = out
	}
	it.left = b.NumRecords()
}

// Next decodes the next record; it returns false at the end of the batch or
// on an error (see Err).
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.left == 0 {
		if len(it.data) != 0 && it.batch.b != nil {
			it.err = fmt.Errorf("%w: %d bytes after the last record of batch at offset %d",
				ErrCorrupt, len(it.data), it.batch.BaseOffset())
			it.data = nil
		}
		return false
	}
	if err := it.decode(true); err != nil {
		it.err = fmt.Errorf("%w: record %d of batch at offset %d: %v", ErrCorrupt, it.index, it.batch.BaseOffset(), err)
		return false
	}
	it.left--
	it.index++
	return true
}

// Skip checks the next record as Next does - every field's framing, the
// offset delta's order, nothing left over - without decoding it: Record is
// not set. It is the cheaper walk of a caller that validates a batch and
// does not read its records. It returns false at the end of the batch or
// on an error (see Err).
func (it *Iterator) Skip() bool {
	if it.err != nil {
		return false
	}
	if it.left == 0 {
		return it.Next() // the end: the same checks
	}
	if it.skipFast() {
		it.left--
		it.index++
		return true
	}
	if err := it.decode(false); err != nil { // the error, worded
		it.err = fmt.Errorf("%w: record %d of batch at offset %d: %v", ErrCorrupt, it.index, it.batch.BaseOffset(), err)
		return false
	}
	it.left--
	it.index++
	return true
}

// LastOffsetDelta is the offset delta of the record Next or Skip last
// passed (-1 before the first).
func (it *Iterator) LastOffsetDelta() int32 { return it.lastDelta }

// Record returns the record Next decoded. It and the memory it points to are
// valid until the next call to Next or Reset.
func (it *Iterator) Record() *Record { return &it.rec }

// Err returns the error that ended the iteration, or nil.
func (it *Iterator) Err() error { return it.err }

// decode parses one record from it.data: into it.rec if materialize is
// set, only checking its framing if not.
func (it *Iterator) decode(materialize bool) error {
	d := it.data
	length, n, err := readVarint(d, 5)
	if err != nil {
		return fmt.Errorf("length: %w", err)
	}
	d = d[n:]
	if length < minRecordSize-1 || length > int64(len(d)) {
		return fmt.Errorf("length %d with %d bytes left", length, len(d))
	}
	body, rest := d[:length], d[length:]

	if len(body) < 1 {
		return fmt.Errorf("missing attributes")
	}
	body = body[1:] // attributes: unused in v2

	tsDelta, n, err := readVarint(body, 10)
	if err != nil {
		return fmt.Errorf("timestamp delta: %w", err)
	}
	body = body[n:]
	offDelta, n, err := readVarint(body, 5)
	if err != nil {
		return fmt.Errorf("offset delta: %w", err)
	}
	body = body[n:]
	if offDelta <= int64(it.lastDelta) || offDelta > int64(it.batch.LastOffsetDelta()) {
		return fmt.Errorf("offset delta %d after %d (last offset delta %d)", offDelta, it.lastDelta, it.batch.LastOffsetDelta())
	}
	key, body, err := readBytesField(body, "key")
	if err != nil {
		return err
	}
	value, body, err := readBytesField(body, "value")
	if err != nil {
		return err
	}
	nh, n, err := readVarint(body, 5)
	if err != nil {
		return fmt.Errorf("header count: %w", err)
	}
	body = body[n:]
	// Each header takes at least two bytes, so a count beyond that is a lie
	// that must not size an allocation.
	if nh < 0 || nh > int64(len(body)/2) {
		return fmt.Errorf("header count %d with %d bytes left", nh, len(body))
	}
	it.headers = it.headers[:0]
	for i := int64(0); i < nh; i++ {
		var hk, hv []byte
		hk, body, err = readBytesField(body, "header key")
		if err != nil {
			return err
		}
		if hk == nil {
			return fmt.Errorf("header %d has a null key", i)
		}
		hv, body, err = readBytesField(body, "header value")
		if err != nil {
			return err
		}
		if materialize {
			it.headers = append(it.headers, Header{Key: string(hk), Value: hv})
		}
	}
	if len(body) != 0 {
		return fmt.Errorf("%d unread bytes in record", len(body))
	}
	if !materialize {
		it.lastDelta = int32(offDelta)
		it.data = rest
		return nil
	}

	first := it.batch.FirstTimestamp()
	ts := first + tsDelta
	if first == NoTimestamp && tsDelta == 0 {
		ts = NoTimestamp
	}
	if it.batch.LogAppendTime() {
		ts = it.batch.MaxTimestamp()
	}
	it.rec = Record{
		Offset:    it.batch.BaseOffset() + offDelta,
		Timestamp: TimeOf(ts),
		Key:       key,
		Value:     value,
	}
	if len(it.headers) > 0 {
		it.rec.Headers = it.headers
	}
	it.lastDelta = int32(offDelta)
	it.data = rest
	return nil
}

// skipFast passes the record at the start of it.data if decode(false)
// would, checking the same: the length, every field's framing within it,
// the offset delta's order, the header count, nothing left over. It is
// the walk over a produced batch that validates every record, so it reads
// the varints in place, inline where they take one or two bytes (most of
// a record's lengths, deltas and counts), and wraps no errors: where it
// reports false, changing nothing, decode judges the record again (longer
// varints included) and words the error.
func (it *Iterator) skipFast() bool {
	d := it.data
	u, i := shortUvarint(d, 0)
	length := zigzag(u)
	if i < 0 || length < minRecordSize-1 || length > int64(len(d)-i) {
		return false
	}
	end := i + int(length)
	body := d[i:end]
	_, j := shortUvarint(body, 1) // after the attributes: the timestamp delta
	if j < 0 {
		return false
	}
	u, j = shortUvarint(body, j)
	off := zigzag(u)
	if j < 0 || off <= int64(it.lastDelta) || off > int64(it.batch.LastOffsetDelta()) {
		return false
	}
	for range 2 { // key, value: nullable
		u, j = shortUvarint(body, j)
		l := zigzag(u)
		if j < 0 || l < -1 || l > int64(len(body)-j) {
			return false
		}
		j += max(int(l), 0)
	}
	u, j = shortUvarint(body, j)
	nh := zigzag(u)
	if j < 0 || nh < 0 || nh > int64((len(body)-j)/2) {
		return false
	}
	for range nh {
		u, j = shortUvarint(body, j) // the header's key: not null
		l := zigzag(u)
		if j < 0 || l < 0 || l > int64(len(body)-j) {
			return false
		}
		j += int(l)
		u, j = shortUvarint(body, j) // its value: nullable
		l = zigzag(u)
		if j < 0 || l < -1 || l > int64(len(body)-j) {
			return false
		}
		j += max(int(l), 0)
	}
	if j != len(body) {
		return false
	}
	it.lastDelta = int32(off)
	it.data = d[end:]
	return true
}

// shortUvarint reads the unsigned varint at b[i:] if it takes one or two
// bytes, returning it and the index after it; else -1 for the index.
func shortUvarint(b []byte, i int) (uint64, int) {
	if i < len(b) {
		if c := b[i]; c < 0x80 {
			return uint64(c), i + 1
		} else if i+1 < len(b) && b[i+1] < 0x80 {
			return uint64(c&0x7f) | uint64(b[i+1])<<7, i + 2
		}
	}
	return 0, -1
}

// zigzag decodes a zig-zag encoded value.
func zigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// readBytesField reads a varint length and that many bytes; length -1 is nil.
func readBytesField(b []byte, what string) (field, rest []byte, err error) {
	l, n, err := readVarint(b, 5)
	if err != nil {
		return nil, nil, fmt.Errorf("%s length: %w", what, err)
	}
	b = b[n:]
	switch {
	case l == -1:
		return nil, b, nil
	case l < -1 || l > math.MaxInt32 || l > int64(len(b)):
		return nil, nil, fmt.Errorf("%s length %d with %d bytes left", what, l, len(b))
	}
	return b[:l:l], b[l:], nil
}

// Records decodes all of b's records into new memory. It is a convenience
// for tools and tests; loops should reuse an Iterator.
func (b Batch) Records() ([]Record, error) {
	var it Iterator
	it.Reset(b)
	var out []Record
	for it.Next() {
		out = append(out, it.Record().Clone())
	}
	return out, it.Err()
}
