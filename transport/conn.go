package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool/internal/measure"
)

// conn is one client connection, served by one goroutine, one request at a
// time.
type conn struct {
	s      *Server
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer // while a response is written: see out
	remote string

	// held is the request memory (Server.memory) reserved for the frame
	// being read or served; releaseFrame gives it back.
	held int64

	ctx    context.Context // cancelled when the connection goes
	cancel context.CancelFunc

	ln            *listener              // the listener it came in on: its security, its advertised address
	controller    bool                   // on the controller listener: its APIs, never forwarded
	principal     string                 // who the client is: "User:name" (SASL, a TLS client certificate), else User:ANONYMOUS
	shown         atomic.Pointer[string] // principal, for Server.Connections
	authenticated bool                   // SASL done (or not required)
	saslMech      string                 // mechanism chosen in SaslHandshake
	saslV0        bool                   // SaslHandshake v0: raw tokens follow
	scram         *scramServer

	stopping   atomic.Bool
	stop       chan struct{} // closed with stopping: wakes requests that wait
	stopOnce   sync.Once
	busy       sync.Mutex // held while a request is served
	closeAfter bool       // close once the current response is written

	// shares are the connection's share sessions (share.go); only the
	// request being served, and serve's exit, touch them.
	shares map[shareSessionKey]*shareSession

	// throttledUntil is when the connection may be read again after a
	// response that told the client to wait (quotas, KIP-219): it is
	// muted until then.
	throttledUntil time.Time
}

// request is a decoded request with its header.
type request struct {
	key, version  int16
	correlationID int32
	clientID      string
	size          int // the frame's bytes, size prefix included (producer_byte_rate)
	body          kmsg.Request
	// flexible: the response header has a tag buffer (a flexible version,
	// other than ApiVersions).
	flexible bool
	times    requestTimes // its phases, for APIStats (metrics.go)
}

// readBufferSize is each connection's read buffer: enough for the header
// and body of most requests in one read, small enough that a thousand
// idle connections cost little. A larger body is read straight into its
// frame, past the buffer.
const readBufferSize = 8 << 10

// writers are the buffered writers responses go out through, shared by
// every connection: one is held only while a response is written, so an
// idle connection holds none.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// newConn makes a connection of listener ln (nil: the server-wide
// options').
func newConn(s *Server, nc net.Conn, ln *listener) *conn {
	if ln == nil {
		ln = &listener{Listener: Listener{TLS: s.opts.TLS, SASL: s.opts.SASL != nil,
			AdvertisedHost: s.opts.AdvertisedHost, AdvertisedPort: s.opts.AdvertisedPort}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		s: s, nc: nc, remote: nc.RemoteAddr().String(), ln: ln,
		r:      bufio.NewReaderSize(nc, readBufferSize),
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
	}
	c.authenticated = !ln.SASL
	c.setPrincipal(anonymous)
	return c
}

// stopAfterRequest makes the connection close once the request it is
// serving (if any) is answered.
func (c *conn) stopAfterRequest() {
	c.stopping.Store(true)
	c.stopOnce.Do(func() { close(c.stop) })
	// Wake a read that waits for the next request; a request being served
	// holds busy and is left to finish.
	if c.busy.TryLock() {
		c.nc.SetReadDeadline(time.Now())
		c.busy.Unlock()
	}
}

func (c *conn) serve() {
	defer func() {
		c.releaseFrame()
		c.cancel()
		c.nc.Close()
		c.busy.Lock() // a request still being served finishes first
		c.releaseShares()
		c.busy.Unlock()
	}()
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	for !c.stopping.Load() {
		if wait := time.Until(c.throttledUntil); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.stop:
				t.Stop()
				return
			}
		}
		c.nc.SetReadDeadline(time.Now().Add(c.s.opts.IdleTimeout))
		frame, err := c.readFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !c.stopping.Load() && !isTimeout(err) {
				c.s.logger.Debug("closing connection", "remote", c.remote, "err", err)
			}
			return
		}
		c.busy.Lock()
		ok := c.handle(frame)
		c.busy.Unlock()
		c.releaseFrame()
		if !ok {
			return
		}
	}
}

