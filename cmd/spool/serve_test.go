package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testcerts"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// servedBroker is a "spool serve" process started by a test.
type servedBroker struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has exited and its stderr is read

	mu     sync.Mutex
	stderr strings.Builder
}

// startServe runs the spool binary's serve command on 127.0.0.1:0 with
// the extra arguments and waits for the line that names its address. The
// process is killed when the test ends if it still runs; its stderr is
// logged when the test fails.
func startServe(t *testing.T, args ...string) *servedBroker {
	t.Helper()
	bin := spoolBinary(t)
	s := &servedBroker{done: make(chan struct{})}
	base := []string{"serve", "--listen", "127.0.0.1:0"}
	if slices.Contains(args, "--listeners") {
		base = base[:1]
	}
	s.cmd = exec.Command(bin, append(base, args...)...)
	pipe, err := s.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	addrc := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if a, ok := strings.CutPrefix(line, "spool: serving on "); ok {
				addrc <- a
			}
		}
		io.Copy(io.Discard, pipe)
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("spool serve stderr:\n%s", s.log())
		}
	})
	select {
	case s.addr = <-addrc:
	case <-s.done:
		s.cmd.Wait()
		t.Fatalf("spool serve exited before listening: %v\n%s", s.cmd.ProcessState, s.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("spool serve did not say where it listens\n%s", s.log())
	}
	return s
}

func (s *servedBroker) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// stop sends sig and returns the exit status.
func (s *servedBroker) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(sig))
	waited := make(chan error, 1)
	go func() {
		<-s.done // Wait must not run before the stderr reader is done
		waited <- s.cmd.Wait()
	}()
	select {
	case err := <-waited:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("spool serve did not stop within 30s of %v", sig)
		return -1
	}
}

// TestServe runs "spool serve", drives it with franz-go, and stops it with
// SIGTERM: the process must exit 0 and leave a clean data directory.
func TestServe(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, "--data", data, "--log-level", "debug")
	require.Contains(t, s.log(), "msg=listening addr="+s.addr)

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.RequestRetries(2))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// ApiVersions: what the server advertises is what transport implements.
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, resp.ErrorCode)
	keys := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		keys[k.ApiKey] = true
	}
	require.True(t, keys[kmsg.ApiVersions.Int16()])

	// Metadata: the broker names itself at the address it listens on.
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, meta.Brokers, 1)
	require.Equal(t, s.addr, fmt.Sprintf("%s:%d", meta.Brokers[0].Host, meta.Brokers[0].Port))

	// Create a topic, produce (idempotent, acks=all: kgo's defaults) and
	// consume it back.
	const topic, n = "serve-test", 100
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 3, 1
	create.Topics = append(create.Topics, ct)
	cresp, err := create.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, cresp.Topics[0].ErrorCode, "%v", cresp.Topics[0].ErrorMessage)

	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	consumer, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer consumer.Close()
	got := map[string]int64{} // value -> offset
	last := map[int32]int64{}
	for len(got) < n {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d", len(got), n)
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s-%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			_, dup := got[string(r.Value)]
			require.False(t, dup, "%s consumed twice", r.Value)
			if prev, ok := last[r.Partition]; ok {
				require.Greater(t, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			got[string(r.Value)] = r.Offset
		})
	}
	for _, r := range recs {
		require.Equal(t, r.Offset, got[string(r.Value)], "%s", r.Value)
	}
	consumer.Close()
	cl.Close()

	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	require.Contains(t, s.log(), "msg=stopped")
	code, stdout, stderr := runTool(t, "check", data)
	require.Equal(t, exitOK, code, "%s%s", stdout, stderr)
	require.Contains(t, stdout, ": clean")
}

// TestServeSignals: SIGINT stops the server as SIGTERM does, also with no
// client ever connected and with SASL configured.
func TestServeSignals(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--sasl-plain", "alice:secret,bob:pw", "--sasl-scram-sha-256", "carol:pw2")
	require.Contains(t, s.log(), "sasl=true")
	require.Equal(t, 0, s.stop(t, syscall.SIGINT))
}

