package transport

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/vfs"
)

// Defaults, with the Kafka settings they mirror.
const (
	DefaultMaxRequestBytes = 100 << 20        // socket.request.max.bytes
	DefaultMaxPreAuthBytes = 512 << 10        // sasl.server.max.receive.size
	DefaultIdleTimeout     = 10 * time.Minute // connections.max.idle.ms
	DefaultNodeID          = 1
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("transport: server closed")

// Options configure a Server. The zero value of every field is its default.
type Options struct {
	// NodeID is the broker's id in metadata (node.id). Default 1.
	NodeID int32
	// AdvertisedHost and AdvertisedPort are the address clients are told
	// to connect to (advertised.listeners). Default: the listener's
	// address.
	AdvertisedHost string
	AdvertisedPort int32
	// MaxRequestBytes bounds a request frame (socket.request.max.bytes).
	// Default 100 MiB.
	MaxRequestBytes int
	// MaxPreAuthBytes bounds a frame before SASL authentication
	// (sasl.server.max.receive.size). Default 512 KiB.
	MaxPreAuthBytes int
	// IdleTimeout closes connections idle this long
	// (connections.max.idle.ms). Default 10 minutes.
	IdleTimeout time.Duration
	// SASL, when set, requires clients to authenticate.
	SASL *SASL
	// Logger receives the server's messages; silent by default.
	Logger *slog.Logger
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
	b         *spool.Broker
	opts      Options
	logger    *slog.Logger
	clusterID string
	scram     map[string]map[string]scramCredential // mechanism -> user -> credential

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	addr      net.Addr // the first listener's address, for advertising
	closing   atomic.Bool
	connWG    sync.WaitGroup

	producers *producerIDs
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
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NodeID < 0 || opts.AdvertisedPort < 0 {
		return nil, fmt.Errorf("transport: NodeID %d, AdvertisedPort %d", opts.NodeID, opts.AdvertisedPort)
	}
	s := &Server{
		b: b, opts: opts, logger: opts.Logger,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
	}
	var err error
	if s.clusterID, err = loadClusterID(b.Dir(), opts.NodeID); err != nil {
		return nil, err
	}
	if s.scram, err = scramCredentials(opts.SASL); err != nil {
		return nil, err
	}
	if s.producers, err = openProducerIDs(b.Dir()); err != nil {
		return nil, err
	}
	return s, nil
}

// ClusterID is the cluster id the server reports.
func (s *Server) ClusterID() string { return s.clusterID }

// ListenAndServe listens on the TCP address addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Serve accepts connections on l until Shutdown; it returns
// ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error {
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
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.connWG.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.connWG.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Shutdown stops accepting connections, lets every connection finish the
// request it is serving, closes them, and waits until they are done or ctx
// ends (then it closes them at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
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

// MetaPropertiesFile is the file in a broker's data directory that records
// the cluster id and node id, in Kafka's meta.properties format.
const MetaPropertiesFile = "meta.properties"

// ReadClusterID reads the cluster id from MetaPropertiesFile in the data
// directory dir, as NewServer does, without writing anything (tools use
// it). A missing file is reported with os.ErrNotExist (NewServer then
// writes one); a file without a cluster.id is an error NewServer refuses
// to start with.
func ReadClusterID(dir string) (string, error) {
	path := filepath.Join(dir, MetaPropertiesFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster.id="); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("transport: %s has no cluster.id", path)
}

// loadClusterID reads the cluster id from meta.properties in the data
// directory, writing a new one (and the node id) the first time, as Kafka's
// storage format does.
func loadClusterID(dir string, nodeID int32) (string, error) {
	path := filepath.Join(dir, MetaPropertiesFile)
	cid, err := ReadClusterID(dir)
	if !errors.Is(err, os.ErrNotExist) {
		return cid, err
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	cid = base64.RawURLEncoding.EncodeToString(id[:])
	content := fmt.Sprintf("# written by spool\nversion=1\ncluster.id=%s\nnode.id=%d\n", cid, nodeID)
	if err := vfs.WriteFileAtomic(vfs.Default, path, []byte(content)); err != nil {
		return "", err
	}
	return cid, nil
}
