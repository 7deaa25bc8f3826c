package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/quota"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The fuzz targets of this file drive a real Server over loopback TCP: one
// with whole connection streams (FuzzRequestFrame), one with the body of
// every request the server serves, correctly framed (FuzzAPIRequest).

// fzFlexible reports whether a request of key at version uses the flexible
// request header (v2: a tag buffer after the client id).
func fzFlexible(key, version int16) bool {
	r := kmsg.RequestForKey(key)
	if r == nil || version < 0 || version > r.MaxVersion() {
		return false
	}
	r.SetVersion(version)
	return r.IsFlexible()
}

// fzFrame is a request frame: size, header v1 (v2 - an empty tag buffer
// after the client id - for a flexible version) and body.
func fzFrame(key, version int16, corr int32, clientID string, body []byte) []byte {
	f := make([]byte, 4, 4+10+len(clientID)+1+len(body))
	f = binary.BigEndian.AppendUint16(f, uint16(key))
	f = binary.BigEndian.AppendUint16(f, uint16(version))
	f = binary.BigEndian.AppendUint32(f, uint32(corr))
	f = binary.BigEndian.AppendUint16(f, uint16(len(clientID)))
	f = append(f, clientID...)
	if fzFlexible(key, version) {
		f = append(f, 0)
	}
	f = append(f, body...)
	binary.BigEndian.PutUint32(f, uint32(len(f)-4))
	return f
}

// fzRequest frames a kmsg request at the version it is set to.
func fzRequest(req kmsg.Request, corr int32) []byte {
	return fzFrame(req.Key(), req.GetVersion(), corr, "fuzz", req.AppendTo(nil))
}

// fzDecode decodes a response frame (after its size) to a request of key
// at version: correlation id, the response header's empty tag buffer when
// flexible (never for ApiVersions), then the body at that version.
func fzDecode(frame []byte, key, version int16) (int32, kmsg.Response, error) {
	if len(frame) < 4 {
		return 0, nil, fmt.Errorf("response frame of %d bytes", len(frame))
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	b := frame[4:]
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		return corr, nil, fmt.Errorf("no response type for key %d", key)
	}
	resp.SetVersion(version)
	if resp.IsFlexible() && key != kmsg.ApiVersions.Int16() {
		if len(b) == 0 || b[0] != 0 {
			return corr, nil, fmt.Errorf("response header tags %x", b[:min(len(b), 1)])
		}
		b = b[1:]
	}
	if err := resp.ReadFrom(b); err != nil {
		return corr, nil, fmt.Errorf("decode %s v%d response: %w", kmsg.NameForKey(key), version, err)
	}
	return corr, resp, nil
}

// fzReadFrame reads one size-prefixed frame.
func fzReadFrame(r io.Reader) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(sz[:])
	if n > 64<<20 {
		return nil, fmt.Errorf("response frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// fzClosed reports whether err is the peer closing the connection: EOF,
// or a reset, which Linux sends when a socket closes with unread input.
func fzClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// fzDial connects to a fuzzed server. The connection closes with a reset
// (SO_LINGER 0): the server has closed first by then, and the reset ends
// its side at once instead of leaving it in TIME_WAIT, where tens of
// thousands of inputs would exhaust the loopback's port pairs.
func fzDial(t testing.TB, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).SetLinger(0))
	return c
}

// fzBrokerOptions keep the fuzzed broker cheap and its waits short: no
// fsync, no auto-created topics (each costs files and index maps), one
// offsets partition, group sessions of at most 300 ms so that a member a
// previous input left behind expires before it can hold a rebalance for
// long.
var fzBrokerOptions = spool.Options{
	Flush:                  log.None,
	AutoCreateTopics:       spool.Disabled,
	OffsetsTopicPartitions: 1,
	GroupMinSessionTimeout: time.Millisecond,
	GroupMaxSessionTimeout: 300 * time.Millisecond,
}

// fzAlarm is a slog handler that keeps the first record at Warn or above.
// A handler's panic does not kill the server - it closes the connection
// and logs the panic at Error - so a harness that accepts a closed
// connection must look here to see one.
type fzAlarm struct {
	first atomic.Pointer[string]
}

func (a *fzAlarm) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (a *fzAlarm) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	r.Attrs(func(at slog.Attr) bool {
		fmt.Fprintf(&sb, "\n%s: %v", at.Key, at.Value)
		return true
	})
	msg := sb.String()
	a.first.CompareAndSwap(nil, &msg)
	return nil
}

