package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/spoolmq/spool/internal/race"
	"github.com/stretchr/testify/require"
)

var codecs = []Codec{None, Gzip, Snappy, LZ4, ZSTD}

func sampleRecords(rng *rand.Rand, n int) []Record {
	base := time.UnixMilli(1_700_000_000_000)
	recs := make([]Record, n)
	for i := range recs {
		r := Record{Timestamp: base.Add(time.Duration(rng.IntN(5000)-1000) * time.Millisecond)}
		if rng.IntN(4) != 0 {
			r.Key = []byte(fmt.Sprintf("key-%d", rng.IntN(100)))
		}
		if rng.IntN(8) != 0 {
			r.Value = bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(300))
		}
		for h := rng.IntN(3); h > 0; h-- {
			r.Headers = append(r.Headers, Header{Key: fmt.Sprintf("h%d", h), Value: []byte("v")})
		}
		if rng.IntN(10) == 0 {
			r.Headers = append(r.Headers, Header{Key: "null-value"})
		}
		recs[i] = r
	}
	return recs
}

func requireSameRecords(t *testing.T, want, got []Record, baseOffset int64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, baseOffset+int64(i), got[i].Offset, "record %d", i)
		require.Equal(t, want[i].Timestamp.UnixMilli(), got[i].Timestamp.UnixMilli(), "record %d", i)
		require.Equal(t, want[i].Key, got[i].Key, "record %d key", i)
		require.Equal(t, want[i].Value, got[i].Value, "record %d value", i)
		require.Equal(t, len(want[i].Headers), len(got[i].Headers), "record %d headers", i)
		for j := range want[i].Headers {
			require.Equal(t, want[i].Headers[j], got[i].Headers[j])
		}
	}
}

func TestRoundTripAllCodecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			for _, n := range []int{1, 2, 17, 500} {
				recs := sampleRecords(rng, n)
				b, err := NewBatch(recs, BatchOptions{Compression: c, Producer: &ProducerInfo{ID: 7, Epoch: 3, BaseSequence: 40}})
				require.NoError(t, err)
				require.NoError(t, b.Verify())
				require.Equal(t, c, b.Compression())
				require.Equal(t, int32(n-1), b.LastOffsetDelta())
				require.Equal(t, int32(n), b.NumRecords())
				require.Equal(t, int64(7), b.ProducerID())
				require.Equal(t, int16(3), b.ProducerEpoch())
				require.Equal(t, int32(40), b.BaseSequence())
				require.Equal(t, int32(-1), b.PartitionLeaderEpoch())
				require.Equal(t, recs[0].Timestamp.UnixMilli(), b.FirstTimestamp())
				max := int64(0)
				for _, r := range recs {
					max = maxInt(max, r.Timestamp.UnixMilli())
				}
				require.Equal(t, max, b.MaxTimestamp())

				// Stamping base offset and epoch leaves the CRC valid.
				b.SetBaseOffset(1000)
				b.SetPartitionLeaderEpoch(9)
				require.NoError(t, b.Verify())
				require.Equal(t, int64(1000+n-1), b.LastOffset())
				got, err := b.Records()
				require.NoError(t, err)
				requireSameRecords(t, recs, got, 1000)
			}
		})
	}
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func TestNowFillsMissingTimestamps(t *testing.T) {
	now := time.UnixMilli(1_234_567_890_123)
	b, err := NewBatch([]Record{{Value: []byte("a")}, {Value: []byte("b"), Timestamp: now.Add(time.Second)}}, BatchOptions{Now: now})
	require.NoError(t, err)
	got, err := b.Records()
	require.NoError(t, err)
	require.Equal(t, now.UnixMilli(), got[0].Timestamp.UnixMilli())
	require.Equal(t, now.Add(time.Second).UnixMilli(), got[1].Timestamp.UnixMilli())

	b, err = NewBatch([]Record{{Value: []byte("a")}}, BatchOptions{})
	require.NoError(t, err)
	require.Equal(t, NoTimestamp, b.MaxTimestamp())
	got, err = b.Records()
	require.NoError(t, err)
	require.True(t, got[0].Timestamp.IsZero())
}