// TestServeErrors: usage errors exit 2, a directory in use or an address
// that cannot be listened on exit 1.
func TestServeErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--sasl-plain", "nopassword"},
		{"--sasl-scram-sha-512", ":pw"},
		{"--advertised-addr", "localhost"},
		{"--advertised-addr", "localhost:0"},
		{"--listen", "localhost:99999"},
		{"--node-id", "-1"},
		{"--log-level", "loud"},
		{"--max-connections", "0"},
		{"--max-connections-per-ip", "-2"},
		{"--fetch-session-cache-slots", "-1"},
		{"--queued-max-request-bytes", "0"},
		{"--socket-request-max-bytes", "4"},
		{"--socket-request-max-bytes", "2000000", "--queued-max-request-bytes", "1999999"},
		{"--connections-max-idle", "0s"},
		{"--request-read-timeout", "-1s"},
		{"--tls-client-ca", "ca.pem"},
		{"--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"},
		{"--ssl-principal-mapping-rules", "RULE:broken"},
		{"--config-strict"},
		{"--num-partitions", "-1"},
		{"--log-cleanup-policy", "shred"},
		{"extra"},
	} {
		code, _, stderr := runTool(t, append([]string{"serve", "--data", t.TempDir()}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "Usage: spool serve", args)
	}

	code, stdout, _ := runTool(t, "help", "serve")
	require.Equal(t, exitOK, code)
	for _, flag := range []string{"--listen", "--advertised-addr", "--sasl-scram-sha-512", "--log-level", "--flush",
		"--max-connections", "--max-connections-per-ip", "--socket-request-max-bytes", "--queued-max-request-bytes",
		"--connections-max-idle", "--request-read-timeout", "--tls-cert", "--tls-key", "--tls-client-ca", "--ssl-principal-mapping-rules", "--config", "--config-strict", "--num-partitions", "--log-retention"} {
		require.Contains(t, stdout, flag)
	}

	// Two servers on one directory: the second says it is in use.
	data := t.TempDir()
	s := startServe(t, "--data", data)
	code, _, stderr := runTool(t, "serve", "--data", data, "--listen", "127.0.0.1:0")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "in use")

	// A port already taken.
	code, _, stderr = runTool(t, "serve", "--data", t.TempDir(), "--listen", s.addr)
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "address already in use")
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
}

// TestServeLimits: the connection and request-memory flags reach the
// server. Two connections from 127.0.0.1 are served and a third is closed
// at once (--max-connections-per-ip); a request over
// --socket-request-max-bytes closes its connection; one that trickles is
// closed after --request-read-timeout; one that does not fit in
// --queued-max-request-bytes beside another waits unanswered until it
// does.
func TestServeLimits(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--max-connections-per-ip", "3",
		"--socket-request-max-bytes", "1048576", "--queued-max-request-bytes", "1572864",
		"--request-read-timeout", "2s", "--connections-max-idle", "1m")
	require.Contains(t, s.log(), "max_connections_per_ip=3 queued_max_request_bytes=1572864")
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// apiVersions is an ApiVersions v0 request padded to size bytes after
	// its size prefix.
	apiVersions := func(size int) []byte {
		f := binary.BigEndian.AppendUint32(nil, uint32(size))
		f = append(f, 0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff)
		return append(f, make([]byte, size-10)...)
	}
	answered := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(c, sz[:]); err != nil {
			return false
		}
		_, err := io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(sz[:])))
		return err == nil
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}

	// A 1 MiB request, all but its last byte: it holds 1 MiB of the
	// 1.5 MiB pool.
	holder := dial()
	frame := apiVersions(1 << 20)
	_, err := holder.Write(frame[:len(frame)-1])
	require.NoError(t, err)
	// The server reserves the holder's size when it reads it; give it the
	// time to, so that the waiter comes second (a slow machine could
	// otherwise serve the waiter first and make the holder wait).
	time.Sleep(500 * time.Millisecond)
	// A second 1 MiB request waits for room.
	waiter := dial()
	_, err = waiter.Write(apiVersions(1 << 20))
	require.NoError(t, err)
	waiter.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = waiter.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "answered without room in the pool")
	// The holder completes: both are answered.
	_, err = holder.Write(frame[len(frame)-1:])
	require.NoError(t, err)
	require.True(t, answered(holder))
	require.True(t, answered(waiter))

	// A third connection from 127.0.0.1 is refused; the holder and waiter
	// and it make three, and a fourth is closed at once.
	third := dial()
	_, err = third.Write(apiVersions(64))
	require.NoError(t, err)
	require.True(t, answered(third))
	require.True(t, closed(dial()), "a fourth connection from one address was served")

	// Over --socket-request-max-bytes: closed.
	third.Write(binary.BigEndian.AppendUint32(nil, 1<<20+1))
	require.True(t, closed(third))
	// A trickle is closed after --request-read-timeout.
	_, err = waiter.Write(frame[:100])
	require.NoError(t, err)
	require.True(t, closed(waiter), "a trickling request was not closed")
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
}

// spool serve over mutual TLS: a client with a certificate of the CA
// produces and consumes; one without is refused; a certificate replaced on
// disk is served after SIGHUP.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("serve CA")
	require.NoError(t, err)
	srv, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	certFile, keyFile, err := srv.Write(dir, "server")
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM, 0o600))
	s := startServe(t, "--data", t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile,
		"--ssl-principal-mapping-rules", "RULE:^CN=([^,]*)$/$1/,DEFAULT")
	require.Contains(t, s.log(), "tls=true")

	client, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "app"}})
	require.NoError(t, err)
	cert, err := client.TLS()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}),
		kgo.DefaultProduceTopic("t"), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("sealed")}).FirstErr())
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err0())
	require.Equal(t, "sealed", string(fs.Records()[0].Value))

	_, err = tls.Dial("tcp", s.addr, &tls.Config{RootCAs: ca.Pool()})
	if err == nil {
		t.Log("the handshake completes client side before the server's verdict (TLS 1.3); the server closes it")
	}
	anon, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool()}), kgo.RetryTimeout(2*time.Second))
	require.NoError(t, err)
	defer anon.Close()
	require.Error(t, anon.Ping(ctx), "no client certificate: refused")

	rotated, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker-rotated"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	_, _, err = rotated.Write(dir, "server")
	require.NoError(t, err)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		conn, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}})
		if err != nil {
			return false
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName == "broker-rotated"
	}, 10*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(s.log(), "TLS files reloaded") }, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, 0, s.stop(t, syscall.SIGINT))
}

