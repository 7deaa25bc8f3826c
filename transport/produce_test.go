package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// prodCall sends req at its version over c and reads the response.
func prodCall[Resp kmsg.Response](t testing.TB, c net.Conn, corr int32, req kmsg.Request) Resp {
	t.Helper()
	prodSend(t, c, corr, req)
	return prodRead(t, c, corr, req).(Resp)
}

func prodSend(t testing.TB, c net.Conn, corr int32, req kmsg.Request) {
	t.Helper()
	body := req.AppendTo(nil)
	if req.IsFlexible() {
		body = append([]byte{0}, body...) // the request header's tag buffer
	}
	rawRequest(t, c, req.Key(), req.GetVersion(), corr, body)
}

func prodRead(t testing.TB, c net.Conn, corr int32, req kmsg.Request) kmsg.Response {
	t.Helper()
	b, err := readResponse(t, c)
	require.NoError(t, err)
	require.Equal(t, corr, int32(binary.BigEndian.Uint32(b)), "correlation id")
	b = b[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		require.Equal(t, byte(0), b[0], "empty response header tags")
		b = b[1:]
	}
	require.NoError(t, resp.ReadFrom(b))
	return resp
}

func prodDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func prodCreateTopic(t testing.TB, b *spool.Broker, name string, partitions int32) {
	t.Helper()
	require.NoError(t, b.CreateTopic(context.Background(), name, spool.TopicConfig{Partitions: partitions}))
}

// prodBatch encodes n records "pid:epoch/seq" as one batch; pid < 0 makes
// a batch without producer id.
func prodBatch(t testing.TB, pid int64, epoch int16, seq int32, n int, codec record.Codec) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: time.UnixMilli(1_700_000_000_000), Value: fmt.Appendf(nil, "%d:%d/%d", pid, epoch, int64(seq)+int64(i))}
	}
	o := record.BatchOptions{Compression: codec}
	if pid >= 0 {
		o.Producer = &record.ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: seq}
	}
	b, err := record.NewBatch(recs, o)
	require.NoError(t, err)
	return b.Bytes()
}

// prodRequest is a produce request for one partition at a version.
func prodRequest(version int16, acks int16, topic string, partition int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks = acks
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// prodOne produces one partition's records and returns its answer.
func prodOne(t testing.TB, c net.Conn, version int16, topic string, partition int32, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp := prodCall[*kmsg.ProduceResponse](t, c, 1, prodRequest(version, -1, topic, partition, records))
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	return resp.Topics[0].Partitions[0]
}

// prodReadBack returns the values of a partition's records, in order.
func prodReadBack(t testing.TB, b *spool.Broker, topic string, partition int32) []string {
	t.Helper()
	p, err := b.Partition(topic, partition)
	require.NoError(t, err)
	var vals []string
	for off := p.StartOffset(); off < p.HighWatermark(); {
		out, err := p.Log().Read(off, 1<<20)
		require.NoError(t, err)
		for len(out) > 0 {
			bt, n, err := record.ParseBatch(out)
			require.NoError(t, err)
			out = out[n:]
			recs, err := bt.Records()
			require.NoError(t, err)
			for _, r := range recs {
				if r.Offset >= off {
					vals = append(vals, string(r.Value))
				}
			}
			off = bt.NextOffset()
		}
	}
	return vals
}

// prodCheckSequences checks that the records "pid:epoch/seq" of every
// producer epoch appear exactly once and in order, and returns how many
// each has.
func prodCheckSequences(t testing.TB, vals []string) map[string]int64 {
	t.Helper()
	next := map[string]int64{}
	for _, v := range vals {
		i := strings.IndexByte(v, '/')
		require.Positive(t, i, v)
		pe := v[:i]
		seq, err := strconv.ParseInt(v[i+1:], 10, 64)
		require.NoError(t, err)
		require.Equal(t, next[pe], seq, "producer %s: a duplicate or a gap", pe)
		next[pe]++
	}
	return next
}

func initProducer(t testing.TB, c net.Conn, version int16, pid int64, epoch int16) *kmsg.InitProducerIDResponse {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.SetVersion(version)
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return prodCall[*kmsg.InitProducerIDResponse](t, c, 9, req)
}

// franz-go with its defaults - idempotent, acks=all - and with acks=1:
// every record arrives once, in order, in the partition its key chose.
func TestProduceFranzGo(t *testing.T) {
	for _, tc := range []struct {
		name       string
		idempotent bool
		opts       []kgo.Opt
	}{
		{"idempotent acks=all", true, nil},
		{"acks=1", false, []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
		{"idempotent zstd", true, []kgo.Opt{kgo.ProducerBatchCompression(kgo.ZstdCompression())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _, addr := testServer(t, spool.Options{}, Options{})
			prodCreateTopic(t, b, "t", 3)
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"),
				kgo.ProducerLinger(time.Millisecond)}, tc.opts...)...)
			require.NoError(t, err)
			defer cl.Close()
			const n = 3000
			var wg sync.WaitGroup
			var failed atomic.Value
			for i := range n {
				key := fmt.Appendf(nil, "k%d", i%7)
				wg.Add(1)
				cl.Produce(context.Background(), &kgo.Record{Key: key, Value: fmt.Appendf(nil, "%s/%d", key, i)}, func(r *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						failed.Store(err)
					}
				})
			}
			wg.Wait()
			require.Nil(t, failed.Load())
			total := 0
			for p := range int32(3) {
				last := map[string]int{}
				for _, v := range prodReadBack(t, b, "t", p) {
					var k string
					var i int
					_, err := fmt.Sscanf(v, "k%1s/%d", &k, &i)
					require.NoError(t, err, v)
					if prev, ok := last[k]; ok {
						require.Equal(t, prev+7, i, "key k%s: records out of order, duplicated or lost", k)
					}
					last[k] = i
					total++
				}
			}
			require.Equal(t, n, total)
			// The idempotent producer got a producer id from InitProducerId.
			p, err := b.Partition("t", 0)
			require.NoError(t, err)
			out, err := p.Log().Read(0, 1)
			require.NoError(t, err)
			bt, _, err := record.ParseBatch(out)
			require.NoError(t, err)
			require.Equal(t, tc.idempotent, bt.ProducerID() >= 0)
		})
	}
}