func (a *fzAlarm) WithAttrs([]slog.Attr) slog.Handler { return a }
func (a *fzAlarm) WithGroup(string) slog.Handler      { return a }

func (a *fzAlarm) logger() *slog.Logger { return slog.New(a) }

// check fails t if the server logged a warning or an error (a panic).
func (a *fzAlarm) check(t testing.TB) {
	t.Helper()
	if msg := a.first.Swap(nil); msg != nil {
		t.Fatalf("the server logged: %s", *msg)
	}
}

// fzTimeout is how long an input may take before it counts as a hang.
const fzTimeout = 10 * time.Second

// ---- FuzzRequestFrame ----

// Limits of the frame fuzzer's servers, small enough that fuzzed frames
// reach them.
const (
	fzMaxRequest = 64 << 10
	fzMaxPreAuth = 512
)

var fzUsers = map[string]string{"alice": "alice-secret"}

// fzHeader is the header of one request frame of a stream.
type fzHeader struct {
	key, version int16
	corr         int32
}

// fzRequestsOf walks a connection stream as the server reads it and lists
// the headers of the whole frames within the size limits, up to the first
// frame the server would refuse. unchecked is set when the stream holds a
// SaslHandshake v0 on a SASL server: the raw SASL tokens that follow are not
// request frames, so nothing after it can be predicted.
func fzRequestsOf(stream []byte, sasl bool) (hdrs []fzHeader, unchecked bool) {
	for len(stream) >= 4 {
		size := int32(binary.BigEndian.Uint32(stream))
		if size < 8 || size > fzMaxRequest || int(size) > len(stream)-4 {
			return hdrs, false
		}
		f := stream[4 : 4+size]
		stream = stream[4+size:]
		h := fzHeader{int16(binary.BigEndian.Uint16(f)), int16(binary.BigEndian.Uint16(f[2:])), int32(binary.BigEndian.Uint32(f[4:]))}
		hdrs = append(hdrs, h)
		if sasl && h.key == kmsg.SASLHandshake.Int16() && h.version == 0 {
			return hdrs, true
		}
	}
	return hdrs, false
}

