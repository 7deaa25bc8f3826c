package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The fetch tests speak to the server with franz-go (kgo) for end-to-end
// consumption, and over bare connections (fetchDo) where the test must
// choose the exact version and fields on the wire.

// fetchOpts: no fsync per append, so tests produce quickly.
var fetchOpts = spool.Options{Flush: log.None}

var fetchCorrelation atomic.Int32

func fetchDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// fetchRoundTrip writes req at version and reads and decodes the response.
// It also returns the raw body, for byte-level checks.
func fetchRoundTrip(c net.Conn, version int16, req kmsg.Request, timeout time.Duration) (kmsg.Response, []byte, error) {
	req.SetVersion(version)
	corr := fetchCorrelation.Add(1)
	frame := binary.BigEndian.AppendUint32(nil, 0)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 0xffff)
	if req.IsFlexible() {
		frame = append(frame, 0)
	}
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(frame); err != nil {
		return nil, nil, err
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		return nil, nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, nil, err
	}
	if int32(binary.BigEndian.Uint32(b)) != corr {
		return nil, nil, fmt.Errorf("correlation id %d, want %d", int32(binary.BigEndian.Uint32(b)), corr)
	}
	b = b[4:]
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if resp.IsFlexible() {
		if len(b) == 0 || b[0] != 0 {
			return nil, nil, fmt.Errorf("response header tags %x", b[:min(len(b), 1)])
		}
		b = b[1:]
	}
	return resp, b, resp.ReadFrom(b)
}

func fetchDo[Resp kmsg.Response](t testing.TB, c net.Conn, version int16, req kmsg.Request) Resp {
	t.Helper()
	resp, _, err := fetchRoundTrip(c, version, req, 10*time.Second)
	require.NoError(t, err, "%s v%d", kmsg.NameForKey(req.Key()), version)
	return resp.(Resp)
}

func fetchCreate(t testing.TB, b *spool.Broker, topic string, partitions int32) {
	t.Helper()
	require.NoError(t, b.CreateTopic(context.Background(), topic, spool.TopicConfig{Partitions: partitions}))
}

// fetchAppend appends n batches of perBatch records with values of size
// bytes to a partition, and returns the log's bytes of the new batches.
func fetchAppend(t testing.TB, b *spool.Broker, topic string, part int32, n, perBatch, size int) {
	t.Helper()
	p, err := b.Partition(topic, part)
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		recs := make([]record.Record, perBatch)
		for j := range recs {
			off := p.EndOffset() + int64(j)
			v := bytes.Repeat([]byte{byte('a' + off%26)}, size)
			copy(v, fmt.Sprintf("%s/%d/%d;", topic, part, off))
			recs[j] = record.Record{Key: []byte(fmt.Sprint(off)), Value: v}
		}
		_, err := p.Append(recs...)
		require.NoError(t, err)
	}
}

func fetchValue(topic string, part int32, off int64, size int) []byte {
	v := bytes.Repeat([]byte{byte('a' + off%26)}, size)
	copy(v, fmt.Sprintf("%s/%d/%d;", topic, part, off))
	return v
}

// logBytes is what the partition's log holds from offset, up to maxBytes.
func logBytes(t testing.TB, b *spool.Broker, topic string, part int32, offset int64, maxBytes int) []byte {
	t.Helper()
	p, err := b.Partition(topic, part)
	require.NoError(t, err)
	out, err := p.Log().Read(offset, maxBytes)
	require.NoError(t, err)
	return out
}

func fetchReq(maxWait, minBytes, maxBytes int32, topic string, parts map[int32]int64, partMax int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = maxWait, minBytes, maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < int32(len(parts))+100 && len(rt.Partitions) < len(parts); p++ {
		off, ok := parts[p]
		if !ok {
			continue
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, partMax
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// batchesOf splits record bytes into batches.
func batchesOf(t testing.TB, buf []byte) []record.Batch {
	t.Helper()
	var out []record.Batch
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		require.NoError(t, err)
		require.NoError(t, b.Verify())
		out = append(out, b)
		buf = buf[n:]
	}
	return out
}

// kgo consumes, by partition and from chosen offsets, every record
// produced with the library, in order.
func TestFetchConsumePartitionsWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "consume-partitions"
	fetchCreate(t, b, topic, 3)
	const size = 200
	for p := int32(0); p < 3; p++ {
		fetchAppend(t, b, topic, p, 40, 1+int(p)*5, size)
	}
	starts := map[int32]int64{0: 0, 1: 17, 2: 199}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	want := 0
	ends := map[int32]int64{}
	for p, off := range starts {
		offsets[topic][p] = kgo.NewOffset().At(off)
		bp, err := b.Partition(topic, p)
		require.NoError(t, err)
		ends[p] = bp.HighWatermark()
		want += int(ends[p] - off)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(offsets),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(4096), kgo.FetchMaxBytes(10000))
	require.NoError(t, err)
	defer cl.Close()
	next := map[int32]int64{0: 0, 1: 17, 2: 199}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := 0
	for got < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, next[r.Partition], r.Offset, "partition %d", r.Partition)
			require.Equal(t, fetchValue(topic, r.Partition, r.Offset, size), r.Value)
			next[r.Partition]++
			got++
		})
	}
	require.Equal(t, ends, next)
}

