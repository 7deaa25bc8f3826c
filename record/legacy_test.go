package record

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var legacyRecords = []Record{
	{Key: []byte("k1"), Value: []byte("v1"), Timestamp: time.UnixMilli(1_700_000_000_123)},
	{Key: nil, Value: []byte("no key")},
	{Key: []byte("tombstone"), Value: nil, Timestamp: time.UnixMilli(5)},
	{Key: []byte{}, Value: []byte{}, Timestamp: time.UnixMilli(0)},
}

// legacySet encodes recs as one uncompressed message set from offset.
func legacySet(magic int8, offset int64, recs []Record) []byte {
	var out []byte
	for i := range recs {
		out = AppendMessage(out, magic, offset+int64(i), &recs[i], false)
	}
	return out
}

// wrapper builds a compressed message holding inner (a message set) at
// offset, with the given wrapper timestamp and timestamp type.
func wrapper(t *testing.T, magic int8, codec Codec, offset int64, inner []byte, ts int64, logAppend bool) []byte {
	t.Helper()
	value, err := compress(codec, nil, inner)
	require.NoError(t, err)
	m := kmsg.MessageV1{Offset: offset, Magic: magic, Attributes: int8(codec), Timestamp: ts, Value: value}
	if logAppend {
		m.Attributes |= legacyAttrLogAppend
	}
	return kmsgMessage(magic, m)
}

// kmsgMessage encodes m with franz-go's kmsg, an independent
// implementation, filling in its size and CRC.
func kmsgMessage(magic int8, m kmsg.MessageV1) []byte {
	var b []byte
	if magic == 0 {
		v0 := kmsg.MessageV0{Offset: m.Offset, Magic: 0, Attributes: m.Attributes, Key: m.Key, Value: m.Value}
		b = v0.AppendTo(nil)
	} else {
		m.Magic = 1
		b = m.AppendTo(nil)
	}
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

func TestAppendMessageMatchesKmsg(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		for i, r := range legacyRecords {
			got := AppendMessage(nil, magic, int64(100+i), &r, false)
			want := kmsgMessage(magic, kmsg.MessageV1{Offset: int64(100 + i), Timestamp: millis(r.Timestamp), Key: r.Key, Value: r.Value})
			require.Equal(t, want, got, "magic %d record %d", magic, i)
			require.Equal(t, len(got), MessageSetSize(magic, &r))
		}
	}
	// LogAppendTime sets attribute bit 3 in v1 only.
	r := legacyRecords[0]
	require.Equal(t, byte(legacyAttrLogAppend), AppendMessage(nil, 1, 0, &r, true)[17])
	require.Equal(t, byte(0), AppendMessage(nil, 0, 0, &r, true)[17])
}

func TestParseMessageSetRoundTrip(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		got, codec, err := ParseMessageSet(legacySet(magic, 7, legacyRecords), 0)
		require.NoError(t, err)
		require.Equal(t, None, codec)
		require.Len(t, got, len(legacyRecords))
		for i, r := range got {
			want := legacyRecords[i]
			require.Equal(t, int64(7+i), r.Offset)
			require.Equal(t, want.Key, r.Key)
			require.Equal(t, want.Value, r.Value)
			require.Equal(t, want.Key == nil, r.Key == nil, "null key kept")
			require.Equal(t, want.Value == nil, r.Value == nil, "null value kept")
			if magic == 0 {
				require.True(t, r.Timestamp.IsZero(), "v0 has no timestamps")
			} else {
				require.Equal(t, want.Timestamp.UnixMilli(), r.Timestamp.UnixMilli())
				require.Equal(t, want.Timestamp.IsZero(), r.Timestamp.IsZero())
			}
		}
	}
}

// Compressed wrappers: v0 inner offsets are absolute, v1 relative to the
// wrapper (which carries the last one's absolute offset); a LogAppendTime
// wrapper's time is every inner message's.
func TestParseMessageSetCompressed(t *testing.T) {
	for _, codec := range []Codec{Gzip, Snappy, LZ4} {
		for _, magic := range []int8{0, 1} {
			t.Run(codec.String()+"/v"+string('0'+rune(magic)), func(t *testing.T) {
				var set []byte
				if magic == 0 {
					set = wrapper(t, 0, codec, 3, legacySet(0, 0, legacyRecords), 0, false)
				} else {
					set = wrapper(t, 1, codec, 50, legacySet(1, 0, legacyRecords), 999, false)
				}
				set = append(set, AppendMessage(nil, magic, 51, &legacyRecords[0], false)...)
				got, gotCodec, err := ParseMessageSet(set, 0)
				require.NoError(t, err)
				require.Equal(t, codec, gotCodec, "the wrapper's codec")
				require.Len(t, got, len(legacyRecords)+1)
				for i, r := range got[:len(legacyRecords)] {
					if magic == 0 {
						require.Equal(t, int64(i), r.Offset, "v0: inner offsets as written")
					} else {
						require.Equal(t, int64(50-len(legacyRecords)+1+i), r.Offset, "v1: relative to the wrapper")
						require.Equal(t, legacyRecords[i].Timestamp.UnixMilli(), r.Timestamp.UnixMilli(), "CreateTime: the inner message's")
					}
					require.Equal(t, legacyRecords[i].Value, r.Value)
				}
				require.Equal(t, int64(51), got[len(got)-1].Offset)
			})
		}
	}
	set := wrapper(t, 1, Gzip, 9, legacySet(1, 0, legacyRecords), 4242, true)
	got, _, err := ParseMessageSet(set, 0)
	require.NoError(t, err)
	for _, r := range got {
		require.Equal(t, int64(4242), r.Timestamp.UnixMilli(), "LogAppendTime: the wrapper's")
	}
}

