package record

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

func seedBatches(f *testing.F) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range codecs {
		b, err := NewBatch(sampleRecords(rng, 3), BatchOptions{Compression: c})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
}

// FuzzBatch feeds arbitrary bytes to the batch decoder. Nothing may panic,
// and a batch that decodes must decode the same way twice.
func FuzzBatch(f *testing.F) {
	seedBatches(f)
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeAll(t, data)
	})
}

// FuzzRecords fuzzes the records block behind a valid header and CRC, where
// random bytes would otherwise almost never get past the checksum.
func FuzzRecords(f *testing.F) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, c := range codecs {
		b, err := NewBatch(sampleRecords(rng, 3), BatchOptions{Compression: c})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(c), int32(b.NumRecords()), int32(b.LastOffsetDelta()), b.Bytes()[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, codec uint8, count, lastDelta int32, body []byte) {
		raw := make([]byte, HeaderSize, HeaderSize+len(body))
		raw = append(raw, body...)
		binary.BigEndian.PutUint32(raw[offLength:], uint32(len(raw)-LogOverhead))
		raw[offMagic] = Magic
		binary.BigEndian.PutUint16(raw[offAttributes:], uint16(codec&attrCodecMask))
		binary.BigEndian.PutUint32(raw[offLastOffsetDelta:], uint32(lastDelta))
		binary.BigEndian.PutUint32(raw[offRecordCount:], uint32(count))
		restamp(raw)
		decodeAll(t, raw)
	})
}

func decodeAll(t *testing.T, data []byte) {
	b, _, err := ParseBatch(data)
	if err != nil {
		return
	}
	var it Iterator
	it.MaxUncompressedBytes = 1 << 20
	it.Reset(b)
	var n int
	var last int64 = -1
	for it.Next() {
		r := it.Record()
		if r.Offset <= last || r.Offset > b.LastOffset() {
			t.Fatalf("offset %d after %d, last offset %d", r.Offset, last, b.LastOffset())
		}
		last = r.Offset
		n++
	}
	if it.Err() == nil && int32(n) != b.NumRecords() {
		t.Fatalf("decoded %d records, header says %d", n, b.NumRecords())
	}
	// Decoding is deterministic.
	it.Reset(b)
	m := 0
	for it.Next() {
		m++
	}
	if m != n {
		t.Fatalf("second pass decoded %d records, first %d", m, n)
	}
	nextErr := it.Err()
	// Skip, the walk that checks without decoding, passes exactly the
	// records Next does, with the same offset deltas, and fails where
	// Next fails, with the same error.
	var deltas []int64
	it.Reset(b)
	for it.Next() {
		deltas = append(deltas, it.Record().Offset-b.BaseOffset())
	}
	var skipped []int64
	it.Reset(b)
	for it.Skip() {
		skipped = append(skipped, int64(it.LastOffsetDelta()))
	}
	if len(skipped) != len(deltas) || fmt.Sprint(it.Err()) != fmt.Sprint(nextErr) {
		t.Fatalf("Skip passed %d records (err %v), Next %d (err %v)", len(skipped), it.Err(), len(deltas), nextErr)
	}
	for i := range deltas {
		if deltas[i] != skipped[i] {
			t.Fatalf("record %d: Skip saw offset delta %d, Next %d", i, skipped[i], deltas[i])
		}
	}
}