// A kgo group-less ConsumeTopics from the start reads every record of every
// partition, including records produced while it consumes.
func TestFetchConsumeTopicsWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "consume-topics"
	fetchCreate(t, b, topic, 4)
	for p := int32(0); p < 4; p++ {
		fetchAppend(t, b, topic, p, 25, 4, 50)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(300*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := map[int32]int64{}
	got, produced := 0, false
	for got < 4*200 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, next[r.Partition], r.Offset)
			require.Equal(t, fetchValue(topic, r.Partition, r.Offset, 50), r.Value)
			next[r.Partition]++
			got++
		})
		if got > 0 && !produced {
			produced = true
			for p := int32(0); p < 4; p++ {
				fetchAppend(t, b, topic, p, 25, 4, 50)
			}
		}
	}
	for p := int32(0); p < 4; p++ {
		require.Equal(t, int64(200), next[p])
	}
}

// Every advertised version returns exactly the log's bytes, with the
// partition's offsets, over the zero-copy path.
func TestFetchEveryVersionZeroCopy(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "versions"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 0, 30, 3, 100)
	fetchAppend(t, b, topic, 1, 7, 2, 10)
	c := fetchDial(t, addr)
	for v := int16(4); v <= 12; v++ {
		before := fetchSendfileBytes.Load()
		req := fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 10, 1: 0}, 1<<20)
		resp := fetchDo[*kmsg.FetchResponse](t, c, v, req)
		require.Len(t, resp.Topics, 1, "v%d", v)
		require.Len(t, resp.Topics[0].Partitions, 2)
		var sent int64
		for i, rp := range resp.Topics[0].Partitions {
			require.Equal(t, int32(i), rp.Partition)
			require.Zero(t, rp.ErrorCode)
			bp, _ := b.Partition(topic, rp.Partition)
			require.Equal(t, bp.HighWatermark(), rp.HighWatermark)
			require.Equal(t, bp.HighWatermark(), rp.LastStableOffset)
			if v >= 5 {
				require.Equal(t, int64(0), rp.LogStartOffset)
			}
			require.Nil(t, rp.AbortedTransactions) // read_uncommitted
			if v >= 11 {
				require.Equal(t, int32(-1), rp.PreferredReadReplica)
			}
			off := []int64{10, 0}[i]
			require.Equal(t, logBytes(t, b, topic, rp.Partition, off, 1<<20), rp.RecordBatches, "v%d p%d", v, i)
			sent += int64(len(rp.RecordBatches))
		}
		if v >= 7 {
			require.Zero(t, resp.ErrorCode)
			require.Zero(t, resp.SessionID)
		}
		// The counter moves after the bytes left, so it may trail the
		// client's read by a moment.
		require.Eventually(t, func() bool { return fetchSendfileBytes.Load()-before == sent }, 5*time.Second, time.Millisecond,
			"v%d: the records went by sendfile", v)
	}
}

// Without a TCP socket (net.Pipe) the same bytes go through the buffered
// writer instead.
func TestFetchWithoutTCPFallsBack(t *testing.T) {
	b, s, _ := testServer(t, fetchOpts, Options{})
	const topic = "pipe"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 20, 5, 300)
	client, server := net.Pipe()
	defer client.Close()
	cn := newConn(s, server, nil)
	done := make(chan struct{})
	go func() { defer close(done); cn.serve() }()
	before := fetchSendfileBytes.Load()
	for _, v := range []int16{4, 11, 12} {
		resp := fetchDo[*kmsg.FetchResponse](t, client, v, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 33}, 1<<20))
		require.Equal(t, logBytes(t, b, topic, 0, 33, 1<<20), resp.Topics[0].Partitions[0].RecordBatches)
	}
	require.Equal(t, before, fetchSendfileBytes.Load())
	client.Close()
	<-done
}

