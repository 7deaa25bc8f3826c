package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
)

// Message format v0 and v1 ("magic 0" and "magic 1", Kafka before 0.11) is
// what Produce v0-v2 carry and Fetch v0-v3 return. spool stores RecordBatch
// v2 only: package transport converts old producers' message sets to a
// batch with ParseMessageSet and serves old consumers with
// AppendMessageSet, as Kafka's brokers up- and down-converted.
//
//	MessageSet = { Offset int64 | MessageSize int32 | Message }*
//	Message v0 = CRC uint32 | Magic int8 = 0 | Attributes int8 | Key | Value
//	Message v1 = CRC uint32 | Magic int8 = 1 | Attributes int8 | Timestamp int64 | Key | Value
//	Key, Value = Length int32 (-1: null) | Length bytes
//
// CRC is CRC-32 (IEEE, not Castagnoli) of everything after it. Attribute
// bits 0-2 are the codec (none, gzip, snappy, lz4; zstd needs v2), bit 3 in
// v1 the timestamp type (set: LogAppendTime). A compressed message - a
// wrapper - holds in its value a compressed message set of uncompressed
// inner messages; in v1 their offsets are relative (0..n-1) and the
// wrapper's offset is the absolute offset of the last, in v0 they are
// absolute. Headers do not exist before v2.

const (
	legacyLogOverhead   = 12 // Offset, MessageSize
	legacyV0Header      = 6  // CRC, Magic, Attributes
	legacyV1Header      = 14 // and Timestamp
	legacyAttrCodecMask = 0x07
	legacyAttrLogAppend = 0x08
)

// MessageSetSize is the number of bytes r takes as one uncompressed
// message of the given magic (0 or 1) in a message set.
func MessageSetSize(magic int8, r *Record) int {
	n := legacyLogOverhead + legacyV0Header + 4 + len(r.Key) + 4 + len(r.Value)
	if magic >= 1 {
		n += 8
	}
	return n
}

// AppendMessage appends r to dst as one uncompressed message of the given
// magic (0 or 1) at offset, as a message set entry. In v1 the timestamp is
// r's (NoTimestamp for the zero time) and logAppendTime sets the timestamp
// type; v0 carries none. r's headers are dropped: the format has none.
func AppendMessage(dst []byte, magic int8, offset int64, r *Record, logAppendTime bool) []byte {
	size := MessageSetSize(magic, r) - legacyLogOverhead
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	crcAt := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(magic))
	var attrs byte
	if magic >= 1 && logAppendTime {
		attrs |= legacyAttrLogAppend
	}
	dst = append(dst, attrs)
	if magic >= 1 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(millis(r.Timestamp)))
	}
	dst = appendLegacyBytes(dst, r.Key)
	dst = appendLegacyBytes(dst, r.Value)
	binary.BigEndian.PutUint32(dst[crcAt:], crc32.ChecksumIEEE(dst[crcAt+4:]))
	return dst
}

func appendLegacyBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, math.MaxUint32) // -1
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// ParseMessageSet decodes a message set of magic 0 or 1 into records, in
// order, decompressing wrappers (at most maxDecompressed bytes in all;
// zero means DefaultMaxUncompressedBytes). Each record's Offset is the
// offset the set gives it (absolute for v0 and for v1 wrappers' inner
// messages, resolved against the wrapper); its Timestamp is the v1
// message's CreateTime, the wrapper's time for a LogAppendTime wrapper, or
// the zero time (none) in v0 or for -1. Keys and values alias buf or the
// decompressed bytes.
//
// The codec returned is the first compressed wrapper's, or None: what a
// broker converting the set keeps (Kafka's compression.type=producer).
//
// Anything that is not a whole, valid message set is an error wrapping
// ErrCorrupt - a wrong CRC or size, a partial message at the end, a magic
// other than 0 or 1, a compressed inner message, a wrapper that holds no
// messages, an empty set - or ErrUnsupportedCodec; nothing is returned
// then. An LZ4 wrapper in magic 0 may carry the frame checksum early
// clients got wrong (KAFKA-3160), which Kafka accepted; so does this.
func ParseMessageSet(buf []byte, maxDecompressed int) ([]Record, Codec, error) {
	if maxDecompressed <= 0 {
		maxDecompressed = DefaultMaxUncompressedBytes
	}
	budget := maxDecompressed
	var out []Record
	codec := None
	for pos := 0; pos < len(buf); {
		offset, msg, n, err := nextMessage(buf[pos:])
		if err != nil {
			return nil, None, fmt.Errorf("message set at byte %d: %w", pos, err)
		}
		pos += n
		m, err := parseMessage(msg)
		if err != nil {
			return nil, None, fmt.Errorf("message at offset %d: %w", offset, err)
		}
		if m.codec == None {
			out = append(out, Record{Offset: offset, Timestamp: TimeOf(m.timestamp), Key: m.key, Value: m.value})
			continue
		}
		if codec == None {
			codec = m.codec
		}
		if m.value == nil {
			return nil, None, fmt.Errorf("%w: compressed message at offset %d has a null value", ErrCorrupt, offset)
		}
		value := m.value
		if m.magic == 0 && m.codec == LZ4 {
			value = fixLZ4HeaderChecksum(value)
		}
		inner, err := decompress(m.codec, nil, value, budget)
		if err != nil {
			return nil, None, fmt.Errorf("message at offset %d: %w", offset, err)
		}
		budget -= len(inner)
		first := len(out)
		for ipos := 0; ipos < len(inner); {
			ioff, imsg, n, err := nextMessage(inner[ipos:])
			if err != nil {
				return nil, None, fmt.Errorf("inside the message at offset %d, at byte %d: %w", offset, ipos, err)
			}
			ipos += n
			im, err := parseMessage(imsg)
			if err != nil {
				return nil, None, fmt.Errorf("inside the message at offset %d: %w", offset, err)
			}
			if im.codec != None {
				return nil, None, fmt.Errorf("%w: compressed message inside the compressed message at offset %d", ErrCorrupt, offset)
			}
			ts := im.timestamp
			if m.magic >= 1 && m.logAppendTime {
				ts = m.timestamp
			}
			out = append(out, Record{Offset: ioff, Timestamp: TimeOf(ts), Key: im.key, Value: im.value})
		}
		if len(out) == first {
			return nil, None, fmt.Errorf("%w: compressed message at offset %d holds no messages", ErrCorrupt, offset)
		}
		if m.magic >= 1 {
			// Inner offsets are relative; the wrapper has the last one's.
			last := out[len(out)-1].Offset
			for i := first; i < len(out); i++ {
				out[i].Offset = offset - last + out[i].Offset
			}
		}
	}
	if len(out) == 0 {
		return nil, None, fmt.Errorf("%w: empty message set", ErrCorrupt)
	}
	return out, codec, nil
}

// nextMessage splits the first message set entry off b.
func nextMessage(b []byte) (offset int64, msg []byte, n int, err error) {
	if len(b) < legacyLogOverhead {
		return 0, nil, 0, fmt.Errorf("%w: %d bytes where a message header needs %d", ErrCorrupt, len(b), legacyLogOverhead)
	}
	offset = int64(binary.BigEndian.Uint64(b))
	size := int64(int32(binary.BigEndian.Uint32(b[8:])))
	if size < legacyV0Header+8 || size > int64(len(b)-legacyLogOverhead) {
		return 0, nil, 0, fmt.Errorf("%w: message size %d with %d bytes left", ErrCorrupt, size, len(b)-legacyLogOverhead)
	}
	return offset, b[legacyLogOverhead : legacyLogOverhead+size], legacyLogOverhead + int(size), nil
}

type legacyMessage struct {
	magic         int8
	codec         Codec
	logAppendTime bool
	timestamp     int64
	key, value    []byte
}

