package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/race"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Tests of the connection and request-memory limits (issue 17, part 4):
// Kafka's max.connections, max.connections.per.ip,
// socket.request.max.bytes and queued.max.request.bytes, and the request
// read timeout that closes a client trickling a request.

// dialFrom connects to addr from the loopback address from (127.0.0.0/8
// is all the loopback's on Linux), so that one test can be several
// clients' IP addresses.
func dialFrom(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// apiVersionsFrame is an ApiVersions v0 request of exactly size bytes after
// its size prefix: padding after the (empty) v0 body, which decoding
// ignores, makes a large request any API accepts.
func apiVersionsFrame(corr int32, size int) []byte {
	f := fzFrame(kmsg.ApiVersions.Int16(), 0, corr, "limits", nil)
	f = append(f, make([]byte, size-(len(f)-4))...)
	binary.BigEndian.PutUint32(f, uint32(size))
	return f
}

// readApiVersions reads the answer to an ApiVersions v0 request sent
// with corr.
func readApiVersions(t testing.TB, c net.Conn, corr int32) {
	t.Helper()
	resp := negRead(t, c, kmsg.ApiVersions.Int16(), 0, corr).(*kmsg.ApiVersionsResponse)
	require.Zero(t, resp.ErrorCode)
}

// unanswered checks that nothing comes back on c for a while: the server
// has not read, or not served, what was sent.
func unanswered(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	require.Zero(t, n, "the server answered")
	require.True(t, isTimeout(err), "want no answer yet, got %v", err)
}

// The pool's own rules, without sockets: a frame larger than the pool is
// refused at once; one that fits is granted at once, even past older
// waiters (first fit); waiters are granted as room comes back; a wait ends
// at its deadline or when the connection stops, leaving nothing behind.
func TestRequestMemoryPool(t *testing.T) {
	far := time.Now().Add(time.Minute)
	m := newRequestMemory(100)
	require.Error(t, m.acquire(101, far, nil))
	require.NoError(t, m.acquire(0, far, nil))
	require.NoError(t, m.acquire(60, far, nil))

	// A frame of 50 waits; one of 30 comes after it and passes it.
	big := make(chan error, 1)
	go func() { big <- m.acquire(50, far, nil) }()
	require.Eventually(t, func() bool { _, _, w := m.stats(); return w == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, m.acquire(30, far, nil))
	used, peak, waiting := m.stats()
	require.Equal(t, [3]int64{90, 90, 1}, [3]int64{used, peak, int64(waiting)})

	// 60 back: 50 fits now (30 + 50).
	m.release(60)
	require.NoError(t, <-big)
	used, peak, waiting = m.stats()
	require.Equal(t, [3]int64{80, 90, 0}, [3]int64{used, peak, int64(waiting)})

	// A wait that reaches its deadline, and one whose connection stops,
	// leave no waiter and take nothing.
	require.ErrorIs(t, m.acquire(40, time.Now().Add(20*time.Millisecond), nil), errRequestTimeout)
	stop := make(chan struct{})
	stopped := make(chan error, 1)
	go func() { stopped <- m.acquire(40, far, stop) }()
	require.Eventually(t, func() bool { _, _, w := m.stats(); return w == 1 }, 5*time.Second, time.Millisecond)
	close(stop)
	require.ErrorIs(t, <-stopped, errConnStopping)
	m.release(30)
	m.release(50)
	used, peak, waiting = m.stats()
	require.Equal(t, [3]int64{0, 90, 0}, [3]int64{used, peak, int64(waiting)})

	// Waiters granted together once the room is back, each that fits.
	require.NoError(t, m.acquire(100, far, nil))
	got := make(chan error, 3)
	for _, n := range []int64{40, 30, 30} {
		go func() { got <- m.acquire(n, far, nil) }()
	}
	require.Eventually(t, func() bool { _, _, w := m.stats(); return w == 3 }, 5*time.Second, time.Millisecond)
	m.release(100)
	for range 3 {
		require.NoError(t, <-got)
	}
	used, _, _ = m.stats()
	require.Equal(t, int64(100), used)

	// No bound: counted, never waits.
	u := newRequestMemory(-1)
	require.NoError(t, u.acquire(1<<40, far, nil))
	used, peak, _ = u.stats()
	require.Equal(t, [2]int64{1 << 40, 1 << 40}, [2]int64{used, peak})
}

// Spare buffers (served Produce frames): a large frame reads into the
// most recently kept spare of capacity n to 2n, and its reservation grows
// to the spare's capacity - only if the pool has room for that, so used
// still bounds what frames hold; small frames and too-large spares are
// left alone; the spares kept stay within spareMaxBytes, the oldest given
// up first.
func TestRequestMemorySpares(t *testing.T) {
	far := time.Now().Add(time.Minute)
	m := newRequestMemory(1 << 20)
	same := func(a, b []byte) bool { return &a[:1][0] == &b[:1][0] }

	old := make([]byte, 100<<10)
	recent := make([]byte, 100<<10)
	m.keep(old)
	m.keep(recent)
	require.NoError(t, m.acquire(90<<10, far, nil))
	b, held := m.buffer(90<<10, 90<<10)
	require.True(t, same(b, recent), "the most recent spare first")
	require.Equal(t, [2]int{90 << 10, 100 << 10}, [2]int{len(b), held})
	used, _, _ := m.stats()
	require.Equal(t, int64(100<<10), used, "the spare's whole capacity is held")
	m.release(int64(held))

	// Too small a frame for the spare (over 2x), a small frame, a frame
	// larger than the spare: fresh buffers.
	for _, n := range []int{40 << 10, 1000, 120 << 10} {
		b, held = m.buffer(n, n)
		require.False(t, same(b, old), "frame of %d bytes", n)
		require.Equal(t, [2]int{n, n}, [2]int{len(b), held})
	}

	// No room in the pool for what the spare holds beyond the frame's
	// reservation (the frame's 95 KiB and others' take all but 4 KiB of
	// the pool; the spare needs 5 KiB more): a fresh buffer, and nothing
	// more taken.
	require.NoError(t, m.acquire(1<<20-4<<10, far, nil))
	b, held = m.buffer(95<<10, 95<<10)
	require.False(t, same(b, old))
	require.Equal(t, 95<<10, held)
	used, _, _ = m.stats()
	require.Equal(t, int64(1<<20-4<<10), used)
	m.release(1 << 10)
	b, held = m.buffer(95<<10, 95<<10)
	require.True(t, same(b, old), "room back: the spare serves")
	require.Equal(t, 100<<10, held)
	used, _, _ = m.stats()
	require.Equal(t, int64(1<<20), used)

	// The bound: the oldest go first; a buffer over it is not kept.
	m = newRequestMemory(-1)
	const size = spareMaxBytes / 4
	var kept [][]byte
	for range 6 {
		kept = append(kept, make([]byte, size))
		m.keep(kept[len(kept)-1])
	}
	m.keep(make([]byte, spareMaxBytes+1))
	m.keep(make([]byte, spareMinFrame-1))
	require.Len(t, m.spares, 4)
	require.Equal(t, spareMaxBytes, m.spareBytes)
	for i := 5; i >= 2; i-- {
		b, _ = m.buffer(size, size)
		require.True(t, same(b, kept[i]), "spare %d", i)
	}
	require.Empty(t, m.spares)
	require.Zero(t, m.spareBytes)
}

// NewServer refuses a request memory pool smaller than the largest request
// a connection may send (Kafka's rule: queued.max.request.bytes >=
// socket.request.max.bytes), which could never be read.
func TestNewServerRefusesPoolBelowRequestSize(t *testing.T) {
	b, err := spool.Open(t.TempDir(), negBrokerOptions)
	require.NoError(t, err)
	defer b.Close()
	for _, opts := range []Options{
		{QueuedMaxRequestBytes: DefaultMaxRequestBytes - 1},
		{QueuedMaxRequestBytes: 1 << 20, MaxRequestBytes: 2 << 20},
		{QueuedMaxRequestBytes: 1 << 20, MaxRequestBytes: 1 << 20, MaxPreAuthBytes: 2 << 20},
	} {
		_, err := NewServer(b, opts)
		require.ErrorIs(t, err, ErrInvalidOptions, "%+v", opts)
	}
	for _, opts := range []Options{
		{QueuedMaxRequestBytes: DefaultMaxRequestBytes},
		{QueuedMaxRequestBytes: -1, MaxRequestBytes: 1 << 30},
		{MaxConnections: -1, MaxConnectionsPerIP: -1},
	} {
		_, err := NewServer(b, opts)
		require.NoError(t, err, "%+v", opts)
	}
}

// queued.max.request.bytes: a request that does not fit in the pool is
// not read until it does - its connection waits, memory does not grow -
// while a smaller one that fits is read and served past it; each is
// served once room comes back, and the pool never holds more than its
// size.
func TestQueuedMaxRequestBytesWaitsForRoom(t *testing.T) {
	const pool = 4 << 20
	_, s, addr := testServer(t, negBrokerOptions, Options{MaxRequestBytes: pool, QueuedMaxRequestBytes: pool})
	negAlive(t, addr)

	// A: a 3 MiB request, half sent. Its whole size is reserved.
	a := negDial(t, addr)
	fa := apiVersionsFrame(1, 3<<20)
	negWrite(t, a, fa[:len(fa)/2])
	require.Eventually(t, func() bool { return s.Stats().RequestBytesInFlight == 3<<20 }, 5*time.Second, time.Millisecond)

	// C: a 2 MiB request, all sent; 3 + 2 MiB do not fit, so it waits
	// unread.
	c := negDial(t, addr)
	negWrite(t, c, apiVersionsFrame(3, 2<<20))
	require.Eventually(t, func() bool { return s.Stats().RequestsWaitingForMemory == 1 }, 5*time.Second, time.Millisecond)
	unanswered(t, c)

	// B: a small request fits beside A and is served while C waits.
	bc := negDial(t, addr)
	negWrite(t, bc, apiVersionsFrame(2, 64<<10))
	readApiVersions(t, bc, 2)
	st := s.Stats()
	require.Equal(t, int64(3<<20), st.RequestBytesInFlight)
	require.Equal(t, 1, st.RequestsWaitingForMemory)

	// A completes: it is served, and C gets its room and is served.
	negWrite(t, a, fa[len(fa)/2:])
	readApiVersions(t, a, 1)
	readApiVersions(t, c, 3)
	require.Eventually(t, func() bool { return s.Stats().RequestBytesInFlight == 0 }, 5*time.Second, time.Millisecond)
	st = s.Stats()
	require.Zero(t, st.RequestsWaitingForMemory)
	require.LessOrEqual(t, st.PeakRequestBytesInFlight, int64(pool))
	require.GreaterOrEqual(t, st.PeakRequestBytesInFlight, int64(3<<20))
	require.Zero(t, st.RequestReadTimeouts)
	negAlive(t, addr)
}

// A slow loris - a connection that announces a large request and trickles
// it - is closed once the request read timeout passes, though it never
// stops sending, and its memory goes back to the pool; so is one whose
// request waited that long for room. Neither is answered.
func TestRequestReadTimeoutClosesSlowLoris(t *testing.T) {
	const timeout = 500 * time.Millisecond
	const pool = 2 << 20
	_, s, addr := testServer(t, negBrokerOptions, Options{MaxRequestBytes: pool, QueuedMaxRequestBytes: pool, RequestReadTimeout: timeout})
	negAlive(t, addr)
	leaks := negGoroutines(t)

	// The loris: 1.5 MiB announced, then one byte each 50 ms.
	loris := negDial(t, addr)
	frame := apiVersionsFrame(1, 3<<19)
	negWrite(t, loris, frame[:20])
	require.Eventually(t, func() bool { return s.Stats().RequestBytesInFlight == 3<<19 }, 5*time.Second, time.Millisecond)
	trickling, giveUp := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(trickling)
		for i := 20; i < len(frame); i++ {
			select {
			case <-giveUp: // the test failed: the server never closed it
				return
			case <-time.After(50 * time.Millisecond):
			}
			loris.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := loris.Write(frame[i : i+1]); err != nil {
				return // closed by the server
			}
		}
	}()
	defer func() { close(giveUp); <-trickling }()
	// Behind it, a 1 MiB request that cannot fit until the loris goes.
	waiter := negDial(t, addr)
	negWrite(t, waiter, apiVersionsFrame(2, 1<<20)[:100])
	require.Eventually(t, func() bool { return s.Stats().RequestsWaitingForMemory == 1 }, 5*time.Second, time.Millisecond)

	// Both are closed, unanswered, once the timeout passes (negClosed
	// gives up after 10 s: without the timeout they would stay for the
	// 10 minutes of IdleTimeout).
	negClosed(t, loris)
	negClosed(t, waiter)
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.RequestBytesInFlight == 0 && st.RequestsWaitingForMemory == 0 && st.RequestReadTimeouts == 2
	}, 5*time.Second, time.Millisecond, "%+v", s.Stats())
	negAlive(t, addr)
	leaks()
}