// FuzzRequestFrame feeds arbitrary bytes as a whole connection stream to a
// real server (one without SASL, one with SASL PLAIN), then half-closes.
// The server must neither panic nor hang: it answers what it can and closes.
// Every response is a well-formed frame answering, in order, one of the
// stream's requests, and decodes as that request's response. The frame
// size limits hold before anything is allocated: the whole exchange
// allocates a bounded amount whatever the size prefixes claim.
func FuzzRequestFrame(f *testing.F) {
	req := func(r kmsg.Request, v int16, corr int32) []byte {
		r.SetVersion(v)
		return fzRequest(r, corr)
	}
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	size := func(n uint32, rest ...byte) []byte { return append(binary.BigEndian.AppendUint32(nil, n), rest...) }
	header := func(key, version int16, corr int32) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		return binary.BigEndian.AppendUint32(h, uint32(corr))
	}
	sized := func(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }
	apiV := func(v int16, corr int32) []byte {
		r := kmsg.NewPtrApiVersionsRequest()
		r.ClientSoftwareName, r.ClientSoftwareVersion = "fuzz", "1.0"
		return req(r, v, corr)
	}
	metadata := func(v int16, corr int32) []byte { return req(kmsg.NewPtrMetadataRequest(), v, corr) }
	produce0 := kmsg.NewPtrProduceRequest()
	produce0.Acks = 0
	produce0.Topics = []kmsg.ProduceRequestTopic{{Topic: "none", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: []byte{}}}}}
	bigClientID := fzFrame(kmsg.ApiVersions.Int16(), 0, 9, strings.Repeat("c", 2*fzMaxPreAuth), nil)
	handshake := func(v int16, mech string) []byte {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = mech
		return req(r, v, 20)
	}
	authenticate := func(v int16, token string) []byte {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SASLAuthBytes = []byte(token)
		return req(r, v, 21)
	}
	for _, sasl := range []bool{false, true} {
		// Valid streams: single and pipelined requests.
		f.Add(sasl, apiV(0, 1))
		f.Add(sasl, apiV(3, 1))
		f.Add(sasl, apiV(4, 1))
		f.Add(sasl, cat(apiV(4, 1), metadata(1, 2), metadata(12, 3), req(produce0, 9, 4), apiV(0, 5)))
		f.Add(sasl, apiV(99, 1))                                                                             // KIP-511
		f.Add(sasl, fzFrame(kmsg.ApiVersions.Int16(), 5, 1, "kgo", []byte{0, 0, 0xff, 0xff, 0xff, 0xff, 0})) // kgo's first
		f.Add(sasl, req(produce0, 3, 7))
		// Size prefixes.
		f.Add(sasl, size(0xffffffff))
		f.Add(sasl, size(0x80000000))
		f.Add(sasl, size(0))
		f.Add(sasl, size(3, 0, 18, 0))
		f.Add(sasl, size(7, cat(header(18, 0, 1)[:7])...))
		f.Add(sasl, size(0x7fffffff, header(18, 0, 1)...))
		f.Add(sasl, size(fzMaxRequest+1, header(18, 0, 1)...))
		f.Add(sasl, size(fzMaxRequest, header(18, 0, 1)...))
		f.Add(sasl, size(fzMaxPreAuth+1, header(18, 0, 1)...))
		f.Add(sasl, bigClientID)
		// Truncated frames.
		f.Add(sasl, size(20, 0, 18, 0))
		f.Add(sasl, apiV(3, 1)[:9])
		f.Add(sasl, cat(apiV(0, 1), apiV(0, 2)[:12]))
		// Keys and versions the server does not serve.
		f.Add(sasl, sized(cat(header(999, 0, 1), []byte{0xff, 0xff})))
		f.Add(sasl, sized(cat(header(-1, 0, 1), []byte{0xff, 0xff})))
		f.Add(sasl, sized(cat(header(24, 0, 1), []byte{0xff, 0xff})))
		f.Add(sasl, sized(cat(header(0, 2, 1), []byte{0xff, 0xff})))
		f.Add(sasl, sized(cat(header(1, 13, 1), []byte{0xff, 0xff})))
		f.Add(sasl, sized(cat(header(3, -1, 1), []byte{0xff, 0xff})))
		// Client ids: negative, longer than the frame, missing.
		f.Add(sasl, sized(cat(header(18, 0, 1), []byte{0xff, 0xfe})))
		f.Add(sasl, sized(cat(header(18, 0, 1), []byte{0x7f, 0xff, 'a'})))
		f.Add(sasl, sized(cat(header(18, 0, 1), []byte{0x00, 0x05, 'a'})))
		f.Add(sasl, sized(header(18, 0, 1)))
		f.Add(sasl, sized(cat(header(18, 0, 1), []byte{0})))
		// Flexible header tag buffers with bogus counts and lengths.
		f.Add(sasl, sized(cat(header(18, 3, 1), []byte{0xff, 0xff}, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})))
		f.Add(sasl, sized(cat(header(18, 3, 1), []byte{0xff, 0xff}, []byte{1, 0, 0x7f})))
		f.Add(sasl, sized(cat(header(3, 12, 1), []byte{0xff, 0xff}, []byte{2, 0, 1, 'x', 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})))
		f.Add(sasl, sized(cat(header(3, 12, 1), []byte{0xff, 0xff}, []byte{0x80})))
		f.Add(sasl, sized(cat(header(18, 3, 1), []byte{0xff, 0xff}, []byte{0})))
		// Garbage bodies.
		f.Add(sasl, sized(cat(header(3, 1, 1), []byte{0xff, 0xff, 0x7f, 0xff, 0xff, 0xff})))
		f.Add(sasl, sized(cat(header(1, 12, 1), []byte{0xff, 0xff, 0}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f})))
	}
	// SASL: before authentication, during it, after it.
	f.Add(true, cat(metadata(1, 1), apiV(0, 2)))
	f.Add(true, cat(apiV(3, 1), handshake(1, "PLAIN"), authenticate(0, "\x00alice\x00alice-secret"), bigClientID, metadata(9, 22)))
	f.Add(true, cat(handshake(1, "PLAIN"), authenticate(2, "\x00alice\x00wrong"), metadata(9, 22)))
	f.Add(true, cat(handshake(1, "SCRAM-SHA-256"), authenticate(1, "n,,n=alice,r=abc")))
	f.Add(true, cat(handshake(1, "GSSAPI"), metadata(1, 22)))
	f.Add(true, cat(authenticate(0, "\x00alice\x00alice-secret"), metadata(1, 22)))
	f.Add(true, cat(handshake(0, "PLAIN"), sized([]byte("\x00alice\x00alice-secret")), metadata(1, 22)))
	f.Add(true, cat(handshake(0, "PLAIN"), size(0xffffffff)))
	f.Add(true, cat(handshake(0, "PLAIN"), size(fzMaxPreAuth+1)))
	f.Add(false, cat(handshake(1, "PLAIN"), authenticate(0, "\x00alice\x00alice-secret"), metadata(1, 22)))

	alarm := &fzAlarm{}
	_, _, plainAddr := testServer(f, fzBrokerOptions, Options{MaxRequestBytes: fzMaxRequest, IdleTimeout: fzTimeout, Logger: alarm.logger()})
	_, _, saslAddr := testServer(f, fzBrokerOptions, Options{MaxRequestBytes: fzMaxRequest, MaxPreAuthBytes: fzMaxPreAuth,
		IdleTimeout: fzTimeout, SASL: &SASL{Plain: fzUsers}, Logger: alarm.logger()})

	f.Fuzz(func(t *testing.T, sasl bool, stream []byte) {
		addr := plainAddr
		if sasl {
			addr = saslAddr
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		allocBefore := ms.TotalAlloc

		c := fzDial(t, addr)
		defer c.Close()
		c.SetDeadline(time.Now().Add(fzTimeout))
		wrote := make(chan error, 1)
		go func() {
			_, err := c.Write(stream)
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			wrote <- err // an error: the server closed first, as it may
		}()
		out, err := io.ReadAll(c)
		if err != nil && !fzClosed(err) {
			t.Fatalf("the server neither answered nor closed within %s: %v", fzTimeout, err)
		}
		<-wrote
		alarm.check(t)

		hdrs, unchecked := fzRequestsOf(stream, sasl)
		for len(out) > 0 {
			if len(out) < 4 || int(binary.BigEndian.Uint32(out)) > len(out)-4 {
				if unchecked || err != nil {
					break // raw SASL tokens; or a reset cut the answer
				}
				t.Fatalf("truncated response frame: %x", out)
			}
			n := int(binary.BigEndian.Uint32(out))
			frame := out[4 : 4+n]
			out = out[4+n:]
			if len(frame) < 4 && unchecked {
				break
			}
			require.GreaterOrEqual(t, len(frame), 4, "a response frame without a correlation id")
			corr := int32(binary.BigEndian.Uint32(frame))
			i := slices.IndexFunc(hdrs, func(h fzHeader) bool { return h.corr == corr })
			if i < 0 {
				if unchecked {
					break
				}
				t.Fatalf("response with correlation id %d answers no request left in %+v", corr, hdrs)
			}
			h := hdrs[i]
			hdrs = hdrs[i+1:]
			version := h.version
			if h.key == kmsg.ApiVersions.Int16() && (version < 0 || version > handlers[h.key].max) {
				version = 0 // KIP-511: a v0 body
			}
			if _, _, err := fzDecode(frame, h.key, version); err != nil {
				t.Fatalf("response to %s v%d: %v", kmsg.NameForKey(h.key), h.version, err)
			}
			if unchecked && h.key == kmsg.SASLHandshake.Int16() && h.version == 0 {
				break // raw tokens follow
			}
		}

		// Size limits come before allocation: what one connection makes
		// the server allocate is bounded by the bytes it sent, never by
		// a size prefix.
		runtime.ReadMemStats(&ms)
		if grew := ms.TotalAlloc - allocBefore; grew > uint64(4<<20+2*fzMaxRequest+2000*len(stream)) {
			t.Fatalf("a %d-byte stream made the process allocate %d bytes", len(stream), grew)
		}
	})
}