// An empty partition, and an offset at the high watermark, give empty
// records - a zero length, never null - without waiting when MaxWait is 0,
// and after MaxWait otherwise.
func TestFetchEmptyRecordsAreNotNull(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "empty"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 1, 1, 3, 10)
	c := fetchDial(t, addr)
	for _, v := range []int16{4, 11, 12} {
		for _, wait := range []int32{0, 50} {
			req := fetchReq(wait, 1, 1<<20, topic, map[int32]int64{0: 0, 1: 3}, 1<<20)
			resp, raw, err := fetchRoundTrip(c, v, req, 5*time.Second)
			require.NoError(t, err)
			for _, rp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
				require.Zero(t, rp.ErrorCode)
				require.NotNil(t, rp.RecordBatches)
				require.Empty(t, rp.RecordBatches)
			}
			// On the wire: every records length is 0, none is -1.
			n := 0
			require.NoError(t, recordsSlots(raw, v, func(at int) error {
				if v >= 12 {
					require.Equal(t, byte(1), raw[at])
				} else {
					require.Equal(t, []byte{0, 0, 0, 0}, raw[at:at+4])
				}
				n++
				return nil
			}))
			require.Equal(t, 2, n)
		}
	}
}

// A fetch at the end waits for data: it returns when a record arrives
// (well before MaxWait), and empty after MaxWait when none does.
func TestFetchLongPoll(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "long-poll"
	fetchCreate(t, b, topic, 3)
	c := fetchDial(t, addr)

	start := time.Now()
	resp := fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(150, 1, 1<<20, topic, map[int32]int64{0: 0, 1: 0, 2: 0}, 1<<20))
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "answered before MaxWait with nothing to send")
	for _, rp := range resp.Topics[0].Partitions {
		require.Empty(t, rp.RecordBatches)
	}

	// Data arriving on any one of the partitions wakes the fetch.
	go func() {
		time.Sleep(100 * time.Millisecond)
		fetchAppend(t, b, topic, 2, 1, 1, 10)
	}()
	start = time.Now()
	resp = fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(30_000, 1, 1<<20, topic, map[int32]int64{0: 0, 1: 0, 2: 0}, 1<<20))
	require.Less(t, time.Since(start), 20*time.Second)
	require.Empty(t, resp.Topics[0].Partitions[0].RecordBatches)
	require.Equal(t, logBytes(t, b, topic, 2, 0, 1<<20), resp.Topics[0].Partitions[2].RecordBatches)
	require.Equal(t, int64(1), resp.Topics[0].Partitions[2].HighWatermark)
}

// MinBytes holds the answer until that much is there (or MaxWait ends,
// and then what there is goes out).
func TestFetchMinBytes(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "min-bytes"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 0, 1, 1, 100)
	one := len(logBytes(t, b, topic, 0, 0, 1<<20))
	c := fetchDial(t, addr)

	// MaxWait ends with less than MinBytes: the data goes out anyway.
	start := time.Now()
	resp := fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(200, int32(3*one), 1<<20, topic, map[int32]int64{0: 0, 1: 0}, 1<<20))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	require.Len(t, resp.Topics[0].Partitions[0].RecordBatches, one)

	// MinBytes reached across partitions ends the wait.
	go func() {
		time.Sleep(50 * time.Millisecond)
		fetchAppend(t, b, topic, 1, 1, 1, 100)
		time.Sleep(50 * time.Millisecond)
		fetchAppend(t, b, topic, 0, 1, 1, 100)
	}()
	start = time.Now()
	resp = fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(30_000, int32(3*one), 1<<20, topic, map[int32]int64{0: 0, 1: 0}, 1<<20))
	require.Less(t, time.Since(start), 20*time.Second)
	got := len(resp.Topics[0].Partitions[0].RecordBatches) + len(resp.Topics[0].Partitions[1].RecordBatches)
	require.GreaterOrEqual(t, got, 3*one)
}