// The idempotent producer over raw requests: a retry of any of the last
// five batches is answered with its original offsets and not written again;
// a gap, an unknown producer and a stale epoch are refused with Kafka's
// codes.
func TestProduceIdempotence(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{}, Options{})
	prodCreateTopic(t, b, "t", 1)
	c := prodDial(t, addr)
	for _, version := range []int16{3, 7, 9, 13} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			ip := initProducer(t, c, 4, -1, -1)
			require.Zero(t, ip.ErrorCode)
			pid, epoch := ip.ProducerID, ip.ProducerEpoch
			require.Zero(t, epoch)
			topic := "t"
			p, err := b.Partition("t", 0)
			require.NoError(t, err)
			start := p.EndOffset()
			send := func(epoch int16, seq int32, n int) kmsg.ProduceResponseTopicPartition {
				req := prodRequest(version, -1, topic, 0, prodBatch(t, pid, epoch, seq, n, record.None))
				if version >= 13 {
					d, err := b.DescribeTopic("t")
					require.NoError(t, err)
					req.Topics[0].TopicID = d.ID
				}
				resp := prodCall[*kmsg.ProduceResponse](t, c, 1, req)
				return resp.Topics[0].Partitions[0]
			}
			bases := make([]int64, 7)
			for i := range 7 {
				r := send(epoch, int32(3*i), 3)
				require.Zero(t, r.ErrorCode)
				require.Equal(t, start+int64(3*i), r.BaseOffset)
				if version >= 5 {
					require.Equal(t, p.StartOffset(), r.LogStartOffset)
				}
				require.Equal(t, int64(-1), r.LogAppendTime)
				bases[i] = r.BaseOffset
			}
			end := p.EndOffset()
			for i := 2; i < 7; i++ { // the last five
				r := send(epoch, int32(3*i), 3)
				require.Zero(t, r.ErrorCode, "retry of batch %d", i)
				require.Equal(t, bases[i], r.BaseOffset)
			}
			require.Equal(t, end, p.EndOffset(), "retries are not written")

			r := send(epoch, 3, 3) // older than the window
			require.Equal(t, errOutOfOrderSequenceNumber, r.ErrorCode)
			r = send(epoch, 22, 1) // a gap: 21 is next
			require.Equal(t, errOutOfOrderSequenceNumber, r.ErrorCode)
			if version >= 8 {
				require.NotNil(t, r.ErrorMessage)
			}
			// KIP-360: a new epoch starts again at 0; the old one is
			// fenced.
			bump := initProducer(t, c, 3, pid, epoch)
			require.Zero(t, bump.ErrorCode)
			require.Equal(t, pid, bump.ProducerID)
			require.Equal(t, epoch+1, bump.ProducerEpoch)
			r = send(epoch+1, 5, 1)
			require.Equal(t, errOutOfOrderSequenceNumber, r.ErrorCode, "a new epoch starts at 0")
			r = send(epoch+1, 0, 2)
			require.Zero(t, r.ErrorCode)
			r = send(epoch, 21, 1)
			require.Equal(t, errInvalidProducerEpoch, r.ErrorCode)
			require.Equal(t, end+2, p.EndOffset())

			// A producer id the partition never saw, not at sequence 0.
			other := initProducer(t, c, 0, -1, -1)
			pid = other.ProducerID
			r = send(0, 7, 1)
			require.Equal(t, errUnknownProducerID, r.ErrorCode)
			r = send(0, 0, 1)
			require.Zero(t, r.ErrorCode)
			require.Equal(t, end+3, p.EndOffset())
		})
	}
	prodCheckSequences(t, prodReadBack(t, b, "t", 0))
}

