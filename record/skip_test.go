package record

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawRecord encodes one record from its fields as given, without checking
// them: each field's value or, for lengths, the length to claim (the bytes
// that follow are those given). Varints are written minimally unless wide
// asks for the widest (overlong) encoding of the timestamp delta.
type rawRecord struct {
	tsDelta, offDelta int64
	keyLen            int64 // -1: null
	key               []byte
	valLen            int64
	value             []byte
	headers           [][2]int64 // claimed key and value lengths; the bytes are 'h' and 'v' repeated
	countDelta        int64      // added to the header count
	extra             []byte     // bytes after the last field, inside the length
	lengthDelta       int64      // added to the record's true length
	wideTS            bool
}

func (r rawRecord) encode() []byte {
	var body []byte
	body = append(body, 0) // attributes
	if r.wideTS {
		u := uint64(r.tsDelta<<1) ^ uint64(r.tsDelta>>63)
		for range 9 {
			body = append(body, byte(u)|0x80)
			u >>= 7
		}
		body = append(body, byte(u))
	} else {
		body = appendVarint(body, r.tsDelta)
	}
	body = appendVarint(body, r.offDelta)
	body = appendVarint(body, r.keyLen)
	body = append(body, r.key...)
	body = appendVarint(body, r.valLen)
	body = append(body, r.value...)
	body = appendVarint(body, int64(len(r.headers))+r.countDelta)
	for _, h := range r.headers {
		body = appendVarint(body, h[0])
		for range max(h[0], 0) {
			body = append(body, 'h')
		}
		body = appendVarint(body, h[1])
		for range max(h[1], 0) {
			body = append(body, 'v')
		}
	}
	body = append(body, r.extra...)
	return append(appendVarint(nil, int64(len(body))+r.lengthDelta), body...)
}

// rawBatch wraps records into a batch with a valid header and CRC.
func rawBatch(count, lastDelta int32, recs ...rawRecord) Batch {
	raw := make([]byte, HeaderSize)
	for _, r := range recs {
		raw = append(raw, r.encode()...)
	}
	binary.BigEndian.PutUint32(raw[offLength:], uint32(len(raw)-LogOverhead))
	raw[offMagic] = Magic
	binary.BigEndian.PutUint32(raw[offLastOffsetDelta:], uint32(lastDelta))
	binary.BigEndian.PutUint32(raw[offRecordCount:], uint32(count))
	binary.BigEndian.PutUint64(raw[offProducerID:], ^uint64(0))
	binary.BigEndian.PutUint16(raw[offProducerEpoch:], ^uint16(0))
	binary.BigEndian.PutUint32(raw[offBaseSequence:], ^uint32(0))
	restamp(raw)
	return Batch{b: raw}
}

// Skip, which takes a fast path over well-formed records, passes and
// refuses exactly what Next does, with the same error: records whose
// fields take one, two and more varint bytes; null keys and values; and
// every kind of damage to a record's framing.
func TestSkipMatchesNext(t *testing.T) {
	value := func(n int) []byte { return make([]byte, n) }
	ok := func(off int64) rawRecord {
		return rawRecord{offDelta: off, keyLen: -1, valLen: 100, value: value(100)}
	}
	cases := []struct {
		name  string
		batch Batch
		valid bool
	}{
		{"plain", rawBatch(2, 1, ok(0), ok(1)), true},
		{"one-byte lengths", rawBatch(1, 0, rawRecord{keyLen: 1, key: []byte("k"), valLen: 3, value: value(3)}), true},
		{"three-byte value length", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 20000, value: value(20000)}), true},
		{"wide timestamp delta", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), wideTS: true, tsDelta: 5}), true},
		{"offset delta of three bytes", rawBatch(2, 9000, ok(0), ok(9000)), true}, // gaps are the log's to refuse
		{"null value", rawBatch(1, 0, rawRecord{keyLen: 0, valLen: -1}), true},
		{"headers", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), headers: [][2]int64{{3, 2}, {0, -1}, {1, 200}}}), true},
		{"null header key", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), headers: [][2]int64{{-1, 2}}}), false},
		{"header value length -2", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), headers: [][2]int64{{1, -2}}}), false},
		{"key length -2", rawBatch(1, 0, rawRecord{keyLen: -2, valLen: 1, value: value(1)}), false},
		{"value past the record", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 101, value: value(100)}), false},
		{"bytes left in the record", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), extra: []byte{0}}), false},
		{"length past the batch", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), lengthDelta: 1}), false},
		{"length too short", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), lengthDelta: -1}), false},
		{"offset delta repeated", rawBatch(2, 1, ok(0), ok(0)), false},
		{"offset delta past the last", rawBatch(1, 0, ok(1)), false},
		{"header count too high", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), headers: [][2]int64{{1, 1}}, countDelta: 1}), false},
		{"header count beyond the bytes", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), headers: [][2]int64{{1, 1}}, countDelta: 4}), false},
		{"negative header count", rawBatch(1, 0, rawRecord{keyLen: -1, valLen: 1, value: value(1), countDelta: -1}), false},
		{"bytes after the last record", rawBatch(1, 0, ok(0), ok(1)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.batch.CheckCRC()
			require.NoError(t, err)
			var next, skip Iterator
			next.Reset(b)
			skip.Reset(b)
			n := 0
			for next.Next() {
				n++
				require.True(t, skip.Skip(), "Skip stopped at record %d: %v", n-1, skip.Err())
				require.Equal(t, int32(next.Record().Offset-b.BaseOffset()), skip.LastOffsetDelta())
			}
			require.False(t, skip.Skip(), "Skip passed a record Next did not")
			if c.valid {
				require.NoError(t, next.Err())
				require.Equal(t, int(b.NumRecords()), n)
			} else {
				require.ErrorIs(t, next.Err(), ErrCorrupt)
			}
			require.Equal(t, next.Err(), skip.Err())
		})
	}
}