// PartitionMaxBytes and MaxBytes bound the response in whole batches; the
// first batch goes whole even when larger than both (KIP-74), and a later
// partition whose first batch does not fit gets nothing.
func TestFetchMaxBytes(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "max-bytes"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 0, 10, 4, 250) // ~1 KiB batches
	fetchAppend(t, b, topic, 1, 10, 4, 250)
	all := logBytes(t, b, topic, 0, 0, 1<<20)
	batches := batchesOf(t, all)
	size := batches[0].Size()
	c := fetchDial(t, addr)
	parts := func(resp *kmsg.FetchResponse) (int, int) {
		return len(batchesOf(t, resp.Topics[0].Partitions[0].RecordBatches)),
			len(batchesOf(t, resp.Topics[0].Partitions[1].RecordBatches))
	}
	for _, tc := range []struct {
		name             string
		maxBytes, partMx int32
		p0, p1           int
	}{
		{"first batch whole past PartitionMaxBytes", 1 << 20, 1, 1, 0},
		{"first batch whole past MaxBytes", 1, 1 << 20, 1, 0},
		{"partition limit", 1 << 20, int32(2*size + size/2), 2, 2},
		{"response limit", int32(3*size + 10), 1 << 20, 3, 0},
		{"response limit spills over", int32(12*size + size/2), 1 << 20, 10, 2},
		{"zero limits", 0, 0, 1, 0},
		{"negative limits", -5, -5, 1, 0},
	} {
		for _, v := range []int16{4, 12} {
			resp := fetchDo[*kmsg.FetchResponse](t, c, v, fetchReq(0, 1, tc.maxBytes, topic, map[int32]int64{0: 0, 1: 0}, tc.partMx))
			p0, p1 := parts(resp)
			require.Equal(t, tc.p0, p0, "%s v%d", tc.name, v)
			require.Equal(t, tc.p1, p1, "%s v%d", tc.name, v)
			n := 0
			for _, b := range batches[:p0] {
				n += b.Size()
			}
			require.True(t, bytes.Equal(all[:n], resp.Topics[0].Partitions[0].RecordBatches), "%s v%d", tc.name, v)
		}
	}
	// The fetch offset in the middle of a batch returns that batch whole.
	resp := fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 6}, 1))
	got := batchesOf(t, resp.Topics[0].Partitions[0].RecordBatches)
	require.Len(t, got, 1)
	require.Equal(t, int64(4), got[0].BaseOffset())
}

// Offsets outside [log start, log end] are OFFSET_OUT_OF_RANGE; unknown
// topics and partitions UNKNOWN_TOPIC_OR_PARTITION; the others in the same
// request are served, at once.
func TestFetchErrors(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "errors"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 0, 10, 1, 10)
	p0, err := b.Partition(topic, 0)
	require.NoError(t, err)
	require.NoError(t, p0.Log().DeleteRecordsBefore(4))
	c := fetchDial(t, addr)

	req := fetchReq(10_000, 1, 1<<20, topic, map[int32]int64{0: 11, 1: 0}, 1<<20)
	start := time.Now()
	resp := fetchDo[*kmsg.FetchResponse](t, c, 11, req)
	require.Less(t, time.Since(start), 5*time.Second, "an error is answered at once")
	rp := resp.Topics[0].Partitions[0]
	require.Equal(t, errOffsetOutOfRange, rp.ErrorCode)
	require.Equal(t, int64(-1), rp.HighWatermark)
	require.NotNil(t, rp.RecordBatches)

	for _, off := range []int64{3, -1} {
		resp = fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: off}, 1<<20))
		require.Equal(t, errOffsetOutOfRange, resp.Topics[0].Partitions[0].ErrorCode, "offset %d", off)
	}
	resp = fetchDo[*kmsg.FetchResponse](t, c, 11, fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 4}, 1<<20))
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, int64(4), resp.Topics[0].Partitions[0].LogStartOffset)
	require.Equal(t, int64(4), batchesOf(t, resp.Topics[0].Partitions[0].RecordBatches)[0].BaseOffset())

	req = fetchReq(10_000, 1, 1<<20, topic, map[int32]int64{0: 4}, 1<<20)
	unknown := kmsg.NewFetchRequestTopic()
	unknown.Topic = "no-such-topic"
	unknown.Partitions = []kmsg.FetchRequestTopicPartition{kmsg.NewFetchRequestTopicPartition()}
	req.Topics = append(req.Topics, unknown)
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, kmsg.FetchRequestTopicPartition{Partition: 7, PartitionMaxBytes: 100})
	resp = fetchDo[*kmsg.FetchResponse](t, c, 12, req)
	require.Len(t, resp.Topics, 2)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	require.NotEmpty(t, resp.Topics[0].Partitions[0].RecordBatches)
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[1].ErrorCode)
	require.Equal(t, "no-such-topic", resp.Topics[1].Topic)
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[1].Partitions[0].ErrorCode)
	require.NotNil(t, resp.Topics[1].Partitions[0].RecordBatches)

	// kgo resets an out-of-range offset by its reset policy.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(1)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var first int64 = -1
	for first < 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) {
			if first < 0 {
				first = r.Offset
			}
		})
	}
	require.Equal(t, int64(4), first)
}