// ---- FuzzAPIRequest ----

// fzTopic is the topic the API fuzzer's broker starts with; fzGroup a group
// name its seeds use.
const (
	fzTopic = "fuzz"
	fzGroup = "g"
)

// fzSeed is a valid request for key, with fields pointing at what the
// fuzzed broker holds (topic fzTopic, group fzGroup) so that seeds reach the
// handlers' deeper paths. kmsg encodes only the fields of the version set
// later.
func fzSeed(t testing.TB, key int16, topicID [16]byte) kmsg.Request {
	str := func(s string) *string { return &s }
	batch, err := record.NewBatch([]record.Record{{Key: []byte("k"), Value: []byte("v")}, {Value: []byte("w")}}, record.BatchOptions{})
	require.NoError(t, err)
	switch kmsg.Key(key) {
	case kmsg.Produce:
		r := kmsg.NewPtrProduceRequest()
		r.Acks, r.TimeoutMillis = -1, 1000
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: fzTopic, TopicID: topicID,
			Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 1, Records: batch.Bytes()}}}}
		return r
	case kmsg.Fetch:
		r := kmsg.NewPtrFetchRequest()
		r.ReplicaID, r.MaxWaitMillis, r.MinBytes, r.MaxBytes, r.SessionEpoch = -1, 5, 1, 1<<20, -1
		r.Topics = []kmsg.FetchRequestTopic{{Topic: fzTopic, TopicID: topicID, Partitions: []kmsg.FetchRequestTopicPartition{
			{Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 16, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, LogStartOffset: -1},
			{Partition: 1, FetchOffset: 1, PartitionMaxBytes: 1 << 16, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, LogStartOffset: -1},
		}}}
		return r
	case kmsg.ListOffsets:
		r := kmsg.NewPtrListOffsetsRequest()
		r.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: fzTopic, Partitions: []kmsg.ListOffsetsRequestTopicPartition{
			{Partition: 0, Timestamp: -1, CurrentLeaderEpoch: -1, MaxNumOffsets: 1}, {Partition: 1, Timestamp: -2, CurrentLeaderEpoch: -1, MaxNumOffsets: 1}}}}
		return r
	case kmsg.Metadata:
		r := kmsg.NewPtrMetadataRequest()
		r.Topics = []kmsg.MetadataRequestTopic{{Topic: str(fzTopic)}, {Topic: str("unknown")}}
		return r
	case kmsg.OffsetCommit:
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.Generation, r.RetentionTimeMillis = fzGroup, -1, -1
		r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: fzTopic, TopicID: topicID, Partitions: []kmsg.OffsetCommitRequestTopicPartition{
			{Partition: 0, Offset: 1, LeaderEpoch: -1, Metadata: str("m")}}}}
		return r
	case kmsg.OffsetFetch:
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Group = fzGroup
		r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: fzTopic, Partitions: []int32{0, 1}}}
		r.Groups = []kmsg.OffsetFetchRequestGroup{{Group: fzGroup, MemberEpoch: -1,
			Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: fzTopic, TopicID: topicID, Partitions: []int32{0, 1}}}}}
		return r
	case kmsg.FindCoordinator:
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorKey, r.CoordinatorKeys = fzGroup, []string{fzGroup, "h"}
		return r
	case kmsg.JoinGroup:
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = fzGroup, 100, 100, "consumer"
		r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 1, 0, 4, 'f', 'u', 'z', 'z', 0, 0, 0, 0}}}
		return r
	case kmsg.Heartbeat:
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.Generation, r.MemberID = fzGroup, 1, "m"
		return r
	case kmsg.LeaveGroup:
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group, r.MemberID = fzGroup, "m"
		r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "m"}}
		return r
	case kmsg.SyncGroup:
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.Generation, r.MemberID = fzGroup, 1, "m"
		r.ProtocolType, r.Protocol = str("consumer"), str("range")
		r.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "m", MemberAssignment: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}}
		return r
	case kmsg.DescribeGroups:
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = []string{fzGroup, "h"}
		return r
	case kmsg.SASLHandshake:
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = "PLAIN"
		return r
	case kmsg.ApiVersions:
		r := kmsg.NewPtrApiVersionsRequest()
		r.ClientSoftwareName, r.ClientSoftwareVersion = "fuzz", "1.0"
		return r
	case kmsg.CreateTopics:
		r := kmsg.NewPtrCreateTopicsRequest()
		r.TimeoutMillis = 1000
		r.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "created", NumPartitions: 1, ReplicationFactor: 1,
			Configs: []kmsg.CreateTopicsRequestTopicConfig{{Name: "cleanup.policy", Value: str("compact")}}}}
		return r
	case kmsg.DeleteTopics:
		r := kmsg.NewPtrDeleteTopicsRequest()
		r.TimeoutMillis = 1000
		r.TopicNames = []string{"unknown"}
		r.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: str("unknown")}}
		return r
	case kmsg.DeleteRecords:
		r := kmsg.NewPtrDeleteRecordsRequest()
		r.TimeoutMillis = 1000
		r.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: fzTopic, Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 1}}}}
		return r
	case kmsg.InitProducerID:
		r := kmsg.NewPtrInitProducerIDRequest()
		r.TransactionTimeoutMillis = 1000
		return r
	case kmsg.OffsetForLeaderEpoch:
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.ReplicaID = -1
		r.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: fzTopic, Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{
			{Partition: 0, CurrentLeaderEpoch: -1, LeaderEpoch: 0}}}}
		return r
	case kmsg.DescribeConfigs:
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.IncludeSynonyms, r.IncludeDocumentation = true, true
		r.Resources = []kmsg.DescribeConfigsRequestResource{
			{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: fzTopic},
			{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "1", ConfigNames: []string{"log.retention.ms"}},
		}
		return r
	case kmsg.AlterConfigs:
		r := kmsg.NewPtrAlterConfigsRequest()
		r.ValidateOnly = true
		r.Resources = []kmsg.AlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: fzTopic,
			Configs: []kmsg.AlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: str("60000")}}}}
		return r
	case kmsg.SASLAuthenticate:
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SASLAuthBytes = []byte("\x00alice\x00alice-secret")
		return r
	case kmsg.CreatePartitions:
		r := kmsg.NewPtrCreatePartitionsRequest()
		r.TimeoutMillis, r.ValidateOnly = 1000, true
		r.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: fzTopic, Count: 3}}
		return r
	case kmsg.DeleteGroups:
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{fzGroup, "h"}
		return r
	case kmsg.IncrementalAlterConfigs:
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r.ValidateOnly = true
		r.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: fzTopic,
			Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Op: kmsg.IncrementalAlterConfigOpSet, Value: str("60000")}}}}
		return r
	case kmsg.OffsetDelete:
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = fzGroup
		r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: fzTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
		return r
	case kmsg.DescribeCluster:
		r := kmsg.NewPtrDescribeClusterRequest()
		r.EndpointType, r.IncludeFencedBrokers = 1, true
		return r
	case kmsg.DescribeLogDirs:
		r := kmsg.NewPtrDescribeLogDirsRequest()
		r.Topics = []kmsg.DescribeLogDirsRequestTopic{{Topic: fzTopic, Partitions: []int32{0, 1, 7}}, {Topic: "unknown", Partitions: []int32{0}}}
		return r
	case kmsg.DescribeQuorum:
		r := kmsg.NewPtrDescribeQuorumRequest()
		r.Topics = []kmsg.DescribeQuorumRequestTopic{{Topic: "__cluster_metadata", Partitions: []kmsg.DescribeQuorumRequestTopicPartition{{Partition: 0}}}}
		return r
	case kmsg.DescribeProducers:
		r := kmsg.NewPtrDescribeProducersRequest()
		r.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: fzTopic, Partitions: []int32{0, 1, 9}}, {Topic: "unknown", Partitions: []int32{0}}}
		return r
	case kmsg.AlterClientQuotas:
		r := kmsg.NewPtrAlterClientQuotasRequest()
		e := kmsg.NewAlterClientQuotasRequestEntry()
		e.Entity = []kmsg.AlterClientQuotasRequestEntryEntity{{Type: "client-id", Name: str("fuzz")}}
		e.Ops = []kmsg.AlterClientQuotasRequestEntryOp{{Key: "request_percentage", Value: 1e6}}
		r.Entries = append(r.Entries, e)
		return r
	case kmsg.DescribeClientQuotas:
		r := kmsg.NewPtrDescribeClientQuotasRequest()
		r.Components = []kmsg.DescribeClientQuotasRequestComponent{{EntityType: "user", MatchType: 2}}
		return r
	case kmsg.CreateACLs:
		r := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "fz-", kmsg.ACLResourcePatternTypePrefixed
		c.Principal, c.Host, c.Operation, c.PermissionType = "User:fuzz", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeDeny
		r.Creations = append(r.Creations, c)
		return r
	case kmsg.DescribeACLs:
		r := kmsg.NewPtrDescribeACLsRequest()
		r.ResourceType, r.ResourceName, r.ResourcePatternType = kmsg.ACLResourceTypeTopic, str(fzTopic), kmsg.ACLResourcePatternTypeMatch
		r.Operation, r.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		return r
	case kmsg.DeleteACLs:
		r := kmsg.NewPtrDeleteACLsRequest()
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourcePatternType, f.Principal = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, str("User:fuzz")
		f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		r.Filters = append(r.Filters, f)
		return r
	}
	return kmsg.RequestForKey(key) // the defaults of an API added later
}