// startProduceServer serves a broker on dir; stop shuts both down.
func startProduceServer(t testing.TB, dir string, bopts spool.Options) (b *spool.Broker, addr string, stop func()) {
	t.Helper()
	b, err := spool.Open(dir, bopts)
	require.NoError(t, err)
	s, err := NewServer(b, Options{})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-done, ErrServerClosed)
			require.NoError(t, b.Close())
		})
	}
	t.Cleanup(stop)
	return b, l.Addr().String(), stop
}

// Deduplication survives a broker restart, and producer ids are never
// handed out twice.
func TestProduceDedupeAfterRestart(t *testing.T) {
	dir := t.TempDir()
	b, addr, stop := startProduceServer(t, dir, spool.Options{})
	prodCreateTopic(t, b, "t", 1)
	c := prodDial(t, addr)
	ip := initProducer(t, c, 5, -1, -1)
	require.Zero(t, ip.ErrorCode)
	pid := ip.ProducerID
	var bases []int64
	for i := range 4 {
		r := prodOne(t, c, 9, "t", 0, prodBatch(t, pid, 0, int32(2*i), 2, record.Snappy))
		require.Zero(t, r.ErrorCode)
		bases = append(bases, r.BaseOffset)
	}
	c.Close()
	stop()

	b, addr, _ = startProduceServer(t, dir, spool.Options{})
	c = prodDial(t, addr)
	for i := range 4 {
		r := prodOne(t, c, 9, "t", 0, prodBatch(t, pid, 0, int32(2*i), 2, record.Snappy))
		require.Zero(t, r.ErrorCode)
		require.Equal(t, bases[i], r.BaseOffset, "retry of batch %d after the restart", i)
	}
	r := prodOne(t, c, 9, "t", 0, prodBatch(t, pid, 0, 10, 1, record.None))
	require.Equal(t, errOutOfOrderSequenceNumber, r.ErrorCode)
	r = prodOne(t, c, 9, "t", 0, prodBatch(t, pid, 0, 8, 1, record.None))
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int64(8), r.BaseOffset)
	require.Equal(t, map[string]int64{fmt.Sprintf("%d:0", pid): 9}, prodCheckSequences(t, prodReadBack(t, b, "t", 0)))

	next := initProducer(t, c, 5, -1, -1)
	require.Zero(t, next.ErrorCode)
	require.Greater(t, next.ProducerID, pid, "producer ids are not reused after a restart")
}

