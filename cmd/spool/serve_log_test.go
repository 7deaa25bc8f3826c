package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestServeAdvertisesHostNameOnWildcard: listening on 0.0.0.0 (or :PORT),
// serve advertises the machine's host name, not localhost, and logs it.
func TestServeAdvertisesHostNameOnWildcard(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	for _, listen := range []string{"0.0.0.0:0", ":0"} {
		t.Run(listen, func(t *testing.T) {
			s := startServe(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", listen)
			_, port, err := net.SplitHostPort(s.addr)
			require.NoError(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(net.JoinHostPort("127.0.0.1", port)))
			require.NoError(t, err)
			defer cl.Close()
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl)
			require.NoError(t, err)
			require.Len(t, resp.Brokers, 1)
			require.Equal(t, host, resp.Brokers[0].Host)
			require.Contains(t, s.log(), "advertised="+net.JoinHostPort(host, port))
			require.Equal(t, exitOK, s.stop(t, syscall.SIGTERM))
		})
	}
}

// TestServeLogFormatJSON: --log-format json logs one JSON object a line
// (the "spool: ..." lines for harnesses aside).
func TestServeLogFormatJSON(t *testing.T) {
	s := startServe(t, "--data", filepath.Join(t.TempDir(), "data"), "--log-format", "json", "--log-level", "debug")
	require.Equal(t, exitOK, s.stop(t, syscall.SIGTERM))
	var n int
	for _, line := range strings.Split(strings.TrimSpace(s.log()), "\n") {
		if strings.HasPrefix(line, "spool") {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		require.Contains(t, m, "level")
		n++
	}
	require.Positive(t, n)
	require.Contains(t, s.log(), `"msg":"listening"`)

	code, _, stderr := runTool(t, "serve", "--log-format", "xml")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--log-format must be text or json")
}
