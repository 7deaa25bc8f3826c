package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch v0 to v12.
//
// Versions 0-3 return message format v0 (Fetch v0-v1) or v1 (v2-v3):
// the batches read are down-converted to an uncompressed message set
// (downConvert), as Kafka's brokers did before 4.0 - in memory, not zero
// copy, and without what the old formats cannot carry (headers; v0 has no
// timestamps). Every client that speaks RecordBatch v2 uses v4+, which go
// from the segment files to the socket untouched.
//
// v12 is flexible: its RecordBatches length is a compact (varint) length,
// which the zero-copy writer fills in too. v13 names topics by id
// (KIP-516): an unknown id is UNKNOWN_TOPIC_ID. v14 changes nothing the
// server sees (KIP-405). v15 carries a follower's id and broker epoch in
// ReplicaState (KIP-903) instead of ReplicaID. v16 (KIP-951 node
// endpoints) is not served.
func init() { registerRaw(kmsg.Fetch, 0, 15, serveFetch) }

// fetchTopicNames names the topics of a v13+ request, which gives ids:
// each topic's name is filled in where the broker has its id; unknown[i]
// is set for a topic it has not.
func (c *conn) fetchTopicNames(body *kmsg.FetchRequest, version int16) (unknown []bool) {
	unknown = make([]bool, len(body.Topics))
	if version < 13 {
		return unknown
	}
	for i := range body.Topics {
		rt := &body.Topics[i]
		name, ok := c.s.b.TopicName(spool.TopicID(rt.TopicID))
		rt.Topic, unknown[i] = name, !ok
	}
	return unknown
}

const (

	// fetchMaxBytes caps a fetch response whatever the request asks:
	// Kafka's broker setting fetch.max.bytes (default 55 MiB). The first
	// batch is sent whole even past it (KIP-74).
	fetchMaxBytes = 55 << 20
)

// skipFetchVerify turns off the CRC-32C check of the batches a fetch sends,
// for benchmarks to measure what the check costs. Never set otherwise.
var skipFetchVerify bool

// fetchSendfileBytes counts the record bytes sent with sendfile(2), for
// tests to see that the zero-copy path ran; fetchSpansHeld counts the
// segment references fetches hold, for tests to see every one released.
var fetchSendfileBytes, fetchSpansHeld atomic.Int64

// releaseSpan releases a span a fetch took.
func releaseSpan(sp *log.Span) {
	if sp.Len() > 0 {
		fetchSpansHeld.Add(-1)
	}
	sp.Release()
}

// fetchPart is one partition of a fetch request: where it reads, and what
// its last read found.
type fetchPart struct {
	req  *kmsg.FetchRequestTopicPartition
	p    *partition.Partition // nil when code says why not
	code int16                // an error found before reading (unknown partition, fenced epoch)

	// Set by a read.
	err                int16
	hw, lso, logStart  int64
	span               log.Span
	aborted            []partition.AbortedTxn // read_committed: the aborted transactions the span needs
	divergingEpoch     int32
	divergingEndOffset int64
}