// Duplicated and reordered produce requests from two connections at once
// never leave a duplicate or a gap: a client that retries whatever it has
// not seen acknowledged, in any order, ends with each record exactly once.
func TestProduceRandomRetries(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{Flush: log.None}, Options{})
	prodCreateTopic(t, b, "t", 1)
	ctl := prodDial(t, addr)
	pid := initProducer(t, ctl, 4, -1, -1).ProducerID

	const batches = 200
	sizes := make([]int, batches)
	seqs := make([]int32, batches)
	r := rand.New(rand.NewPCG(7, 7))
	seq := int32(0)
	for i := range sizes {
		sizes[i] = 1 + r.IntN(4)
		seqs[i] = seq
		seq += int32(sizes[i])
	}

	var mu sync.Mutex
	acked := make([]bool, batches)
	offsets := make([]int64, batches)
	for i := range offsets {
		offsets[i] = -1
	}
	firstUnacked := func() int {
		for i, a := range acked {
			if !a {
				return i
			}
		}
		return batches
	}
	var wg sync.WaitGroup
	for conn := range 2 {
		wg.Go(func() {
			c := prodDial(t, addr)
			r := rand.New(rand.NewPCG(uint64(conn), 99))
			for {
				mu.Lock()
				lo := firstUnacked()
				mu.Unlock()
				if lo == batches {
					return
				}
				// Any batch of the in-flight window, retried or not yet
				// sent, acknowledged or not.
				i := lo + r.IntN(min(5, batches-lo))
				resp := prodOne(t, c, 7, "t", 0, prodBatch(t, pid, 0, seqs[i], sizes[i], record.None))
				if resp.ErrorCode == errOutOfOrderSequenceNumber || resp.ErrorCode == errUnknownProducerID {
					continue // sent ahead of a batch not yet written
				}
				require.Zero(t, resp.ErrorCode)
				mu.Lock()
				if offsets[i] >= 0 {
					require.Equal(t, offsets[i], resp.BaseOffset, "batch %d answered with two offsets", i)
				}
				offsets[i] = resp.BaseOffset
				acked[i] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := prodCheckSequences(t, prodReadBack(t, b, "t", 0))
	require.Equal(t, map[string]int64{fmt.Sprintf("%d:0", pid): int64(seq)}, got)
	for i := 1; i < batches; i++ {
		require.Equal(t, offsets[i-1]+int64(sizes[i-1]), offsets[i])
	}
}

// acks=0 gets no response: the next request's response is the next thing
// on the wire. A failed acks=0 produce closes the connection instead.
func TestProduceAcksZero(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{AutoCreateTopics: spool.Disabled}, Options{})
	prodCreateTopic(t, b, "t", 1)
	c := prodDial(t, addr)
	for _, version := range []int16{3, 9} {
		prodSend(t, c, 100+int32(version), prodRequest(version, 0, "t", 0, prodBatch(t, -1, 0, 0, 2, record.None)))
	}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(0)
	prodSend(t, c, 200, av)
	resp := prodRead(t, c, 200, av).(*kmsg.ApiVersionsResponse)
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, []string{"-1:0/0", "-1:0/1", "-1:0/0", "-1:0/1"}, prodReadBack(t, b, "t", 0))

	prodSend(t, c, 300, prodRequest(7, 0, "missing", 0, prodBatch(t, -1, 0, 0, 1, record.None)))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection is closed")
}

// Bad input gets Kafka's per-partition error codes and writes nothing.
func TestProduceErrors(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{AutoCreateTopics: spool.Disabled, Topic: spool.TopicConfig{MaxMessageBytes: 4096}}, Options{})
	prodCreateTopic(t, b, "t", 2)
	good := func() []byte { return prodBatch(t, -1, 0, 0, 1, record.None) }
	corrupt := good()
	corrupt[len(corrupt)-1] ^= 1
	big, err := record.NewBatch([]record.Record{{Value: make([]byte, 8000)}}, record.BatchOptions{})
	require.NoError(t, err)
	magic1 := good()
	magic1[16] = 1
	badMagic := good()
	badMagic[16] = 9
	control, err := record.NewBatch([]record.Record{{Key: []byte{0, 0, 0, 1}}}, record.BatchOptions{})
	require.NoError(t, err)
	controlBytes := control.Bytes()
	binary.BigEndian.PutUint16(controlBytes[21:], 0x20) // control bit
	fixCRC(controlBytes)
	txn, err := record.NewBatch([]record.Record{{Value: []byte("x")}}, record.BatchOptions{Transactional: true, Producer: &record.ProducerInfo{ID: 1, BaseSequence: 0}})
	require.NoError(t, err)
	noSeq := prodBatch(t, 5, 0, 0, 1, record.None)
	binary.BigEndian.PutUint32(noSeq[53:], math.MaxUint32) // base sequence -1
	fixCRC(noSeq)
	countMismatch := prodBatch(t, -1, 0, 0, 2, record.None)
	binary.BigEndian.PutUint32(countMismatch[57:], 3)
	fixCRC(countMismatch)

	cases := []struct {
		name      string
		version   int16
		topic     string
		partition int32
		records   []byte
		code      int16
	}{
		{"unknown topic", 9, "missing", 0, good(), errUnknownTopicOrPartition},
		{"unknown topic, bad records", 9, "missing", 0, corrupt, errUnknownTopicOrPartition},
		{"unknown partition", 9, "t", 2, good(), errUnknownTopicOrPartition},
		{"negative partition", 9, "t", -1, good(), errUnknownTopicOrPartition},
		{"internal topic", 9, spool.OffsetsTopic, 0, good(), errInvalidTopicException},
		{"too large", 9, "t", 0, big.Bytes(), errMessageTooLarge},
		{"corrupt crc", 9, "t", 0, corrupt, errCorruptMessage},
		{"null records", 9, "t", 0, nil, errInvalidRecord},
		{"truncated batch", 9, "t", 0, good()[:40], errInvalidRecord},
		{"two batches", 9, "t", 0, append(good(), good()...), errInvalidRecord},
		{"magic 1", 3, "t", 0, magic1, errInvalidRecord},
		{"bad magic", 3, "t", 0, badMagic, errCorruptMessage},
		{"bad length", 5, "t", 0, append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 20)...), errCorruptMessage},
		{"control batch", 8, "t", 0, controlBytes, errInvalidRecord},
		{"transactional without a transactional id", 8, "t", 0, txn.Bytes(), errTransactionalIDAuthorizationFailed},
		{"producer id without sequence", 8, "t", 0, noSeq, errInvalidRecord},
		{"count and deltas disagree", 8, "t", 0, countMismatch, errInvalidRecord},
		{"zstd before v7", 6, "t", 0, prodBatch(t, -1, 0, 0, 1, record.ZSTD), errUnsupportedCompressionType},
	}
	c := prodDial(t, addr)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := prodReadBack(t, b, "t", 0)
			r := prodOne(t, c, tc.version, tc.topic, tc.partition, tc.records)
			require.Equal(t, tc.code, r.ErrorCode)
			require.Equal(t, int64(-1), r.BaseOffset)
			if tc.version >= 8 {
				require.NotNil(t, r.ErrorMessage)
			}
			require.Equal(t, before, prodReadBack(t, b, "t", 0), "nothing written")
		})
	}
	require.Equal(t, []string{"t"}, b.Topics(), "nothing auto-created")

	t.Run("trailing partial batch is ignored", func(t *testing.T) {
		r := prodOne(t, c, 9, "t", 1, append(good(), good()[:30]...))
		require.Zero(t, r.ErrorCode)
	})
	t.Run("zstd from v7", func(t *testing.T) {
		r := prodOne(t, c, 7, "t", 1, prodBatch(t, -1, 0, 0, 1, record.ZSTD))
		require.Zero(t, r.ErrorCode)
	})
	t.Run("invalid acks", func(t *testing.T) {
		resp := prodCall[*kmsg.ProduceResponse](t, c, 5, prodRequest(9, 2, "t", 0, good()))
		require.Equal(t, errInvalidRequiredAcks, resp.Topics[0].Partitions[0].ErrorCode)
	})
	t.Run("unknown topic id", func(t *testing.T) {
		req := prodRequest(13, 1, "", 0, good())
		req.Topics[0].TopicID = [16]byte{1, 2, 3}
		resp := prodCall[*kmsg.ProduceResponse](t, c, 5, req)
		require.Equal(t, [16]byte{1, 2, 3}, resp.Topics[0].TopicID)
		require.Equal(t, errUnknownTopicID, resp.Topics[0].Partitions[0].ErrorCode)
	})
	t.Run("several topics and partitions", func(t *testing.T) {
		req := prodRequest(9, 1, "t", 0, good())
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, kmsg.ProduceRequestTopicPartition{Partition: 1, Records: corrupt})
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "missing"
		rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: good()}}
		req.Topics = append(req.Topics, rt)
		before := len(prodReadBack(t, b, "t", 0))
		resp := prodCall[*kmsg.ProduceResponse](t, c, 6, req)
		require.Len(t, resp.Topics, 2)
		require.Equal(t, "t", resp.Topics[0].Topic)
		require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		require.Equal(t, errCorruptMessage, resp.Topics[0].Partitions[1].ErrorCode)
		require.Equal(t, errUnknownTopicOrPartition, resp.Topics[1].Partitions[0].ErrorCode)
		require.Len(t, prodReadBack(t, b, "t", 0), before+1)
	})
}

