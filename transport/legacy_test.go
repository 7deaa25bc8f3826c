package transport

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// legacyValues encodes values as an uncompressed message set of magic
// (0 or 1), with keys "k<i>" and CreateTimes ts+i in v1.
func legacyValues(magic int8, ts int64, values ...string) []byte {
	var set []byte
	for i, v := range values {
		r := record.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v), Timestamp: time.UnixMilli(ts + int64(i))}
		set = record.AppendMessage(set, magic, int64(i), &r, false)
	}
	return set
}

// legacyWrapper wraps a message set of n messages in one gzip-compressed
// v1 message, as old producers batch (inner offsets relative, the
// wrapper's the last).
func legacyWrapper(t *testing.T, inner []byte, n int) []byte {
	t.Helper()
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, err := w.Write(inner)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	m := kmsg.MessageV1{Offset: int64(n - 1), Magic: 1, Attributes: 1, Timestamp: 1_600_000_000_000, Value: z.Bytes()}
	out := m.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[12:], crc32.ChecksumIEEE(out[16:]))
	return out
}

// legacyFetch fetches a partition from offset at an old version and
// parses the message set it returns, checking every message's magic.
func legacyFetch(t *testing.T, addr string, version int16, topic string, offset int64, maxBytes int32) (kmsg.FetchResponseTopicPartition, []record.Record) {
	t.Helper()
	c := prodDial(t, addr)
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.MaxWaitMillis = 10
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := prodCall[*kmsg.FetchResponse](t, c, 3, req)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	p := resp.Topics[0].Partitions[0]
	if len(p.RecordBatches) == 0 {
		return p, nil
	}
	wantMagic := byte(0)
	if version >= 2 {
		wantMagic = 1
	}
	for pos := 0; pos < len(p.RecordBatches); {
		size := int(binary.BigEndian.Uint32(p.RecordBatches[pos+8:]))
		require.Equal(t, wantMagic, p.RecordBatches[pos+16], "Fetch v%d returns magic %d", version, wantMagic)
		pos += 12 + size
	}
	recs, _, err := record.ParseMessageSet(p.RecordBatches, 0)
	require.NoError(t, err)
	return p, recs
}

// Produce v0-v2 carry message sets (magic 0 and 1, compressed or not),
// which are stored as RecordBatch v2; Fetch v0-v3 return them down-converted
// to magic 0 (v0-v1) or 1 (v2-v3), and Fetch v4+ the batches.
func TestLegacyProduceAndFetch(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{}, Options{})
	prodCreateTopic(t, b, "old", 1)
	c := prodDial(t, addr)

	out := prodOne(t, c, 0, "old", 0, legacyValues(0, 0, "a", "b"))
	require.Equal(t, errNone, out.ErrorCode)
	require.Equal(t, int64(0), out.BaseOffset)
	out = prodOne(t, c, 2, "old", 0, legacyValues(1, 1_700_000_000_000, "c", "d", "e"))
	require.Equal(t, errNone, out.ErrorCode)
	require.Equal(t, int64(2), out.BaseOffset)
	out = prodOne(t, c, 1, "old", 0, legacyWrapper(t, legacyValues(1, 1_700_000_000_100, "f", "g"), 2))
	require.Equal(t, errNone, out.ErrorCode)
	require.Equal(t, int64(5), out.BaseOffset)
	// A new producer's batch with headers, read by an old consumer.
	hb, err := record.NewBatch([]record.Record{{Value: []byte("h"), Headers: []record.Header{{Key: "x", Value: []byte("y")}}, Timestamp: time.UnixMilli(1_700_000_000_200)}}, record.BatchOptions{})
	require.NoError(t, err)
	out = prodOne(t, c, 9, "old", 0, hb.Bytes())
	require.Equal(t, errNone, out.ErrorCode)
	require.Equal(t, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, prodReadBack(t, b, "old", 0))

	for version := int16(0); version <= 3; version++ {
		p, recs := legacyFetch(t, addr, version, "old", 0, 1<<20)
		require.Equal(t, errNone, p.ErrorCode)
		require.Equal(t, int64(8), p.HighWatermark)
		require.Len(t, recs, 8, "v%d", version)
		for i, r := range recs {
			require.Equal(t, int64(i), r.Offset)
			require.Equal(t, string("abcdefgh"[i]), string(r.Value))
			switch {
			case version < 2 || i < 2:
				require.True(t, r.Timestamp.IsZero(), "v%d offset %d: no timestamp", version, i)
			case i < 5:
				require.Equal(t, int64(1_700_000_000_000+i-2), r.Timestamp.UnixMilli())
			}
		}
		require.Equal(t, "k0", string(recs[2].Key))

		// From the middle of a batch; a small max returns whole
		// messages, at least one.
		_, recs = legacyFetch(t, addr, version, "old", 3, 1)
		require.Len(t, recs, 1)
		require.Equal(t, int64(3), recs[0].Offset)
		_, recs = legacyFetch(t, addr, version, "old", 8, 1<<20)
		require.Empty(t, recs)
		p, _ = legacyFetch(t, addr, version, "old", 9, 1<<20)
		require.Equal(t, errOffsetOutOfRange, p.ErrorCode)
	}
}

