package record

import (
	"errors"
	"math/bits"
)

// Zig-zag varints, as Kafka's ByteUtils.writeVarint/writeVarlong.

var errVarint = errors.New("malformed varint")

func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

func appendVarint(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	if u < 0x80 { // most lengths, deltas and counts
		return append(b, byte(u))
	}
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// readVarint decodes a zig-zag varint of at most maxBytes bytes (5 for an
// int32, 10 for an int64) from b, returning the value and its size.
func readVarint(b []byte, maxBytes int) (int64, int, error) {
	var u uint64
	var shift uint
	for i := 0; i < len(b); i++ {
		if i >= maxBytes {
			return 0, 0, errVarint
		}
		c := b[i]
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errVarint
}
