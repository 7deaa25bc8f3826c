package transport

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testServer starts a broker and a server on a free loopback port.
func testServer(t testing.TB, bopts spool.Options, opts Options) (*spool.Broker, *Server, string) {
	t.Helper()
	b, err := spool.Open(t.TempDir(), bopts)
	require.NoError(t, err)
	s, err := NewServer(b, opts)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		require.ErrorIs(t, <-done, ErrServerClosed)
		require.NoError(t, b.Close())
	})
	return b, s, l.Addr().String()
}

func TestApiVersionsWithFranzGo(t *testing.T) {
	_, _, addr := testServer(t, spool.Options{}, Options{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := cl.Request(context.Background(), kmsg.NewPtrApiVersionsRequest())
	require.NoError(t, err)
	av := resp.(*kmsg.ApiVersionsResponse)
	require.Zero(t, av.ErrorCode)
	found := false
	for _, k := range av.ApiKeys {
		if k.ApiKey == kmsg.ApiVersions.Int16() {
			found = true
			require.Zero(t, k.MinVersion)
		}
	}
	require.True(t, found)
}

// rawRequest writes one request frame by hand.
func rawRequest(t testing.TB, c net.Conn, key, version int16, corr int32, body []byte) {
	t.Helper()
	frame := binary.BigEndian.AppendUint32(nil, uint32(8+2+len(body)))
	frame = binary.BigEndian.AppendUint16(frame, uint16(key))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 0xffff) // null client id
	frame = append(frame, body...)
	_, err := c.Write(frame)
	require.NoError(t, err)
}

func readResponse(t testing.TB, c net.Conn) ([]byte, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// A too-new ApiVersions gets a v0-shaped UNSUPPORTED_VERSION answer with
// ApiVersions' own range (KIP-511).
func TestApiVersionsTooNew(t *testing.T) {
	_, _, addr := testServer(t, spool.Options{}, Options{})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	rawRequest(t, c, 18, 99, 7, nil)
	b, err := readResponse(t, c)
	require.NoError(t, err)
	require.Equal(t, uint32(7), binary.BigEndian.Uint32(b))
	var resp kmsg.ApiVersionsResponse
	resp.SetVersion(0)
	require.NoError(t, resp.ReadFrom(b[4:]))
	require.Equal(t, errUnsupportedVersion, resp.ErrorCode)
	require.Len(t, resp.ApiKeys, 1)
	require.Equal(t, int16(18), resp.ApiKeys[0].ApiKey)
	// The connection stays usable: the client retries with v0.
	rawRequest(t, c, 18, 0, 8, nil)
	b, err = readResponse(t, c)
	require.NoError(t, err)
	require.Equal(t, uint32(8), binary.BigEndian.Uint32(b))
}

// Malformed input closes the connection and nothing else: the server goes
// on serving other connections.
func TestBadFramesCloseTheConnection(t *testing.T) {
	_, _, addr := testServer(t, spool.Options{}, Options{MaxRequestBytes: 1 << 20})
	cases := map[string]func(c net.Conn){
		"oversize frame": func(c net.Conn) { c.Write(binary.BigEndian.AppendUint32(nil, 2<<20)) },
		"negative size":  func(c net.Conn) { c.Write(binary.BigEndian.AppendUint32(nil, 0xfffffff0)) },
		"unknown key":    func(c net.Conn) { rawRequest(t, c, 999, 0, 1, nil) },
		"truncated frame": func(c net.Conn) {
			c.Write(append(binary.BigEndian.AppendUint32(nil, 100), 0, 18))
			c.(*net.TCPConn).CloseWrite()
		},
		"garbage body": func(c net.Conn) { rawRequest(t, c, 3, 1, 1, []byte{0xff, 0xff, 0xff}) },
	}
	for name, send := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			send(c)
			_, err = readResponse(t, c)
			require.Error(t, err, "the server answered instead of closing")
			// Others are still served.
			ok, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			rawRequest(t, ok, 18, 0, 3, nil)
			_, err = readResponse(t, ok)
			require.NoError(t, err)
			ok.Close()
		})
	}
}
