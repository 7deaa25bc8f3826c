package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/testcerts"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// tlsSetup is a CA, a server certificate for 127.0.0.1 in files, and the
// TLSFiles serving them.
type tlsSetup struct {
	ca               *testcerts.CA
	dir              string
	certFile, caFile string
	keyFile          string
	files            *TLSFiles
}

func newTLSSetup(t *testing.T, clientCA bool) *tlsSetup {
	t.Helper()
	ca, err := testcerts.NewCA("spool test CA")
	require.NoError(t, err)
	srv, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker"}, Hosts: []string{"127.0.0.1", "localhost"}})
	require.NoError(t, err)
	ts := &tlsSetup{ca: ca, dir: t.TempDir()}
	ts.certFile, ts.keyFile, err = srv.Write(ts.dir, "server")
	require.NoError(t, err)
	if clientCA {
		ts.caFile = filepath.Join(ts.dir, "ca.crt")
		require.NoError(t, os.WriteFile(ts.caFile, ca.PEM, 0o600))
	}
	ts.files, err = LoadTLSFiles(ts.certFile, ts.keyFile, ts.caFile, func(err error) { t.Logf("reload: %v", err) })
	require.NoError(t, err)
	return ts
}

// clientTLS is a client configuration trusting the setup's CA, with a
// client certificate if pair is not nil.
func (ts *tlsSetup) clientTLS(t *testing.T, pair *testcerts.Pair) *tls.Config {
	cfg := &tls.Config{RootCAs: ts.ca.Pool(), MinVersion: tls.VersionTLS12}
	if pair != nil {
		cert, err := pair.TLS()
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func (ts *tlsSetup) client(t *testing.T, subject pkix.Name, notAfter time.Time) *testcerts.Pair {
	t.Helper()
	p, err := ts.ca.Issue(testcerts.Options{Subject: subject, NotAfter: notAfter})
	require.NoError(t, err)
	return p
}

// roundTrip produces a record and reads it back through a client.
func roundTrip(t *testing.T, opts ...kgo.Opt) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("secure"), kgo.ConsumeTopics("secure"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RecordDeliveryTimeout(3*time.Second), kgo.RetryTimeout(3*time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("over tls")}).FirstErr(); err != nil {
		return err
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		return err
	}
	require.Equal(t, "over tls", string(fs.Records()[0].Value))
	return nil
}

// principals are the principals of the server's open connections.
func principals(s *Server) map[string]bool {
	out := map[string]bool{}
	for _, c := range s.Connections() {
		if !c.TLS {
			panic("a plaintext connection on the TLS listener")
		}
		out[c.Principal] = true
	}
	return out
}

// Mutual TLS: a client certificate signed by the CA is let in, its
// subject mapped to the principal by the rules; one from another CA, an
// expired one, none at all and a plaintext client are refused at the
// handshake, and the server carries on.
func TestMutualTLS(t *testing.T) {
	ts := newTLSSetup(t, true)
	b, s, addr := testServer(t, spool.Options{}, Options{TLS: ts.files.Config(),
		SSLPrincipalMappingRules: "RULE:^CN=([^,]*),OU=ops,.*$/$1-admin/U, RULE:^CN=([^,]*),.*$/$1/L, DEFAULT"})
	require.NoError(t, b.CreateTopic(context.Background(), "secure", spool.TopicConfig{}))
	alice := ts.client(t, pkix.Name{CommonName: "Alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"acme"}}, time.Time{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(ts.clientTLS(t, alice)))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Ping(context.Background()))
	require.True(t, principals(s)["User:alice"], "the first matching rule: %v", s.Connections())
	require.NoError(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(ts.clientTLS(t, alice))))

	bob := ts.client(t, pkix.Name{CommonName: "bob", OrganizationalUnit: []string{"ops"}, Organization: []string{"acme"}}, time.Time{})
	cl2, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(ts.clientTLS(t, bob)))
	require.NoError(t, err)
	defer cl2.Close()
	require.NoError(t, cl2.Ping(context.Background()))
	require.True(t, principals(s)["User:BOB-ADMIN"], "%v", s.Connections())

	before := s.Stats().TLSHandshakeFailures
	other, err := testcerts.NewCA("another CA")
	require.NoError(t, err)
	stranger, err := other.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "mallory"}})
	require.NoError(t, err)
	expired := ts.client(t, pkix.Name{CommonName: "late"}, time.Now().Add(-time.Minute))
	for name, cfg := range map[string]*tls.Config{
		"a certificate of another CA": ts.clientTLS(t, stranger),
		"an expired certificate":      ts.clientTLS(t, expired),
		"no certificate":              ts.clientTLS(t, nil),
	} {
		require.Error(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(cfg)), name)
	}
	require.Error(t, roundTrip(t, kgo.SeedBrokers(addr)), "a plaintext client on the TLS port")
	require.GreaterOrEqual(t, s.Stats().TLSHandshakeFailures-before, int64(4))
	require.NoError(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(ts.clientTLS(t, alice))), "the server carries on")

	// A client that trusts another CA refuses the server.
	bad := ts.clientTLS(t, alice)
	bad.RootCAs = other.Pool()
	require.Error(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(bad)))
}

