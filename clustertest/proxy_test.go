package clustertest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lineServer is a target for a link: it sends back every line it reads,
// hands each to the test (got), and writes what the test pushes (push) on
// every connection, unasked.
type lineServer struct {
	ln   net.Listener
	got  chan string
	eofs chan struct{}

	mu    sync.Mutex
	conns []net.Conn
}

func newLineServer(t *testing.T) *lineServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &lineServer{ln: ln, got: make(chan string, 100), eofs: make(chan struct{}, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						if errors.Is(err, io.EOF) {
							s.eofs <- struct{}{}
						}
						return
					}
					s.got <- line
					c.Write([]byte(line))
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	return s
}

func (s *lineServer) push(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Write([]byte(line))
	}
}

// quiet is how long a test listens for bytes that must not arrive. A
// slow machine can only make such a check pass wrongly, never fail
// wrongly.
const quiet = 300 * time.Millisecond

// readLine reads a line from r within a generous deadline.
func readLine(t *testing.T, c net.Conn, r *bufio.Reader) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	return line
}

// requireNoLine checks that nothing arrives on c for a while.
func requireNoLine(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(quiet))
	line, err := r.ReadString('\n')
	require.Error(t, err, "read %q through a blocked direction", line)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	// A deadline's timeout leaves the buffered reader usable.
}

func requireGot(t *testing.T, s *lineServer, want string) {
	t.Helper()
	select {
	case got := <-s.got:
		require.Equal(t, want, got)
	case <-time.After(20 * time.Second):
		t.Fatalf("the target never received %q", want)
	}
}

func requireNotGot(t *testing.T, s *lineServer) {
	t.Helper()
	select {
	case got := <-s.got:
		t.Fatalf("the target received %q through a blocked direction", got)
	case <-time.After(quiet):
	}
}

// TestLink drives one link proxy through its states with a connection
// that stays open across them: a cut holds both directions of an open
// connection (not only new ones) and the heal delivers what was held, in
// order; each one-way block holds its direction only; a delay holds every
// chunk for at least its length; a half-close passes through; a target
// that is down closes the connection at once; closing the link ends its
// connections.
func TestLink(t *testing.T) {
	s := newLineServer(t)
	k, err := newLink("127.0.0.1", 1, 2, KafkaListener, s.ln.Addr().String())
	require.NoError(t, err)
	defer k.close()
	require.Equal(t, "link 1→2 (kafka)", k.String())

	c, err := net.Dial("tcp", k.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(line string) {
		_, err := c.Write([]byte(line))
		require.NoError(t, err)
	}

	send("a\n")
	requireGot(t, s, "a\n")
	require.Equal(t, "a\n", readLine(t, c, r))
	require.True(t, k.Healthy())

	// Cut: the open connection passes nothing either way.
	k.Cut()
	require.False(t, k.Healthy())
	send("b\n")
	requireNotGot(t, s)
	s.push("pushed-1\n")
	requireNoLine(t, c, r)
	k.Heal()
	requireGot(t, s, "b\n")
	require.Equal(t, "pushed-1\n", readLine(t, c, r))
	require.Equal(t, "b\n", readLine(t, c, r))

	// Backward blocked: the target gets the request and acts on it; the
	// answer is held.
	k.Block(Backward)
	require.True(t, k.Blocked(Backward))
	require.False(t, k.Blocked(Forward))
	send("c\n")
	requireGot(t, s, "c\n")
	requireNoLine(t, c, r)
	k.Heal()
	require.Equal(t, "c\n", readLine(t, c, r))

	// Forward blocked: the request is held; what the target says flows.
	k.Block(Forward)
	send("d\n")
	requireNotGot(t, s)
	s.push("pushed-2\n")
	require.Equal(t, "pushed-2\n", readLine(t, c, r))
	k.Heal()
	requireGot(t, s, "d\n")
	require.Equal(t, "d\n", readLine(t, c, r))

	// A new connection during a cut is accepted and held.
	k.Cut()
	c2, err := net.Dial("tcp", k.Addr())
	require.NoError(t, err)
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	_, err = c2.Write([]byte("e\n"))
	require.NoError(t, err)
	requireNotGot(t, s)
	k.Heal()
	requireGot(t, s, "e\n")
	require.Equal(t, "e\n", readLine(t, c2, r2))

	// A delay holds each chunk, each way, at least that long.
	const delay = 200 * time.Millisecond
	k.Delay(delay)
	start := time.Now()
	send("f\n")
	require.Equal(t, "f\n", readLine(t, c, r))
	require.GreaterOrEqual(t, time.Since(start), 2*delay, "a round trip through a delayed link")
	k.Heal()

	// A half-close reaches the target.
	require.NoError(t, c2.(*net.TCPConn).CloseWrite())
	select {
	case <-s.eofs:
	case <-time.After(20 * time.Second):
		t.Fatal("the target never saw the end of the stream")
	}

	require.Equal(t, int64(2), k.Accepted())
	require.Positive(t, k.Bytes(Forward))
	require.Positive(t, k.Bytes(Backward))

	// Closing the link ends its connections.
	k.close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = r.ReadString('\n')
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, k.Open())
}

// TestLinkTargetDown: a connection through a link to a listener nothing
// listens on is closed at once, as a refused connection.
func TestLinkTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	k, err := newLink("127.0.0.1", 1, 2, ControllerListener, addr)
	require.NoError(t, err)
	defer k.close()
	c, err := net.Dial("tcp", k.Addr())
	require.NoError(t, err)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}
