package controller

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// RaftMagic is the first byte of a Raft connection to a controller
// listener. A Kafka request's first byte is the top byte of its size, 0
// for any request a server accepts, so one listener can serve both: the
// server hands a connection that starts with RaftMagic to
// Quorum.ServeConn.
const RaftMagic byte = 0xF5

// A Raft connection starts with a hello each way, before hashicorp/raft's
// own protocol:
//
//	dialer   -> acceptor: RaftMagic | uint32 length | hello (JSON)
//	acceptor -> dialer:   uint32 length | helloAnswer (JSON)
//
// so that nodes of different clusters, nodes started with different voter
// lists and two processes with one node id never form a quorum: the
// acceptor refuses such a peer, and a starting node that finds one refuses
// to start (Quorum.probe).
type hello struct {
	ClusterID   string `json:"cluster_id"`
	NodeID      int32  `json:"node_id"`
	Incarnation string `json:"incarnation"`
	Voters      string `json:"voters"`
}

type helloAnswer struct {
	Error       string `json:"error,omitempty"`
	NodeID      int32  `json:"node_id"`
	Incarnation string `json:"incarnation"`
	ClusterID   string `json:"cluster_id"`
}

// maxHello bounds a hello frame.
const maxHello = 64 << 10

func writeFrame(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	_, err = w.Write(append(n[:], data...))
	return err
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHello {
		return fmt.Errorf("controller: hello of %d bytes", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// ErrPeerMismatch reports a peer that belongs to another cluster, was
// started with another voter list, or claims this node's id.
var ErrPeerMismatch = errors.New("controller: peer does not belong to this quorum")

// streamLayer is a raft.StreamLayer fed by Quorum.ServeConn and dialing
// with the hello.
//
// It keeps every connection it gave Raft, accepted or dialed, and closes
// them when it closes: hashicorp/raft's shutdown waits for its goroutines
// before it closes the transport, and a goroutine reading a snapshot from a
// peer that went quiet has no deadline to wake it. Closing the connections
// wakes every one of them.
type streamLayer struct {
	q      *Quorum
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr

	mu   sync.Mutex
	open map[*trackedConn]struct{} // nil once closed
}

func newStreamLayer(q *Quorum) *streamLayer {
	return &streamLayer{q: q, conns: make(chan net.Conn), closed: make(chan struct{}), addr: strAddr(q.cfg.Addr),
		open: map[*trackedConn]struct{}{}}
}

// trackedConn is a connection the stream layer gave Raft; closing it
// forgets it.
type trackedConn struct {
	net.Conn
	s    *streamLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		if c.s.open != nil {
			delete(c.s.open, c)
		}
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// track registers c, or closes it if the layer is closed already.
func (s *streamLayer) track(c net.Conn) (net.Conn, error) {
	tc := &trackedConn{Conn: c, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		c.Close()
		return nil, net.ErrClosed
	}
	s.open[tc] = struct{}{}
	return tc, nil
}

type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }

func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return s.track(c)
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection given to Raft.
func (s *streamLayer) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.mu.Lock()
		open := s.open
		s.open = nil
		s.mu.Unlock()
		for c := range open {
			c.Conn.Close()
		}
	})
	return nil
}

func (s *streamLayer) Addr() net.Addr { return s.addr }

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-s.closed:
		return nil, net.ErrClosed // shutting down: no new connections
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, ans, err := s.q.dialHello(ctx, string(address))
	if err != nil {
		return nil, err
	}
	if ans.Error != "" {
		c.Close()
		return nil, fmt.Errorf("%w: %s refused this node: %s", ErrPeerMismatch, address, ans.Error)
	}
	return s.track(c)
}

// dialHello connects to a controller listener and exchanges hellos.
func (q *Quorum) dialHello(ctx context.Context, addr string) (net.Conn, helloAnswer, error) {
	var ans helloAnswer
	c, err := q.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, ans, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	bw := bufio.NewWriter(c)
	bw.WriteByte(RaftMagic)
	err = writeFrame(bw, q.hello())
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = readFrame(c, &ans)
	}
	if err != nil {
		c.Close()
		return nil, ans, err
	}
	c.SetDeadline(time.Time{})
	return c, ans, nil
}

func (q *Quorum) hello() hello {
	return hello{ClusterID: q.clusterID(), NodeID: q.cfg.NodeID, Incarnation: q.incarnation, Voters: FormatVoters(q.cfg.Voters)}
}

// checkHello decides whether a peer's hello is acceptable: "" if so, else
// why not.
func (q *Quorum) checkHello(h hello) string {
	if mine := FormatVoters(q.cfg.Voters); h.Voters != mine {
		return fmt.Sprintf("node %d was started with controller quorum voters %q, node %d with %q: start every node with the same --controller-quorum-voters", h.NodeID, h.Voters, q.cfg.NodeID, mine)
	}
	if cid := q.clusterID(); cid != "" && h.ClusterID != "" && cid != h.ClusterID {
		return fmt.Sprintf("node %d is of cluster %s, node %d of cluster %s: node %d's --cluster-id or data directory is another cluster's; "+
			"start it without --cluster-id (or with --cluster-id %s) and with a data directory of this cluster or an empty one (move the other cluster's away)", h.NodeID, h.ClusterID, q.cfg.NodeID, cid, h.NodeID, cid)
	}
	if h.NodeID == q.cfg.NodeID && h.Incarnation != q.incarnation {
		return fmt.Sprintf("two processes claim node id %d: give each node its own --node-id", h.NodeID)
	}
	return ""
}

// ServeConn takes a connection to the controller listener that started
// with RaftMagic (already read): after the hello it belongs to Raft. It
// returns at once; the connection is closed if the hello fails.
func (q *Quorum) ServeConn(c net.Conn) {
	go func() {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var h hello
		if err := readFrame(c, &h); err != nil {
			c.Close()
			return
		}
		reason := q.checkHello(h)
		ans := helloAnswer{Error: reason, NodeID: q.cfg.NodeID, Incarnation: q.incarnation, ClusterID: q.clusterID()}
		if err := writeFrame(c, ans); err != nil || reason != "" {
			if reason != "" {
				q.log.Error("refused a controller connection", "from", c.RemoteAddr().String(), "reason", reason)
			}
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		if h.NodeID == q.cfg.NodeID {
			c.Close() // this node probing itself
			return
		}
		select {
		case q.stream.conns <- c:
		case <-q.stream.closed:
			c.Close()
		}
	}()
}