// setPrincipal records who the client is.
func (c *conn) setPrincipal(p string) {
	c.principal = p
	c.shown.Store(&p)
}

// anonymous is the principal of a connection that did not authenticate,
// Kafka's.
const anonymous = "User:ANONYMOUS"

// handshake runs the TLS handshake within RequestReadTimeout and takes
// the client certificate's subject, if any, as the principal. False: the
// connection is to be closed.
func (c *conn) handshake(tc *tls.Conn) bool {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.s.opts.RequestReadTimeout, c.s.opts.IdleTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.s.tlsFailures.Add(1)
		if !c.stopping.Load() {
			c.s.logger.Debug("TLS handshake failed", "remote", c.remote, "err", err)
		}
		return false
	}
	p, err := c.s.tlsPrincipal(tc)
	if err != nil {
		c.s.tlsFailures.Add(1)
		c.s.logger.Warn("TLS client refused", "remote", c.remote, "err", err)
		return false
	}
	if p != "" {
		c.setPrincipal(p)
	}
	c.s.logger.Debug("TLS connection", "remote", c.remote, "principal", c.principal,
		"version", tls.VersionName(tc.ConnectionState().Version), "cipher", tls.CipherSuiteName(tc.ConnectionState().CipherSuite))
	return true
}

// tlsPrincipal is the principal a TLS connection's client certificate
// names ("" without one). Only a certificate the handshake verified names
// the client: with ClientAuth RequestClientCert or RequireAnyClientCert,
// Go takes any certificate unchecked. An error: the mapping rules match
// none of the certificate's name.
func (s *Server) tlsPrincipal(tc *tls.Conn) (string, error) {
	chains := tc.ConnectionState().VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", nil
	}
	name, err := s.principals.apply(distinguishedName(chains[0][0]))
	if err != nil {
		return "", err
	}
	return "User:" + name, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readFrame reads one size-prefixed request frame.
func (c *conn) readFrame() ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(c.r, sz[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(sz[:]))
	limit := c.s.opts.MaxRequestBytes
	if !c.authenticated {
		limit = c.s.opts.MaxPreAuthBytes
	}
	if size < 8 || int(size) > limit {
		return nil, fmt.Errorf("transport: frame of %d bytes (limit %d)", size, limit)
	}
	return c.readBody(int(size))
}

// readBody reads the n bytes of a frame (or SASL token) whose size prefix
// was just read. The bytes are reserved in the server's request memory
// first, waiting for room if need be, and stay reserved until
// releaseFrame; the whole body must arrive within the request read
// timeout of the prefix, that wait included, or the connection is closed.
func (c *conn) readBody(n int) ([]byte, error) {
	deadline := time.Now().Add(c.s.opts.requestTimeout())
	capacity := c.s.memory.frameCap(n)
	err := c.s.memory.acquire(int64(capacity), deadline, c.stop)
	if err == nil {
		c.held = int64(capacity)
		if !time.Now().Before(deadline) {
			// Room came as the time ran out: nothing to read it into.
			c.releaseFrame()
			err = errRequestTimeout
		}
	}
	if err != nil {
		if errors.Is(err, errRequestTimeout) {
			c.s.readTimeouts.Add(1)
			c.s.logger.Debug("closing connection: no room for its request within the request read timeout",
				"remote", c.remote, "bytes", n, "timeout", c.s.opts.requestTimeout())
		}
		return nil, err
	}
	c.nc.SetReadDeadline(deadline)
	body, held := c.s.memory.buffer(n, capacity)
	c.held = int64(held)
	if _, err := io.ReadFull(c.r, body); err != nil {
		if isTimeout(err) && !c.stopping.Load() {
			c.s.readTimeouts.Add(1)
			c.s.logger.Debug("closing connection: request not received within the request read timeout",
				"remote", c.remote, "bytes", n, "timeout", c.s.opts.requestTimeout())
			err = fmt.Errorf("%w (%d bytes)", errRequestTimeout, n)
		}
		c.s.memory.recycle(body)
		c.releaseFrame()
		return nil, err
	}
	return body, nil
}

