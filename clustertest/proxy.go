package clustertest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener names one of a node's two listeners.
type Listener int

const (
	// KafkaListener is a node's Kafka listener (--listen): the one other
	// brokers' followers fetch from.
	KafkaListener Listener = iota
	// ControllerListener is a node's controller listener
	// (--controller-listen): Raft, and the controller's requests
	// (registration, heartbeats, AlterPartition, forwarded administration).
	ControllerListener
)

func (l Listener) String() string {
	if l == ControllerListener {
		return "controller"
	}
	return "kafka"
}

// Direction is one of the two directions bytes take on a link.
type Direction int

const (
	// Forward bytes go from the link's From node to its To node: the
	// requests From sends on the connections it opened.
	Forward Direction = iota
	// Backward bytes go from To to From: the responses.
	Backward
)

func (d Direction) String() string {
	if d == Backward {
		return "backward"
	}
	return "forward"
}

// Link is the TCP proxy that every connection one node (From) opens to one
// listener of another node (To) goes through, when the cluster has link
// proxies (Options.LinkProxies): From's "spool serve" is told to dial it
// instead of To's address (--dial-map). The test controls it: Cut, Block,
// Delay and Heal act on the connections already open as well as on new
// ones.
//
// A blocked direction is a network partition as TCP lives through one: the
// proxy stops forwarding that direction's bytes - the sender's writes land
// in socket buffers and then block, the receiver hears nothing - while the
// connection stays open, and on Heal whatever was held is delivered, late
// and in order, as TCP's retransmissions would deliver it. Nothing is
// dropped from a stream (that would hand the receiver garbage, not a
// network fault); whether to wait or give up is the endpoints' own
// timeouts' decision. A new connection during a partition is accepted (the
// proxy cannot refuse a handshake without also refusing it after the
// heal) and then held like the others. A connection whose target is down
// is closed at once, as a refused connection would be.
//
// Its methods may be called from any goroutine.
type Link struct {
	From, To int32
	Listener Listener

	addr   string // where the proxy listens: what From dials
	target string // where To's process listens
	ln     net.Listener

	mu      sync.Mutex
	blocked [2]bool
	delay   time.Duration
	changed chan struct{} // closed, and replaced, on every change of state
	conns   map[*linkConn]struct{}
	closed  bool

	accepted atomic.Int64
	bytes    [2]atomic.Int64
	wg       sync.WaitGroup
}

// linkConn is one proxied connection: From's end (in) and To's (out).
type linkConn struct {
	in, out   net.Conn
	done      chan struct{} // closed when the connection is torn down
	closeOnce sync.Once
	eofs      atomic.Int32 // directions that have delivered their end of stream
}

// newLink listens on host (a port of the kernel's choosing) for a link
// from node from to node to's listener at target.
func newLink(host string, from, to int32, l Listener, target string) (*Link, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("clustertest: link %d→%d %v: %w", from, to, l, err)
	}
	k := &Link{From: from, To: to, Listener: l, addr: ln.Addr().String(), target: target, ln: ln,
		changed: make(chan struct{}), conns: map[*linkConn]struct{}{}}
	k.wg.Go(k.accept)
	return k, nil
}

func (k *Link) String() string {
	return fmt.Sprintf("link %d→%d (%v)", k.From, k.To, k.Listener)
}

// Addr is the proxy's address: what From dials for To's listener.
func (k *Link) Addr() string { return k.addr }

// Cut blocks both directions: a two-way partition of this link.
func (k *Link) Cut() { k.set(func() { k.blocked = [2]bool{true, true} }) }

// Block blocks one direction of the link, leaving the other as it is: a
// one-way partition. Blocking Forward loses From's requests (To never
// sees them); blocking Backward lets them through - To acts on them - and
// loses the answers.
func (k *Link) Block(d Direction) { k.set(func() { k.blocked[d] = true }) }

