package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Byte-level negative cases over real TCP connections to a real Server.
// Each case checks the contract for the connection at fault (an answer, or
// a close with nothing written), that the server goes on serving others,
// and that the connection left no goroutine behind.

var negBrokerOptions = spool.Options{Flush: log.None, AutoCreateTopics: spool.Disabled, OffsetsTopicPartitions: 1}

// negGoroutineSlack is how many goroutines above the count before may
// remain: timers and the runtime's own come and go.
const negGoroutineSlack = 2

// negGoroutines returns a check that the goroutine count comes back to
// what it is now, waiting up to 5 s for connections to wind down.
func negGoroutines(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before+negGoroutineSlack {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("goroutine leak: %d before, %d after\n%s", before, n, buf)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func negDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func negWrite(t testing.TB, c net.Conn, b ...[]byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(bytes.Join(b, nil))
	require.NoError(t, err)
}

// negRead reads one response frame and decodes it as the answer to a
// request of key at version, checking the correlation id.
func negRead(t testing.TB, c net.Conn, key, version int16, corr int32) kmsg.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame, err := fzReadFrame(c)
	require.NoError(t, err, "%s v%d", kmsg.NameForKey(key), version)
	got, resp, err := fzDecode(frame, key, version)
	require.NoError(t, err)
	require.Equal(t, corr, got, "correlation id of the %s v%d answer", kmsg.NameForKey(key), version)
	return resp
}

// negCall sends req at its version and reads its answer.
func negCall[Resp kmsg.Response](t testing.TB, c net.Conn, corr int32, req kmsg.Request) Resp {
	t.Helper()
	negWrite(t, c, fzRequest(req, corr))
	return negRead(t, c, req.Key(), req.GetVersion(), corr).(Resp)
}

// negClosed checks that the server closes c without writing anything, and
// returns how long that took.
func negClosed(t testing.TB, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		require.True(t, fzClosed(err), "the server neither answered nor closed: %v", err)
	}
	require.Empty(t, got, "the server answered instead of closing")
	return time.Since(start)
}

// negAlive checks that the server serves a new connection.
func negAlive(t testing.TB, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(3)
	r.ClientSoftwareName, r.ClientSoftwareVersion = "neg", "1.0"
	resp := negCall[*kmsg.ApiVersionsResponse](t, c, 77, r)
	require.Zero(t, resp.ErrorCode)
	require.NotEmpty(t, resp.ApiKeys)
}

func negSize(n int32, rest ...byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(n)), rest...)
}

func negApiVersions(v int16) *kmsg.ApiVersionsRequest {
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(v)
	r.ClientSoftwareName, r.ClientSoftwareVersion = "neg", "1.0"
	return r
}

// A frame over MaxRequestBytes is refused from its size prefix alone: the
// connection closes and the server allocates nothing of that size. A frame
// of exactly the limit is served.
func TestNegativeOversizeRequest(t *testing.T) {
	const limit = 16 << 20
	_, _, addr := testServer(t, negBrokerOptions, Options{MaxRequestBytes: limit})
	negAlive(t, addr) // the lazily made parts of the server exist now
	leaks := negGoroutines(t)

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	c := negDial(t, addr)
	// The prefix and a header, then as much as the socket takes.
	negWrite(t, c, negSize(limit+1, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff))
	negClosed(t, c)
	runtime.ReadMemStats(&ms)
	require.Less(t, ms.TotalAlloc-before, uint64(limit/4), "allocated %d bytes for a refused frame", ms.TotalAlloc-before)

	for _, size := range []uint32{math.MaxInt32, limit + 1<<20} {
		c := negDial(t, addr)
		negWrite(t, c, binary.BigEndian.AppendUint32(nil, size))
		negClosed(t, c)
	}

	// Exactly the limit: ApiVersions v0 with padding after its (empty)
	// body, which decoding ignores.
	c = negDial(t, addr)
	frame := fzFrame(18, 0, 5, "neg", nil)
	frame = append(frame, make([]byte, limit-(len(frame)-4))...)
	binary.BigEndian.PutUint32(frame, limit)
	negWrite(t, c, frame)
	require.Zero(t, negRead(t, c, 18, 0, 5).(*kmsg.ApiVersionsResponse).ErrorCode)
	c.Close()

	negAlive(t, addr)
	leaks()
}