// CurrentLeaderEpoch (v9+, KIP-320): -1 skips the check, the partition's
// epoch passes, a newer one is UNKNOWN_LEADER_EPOCH; an older one is
// FENCED_LEADER_EPOCH (checked on a partition with epoch 3).
func TestFetchLeaderEpochChecks(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "epochs"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 1, 1, 10)
	c := fetchDial(t, addr)
	for _, tc := range []struct {
		version int16
		epoch   int32
		code    int16
	}{{11, -1, 0}, {11, 0, 0}, {11, 1, errUnknownLeaderEpoch}, {9, 5, errUnknownLeaderEpoch}, {8, 5, 0}} {
		req := fetchReq(0, 1, 1<<20, topic, map[int32]int64{0: 0}, 1<<20)
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = tc.epoch
		resp := fetchDo[*kmsg.FetchResponse](t, c, tc.version, req)
		require.Equal(t, tc.code, resp.Topics[0].Partitions[0].ErrorCode, "%+v", tc)
	}

	p, err := partition.Open(t.TempDir(), "t", 0, partition.Options{LeaderEpoch: 3})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, errFencedLeaderEpoch, checkLeaderEpoch(p, 2))
	require.Equal(t, errNone, checkLeaderEpoch(p, 3))
	require.Equal(t, errUnknownLeaderEpoch, checkLeaderEpoch(p, 4))
	require.Equal(t, errNone, checkLeaderEpoch(p, -1))
}

// A v12 fetch with a LastFetchedEpoch the log disagrees with gets the
// diverging epoch and no records (KIP-595); an agreeing one gets data.
func TestFetchDivergingEpoch(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "diverging"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 3, 2, 10)
	c := fetchDial(t, addr)
	req := fetchReq(10_000, 1, 1<<20, topic, map[int32]int64{0: 2}, 1<<20)
	req.Topics[0].Partitions[0].LastFetchedEpoch = 0
	resp := fetchDo[*kmsg.FetchResponse](t, c, 12, req)
	rp := resp.Topics[0].Partitions[0]
	require.Zero(t, rp.ErrorCode)
	require.Equal(t, int32(-1), rp.DivergingEpoch.Epoch)
	require.NotEmpty(t, rp.RecordBatches)

	// The log has epoch 0 only, ending at its end (6): a follower at 8
	// that last fetched epoch 0 diverged at 6; one at the end agrees (and
	// waits for data); one claiming an epoch the log never had (1, newer
	// than every known) is out of range.
	req.Topics[0].Partitions[0].FetchOffset = 8
	resp = fetchDo[*kmsg.FetchResponse](t, c, 12, req)
	rp = resp.Topics[0].Partitions[0]
	require.Zero(t, rp.ErrorCode)
	require.Equal(t, int32(0), rp.DivergingEpoch.Epoch)
	require.Equal(t, int64(6), rp.DivergingEpoch.EndOffset)
	require.Empty(t, rp.RecordBatches)
	require.Equal(t, int64(6), rp.HighWatermark)

	req.MaxWaitMillis = 0
	req.Topics[0].Partitions[0].FetchOffset = 6
	resp = fetchDo[*kmsg.FetchResponse](t, c, 12, req)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
	require.Equal(t, int32(-1), resp.Topics[0].Partitions[0].DivergingEpoch.Epoch)
	req.Topics[0].Partitions[0].LastFetchedEpoch = 1
	resp = fetchDo[*kmsg.FetchResponse](t, c, 12, req)
	require.Equal(t, errOffsetOutOfRange, resp.Topics[0].Partitions[0].ErrorCode)
}

// A response never written - its connection went first - lets its
// segments go with the connection.
func TestFetchResponseReleasedWithConnection(t *testing.T) {
	b, s, _ := testServer(t, fetchOpts, Options{})
	fetchCreate(t, b, "unsent", 1)
	fetchAppend(t, b, "unsent", 0, 3, 3, 10)
	_, server := net.Pipe()
	cn := newConn(s, server, nil)
	req := fetchReq(0, 1, 1<<20, "unsent", map[int32]int64{0: 0}, 1<<20)
	req.SetVersion(11)
	w, err := serveFetch(cn, &request{key: 1, version: 11, body: req})
	require.NoError(t, err)
	require.Positive(t, w.size(false))
	require.Equal(t, int64(1), fetchSpansHeld.Load())
	cn.cancel()
	require.Eventually(t, func() bool { return fetchSpansHeld.Load() == 0 }, 5*time.Second, time.Millisecond)
	require.Error(t, w.writeBody(cn))
	server.Close()
}

// A long poll does not hold up a server shutdown for its whole MaxWait.
func TestFetchLongPollEndsOnShutdown(t *testing.T) {
	b, err := spool.Open(t.TempDir(), fetchOpts)
	require.NoError(t, err)
	defer b.Close()
	s, err := NewServer(b, Options{})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go s.Serve(l)
	fetchCreate(t, b, "shutdown", 1)
	c := fetchDial(t, l.Addr().String())
	answered := make(chan error, 1)
	go func() {
		_, _, err := fetchRoundTrip(c, 11, fetchReq(60_000, 1, 1<<20, "shutdown", map[int32]int64{0: 0}, 1<<20), 30*time.Second)
		answered <- err
	}()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	require.NoError(t, <-answered)
}