// fixCRC recomputes a batch's CRC after a test changed its header.
func fixCRC(b []byte) {
	bt, _, err := record.ParseBatch(b)
	if err != nil {
		panic(err)
	}
	binary.BigEndian.PutUint32(b[17:], bt.ComputeCRC())
}

// Producing to a missing topic creates it when the broker auto-creates
// topics.
func TestProduceAutoCreate(t *testing.T) {
	b, _, addr := testServer(t, spool.Options{DefaultPartitions: 2}, Options{})
	c := prodDial(t, addr)
	r := prodOne(t, c, 9, "fresh", 1, prodBatch(t, -1, 0, 0, 1, record.None))
	require.Zero(t, r.ErrorCode)
	d, err := b.DescribeTopic("fresh")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 2)
	r = prodOne(t, c, 9, "fresh", 5, prodBatch(t, -1, 0, 0, 1, record.None))
	require.Equal(t, errUnknownTopicOrPartition, r.ErrorCode)
	r = prodOne(t, c, 9, "bad/name", 0, prodBatch(t, -1, 0, 0, 1, record.None))
	require.Equal(t, errInvalidTopicException, r.ErrorCode)
	r = prodOne(t, c, 9, "never", 0, []byte{1, 2, 3})
	require.Equal(t, errInvalidRecord, r.ErrorCode)
	require.Equal(t, []string{"fresh"}, b.Topics(), "no topic for an invalid batch")
}

