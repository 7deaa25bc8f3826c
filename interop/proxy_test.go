package interop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// proxy forwards Kafka connections to the server and writes a transcript:
// each request's API, version and correlation id, each response's non-zero
// error codes, and who closed a connection with requests unanswered. It
// decodes frames with kmsg only to describe them; bytes pass unchanged.
type proxy struct {
	l      net.Listener
	target string
	start0 time.Time
	nconns atomic.Int64
	wg     sync.WaitGroup

	mu         sync.Mutex
	lines      []string
	counts     map[string]int
	advertised bool // the first ApiVersions response is logged in full
	conns      map[net.Conn]struct{}
	closed     bool
}

func newProxy() (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &proxy{l: l, start0: time.Now(), counts: map[string]int{}, conns: map[net.Conn]struct{}{}}, nil
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// start accepts connections and forwards them to target.
func (p *proxy) start(target string) {
	p.target = target
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.l.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
}

// close stops the proxy and waits for its goroutines.
func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) logf(format string, args ...any) {
	line := fmt.Sprintf("%7.3fs ", time.Since(p.start0).Seconds()) + fmt.Sprintf(format, args...)
	p.mu.Lock()
	p.lines = append(p.lines, line)
	p.mu.Unlock()
}

func (p *proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

// transcript is everything logged so far.
func (p *proxy) transcript() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// summary counts the requests by API and version.
func (p *proxy) summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.counts))
	for k := range p.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s ×%d, ", k, p.counts[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

// pendingReq is a request waiting for its response.
type pendingReq struct {
	key, version int16
}

func (p *proxy) serve(client net.Conn) {
	id := p.nconns.Add(1)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		p.logf("c%d cannot reach the server: %v", id, err)
		client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		client.Close()
		server.Close()
		return
	}
	defer func() {
		p.track(client, false)
		p.track(server, false)
	}()
	var (
		mu      sync.Mutex
		pending = map[int32]pendingReq{}
		order   []int32
	)
	unanswered := func() string {
		mu.Lock()
		defer mu.Unlock()
		var s []string
		for _, corr := range order {
			r := pending[corr]
			s = append(s, fmt.Sprintf("%s v%d #%d", kmsg.NameForKey(r.key), r.version, corr))
		}
		return strings.Join(s, ", ")
	}
	done := make(chan struct{}, 2)
	// client -> server
	go func() {
		defer func() { done <- struct{}{} }()
		first := true
		for {
			frame, err := readFrame(client)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					p.logf("c%d client read: %v", id, err)
				}
				server.(*net.TCPConn).CloseWrite()
				return
			}
			if len(frame) >= 12 {
				key := int16(binary.BigEndian.Uint16(frame[4:]))
				version := int16(binary.BigEndian.Uint16(frame[6:]))
				corr := int32(binary.BigEndian.Uint32(frame[8:]))
				name := kmsg.NameForKey(key)
				extra := ""
				if first {
					if n := int16(binary.BigEndian.Uint16(frame[12:])); n > 0 && 14+int(n) <= len(frame) {
						extra = fmt.Sprintf(" (client id %q)", frame[14:14+int(n)])
					}
					first = false
				}
				if key == kmsg.Produce.Int16() && isAcks0(frame, version) {
					extra += " acks=0"
				} else {
					mu.Lock()
					pending[corr] = pendingReq{key, version}
					order = append(order, corr)
					mu.Unlock()
				}
				p.logf("c%d → %s v%d #%d%s", id, name, version, corr, extra)
				p.mu.Lock()
				p.counts[fmt.Sprintf("%s v%d", name, version)]++
				p.mu.Unlock()
			} else {
				p.logf("c%d → unparsed frame of %d bytes", id, len(frame))
			}
			if _, err := server.Write(frame); err != nil {
				p.logf("c%d server write: %v", id, err)
				return
			}
		}
	}()
	// server -> client
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			frame, err := readFrame(server)
			if err != nil {
				if left := unanswered(); left != "" {
					p.logf("c%d SERVER CLOSED the connection (%v) with requests unanswered: %s", id, err, left)
				} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					p.logf("c%d server read: %v", id, err)
				}
				client.Close()
				return
			}
			if len(frame) >= 8 {
				corr := int32(binary.BigEndian.Uint32(frame[4:]))
				mu.Lock()
				r, ok := pending[corr]
				delete(pending, corr)
				if i := slices.Index(order, corr); i >= 0 {
					order = slices.Delete(order, i, i+1)
				}
				mu.Unlock()
				if ok {
					p.logf("c%d ← %s v%d #%d %s", id, kmsg.NameForKey(r.key), r.version, corr, p.describeResponse(r, frame[8:]))
				} else {
					p.logf("c%d ← response #%d to no pending request", id, corr)
				}
			}
			if _, err := client.Write(frame); err != nil {
				return
			}
		}
	}()
	<-done
	<-done
	client.Close()
	server.Close()
}