// fzLimits bounds what a decoded request makes the server wait for or put
// on disk, so that one input costs milliseconds; changed says the request
// must be re-encoded. skip marks a request the harness does not send: one
// that creates more partitions than fzMaxNewPartitions. The server would
// create them (each takes files, index maps and descriptors), which a
// fuzzer repeating it would turn into an exhausted machine; that is a
// resource policy, not a decoding question.
func fzLimits(req kmsg.Request) (changed, skip bool) {
	const fzMaxNewPartitions = 16
	switch r := req.(type) {
	case *kmsg.FetchRequest:
		if r.MaxWaitMillis > 20 {
			r.MaxWaitMillis, changed = 20, true
		}
	case *kmsg.JoinGroupRequest:
		// The session timeout is bounded by the broker; v0 waits for the
		// session timeout instead.
		if r.RebalanceTimeoutMillis > 300 {
			r.RebalanceTimeoutMillis, changed = 300, true
		}
	case *kmsg.CreateTopicsRequest:
		if r.ValidateOnly {
			return false, false
		}
		n := 0
		for _, t := range r.Topics {
			n += max(int(t.NumPartitions), 1) + len(t.ReplicaAssignment)
		}
		skip = n > fzMaxNewPartitions
	case *kmsg.CreatePartitionsRequest:
		if r.ValidateOnly {
			return false, false
		}
		for _, t := range r.Topics {
			skip = skip || t.Count > fzMaxNewPartitions
		}
	}
	return changed, skip
}

