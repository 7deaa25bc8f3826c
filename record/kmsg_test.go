package record

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cross-checks against franz-go, an independent implementation of the same
// format: kmsg for the batch and record layout, kgo's codecs for compression.

var kgoCodecs = map[Codec]kgo.CompressionCodec{
	Gzip:   kgo.GzipCompression(),
	Snappy: kgo.SnappyCompression(),
	LZ4:    kgo.Lz4Compression(),
	ZSTD:   kgo.ZstdCompression(),
}

func TestOursDecodeWithKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	dec := kgo.DefaultDecompressor()
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			recs := sampleRecords(rng, 200)
			b, err := NewBatch(recs, BatchOptions{Compression: c, Producer: &ProducerInfo{ID: 42, Epoch: 1, BaseSequence: 100}})
			require.NoError(t, err)
			b.SetBaseOffset(5000)
			b.SetPartitionLeaderEpoch(3)

			var kb kmsg.RecordBatch
			require.NoError(t, kb.ReadFrom(b.Bytes()))
			require.Equal(t, int64(5000), kb.FirstOffset)
			require.Equal(t, int32(b.Size()-LogOverhead), kb.Length)
			require.Equal(t, int32(3), kb.PartitionLeaderEpoch)
			require.Equal(t, int8(2), kb.Magic)
			require.Equal(t, crc32.Checksum(b.Bytes()[21:], crc32.MakeTable(crc32.Castagnoli)), uint32(kb.CRC))
			require.Equal(t, int16(c), kb.Attributes&7)
			require.Equal(t, int32(199), kb.LastOffsetDelta)
			require.Equal(t, int64(42), kb.ProducerID)
			require.Equal(t, int16(1), kb.ProducerEpoch)
			require.Equal(t, int32(100), kb.FirstSequence)
			require.Equal(t, int32(200), kb.NumRecords)

			raw, err := dec.Decompress(kb.Records, kgo.CompressionCodecType(c))
			require.NoError(t, err)
			for i := range recs {
				length, n := binary.Varint(raw)
				require.Positive(t, n)
				var kr kmsg.Record
				require.NoError(t, kr.ReadFrom(raw[:n+int(length)]))
				raw = raw[n+int(length):]
				require.Equal(t, int32(i), kr.OffsetDelta)
				require.Equal(t, recs[i].Timestamp.UnixMilli(), kb.FirstTimestamp+kr.TimestampDelta64)
				require.Equal(t, recs[i].Key, kr.Key)
				require.Equal(t, recs[i].Value, kr.Value)
				require.Len(t, kr.Headers, len(recs[i].Headers))
				for j, h := range recs[i].Headers {
					require.Equal(t, h.Key, kr.Headers[j].Key)
					require.Equal(t, h.Value, kr.Headers[j].Value)
				}
			}
			require.Empty(t, raw)
		})
	}
}

func TestKmsgDecodeWithOurs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			recs := sampleRecords(rng, 150)
			first := recs[0].Timestamp.UnixMilli()
			maxTS := first
			var raw []byte
			for i, r := range recs {
				kr := kmsg.Record{
					TimestampDelta64: r.Timestamp.UnixMilli() - first,
					OffsetDelta:      int32(i),
					Key:              r.Key,
					Value:            r.Value,
				}
				for _, h := range r.Headers {
					kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
				}
				maxTS = max(maxTS, r.Timestamp.UnixMilli())
				body := kr.AppendTo(nil) // Length 0: measure, then write for real
				kr.Length = int32(len(body) - 1)
				raw = kr.AppendTo(raw)
			}
			if c != None {
				comp, err := kgo.DefaultCompressor(kgoCodecs[c])
				require.NoError(t, err)
				var buf bytes.Buffer
				out, typ := comp.Compress(&buf, raw)
				require.Equal(t, kgo.CompressionCodecType(c), typ)
				raw = append([]byte(nil), out...)
			}
			kb := kmsg.RecordBatch{
				FirstOffset:          77,
				PartitionLeaderEpoch: 5,
				Magic:                2,
				Attributes:           int16(c),
				LastOffsetDelta:      int32(len(recs) - 1),
				FirstTimestamp:       first,
				MaxTimestamp:         maxTS,
				ProducerID:           -1,
				ProducerEpoch:        -1,
				FirstSequence:        -1,
				NumRecords:           int32(len(recs)),
				Records:              raw,
			}
			wire := kb.AppendTo(nil)
			binary.BigEndian.PutUint32(wire[8:], uint32(len(wire)-12))
			binary.BigEndian.PutUint32(wire[17:], crc32.Checksum(wire[21:], crc32.MakeTable(crc32.Castagnoli)))

			b, size, err := ParseBatch(wire)
			require.NoError(t, err)
			require.Equal(t, len(wire), size)
			require.NoError(t, b.Verify())
			require.Equal(t, int64(77), b.BaseOffset())
			require.Equal(t, int32(5), b.PartitionLeaderEpoch())
			require.Equal(t, maxTS, b.MaxTimestamp())
			got, err := b.Records()
			require.NoError(t, err)
			requireSameRecords(t, recs, got, 77)
		})
	}
}
