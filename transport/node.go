package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
)

// NodeConfig configures a cluster node (StartNode).
type NodeConfig struct {
	// Dir is the node's data directory.
	Dir string
	// NodeID is the node's id in the cluster (node.id).
	NodeID int32
	// Listen is the host:port Kafka clients and the other brokers connect
	// to (listeners); port 0 picks a free one.
	Listen string
	// AdvertisedAddr is the host:port clients and brokers are told to use
	// (advertised.listeners). Default: the listener's address.
	AdvertisedAddr string
	// ControllerListen is the host:port of the controller listener: Raft
	// among the controllers and the controller's requests
	// (controller.listener.names). A voter's must be reachable at its
	// entry in QuorumVoters.
	ControllerListen string
	// QuorumVoters lists the controller quorum, "1@host:port,2@host:port,..."
	// (controller.quorum.voters): the same on every node. A node listed is
	// a controller and a broker; any other is a broker only.
	QuorumVoters string
	// ClusterID, if set, is the cluster this node must belong to.
	ClusterID string
	// Broker holds the broker's other options (NodeID and Node are set
	// here).
	Broker spool.Options
	// Cluster tunes the node's part in the cluster (session timeout,
	// replica lag, ...); Voters, addresses and Remote are set here.
	Cluster spool.NodeOptions
	// Server holds the Kafka server's options (NodeID and the advertised
	// address are set here).
	Server Options
	// Dial connects to another node, for every connection this node opens:
	// followers' fetches, controller requests, Raft. Default: TCP to the
	// address. A fault-injection harness (package clustertest) routes each
	// link through a proxy it controls with it.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// PeerTLS is the client side of the TLS connections this node opens
	// to the other nodes when the cluster's listeners use TLS
	// (Server.TLS, which then covers the controller listener too): the
	// CAs that sign the nodes' certificates and, if the nodes require
	// client certificates, this node's. Each connection is verified
	// against the host of the address dialed. Required with Server.TLS.
	PeerTLS *tls.Config
	// Logger receives the node's messages. Default: none.
	Logger *slog.Logger
}

// tlsDialer wraps dial (nil: TCP) so that each connection is a TLS client
// connection, handshaken, verified against the dialed address's host.
func tlsDialer(dial func(ctx context.Context, addr string) (net.Conn, error), cfg *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, c)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("transport: TLS to %s: %w", addr, err)
		}
		return tc, nil
	}
}

// Node is a running cluster node: a spool.Broker that is a member of its
// cluster's controller quorum (or follows it), served over the Kafka
// protocol on its listener and its controller listener.
type Node struct {
	b      *spool.Broker
	srv    *Server
	kafka  net.Listener
	ctrl   net.Listener
	remote *remote
	done   chan error
}