func serveFetch(c *conn, req *request) (responseWriter, error) {
	start := time.Now()
	body := req.body.(*kmsg.FetchRequest)
	resp := body.ResponseKind().(*kmsg.FetchResponse)
	resp.SetVersion(req.version)

	if c.isReplicaFetch(body, req.version) {
		// A follower keeps no fetch session: it fetches a partition at
		// a time. An incremental fetch names a session that cannot exist.
		if req.version >= 7 && body.SessionEpoch > 0 {
			resp.ErrorCode = errFetchSessionIDNotFound
			return encoded(resp), nil
		}
		unknown := c.fetchTopicNames(body, req.version)
		if !c.canCluster(acl.OpClusterAction) {
			setErrorCodes(reflect.ValueOf(resp), errClusterAuthorizationFailed)
			return encoded(resp), nil
		}
		return c.serveReplicaFetch(req, body, unknown)
	}
	// Fetch sessions (KIP-227, fetch_session.go): an incremental fetch
	// becomes a fetch of every partition of its session here, and its
	// response is cut to the partitions with news at the end.
	session, code := c.s.fetchSessions.begin(body, req.version, start)
	if code != errNone {
		resp.ErrorCode = code
		return encoded(resp), nil
	}
	defer session.release()
	unknown := c.fetchTopicNames(body, req.version)

	parts := make([]fetchPart, 0, fetchPartitions(body))
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			fp := fetchPart{req: rp}
			if unknown[ti] {
				fp.code = errUnknownTopicID
				parts = append(parts, fp)
				continue
			}
			if !c.can(acl.OpRead, acl.ResourceTopic, rt.Topic) {
				fp.code = errTopicAuthorizationFailed // decided before whether it exists
				parts = append(parts, fp)
				continue
			}
			p, err := c.s.b.LeaderPartition(rt.Topic, rp.Partition, -1)
			switch {
			case err != nil:
				fp.code = fetchErrorCode(err)
			case req.version >= 9:
				fp.code = checkLeaderEpoch(p, rp.CurrentLeaderEpoch)
			}
			if fp.code == errNone {
				fp.p = p
			}
			parts = append(parts, fp)
		}
	}
	handedOff := false
	defer func() {
		if !handedOff {
			releaseParts(parts)
		}
	}()

	waited, err := longPoll(c, body, req.version, parts)
	req.waited(waited)
	if err != nil {
		return nil, err
	}
	// request_percentage: the time serving the fetch, not waiting for data.
	c.chargeRequestTime(req, time.Since(start)-waited, resp)
	// consumer_byte_rate: a response that would take the consumer over
	// its quota goes out empty, with the wait.
	var read int64
	for i := range parts {
		read += parts[i].span.Len()
	}
	wait, send := c.fetchQuota(req, read)
	if !send {
		for i := range parts {
			releaseSpan(&parts[i].span)
			parts[i].aborted = nil
		}
	}
	c.throttle(wait, resp)

	// The response, with every partition's RecordBatches empty: the
	// record bytes are spliced in as it is written.
	resp.Topics = make([]kmsg.FetchResponseTopic, len(body.Topics))
	i := 0
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		t := &resp.Topics[ti]
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		t.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for pi := range rt.Partitions {
			fp := &parts[i]
			i++
			rp := &t.Partitions[pi]
			rp.Default()
			rp.Partition = fp.req.Partition
			rp.PreferredReadReplica = -1
			rp.RecordBatches = []byte{} // never null: librdkafka rejects that
			rp.ErrorCode = fp.err
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = fp.hw, fp.lso, fp.logStart
			if body.IsolationLevel == 1 {
				rp.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(fp.aborted))
				for _, a := range fp.aborted {
					rp.AbortedTransactions = append(rp.AbortedTransactions,
						kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
				}
			}
			rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = fp.divergingEpoch, fp.divergingEndOffset
			if rp.ErrorCode != 0 {
				c.s.b.RecordFetch(rt.Topic, 0, kerr.ErrorForCode(rp.ErrorCode))
			} else {
				c.s.b.RecordFetch(rt.Topic, fp.span.Len(), nil)
			}
			if req.version < 4 && fp.span.Len() > 0 {
				// No more than the batches read took (readParts kept those
				// within the request's limits), at least one message.
				limit := min(int64(fp.req.PartitionMaxBytes), fp.span.Len())
				set, err := downConvert(&fp.span, legacyMagic(req.version), fp.req.FetchOffset, limit, fp.p.Log().MaxUncompressedBytes())
				releaseSpan(&fp.span)
				if err != nil {
					rp.ErrorCode, rp.HighWatermark = fetchErrorCode(err), -1
				} else {
					rp.RecordBatches = set
				}
			}
		}
	}
	if req.version < 4 {
		return encoded(resp), nil
	}
	parts = session.finish(resp, parts, time.Now())
	fr, err := newFetchResponse(c, resp, parts)
	if err != nil {
		return nil, err
	}
	handedOff = true
	return fr, nil
}

func fetchPartitions(body *kmsg.FetchRequest) int {
	n := 0
	for i := range body.Topics {
		n += len(body.Topics[i].Partitions)
	}
	return n
}

// fetchErrorCode maps an error reading a partition to a code a Fetch or
// ListOffsets partition may carry. A closed log is a topic deleted under
// the request (or a broker closing): the client refreshes its metadata.
//
// A damaged batch (errors.Is log.ErrCorrupt: its CRC-32C or framing does not
// check out) is CORRUPT_MESSAGE, which is what Kafka's own broker answers
// when its log read finds a corrupt batch, and the code that makes clients
// stop rather than spin or hide it:
//
//   - the Java consumer throws "Encountered corrupt message when fetching
//     offset N" from poll: the application sees it and may seek past;
//   - librdkafka (kcat) hands the error to the application as a consumer
//     error and backs the partition off (fetch.error.backoff.ms);
//   - sarama sends it to the Errors channel and redispatches after
//     Consumer.Retry.Backoff;
//   - franz-go counts it retriable: it drops the partition from the
//     response (KeepRetryableFetchErrors surfaces it), refreshes metadata
//     and backs off (250ms growing to 5s) - bounded, where a damaged batch
//     sent as data made it refetch at once, thousands of times a second.
//
// KAFKA_STORAGE_ERROR (56) was the alternative: Java, librdkafka and
// franz-go all treat it as "this replica's disk is gone, find the new
// leader" and retry silently, and on a single node no new leader comes.
func fetchErrorCode(err error) int16 {
	if errors.Is(err, log.ErrClosed) || errors.Is(err, spool.ErrClosed) {
		return errUnknownTopicOrPartition
	}
	return errorCode(err)
}