// spool serve --listeners: PLAINTEXT for local clients and SASL_SSL for
// others, each advertised at its own address.
func TestServeListeners(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("listeners CA")
	require.NoError(t, err)
	srv, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(t, err)
	certFile, keyFile, err := srv.Write(dir, "server")
	require.NoError(t, err)
	s := startServe(t, "--data", t.TempDir(), "--listeners", "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
		"--listener-security-protocol-map", "EXTERNAL:SASL_SSL", "--advertised-listeners", "EXTERNAL://127.0.0.1:19093",
		"--tls-cert", certFile, "--tls-key", keyFile, "--sasl-plain", "app:pw")
	addrs := map[string]string{}
	for _, line := range strings.Split(s.log(), "\n") {
		if rest, ok := strings.CutPrefix(line, "spool: listener "); ok {
			name, addr, _ := strings.Cut(rest, " on ")
			addrs[name] = addr
		}
	}
	require.Len(t, addrs, 2, s.log())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	brokerPort := func(opts ...kgo.Opt) int32 {
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		defer cl.Close()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp.Brokers[0].Port
	}
	_, plainPort, _ := strings.Cut(addrs["PLAINTEXT"], "127.0.0.1:")
	require.Equal(t, plainPort, fmt.Sprint(brokerPort(kgo.SeedBrokers(addrs["PLAINTEXT"]))))
	require.Equal(t, int32(19093), brokerPort(kgo.SeedBrokers(addrs["EXTERNAL"]),
		kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool()}), kgo.SASL(plain.Auth{User: "app", Pass: "pw"}.AsMechanism())),
		"the EXTERNAL listener's clients are told its advertised address")
	plainClient, err := kgo.NewClient(kgo.SeedBrokers(addrs["EXTERNAL"]), kgo.RetryTimeout(2*time.Second))
	require.NoError(t, err)
	defer plainClient.Close()
	require.Error(t, plainClient.Ping(ctx), "plaintext on the SASL_SSL listener")
	require.Equal(t, 0, s.stop(t, syscall.SIGINT))

	for _, args := range [][]string{
		{"--listeners", "PLAINTEXT://127.0.0.1:0", "--listen", "127.0.0.1:0"},
		{"--listeners", "SSL://127.0.0.1:0"},
		{"--listeners", "SASL_PLAINTEXT://127.0.0.1:0"},
		{"--listeners", "INTERNAL://127.0.0.1:0"},
		{"--listeners", "PLAINTEXT://127.0.0.1:0", "--advertised-listeners", "OTHER://h:1"},
		{"--listeners", "PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"},
		{"--advertised-listeners", "PLAINTEXT://h:1"},
		{"--listeners", "nonsense"},
		{"--inter-broker-listener-name", "PLAINTEXT"},
		{"--listeners", "PLAINTEXT://127.0.0.1:0", "--inter-broker-listener-name", "PLAINTEXT"},
		{"--listeners", "PLAINTEXT://127.0.0.1:0", "--controller-quorum-voters", "1@127.0.0.1:9", "--inter-broker-listener-name", "NOPE"},
	} {
		code, _, stderr := runTool(t, append([]string{"serve", "--data", t.TempDir()}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
}

// TestServeFetchSessionSlots: --fetch-session-cache-slots reaches the
// server. A full fetch at session epoch 0 gets a session id from a server
// with the default slots, and none from one started with 0 - the consumer
// then goes on with full fetches.
func TestServeFetchSessionSlots(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		session bool
	}{{nil, true}, {[]string{"--fetch-session-cache-slots", "0"}, false}} {
		s := startServe(t, append([]string{"--data", t.TempDir()}, tc.args...)...)
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.RequestRetries(2))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		ct := kmsg.NewPtrCreateTopicsRequest()
		ctt := kmsg.NewCreateTopicsRequestTopic()
		ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "fs", 1, 1
		ct.Topics = append(ct.Topics, ctt)
		ctResp, err := ct.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Zero(t, ctResp.Topics[0].ErrorCode)

		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = 1 << 20
		req.SessionEpoch = 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "fs", ctResp.Topics[0].TopicID // kgo sends the newest version both sides know
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var resp *kmsg.FetchResponse
		// The topic's leadership may take a moment to reach metadata.
		for i := 0; ; i++ {
			resp, err = req.RequestWith(ctx, cl)
			require.NoError(t, err)
			require.Zero(t, resp.ErrorCode)
			require.Len(t, resp.Topics, 1)
			if resp.Topics[0].Partitions[0].ErrorCode == 0 || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		require.Equal(t, tc.session, resp.SessionID != 0, "%v: session id %d", tc.args, resp.SessionID)
		cancel()
		cl.Close()
		require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
	}
}