// A size prefix below a request header's 8 bytes (key, version,
// correlation id) - negative, zero, 3, 7 - closes the connection.
func TestNegativeSizePrefixes(t *testing.T) {
	_, _, addr := testServer(t, negBrokerOptions, Options{})
	negAlive(t, addr)
	leaks := negGoroutines(t)
	for _, size := range []int32{-1, math.MinInt32, 0, 3, 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := negDial(t, addr)
			// Enough bytes after the prefix for any misreading to find
			// a whole ApiVersions request.
			negWrite(t, c, negSize(size), fzFrame(18, 0, 1, "", nil))
			negClosed(t, c)
			negAlive(t, addr)
		})
	}
	leaks()
}

// A frame cut off anywhere - in the size prefix, in the header, in the
// client id, in the body - then EOF: the connection closes unanswered.
func TestNegativeTruncatedFrames(t *testing.T) {
	_, _, addr := testServer(t, negBrokerOptions, Options{})
	negAlive(t, addr)
	leaks := negGoroutines(t)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("some-topic")}}
	whole := fzRequest(md, 1)
	for _, cut := range []int{2, 4, 6, 9, 12, 15, len(whole) - 1} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			c := negDial(t, addr)
			negWrite(t, c, whole[:cut])
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			negClosed(t, c)
		})
	}
	// The same frame whole is answered.
	c := negDial(t, addr)
	negWrite(t, c, whole)
	negRead(t, c, md.Key(), 9, 1)
	c.Close()
	negAlive(t, addr)
	leaks()
}

// A request for an API the server does not serve closes the connection,
// as Kafka does (its SocketServer fails to parse the header and closes):
// keys unknown to the protocol, keys of APIs not implemented here, and
// versions outside a served API's range (except ApiVersions: see below).
func TestNegativeUnservedAPIs(t *testing.T) {
	_, _, addr := testServer(t, negBrokerOptions, Options{})
	negAlive(t, addr)
	leaks := negGoroutines(t)
	_, served := handlers[kmsg.CreateDelegationToken.Int16()]
	require.False(t, served, "pick an API the server does not serve")
	cases := []struct {
		key, version int16
	}{
		{999, 0},
		{-1, 0},
		{math.MaxInt16, 0},
		{kmsg.CreateDelegationToken.Int16(), 0},
		{kmsg.ConsumerGroupHeartbeat.Int16(), 0},
		{kmsg.Produce.Int16(), 2},      // message format v1: not advertised
		{kmsg.Produce.Int16(), -1},     // a negative version
		{kmsg.Fetch.Int16(), 3},        // below the range
		{kmsg.Fetch.Int16(), 13},       // above the range (topic ids)
		{kmsg.Metadata.Int16(), 99},    // beyond the protocol
		{kmsg.OffsetDelete.Int16(), 1}, // one past a one-version range
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d/v%d", tc.key, tc.version), func(t *testing.T) {
			c := negDial(t, addr)
			negWrite(t, c, fzFrame(tc.key, tc.version, 1, "neg", []byte{0, 0, 0, 0}))
			negClosed(t, c)
		})
	}
	negAlive(t, addr)
	leaks()
}