// fzAPIServer is the API fuzzer's broker and server, rebuilt whenever an
// input changed the topics (created, deleted or grown one, or changed its
// settings), so that inputs do not pile up topics and each input meets the
// same starting state.
type fzAPIServer struct {
	tb      testing.TB
	alarm   fzAlarm
	root    string
	dir     string
	b       *spool.Broker
	s       *Server
	addr    string
	served  chan error
	topicID [16]byte
	state   string
	c       net.Conn
	corr    int32
}

func (h *fzAPIServer) start() {
	t := h.tb
	var err error
	h.dir, err = os.MkdirTemp(h.root, "broker")
	require.NoError(t, err)
	h.b, err = spool.Open(h.dir, fzBrokerOptions)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, h.b.CreateTopic(ctx, fzTopic, spool.TopicConfig{Partitions: 2}))
	d, err := h.b.DescribeTopic(fzTopic)
	require.NoError(t, err)
	h.topicID = d.ID
	for part := int32(0); part < 2; part++ {
		p, err := h.b.Partition(fzTopic, part)
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			_, err := p.Append(record.Record{Key: []byte{byte('a' + i)}, Value: fmt.Appendf(nil, "value %d", i)})
			require.NoError(t, err)
		}
	}
	// An authorizer, so that the ACL APIs store what they decode (in the
	// broker's directory, a file) and every handler's checks run: the
	// fuzzer's connection (User:ANONYMOUS) may do everything, by ACLs.
	store, _, err := acl.OpenFile(filepath.Join(h.dir, "acls"))
	require.NoError(t, err)
	var everything []acl.Binding
	for _, rt := range []acl.ResourceType{acl.ResourceTopic, acl.ResourceGroup, acl.ResourceTransactionalID} {
		everything = append(everything, acl.Binding{ResourceType: rt, Name: acl.Wildcard, Pattern: acl.PatternLiteral,
			Principal: "User:*", Host: acl.Wildcard, Operation: acl.OpAll, Permission: acl.Allow})
	}
	everything = append(everything, acl.Binding{ResourceType: acl.ResourceCluster, Name: acl.ClusterName, Pattern: acl.PatternLiteral,
		Principal: "User:*", Host: acl.Wildcard, Operation: acl.OpAll, Permission: acl.Allow})
	authz, err := acl.New(acl.Config{Bindings: everything, Store: store})
	require.NoError(t, err)
	qstore, _, err := quota.OpenFile(filepath.Join(h.dir, "quotas"))
	require.NoError(t, err)
	quotas, err := quota.New(quota.Config{Store: qstore})
	require.NoError(t, err)
	h.s, err = NewServer(h.b, Options{MaxRequestBytes: 1 << 20, IdleTimeout: fzTimeout, Logger: h.alarm.logger(), Authorizer: authz, Quotas: quotas})
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.addr = l.Addr().String()
	h.served = make(chan error, 1)
	go func() { h.served <- h.s.Serve(l) }()
	h.state = h.topics()
}

