package record

import (
	"fmt"
	"math"
)

// Builder encodes records into a batch one at a time, as a producer
// accumulates them: each Add encodes the record at once (so the caller's
// buffers are free when it returns) and Size tells how large the batch has
// grown. A Builder is reused with Reset and then allocates nothing once its
// buffers have grown. It is not safe for concurrent use.
type Builder struct {
	opts    BatchOptions
	buf     []byte // header space, then the uncompressed records
	out     []byte // the compressed batch, for codecs other than None
	count   int32
	firstTS int64
	maxTS   int64
}

// Reset starts a new batch with the given options; BatchOptions.Now is not
// used (Add takes records' timestamps as they are).
func (b *Builder) Reset(o BatchOptions) {
	b.opts = o
	b.buf = grow(b.buf[:0], HeaderSize)[:HeaderSize]
	b.count = 0
	b.firstTS, b.maxTS = NoTimestamp, NoTimestamp
}

// Add encodes a record into the batch, with offset delta Len(). A record
// timestamp before 1970 is an error, as is a batch that would pass 2 GiB or
// 2^31 records; the batch is unchanged then.
func (b *Builder) Add(r *Record) error {
	if len(b.buf) < HeaderSize {
		b.Reset(b.opts)
	}
	ts := millis(r.Timestamp)
	if ts < 0 && !r.Timestamp.IsZero() {
		return fmt.Errorf("%w: record timestamp %v is before 1970", ErrCorrupt, r.Timestamp)
	}
	if b.count == math.MaxInt32 {
		return fmt.Errorf("%w: %d records in one batch", ErrRecordTooLarge, b.count)
	}
	if b.count == 0 {
		b.firstTS = ts
	}
	tsDelta := ts - b.firstTS
	size := EncodedSize(r, b.count, tsDelta)
	if len(b.buf)+size > math.MaxInt32 {
		return fmt.Errorf("%w: batch would pass 2 GiB", ErrRecordTooLarge)
	}
	b.buf = appendRecord(grow(b.buf, size), r, b.count, tsDelta)
	b.maxTS = max(b.maxTS, ts)
	b.count++
	return nil
}

// Len is the number of records added.
func (b *Builder) Len() int { return int(b.count) }

// Retained is the memory the Builder's buffers hold, in bytes: what keeping
// it for reuse costs.
func (b *Builder) Retained() int { return cap(b.buf) + cap(b.out) }

// Size is the size of the batch so far, uncompressed, header included.
func (b *Builder) Size() int { return max(len(b.buf), HeaderSize) }

// SetProducer sets the producer id, epoch and base sequence (nil: none)
// and the transactional flag that Build writes into the header: an
// idempotent producer picks the sequence when the batch is about to be
// sent, not when its first record is added.
func (b *Builder) SetProducer(p *ProducerInfo, transactional bool) {
	b.opts.Producer, b.opts.Transactional = p, transactional
}

// Build finishes the batch and returns it: base offset 0, leader epoch -1.
// The batch aliases the Builder's buffers and is valid until the next Reset
// or Add. An empty batch is an error.
func (b *Builder) Build() (Batch, error) {
	if b.count == 0 {
		return Batch{}, fmt.Errorf("%w: a batch needs at least one record", ErrCorrupt)
	}
	batch := b.buf
	if c := b.opts.Compression; c != None {
		out, err := compress(c, grow(b.out[:0], HeaderSize)[:HeaderSize], b.buf[HeaderSize:])
		if cap(out) > cap(b.out) {
			b.out = out[:0]
		}
		if err != nil {
			return Batch{}, err
		}
		batch = out
	}
	if len(batch) > math.MaxInt32 {
		return Batch{}, fmt.Errorf("%w: batch of %d bytes", ErrRecordTooLarge, len(batch))
	}
	writeHeader(batch, b.opts, b.count, b.firstTS, b.maxTS)
	return Batch{b: batch[:len(batch):len(batch)]}, nil
}