// ApiVersions of a version the server does not serve is answered, not
// refused (KIP-511): a v0-shaped body - no tag buffer in the header or the
// body, even when the request was flexible - with UNSUPPORTED_VERSION and
// ApiVersions' own range, and the connection stays open for the retry.
func TestNegativeApiVersionsUnsupportedVersion(t *testing.T) {
	_, _, addr := testServer(t, negBrokerOptions, Options{})
	negAlive(t, addr)
	leaks := negGoroutines(t)
	h := handlers[kmsg.ApiVersions.Int16()]
	v5 := kmsg.NewPtrApiVersionsRequest()
	v5.SetVersion(5)
	v5.ClientSoftwareName, v5.ClientSoftwareVersion = "kgo", "1.22.3"
	cases := map[string][]byte{
		// kgo opens with v5, a flexible request header (v2) and body.
		"v5 flexible":      fzRequest(v5, 40),
		"v99":              fzFrame(18, 99, 40, "neg", nil),
		"v-1":              fzFrame(18, -1, 40, "neg", nil),
		"v32767 truncated": fzFrame(18, math.MaxInt16, 40, "", nil)[:12],
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			c := negDial(t, addr)
			if name == "v32767 truncated" {
				// A frame of only key, version and correlation id:
				// answered all the same - the version decides first.
				frame = negSize(8, frame[4:12]...)
			}
			negWrite(t, c, frame)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := fzReadFrame(c)
			require.NoError(t, err)
			// correlation id, then error_code int16, api_keys int32
			// count and one {key, min, max}: nothing else.
			want := binary.BigEndian.AppendUint32(nil, 40)
			want = binary.BigEndian.AppendUint16(want, uint16(errUnsupportedVersion))
			want = binary.BigEndian.AppendUint32(want, 1)
			want = binary.BigEndian.AppendUint16(want, 18)
			want = binary.BigEndian.AppendUint16(want, uint16(h.min))
			want = binary.BigEndian.AppendUint16(want, uint16(h.max))
			require.Equal(t, want, got)
			// The retry at the advertised maximum succeeds on the same
			// connection.
			resp := negCall[*kmsg.ApiVersionsResponse](t, c, 41, negApiVersions(h.max))
			require.Zero(t, resp.ErrorCode)
			require.Equal(t, advertised(false), resp.ApiKeys)
		})
	}
	negAlive(t, addr)
	leaks()
}

// With SASL on, only ApiVersions, SaslHandshake and SaslAuthenticate may
// come before authentication, each frame at most MaxPreAuthBytes; anything
// else closes the connection unanswered. Authentication lifts both.
func TestNegativeRequestsBeforeSASL(t *testing.T) {
	const preAuth = 1 << 10
	_, _, addr := testServer(t, negBrokerOptions, Options{MaxPreAuthBytes: preAuth,
		SASL: &SASL{Plain: map[string]string{"alice": "alice-secret"}}})
	negAlive(t, addr)
	leaks := negGoroutines(t)

	metadata := func() *kmsg.MetadataRequest {
		r := kmsg.NewPtrMetadataRequest()
		r.SetVersion(9)
		return r
	}
	handshake := func(c net.Conn, corr int32) {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.SetVersion(1)
		r.Mechanism = "PLAIN"
		resp := negCall[*kmsg.SASLHandshakeResponse](t, c, corr, r)
		require.Zero(t, resp.ErrorCode)
		require.Contains(t, resp.SupportedMechanisms, "PLAIN")
	}
	authenticate := func(c net.Conn, corr int32, password string) *kmsg.SASLAuthenticateResponse {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SetVersion(2)
		r.SASLAuthBytes = []byte("\x00alice\x00" + password)
		return negCall[*kmsg.SASLAuthenticateResponse](t, c, corr, r)
	}
	// An ApiVersions frame (allowed before authentication) larger than
	// MaxPreAuthBytes, by its client id.
	big := fzFrame(18, 0, 9, strings.Repeat("c", 2*preAuth), nil)

	t.Run("metadata first", func(t *testing.T) {
		c := negDial(t, addr)
		negWrite(t, c, fzRequest(metadata(), 1))
		negClosed(t, c)
	})
	t.Run("produce after ApiVersions", func(t *testing.T) {
		c := negDial(t, addr)
		require.Zero(t, negCall[*kmsg.ApiVersionsResponse](t, c, 1, negApiVersions(3)).ErrorCode)
		p := kmsg.NewPtrProduceRequest()
		p.SetVersion(9)
		p.Acks = -1
		negWrite(t, c, fzRequest(p, 2))
		negClosed(t, c)
	})
	t.Run("frame over MaxPreAuthBytes", func(t *testing.T) {
		c := negDial(t, addr)
		negWrite(t, c, big)
		negClosed(t, c)
	})
	t.Run("size prefix over MaxPreAuthBytes", func(t *testing.T) {
		c := negDial(t, addr)
		negWrite(t, c, negSize(preAuth+1))
		negClosed(t, c)
	})
	t.Run("authenticate before handshake", func(t *testing.T) {
		c := negDial(t, addr)
		resp := authenticate(c, 1, "alice-secret")
		require.Equal(t, errIllegalSASLState, resp.ErrorCode)
		negClosed(t, c)
	})
	t.Run("wrong password", func(t *testing.T) {
		c := negDial(t, addr)
		handshake(c, 1)
		resp := authenticate(c, 2, "wrong")
		require.Equal(t, errSASLAuthenticationFailed, resp.ErrorCode)
		negClosed(t, c)
	})
	t.Run("authenticated", func(t *testing.T) {
		c := negDial(t, addr)
		require.Zero(t, negCall[*kmsg.ApiVersionsResponse](t, c, 1, negApiVersions(4)).ErrorCode)
		handshake(c, 2)
		require.Zero(t, authenticate(c, 3, "alice-secret").ErrorCode)
		negWrite(t, c, big)
		require.Zero(t, negRead(t, c, 18, 0, 9).(*kmsg.ApiVersionsResponse).ErrorCode)
		resp := negCall[*kmsg.MetadataResponse](t, c, 4, metadata())
		require.Len(t, resp.Brokers, 1)
	})
	negAlive(t, addr)
	leaks()
}

