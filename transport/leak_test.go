package transport

import (
	"testing"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestServerShutdownLeavesNoGoroutines serves a client's produce, then
// shuts the server and its broker down: no goroutine of either - the
// accept loop, the connection's reader and writer, the broker's - outlives
// them.
func TestServerShutdownLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	b, addr, stop := startProduceServer(t, t.TempDir(), spool.Options{})
	prodCreateTopic(t, b, "t", 1)
	c := prodDial(t, addr)
	ip := initProducer(t, c, 5, -1, -1)
	require.Zero(t, ip.ErrorCode)
	stop() // with the client still connected
	c.Close()
}