// max.connections and max.connections.per.ip with Kafka's semantics: a
// connection from an address at its limit is closed at once; at the
// server's limit new connections are not accepted - they wait, unserved,
// in the listen backlog - until one closes, and then they are served.
func TestMaxConnections(t *testing.T) {
	_, s, addr := testServer(t, negBrokerOptions, Options{MaxConnections: 3, MaxConnectionsPerIP: 2})
	call := func(c net.Conn, corr int32) {
		t.Helper()
		negWrite(t, c, apiVersionsFrame(corr, 64))
		readApiVersions(t, c, corr)
	}

	a := dialFrom(t, "127.0.0.1", addr)
	call(a, 1)
	b := dialFrom(t, "127.0.0.1", addr)
	call(b, 2)
	// A third from 127.0.0.1: closed as soon as accepted.
	refused := dialFrom(t, "127.0.0.1", addr)
	negClosed(t, refused)
	require.Equal(t, int64(1), s.Stats().RefusedConnections)

	// Another address still gets in: three open.
	d := dialFrom(t, "127.0.0.2", addr)
	call(d, 3)
	require.Equal(t, 3, s.Stats().Connections)

	// A fourth, from a fresh address: the kernel completes the handshake,
	// the server does not accept it, nothing is served.
	e := dialFrom(t, "127.0.0.3", addr)
	negWrite(t, e, apiVersionsFrame(4, 64))
	unanswered(t, e)
	require.Equal(t, 3, s.Stats().Connections)

	// One closes: the waiting connection is accepted and served.
	a.Close()
	readApiVersions(t, e, 4)
	call(b, 5)
	call(d, 6)
	st := s.Stats()
	require.Equal(t, 3, st.Connections)
	require.Equal(t, int64(1), st.RefusedConnections)
}