// negBatch is one batch of n records with values prefix-0 ... prefix-(n-1).
func negBatch(t testing.TB, prefix string, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	b, err := record.NewBatch(recs, record.BatchOptions{})
	require.NoError(t, err)
	return b.Bytes()
}

func negProduce(v, acks int16, topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(v)
	r.Acks, r.TimeoutMillis = acks, 5000
	r.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: partition, Records: batch}}}}
	return r
}

func negFetch(v int16, maxWait int32, topic string, partition int32, offset int64) *kmsg.FetchRequest {
	r := kmsg.NewPtrFetchRequest()
	r.SetVersion(v)
	r.ReplicaID, r.MaxWaitMillis, r.MinBytes, r.MaxBytes, r.SessionEpoch = -1, maxWait, 1, 1<<20, -1
	r.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{
		{Partition: partition, FetchOffset: offset, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, LogStartOffset: -1}}}}
	return r
}

// negValues decodes the values of a fetched partition's records, by offset.
func negValues(t testing.TB, records []byte) map[int64]string {
	t.Helper()
	vals, err := negDecodeValues(records)
	require.NoError(t, err)
	return vals
}

// Requests written back to back on one connection are served one at a
// time, in order, and answered in order with their correlation ids; an
// acks=0 produce in between gets no answer but is appended before the next
// request is served; a fetch that long-polls holds the ones behind it.
func TestNegativePipelinedRequests(t *testing.T) {
	b, _, addr := testServer(t, negBrokerOptions, Options{})
	require.NoError(t, b.CreateTopic(context.Background(), "pipe", spool.TopicConfig{Partitions: 1}))
	negAlive(t, addr)
	leaks := negGoroutines(t)

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("pipe")}}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(7)
	lo.ReplicaID = -1
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "pipe", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, Timestamp: -1, CurrentLeaderEpoch: -1}}}}
	reqs := []kmsg.Request{
		negApiVersions(3),
		md,
		negProduce(9, -1, "pipe", 0, negBatch(t, "a", 2)),
		negProduce(9, 0, "pipe", 0, negBatch(t, "b", 1)), // no answer
		negFetch(12, 500, "pipe", 0, 0),                  // data there: at once
		negFetch(12, 300, "pipe", 0, 3),                  // at the end: waits 300 ms
		lo,
		negApiVersions(0),
	}
	var stream []byte
	for i, r := range reqs {
		stream = append(stream, fzRequest(r, int32(100+i))...)
	}
	c := negDial(t, addr)
	start := time.Now()
	negWrite(t, c, stream)
	for i, r := range reqs {
		if p, ok := r.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
			continue
		}
		resp := negRead(t, c, r.Key(), r.GetVersion(), int32(100+i))
		switch resp := resp.(type) {
		case *kmsg.ProduceResponse:
			require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
			require.Equal(t, int64(0), resp.Topics[0].Partitions[0].BaseOffset)
		case *kmsg.FetchResponse:
			rp := resp.Topics[0].Partitions[0]
			require.Zero(t, rp.ErrorCode)
			require.Equal(t, int64(3), rp.HighWatermark, "the acks=0 batch is in before the fetch is served")
			if i == 4 {
				require.Equal(t, map[int64]string{0: "a-0", 1: "a-1", 2: "b-0"}, negValues(t, rp.RecordBatches))
			} else {
				require.Empty(t, rp.RecordBatches)
				require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the long poll waited")
			}
		case *kmsg.ListOffsetsResponse:
			require.Equal(t, int64(3), resp.Topics[0].Partitions[0].Offset)
		case *kmsg.ApiVersionsResponse:
			require.Zero(t, resp.ErrorCode)
		}
	}

	// Many more, of mixed kinds, written at once.
	stream = stream[:0]
	const n = 300
	for i := range n {
		var r kmsg.Request = negApiVersions(int16(i % 5))
		if i%3 == 1 {
			r = md
		}
		stream = append(stream, fzRequest(r, int32(1000+i))...)
	}
	negWrite(t, c, stream)
	for i := range n {
		if i%3 == 1 {
			negRead(t, c, md.Key(), md.GetVersion(), int32(1000+i))
		} else {
			negRead(t, c, 18, int16(i%5), int32(1000+i))
		}
	}
	c.Close()
	negAlive(t, addr)
	leaks()
}