// Bad message sets are refused with Kafka's codes and append nothing.
func TestLegacyProduceRejects(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{}, Options{})
	prodCreateTopic(t, b, "old", 1)
	c := prodDial(t, addr)
	good := legacyValues(1, 1_700_000_000_000, "a")
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	zstd := kmsg.MessageV1{Magic: 1, Attributes: 4, Value: []byte("x")}
	zb := zstd.AppendTo(nil)
	binary.BigEndian.PutUint32(zb[8:], uint32(len(zb)-12))
	binary.BigEndian.PutUint32(zb[12:], crc32.ChecksumIEEE(zb[16:]))
	batch, err := record.NewBatch([]record.Record{{Value: []byte("v2")}}, record.BatchOptions{})
	require.NoError(t, err)
	for name, c2 := range map[string]struct {
		set  []byte
		code int16
	}{
		"bad crc":       {flipped, errCorruptMessage},
		"partial":       {good[:len(good)-2], errCorruptMessage},
		"empty":         {[]byte{}, errCorruptMessage},
		"zstd":          {zb, errUnsupportedCompressionType},
		"a v2 batch":    {batch.Bytes(), errCorruptMessage},
		"garbage after": {append(append([]byte(nil), good...), 1, 2, 3), errCorruptMessage},
	} {
		out := prodOne(t, c, 2, "old", 0, c2.set)
		require.Equal(t, c2.code, out.ErrorCode, name)
		require.Equal(t, int64(-1), out.BaseOffset, name)
	}
	require.Empty(t, prodReadBack(t, b, "old", 0))
}

// A compressed old message set is stored in the producer's codec, so
// max.message.bytes applies to about what the producer sent: a gzip set of
// a few KiB holding 2 MiB is accepted (found in review: it was stored
// uncompressed and refused as too large).
func TestLegacyProduceKeepsCodec(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{}, Options{})
	prodCreateTopic(t, b, "old", 1)
	c := prodDial(t, addr)
	r := record.Record{Value: bytes.Repeat([]byte("z"), 2<<20)}
	set := legacyWrapper(t, record.AppendMessage(nil, 1, 0, &r, false), 1)
	require.Less(t, len(set), 64<<10)
	out := prodOne(t, c, 2, "old", 0, set)
	require.Equal(t, errNone, out.ErrorCode)
	p, err := b.Partition("old", 0)
	require.NoError(t, err)
	raw, err := p.Log().Read(0, 1<<20)
	require.NoError(t, err)
	bt, _, err := record.ParseBatch(raw)
	require.NoError(t, err)
	require.Equal(t, record.Gzip, bt.Compression())
	require.Less(t, bt.Size(), 64<<10)
}

// Down-converted fetches stay within what the compressed batches read
// took, whole messages and at least one: highly compressible batches do
// not swell an old consumer's response past its limits (found in review:
// a 64 KiB fetch returned 3.9 MB).
func TestLegacyFetchBoundedByWhatWasRead(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{}, Options{})
	prodCreateTopic(t, b, "z", 1)
	c := prodDial(t, addr)
	recs := make([]record.Record, 500)
	for i := range recs {
		recs[i] = record.Record{Value: bytes.Repeat([]byte{byte(i)}, 4<<10)}
	}
	for range 2 {
		bt, err := record.NewBatch(recs, record.BatchOptions{Compression: record.Gzip})
		require.NoError(t, err)
		require.Less(t, bt.Size(), 64<<10)
		require.Equal(t, errNone, prodOne(t, c, 9, "z", 0, bt.Bytes()).ErrorCode)
	}
	p, got := legacyFetch(t, addr, 3, "z", 0, 1<<20)
	require.Equal(t, errNone, p.ErrorCode)
	require.NotEmpty(t, got)
	require.Less(t, len(p.RecordBatches), 128<<10, "bounded by the compressed bytes read, not by 1 MiB of partition max")
	// A message larger than the limit still comes, alone.
	_, got = legacyFetch(t, addr, 3, "z", 7, 10)
	require.Len(t, got, 1)
	require.Equal(t, int64(7), got[0].Offset)
}
