package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/quota"
	"github.com/spoolmq/spool/transport"
)

// shutdownTimeout bounds how long serve waits, after a signal, for the
// requests being served to finish before it closes their connections.
const shutdownTimeout = 10 * time.Second

// runServe implements "spool serve": it opens the broker and serves it
// over the Kafka protocol (package transport) until SIGINT or SIGTERM,
// then stops accepting connections, lets the requests in flight finish,
// closes the broker and exits 0. It exits 1 when the broker cannot be
// opened, the address cannot be listened on or the server fails, and 2 on
// usage errors.
//
// Besides its log (log/slog text on stderr) it prints one line
// "spool: serving on HOST:PORT" on stderr once the listener is bound, so
// that a script or test that asked for --listen 127.0.0.1:0 learns the
// port.
func runServe(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "read settings from a Kafka broker's server.properties `file`; flags given beside it win (see README, \"The config file\")")
	configStrict := fs.Bool("config-strict", false, "with --config: refuse to start on a key spool does not know, instead of reporting it")
	bf := addBrokerFlags(fs, withFlush)
	defaults := addBrokerDefaultFlags(fs)
	listen := fs.String("listen", "localhost:9092", "the `host:port` to accept Kafka clients on (listeners); port 0 picks a free one")
	advertised := fs.String("advertised-addr", "", "the `host:port` clients are told to connect to (advertised.listeners) (default: the listener's address)")
	nodeID := fs.Int("node-id", transport.DefaultNodeID, "the broker's `id` in metadata (node.id)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics, /healthz and /readyz over HTTP on this `host:port` (default: off)")
	maxConns := fs.Int("max-connections", transport.DefaultMaxConnections,
		"allow at most `n` connections open at once (max.connections); beyond, new ones wait in the listen backlog until one closes; -1: no limit")
	maxConnsPerIP := fs.Int("max-connections-per-ip", transport.DefaultMaxConnectionsPerIP,
		"allow at most `n` connections open at once from one IP address (max.connections.per.ip); more are closed as soon as accepted; -1: no limit")
	fetchSessions := fs.Int("fetch-session-cache-slots", transport.DefaultFetchSessionCacheSlots,
		"keep at most `n` incremental fetch sessions at once (KIP-227, max.incremental.fetch.session.cache.slots), so that consumers of many partitions send only what changed; 0: none, every fetch names all its partitions")
	maxRequest := fs.Int("socket-request-max-bytes", transport.DefaultMaxRequestBytes,
		"the largest request, in `bytes` (socket.request.max.bytes); a larger one closes its connection")
	queuedMax := fs.Int64("queued-max-request-bytes", transport.DefaultQueuedMaxRequestBytes,
		"the most `bytes` of requests held in memory at once, arriving or being served (queued.max.request.bytes); a request that does not fit is not read until it does; at least --socket-request-max-bytes; -1: no limit")
	idle := fs.Duration("connections-max-idle", transport.DefaultIdleTimeout,
		"close a connection idle for this `duration` between requests (connections.max.idle.ms)")
	readTimeout := fs.Duration("request-read-timeout", transport.DefaultRequestReadTimeout,
		"close a connection whose request has not arrived whole within this `duration` of its size prefix, waiting for memory included (stops clients trickling large requests)")
	var sasl transport.SASL
	fs.Func("sasl-plain", "require SASL and accept these `user:pass,...` with the PLAIN mechanism; @FILE reads them from a file, a user:pass a line", usersFlag(&sasl.Plain))
	fs.Func("sasl-scram-sha-256", "require SASL and accept these `user:pass,...` (or @FILE) with SCRAM-SHA-256; more SCRAM users can be added with AlterUserScramCredentials", usersFlag(&sasl.SCRAMSHA256))
	fs.Func("sasl-scram-sha-512", "require SASL and accept these `user:pass,...` (or @FILE) with SCRAM-SHA-512", usersFlag(&sasl.SCRAMSHA512))
	tlsCert := fs.String("tls-cert", "", "serve TLS (SSL, or SASL_SSL with --sasl-*) with this PEM certificate `file` (the chain, leaf first); replaced files are picked up without a restart (also on SIGHUP)")
	tlsKey := fs.String("tls-key", "", "the PEM private key `file` of --tls-cert")
	tlsCA := fs.String("tls-client-ca", "", "require TLS clients to present a certificate signed by a CA in this PEM `file` (mutual TLS); the certificate's subject becomes the principal. On a cluster node, the nodes' certificates must be signed by it too")
	principalRules := fs.String("ssl-principal-mapping-rules", "", "map client certificates' subjects to principals with Kafka's `rules` (ssl.principal.mapping.rules), e.g. 'RULE:^CN=([^,]*),.*$/$1/L,DEFAULT' (default DEFAULT: the whole subject)")
	listenersFlag := fs.String("listeners", "", "several listeners instead of --listen, `NAME://host:port,...` (listeners): NAME is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, or a name --listener-security-protocol-map maps to one; SSL needs --tls-*, SASL --sasl-*")
	advertisedListeners := fs.String("advertised-listeners", "", "what each listener's clients are told to connect to, `NAME://host:port,...` (advertised.listeners) (default: the listener's address)")
	interBroker := fs.String("inter-broker-listener-name", "", "on a cluster node with --listeners, the `NAME` of the listener the nodes use among themselves (inter.broker.listener.name): without SASL, and TLS exactly when the nodes use TLS (default: the first of --listeners)")
	protocolMap := fs.String("listener-security-protocol-map", "", "the security protocol of each custom listener name, `NAME:PROTOCOL,...` (listener.security.protocol.map)")
	authorizer := fs.Bool("authorizer", false, "enforce ACLs (authorizer.class.name): every request is denied unless an ACL allows it or the principal is a super user; ACLs are kept in the data directory's \"acls\" file (a cluster's: in its metadata log, the nodes' certificate principals among --super-users) and managed with \"spool acls\" (any Kafka admin client)")
	superUsers := fs.String("super-users", "", "principals allowed everything, `User:a;User:b` (super.users); with --authorizer")
	ctrlListen := fs.String("controller-listen", "", "the `host:port` of this node's controller listener (Raft and the controller's requests); a voter's defaults to its entry in --controller-quorum-voters")
	voters := fs.String("controller-quorum-voters", "", "makes this a cluster node: the controller quorum as `id@host:port,...` (controller.quorum.voters), the same on every node; a node listed is controller and broker, any other a broker only")
	clusterID := fs.String("cluster-id", "", "the `id` of the cluster this node must belong to (default: adopt the cluster's, or name a new one)")
	rf := fs.Int("default-replication-factor", 0, "the replication `factor` of topics created without one (default.replication.factor) (default 1; in a cluster of 3 or more, 3 is usual)")
	minISR := fs.Int("min-insync-replicas", 0, "the in-sync replicas an acks=all produce needs (min.insync.replicas) (default 1)")
	var dialMap map[string]string
	fs.Func("dial-map", "for fault-injection harnesses: connect to `addr=via,...` instead - every connection this node opens to another node's address addr goes to via (a proxy); repeatable", func(s string) error {
		if dialMap == nil {
			dialMap = map[string]string{}
		}
		for _, pair := range strings.Split(s, ",") {
			from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if _, _, err := net.SplitHostPort(from); !ok || err != nil {
				return fmt.Errorf("want addr=via with host:port addresses, not %q", pair)
			}
			if _, _, err := net.SplitHostPort(to); err != nil {
				return fmt.Errorf("want addr=via with host:port addresses, not %q", pair)
			}
			dialMap[from] = to
		}
		return nil
	})
	sessionTimeout := fs.Duration("session-timeout", 0, "a cluster node silent this long is fenced and its partitions get new leaders (broker.session.timeout.ms) (default 2s)")
	consumerHB := fs.Duration("group-consumer-heartbeat-interval", 0, "how often KIP-848 consumer group and share group members heartbeat (group.consumer.heartbeat.interval.ms) (default 5s)")
	consumerSession := fs.Duration("group-consumer-session-timeout", 0, "a KIP-848 consumer group or share group member silent this long leaves the group (group.consumer.session.timeout.ms) (default 45s)")
	shareLock := fs.Duration("share-lock-duration", 0, "how long a share group member holds a record it has not acknowledged (group.share.record.lock.duration.ms) (default 30s)")
	shareLimit := fs.Int("share-delivery-limit", 0, "deliveries of a record before a share group archives it (group.share.delivery.count.limit) (default 5)")
	var level slog.Level
	fs.Func("log-level", "the least `level` logged: debug, info, warn or error (default info)", func(s string) error {
		return level.UnmarshalText([]byte(s))
	})
	logFormat := fs.String("log-format", "text", "the `format` of the log on stderr: text (key=value) or json (a JSON object a line)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spool serve [--config server.properties] [--data DIR] [--listen HOST:PORT] [flags]\n\n")
		fmt.Fprintf(fs.Output(), "Serves the broker over the Kafka protocol, so that Kafka clients and tools\n")
		fmt.Fprintf(fs.Output(), "(kcat, franz-go, sarama, kafka-go, kafkajs, the Java client) produce, consume, run\n")
		fmt.Fprintf(fs.Output(), "consumer groups and administer topics, until SIGINT or SIGTERM. Logs to stderr,\n")
		fmt.Fprintf(fs.Output(), "with a line \"spool: serving on HOST:PORT\" once listening. With any --sasl-* flag\n")
		fmt.Fprintf(fs.Output(), "clients must authenticate (passwords may not contain commas). The connection and\n")
		fmt.Fprintf(fs.Output(), "memory limits are Kafka's settings, with defaults that fit a 2 GiB machine.\n")
		fmt.Fprintf(fs.Output(), "--config reads a Kafka broker's server.properties: each key sets the flag that\n")
		fmt.Fprintf(fs.Output(), "names it in parentheses, unless the command line gives that flag; keys spool\n")
		fmt.Fprintf(fs.Output(), "does not use are reported on stderr; ${file:PATH} in a value is PATH's content.\n\nFlags:\n")
		printFlags(fs)
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	// The file's settings become flag values, so that what the command
	// line says wins and each is checked below, whichever way it came.
	var fromFile map[string]string
	if *configPath != "" {
		var err error
		if fromFile, err = applyConfigFile(fs, *configPath, *configStrict, stderr); err != nil {
			fmt.Fprintf(stderr, "spool serve: --config: %v\n", err)
			return exitUsage
		}
	} else if *configStrict {
		return usageError(fs, "--config-strict needs --config")
	}
	// usageErr is usageError naming the config file's line of each flag
	// the message names that the file set.
	usageErr := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		var from []string
		for _, name := range slices.Sorted(maps.Keys(fromFile)) {
			if strings.Contains(msg, "--"+name) {
				from = append(from, fromFile[name])
			}
		}
		if from != nil {
			msg += " (set by " + strings.Join(from, ", ") + ")"
		}
		return usageError(fs, "%s", msg)
	}
	opts := transport.Options{}
	if *nodeID < 0 || *nodeID > 1<<31-1 {
		return usageErr("--node-id must be a non-negative 32-bit id, not %d", *nodeID)
	}
	opts.NodeID = int32(*nodeID)
	if *advertised != "" {
		host, port, err := splitHostPort(*advertised)
		if err != nil || port == 0 {
			return usageErr("--advertised-addr %q: want HOST:PORT with a non-zero port", *advertised)
		}
		opts.AdvertisedHost, opts.AdvertisedPort = host, port
	}
	if _, _, err := splitHostPort(*listen); err != nil {
		return usageErr("--listen %q: %v", *listen, err)
	}
	if *advertised == "" {
		host, err := wildcardAdvertisedHost(*listen)
		if err != nil {
			fmt.Fprintf(stderr, "spool serve: %v\n", err)
			return exitProblem
		}
		opts.AdvertisedHost = host
	}
	if sasl.Plain != nil || sasl.SCRAMSHA256 != nil || sasl.SCRAMSHA512 != nil {
		opts.SASL = &sasl
	}
	var tlsFiles *transport.TLSFiles
	switch {
	case *tlsCert != "" || *tlsKey != "":
		f, err := transport.LoadTLSFiles(*tlsCert, *tlsKey, *tlsCA, func(err error) {
			fmt.Fprintf(stderr, "spool serve: TLS files changed but cannot be used (serving the previous ones): %v\n", err)
		})
		if err != nil {
			return usageErr("%v", err)
		}
		tlsFiles, opts.TLS = f, f.Config()
	case *tlsCA != "":
		return usageErr("--tls-client-ca needs --tls-cert and --tls-key")
	}
	listeners, err := parseListeners(fs, *listenersFlag, *advertisedListeners, *protocolMap)
	if err != nil {
		return usageErr("%v", err)
	}
	if *interBroker != "" && (listeners == nil || *voters == "") {
		return usageErr("--inter-broker-listener-name needs --listeners and --controller-quorum-voters")
	}
	if listeners != nil {
		for i := range listeners {
			if listeners[i].cfg.AdvertisedHost == "" {
				if listeners[i].cfg.AdvertisedHost, err = wildcardAdvertisedHost(listeners[i].addr); err != nil {
					fmt.Fprintf(stderr, "spool serve: listener %s: %v\n", listeners[i].cfg.Name, err)
					return exitProblem
				}
			}
		}
		if *interBroker != "" {
			i := slices.IndexFunc(listeners, func(l serveListener) bool { return l.cfg.Name == *interBroker })
			if i < 0 {
				return usageErr("--inter-broker-listener-name %s: --listeners has no listener of that name", *interBroker)
			}
			// The nodes' listener goes first (transport.NodeConfig.Listeners).
			listeners[0], listeners[i] = listeners[i], listeners[0]
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["listen"] || set["advertised-addr"] {
			return usageErr("--listeners replaces --listen and --advertised-addr")
		}
		for i := range listeners {
			proto := listeners[i].proto
			if strings.HasSuffix(proto, "SSL") {
				if tlsFiles == nil {
					return usageErr("listener %s is %s: give --tls-cert and --tls-key", listeners[i].cfg.Name, proto)
				}
				listeners[i].cfg.TLS = tlsFiles.Config()
			}
			if strings.HasPrefix(proto, "SASL_") {
				if opts.SASL == nil {
					return usageErr("listener %s is %s: give --sasl-* users", listeners[i].cfg.Name, proto)
				}
				listeners[i].cfg.SASL = true
			}
		}
		// The listeners carry their own security; the server-wide
		// options would apply to Serve's only - and, on a cluster node,
		// to the controller listener, which uses TLS when the nodes'
		// listener does.
		if *voters == "" || listeners[0].cfg.TLS == nil {
			opts.TLS = nil
		}
	}
	if *superUsers != "" && !*authorizer {
		return usageErr("--super-users needs --authorizer")
	}
	if *principalRules != "" && *principalRules != "DEFAULT" && *tlsCA == "" {
		// The rules map client certificates' subjects, and only
		// --tls-client-ca has clients present certificates.
		return usageErr("--ssl-principal-mapping-rules needs --tls-client-ca: without mutual TLS no client presents a certificate to map")
	}
	if err := transport.CheckPrincipalMappingRules(*principalRules); err != nil {
		return usageErr("--ssl-principal-mapping-rules: %v", err)
	}
	opts.SSLPrincipalMappingRules = *principalRules
	for _, f := range []struct {
		name string
		v    int64
	}{{"--max-connections", int64(*maxConns)}, {"--max-connections-per-ip", int64(*maxConnsPerIP)}, {"--queued-max-request-bytes", *queuedMax}} {
		if f.v == 0 || f.v < -1 {
			return usageErr("%s must be positive, or -1 for no limit, not %d", f.name, f.v)
		}
	}
	if *fetchSessions < 0 {
		return usageErr("--fetch-session-cache-slots must not be negative, not %d", *fetchSessions)
	}
	opts.FetchSessionCacheSlots = *fetchSessions
	if *fetchSessions == 0 {
		opts.FetchSessionCacheSlots = -1 // transport: 0 is the default, below 0 none
	}
	if *maxRequest < 8 {
		return usageErr("--socket-request-max-bytes must be at least 8 (a request header), not %d", *maxRequest)
	}
	if *queuedMax > 0 && *queuedMax < int64(*maxRequest) {
		return usageErr("--queued-max-request-bytes %d is below --socket-request-max-bytes %d: a request of that size could never be read", *queuedMax, *maxRequest)
	}
	if *idle <= 0 || *readTimeout <= 0 {
		return usageErr("--connections-max-idle and --request-read-timeout must be positive")
	}
	opts.MaxConnections, opts.MaxConnectionsPerIP = *maxConns, *maxConnsPerIP
	opts.MaxRequestBytes, opts.QueuedMaxRequestBytes = *maxRequest, *queuedMax
	opts.IdleTimeout, opts.RequestReadTimeout = *idle, *readTimeout

	if *rf < 0 || *minISR < 0 || *sessionTimeout < 0 {
		return usageErr("--default-replication-factor, --min-insync-replicas and --session-timeout must not be negative")
	}
	if *consumerHB < 0 || *consumerSession < 0 || *shareLock < 0 || *shareLimit < 0 {
		return usageErr("--group-consumer-heartbeat-interval, --group-consumer-session-timeout, --share-lock-duration and --share-delivery-limit must not be negative")
	}
	bopts := spool.Options{Flush: bf.flush, GroupConsumerHeartbeatInterval: *consumerHB, GroupConsumerSessionTimeout: *consumerSession,
		ShareLockDuration: *shareLock, ShareDeliveryLimit: *shareLimit}
	bopts.Topic.ReplicationFactor, bopts.Topic.MinInSyncReplicas = *rf, *minISR
	if err := defaults.apply(&bopts); err != nil {
		return usageErr("%v", err)
	}
	var logger *slog.Logger
	switch hopts := (&slog.HandlerOptions{Level: level}); *logFormat {
	case "text":
		logger = slog.New(slog.NewTextHandler(stderr, hopts))
	case "json":
		logger = slog.New(slog.NewJSONHandler(stderr, hopts))
	default:
		return usageErr("--log-format must be text or json, not %q", *logFormat)
	}
	opts.Logger = logger
	if fromFile != nil {
		var set []string
		for _, name := range slices.Sorted(maps.Keys(fromFile)) {
			v := fs.Lookup(name).Value.String()
			if strings.HasPrefix(name, "sasl-") {
				v = "(secret)"
			}
			set = append(set, "--"+name+"="+v)
		}
		logger.Info("config file", "file", *configPath, "set", strings.Join(set, " "))
	}
	hs, err := startHealth(*metricsListen, logger)
	if err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	defer hs.close()
	if hs != nil {
		fmt.Fprintf(stderr, "spool: metrics on %s\n", hs.Addr())
	}
	if *voters != "" {
		vs, err := controller.ParseVoters(*voters)
		if err != nil {
			return usageErr("--controller-quorum-voters %q: %v", *voters, err)
		}
		if *ctrlListen == "" && !slices.ContainsFunc(vs, func(v controller.Voter) bool { return v.ID == opts.NodeID }) {
			return usageErr("node %d is not among --controller-quorum-voters, so it is a broker only: give it --controller-listen HOST:PORT of its own", opts.NodeID)
		}
		if *clusterID != "" {
			if id, err := base64.RawURLEncoding.DecodeString(*clusterID); err != nil || len(id) != 16 {
				return usageErr("--cluster-id %q: want a cluster id as Kafka writes it, 22 characters of URL-safe base64 (the cluster.id of a node's meta.properties)", *clusterID)
			}
		}
		bopts.Logger = logger
		// A cluster's ACLs and client quotas live in its metadata log,
		// the same on every node: each node starts with none and takes
		// the cluster's.
		if *authorizer {
			if tlsFiles == nil || *tlsCA == "" {
				return usageErr("--authorizer on a cluster node needs mutual TLS between the nodes: --tls-cert, --tls-key and --tls-client-ca, with each node's certificate principal in --super-users")
			}
			a, err := acl.New(acl.Config{SuperUsers: acl.ParseSuperUsers(*superUsers)})
			if err != nil {
				return usageErr("--super-users %q: %v", *superUsers, err)
			}
			opts.Authorizer = a
			logger.Info("authorizer on; the cluster's ACLs are in its metadata log", "super_users", *superUsers)
		}
		if opts.Quotas, err = quota.New(quota.Config{}); err != nil {
			fmt.Fprintf(stderr, "spool serve: quotas: %v\n", err)
			return exitProblem
		}
		cfg := transport.NodeConfig{
			Dir: bf.data, NodeID: opts.NodeID, Listen: *listen, AdvertisedAddr: *advertised,
			ControllerListen: *ctrlListen, QuorumVoters: *voters, ClusterID: *clusterID,
			Broker: bopts, Cluster: spool.NodeOptions{SessionTimeout: *sessionTimeout}, Server: opts, Logger: logger,
		}
		if _, port, _ := splitHostPort(*listen); cfg.AdvertisedAddr == "" && opts.AdvertisedHost != "" && port != 0 {
			// A node advertises a whole address; with port 0 the
			// transport's default (the bound address) is all there is.
			cfg.AdvertisedAddr = net.JoinHostPort(opts.AdvertisedHost, strconv.Itoa(int(port)))
		}
		if listeners != nil {
			cfg.Listen, cfg.AdvertisedAddr = "", ""
			for _, l := range listeners {
				cfg.Listeners = append(cfg.Listeners, transport.NodeListener{Addr: l.addr, Listener: l.cfg})
			}
		}
		if tlsFiles != nil && opts.TLS != nil {
			// The node shows its own certificate to the others, and
			// trusts what signs theirs: the client CA, else the system's.
			cfg.PeerTLS = tlsFiles.PeerConfig()
		}
		if dialMap != nil {
			cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				if via, ok := dialMap[addr]; ok {
					addr = via
				}
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			}
		}
		if err := prepareDataDir("spool serve", bf.data, stderr); err != nil {
			fmt.Fprintf(stderr, "spool serve: %v\n", err)
			return exitProblem
		}
		stopReload := reloadOnHangup(tlsFiles, logger)
		defer stopReload()
		return serveNode(ctx, cfg, hs, logger, stderr)
	}
	if *ctrlListen != "" || *clusterID != "" || *sessionTimeout != 0 || dialMap != nil {
		return usageErr("--controller-listen, --cluster-id, --session-timeout and --dial-map need --controller-quorum-voters")
	}
	if err := prepareDataDir("spool serve", bf.data, stderr); err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	if *authorizer {
		// A standalone broker's ACLs live beside its registry.
		store, bindings, err := acl.OpenFile(filepath.Join(bf.data, aclsFile))
		if err != nil {
			fmt.Fprintf(stderr, "spool serve: %v\n", err)
			return exitProblem
		}
		a, err := acl.New(acl.Config{SuperUsers: acl.ParseSuperUsers(*superUsers), Bindings: bindings, Store: store})
		if err != nil {
			return usageErr("--super-users %q: %v", *superUsers, err)
		}
		opts.Authorizer = a
		logger.Info("authorizer on", "acls", a.Len(), "super_users", *superUsers)
	}
	if opts.SASL != nil {
		// SCRAM credentials set with AlterUserScramCredentials.
		if opts.SCRAMFile, err = transport.OpenSCRAMFile(filepath.Join(bf.data, scramFile)); err != nil {
			fmt.Fprintf(stderr, "spool serve: %v\n", err)
			return exitProblem
		}
	}
	// Client quotas, set with AlterClientQuotas ("spool quotas alter"),
	// live beside the registry; none are set at first.
	qstore, qs, err := quota.OpenFile(filepath.Join(bf.data, quotasFile))
	if err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	if opts.Quotas, err = quota.New(quota.Config{Quotas: qs, Store: qstore}); err != nil {
		fmt.Fprintf(stderr, "spool serve: quotas: %v\n", err)
		return exitProblem
	}
	if err := checkNotClusterNode(bf.data); err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	bopts.Logger, bopts.NodeID = logger, opts.NodeID
	b, err := spool.Open(bf.data, bopts)
	if errors.Is(err, spool.ErrLocked) {
		fmt.Fprintf(stderr, "spool serve: data directory %s is in use by another process (%v)\n", bf.data, err)
		return exitProblem
	}
	if err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	// Create __consumer_offsets before the first client can ask for it, so
	// that no group request waits behind its creation.
	if err := b.PrepareGroups(ctx); err != nil {
		fmt.Fprintf(stderr, "spool serve: creating the offsets topic: %v\n", err)
		return closeBroker("spool serve", b, exitProblem, stderr)
	}
	stopReload := reloadOnHangup(tlsFiles, logger)
	defer stopReload()
	if listeners == nil {
		l := transport.Listener{TLS: opts.TLS, SASL: opts.SASL != nil, AdvertisedHost: opts.AdvertisedHost, AdvertisedPort: opts.AdvertisedPort}
		l.Name = l.SecurityProtocol()
		listeners = []serveListener{{addr: *listen, cfg: l}}
	}
	code := serve(ctx, b, opts, listeners, hs, logger, stderr)
	return closeBroker("spool serve", b, code, stderr)
}