func TestEncodeRejects(t *testing.T) {
	_, err := NewBatch(nil, BatchOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = NewBatch([]Record{{Timestamp: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)}}, BatchOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = NewBatch([]Record{{}}, BatchOptions{Compression: 6})
	require.ErrorIs(t, err, ErrUnsupportedCodec)
	dst := []byte("keep")
	out, err := AppendBatch(dst, nil, BatchOptions{})
	require.Error(t, err)
	require.Equal(t, "keep", string(out))
}

func TestParseBatchFraming(t *testing.T) {
	b, err := NewBatch([]Record{{Value: []byte("hello")}}, BatchOptions{})
	require.NoError(t, err)
	raw := b.Bytes()

	for n := 0; n < len(raw); n++ {
		_, _, err := ParseBatch(raw[:n])
		require.ErrorIs(t, err, ErrTruncated, "prefix %d", n)
	}
	got, size, err := ParseBatch(append(append([]byte{}, raw...), 1, 2, 3))
	require.NoError(t, err)
	require.Equal(t, len(raw), size)
	require.Equal(t, raw, got.Bytes())

	bad := append([]byte{}, raw...)
	bad[offMagic] = 1
	_, _, err = ParseBatch(bad)
	require.ErrorIs(t, err, ErrCorrupt)

	bad = append([]byte{}, raw...)
	binary.BigEndian.PutUint32(bad[offLength:], 10)
	_, _, err = ParseBatch(bad)
	require.ErrorIs(t, err, ErrCorrupt)
	binary.BigEndian.PutUint32(bad[offLength:], uint32(0xffffffff))
	_, _, err = ParseBatch(bad)
	require.ErrorIs(t, err, ErrCorrupt)
}

// Every single-bit flip in the part the CRC covers is detected.
func TestVerifyDetectsEveryBitFlip(t *testing.T) {
	b, err := NewBatch(sampleRecords(rand.New(rand.NewPCG(3, 4)), 5), BatchOptions{})
	require.NoError(t, err)
	raw := b.Bytes()
	for i := offAttributes; i < len(raw); i++ {
		for bit := 0; bit < 8; bit++ {
			c := append([]byte{}, raw...)
			c[i] ^= 1 << bit
			pb, _, err := ParseBatch(c)
			require.NoError(t, err)
			require.ErrorIs(t, pb.Verify(), ErrCorrupt, "byte %d bit %d", i, bit)
			_, err = pb.Records()
			require.ErrorIs(t, err, ErrCorrupt)
		}
	}
}

// restamp recomputes a batch's CRC after a test edits covered bytes, so that
// the structural checks behind the CRC are what catches the damage.
func restamp(raw []byte) {
	binary.BigEndian.PutUint32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
}

func TestStructuralChecksBehindCRC(t *testing.T) {
	mk := func() []byte {
		b, err := NewBatch([]Record{{Key: []byte("k"), Value: []byte("v")}, {Value: []byte("w")}}, BatchOptions{})
		require.NoError(t, err)
		return b.Bytes()
	}
	cases := map[string]func([]byte){
		"count too high":       func(r []byte) { binary.BigEndian.PutUint32(r[offRecordCount:], 3) },
		"count too low":        func(r []byte) { binary.BigEndian.PutUint32(r[offRecordCount:], 1) },
		"negative count":       func(r []byte) { binary.BigEndian.PutUint32(r[offRecordCount:], math.MaxUint32) },
		"negative delta":       func(r []byte) { binary.BigEndian.PutUint32(r[offLastOffsetDelta:], math.MaxUint32) },
		"delta below records":  func(r []byte) { binary.BigEndian.PutUint32(r[offLastOffsetDelta:], 0) },
		"unknown codec":        func(r []byte) { binary.BigEndian.PutUint16(r[offAttributes:], 6) },
		"wrong codec":          func(r []byte) { binary.BigEndian.PutUint16(r[offAttributes:], uint16(Gzip)) },
		"huge record count":    func(r []byte) { binary.BigEndian.PutUint32(r[offRecordCount:], math.MaxInt32) },
		"record length varint": func(r []byte) { r[HeaderSize] = 0xff },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			raw := mk()
			edit(raw)
			restamp(raw)
			b, _, err := ParseBatch(raw)
			require.NoError(t, err)
			_, err = b.Records()
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}

	// The base offset is outside the CRC: a value that overflows is caught
	// by Verify's header check.
	raw := mk()
	binary.BigEndian.PutUint64(raw[offBaseOffset:], math.MaxInt64)
	b, _, err := ParseBatch(raw)
	require.NoError(t, err)
	require.ErrorIs(t, b.Verify(), ErrCorrupt)
}

func TestDecompressionBombIsRefused(t *testing.T) {
	big := make([]Record, 1)
	big[0].Value = make([]byte, 8<<20) // 8 MiB of zeros compresses to almost nothing
	for _, c := range codecs[1:] {
		t.Run(c.String(), func(t *testing.T) {
			b, err := NewBatch(big, BatchOptions{Compression: c})
			require.NoError(t, err)
			require.Less(t, b.Size(), 1<<20)
			var it Iterator
			it.MaxUncompressedBytes = 1 << 20
			it.Reset(b)
			require.False(t, it.Next())
			require.ErrorIs(t, it.Err(), ErrDecompressedTooLarge)
			require.ErrorIs(t, it.Err(), ErrRecordTooLarge)

			it.MaxUncompressedBytes = 16 << 20
			it.Reset(b)
			require.True(t, it.Next())
			require.Len(t, it.Record().Value, 8<<20)
		})
	}
}

func TestXerialSnappy(t *testing.T) {
	recs := sampleRecords(rand.New(rand.NewPCG(5, 6)), 50)
	plain, err := NewBatch(recs, BatchOptions{})
	require.NoError(t, err)
	block := plain.Bytes()[HeaderSize:]

	// Frame the records block as snappy-java does: header, then blocks of
	// at most 32 KiB each behind a big-endian length.
	framed := append([]byte{}, xerialMagic...)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	framed = binary.BigEndian.AppendUint32(framed, 1)
	for rest := block; len(rest) > 0; {
		n := min(len(rest), 1000)
		enc := s2.EncodeSnappy(nil, rest[:n])
		framed = binary.BigEndian.AppendUint32(framed, uint32(len(enc)))
		framed = append(framed, enc...)
		rest = rest[n:]
	}
	raw := append([]byte{}, plain.Bytes()[:HeaderSize]...)
	raw = append(raw, framed...)
	binary.BigEndian.PutUint32(raw[offLength:], uint32(len(raw)-LogOverhead))
	binary.BigEndian.PutUint16(raw[offAttributes:], uint16(Snappy))
	restamp(raw)
	b, _, err := ParseBatch(raw)
	require.NoError(t, err)
	got, err := b.Records()
	require.NoError(t, err)
	requireSameRecords(t, recs, got, 0)

	// A block length running past the end is corruption, not a panic.
	cut := append([]byte{}, raw[:len(raw)-3]...)
	binary.BigEndian.PutUint32(cut[offLength:], uint32(len(cut)-LogOverhead))
	restamp(cut)
	b, _, err = ParseBatch(cut)
	require.NoError(t, err)
	_, err = b.Records()
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestGarbageCompressedPayload(t *testing.T) {
	for _, c := range codecs[1:] {
		b, err := NewBatch([]Record{{Value: []byte("x")}}, BatchOptions{})
		require.NoError(t, err)
		raw := append([]byte{}, b.Bytes()...)
		binary.BigEndian.PutUint16(raw[offAttributes:], uint16(c))
		restamp(raw)
		pb, _, err := ParseBatch(raw)
		require.NoError(t, err)
		_, err = pb.Records()
		require.Error(t, err, c.String())
		require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrRecordTooLarge), "%s: %v", c, err)
	}
}