// StartNode starts a cluster node: it listens, opens the broker in Dir as
// a node of the cluster QuorumVoters names - joining the controller quorum,
// registering with the active controller and following the metadata log -
// and serves Kafka clients, other brokers' followers and, on the controller
// listener, Raft and the controller's requests. It returns once listening;
// the node registers and catches up in the background (Broker().Ready),
// and only then serves its Kafka listener: until it is ready, connections
// to it wait.
//
// A data directory of another node or cluster, a voter list that disagrees
// with the other voters', or another process with this node's id is
// refused with an error that names the fix.
func StartNode(cfg NodeConfig) (*Node, error) {
	if err := checkNodeSettings(cfg); err != nil {
		return nil, err
	}
	if cfg.Server.SASL != nil {
		// The nodes would have to authenticate to each other's listeners,
		// and they have no SASL credentials to do it with: the node would
		// never get ready. Mutual TLS authenticates them instead.
		return nil, fmt.Errorf("%w: SASL on a cluster node's listener is not supported yet (the nodes do not authenticate to each other with SASL); use mutual TLS (Server.TLS with client certificates, and PeerTLS)", spool.ErrInvalidConfig)
	}
	if (cfg.Server.TLS == nil) != (cfg.PeerTLS == nil) {
		return nil, fmt.Errorf("%w: a cluster node's listeners and its connections to the other nodes use TLS together: set both Server.TLS and PeerTLS, or neither", spool.ErrInvalidConfig)
	}
	voters, err := controller.ParseVoters(cfg.QuorumVoters)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	voterAddr := ""
	for _, v := range voters {
		if v.ID == cfg.NodeID {
			voterAddr = v.Addr
		}
	}
	if cfg.ControllerListen == "" {
		if voterAddr == "" {
			return nil, fmt.Errorf("%w: node %d is not a voter: give it a controller listener of its own", spool.ErrInvalidConfig, cfg.NodeID)
		}
		cfg.ControllerListen = voterAddr
	}
	ctrlL, err := net.Listen("tcp", cfg.ControllerListen)
	if errors.Is(err, syscall.EADDRINUSE) && cfg.ControllerListen == voterAddr {
		// The likeliest reason: node NodeID already runs (this is a second
		// process with its id), and the probe never got to say so.
		return nil, fmt.Errorf("transport: controller listener: %w: another process listens on node %d's controller address %s - "+
			"is node %d already running? give each node its own --node-id", err, cfg.NodeID, voterAddr, cfg.NodeID)
	}
	if err != nil {
		return nil, fmt.Errorf("transport: controller listener: %w", err)
	}
	kafkaL, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		ctrlL.Close()
		return nil, fmt.Errorf("transport: listener: %w", err)
	}
	fail := func(err error) (*Node, error) {
		ctrlL.Close()
		kafkaL.Close()
		return nil, err
	}
	host, port, err := advertisedAddr(cfg.AdvertisedAddr, kafkaL.Addr())
	if err != nil {
		return fail(err)
	}
	ctrlAddr := voterAddr
	if ctrlAddr == "" {
		h, p, err := advertisedAddr("", ctrlL.Addr())
		if err != nil {
			return fail(err)
		}
		ctrlAddr = net.JoinHostPort(h, strconv.Itoa(int(p)))
	}
	if cfg.PeerTLS != nil {
		cfg.Dial = tlsDialer(cfg.Dial, cfg.PeerTLS)
	}
	r := newRemote(cfg.Dial)
	no := cfg.Cluster
	no.Voters, no.ControllerAddr, no.AdvertisedHost, no.AdvertisedPort = voters, ctrlAddr, host, port
	no.ControllerListenAddr = ctrlL.Addr().String()
	no.ClusterID, no.Remote = cfg.ClusterID, r
	if cfg.Dial != nil {
		no.Dial = cfg.Dial
	}
	bo := cfg.Broker
	bo.NodeID, bo.Node = cfg.NodeID, &no
	if bo.Logger == nil {
		bo.Logger = cfg.Logger
	}
	b, err := spool.Open(cfg.Dir, bo)
	if err != nil {
		return fail(err)
	}
	r.b.Store(b)
	so := cfg.Server
	so.NodeID, so.AdvertisedHost, so.AdvertisedPort = cfg.NodeID, host, port
	if so.Logger == nil {
		so.Logger = cfg.Logger
	}
	srv, err := NewServer(b, so)
	if err != nil {
		b.Close()
		return fail(err)
	}
	srv.peers = r.peers
	if so.Authorizer != nil || so.Quotas != nil {
		cs := &clusterSettings{q: b.Quorum(), a: so.Authorizer, m: so.Quotas, log: so.Logger}
		if cs.a != nil {
			cs.a.SetStore(aclStore{settingsStore{b, controller.SettingsACLs}})
		}
		if cs.m != nil {
			cs.m.SetStore(quotaStore{settingsStore{b, controller.SettingsQuotas}})
		}
		srv.settings = cs
		go cs.follow(srv.done)
	}
	n := &Node{b: b, srv: srv, kafka: kafkaL, ctrl: ctrlL, remote: r, done: make(chan error, 3)}
	go func() { n.done <- srv.ServeController(ctrlL) }()
	go func() {
		// Kafka clients (and other brokers' followers) are served once the
		// node has registered and caught up with the metadata log, as a
		// Kafka broker enables request processing only then: a node just
		// started knows no topics and no brokers yet, and a client told
		// so gives up on the records it holds for topics that exist.
		// Connections wait in the listen backlog until then.
		select {
		case <-b.Ready():
			// With the cluster's ACLs and quotas of the image caught up.
			srv.settings.sync()
		case <-srv.done: // shut down first: Serve closes the listener
		}
		n.done <- srv.Serve(kafkaL)
	}()
	go func() {
		if err, ok := <-b.Failed(); ok {
			n.done <- err
		}
	}()
	return n, nil
}