// A client that sends half a frame and stalls, or nothing at all, is
// closed after IdleTimeout; one that keeps sending requests is not.
func TestNegativeStalledClient(t *testing.T) {
	const idle = 300 * time.Millisecond
	_, _, addr := testServer(t, negBrokerOptions, Options{IdleTimeout: idle})
	negAlive(t, addr)
	leaks := negGoroutines(t)

	frame := fzFrame(18, 0, 1, "stalling", nil)
	cases := map[string][]byte{
		"half a frame":    frame[:len(frame)/2],
		"only the prefix": frame[:4],
		"half the prefix": frame[:2],
		"nothing":         nil,
	}
	var wg sync.WaitGroup
	for name, part := range cases {
		c := negDial(t, addr)
		if len(part) > 0 {
			negWrite(t, c, part)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			took := negClosed(t, c)
			require.GreaterOrEqual(t, took, idle-50*time.Millisecond, name)
			require.Less(t, took, 5*time.Second, name)
		}()
	}
	// Meanwhile a busy connection outlives several idle timeouts.
	busy := negDial(t, addr)
	for i := range 10 {
		require.Zero(t, negCall[*kmsg.ApiVersionsResponse](t, busy, int32(i), negApiVersions(0)).ErrorCode)
		time.Sleep(idle / 3)
	}
	wg.Wait()
	busy.Close()
	negAlive(t, addr)
	leaks()
}