// releaseFrame gives back the request memory of the frame last read. The
// frame must no longer be referenced: the request's decoded body points
// into it.
func (c *conn) releaseFrame() {
	c.s.memory.release(c.held)
	c.held = 0
}

// handle decodes and serves one request; false closes the connection.
func (c *conn) handle(frame []byte) (ok bool) {
	var read time.Time
	if measure.On() {
		read = time.Now()
	}
	req, err := c.parse(frame)
	if req != nil {
		req.times.read = read
	}
	if err != nil {
		var uv *unsupportedVersion
		if errors.As(err, &uv) && uv.key == kmsg.ApiVersions.Int16() {
			return c.writeResponse(req, apiVersionsUnsupported()) == nil
		}
		c.s.logger.Debug("bad request; closing connection", "remote", c.remote, "err", err)
		if _, served := c.handlerFor(req.key); served {
			c.s.metrics.record(req, time.Time{}, time.Time{}, 0, true) // an API's request it could not decode
		}
		return false
	}
	if !c.authenticated && !preAuthAllowed(req.key) {
		c.s.logger.Debug("request before SASL authentication; closing", "remote", c.remote, "key", req.key)
		c.s.metrics.record(req, time.Time{}, time.Time{}, 0, true)
		return false
	}
	var resp responseWriter
	if !read.IsZero() {
		req.times.started = time.Now()
	}
	if denial := c.gate(req); denial != nil {
		denial.SetVersion(req.version)
		resp = encoded(denial)
	} else {
		resp, err = c.dispatch(req)
	}
	var handled time.Time
	if !read.IsZero() {
		handled = time.Now()
	}
	// The request is served: its frame's memory goes back to the pool
	// before the response is written, which a slow reader may stretch.
	// What a handler keeps of a request past this (a group member's
	// metadata, say) the collector keeps alive; it is small beside the
	// frames the pool is for.
	req.body = nil
	c.releaseFrame()
	if req.key == kmsg.Produce.Int16() && c.s.b.Quorum() == nil {
		// A Produce handler of a broker without peers returns once its
		// batches are in the log (or refused), and nothing it answers
		// points into the frame (kmsg copies strings): its buffer can
		// take the next large frame. (With peers, a batch may still be
		// on its way to another node's leader.)
		c.s.memory.keep(frame)
	}
	if err != nil {
		c.s.metrics.record(req, handled, time.Time{}, 0, true)
		c.s.logger.Debug("closing connection", "remote", c.remote, "api", kmsg.NameForKey(req.key), "err", err)
		return false
	}
	if resp == nil {
		c.s.metrics.record(req, handled, time.Time{}, c.mutedFor(handled), false)
		return true // acks=0 produce: no response
	}
	if err := c.writeResponse(req, resp); err != nil {
		c.s.metrics.record(req, handled, time.Now(), 0, true)
		return false
	}
	var sent time.Time
	if !read.IsZero() {
		sent = time.Now()
	}
	c.s.metrics.record(req, handled, sent, c.mutedFor(sent), false)
	return !c.closeAfter
}

// mutedFor is how long after now a quota keeps the connection muted.
func (c *conn) mutedFor(now time.Time) time.Duration {
	return max(c.throttledUntil.Sub(now), 0)
}

// dispatch runs the request's handler, turning a panic into a closed
// connection rather than a dead server.
func (c *conn) dispatch(req *request) (resp responseWriter, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.logger.Error("panic serving request", "api", kmsg.NameForKey(req.key), "version", req.version,
				"remote", c.remote, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("transport: panic: %v", r)
		}
	}()
	h, _ := c.handlerFor(req.key)
	return h.serve(c, req)
}

type unsupportedVersion struct{ key, version int16 }

func (e *unsupportedVersion) Error() string {
	return fmt.Sprintf("transport: %s v%d is not supported", kmsg.NameForKey(e.key), e.version)
}