// The zero-copy response's size and bytes agree with kmsg's own encoding
// of the same response with the records filled in, at every version.
func TestFetchEnvelopeMatchesKmsg(t *testing.T) {
	for v := int16(4); v <= 12; v++ {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		var recs [][]byte
		for ti := 0; ti < 3; ti++ {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic = fmt.Sprintf("topic-%d-%s", ti, bytes.Repeat([]byte("x"), ti*70))
			for pi := 0; pi < 3; pi++ {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.HighWatermark = int32(pi), int64(ti*pi)
				rp.RecordBatches = []byte{}
				if (ti+pi)%2 == 1 {
					rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
				}
				if pi == 2 {
					rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = 4, 44
				}
				rt.Partitions = append(rt.Partitions, rp)
				recs = append(recs, bytes.Repeat([]byte{byte(ti*3 + pi)}, (ti*3+pi)*50))
			}
			resp.Topics = append(resp.Topics, rt)
		}
		env := resp.AppendTo(nil)
		var out []byte
		prev, i := 0, 0
		require.NoError(t, recordsSlots(env, v, func(at int) error {
			out = append(out, env[prev:at]...)
			if v >= 12 {
				out = binary.AppendUvarint(out, uint64(len(recs[i]))+1)
				prev = at + 1
			} else {
				out = binary.BigEndian.AppendUint32(out, uint32(len(recs[i])))
				prev = at + 4
			}
			out = append(out, recs[i]...)
			i++
			return nil
		}))
		out = append(out, env[prev:]...)
		require.Equal(t, 9, i)
		i = 0
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].RecordBatches = recs[i]
				i++
			}
		}
		require.Equal(t, resp.AppendTo(nil), out, "v%d", v)
	}
	require.Error(t, recordsSlots([]byte{0, 0, 0, 0, 0, 0, 0, 1}, 4, func(int) error { return nil }))
}

// Fetch must survive arbitrary request bodies: no panic, a response bounded
// by what was asked (or a closed connection).
func FuzzFetchRequest(f *testing.F) {
	for _, v := range []int16{0, 2, 3, 4, 7, 11, 12} {
		req := fetchReq(5, 1, 1<<20, "fuzz", map[int32]int64{0: 0, 1: 3}, 100)
		req.SetVersion(v)
		f.Add(v, req.AppendTo(nil))
		req.Topics = append(req.Topics, kmsg.FetchRequestTopic{Topic: "nope"})
		req.SessionEpoch = 3
		f.Add(v, req.AppendTo(nil))
	}
	f.Add(int16(12), []byte{0xff, 0xff, 0xff})
	b, err := spool.Open(f.TempDir(), fetchOpts)
	require.NoError(f, err)
	defer b.Close()
	s, err := NewServer(b, Options{})
	require.NoError(f, err)
	require.NoError(f, b.CreateTopic(context.Background(), "fuzz", spool.TopicConfig{Partitions: 2}))
	fetchAppend(f, b, "fuzz", 0, 5, 3, 40)
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		if version < 0 || version > 12 {
			version = (version & 0x7fff) % 13
		}
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(version)
		if req.ReadFrom(body) != nil {
			return // the connection refuses it before the handler
		}
		req.MaxWaitMillis = min(req.MaxWaitMillis, 5)
		client, server := net.Pipe()
		defer client.Close()
		cn := newConn(s, server, nil)
		defer cn.cancel()
		r := &request{key: 1, version: version, body: req}
		w, err := serveFetch(cn, r)
		if err != nil {
			return
		}
		n := w.size(req.IsFlexible())
		// Every partition costs a bounded envelope, plus the records:
		// at most the response limit past the first batch.
		require.LessOrEqual(t, n, 64*len(body)+64+fetchMaxBytes+(1<<20))
		done := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(client)
			done <- b
		}()
		require.NoError(t, w.writeBody(cn))
		require.NoError(t, cn.w.Flush())
		require.Zero(t, fetchSpansHeld.Load())
		server.Close()
		got := <-done
		require.Len(t, got, n)
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(version)
		require.NoError(t, resp.ReadFrom(got))
	})
}