// Delay holds every chunk of bytes, in both directions, for d after the
// proxy reads it before it is forwarded: a slow link. 0 ends the delay.
func (k *Link) Delay(d time.Duration) { k.set(func() { k.delay = max(d, 0) }) }

// Heal unblocks both directions and ends any delay; held bytes flow.
func (k *Link) Heal() {
	k.set(func() { k.blocked, k.delay = [2]bool{}, 0 })
}

// Blocked reports whether a direction is blocked.
func (k *Link) Blocked(d Direction) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.blocked[d]
}

// Healthy reports whether the link passes bytes both ways without delay.
func (k *Link) Healthy() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.blocked[Forward] && !k.blocked[Backward] && k.delay == 0
}

// Accepted is how many connections From has opened through the link.
func (k *Link) Accepted() int64 { return k.accepted.Load() }

// Bytes is how many bytes the link has delivered in a direction.
func (k *Link) Bytes(d Direction) int64 { return k.bytes[d].Load() }

// Open is how many connections through the link are open.
func (k *Link) Open() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.conns)
}

func (k *Link) set(change func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	change()
	close(k.changed)
	k.changed = make(chan struct{})
}

// state is what a chunk read at some moment waits for.
func (k *Link) state(d Direction) (blocked bool, delay time.Duration, changed <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.blocked[d], k.delay, k.changed
}

// close stops accepting and tears down every connection.
func (k *Link) close() {
	k.mu.Lock()
	k.closed = true
	conns := k.conns
	k.conns = nil
	k.mu.Unlock()
	k.ln.Close()
	for c := range conns {
		c.teardown()
	}
	k.wg.Wait()
}

func (k *Link) accept() {
	for {
		in, err := k.ln.Accept()
		if err != nil {
			return // closed
		}
		k.accepted.Add(1)
		k.wg.Go(func() { k.serve(in) })
	}
}

// serve proxies one connection until both directions have ended or one
// failed.
func (k *Link) serve(in net.Conn) {
	out, err := net.DialTimeout("tcp", k.target, 5*time.Second)
	if err != nil {
		// To is down: From sees its connection end, as if refused.
		in.Close()
		return
	}
	c := &linkConn{in: in, out: out, done: make(chan struct{})}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		c.teardown()
		return
	}
	k.conns[c] = struct{}{}
	k.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { k.pump(c, Forward, in, out) })
	wg.Go(func() { k.pump(c, Backward, out, in) })
	wg.Wait()
	c.teardown()
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
}

// pump forwards one direction of c, chunk by chunk, each when the
// direction is not blocked and its delay has passed since it was read.
// The end of the stream (a half-close) is forwarded the same way; an
// error in either socket tears the connection down.
func (k *Link) pump(c *linkConn, d Direction, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		readAt := time.Now()
		if n > 0 {
			if !k.wait(c, d, readAt) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				c.teardown()
				return
			}
			k.bytes[d].Add(int64(n))
		}
		if rerr == nil {
			continue
		}
		if !errors.Is(rerr, io.EOF) {
			c.teardown()
			return
		}
		if !k.wait(c, d, readAt) {
			return
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		if c.eofs.Add(1) == 2 {
			c.teardown()
		}
		return
	}
}

// wait waits until bytes of direction d read at readAt may be forwarded;
// false if the connection was torn down first.
func (k *Link) wait(c *linkConn, d Direction, readAt time.Time) bool {
	for {
		blocked, delay, changed := k.state(d)
		var timer *time.Timer
		var timeout <-chan time.Time
		if !blocked {
			left := time.Until(readAt.Add(delay))
			if left <= 0 {
				return true
			}
			timer = time.NewTimer(left)
			timeout = timer.C
		}
		select {
		case <-changed:
		case <-timeout:
			return true
		case <-c.done:
			return false
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// teardown closes both sockets, which ends both pumps.
func (c *linkConn) teardown() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.in.Close()
		c.out.Close()
	})
}
