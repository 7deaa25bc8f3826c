package clustertest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/clustertest"
)

// TestNodeLifecycle drives one node through what Node offers - pause and
// resume, controlled shutdown of a paused node, restart on the same
// address, kill - and the errors for what cannot be done in each state. A
// node that ends without the harness asking is reported by CheckExits and
// Close.
func TestNodeLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips starting a spool process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Launch, not Start: this test makes a node end on its own, which
	// would fail a test's cluster.
	c, err := clustertest.Launch(ctx, clustertest.Options{Nodes: 1})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	n := c.Node(1)
	require.Nil(t, c.Node(2))
	require.ErrorIs(t, n.Start(ctx), clustertest.ErrRunning)
	_, err = n.ReadReplica(ctx, "t", 0)
	require.ErrorIs(t, err, clustertest.ErrRunning, "files are read only from a stopped node")

	// A paused node holds its sockets and answers nothing.
	require.NoError(t, n.Pause())
	require.True(t, n.Paused())
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = n.Metadata(short)
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, n.Resume())
	require.False(t, n.Paused())
	_, err = n.Metadata(ctx)
	require.NoError(t, err)

	// SIGTERM reaches a paused node too: Stop resumes it first.
	addr := n.Addr()
	require.NoError(t, n.Pause())
	code, err := n.Stop(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, code, "a controlled shutdown exits 0")
	require.False(t, n.Running())
	require.ErrorIs(t, n.Kill(), clustertest.ErrNotRunning)
	require.ErrorIs(t, n.Pause(), clustertest.ErrNotRunning)
	_, err = n.Stop(ctx)
	require.ErrorIs(t, err, clustertest.ErrNotRunning)
	_, err = n.Metadata(ctx)
	require.ErrorIs(t, err, clustertest.ErrNotRunning)
	_, err = n.ReadReplica(ctx, "no-such-topic", 0)
	require.Error(t, err, "a replica the node does not hold")

	// Restarted: same address, same data.
	require.NoError(t, n.Start(ctx))
	require.Equal(t, addr, n.Addr())
	require.NoError(t, c.WaitBrokers(ctx))
	require.NoError(t, n.Kill())
	require.NoError(t, c.CheckExits(), "a kill through the Node is expected")

	// A node that dies on its own is reported.
	require.NoError(t, n.Start(ctx))
	require.NoError(t, syscall.Kill(n.PID(), syscall.SIGKILL))
	require.NoError(t, clustertest.Eventually(ctx, "the exit noticed", func(context.Context) error {
		if n.Running() {
			return errors.New("still running")
		}
		return nil
	}))
	require.ErrorIs(t, c.CheckExits(), clustertest.ErrExited)
	closed = true
	require.ErrorIs(t, c.Close(), clustertest.ErrExited)
}