// parse reads a request header and body.
func (c *conn) parse(frame []byte) (*request, error) {
	req := &request{
		key:           int16(binary.BigEndian.Uint16(frame[0:])),
		version:       int16(binary.BigEndian.Uint16(frame[2:])),
		correlationID: int32(binary.BigEndian.Uint32(frame[4:])),
		size:          len(frame) + 4,
	}
	h, ok := c.handlerFor(req.key)
	if !ok || h.serve == nil {
		return req, fmt.Errorf("transport: unknown API key %d", req.key)
	}
	body := kmsg.RequestForKey(req.key)
	if body == nil {
		return req, fmt.Errorf("transport: unknown API key %d", req.key)
	}
	if req.version < h.min || req.version > h.max || req.version > body.MaxVersion() {
		return req, &unsupportedVersion{req.key, req.version}
	}
	body.SetVersion(req.version)
	req.flexible = body.IsFlexible() && req.key != kmsg.ApiVersions.Int16()
	rest := frame[8:]
	// client_id: an int16-length nullable string in every header version.
	if len(rest) < 2 {
		return req, errors.New("transport: truncated request header")
	}
	n := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if n > 0 {
		if int(n) > len(rest) {
			return req, errors.New("transport: truncated client id")
		}
		req.clientID = string(rest[:n])
		rest = rest[n:]
	}
	if body.IsFlexible() {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return req, err
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return req, fmt.Errorf("transport: decode %s v%d: %w", kmsg.NameForKey(req.key), req.version, err)
	}
	req.body = body
	return req, nil
}

// skipTags skips a tagged-field section (KIP-482).
func skipTags(b []byte) ([]byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, errors.New("transport: bad tagged fields")
	}
	b = b[w:]
	for i := uint64(0); i < n; i++ {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil, errors.New("transport: bad tag")
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || size > uint64(len(b)-w) {
			return nil, errors.New("transport: bad tag size")
		}
		b = b[w+int(size):]
	}
	return b, nil
}

// responseWriter is a response ready to go out: a kmsg body, or a fetch
// response whose record bytes come straight from segment files.
type responseWriter interface {
	// writeBody writes the body after the response header. size is
	// called first for the frame length.
	size(flexibleHeader bool) int
	writeBody(c *conn) error
}

// kmsgResponse is a response encoded by kmsg.
type kmsgResponse struct {
	buf []byte
}

func encoded(resp kmsg.Response) *kmsgResponse { return &kmsgResponse{buf: resp.AppendTo(nil)} }

func (r *kmsgResponse) size(bool) int { return len(r.buf) }

func (r *kmsgResponse) writeBody(c *conn) error {
	_, err := c.out().Write(r.buf)
	return err
}

// out is the buffered writer of the response being written, taken from
// the shared pool on first use; writeResponse gives it back.
func (c *conn) out() *bufio.Writer {
	if c.w == nil {
		c.w = writers.Get().(*bufio.Writer)
		c.w.Reset(c.nc)
	}
	return c.w
}

// releaseOut gives the writer back to the pool, dropping whatever it did
// not flush (the connection is failing then).
func (c *conn) releaseOut() {
	if c.w != nil {
		c.w.Reset(nil)
		writers.Put(c.w)
		c.w = nil
	}
}

// writeResponse writes the response frame: size, correlation id, the tag
// buffer of a flexible response header (never for ApiVersions), the body.
func (c *conn) writeResponse(req *request, resp responseWriter) error {
	defer c.releaseOut()
	flexible := req.flexible
	n := 4 + resp.size(flexible)
	if flexible {
		n++
	}
	var hdr [9]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(n))
	binary.BigEndian.PutUint32(hdr[4:], uint32(req.correlationID))
	h := hdr[:8]
	if flexible {
		h = hdr[:9] // an empty tag buffer
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.IdleTimeout))
	if _, err := c.out().Write(h); err != nil {
		return err
	}
	if err := resp.writeBody(c); err != nil {
		return err
	}
	return c.out().Flush()
}