// serve listens on addr and serves b until ctx ends, then shuts the server
// down. It returns the exit status; the caller closes the broker.
func serve(ctx context.Context, b *spool.Broker, opts transport.Options, listeners []serveListener, hs *health, logger *slog.Logger, stderr io.Writer) int {
	srv, err := transport.NewServer(b, opts)
	if err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	hs.opened(b, srv)
	ls := make([]net.Listener, len(listeners))
	for i, sl := range listeners {
		if ls[i], err = net.Listen("tcp", sl.addr); err != nil {
			for _, l := range ls[:i] {
				l.Close()
			}
			fmt.Fprintf(stderr, "spool serve: %v\n", err)
			return exitProblem
		}
	}
	for i, l := range ls {
		logger.Info("listening", "addr", l.Addr().String(), "advertised", advertisedAddr(listeners[i].cfg, l.Addr()), "listener", listeners[i].cfg.Name, "security", listeners[i].cfg.SecurityProtocol(),
			"data", b.Dir(), "node_id", opts.NodeID, "cluster_id", srv.ClusterID(), "sasl", listeners[i].cfg.SASL, "tls", listeners[i].cfg.TLS != nil,
			"max_connections", opts.MaxConnections, "max_connections_per_ip", opts.MaxConnectionsPerIP,
			"queued_max_request_bytes", opts.QueuedMaxRequestBytes, "fetch_session_cache_slots", max(opts.FetchSessionCacheSlots, 0))
	}
	if len(ls) > 1 {
		for i, l := range ls {
			fmt.Fprintf(stderr, "spool: listener %s on %s\n", listeners[i].cfg.Name, l.Addr())
		}
	}
	hs.serving() // the listeners are bound: connections queue until accepted
	// Last: harnesses wait for this line, and then read the ones above.
	fmt.Fprintf(stderr, "spool: serving on %s\n", ls[0].Addr())

	served := make(chan error, len(ls))
	for i, l := range ls {
		go func() { served <- srv.ServeListener(l, listeners[i].cfg) }()
	}
	select {
	case err := <-served:
		// Serve stops on its own only when the listener fails.
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
		return exitProblem
	case <-ctx.Done():
	}
	hs.shuttingDown()
	logger.Info("shutting down", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// The connections were closed at the deadline; the broker is
		// still closed cleanly by the caller.
		logger.Warn("shutdown: closed connections with requests in flight", "err", err)
	}
	if err := <-served; err != nil && !errors.Is(err, transport.ErrServerClosed) {
		logger.Warn("serve", "err", err)
	}
	logger.Info("stopped")
	return exitOK
}

