package transport

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/replica"
)

// A controller that accepts connections and never answers (paused with
// SIGSTOP, or cut off behind a half-open link) must not hold a forwarded
// call until the caller's own deadline: each attempt gives up as on an
// unreachable controller, so that spool's netCluster.call tries the
// controller elected meanwhile.
func TestControllerRequestGivesUpOnSilentController(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read nothing, answer nothing
		}
	}()
	var d net.Dialer
	r := newRemote(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) })
	defer r.peers.close()
	addr := ln.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 5*controllerAttemptTimeout)
	defer cancel()
	calls := map[string]func() error{
		"CreateTopic": func() error { return r.CreateTopic(ctx, addr, "t", spool.TopicConfig{Partitions: 1}) },
		"BrokerHeartbeat": func() error {
			_, err := r.BrokerHeartbeat(ctx, addr, controller.Heartbeat{BrokerID: 1, BrokerEpoch: 1})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, replica.ErrUnreachable) {
			t.Fatalf("%s to a silent controller: %v, want replica.ErrUnreachable", name, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s held the call until the caller's deadline: %v", name, err)
		}
	}
}