func TestParseMessageSetRejects(t *testing.T) {
	good := legacySet(1, 0, legacyRecords[:2])
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		return b
	}
	withMagic := func(m byte) []byte {
		b := append([]byte(nil), good[:legacyLogOverhead+MessageSetSize(1, &legacyRecords[0])-legacyLogOverhead]...)
		b[16] = m
		binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
		return b
	}
	nested := wrapper(t, 1, Gzip, 0, wrapper(t, 1, Gzip, 0, legacySet(1, 0, legacyRecords), 0, false), 0, false)
	emptyWrapper := wrapper(t, 1, Snappy, 0, nil, 0, false)
	nullWrapper := kmsgMessage(1, kmsg.MessageV1{Attributes: int8(Gzip)})
	zstdMsg := kmsgMessage(1, kmsg.MessageV1{Attributes: int8(ZSTD), Value: []byte("x")})
	big := wrapper(t, 1, Gzip, 0, legacySet(1, 0, []Record{{Value: make([]byte, 10_000)}}), 0, false)
	for name, c := range map[string]struct {
		set []byte
		max int
	}{
		"empty":              {nil, 0},
		"bit flip in value":  {flip(len(good) - 1), 0},
		"bit flip in crc":    {flip(12), 0},
		"partial at the end": {good[:len(good)-3], 0},
		"header only":        {good[:10], 0},
		"size past the end":  {append(good[:8:8], 0, 0, 1, 0), 0},
		"magic 2":            {withMagic(2), 0},
		"nested compression": {nested, 0},
		"empty wrapper":      {emptyWrapper, 0},
		"null wrapper value": {nullWrapper, 0},
		"zstd":               {zstdMsg, 0},
		"over the limit":     {big, 1000},
	} {
		_, _, err := ParseMessageSet(c.set, c.max)
		require.Error(t, err, name)
		switch name {
		case "zstd":
			require.ErrorIs(t, err, ErrUnsupportedCodec, name)
		case "over the limit":
			require.ErrorIs(t, err, ErrDecompressedTooLarge, name)
		default:
			require.ErrorIs(t, err, ErrCorrupt, name)
		}
	}
}

// FuzzMessageSet: no input panics, and what parses re-encodes (as v1) to a
// set that parses to the same records.
func FuzzMessageSet(f *testing.F) {
	f.Add(legacySet(0, 0, legacyRecords))
	f.Add(legacySet(1, 5, legacyRecords))
	for _, c := range []Codec{Gzip, Snappy, LZ4} {
		v, _ := compress(c, nil, legacySet(1, 0, legacyRecords))
		f.Add(kmsgMessage(1, kmsg.MessageV1{Offset: 3, Attributes: int8(c), Value: v}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, _, err := ParseMessageSet(data, 1<<20)
		if err != nil {
			require.Nil(t, recs)
			return
		}
		var again []byte
		for i := range recs {
			again = AppendMessage(again, 1, recs[i].Offset, &recs[i], false)
		}
		back, _, err := ParseMessageSet(again, 1<<20)
		require.NoError(t, err)
		require.Len(t, back, len(recs))
		for i := range recs {
			require.Equal(t, recs[i].Offset, back[i].Offset)
			require.Equal(t, recs[i].Key, back[i].Key)
			require.Equal(t, recs[i].Value, back[i].Value)
			require.Equal(t, recs[i].Timestamp.UnixMilli(), back[i].Timestamp.UnixMilli())
		}
	})
}

// XXH32 against reference values (seed 0) and against the descriptor
// checksum the LZ4 writer puts in a real frame.
func TestXXH32(t *testing.T) {
	require.Equal(t, uint32(0x02CC5D05), xxh32(nil))
	require.Equal(t, uint32(0x550D7456), xxh32([]byte("a")))
	require.Equal(t, uint32(0x32D153FF), xxh32([]byte("abc")))
	frame, err := compress(LZ4, nil, []byte("some records"))
	require.NoError(t, err)
	n := 2
	if frame[4]&0x08 != 0 {
		n += 8
	}
	require.Equal(t, frame[4+n], byte(xxh32(frame[4:4+n])>>8))
}

// Magic 0 LZ4 wrappers from Kafka 0.8/0.9-era clients carry a frame
// descriptor checksum computed over the magic number too (KAFKA-3160);
// Kafka accepts them in magic 0 and refuses them in magic 1.
func TestParseMessageSetOldLZ4Checksum(t *testing.T) {
	for _, magic := range []int8{0, 1} {
		inner := legacySet(magic, 0, legacyRecords)
		frame, err := compress(LZ4, nil, inner)
		require.NoError(t, err)
		n := 2
		if frame[4]&0x08 != 0 {
			n += 8
		}
		broken := append([]byte(nil), frame...)
		broken[4+n] = byte(xxh32(broken[:4+n]) >> 8) // over the magic too
		require.NotEqual(t, frame[4+n], broken[4+n])
		set := kmsgMessage(magic, kmsg.MessageV1{Offset: int64(len(legacyRecords) - 1), Attributes: int8(LZ4), Value: broken})
		got, _, err := ParseMessageSet(set, 0)
		if magic == 1 {
			require.ErrorIs(t, err, ErrCorrupt, "magic 1 frames must be right")
			continue
		}
		require.NoError(t, err)
		require.Len(t, got, len(legacyRecords))
		require.Equal(t, legacyRecords[3].Value, got[3].Value)
	}
}