func releaseParts(parts []fetchPart) {
	for i := range parts {
		releaseSpan(&parts[i].span)
	}
}

// longPoll reads every partition, waiting until MinBytes are there, MaxWait
// has passed, or something needs an answer at once (an error, a diverging
// epoch), as Kafka's DelayedFetch does. Waiting holds no segment: the
// partitions' Changed channels wake it and it reads again.
func longPoll(c *conn, body *kmsg.FetchRequest, version int16, parts []fetchPart) (waited time.Duration, err error) {
	maxWait := time.Duration(max(body.MaxWaitMillis, 0)) * time.Millisecond
	deadline := time.Now().Add(maxWait)
	var (
		armed bool
		chans []<-chan struct{}
		timer *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if armed {
			// Take the channels before reading, or a change between the
			// read and the wait is missed.
			chans = append(chans[:0], c.stop) // a shutdown ends the wait
			for i := range parts {
				if p := parts[i].p; p != nil {
					chans = append(chans, p.Changed())
				}
			}
		}
		n, now := readParts(body, version, parts)
		if now || n >= int64(body.MinBytes) || maxWait <= 0 || len(parts) == 0 ||
			c.stopping.Load() || !time.Now().Before(deadline) {
			return waited, nil
		}
		releaseParts(parts)
		if !armed {
			armed = true // read again with the channels taken
			continue
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		at := time.Now()
		waitAny(chans, timer.C, nil)
		waited += time.Since(at)
	}
}

// waitAny waits for one of chans to close, or for timeout or tick.
func waitAny(chans []<-chan struct{}, timeout, tick <-chan time.Time) {
	if len(chans) == 1 {
		select {
		case <-chans[0]:
		case <-timeout:
		case <-tick:
		}
		return
	}
	cases := make([]reflect.SelectCase, 0, len(chans)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tick)})
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	reflect.Select(cases)
}

// legacyMagic is the message format of a Fetch version below 4.
func legacyMagic(version int16) int8 {
	if version >= 2 {
		return 1
	}
	return 0
}