// checkNodeSettings refuses an authorizer or quotas a cluster node cannot
// use as given. Their ACLs and quotas are the cluster's, in its metadata
// log, so they start empty. An authorizer needs mutual TLS between the
// nodes, with this node's certificate principal a super user: the
// controller listener serves only super users (package doc, "ACLs").
func checkNodeSettings(cfg NodeConfig) error {
	if q := cfg.Server.Quotas; q != nil && (len(q.Quotas()) > 0 || q.Version() > 0) {
		return fmt.Errorf("%w: a cluster node's quotas are the cluster's (set with AlterClientQuotas on any node): give it a quota.Manager without quotas", spool.ErrInvalidConfig)
	}
	a := cfg.Server.Authorizer
	if a == nil {
		return nil
	}
	if a.Len() > 0 || a.Version() > 0 {
		return fmt.Errorf("%w: a cluster node's ACLs are the cluster's (created with CreateAcls on any node): give it an acl.Authorizer without bindings", spool.ErrInvalidConfig)
	}
	if cfg.PeerTLS == nil {
		return fmt.Errorf("%w: an authorizer on a cluster node needs mutual TLS between the nodes (Server.TLS asking for client certificates, and PeerTLS with the node's certificate), whose principals are super users", spool.ErrInvalidConfig)
	}
	rules, err := parsePrincipalRules(cfg.Server.SSLPrincipalMappingRules)
	if err != nil {
		return err
	}
	p, err := peerPrincipal(cfg.PeerTLS, rules)
	if err != nil {
		return fmt.Errorf("%w: an authorizer on a cluster node needs the node's certificate in PeerTLS: %v", spool.ErrInvalidConfig, err)
	}
	if !a.IsSuperUser(p) {
		return fmt.Errorf("%w: node %d authenticates to the other nodes as %s, which is not a super user: the controller listener serves only super users when an authorizer is on (add it to the super users, e.g. --super-users '%s')", spool.ErrInvalidConfig, cfg.NodeID, p, p)
	}
	return nil
}

// advertisedAddr is the address to advertise: adv if set, else the
// listener's (an unspecified IP becomes localhost).
func advertisedAddr(adv string, l net.Addr) (string, int32, error) {
	if adv == "" {
		adv = l.String()
	}
	h, p, err := net.SplitHostPort(adv)
	if err != nil {
		return "", 0, fmt.Errorf("transport: advertised address %q: %w", adv, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("transport: advertised address %q: bad port", adv)
	}
	if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
		h = "localhost"
	}
	return h, int32(n), nil
}

// Broker is the node's broker: produce, consume and administer topics in
// process, as on any broker.
func (n *Node) Broker() *spool.Broker { return n.b }

// Server is the node's Kafka server.
func (n *Node) Server() *Server { return n.srv }

// Addr is the Kafka listener's address.
func (n *Node) Addr() net.Addr { return n.kafka.Addr() }

// ControllerAddr is the controller listener's address.
func (n *Node) ControllerAddr() net.Addr { return n.ctrl.Addr() }

// Done reports a listener that stopped serving on its own, or a node
// that cannot join its cluster (Broker.Failed), with the error; spool
// serve exits on it.
func (n *Node) Done() <-chan error { return n.done }

// Close shuts the node down in a controlled way: its partitions' leadership
// moves to other brokers first (a controlled shutdown) and the controller's
// leadership to another voter, then the broker closes, then the server
// finishes the requests it is serving and stops (until ctx ends).
func (n *Node) Close(ctx context.Context) error {
	berr := n.b.Close()
	serr := n.srv.Shutdown(ctx)
	n.remote.peers.close()
	if errors.Is(berr, spool.ErrClosed) {
		berr = nil
	}
	return errors.Join(berr, serr)
}