// flakyListener fails its first Accept calls with err, then accepts.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// Out of file descriptors (EMFILE, ENFILE) or kernel buffers, Accept
// fails for a while; the server waits and accepts again instead of
// stopping, as a flood of connections must not end it.
func TestServeSurvivesAcceptFailures(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS} {
		t.Run(errno.Error(), func(t *testing.T) {
			b, err := spool.Open(t.TempDir(), negBrokerOptions)
			require.NoError(t, err)
			defer b.Close()
			s, err := NewServer(b, Options{})
			require.NoError(t, err)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			fl := &flakyListener{Listener: l, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}}
			fl.fails.Store(3)
			served := make(chan error, 1)
			go func() { served <- s.Serve(fl) }()
			negAlive(t, l.Addr().String())
			require.Less(t, fl.fails.Load(), int32(0), "every failure was seen")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-served, ErrServerClosed)
		})
	}
}

// vmRSS is this process's resident set, from /proc/self/status.
func vmRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status (%v)", sc.Err())
}

// The flood of issue 17 against a server with the default limits, while a
// producer and a consumer (franz-go) go on working: 2,000 idle
// connections from one address, 200 that announce a 100 MB request and
// trickle it at a byte a second, and ten that send 99 MB of a 100 MB
// request and stop. Every client sits on its own loopback address, as
// hosts would. What must hold:
//   - the request memory never exceeds its pool (QueuedMaxRequestBytes,
//     256 MiB), and the process's resident memory grows by no more than the
//     pool and a little (without the limits it grew by about 1 GB);
//   - connections from the idle flood's address beyond
//     MaxConnectionsPerIP are refused, the rest stay open;
//   - every trickling or stalled connection is closed once the request
//     read timeout passes, and its memory returned;
//   - the producer's records are acknowledged and consumed during the
//     flood - while the pool is full of stalled requests - and after it.
//
// Everything is the default except the request read timeout, scaled from
// 30 s to 10 s so that the test ends in well under a minute; the frames
// are the size.
func TestConnectionFlood(t *testing.T) {
	const (
		timeout   = 10 * time.Second
		frameSize = 100_000_000 // announced by every attacker
		bigSent   = 99_000_000  // of which the ten big senders send this much
		bigConns  = 10
		slowConns = 200
		idleConns = 2000
		topic     = "flood"
	)
	pool := int64(DefaultQueuedMaxRequestBytes)
	b, s, addr := testServer(t, negBrokerOptions, Options{RequestReadTimeout: timeout})
	reserved := int64(s.memory.frameCap(frameSize)) // a frame's size, rounded to its class
	holders := int(pool / reserved)                 // big requests the pool holds at once
	require.NoError(t, b.CreateTopic(t.Context(), topic, spool.TopicConfig{Partitions: 2}))

	// The well-behaved clients, from 127.0.0.2.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	producer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.Dialer(dialer.DialContext), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer producer.Close()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.Dialer(dialer.DialContext), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	consumed := 0
	produceAndConsume := func(round string, n int) {
		t.Helper()
		for i := range n {
			r := &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", round, i)}
			require.NoError(t, producer.ProduceSync(ctx, r).FirstErr(), "%s: record %d", round, i)
		}
		for want := consumed + n; consumed < want; {
			fs := consumer.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "%s: consumed %d of %d", round, consumed, want)
			fs.EachError(func(topic string, p int32, err error) { t.Fatalf("%s: fetch %s-%d: %v", round, topic, p, err) })
			consumed += fs.NumRecords()
		}
	}
	produceAndConsume("before", 10)

	runtime.GC()
	debug.FreeOSMemory()
	rssBefore, err := vmRSS()
	require.NoError(t, err)
	var rssMax, inFlightMax atomic.Int64
	sampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r, err := vmRSS(); err == nil && r > rssMax.Load() {
				rssMax.Store(r)
			}
			if n := s.Stats().RequestBytesInFlight; n > inFlightMax.Load() {
				inFlightMax.Store(n)
			}
			select {
			case <-sampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	stopSampling := sync.OnceFunc(func() { close(sampling); <-sampled })
	defer stopSampling()

	// Every attacking connection is watched until the server closes it.
	var closedWG sync.WaitGroup
	watch := func(c net.Conn) {
		closedWG.Add(1)
		go func() {
			defer closedWG.Done()
			c.SetReadDeadline(time.Now().Add(timeout + time.Minute))
			io.Copy(io.Discard, c)
		}()
	}
	header := fzFrame(kmsg.Produce.Int16(), 9, 1, "flood", nil)
	binary.BigEndian.PutUint32(header, frameSize)

	// Ten big senders from 127.0.0.4: those the pool holds receive their
	// 99 MB; the rest wait, unread.
	chunk := make([]byte, 1<<20)
	sentAll := make(chan struct{}, bigConns)
	for range bigConns {
		c := dialFrom(t, "127.0.0.4", addr)
		watch(c)
		go func() {
			c.SetWriteDeadline(time.Now().Add(timeout + time.Minute))
			if _, err := c.Write(header); err != nil {
				return
			}
			for sent := 0; sent < bigSent; {
				n, err := c.Write(chunk[:min(len(chunk), bigSent-sent)])
				if err != nil {
					return // closed by the server
				}
				sent += n
			}
			sentAll <- struct{}{}
		}()
	}
	for range holders {
		<-sentAll
	}
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.RequestBytesInFlight == int64(holders)*reserved && st.RequestsWaitingForMemory == bigConns-holders
	}, 10*time.Second, 5*time.Millisecond, "%+v", s.Stats())

	// 200 slow lorises from 127.0.0.3, a byte a second each.
	slow := make([]net.Conn, slowConns)
	for i := range slow {
		slow[i] = dialFrom(t, "127.0.0.3", addr)
		negWrite(t, slow[i], header)
		watch(slow[i])
	}
	trickle, trickled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(trickled)
		for {
			select {
			case <-trickle:
				return
			case <-time.After(time.Second):
			}
			for _, c := range slow {
				c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				c.Write([]byte{0})
			}
		}
	}()
	defer func() { close(trickle); <-trickled }()
	require.Eventually(t, func() bool {
		return s.Stats().RequestsWaitingForMemory == bigConns-holders+slowConns
	}, 10*time.Second, 5*time.Millisecond, "%+v", s.Stats())

	// 2,000 idle connections from 127.0.0.1.
	idle := make([]net.Conn, idleConns)
	for i := range idle {
		idle[i] = dialFrom(t, "127.0.0.1", addr)
	}
	wantRefused := int64(idleConns - DefaultMaxConnectionsPerIP)
	require.Eventually(t, func() bool { return s.Stats().RefusedConnections == wantRefused }, 10*time.Second, 5*time.Millisecond, "%+v", s.Stats())

	// The producer and consumer work with the pool full of stalled
	// requests: nothing of the flood has timed out yet.
	produceAndConsume("during", 50)
	st := s.Stats()
	require.Zero(t, st.RequestReadTimeouts, "the flood ended before the clients were done: %+v", st)
	// The pool holds the stalled big requests, and at most a small request
	// of the well-behaved clients (the consumer long-polls in the
	// background, so one of its fetches may be in flight right now).
	require.GreaterOrEqual(t, st.RequestBytesInFlight, int64(holders)*reserved)
	require.Less(t, st.RequestBytesInFlight, int64(holders)*reserved+1<<20)

	// Every attacker is closed after the request read timeout.
	closed := make(chan struct{})
	go func() { closedWG.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(timeout + 30*time.Second):
		t.Fatalf("attacking connections still open %v after the request read timeout: %+v", 30*time.Second, s.Stats())
	}
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.RequestReadTimeouts == bigConns+slowConns && st.RequestsWaitingForMemory == 0 && st.RequestBytesInFlight < 1<<20
	}, 10*time.Second, 5*time.Millisecond, "%+v", s.Stats())

	// The idle connections the server accepted are still open (idle
	// timeout: 10 minutes); the others were closed without a byte.
	var open, refused atomic.Int64
	var wg sync.WaitGroup
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			var b [1]byte
			n, err := c.Read(b[:])
			switch {
			case n == 0 && isTimeout(err):
				open.Add(1)
			case n == 0 && fzClosed(err):
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, [2]int64{DefaultMaxConnectionsPerIP, wantRefused}, [2]int64{open.Load(), refused.Load()}, "open, refused")

	produceAndConsume("after", 10)
	stopSampling()

	st = s.Stats()
	require.LessOrEqual(t, st.PeakRequestBytesInFlight, pool)
	require.LessOrEqual(t, inFlightMax.Load(), pool)
	grew := rssMax.Load() - rssBefore
	t.Logf("resident memory grew by %d MiB (pool %d MiB); peak request bytes %d MiB", grew>>20, pool>>20, st.PeakRequestBytesInFlight>>20)
	if race.Enabled {
		// The race detector shadows every byte the server writes, so
		// resident memory says nothing of the server's; the pool's own
		// count above still holds.
		t.Log("resident memory not checked under -race")
		return
	}
	const slack = 64 << 20 // connections, goroutines, the clients, the runtime
	require.Less(t, grew, pool+slack, "resident memory grew by %d MiB", grew>>20)
}