// SASL over TLS (SASL_SSL): the SASL user is the principal.
func TestSASLOverTLS(t *testing.T) {
	ts := newTLSSetup(t, false)
	b, s, addr := testServer(t, spool.Options{}, Options{TLS: ts.files.Config(), SASL: &SASL{Plain: map[string]string{"carol": "pw"}}})
	require.NoError(t, b.CreateTopic(context.Background(), "secure", spool.TopicConfig{}))
	tlsCfg := ts.clientTLS(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(tlsCfg), kgo.SASL(plain.Auth{User: "carol", Pass: "pw"}.AsMechanism()))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Ping(context.Background()))
	require.True(t, principals(s)["User:carol"], "%v", s.Connections())
	require.NoError(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(tlsCfg), kgo.SASL(plain.Auth{User: "carol", Pass: "pw"}.AsMechanism())))
	require.Error(t, roundTrip(t, kgo.SeedBrokers(addr), kgo.DialTLSConfig(tlsCfg), kgo.SASL(plain.Auth{User: "carol", Pass: "wrong"}.AsMechanism())))
}

// A certificate replaced on disk is served to the next connections
// without a restart; a broken replacement keeps the old one.
func TestTLSCertificateReload(t *testing.T) {
	ts := newTLSSetup(t, false)
	_, _, addr := testServer(t, spool.Options{}, Options{TLS: ts.files.Config()})
	served := func() *x509.Certificate {
		conn, err := tls.Dial("tcp", addr, ts.clientTLS(t, nil))
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	first := served()
	require.Equal(t, "broker", first.Subject.CommonName)

	next, err := ts.ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker-rotated"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	_, _, err = next.Write(ts.dir, "server")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return served().Subject.CommonName == "broker-rotated" },
		5*time.Second, 100*time.Millisecond, "the new certificate is served within a second or so")

	require.NoError(t, os.WriteFile(ts.keyFile, []byte("not a key"), 0o600))
	time.Sleep(1100 * time.Millisecond)
	require.Equal(t, "broker-rotated", served().Subject.CommonName, "a broken replacement keeps the certificate that worked")
	require.Error(t, ts.files.Reload())
}

func TestPrincipalMappingRules(t *testing.T) {
	const dn = "CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US"
	for _, c := range []struct {
		rules, want string
		err         bool
	}{
		{"", dn, false},
		{"DEFAULT", dn, false},
		{"RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$2/L,DEFAULT", "duke@javasoft", false},
		{"RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1/U", "DUKE", false},
		{"RULE:^CN=Other,.*$/x/, DEFAULT", dn, false},
		{"RULE:^CN=Other,.*$/x/", "", true}, // no rule applies: the connection is refused
		{"RULE:^CN=(.*?),.*$/$1x/", "Dukex", false},
	} {
		m, err := parsePrincipalRules(c.rules)
		require.NoError(t, err, c.rules)
		got, err := m.apply(dn)
		if c.err {
			require.Error(t, err, c.rules)
			continue
		}
		require.NoError(t, err, c.rules)
		require.Equal(t, c.want, got, c.rules)
	}
	for _, bad := range []string{"RULE:nope", "RULE:a/b", "SOMETHING", "RULE:(/x/", "DEFAULTX", "RULE:a/b/Q"} {
		_, err := parsePrincipalRules(bad)
		require.ErrorIs(t, err, ErrBadPrincipalRules, bad)
	}
	_, err := NewServer(nil, Options{SSLPrincipalMappingRules: "RULE:"})
	require.Error(t, err)
}