func TestParseCodec(t *testing.T) {
	for _, c := range codecs {
		got, err := ParseCodec(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	_, err := ParseCodec("brotli")
	require.ErrorIs(t, err, ErrUnsupportedCodec)
}

func TestVarint(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64} {
		b := appendVarint(nil, v)
		require.Equal(t, varintSize(v), len(b))
		got, n, err := readVarint(b, 10)
		require.NoError(t, err)
		require.Equal(t, v, got)
		require.Equal(t, len(b), n)
	}
	_, _, err := readVarint([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 5)
	require.Error(t, err)
	_, _, err = readVarint([]byte{0x80}, 5)
	require.Error(t, err)
}

func TestIteratorReuseDoesNotAllocate(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops items under -race; allocation counts are checked without it")
	}
	recs := sampleRecords(rand.New(rand.NewPCG(7, 8)), 100)
	for i := range recs {
		recs[i].Headers = nil
	}
	for _, c := range []Codec{None, Snappy, LZ4, ZSTD, Gzip} {
		b, err := NewBatch(recs, BatchOptions{Compression: c})
		require.NoError(t, err)
		var it Iterator
		it.Reset(b)
		for it.Next() {
		}
		require.NoError(t, it.Err())
		allocs := testing.AllocsPerRun(20, func() {
			it.Reset(b)
			for it.Next() {
			}
		})
		require.Zero(t, allocs, c.String())
	}
}

func TestAppendBatchDoesNotAllocate(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops items under -race; allocation counts are checked without it")
	}
	recs := sampleRecords(rand.New(rand.NewPCG(9, 10)), 100)
	for _, c := range codecs {
		buf := make([]byte, 0, 1<<20)
		_, err := AppendBatch(buf, recs, BatchOptions{Compression: c})
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(20, func() {
			_, _ = AppendBatch(buf[:0], recs, BatchOptions{Compression: c})
		})
		require.Zero(t, allocs, c.String())
	}
}