// wildcardAdvertisedHost is the host to advertise for a listener on addr
// when none is given: the machine's host name if addr's host is a
// wildcard (empty, 0.0.0.0 or ::), as Kafka advertises the canonical host
// name, since "localhost" would send every client on another machine to
// itself; empty otherwise, leaving the listener's own host.
func wildcardAdvertisedHost(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return "", nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("listening on %s: cannot find the host name to advertise (give --advertised-addr): %w", addr, err)
	}
	return name, nil
}

// advertisedAddr is the address a listener bound to addr advertises, for
// the log: its advertised host and port where set, else the bound ones.
func advertisedAddr(l transport.Listener, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if l.AdvertisedHost != "" {
		host = l.AdvertisedHost
	}
	if l.AdvertisedPort != 0 {
		port = strconv.Itoa(int(l.AdvertisedPort))
	}
	return net.JoinHostPort(host, port)
}

// usersFlag parses "user:pass,user:pass" into *m.
func usersFlag(m *map[string]string) func(string) error {
	return func(s string) error {
		if *m == nil {
			*m = map[string]string{}
		}
		items := strings.Split(s, ",")
		if path, ok := strings.CutPrefix(s, "@"); ok {
			// @FILE: a user:pass a line, so that no password is on the
			// command line (blank lines and # comments skipped).
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			items = items[:0]
			for _, line := range strings.Split(string(data), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					items = append(items, line)
				}
			}
			if len(items) == 0 {
				return fmt.Errorf("%s names no user", path)
			}
		}
		for _, up := range items {
			user, pass, ok := strings.Cut(up, ":")
			if !ok || user == "" {
				return fmt.Errorf("want user:pass,..., not %q", up)
			}
			(*m)[user] = pass
		}
		return nil
	}
}