func TestLoadTLSFilesRefusals(t *testing.T) {
	ts := newTLSSetup(t, true)
	_, err := LoadTLSFiles("", ts.keyFile, "", nil)
	require.Error(t, err)
	_, err = LoadTLSFiles(ts.certFile, filepath.Join(ts.dir, "missing.key"), "", nil)
	require.Error(t, err)
	empty := filepath.Join(ts.dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("nothing here"), 0o600))
	_, err = LoadTLSFiles(ts.certFile, ts.keyFile, empty, nil)
	require.ErrorContains(t, err, "no PEM certificate")
	old, err := ts.ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "old"}, NotAfter: time.Now().Add(-time.Minute)})
	require.NoError(t, err)
	c, k, err := old.Write(ts.dir, "old")
	require.NoError(t, err)
	_, err = LoadTLSFiles(c, k, "", nil)
	require.ErrorContains(t, err, "expired")
}

// FuzzTLSHandshake feeds arbitrary bytes to a TLS listener as a client's
// first flight: the connection is closed (or waits for more), the server
// never panics and keeps serving.
func FuzzTLSHandshake(f *testing.F) {
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Add([]byte{0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 1, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	ca, err := testcerts.NewCA("fuzz CA")
	require.NoError(f, err)
	pair, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(f, err)
	cert, err := pair.TLS()
	require.NoError(f, err)
	s := &Server{opts: Options{RequestReadTimeout: 200 * time.Millisecond, IdleTimeout: time.Second, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}},
		logger: slog.New(slog.DiscardHandler), principals: principalMapper{{def: true}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		c := newConn(s, tls.Server(server, s.opts.TLS), nil)
		done := make(chan bool, 1)
		go func() { done <- c.handshake(c.nc.(*tls.Conn)) }()
		go func() {
			_, _ = client.Write(data)
			_ = client.Close()
		}()
		select {
		case ok := <-done:
			require.False(t, ok, "garbage is no handshake")
		case <-time.After(5 * time.Second):
			t.Fatal("the handshake did not end")
		}
		server.Close()
	})
}

// A cluster whose every connection is TLS with client certificates: the
// clients' listeners, the followers' fetches and forwarded requests
// between brokers, and Raft and the controller's requests on the
// controller listeners. Replication and a consumer group work as in the
// plaintext cluster.
func TestClusterOverMutualTLS(t *testing.T) {
	ts := newTLSSetup(t, true)
	nodeCert := ts.client(t, pkix.Name{CommonName: "node"}, time.Time{})
	peerTLS := ts.clientTLS(t, nodeCert) // each node shows it when it dials another
	c := newTestCluster(t, 3)
	c.tune = func(cfg *NodeConfig) {
		cfg.Server.TLS = ts.files.Config()
		cfg.PeerTLS = peerTLS
	}
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := ts.client(t, pkix.Name{CommonName: "alice"}, time.Time{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DialTLSConfig(ts.clientTLS(t, alice)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	c.createTopic(ctx, cl, "sealed", 3, 3, nil)
	const n = 90
	for i := range n {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "sealed", Partition: int32(i % 3), Value: []byte{byte(i)}}).FirstErr())
	}
	require.Eventually(t, func() bool {
		for _, nd := range c.running() {
			for p := int32(0); p < 3; p++ {
				part, err := nd.Broker().Partition("sealed", p)
				if err != nil || part.HighWatermark() != n/3 {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the followers copied everything over TLS")
	for id, nd := range c.running() {
		// A start-up probe cut short by its one-second deadline counts
		// too; nothing else fails.
		t.Logf("node %d: %d TLS handshakes failed", id, nd.Server().Stats().TLSHandshakeFailures)
	}

	// The configuration is refused half-done.
	cfg := c.config(1)
	cfg.Server.TLS, cfg.PeerTLS = ts.files.Config(), nil
	_, err = StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
}

// SASL on a cluster node is refused at start, with the reason: the nodes
// cannot authenticate to each other with it.
func TestClusterNodeRefusesSASL(t *testing.T) {
	c := newTestCluster(t, 1)
	cfg := c.config(1)
	cfg.Server.SASL = &SASL{Plain: map[string]string{"a": "b"}}
	_, err := StartNode(cfg)
	require.ErrorIs(t, err, spool.ErrInvalidConfig)
	require.ErrorContains(t, err, "mutual TLS")
}

// Two listeners on one broker: PLAINTEXT for local clients and SASL_SSL for
// others. Each client is told the address of the listener it came in on;
// SASL and TLS are required on the second only.
func TestTwoListeners(t *testing.T) {
	ts := newTLSSetup(t, false)
	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic(context.Background(), "secure", spool.TopicConfig{}))
	s, err := NewServer(b, Options{SASL: &SASL{Plain: map[string]string{"app": "pw"}}})
	require.NoError(t, err)
	plainL, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	secureL, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 2)
	go func() { done <- s.ServeListener(plainL, Listener{Name: "LOCAL"}) }()
	go func() {
		done <- s.ServeListener(secureL, Listener{TLS: ts.files.Config(), SASL: true, AdvertisedHost: "127.0.0.1"})
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		<-done
		<-done
	}()
	port := func(l net.Listener) int32 { return int32(l.Addr().(*net.TCPAddr).Port) }
	told := func(opts ...kgo.Opt) int32 {
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		defer cl.Close()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl)
		require.NoError(t, err)
		require.Len(t, resp.Brokers, 1)
		return resp.Brokers[0].Port
	}
	require.Equal(t, port(plainL), told(kgo.SeedBrokers(plainL.Addr().String())), "the plaintext listener's clients are told its address")
	sasl := kgo.SASL(plain.Auth{User: "app", Pass: "pw"}.AsMechanism())
	require.Equal(t, port(secureL), told(kgo.SeedBrokers(secureL.Addr().String()), kgo.DialTLSConfig(ts.clientTLS(t, nil)), sasl))
	require.NoError(t, roundTrip(t, kgo.SeedBrokers(plainL.Addr().String())), "no SASL on the plaintext listener")
	require.NoError(t, roundTrip(t, kgo.SeedBrokers(secureL.Addr().String()), kgo.DialTLSConfig(ts.clientTLS(t, nil)), sasl))
	require.Error(t, roundTrip(t, kgo.SeedBrokers(secureL.Addr().String())), "plaintext on the SASL_SSL listener")
	require.Error(t, roundTrip(t, kgo.SeedBrokers(secureL.Addr().String()), kgo.DialTLSConfig(ts.clientTLS(t, nil))), "no SASL on the SASL_SSL listener")

	bad, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s2, err := NewServer(b, Options{})
	require.NoError(t, err)
	require.ErrorIs(t, s2.ServeListener(bad, Listener{SASL: true}), ErrInvalidOptions, "SASL without users")
}

// Subjects are written as Java's X500Principal.getName(RFC2253), which
// Kafka's principals are: reverse order, DC and UID by keyword, values
// escaped, other attributes as OIDs with their DER in hex.
func TestDistinguishedNameAsJavaWritesIt(t *testing.T) {
	ca, err := testcerts.NewCA("dn CA")
	require.NoError(t, err)
	dc := asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	cn := asn1.ObjectIdentifier{2, 5, 4, 3}
	serial := asn1.ObjectIdentifier{2, 5, 4, 5}
	p, err := ca.Issue(testcerts.Options{Subject: pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{
		{Type: dc, Value: "com"}, {Type: dc, Value: "corp"}, {Type: serial, Value: "42"},
		{Type: cn, Value: "svc"}, {Type: cn, Value: "Smith, J+r"},
	}}})
	require.NoError(t, err)
	require.Equal(t, `CN=Smith\, J\+r,CN=svc,2.5.4.5=#13023432,DC=corp,DC=com`, distinguishedName(p.Cert))
	p, err = ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"acme"}, Country: []string{"US"}}})
	require.NoError(t, err)
	require.Equal(t, "CN=alice,OU=eng,O=acme,C=US", distinguishedName(p.Cert))
}

// A certificate the handshake did not verify (ClientAuth
// RequireAnyClientCert takes any) names no one: the client stays
// User:ANONYMOUS.
func TestUnverifiedCertificateIsAnonymous(t *testing.T) {
	ts := newTLSSetup(t, false)
	cert, err := tls.LoadX509KeyPair(ts.certFile, ts.keyFile)
	require.NoError(t, err)
	_, s, addr := testServer(t, spool.Options{}, Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}})
	forger, err := testcerts.NewCA("forger")
	require.NoError(t, err)
	admin, err := forger.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "admin"}})
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(ts.clientTLS(t, admin)))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Ping(context.Background()))
	require.Equal(t, map[string]bool{"User:ANONYMOUS": true}, principals(s))
}
