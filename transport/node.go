package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
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
	// Listeners, if set, are the node's Kafka listeners instead of Listen
	// and AdvertisedAddr (Kafka's listeners and advertised.listeners),
	// each bound at its Addr with its own name, security and advertised
	// address. The first is the one the nodes use among themselves
	// (inter.broker.listener.name): it must not require SASL (the nodes
	// have no SASL credentials), and it uses TLS exactly when PeerTLS is
	// set. Each client is told every broker's endpoint on the listener it
	// came in on; a broker without a listener of that name is left out.
	Listeners []NodeListener
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

// NodeListener is one of a cluster node's Kafka listeners.
type NodeListener struct {
	// Addr is the host:port to listen on; port 0 picks a free one.
	Addr string
	Listener
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
	b         *spool.Broker
	srv       *Server
	kafka     net.Listener
	listeners []net.Listener // kafka first
	ctrl      net.Listener
	remote    *remote
	done      chan error
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
	if err := checkNodeListeners(cfg); err != nil {
		return nil, err
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
	// The Kafka listeners: Listen, or each of Listeners (the first is
	// the nodes' own).
	lcfgs := slices.Clone(cfg.Listeners)
	if len(lcfgs) == 0 {
		lcfgs = []NodeListener{{Addr: cfg.Listen}}
		if cfg.AdvertisedAddr != "" {
			h, p, err := advertisedAddr(cfg.AdvertisedAddr, nil)
			if err != nil {
				ctrlL.Close()
				return nil, err
			}
			lcfgs[0].AdvertisedHost, lcfgs[0].AdvertisedPort = h, p
		}
	}
	var kafkaLs []net.Listener
	fail := func(err error) (*Node, error) {
		ctrlL.Close()
		for _, l := range kafkaLs {
			l.Close()
		}
		return nil, err
	}
	var endpoints []controller.NamedEndpoint
	for i, lc := range lcfgs {
		l, err := net.Listen("tcp", lc.Addr)
		if err != nil {
			return fail(fmt.Errorf("transport: listener %s: %w", lc.Addr, err))
		}
		kafkaLs = append(kafkaLs, l)
		adv := ""
		if lc.AdvertisedHost != "" {
			adv = net.JoinHostPort(lc.AdvertisedHost, strconv.Itoa(int(lc.AdvertisedPort)))
		}
		h, p, err := advertisedAddr(adv, l.Addr())
		if err != nil {
			return fail(err)
		}
		lcfgs[i].AdvertisedHost, lcfgs[i].AdvertisedPort = h, p
		if lcfgs[i].Name == "" {
			lcfgs[i].Name = lcfgs[i].SecurityProtocol()
		}
		endpoints = append(endpoints, controller.NamedEndpoint{Name: lcfgs[i].Name, Host: h, Port: p})
	}
	kafkaL := kafkaLs[0]
	host, port := lcfgs[0].AdvertisedHost, lcfgs[0].AdvertisedPort
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
	if len(cfg.Listeners) > 0 {
		// Named: clients of another listener name are not told of it.
		no.Listeners = endpoints
	}
	no.ValidateSettings = validateSettings
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
	if so.SASL != nil {
		// SCRAM credentials set over the protocol are the cluster's.
		so.SCRAMFile = &SCRAMFile{creds: map[string]map[string]scramCredential{}, cluster: &settingsStore{b, controller.SettingsSCRAM}}
	}
	if so.Logger == nil {
		so.Logger = cfg.Logger
	}
	srv, err := NewServer(b, so)
	if err != nil {
		b.Close()
		return fail(err)
	}
	srv.peers = r.peers
	if so.Authorizer != nil || so.Quotas != nil || so.SCRAMFile != nil {
		cs := &clusterSettings{q: b.Quorum(), a: so.Authorizer, m: so.Quotas, s: srv, log: so.Logger}
		if cs.a != nil {
			cs.a.SetStore(aclStore{settingsStore{b, controller.SettingsACLs}})
		}
		if cs.m != nil {
			cs.m.SetStore(quotaStore{settingsStore{b, controller.SettingsQuotas}})
		}
		srv.settings = cs
		go cs.follow(srv.done)
	}
	n := &Node{b: b, srv: srv, kafka: kafkaL, listeners: kafkaLs, ctrl: ctrlL, remote: r, done: make(chan error, 2+len(kafkaLs))}
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
		if len(cfg.Listeners) == 0 {
			n.done <- srv.Serve(kafkaL)
			return
		}
		for i, l := range kafkaLs[1:] {
			go func() { n.done <- srv.ServeListener(l, lcfgs[i+1].Listener) }()
		}
		n.done <- srv.ServeListener(kafkaL, lcfgs[0].Listener)
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
	if cfg.Server.SCRAMFile != nil {
		return fmt.Errorf("%w: a cluster node's SCRAM credentials set over the protocol are the cluster's, in its metadata log: leave Server.SCRAMFile nil", spool.ErrInvalidConfig)
	}
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
	srvTLS := cfg.Server.TLS
	if srvTLS.GetConfigForClient != nil {
		if c, err := srvTLS.GetConfigForClient(&tls.ClientHelloInfo{}); err == nil && c != nil {
			srvTLS = c
		}
	}
	if srvTLS.ClientAuth < tls.VerifyClientCertIfGiven {
		// The other nodes would connect as ANONYMOUS, which the
		// controller listener refuses: the node would never get ready.
		return fmt.Errorf("%w: an authorizer on a cluster node needs the nodes' certificates verified: Server.TLS must verify client certificates (spool serve --tls-client-ca)", spool.ErrInvalidConfig)
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

// checkNodeListeners refuses listeners the nodes could not use among
// themselves: the first (the nodes' own) must not require SASL and must
// use TLS exactly when the nodes do (PeerTLS, and Server.TLS on the
// controller listener).
func checkNodeListeners(cfg NodeConfig) error {
	if (cfg.Server.TLS == nil) != (cfg.PeerTLS == nil) {
		return fmt.Errorf("%w: a cluster node's controller listener and its connections to the other nodes use TLS together: set both Server.TLS and PeerTLS, or neither", spool.ErrInvalidConfig)
	}
	if len(cfg.Listeners) == 0 {
		if cfg.Server.SASL != nil {
			// The nodes would have to authenticate to each other's
			// listener, and they have no SASL credentials to do it
			// with: the node would never get ready.
			return fmt.Errorf("%w: SASL on a cluster node's one listener: the nodes use it among themselves and have no SASL credentials; give the node several listeners (NodeConfig.Listeners, spool serve --listeners), the first without SASL, or authenticate clients with mutual TLS", spool.ErrInvalidConfig)
		}
		return nil
	}
	if cfg.Listen != "" || cfg.AdvertisedAddr != "" {
		return fmt.Errorf("%w: Listen and AdvertisedAddr, or Listeners: not both", spool.ErrInvalidConfig)
	}
	names := map[string]bool{}
	for i, l := range cfg.Listeners {
		name := l.Name
		if name == "" {
			name = l.SecurityProtocol()
		}
		if names[name] || name == controllerListenerName {
			return fmt.Errorf("%w: listener name %q used twice (or reserved): name each listener", spool.ErrInvalidConfig, name)
		}
		names[name] = true
		if l.SASL && cfg.Server.SASL == nil {
			return fmt.Errorf("%w: listener %q requires SASL, but Server.SASL has no users", spool.ErrInvalidConfig, name)
		}
		if i == 0 && l.SASL {
			return fmt.Errorf("%w: listener %q is the one the nodes use among themselves (the first), and they have no SASL credentials: put a listener without SASL first", spool.ErrInvalidConfig, name)
		}
		if i == 0 && (l.TLS == nil) != (cfg.PeerTLS == nil) {
			return fmt.Errorf("%w: listener %q is the one the nodes use among themselves (the first): it uses TLS exactly when the nodes do (PeerTLS)", spool.ErrInvalidConfig, name)
		}
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

// Addr is the Kafka listener's address (the first of several).
func (n *Node) Addr() net.Addr { return n.kafka.Addr() }

// ListenerAddrs are the addresses of the Kafka listeners, in the order of
// NodeConfig.Listeners (Addr alone without them).
func (n *Node) ListenerAddrs() []net.Addr {
	out := make([]net.Addr, len(n.listeners))
	for i, l := range n.listeners {
		out[i] = l.Addr()
	}
	return out
}

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