// parseMessage decodes one message (after its offset and size) and checks
// its CRC.
func parseMessage(b []byte) (legacyMessage, error) {
	var m legacyMessage
	if crc := binary.BigEndian.Uint32(b); crc != crc32.ChecksumIEEE(b[4:]) {
		return m, fmt.Errorf("%w: message CRC %08x, computed %08x", ErrCorrupt, crc, crc32.ChecksumIEEE(b[4:]))
	}
	m.magic = int8(b[4])
	attrs := b[5]
	rest := b[legacyV0Header:]
	switch m.magic {
	case 0:
		m.timestamp = NoTimestamp
	case 1:
		if len(rest) < 8 {
			return m, fmt.Errorf("%w: v1 message too short for its timestamp", ErrCorrupt)
		}
		m.timestamp = int64(binary.BigEndian.Uint64(rest))
		m.logAppendTime = attrs&legacyAttrLogAppend != 0
		rest = rest[8:]
		if m.timestamp < NoTimestamp {
			return m, fmt.Errorf("%w: message timestamp %d", ErrCorrupt, m.timestamp)
		}
	default:
		return m, fmt.Errorf("%w: message magic %d (a message set holds magic 0 or 1)", ErrCorrupt, m.magic)
	}
	switch m.codec = Codec(attrs & legacyAttrCodecMask); m.codec {
	case None, Gzip, Snappy, LZ4:
	default:
		return m, fmt.Errorf("%w: codec %d in a v%d message", ErrUnsupportedCodec, m.codec, m.magic)
	}
	var err error
	if m.key, rest, err = legacyBytes(rest, "key"); err != nil {
		return m, err
	}
	if m.value, rest, err = legacyBytes(rest, "value"); err != nil {
		return m, err
	}
	if len(rest) != 0 {
		return m, fmt.Errorf("%w: %d bytes after the message's value", ErrCorrupt, len(rest))
	}
	return m, nil
}

func legacyBytes(b []byte, what string) ([]byte, []byte, error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: message %s length cut off", ErrCorrupt, what)
	}
	l := int64(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	switch {
	case l == -1:
		return nil, b, nil
	case l < -1 || l > int64(len(b)):
		return nil, nil, fmt.Errorf("%w: message %s length %d with %d bytes left", ErrCorrupt, what, l, len(b))
	}
	return b[:l:l], b[l:], nil
}

// fixLZ4HeaderChecksum returns an LZ4 frame with its frame descriptor
// checksum (HC) recomputed. Kafka's clients of the magic 0 era computed it
// over the frame's magic number as well (KAFKA-1493, KAFKA-3160), and
// Kafka's brokers ignore it in magic 0 messages; the LZ4 reader checks it.
// A frame whose HC is right, or that is not an LZ4 frame, comes back as
// it is.
func fixLZ4HeaderChecksum(frame []byte) []byte {
	const lz4Magic = 0x184D2204
	if len(frame) < 7 || binary.LittleEndian.Uint32(frame) != lz4Magic {
		return frame
	}
	flg := frame[4]
	n := 2 // FLG and BD
	if flg&0x08 != 0 {
		n += 8 // content size
	}
	if flg&0x01 != 0 {
		n += 4 // dictionary id
	}
	if len(frame) < 4+n+1 {
		return frame
	}
	hc := byte(xxh32(frame[4:4+n]) >> 8)
	if frame[4+n] == hc {
		return frame
	}
	out := append([]byte(nil), frame...)
	out[4+n] = hc
	return out
}

// xxh32 is XXH32 with seed 0 of fewer than 16 bytes - an LZ4 frame
// descriptor is at most 14 - so the 16-byte stripe loop is left out.
func xxh32(b []byte) uint32 {
	const (
		p1 uint32 = 2654435761
		p2 uint32 = 2246822519
		p3 uint32 = 3266489917
		p4 uint32 = 668265263
		p5 uint32 = 374761393
	)
	if len(b) >= 16 {
		panic("record: xxh32 of 16 bytes or more")
	}
	rotl := func(x uint32, r uint) uint32 { return x<<r | x>>(32-r) }
	h := p5 + uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		h = rotl(h+binary.LittleEndian.Uint32(b)*p3, 17) * p4
	}
	for _, c := range b {
		h = rotl(h+uint32(c)*p5, 11) * p1
	}
	h ^= h >> 15
	h *= p2
	h ^= h >> 13
	h *= p3
	h ^= h >> 16
	return h
}