// OffsetForLeaderEpoch through the server: the partition has epoch 0
// only. The latest epoch ends at the log end (capped at the high watermark
// for a consumer); epochs newer than it, and -1, are undefined; the current
// leader epoch is checked from v2.
func TestOffsetForLeaderEpoch(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "ofle"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 4, 3, 10)
	c := fetchDial(t, addr)
	req := func(replica, current, epoch int32, topic string) *kmsg.OffsetForLeaderEpochRequest {
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.ReplicaID = replica
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, epoch
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		return r
	}
	for v := int16(0); v <= 4; v++ {
		resp := fetchDo[*kmsg.OffsetForLeaderEpochResponse](t, c, v, req(-1, -1, 0, topic))
		rp := resp.Topics[0].Partitions[0]
		require.Zero(t, rp.ErrorCode, "v%d", v)
		require.Equal(t, int64(12), rp.EndOffset)
		if v >= 1 {
			require.Equal(t, int32(0), rp.LeaderEpoch)
		}
		resp = fetchDo[*kmsg.OffsetForLeaderEpochResponse](t, c, v, req(-1, -1, 7, topic))
		require.Equal(t, int64(-1), resp.Topics[0].Partitions[0].EndOffset)
		resp = fetchDo[*kmsg.OffsetForLeaderEpochResponse](t, c, v, req(-1, 5, 0, topic))
		if v >= 2 {
			require.Equal(t, errUnknownLeaderEpoch, resp.Topics[0].Partitions[0].ErrorCode)
		} else {
			require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		}
		resp = fetchDo[*kmsg.OffsetForLeaderEpochResponse](t, c, v, req(-1, -1, 0, "unknown"))
		require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[0].ErrorCode)
		require.Equal(t, int64(-1), resp.Topics[0].Partitions[0].EndOffset)
	}
	resp := fetchDo[*kmsg.OffsetForLeaderEpochResponse](t, c, 4, req(-1, -1, -1, topic))
	require.Equal(t, int32(-1), resp.Topics[0].Partitions[0].LeaderEpoch)
	require.Equal(t, int64(-1), resp.Topics[0].Partitions[0].EndOffset)
}

// The epoch logic over a partition whose leader epoch changed twice:
// 1 from offset 0, 3 from 5, 4 from 9 (KIP-101, KIP-279).
func TestEndOffsetForEpoch(t *testing.T) {
	dir := t.TempDir()
	appendN := func(p *partition.Partition, n int) {
		for i := 0; i < n; i++ {
			_, err := p.Append(record.Record{Value: []byte("v")})
			require.NoError(t, err)
		}
	}
	for _, e := range []struct {
		epoch int32
		n     int
	}{{1, 5}, {3, 4}, {4, 2}} {
		p, err := partition.Open(dir, "t", 0, partition.Options{LeaderEpoch: e.epoch})
		require.NoError(t, err)
		appendN(p, e.n)
		if e.epoch != 4 {
			require.NoError(t, p.Close())
			continue
		}
		defer p.Close()
		for _, tc := range []struct {
			asked, epoch int32
			end          int64
		}{
			{0, 0, 0},   // older than every epoch: itself, and where the first begins
			{1, 1, 5},   // ended where 3 began
			{2, 1, 5},   // never led: the largest below
			{3, 3, 9},   // ended where 4 began
			{4, 4, 11},  // the latest: the log end
			{5, -1, -1}, // newer than any: undefined
			{-1, -1, -1},
		} {
			epoch, end := endOffsetForEpoch(p, tc.asked)
			require.Equal(t, tc.epoch, epoch, "epoch %d", tc.asked)
			require.Equal(t, tc.end, end, "epoch %d", tc.asked)
		}
	}
}

// DeleteRecords moves the log start (the new low watermark); -1 means
// the high watermark; past it is OFFSET_OUT_OF_RANGE; a compacted topic
// refuses (POLICY_VIOLATION).
func TestDeleteRecords(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "delete-records"
	fetchCreate(t, b, topic, 2)
	fetchAppend(t, b, topic, 0, 10, 2, 10)
	fetchAppend(t, b, topic, 1, 10, 2, 10)
	require.NoError(t, b.CreateTopic(context.Background(), "compacted", spool.TopicConfig{CleanupPolicy: spool.CleanupCompact}))
	c := fetchDial(t, addr)
	req := func(topic string, offsets ...int64) *kmsg.DeleteRecordsRequest {
		r := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		for i, off := range offsets {
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = int32(i), off
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
		return r
	}
	for v := int16(0); v <= 2; v++ {
		resp := fetchDo[*kmsg.DeleteRecordsResponse](t, c, v, req(topic, int64(3+v), 21))
		require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		require.Equal(t, int64(3+v), resp.Topics[0].Partitions[0].LowWatermark)
		require.Equal(t, errOffsetOutOfRange, resp.Topics[0].Partitions[1].ErrorCode)
		require.Equal(t, int64(-1), resp.Topics[0].Partitions[1].LowWatermark)
	}
	// Below the current start: nothing moves, the start is reported.
	resp := fetchDo[*kmsg.DeleteRecordsResponse](t, c, 1, req(topic, 1))
	require.Equal(t, int64(5), resp.Topics[0].Partitions[0].LowWatermark)
	resp = fetchDo[*kmsg.DeleteRecordsResponse](t, c, 1, req(topic, -1, -2))
	require.Equal(t, int64(20), resp.Topics[0].Partitions[0].LowWatermark)
	require.Equal(t, errOffsetOutOfRange, resp.Topics[0].Partitions[1].ErrorCode)
	p, _ := b.Partition(topic, 0)
	require.Equal(t, int64(20), p.StartOffset())
	require.Equal(t, int64(20), p.Epochs().Entries()[0].StartOffset)

	resp = fetchDo[*kmsg.DeleteRecordsResponse](t, c, 2, req("compacted", 0))
	require.Equal(t, errPolicyViolation, resp.Topics[0].Partitions[0].ErrorCode)
	resp = fetchDo[*kmsg.DeleteRecordsResponse](t, c, 2, req("nope", 0))
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[0].ErrorCode)
	resp = fetchDo[*kmsg.DeleteRecordsResponse](t, c, 2, req(topic, 0, 0, 0))
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[2].ErrorCode)

	// A consumer then starts at the new start.
	lo := fetchDo[*kmsg.ListOffsetsResponse](t, c, 1, listReq(topic, -1, 0, listEarliest))
	require.Equal(t, int64(20), lo.Topics[0].Partitions[0].Offset)
}