func (h *fzAPIServer) stop() {
	t := h.tb
	if h.c != nil {
		h.c.Close()
		h.c = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.s.Shutdown(ctx))
	require.ErrorIs(t, <-h.served, ErrServerClosed)
	require.NoError(t, h.b.Close())
	require.NoError(t, os.RemoveAll(h.dir))
}

// topics describes the topics an input may change: names, partition
// counts and own settings. __consumer_offsets, created by the first group
// request, is left out.
func (h *fzAPIServer) topics() string {
	var sb strings.Builder
	for _, name := range h.b.Topics() {
		if strings.HasPrefix(name, "__") {
			continue
		}
		own, eff, err := h.b.TopicSettings(name)
		fmt.Fprintf(&sb, "%s %d %+v %v;", name, eff.Partitions, own, err)
	}
	return sb.String()
}

func (h *fzAPIServer) conn() net.Conn {
	if h.c == nil {
		h.c = fzDial(h.tb, h.addr)
	}
	return h.c
}

func (h *fzAPIServer) dropConn() {
	if h.c != nil {
		h.c.Close()
		h.c = nil
	}
}

// FuzzAPIRequest sends fuzzed bytes as the body of every API the server
// registers, at every version it advertises, correctly framed, followed by
// an ApiVersions request. A body that does not decode closes the connection
// unanswered (the server decodes with kmsg as the harness does). One that
// does is answered with a response that decodes at that version (acks=0
// produce: no response), or the connection closes; then the ApiVersions
// request is answered on the same connection, or it is closed. Never a
// panic, never a hang.
func FuzzAPIRequest(f *testing.F) {
	var keys []int16
	for k := range handlers {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	h := &fzAPIServer{tb: f, root: f.TempDir()}
	h.start()
	f.Cleanup(h.stop)

	for i, key := range keys {
		hd := handlers[key]
		for v := hd.min; v <= hd.max; v++ {
			req := fzSeed(f, key, h.topicID)
			req.SetVersion(v)
			f.Add(uint8(i), uint8(v-hd.min), req.AppendTo(nil))
		}
		f.Add(uint8(i), uint8(0), []byte{})
		f.Add(uint8(i), uint8(hd.max-hd.min), []byte{0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff})
	}

	f.Fuzz(func(t *testing.T, k, v uint8, body []byte) {
		h.tb = t
		defer func() { h.tb = f }()
		key := keys[int(k)%len(keys)]
		hd := handlers[key]
		version := hd.min + int16(int(v)%int(hd.max-hd.min+1))
		req := kmsg.RequestForKey(key)
		req.SetVersion(version)
		decodes := req.ReadFrom(body) == nil
		if decodes {
			changed, skip := fzLimits(req)
			if skip {
				return
			}
			if changed {
				body = req.AppendTo(nil)
			}
		}
		name := fmt.Sprintf("%s v%d", kmsg.NameForKey(key), version)

		c := h.conn()
		corr := h.corr + 1
		h.corr += 2
		out := slices.Concat(fzFrame(key, version, corr, "fuzz", body),
			fzFrame(kmsg.ApiVersions.Int16(), 0, corr+1, "fuzz", nil))
		c.SetDeadline(time.Now().Add(fzTimeout))
		if _, err := c.Write(out); err != nil {
			// The previous input's connection closed under us: retry
			// once on a new one.
			h.dropConn()
			c = h.conn()
			c.SetDeadline(time.Now().Add(fzTimeout))
			_, err = c.Write(out)
			require.NoError(t, err)
		}

		frame, err := fzReadFrame(c)
		switch {
		case err != nil && !fzClosed(err):
			t.Fatalf("%s: no answer and no close within %s: %v", name, fzTimeout, err)
		case err != nil:
			h.dropConn() // refused or failed: closed
		case !decodes:
			t.Fatalf("%s: a body that does not decode was answered", name)
		default:
			acks0 := false
			if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
				acks0 = true
			}
			gotCorr := int32(binary.BigEndian.Uint32(frame))
			if gotCorr == corr {
				_, _, err := fzDecode(frame, key, version)
				require.NoError(t, err, name)
				frame, err = fzReadFrame(c)
				if err != nil && !fzClosed(err) {
					t.Fatalf("%s: ApiVersions after it: no answer and no close: %v", name, err)
				}
			} else if !acks0 {
				t.Fatalf("%s: response with correlation id %d, want %d", name, gotCorr, corr)
			}
			if err != nil {
				h.dropConn() // closed after answering, as SASL errors do
				break
			}
			gotCorr, resp, err := fzDecode(frame, kmsg.ApiVersions.Int16(), 0)
			require.NoError(t, err, name)
			require.Equal(t, corr+1, gotCorr, "%s: the ApiVersions after it", name)
			require.Zero(t, resp.(*kmsg.ApiVersionsResponse).ErrorCode)
		}

		h.alarm.check(t)
		if h.topics() != h.state {
			h.stop()
			h.start()
		}
	})
}