// A produce to a broker that is closing answers NOT_LEADER_OR_FOLLOWER,
// which clients retry after a metadata refresh.
func TestProduceErrorCodeOfClosedBroker(t *testing.T) {
	require.Equal(t, errNotLeaderOrFollower, produceErrorCode(fmt.Errorf("x: %w", spool.ErrClosed)))
	require.Equal(t, errNotLeaderOrFollower, produceErrorCode(fmt.Errorf("x: %w", log.ErrClosed)))
	require.Equal(t, errKafkaStorageError, produceErrorCode(fmt.Errorf("x: %w", log.ErrFailed)))
	require.Equal(t, errMessageTooLarge, produceErrorCode(fmt.Errorf("x: %w", record.ErrRecordTooLarge)))
	require.Equal(t, errUnknownServerError, produceErrorCode(errors.New("x")))
}

func TestInitProducerID(t *testing.T) {
	dir := t.TempDir()
	_, addr, stop := startProduceServer(t, dir, spool.Options{})
	c := prodDial(t, addr)
	seen := map[int64]bool{}
	for v := int16(0); v <= 5; v++ {
		r := initProducer(t, c, v, -1, -1)
		require.Zero(t, r.ErrorCode, "v%d", v)
		require.Zero(t, r.ProducerEpoch)
		require.False(t, seen[r.ProducerID])
		seen[r.ProducerID] = true
	}
	// KIP-360 (v3+): a known id and epoch get the next epoch.
	r := initProducer(t, c, 3, 2, 7)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int64(2), r.ProducerID)
	require.Equal(t, int16(8), r.ProducerEpoch)
	// An exhausted epoch or an id never handed out: a new id.
	r = initProducer(t, c, 4, 2, math.MaxInt16-1)
	require.Zero(t, r.ErrorCode)
	require.False(t, seen[r.ProducerID])
	require.Zero(t, r.ProducerEpoch)
	r = initProducer(t, c, 5, 1<<40, 3)
	require.Zero(t, r.ErrorCode)
	require.Less(t, r.ProducerID, int64(1000))
	require.Zero(t, r.ProducerEpoch)
	// Half of the pair: INVALID_REQUEST.
	r = initProducer(t, c, 3, 2, -1)
	require.Equal(t, errInvalidRequest, r.ErrorCode)
	require.Equal(t, int64(-1), r.ProducerID)

	// A transactional id goes to its coordinator, which owns it only once
	// a FindCoordinator has created and loaded __transaction_state
	// (clients always ask first); an empty one is refused.
	for v, tid := range map[int16]string{0: "txn", 2: "txn", 5: ""} {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.SetVersion(v)
		req.TransactionalID = &tid
		req.TransactionTimeoutMillis = 60000
		r := prodCall[*kmsg.InitProducerIDResponse](t, c, 3, req)
		want := errNotCoordinator
		if tid == "" {
			want = errInvalidRequest
		}
		require.Equal(t, want, r.ErrorCode)
		require.Equal(t, int64(-1), r.ProducerID)
	}

	// Ids are reserved on disk in blocks: after a restart the next id is
	// past every id handed out.
	c.Close()
	stop()
	_, addr, _ = startProduceServer(t, dir, spool.Options{})
	c = prodDial(t, addr)
	r = initProducer(t, c, 4, -1, -1)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int64(1000), r.ProducerID)
}