// kgo's admin path: kerr names match.
func TestFetchErrorNames(t *testing.T) {
	require.Equal(t, kerr.FetchSessionIDNotFound.Code, errFetchSessionIDNotFound)
}

// kgo validates an offset that carries a leader epoch with
// OffsetForLeaderEpoch before fetching (truncation detection, KIP-320),
// then consumes from it.
func TestOffsetForLeaderEpochWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "ofle-kgo"
	fetchCreate(t, b, topic, 1)
	fetchAppend(t, b, topic, 0, 10, 1, 10)
	var asked atomic.Int32
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(5).WithEpoch(0)}}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.WithHooks(ofleHook{&asked}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var offs []int64
	for len(offs) < 5 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) { offs = append(offs, r.Offset) })
	}
	require.Equal(t, []int64{5, 6, 7, 8, 9}, offs)
	require.Positive(t, asked.Load(), "kgo validated the epoch")
}

type ofleHook struct{ n *atomic.Int32 }

func (h ofleHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.OffsetForLeaderEpoch) {
		h.n.Add(1)
	}
}

// Fetchers race appends and DeleteRecords, which deletes the segments they
// read: every response is whole and correct or OFFSET_OUT_OF_RANGE, and
// every segment reference a fetch took is released.
func TestFetchConcurrentWithDeletion(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "concurrent"
	require.NoError(t, b.CreateTopic(context.Background(), topic, spool.TopicConfig{Partitions: 1, SegmentBytes: 16 << 10}))
	p, err := b.Partition(topic, 0)
	require.NoError(t, err)
	fetchAppend(t, b, topic, 0, 50, 5, 100)
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var fetched atomic.Int64
	for g := 0; g < 3; g++ {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			off := int64(0)
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				resp, _, err := fetchRoundTrip(c, int16(4+g*4), fetchReq(20, 1, 64<<10, topic, map[int32]int64{0: off}, 32<<10), 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				rp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
				if rp.ErrorCode == errOffsetOutOfRange {
					off = p.StartOffset()
					continue
				}
				if rp.ErrorCode != 0 {
					errs <- fmt.Errorf("error code %d", rp.ErrorCode)
					return
				}
				buf := rp.RecordBatches
				for len(buf) > 0 {
					batch, n, err := record.ParseBatch(buf)
					if err == nil {
						err = batch.Verify()
					}
					if err != nil {
						errs <- err
						return
					}
					recs, _ := batch.Records()
					for _, r := range recs {
						if r.Offset >= off {
							if !bytes.Equal(r.Value, fetchValue(topic, 0, r.Offset, 100)) {
								errs <- fmt.Errorf("offset %d: wrong value", r.Offset)
								return
							}
							off = r.Offset + 1
							fetched.Add(1)
						}
					}
					buf = buf[n:]
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		fetchAppend(t, b, topic, 0, 5, 5, 100)
		if i%5 == 4 {
			require.NoError(t, p.Log().DeleteRecordsBefore(p.HighWatermark()-100))
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	for g := 0; g < 3; g++ {
		require.NoError(t, <-errs)
	}
	require.Positive(t, fetched.Load())
	// Every segment reference the fetches took was released.
	require.Eventually(t, func() bool { return fetchSpansHeld.Load() == 0 }, 5*time.Second, time.Millisecond)
}
