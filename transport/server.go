package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/quota"
)

// Defaults, with the Kafka settings they mirror. Kafka leaves connections
// and request memory unbounded by default; spool's defaults bound them so
// that a flood of connections or of large requests cannot take a small
// machine (2 GiB) down: at most DefaultQueuedMaxRequestBytes of requests
// in memory, and DefaultMaxConnections connections of a few tens of KiB
// each.
const (
	DefaultMaxRequestBytes       = 100 << 20        // socket.request.max.bytes
	DefaultMaxPreAuthBytes       = 512 << 10        // sasl.server.max.receive.size
	DefaultIdleTimeout           = 10 * time.Minute // connections.max.idle.ms
	DefaultMaxConnections        = 1000             // max.connections (Kafka: unbounded)
	DefaultMaxConnectionsPerIP   = 500              // max.connections.per.ip (Kafka: unbounded)
	DefaultQueuedMaxRequestBytes = 256 << 20        // queued.max.request.bytes (Kafka: unbounded)
	DefaultRequestReadTimeout    = 30 * time.Second // clients' request.timeout.ms; Kafka has none
	DefaultNodeID                = 1
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("transport: server closed")

// ErrInvalidOptions is returned (wrapped) by NewServer for options that
// contradict each other or are out of range.
var ErrInvalidOptions = errors.New("transport: invalid options")

// Options configure a Server. The zero value of every field is its default.
type Options struct {
	// NodeID is the broker's id in metadata (node.id). Default 1.
	NodeID int32
	// AdvertisedHost and AdvertisedPort are the address clients are told
	// to connect to (advertised.listeners). Default: the listener's
	// address.
	AdvertisedHost string
	AdvertisedPort int32
	// MaxRequestBytes bounds a request frame (socket.request.max.bytes):
	// a larger size prefix closes the connection before anything is
	// allocated for it. Default 100 MiB.
	MaxRequestBytes int
	// MaxPreAuthBytes bounds a frame before SASL authentication
	// (sasl.server.max.receive.size). Default 512 KiB.
	MaxPreAuthBytes int
	// QueuedMaxRequestBytes bounds the bytes of requests held in memory at
	// once, over every connection (queued.max.request.bytes): a memory
	// pool from which each request's whole size is reserved once its size
	// prefix is read, and given back once it has been served. A request
	// that does not fit waits, its connection unread (the client is
	// pushed back by TCP), until it does; smaller requests that fit pass
	// it meanwhile. A request of 1 MiB or more reserves its size rounded
	// up by at most an eighth, its buffer's size class, so that the
	// buffers of requests that never arrive whole serve later ones
	// instead of piling up as garbage. The pool must be at least
	// MaxRequestBytes and MaxPreAuthBytes, as Kafka requires, so that
	// every request a connection may send can be read. Default 256 MiB;
	// negative: no bound (Kafka's -1).
	QueuedMaxRequestBytes int64
	// RequestReadTimeout bounds how long a request may take to arrive
	// whole, from its size prefix to its last byte, counting any wait for
	// QueuedMaxRequestBytes; past it the connection is closed and the
	// request's memory given back. It stops a client that announces a
	// large request and then trickles it (slow loris) from holding memory
	// or a connection: Kafka's idle timeout counts any byte as activity,
	// so it never fires for such a client. Kafka has no such setting; the
	// default is Kafka clients' own request.timeout.ms, after which a
	// client has given up on the request anyway. IdleTimeout, when
	// shorter, bounds it too. Default 30 s.
	RequestReadTimeout time.Duration
	// IdleTimeout closes connections idle this long between requests, and
	// bounds a response's write (connections.max.idle.ms). Default 10
	// minutes.
	IdleTimeout time.Duration
	// MaxConnections bounds the connections open at once, over every
	// listener (max.connections). At the limit the server stops accepting,
	// as Kafka's acceptor blocks: a new connection waits in the kernel's
	// listen backlog and is served once another closes. Default 1000;
	// negative: no bound.
	MaxConnections int
	// MaxConnectionsPerIP bounds the connections open at once from one
	// client IP address (max.connections.per.ip). A connection beyond it
	// is closed as soon as it is accepted, as Kafka drops it, so one host
	// cannot take every MaxConnections slot. Default 500; negative: no
	// bound.
	MaxConnectionsPerIP int
	// FetchSessionCacheSlots bounds the incremental fetch sessions
	// (KIP-227) the server keeps for consumers at once
	// (max.incremental.fetch.session.cache.slots). A consumer in a
	// session sends and receives only the partitions that changed, where
	// without one every Fetch names every partition it reads. Default
	// 1000; negative: keep none (every Fetch is a full one).
	FetchSessionCacheSlots int
	// SASL, when set, requires clients to authenticate.
	SASL *SASL
	// TLS, when set, makes every client connection a TLS connection
	// (security protocol SSL, or SASL_SSL with SASL): see tls.go. Its
	// ClientAuth decides whether clients must present a certificate;
	// TLSFiles.Config gives one read from PEM files and reloaded when they
	// change. A cluster node's controller listener uses it too (the nodes
	// dial each other with NodeConfig.PeerTLS).
	TLS *tls.Config
	// Authorizer, when set, enforces ACLs (authorizer.class.name): every
	// request's operations are checked against it for the connection's
	// principal (User:ANONYMOUS without SASL or a client certificate),
	// and what is not allowed is denied with Kafka's authorization errors;
	// see authz.go. CreateAcls, DescribeAcls and DeleteAcls manage it.
	// Without it every client may do everything, and the ACL APIs answer
	// SECURITY_DISABLED. On a cluster node (StartNode) it starts empty and
	// holds the cluster's ACLs, kept in the metadata log (settings.go),
	// and the controller listener serves only its super users.
	Authorizer *acl.Authorizer
	// Quotas, when set, enforces client quotas (producer_byte_rate,
	// consumer_byte_rate, request_percentage) and serves
	// DescribeClientQuotas and AlterClientQuotas: see quotas.go. On a
	// cluster node it starts empty and holds the cluster's quotas, kept in
	// the metadata log.
	Quotas *quota.Manager
	// SCRAMFile keeps the SCRAM credentials set with
	// AlterUserScramCredentials (OpenSCRAMFile); without it they last
	// until the server stops.
	SCRAMFile *SCRAMFile
	// SSLPrincipalMappingRules maps a client certificate's subject
	// distinguished name (RFC 2253) to the connection's principal name
	// (ssl.principal.mapping.rules): rules such as
	// "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT"; the first that matches applies,
	// and a connection none matches is closed. Default DEFAULT: the whole
	// distinguished name.
	SSLPrincipalMappingRules string
	// Logger receives the server's messages; silent by default.
	Logger *slog.Logger
}

// requestTimeout is how long a request may take to arrive once its size
// prefix is read: RequestReadTimeout, or IdleTimeout if shorter.
func (o *Options) requestTimeout() time.Duration {
	return min(o.RequestReadTimeout, o.IdleTimeout)
}

// ServerStats are a server's gauges and counters, for operators and
// metrics adapters.
type ServerStats struct {
	// Connections is the number of connections open now.
	Connections int
	// RefusedConnections counts connections closed as soon as they were
	// accepted because their IP address had MaxConnectionsPerIP open.
	RefusedConnections int64
	// RequestBytesInFlight is the request memory reserved now
	// (QueuedMaxRequestBytes' pool): requests arriving or being served.
	RequestBytesInFlight int64
	// PeakRequestBytesInFlight is the most RequestBytesInFlight has been
	// since the server started.
	PeakRequestBytesInFlight int64
	// RequestsWaitingForMemory is the number of requests whose size
	// prefix was read and that wait for room in the pool.
	RequestsWaitingForMemory int
	// RequestReadTimeouts counts connections closed because a request did
	// not arrive whole within RequestReadTimeout.
	RequestReadTimeouts int64
	// TLSHandshakeFailures counts TLS connections closed because their
	// handshake failed: a client not speaking TLS, a certificate refused,
	// no TLS version or cipher in common, or a handshake not done within
	// RequestReadTimeout.
	TLSHandshakeFailures int64
	// AcceptedConnections counts the connections accepted and served since
	// the server started (connection-creation-total).
	AcceptedConnections int64
}

// SASL holds the users a server accepts (sasl.enabled.mechanisms and the
// JAAS user configuration). A mechanism with no users is disabled.
type SASL struct {
	// Plain maps user names to passwords for the PLAIN mechanism.
	Plain map[string]string
	// SCRAMSHA256 and SCRAMSHA512 map user names to passwords for
	// SCRAM-SHA-256 and SCRAM-SHA-512; the server derives the salted
	// credentials when it starts.
	SCRAMSHA256, SCRAMSHA512 map[string]string
}

// Server serves one spool.Broker over the Kafka protocol.
type Server struct {
	b       *spool.Broker
	opts    Options
	logger  *slog.Logger
	scramMu sync.RWMutex
	scram   map[string]map[string]scramCredential // mechanism -> user -> credential; replaced whole, never changed, under scramMu
	// scramConfigured are Options.SASL's SCRAM users, derived once.
	scramConfigured map[string]map[string]scramCredential
	// scramAlterMu serializes AlterUserScramCredentials: each is made
	// from the credentials the one before left, and saved without
	// holding scramMu (a cluster's save is a round trip to the
	// controller, and logins read scramMu).
	scramAlterMu sync.Mutex

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perIP     map[netip.Addr]int // open connections by client address
	addr      net.Addr           // the first listener's address, for advertising
	closing   atomic.Bool
	done      chan struct{} // closed by Shutdown, with closing set
	connWG    sync.WaitGroup

	// slots holds a token for each open connection; an acceptor takes one
	// before it accepts, so at MaxConnections it waits. nil: no bound.
	slots  chan struct{}
	memory *requestMemory
	// appendsWait: an append may wait after its write - for its fsync
	// (the Sync flush policy) or for the in-sync replicas (a cluster
	// node) - so the partitions of one produce request are appended side
	// by side (00_produce.go). Otherwise an append returns once written
	// and they take turns on the connection's goroutine, sparing the
	// goroutine per partition its start, stack growth and hand-offs.
	appendsWait bool

	metrics serverMetrics // per-API request measures (metrics.go)
	// fetchSessions are the consumers' incremental fetch sessions
	// (KIP-227, fetch_session.go).
	fetchSessions *fetchSessions
	refused       atomic.Int64
	readTimeouts  atomic.Int64
	tlsFailures   atomic.Int64

	principals principalMapper // SSLPrincipalMappingRules, parsed

	// peers reaches the other nodes of a cluster node's cluster, for the
	// requests a broker forwards (DescribeQuorum); nil on a standalone
	// broker. StartNode sets it to the node's own pool, which dials
	// through NodeConfig.Dial.
	peers *peers
	// settings keeps a cluster node's ACLs and quotas in step with the
	// metadata log (nil on a standalone broker).
	settings *clusterSettings
}

// NewServer returns a Server for the broker. It reads (or creates) the
// cluster id in the broker's data directory (meta.properties).
func NewServer(b *spool.Broker, opts Options) (*Server, error) {
	if opts.NodeID == 0 {
		opts.NodeID = DefaultNodeID
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxPreAuthBytes <= 0 {
		opts.MaxPreAuthBytes = DefaultMaxPreAuthBytes
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.RequestReadTimeout <= 0 {
		opts.RequestReadTimeout = DefaultRequestReadTimeout
	}
	if opts.QueuedMaxRequestBytes == 0 {
		opts.QueuedMaxRequestBytes = DefaultQueuedMaxRequestBytes
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.MaxConnectionsPerIP == 0 {
		opts.MaxConnectionsPerIP = DefaultMaxConnectionsPerIP
	}
	if opts.FetchSessionCacheSlots == 0 {
		opts.FetchSessionCacheSlots = DefaultFetchSessionCacheSlots
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NodeID < 0 || opts.AdvertisedPort < 0 {
		return nil, fmt.Errorf("%w: NodeID %d, AdvertisedPort %d", ErrInvalidOptions, opts.NodeID, opts.AdvertisedPort)
	}
	if q := opts.QueuedMaxRequestBytes; q > 0 && (q < int64(opts.MaxRequestBytes) || q < int64(opts.MaxPreAuthBytes)) {
		return nil, fmt.Errorf("%w: QueuedMaxRequestBytes (queued.max.request.bytes) %d is below MaxRequestBytes %d or MaxPreAuthBytes %d: a request of that size could never be read",
			ErrInvalidOptions, q, opts.MaxRequestBytes, opts.MaxPreAuthBytes)
	}
	principals, err := parsePrincipalRules(opts.SSLPrincipalMappingRules)
	if err != nil {
		return nil, err
	}
	s := &Server{
		b: b, opts: opts, logger: opts.Logger, principals: principals,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, perIP: map[netip.Addr]int{},
		done:   make(chan struct{}),
		memory: newRequestMemory(opts.QueuedMaxRequestBytes),
		// Flush is the broker's, for every partition.
		appendsWait: b.Quorum() != nil || b.Options().Flush == log.Sync,
	}
	s.fetchSessions = newFetchSessions(opts.FetchSessionCacheSlots)
	if opts.MaxConnections > 0 {
		s.slots = make(chan struct{}, opts.MaxConnections)
	}
	if _, err = b.ClusterID(); err != nil { // a standalone broker's meta.properties, written now if new
		return nil, err
	}
	if s.scramConfigured, err = scramCredentials(opts.SASL); err != nil {
		return nil, err
	}
	s.scram = cloneCreds(s.scramConfigured)
	if f := opts.SCRAMFile; f != nil && opts.SASL != nil {
		// Set over the protocol, they replace configured passwords.
		for mech, users := range f.creds {
			if s.scram == nil {
				s.scram = map[string]map[string]scramCredential{}
			}
			if s.scram[mech] == nil {
				s.scram[mech] = map[string]scramCredential{}
			}
			for user, cred := range users {
				s.scram[mech][user] = cred
			}
		}
	}
	return s, nil
}

// ClusterID is the cluster id the server reports.
func (s *Server) ClusterID() string {
	id, _ := s.b.ClusterID()
	return id
}

// ListenAndServe listens on the TCP address addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// ConnInfo describes an open client connection.
type ConnInfo struct {
	// Remote is the client's address.
	Remote string
	// Principal is who the client authenticated as: "User:" and the SASL
	// user or the mapped subject of its TLS certificate, or
	// "User:ANONYMOUS".
	Principal string
	// TLS reports a TLS connection.
	TLS bool
}

// Connections lists the open client connections.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ConnInfo, 0, len(s.conns))
	for c := range s.conns {
		if c.controller {
			continue
		}
		_, isTLS := c.nc.(*tls.Conn)
		out = append(out, ConnInfo{Remote: c.remote, Principal: *c.shown.Load(), TLS: isTLS})
	}
	return out
}

// Stats returns the server's gauges and counters.
func (s *Server) Stats() ServerStats {
	used, peak, waiting := s.memory.stats()
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return ServerStats{
		Connections:              n,
		RefusedConnections:       s.refused.Load(),
		RequestBytesInFlight:     used,
		PeakRequestBytesInFlight: peak,
		RequestsWaitingForMemory: waiting,
		RequestReadTimeouts:      s.readTimeouts.Load(),
		TLSHandshakeFailures:     s.tlsFailures.Load(),
		AcceptedConnections:      s.metrics.accepted.Load(),
	}
}

// Serve accepts connections on l until Shutdown; it returns
// ErrServerClosed then. With MaxConnections open it stops accepting until
// one closes; a connection from an address that has MaxConnectionsPerIP
// open is closed at once. Running out of file descriptors or kernel
// memory does not stop it: it waits and accepts again.
func (s *Server) Serve(l net.Listener) error { return s.serve(l, false, s.defaultListener(l)) }

// serve accepts connections on l: Kafka clients', or with controller those
// of a cluster node's controller listener, which come from the cluster's
// own nodes and count against neither connection limit.
func (s *Server) serve(l net.Listener, controller bool, ln *listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	if s.addr == nil {
		s.addr = l.Addr()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		if !controller && !s.takeSlot() {
			return ErrServerClosed
		}
		nc, err := l.Accept()
		if err != nil {
			if !controller {
				s.giveSlot()
			}
			if s.closing.Load() {
				return ErrServerClosed
			}
			if acceptRetryable(err) {
				if delay == 0 {
					s.logger.Warn("accept failed; retrying", "err", err)
				}
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-s.done:
				}
				continue
			}
			return err
		}
		delay = 0
		if controller {
			// Which protocol comes is read off the connection's first
			// byte, on its own goroutine: the accept loop never waits.
			// Counted under mu, as Shutdown sets closing before it
			// waits: an Add racing Shutdown's Wait is a misuse.
			s.mu.Lock()
			if s.closing.Load() {
				s.mu.Unlock()
				nc.Close()
				return ErrServerClosed
			}
			s.connWG.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.connWG.Done()
				principal := anonymous
				if s.opts.TLS != nil {
					tc := tls.Server(nc, s.opts.TLS)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := tc.HandshakeContext(ctx)
					cancel()
					var p string
					if err == nil {
						p, err = s.tlsPrincipal(tc)
					}
					if err != nil {
						s.tlsFailures.Add(1)
						s.logger.Debug("TLS handshake failed on the controller listener", "remote", nc.RemoteAddr().String(), "err", err)
						nc.Close()
						return
					}
					if p != "" {
						principal = p
					}
					nc = tc
				}
				// With an authorizer, only the cluster's nodes - super
				// users - may use the controller listener at all: it
				// carries Raft, and its Kafka requests are not checked
				// one by one.
				if a := s.opts.Authorizer; a != nil && !a.IsSuperUser(principal) {
					s.logger.Warn("controller listener refused a connection: its principal is not a super user", "remote", nc.RemoteAddr().String(), "principal", principal)
					nc.Close()
					return
				}
				if kc, ok := s.routeController(nc); ok {
					s.start(kc, true, ln)
				}
			}()
			continue
		}
		if !s.start(nc, false, ln) {
			return ErrServerClosed
		}
	}
}

// start serves a Kafka connection on its own goroutine; false if the
// server is shutting down (the connection is closed). A client connection
// holds the slot its acceptor took and counts against its address's
// limit; a controller-listener connection does neither.
func (s *Server) start(nc net.Conn, controller bool, ln *listener) bool {
	if ln.TLS != nil && !controller {
		nc = tls.Server(nc, ln.TLS) // the handshake is the connection's first step
	}
	c := newConn(s, nc, ln)
	if controller {
		c.controller = true
		c.ctx = spool.ControllerOnly(c.ctx)
	}
	limited := !controller
	release := func() {
		if limited {
			s.giveSlot()
		}
	}
	ip, hasIP := remoteIP(nc)
	hasIP = hasIP && limited
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		nc.Close()
		release()
		return false
	}
	if hasIP && s.opts.MaxConnectionsPerIP > 0 && s.perIP[ip] >= s.opts.MaxConnectionsPerIP {
		s.mu.Unlock()
		// Counted before the close, so that a client that sees its
		// connection closed also sees it counted.
		s.refused.Add(1)
		nc.Close()
		release()
		s.logger.Debug("refused connection: address has max.connections.per.ip open",
			"remote", c.remote, "limit", s.opts.MaxConnectionsPerIP)
		return true
	}
	if hasIP {
		s.perIP[ip]++
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.metrics.accepted.Add(1)
	go func() {
		defer s.connWG.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		if hasIP {
			if s.perIP[ip]--; s.perIP[ip] <= 0 {
				delete(s.perIP, ip)
			}
		}
		s.mu.Unlock()
		release()
	}()
	return true
}

// takeSlot waits for a connection slot (MaxConnections); false once the
// server is shutting down.
func (s *Server) takeSlot() bool {
	if s.slots == nil {
		return !s.closing.Load()
	}
	select {
	case s.slots <- struct{}{}:
		return true
	case <-s.done:
		return false
	}
}

// giveSlot gives back a slot taken by takeSlot.
func (s *Server) giveSlot() {
	if s.slots != nil {
		<-s.slots
	}
}

// remoteIP is the client's IP address, for MaxConnectionsPerIP; false for
// a connection that has none (not TCP).
func remoteIP(nc net.Conn) (netip.Addr, bool) {
	ta, ok := nc.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	return ip.Unmap(), ok
}

// acceptRetryable reports an Accept error that says "not now" rather than
// "this listener is broken": a timeout, too many open files (per process
// or system-wide), no kernel memory or buffers, or a connection aborted
// before it was accepted. The server waits and accepts again, as net/http
// does, instead of stopping.
func acceptRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// Shutdown stops accepting connections, lets every connection finish the
// request it is serving, closes them, and waits until they are done or ctx
// ends (then it closes them at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing.Swap(true) {
		close(s.done)
	}
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.stopAfterRequest()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// advertised is the host and port clients are told to use.
func (s *Server) advertised() (string, int32) {
	host, port := s.opts.AdvertisedHost, s.opts.AdvertisedPort
	s.mu.Lock()
	addr := s.addr
	s.mu.Unlock()
	if addr != nil {
		if h, p, err := net.SplitHostPort(addr.String()); err == nil {
			if host == "" {
				host = h
				if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
					host = "localhost"
				}
			}
			if port == 0 {
				n, _ := strconv.Atoi(p)
				port = int32(n)
			}
		}
	}
	if host == "" {
		host = "localhost"
	}
	return host, port
}