// FuzzProduceRequest feeds arbitrary bytes as a produce request body -
// version from the first byte - through the decoder and the handler: no
// panic, and nothing partial is ever written.
func FuzzProduceRequest(f *testing.F) {
	b, err := spool.Open(f.TempDir(), spool.Options{Flush: log.None, AutoCreateTopics: spool.Disabled})
	require.NoError(f, err)
	f.Cleanup(func() { b.Close() })
	prodCreateTopic(f, b, "fuzz", 2)
	d, err := b.DescribeTopic("fuzz")
	require.NoError(f, err)
	legacy := record.Record{Key: []byte("k"), Value: []byte("v")}
	for _, v := range []int16{0, 2, 3, 7, 9, 13} {
		for _, recs := range [][]byte{
			prodBatch(f, -1, 0, 0, 2, record.None),
			prodBatch(f, 3, 0, 0, 2, record.Snappy),
			prodBatch(f, 3, 0, 1, 1, record.None),
			record.AppendMessage(nil, 0, 0, &legacy, false),
			record.AppendMessage(nil, 1, 0, &legacy, false),
			{0, 0, 0, 0},
		} {
			req := prodRequest(v, -1, "fuzz", 0, recs)
			req.Topics[0].TopicID = d.ID
			body := req.AppendTo(nil)
			if req.IsFlexible() {
				body = append([]byte{0}, body...)
			}
			f.Add(append([]byte{byte(v)}, body...))
		}
	}
	s, err := NewServer(b, Options{})
	require.NoError(f, err)
	client, server := net.Pipe()
	f.Cleanup(func() { client.Close(); server.Close() })
	c := newConn(s, server, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		version := int16(data[0]) % 14 // v0-v13
		frame := binary.BigEndian.AppendUint16(nil, uint16(kmsg.Produce))
		frame = binary.BigEndian.AppendUint16(frame, uint16(version))
		frame = binary.BigEndian.AppendUint32(frame, 1)
		frame = binary.BigEndian.AppendUint16(frame, 0xffff)
		frame = append(frame, data[1:]...)
		var ends [2]int64
		for i := range ends {
			p, err := b.Partition("fuzz", int32(i))
			require.NoError(t, err)
			ends[i] = p.EndOffset()
		}
		req, err := c.parse(frame)
		if err != nil {
			return
		}
		w, err := c.dispatch(req)
		if err != nil {
			return // acks=0 with an error: the connection closes
		}
		// Successful answers, by partition and base offset.
		answered := map[[2]int64]bool{}
		if w != nil {
			resp := kmsg.NewPtrProduceResponse()
			resp.SetVersion(version)
			require.NoError(t, resp.ReadFrom(w.(*kmsgResponse).buf))
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if rp.ErrorCode == 0 {
						answered[[2]int64{int64(rp.Partition), rp.BaseOffset}] = true
					}
				}
			}
		}
		// Whatever was written is whole, valid batches, each answered
		// with success.
		for i := range ends {
			p, err := b.Partition("fuzz", int32(i))
			require.NoError(t, err)
			if p.EndOffset() == ends[i] {
				continue
			}
			out, err := p.Log().Read(ends[i], math.MaxInt32)
			require.NoError(t, err)
			for len(out) > 0 {
				bt, n, err := record.ParseBatch(out)
				require.NoError(t, err)
				out = out[n:]
				require.NoError(t, bt.Verify())
				_, err = bt.Records()
				require.NoError(t, err)
				if w != nil {
					require.True(t, answered[[2]int64{int64(i), bt.BaseOffset()}], "a write without a successful answer")
				}
			}
		}
	})
}