// readFrame reads one size-prefixed frame, size included.
func readFrame(r io.Reader) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || n > 256<<20 {
		return nil, fmt.Errorf("frame size %d", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, sz[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// isAcks0 decodes a produce request far enough to see acks=0 (no
// response will come).
func isAcks0(frame []byte, version int16) bool {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	body, ok := requestBody(frame, req)
	if !ok || req.ReadFrom(body) != nil {
		return false
	}
	return req.Acks == 0
}

// requestBody skips a request frame's header.
func requestBody(frame []byte, req kmsg.Request) ([]byte, bool) {
	rest := frame[12:]
	if len(rest) < 2 {
		return nil, false
	}
	n := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if n > 0 {
		if int(n) > len(rest) {
			return nil, false
		}
		rest = rest[n:]
	}
	if req.IsFlexible() {
		var ok bool
		if rest, ok = skipTagBuffer(rest); !ok {
			return nil, false
		}
	}
	return rest, true
}

func skipTagBuffer(b []byte) ([]byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, false
	}
	b = b[w:]
	for range n {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil, false
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || size > uint64(len(b)-w) {
			return nil, false
		}
		b = b[w+int(size):]
	}
	return b, true
}

// describeResponse decodes a response body and names its non-zero error
// codes and error messages.
func (p *proxy) describeResponse(r pendingReq, body []byte) string {
	resp := kmsg.ResponseForKey(r.key)
	if resp == nil {
		return fmt.Sprintf("(%d bytes)", len(body))
	}
	resp.SetVersion(r.version)
	if resp.IsFlexible() && r.key != kmsg.ApiVersions.Int16() {
		var ok bool
		if body, ok = skipTagBuffer(body); !ok {
			return "BAD RESPONSE HEADER TAGS"
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		// A version the server does not support gets a v0-shaped
		// ApiVersions response (KIP-511).
		v0 := kmsg.NewPtrApiVersionsResponse()
		if r.key != kmsg.ApiVersions.Int16() || v0.ReadFrom(body) != nil {
			return fmt.Sprintf("UNDECODABLE (%d bytes): %v", len(body), err)
		}
		resp = v0
	}
	var errs []string
	collectErrors(reflect.ValueOf(resp).Elem(), "", &errs)
	out := "ok"
	if len(errs) > 0 {
		const maxShown = 8
		more := ""
		if len(errs) > maxShown {
			more = fmt.Sprintf(" (+%d more)", len(errs)-maxShown)
			errs = errs[:maxShown]
		}
		out = "ERRORS " + strings.Join(errs, "; ") + more
	}
	if av, ok := resp.(*kmsg.ApiVersionsResponse); ok {
		p.mu.Lock()
		first := !p.advertised && av.ErrorCode == 0
		p.advertised = p.advertised || first
		p.mu.Unlock()
		if first {
			var keys []string
			for _, k := range av.ApiKeys {
				keys = append(keys, fmt.Sprintf("%s %d-%d", kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion))
			}
			out += " advertises: " + strings.Join(keys, ", ")
		}
	}
	return out
}

// collectErrors walks a response for fields named ErrorCode with non-zero
// values (and their ErrorMessage siblings), naming where they are.
func collectErrors(v reflect.Value, path string, out *[]string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			collectErrors(v.Elem(), path, out)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			collectErrors(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Struct:
		label := path
		for _, name := range []string{"Topic", "Name", "Partition", "Group", "ResourceName", "MemberID"} {
			f := v.FieldByName(name)
			if f.IsValid() && (f.Kind() == reflect.String || f.Kind() == reflect.Int32) {
				label += fmt.Sprintf("{%s=%v}", name, f.Interface())
			} else if f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.String {
				label += fmt.Sprintf("{%s=%v}", name, f.Elem().Interface())
			}
		}
		if f := v.FieldByName("ErrorCode"); f.IsValid() && f.Kind() == reflect.Int16 && f.Int() != 0 {
			msg := ""
			if m := v.FieldByName("ErrorMessage"); m.IsValid() && m.Kind() == reflect.Pointer && !m.IsNil() {
				msg = fmt.Sprintf(" %q", m.Elem().String())
			}
			name := fmt.Sprint(f.Int())
			if err := kerr.ErrorForCode(int16(f.Int())); err != nil {
				name = fmt.Sprintf("%d %v", f.Int(), err)
			}
			*out = append(*out, fmt.Sprintf("%s: %s%s", strings.TrimPrefix(label, "."), name, msg))
		}
		for i := range v.NumField() {
			ft := v.Type().Field(i)
			if !ft.IsExported() {
				continue
			}
			switch ft.Type.Kind() {
			case reflect.Slice, reflect.Struct, reflect.Pointer:
				collectErrors(v.Field(i), label+"."+ft.Name, out)
			}
		}
	}
}