// downConvert reads a span of RecordBatch v2 and returns its records from
// offset from on as an uncompressed message set of the given magic (0 or
// 1): whole messages only, no more than maxBytes of them but always the
// first. Control batches are left out; headers, which the old formats
// cannot carry, are dropped. Batches decompress up to maxUncompressed (the
// log's own limit).
func downConvert(sp *log.Span, magic int8, from, maxBytes int64, maxUncompressed int) ([]byte, error) {
	buf := make([]byte, sp.Len())
	if _, err := sp.ReadAt(buf, 0); err != nil {
		return nil, err
	}
	out := []byte{}
	it := record.Iterator{MaxUncompressedBytes: maxUncompressed}
	for len(buf) > 0 {
		b, n, err := record.ParseBatch(buf)
		if err != nil {
			return nil, err
		}
		buf = buf[n:]
		if b.IsControl() || b.LastOffset() < from {
			continue
		}
		it.Reset(b)
		for it.Next() {
			r := it.Record()
			if r.Offset < from {
				continue
			}
			if len(out) > 0 && int64(len(out)+record.MessageSetSize(magic, r)) > maxBytes {
				return out, nil
			}
			out = record.AppendMessage(out, magic, r.Offset, r, b.LogAppendTime())
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readParts locates each partition's batches, as Kafka's readFromLog:
// at most PartitionMaxBytes from a partition and MaxBytes in all, except
// that the first batch of the first partition with data is whole whatever
// the limits (KIP-74), so a consumer always makes progress; a later
// partition whose first batch does not fit gets nothing. It returns the
// bytes found and whether the fetch must be answered now (an error or a
// diverging epoch).
func readParts(body *kmsg.FetchRequest, version int16, parts []fetchPart) (int64, bool) {
	limit := min(int64(max(body.MaxBytes, 0)), fetchMaxBytes)
	minOne := true
	now := false
	var total int64
	for i := range parts {
		fp := &parts[i]
		releaseSpan(&fp.span)
		fp.aborted = nil
		fp.err, fp.hw, fp.lso, fp.logStart = fp.code, -1, -1, -1
		fp.divergingEpoch, fp.divergingEndOffset = -1, -1
		if fp.p == nil {
			now = true
			continue
		}
		p, offset := fp.p, fp.req.FetchOffset
		hw, start, end := p.HighWatermark(), p.StartOffset(), p.EndOffset()
		if version >= 12 && fp.req.LastFetchedEpoch >= 0 {
			// KIP-595: a follower whose last fetched epoch the log does
			// not agree with gets the point where they diverge, and no
			// records - checked first, as Kafka does, for a follower
			// ahead of the log may be exactly the one that diverged.
			epoch, endOffset := endOffsetForEpoch(p, fp.req.LastFetchedEpoch)
			if epoch < 0 || endOffset < 0 || offset < start {
				fp.err = errOffsetOutOfRange
				now = true
				continue
			}
			if epoch < fp.req.LastFetchedEpoch || endOffset < offset {
				fp.hw, fp.lso, fp.logStart = hw, hw, start
				fp.divergingEpoch, fp.divergingEndOffset = epoch, endOffset
				now = true
				continue
			}
		}
		// Kafka's range is [log start, log end]: an offset written but not
		// yet committed is read as nothing, not as an error.
		if offset < start || offset > end {
			fp.err = errOffsetOutOfRange
			now = true
			continue
		}
		// read_committed (isolation level 1) reads only below the last
		// stable offset: every transaction there is decided, and the
		// response lists the aborted ones so that the client drops
		// their batches. read_uncommitted reads to the high watermark.
		// Both are told the LSO, as Kafka does.
		lso, lerr := p.StableOffset()
		if lerr != nil && body.IsolationLevel == 1 {
			// The transactions cannot be known (a damaged batch): say so
			// rather than answer an empty partition forever.
			fp.err, fp.hw, fp.lso, fp.logStart = fetchErrorCode(lerr), -1, -1, -1
			now = true
			continue
		}
		fp.hw, fp.lso, fp.logStart = hw, lso, start
		readTo := hw
		if body.IsolationLevel == 1 {
			readTo = lso
		}
		if offset >= readTo {
			continue
		}
		budget := min(int64(max(fp.req.PartitionMaxBytes, 0)), limit)
		if budget == 0 && !minOne {
			continue
		}
		sp, err := p.Log().Span(offset, int(budget), readTo)
		if err == nil && !skipFetchVerify {
			// The bytes go out unseen (sendfile), and a client that does
			// not check CRCs would take damage for data: check them
			// first. A damage after good batches cuts the span to them;
			// a damaged first batch is the partition's error.
			if verr := sp.Verify(); sp.Len() == 0 {
				err = verr
			}
		}
		if err != nil {
			fp.err, fp.hw, fp.lso, fp.logStart = fetchErrorCode(err), -1, -1, -1
			now = true
			continue
		}
		if sp.Len() > 0 {
			fetchSpansHeld.Add(1)
		}
		if sp.Len() > budget && !minOne {
			releaseSpan(&sp)
			continue
		}
		if sp.Len() > 0 && body.IsolationLevel == 1 {
			aborted, err := p.AbortedTransactions(offset, sp.UpperBound())
			if err != nil {
				releaseSpan(&sp)
				fp.err, fp.hw, fp.lso, fp.logStart = fetchErrorCode(err), -1, -1, -1
				now = true
				continue
			}
			fp.aborted = aborted
		}
		if sp.Len() > 0 {
			minOne = false
			limit = max(limit-sp.Len(), 0)
			total += sp.Len()
		}
		fp.span = sp
	}
	return total, now
}

// fetchResponse is a Fetch response whose record bytes go from the segment
// files to the socket: the envelope is kmsg's encoding with every
// RecordBatches empty, and each partition's batches are spliced in at its
// placeholder - with sendfile(2) on a TCP connection, so they never pass
// through user space.
type fetchResponse struct {
	buf      *[]byte // pooled; the envelope is *buf
	holes    []fetchHole
	n        int // the body's size
	flexible bool
	stop     func() bool // stops the release on connection close
	released atomic.Bool
}

// fetchHole is where a partition's record bytes go: at is the position of
// its empty RecordBatches in the envelope (a 4-byte length, or a 1-byte
// compact length in flexible versions).
type fetchHole struct {
	at   int
	span log.Span
}

var fetchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func newFetchResponse(c *conn, resp *kmsg.FetchResponse, parts []fetchPart) (*fetchResponse, error) {
	buf := fetchBufs.Get().(*[]byte)
	*buf = resp.AppendTo((*buf)[:0])
	fr := &fetchResponse{buf: buf, flexible: resp.IsFlexible()}
	i := 0
	err := recordsSlots(*buf, resp.Version, func(at int) error {
		if i >= len(parts) {
			return errors.New("more partitions than requested")
		}
		if parts[i].span.Len() > 0 {
			fr.holes = append(fr.holes, fetchHole{at: at, span: parts[i].span})
			parts[i].span = log.Span{} // the response owns it now
		}
		i++
		return nil
	})
	if err == nil && i != len(parts) {
		err = fmt.Errorf("%d partitions in the response, %d requested", i, len(parts))
	}
	if err != nil {
		fr.release()
		return nil, fmt.Errorf("transport: fetch response envelope: %w", err)
	}
	fr.n = len(*buf)
	for i := range fr.holes {
		l := fr.holes[i].span.Len()
		if fr.flexible {
			fr.n += uvarintLen(uint64(l)+1) - 1
		}
		fr.n += int(l)
	}
	// If the connection goes before the response is written (writeBody is
	// then never called), the segments are let go with it.
	fr.stop = context.AfterFunc(c.ctx, fr.release)
	return fr, nil
}

func (r *fetchResponse) release() {
	if r.released.Swap(true) {
		return
	}
	for i := range r.holes {
		releaseSpan(&r.holes[i].span)
	}
	if cap(*r.buf) <= 1<<20 {
		fetchBufs.Put(r.buf)
	}
	r.buf = nil
}

func (r *fetchResponse) placeholder() int {
	if r.flexible {
		return 1
	}
	return 4
}

func (r *fetchResponse) size(bool) int { return r.n }

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (r *fetchResponse) writeBody(c *conn) error {
	if !r.stop() {
		return errors.New("transport: connection closed before the fetch response")
	}
	defer r.release()
	env := *r.buf
	prev := 0
	var lenBuf [binary.MaxVarintLen64]byte
	for i := range r.holes {
		h := &r.holes[i]
		l := h.span.Len()
		var enc []byte
		if r.flexible {
			enc = binary.AppendUvarint(lenBuf[:0], uint64(l)+1)
		} else {
			enc = binary.BigEndian.AppendUint32(lenBuf[:0], uint32(l))
		}
		if _, err := c.out().Write(env[prev:h.at]); err != nil {
			return err
		}
		if _, err := c.out().Write(enc); err != nil {
			return err
		}
		prev = h.at + r.placeholder()
		if err := writeSpan(c, &h.span); err != nil {
			return err
		}
	}
	_, err := c.out().Write(env[prev:])
	return err
}

// writeSpan sends a span's bytes: from the file to a TCP socket with
// sendfile, otherwise (tests over net.Pipe, a system without sendfile)
// through the buffered writer.
func writeSpan(c *conn, sp *log.Span) error {
	var sent int64
	if tc, ok := c.nc.(*net.TCPConn); ok {
		if f := sp.File(); f != nil {
			if err := c.out().Flush(); err != nil {
				return err
			}
			var err error
			sent, err = sendfile(tc, f, sp.Position(), sp.Len())
			if err == nil || !sendfileUnsupported(err) {
				return err
			}
		}
	}
	n, err := io.Copy(c.out(), io.NewSectionReader(sp, sent, sp.Len()-sent))
	if err == nil && sent+n != sp.Len() {
		err = fmt.Errorf("transport: sent %d of %d record bytes", sent+n, sp.Len())
	}
	return err
}

// sendfileUnsupported reports an error that says sendfile cannot do this
// (no such call, or not for this file or socket), not that it failed: the
// bytes are then copied instead, as Go's own io.Copy falls back.
func sendfileUnsupported(err error) bool {
	return errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTSUP)
}

// sendfile sends n bytes of f from pos to the socket with sendfile(2) at
// an explicit file offset, and returns how many it sent. The file's own
// position is shared with every other reader of the segment, so io.Copy
// from the *os.File (which sends from, and moves, that position) would
// race with them. The socket's write deadline applies; a file shorter than
// expected (truncated under us) is an error, as the frame's length is
// already out.
func sendfile(tc *net.TCPConn, f *os.File, pos, n int64) (int64, error) {
	dst, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	src, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		sent int64
		serr error
	)
	cerr := src.Control(func(sfd uintptr) {
		werr := dst.Write(func(dfd uintptr) bool {
			for sent < n {
				off := pos + sent // some systems move it, some do not: keep our own
				m, err := syscall.Sendfile(int(dfd), int(sfd), &off, int(min(n-sent, 1<<30)))
				if m > 0 {
					sent += int64(m)
					fetchSendfileBytes.Add(int64(m))
				}
				switch {
				case err == syscall.EAGAIN:
					return false // wait until the socket can take more
				case err == syscall.EINTR:
				case err != nil:
					serr = os.NewSyscallError("sendfile", err)
					return true
				case m <= 0:
					serr = fmt.Errorf("transport: sendfile: %w: file ends %d bytes early", io.ErrUnexpectedEOF, n-sent)
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if serr != nil {
		return sent, serr
	}
	return sent, cerr
}

// recordsSlots walks a Fetch response body (v4-v12) that kmsg encoded
// with every RecordBatches empty and calls fn with the position of each
// partition's RecordBatches, in order. It checks the structure as it goes;
// any surprise is an error (the envelope is ours, so that is a bug).
func recordsSlots(b []byte, version int16, fn func(at int) error) error {
	r := envReader{b: b}
	flexible := version >= 12
	r.skip(4) // ThrottleMillis
	if version >= 7 {
		r.skip(2 + 4) // ErrorCode, SessionID
	}
	topics := r.arrayLen(flexible)
	for t := 0; t < topics && r.err == nil; t++ {
		if version >= 13 {
			r.skip(16) // TopicID
		} else {
			r.skipString(flexible)
		}
		parts := r.arrayLen(flexible)
		for p := 0; p < parts && r.err == nil; p++ {
			r.skip(4 + 2 + 8 + 8) // Partition, ErrorCode, HighWatermark, LastStableOffset
			if version >= 5 {
				r.skip(8) // LogStartOffset
			}
			aborted := r.arrayLen(flexible)
			for a := 0; a < aborted && r.err == nil; a++ {
				r.skip(16)
				if flexible {
					r.skipTags()
				}
			}
			if version >= 11 {
				r.skip(4) // PreferredReadReplica
			}
			at := r.p
			if flexible {
				if r.uvarint() != 1 {
					r.fail("records not empty")
				}
			} else if r.int32() != 0 {
				r.fail("records not empty")
			}
			if flexible {
				r.skipTags()
			}
			if r.err == nil {
				if err := fn(at); err != nil {
					return err
				}
			}
		}
		if flexible {
			r.skipTags()
		}
	}
	if flexible {
		r.skipTags()
	}
	if r.err == nil && r.p != len(b) {
		r.fail("trailing bytes")
	}
	return r.err
}

// envReader reads the few things recordsSlots needs to skip.
type envReader struct {
	b   []byte
	p   int
	err error
}

func (r *envReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s at %d", what, r.p)
	}
}

func (r *envReader) skip(n int) {
	if r.err != nil {
		return
	}
	if n < 0 || n > len(r.b)-r.p {
		r.fail("truncated")
		return
	}
	r.p += n
}

func (r *envReader) int32() int32 {
	at := r.p
	r.skip(4)
	if r.err != nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(r.b[at:]))
}

func (r *envReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.p:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.p += n
	return v
}

// arrayLen reads an array length; a null array is empty.
func (r *envReader) arrayLen(flexible bool) int {
	var n int64
	if flexible {
		n = int64(r.uvarint()) - 1
	} else {
		n = int64(r.int32())
	}
	if n > int64(len(r.b)) {
		r.fail("bad array length")
		return 0
	}
	return int(max(n, 0))
}

func (r *envReader) skipString(flexible bool) {
	if flexible {
		n := r.uvarint()
		if n > 0 {
			if n-1 > uint64(len(r.b)) {
				r.fail("bad string length")
				return
			}
			r.skip(int(n - 1))
		}
		return
	}
	if r.err != nil {
		return
	}
	at := r.p
	r.skip(2)
	if r.err == nil {
		if n := int16(binary.BigEndian.Uint16(r.b[at:])); n > 0 {
			r.skip(int(n))
		}
	}
}

func (r *envReader) skipTags() {
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail("bad tag size")
			return
		}
		r.skip(int(size))
	}
}