// BenchmarkProduceFranzGo measures one franz-go producer writing 100-byte
// records with acks=1 and no idempotence to a broker that does not fsync
// (log.None), over loopback.
func BenchmarkProduceFranzGo(b *testing.B) {
	br, _, addr := testServer(b, spool.Options{Flush: log.None}, Options{})
	prodCreateTopic(b, br, "bench", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("bench"),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.MaxBufferedRecords(1<<20))
	require.NoError(b, err)
	defer cl.Close()
	value := make([]byte, 100)
	ctx := context.Background()
	require.NoError(b, cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr()) // metadata, connection
	var failed atomic.Pointer[error]
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Store(&err)
		}
	}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		cl.Produce(ctx, &kgo.Record{Value: value}, done)
	}
	require.NoError(b, cl.Flush(ctx))
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
}

// TestProduceSpareFrames: the buffers of served Produce frames take the
// frames that follow (conn.handle keeps them as spares) without a byte of
// what was produced changing: two connections at once, each sending 12
// requests of two partitions' batches of about 100 KiB with contents of
// their own, every record read back whole and in its producer's order.
func TestProduceSpareFrames(t *testing.T) {
	b, s, addr := testServer(t, spool.Options{Flush: log.None}, Options{})
	prodCreateTopic(t, b, "spare", 2)
	value := func(conn, req, rec int) string {
		v := []byte(fmt.Sprintf("%d/%d/%d;", conn, req, rec))
		for len(v) < 1000 {
			v = append(v, byte('a'+(conn*11+req*7+rec*3+len(v))%26))
		}
		return string(v)
	}
	const conns, requests, records = 2, 12, 100
	batch := func(conn, req int, part int32) []byte {
		recs := make([]record.Record, records)
		for i := range recs {
			recs[i] = record.Record{Value: []byte(value(conn, req, int(part)*records+i))}
		}
		bt, err := record.NewBatch(recs, record.BatchOptions{})
		require.NoError(t, err)
		return bt.Bytes()
	}
	// call sends a request and reads its response, off the test
	// goroutine (so errors, not require).
	call := func(c net.Conn, corr int32, req *kmsg.ProduceRequest) (*kmsg.ProduceResponse, error) {
		body := req.AppendTo([]byte{0}) // the request header's empty tag buffer
		frame := binary.BigEndian.AppendUint32(nil, uint32(8+2+len(body)))
		frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
		frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
		frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
		frame = binary.BigEndian.AppendUint16(frame, 0xffff) // null client id
		if _, err := c.Write(append(frame, body...)); err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(c, sz[:]); err != nil {
			return nil, err
		}
		raw := make([]byte, binary.BigEndian.Uint32(sz[:]))
		if _, err := io.ReadFull(c, raw); err != nil {
			return nil, err
		}
		if got := int32(binary.BigEndian.Uint32(raw)); got != corr {
			return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		return resp, resp.ReadFrom(raw[5:]) // after the id and the header's tag buffer
	}
	reused := s.memory.reused.Load()
	var wg sync.WaitGroup
	errs := make(chan error, conns*requests*2)
	for cn := range conns {
		c := prodDial(t, addr)
		wg.Go(func() {
			for r := range requests {
				req := prodRequest(9, -1, "spare", 0, batch(cn, r, 0))
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = 1, batch(cn, r, 1)
				req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
				resp, err := call(c, int32(r), req)
				if err != nil {
					errs <- fmt.Errorf("connection %d request %d: %w", cn, r, err)
					return
				}
				for _, p := range resp.Topics[0].Partitions {
					if p.ErrorCode != 0 {
						errs <- fmt.Errorf("connection %d request %d partition %d: error %d", cn, r, p.Partition, p.ErrorCode)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Greater(t, s.memory.reused.Load()-reused, int64(0), "no frame was read into a spare")
	for part := range int32(2) {
		next := make([]int, conns) // per connection: the next request expected
		vals := prodReadBack(t, b, "spare", part)
		require.Len(t, vals, conns*requests*records)
		for i := 0; i < len(vals); i += records {
			var cn, r, rec int
			_, err := fmt.Sscanf(vals[i], "%d/%d/%d;", &cn, &r, &rec)
			require.NoError(t, err, "partition %d record %d", part, i)
			require.Equal(t, next[cn], r, "partition %d: connection %d's requests in order", part, cn)
			next[cn]++
			for j := range records {
				require.Equal(t, value(cn, r, int(part)*records+j), vals[i+j], "partition %d connection %d request %d record %d", part, cn, r, j)
			}
		}
	}
}
