package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/spoolmq/spool/replica"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The client side of the protocol: what a node sends to other nodes
// (followers' fetches, controller requests, forwarded administration).
// Requests go one at a time on a connection, as the server answers them; a
// pool per address keeps connections for reuse, and a request that finds
// none idle dials a new one, so that a follower's long poll never holds up
// another request.

// clientID is the client id a node's own requests carry.
const clientID = "spool-node"

// maxIdlePerAddr bounds the idle connections kept per address.
const maxIdlePerAddr = 8

// maxResponseBytes bounds a response a node reads.
const maxResponseBytes = 256 << 20

// peers is a pool of connections to other nodes. Safe for concurrent use.
type peers struct {
	dial    func(ctx context.Context, addr string) (net.Conn, error)
	timeout time.Duration // a request's deadline when ctx has none

	mu     sync.Mutex
	idle   map[string][]*peerConn
	closed bool
}

type peerConn struct {
	nc   net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	corr int32
}

func newPeers(dial func(ctx context.Context, addr string) (net.Conn, error)) *peers {
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	return &peers{dial: dial, timeout: 30 * time.Second, idle: map[string][]*peerConn{}}
}

func (p *peers) get(ctx context.Context, addr string) (*peerConn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: closed", replica.ErrUnreachable)
	}
	if cs := p.idle[addr]; len(cs) > 0 {
		c := cs[len(cs)-1]
		p.idle[addr] = cs[:len(cs)-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := p.dial(dctx, addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", replica.ErrUnreachable, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &peerConn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10)}, nil
}

func (p *peers) put(addr string, c *peerConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= maxIdlePerAddr {
		c.nc.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], c)
}

// close closes every idle connection; connections in use close when their
// request ends.
func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
	p.idle = nil
}

// request sends req (at the version set on it) to addr and returns the
// response. A failure to reach addr, or a connection that breaks, wraps
// replica.ErrUnreachable.
func (p *peers) request(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	c, err := p.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(p.timeout)
	}
	c.nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Now()) })
	resp, err := c.roundTrip(req)
	interrupted := !stop()
	if err != nil || interrupted {
		c.nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%s)", ctx.Err(), addr)
		}
		return nil, fmt.Errorf("%w: %s: %v", replica.ErrUnreachable, addr, err)
	}
	c.nc.SetDeadline(time.Time{})
	p.put(addr, c)
	return resp, nil
}

// roundTrip writes one request frame and reads its response.
func (c *peerConn) roundTrip(req kmsg.Request) (kmsg.Response, error) {
	c.corr++
	buf := make([]byte, 4, 256)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(c.corr))
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(clientID)))
	buf = append(buf, clientID...)
	if req.IsFlexible() {
		buf = append(buf, 0) // no tagged fields
	}
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if _, err := c.w.Write(buf); err != nil {
		return nil, err
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(hdr[:]))
	if corr := int32(binary.BigEndian.Uint32(hdr[4:])); corr != c.corr {
		return nil, fmt.Errorf("response to request %d, expected %d", corr, c.corr)
	}
	if size < 4 || size > maxResponseBytes {
		return nil, fmt.Errorf("response of %d bytes", size)
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, err
	}
	if req.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

// errUnexpectedResponse reports a response of the wrong shape.
var errUnexpectedResponse = errors.New("transport: unexpected response")