// Hundreds of connections at once, each producing a batch and fetching it
// back: every one is served, and each reads its own records at the offsets
// its produce was given.
func TestNegativeManyConnections(t *testing.T) {
	const conns, partitions, perBatch = 200, 8, 5
	b, s, addr := testServer(t, negBrokerOptions, Options{})
	require.NoError(t, b.CreateTopic(context.Background(), "many", spool.TopicConfig{Partitions: partitions}))
	negAlive(t, addr)
	leaks := negGoroutines(t)

	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = negDial(t, addr)
	}
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) >= conns
	}, 5*time.Second, 10*time.Millisecond, "the server holds every connection at once")

	batches := make([][]byte, conns)
	for i := range batches {
		batches[i] = negBatch(t, fmt.Sprintf("conn%d", i), perBatch)
	}
	start := make(chan struct{})
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				<-start
				part := int32(i % partitions)
				prefix := fmt.Sprintf("conn%d", i)
				p := negProduce(9, -1, "many", part, batches[i])
				pr, err := negRoundTrip(c, 1, p)
				if err != nil {
					return err
				}
				ppr := pr.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
				if ppr.ErrorCode != 0 {
					return fmt.Errorf("%s: produce error %d", prefix, ppr.ErrorCode)
				}
				fr, err := negRoundTrip(c, 2, negFetch(12, 0, "many", part, ppr.BaseOffset))
				if err != nil {
					return err
				}
				fp := fr.(*kmsg.FetchResponse).Topics[0].Partitions[0]
				if fp.ErrorCode != 0 {
					return fmt.Errorf("%s: fetch error %d", prefix, fp.ErrorCode)
				}
				vals, err := negDecodeValues(fp.RecordBatches)
				if err != nil {
					return err
				}
				for j := range perBatch {
					if got, want := vals[ppr.BaseOffset+int64(j)], fmt.Sprintf("%s-%d", prefix, j); got != want {
						return fmt.Errorf("offset %d: %q, want %q", ppr.BaseOffset+int64(j), got, want)
					}
				}
				return nil
			}()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var total int64
	for part := int32(0); part < partitions; part++ {
		p, err := b.Partition("many", part)
		require.NoError(t, err)
		total += p.EndOffset()
	}
	require.Equal(t, int64(conns*perBatch), total)
	for _, c := range cs {
		c.Close()
	}
	negAlive(t, addr)
	leaks()
}