// splitHostPort splits HOST:PORT, checking the port is a port number.
func splitHostPort(s string) (string, int32, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return host, int32(port), nil
}

// serveNode runs a cluster node until ctx ends (SIGINT, SIGTERM), then
// shuts it down in a controlled way: its partitions' leadership moves to
// other brokers and the controller's to another voter before it exits. It
// prints "spool: serving on HOST:PORT" (the Kafka listener) and
// "spool: controller on HOST:PORT" once listening.
func serveNode(ctx context.Context, cfg transport.NodeConfig, hs *health, logger *slog.Logger, stderr io.Writer) int {
	n, err := transport.StartNode(cfg)
	if errors.Is(err, spool.ErrLocked) {
		fmt.Fprintf(stderr, "spool serve: data directory %s is in use by another process (%v)\n", cfg.Dir, err)
		return exitProblem
	}
	if err != nil {
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		return exitProblem
	}
	hs.opened(n.Broker(), n.Server())
	hs.serving() // /readyz waits for the broker to catch up with the metadata
	logger.Info("listening", "addr", n.Addr().String(), "controller", n.ControllerAddr().String(), "data", cfg.Dir,
		"node_id", cfg.NodeID, "voters", cfg.QuorumVoters)
	if len(cfg.Listeners) > 1 {
		for i, a := range n.ListenerAddrs() {
			l := cfg.Listeners[i]
			logger.Info("listener", "name", l.Name, "addr", a.String(), "security", l.SecurityProtocol(), "inter_broker", i == 0)
			fmt.Fprintf(stderr, "spool: listener %s on %s\n", l.Name, a)
		}
	}
	// Last but one: harnesses wait for this line, and then read the
	// ones above.
	fmt.Fprintf(stderr, "spool: serving on %s\n", n.Addr())
	fmt.Fprintf(stderr, "spool: controller on %s\n", n.ControllerAddr())
	code := exitOK
	select {
	case err := <-n.Done():
		fmt.Fprintf(stderr, "spool serve: %v\n", err)
		code = exitProblem
	case <-ctx.Done():
	}
	hs.shuttingDown()
	logger.Info("shutting down: moving leadership away", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := n.Close(sctx); err != nil {
		logger.Warn("shutdown", "err", err)
		code = exitProblem
	}
	logger.Info("stopped")
	return code
}

// reloadOnHangup reloads the TLS files on SIGHUP until the returned
// function is called. Without TLS it does nothing.
func reloadOnHangup(f *transport.TLSFiles, logger *slog.Logger) func() {
	if f == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if err := f.Reload(); err != nil {
					logger.Error("SIGHUP: TLS files not reloaded; serving the previous ones", "err", err)
				} else {
					logger.Info("SIGHUP: TLS files reloaded")
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// aclsFile is the file of a standalone data directory that holds its ACLs
// (spool serve --authorizer; package acl's FileStore format).
const aclsFile = "acls"

// quotasFile is the file of a standalone data directory that holds its
// client quotas (package quota's FileStore format).
const quotasFile = "quotas"

// serveListener is one listener spool serve opens: where, and how.
type serveListener struct {
	addr  string
	proto string // its security protocol
	cfg   transport.Listener
}

// securityProtocols are Kafka's.
var securityProtocols = []string{"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}

// parseListeners reads --listeners, --advertised-listeners and
// --listener-security-protocol-map; nil without --listeners. Security
// (TLS, SASL) is filled in by the caller.
func parseListeners(fs *flag.FlagSet, spec, advertised, protoMap string) ([]serveListener, error) {
	if spec == "" {
		if advertised != "" || protoMap != "" {
			return nil, fmt.Errorf("--advertised-listeners and --listener-security-protocol-map need --listeners")
		}
		return nil, nil
	}
	protos := map[string]string{}
	for _, p := range securityProtocols {
		protos[p] = p
	}
	for _, kv := range strings.Split(protoMap, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		name, proto, ok := strings.Cut(kv, ":")
		if !ok || !slices.Contains(securityProtocols, strings.ToUpper(proto)) {
			return nil, fmt.Errorf("--listener-security-protocol-map %q: want NAME:PROTOCOL with PROTOCOL one of %s", kv, strings.Join(securityProtocols, ", "))
		}
		protos[strings.ToUpper(name)] = strings.ToUpper(proto)
	}
	parse := func(flagName, v string) ([][2]string, error) {
		var out [][2]string
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			name, addr, ok := strings.Cut(item, "://")
			if !ok || name == "" {
				return nil, fmt.Errorf("--%s %q: want NAME://host:port", flagName, item)
			}
			if _, _, err := splitHostPort(addr); err != nil {
				return nil, fmt.Errorf("--%s %q: %v", flagName, item, err)
			}
			out = append(out, [2]string{strings.ToUpper(name), addr})
		}
		return out, nil
	}
	ls, err := parse("listeners", spec)
	if err != nil {
		return nil, err
	}
	ads, err := parse("advertised-listeners", advertised)
	if err != nil {
		return nil, err
	}
	var out []serveListener
	seen := map[string]bool{}
	for _, l := range ls {
		proto, ok := protos[l[0]]
		if !ok {
			return nil, fmt.Errorf("listener %s: not a security protocol; map it with --listener-security-protocol-map %s:PROTOCOL", l[0], l[0])
		}
		if seen[l[0]] {
			return nil, fmt.Errorf("listener %s named twice", l[0])
		}
		seen[l[0]] = true
		out = append(out, serveListener{addr: l[1], proto: proto, cfg: transport.Listener{Name: l[0]}})
	}
	for _, a := range ads {
		found := false
		for i := range out {
			if out[i].cfg.Name == a[0] {
				host, port, err := splitHostPort(a[1])
				if err != nil || port == 0 {
					return nil, fmt.Errorf("--advertised-listeners %s://%s: want a non-zero port", a[0], a[1])
				}
				out[i].cfg.AdvertisedHost, out[i].cfg.AdvertisedPort, found = host, port, true
			}
		}
		if !found {
			return nil, fmt.Errorf("--advertised-listeners names %s, which --listeners does not", a[0])
		}
	}
	_ = fs
	return out, nil
}

// scramFile is the file of a standalone data directory that holds the
// SCRAM credentials set over the protocol (salts and keys, never
// passwords).
const scramFile = "scram-credentials"