// negRoundTrip is negCall for goroutines other than the test's: errors
// instead of failing.
func negRoundTrip(c net.Conn, corr int32, req kmsg.Request) (kmsg.Response, error) {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(fzRequest(req, corr)); err != nil {
		return nil, err
	}
	frame, err := fzReadFrame(c)
	if err != nil {
		return nil, err
	}
	got, resp, err := fzDecode(frame, req.Key(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	if got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	return resp, nil
}

func negDecodeValues(records []byte) (map[int64]string, error) {
	out := map[int64]string{}
	for len(records) > 0 {
		b, n, err := record.ParseBatch(records)
		if err != nil {
			return nil, err
		}
		records = records[n:]
		recs, err := b.Records()
		if err != nil {
			return nil, err
		}
		for i, r := range recs {
			out[b.BaseOffset()+int64(i)] = string(r.Value)
		}
	}
	return out, nil
}

// Shutdown with requests in flight: long-polling fetches, producers
// writing as fast as they are answered, a client stalled halfway through a
// frame and an idle one. Shutdown returns at once - without waiting for
// the fetches' MaxWait or the idle timeout - after every request being
// served was answered: each acknowledged record is in the log and nothing
// unacknowledged is. Serve returns ErrServerClosed, new connections are
// refused, no goroutine is left, and a new server on the same broker serves
// what was written.
func TestNegativeShutdownInFlight(t *testing.T) {
	b, err := spool.Open(t.TempDir(), negBrokerOptions)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "sd", spool.TopicConfig{Partitions: 1}))
	require.NoError(t, b.CreateTopic(context.Background(), "parked", spool.TopicConfig{Partitions: 1}))
	leaks := negGoroutines(t)

	s, err := NewServer(b, Options{})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	negAlive(t, addr)

	// Long polls on an empty partition, 30 s each. Each is answered
	// (empty) and then closed, or - if the server had not read it yet -
	// closed unanswered.
	const fetchers, producers = 4, 4
	fetched := make(chan error, fetchers)
	for range fetchers {
		c := negDial(t, addr)
		go func() {
			fetched <- func() error {
				resp, err := negRoundTrip(c, 1, negFetch(12, 30_000, "parked", 0, 0))
				if fzClosed(err) {
					return nil
				}
				if err != nil {
					return err
				}
				if rp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]; rp.ErrorCode != 0 || len(rp.RecordBatches) != 0 {
					return fmt.Errorf("long poll answered with error %d, %d bytes", rp.ErrorCode, len(rp.RecordBatches))
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, err := c.Read(make([]byte, 1)); n > 0 || !fzClosed(err) {
					return fmt.Errorf("after the long poll's answer: %d bytes, %v", n, err)
				}
				return nil
			}()
		}()
	}
	// A client stalled halfway through a frame, and an idle one.
	stalled := negDial(t, addr)
	frame := fzFrame(18, 0, 1, "stalled", nil)
	negWrite(t, stalled, frame[:len(frame)/2])
	idle := negDial(t, addr)

	// Producers, one batch of 2 records in flight each.
	var acked atomic.Int64
	var pwg sync.WaitGroup
	produced := make(chan error, producers)
	for i := range producers {
		c := negDial(t, addr)
		batch := negBatch(t, fmt.Sprintf("p%d", i), 2)
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for n := int32(0); ; n++ {
				resp, err := negRoundTrip(c, n, negProduce(9, -1, "sd", 0, batch))
				if err != nil {
					if !fzClosed(err) {
						produced <- err
					}
					return
				}
				if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
					produced <- fmt.Errorf("produce error %d", code)
					return
				}
				acked.Add(2)
			}
		}()
	}
	require.Eventually(t, func() bool { return acked.Load() > 200 }, 10*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let the fetches park

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, s.Shutdown(ctx))
	took := time.Since(start)
	require.Less(t, took, 3*time.Second, "Shutdown waited for long polls or idle connections")
	require.ErrorIs(t, <-served, ErrServerClosed)
	pwg.Wait()
	close(produced)
	for err := range produced {
		require.NoError(t, err)
	}
	for range fetchers {
		require.NoError(t, <-fetched)
	}
	negClosed(t, stalled)
	negClosed(t, idle)
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the listener is closed")

	p, err := b.Partition("sd", 0)
	require.NoError(t, err)
	require.Equal(t, acked.Load(), p.EndOffset(), "acknowledged = in the log: every request being served was answered, no other was appended")
	leaks()

	// The broker outlives its server: a new one serves what was written.
	s2, err := NewServer(b, Options{})
	require.NoError(t, err)
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served2 := make(chan error, 1)
	go func() { served2 <- s2.Serve(l2) }()
	c := negDial(t, l2.Addr().String())
	resp := negCall[*kmsg.FetchResponse](t, c, 1, negFetch(12, 0, "sd", 0, 0))
	require.Equal(t, acked.Load(), resp.Topics[0].Partitions[0].HighWatermark)
	require.NoError(t, s2.Shutdown(ctx))
	require.ErrorIs(t, <-served2, ErrServerClosed)
}

// On one broker every partition is led by it, except while it goes away:
// a produce to a partition of a closed broker is NOT_LEADER_OR_FOLLOWER
// (retriable: the client looks for the leader again), a fetch gets a
// partition error too, and the server still answers on the connection.
func TestNegativeProduceToPartitionNotLed(t *testing.T) {
	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	s, err := NewServer(b, Options{})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.ErrorIs(t, <-done, ErrServerClosed)
	}()
	prodCreateTopic(t, b, "t", 1)
	c := prodDial(t, l.Addr().String())
	out := prodOne(t, c, 9, "t", 0, prodBatch(t, -1, 0, 0, 1, record.None))
	require.Equal(t, errNone, out.ErrorCode)

	require.NoError(t, b.Close())
	out = prodOne(t, c, 9, "t", 0, prodBatch(t, -1, 0, 0, 1, record.None))
	require.Equal(t, errNotLeaderOrFollower, out.ErrorCode)
	require.Equal(t, int64(-1), out.BaseOffset)
	f := prodCall[*kmsg.FetchResponse](t, c, 2, negFetch(11, 0, "t", 0, 0))
	require.NotEqual(t, errNone, f.Topics[0].Partitions[0].ErrorCode)
	negAlive(t, l.Addr().String())
}
