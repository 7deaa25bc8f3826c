package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/clustertest"
)

// TestNodeOutlivesTheThreadThatStartedIt: the kernel's parent-death
// signal, which kills the nodes when the test process dies, follows the
// thread that forked a child, not the process. A node started from a
// goroutine whose thread then ends (here: a goroutine that exits locked to
// its thread, which makes the runtime end the thread) must keep running.
// Before nodes were forked from one thread kept for the process's life,
// this killed the node, as it killed two of three nodes mid-way through a
// failover test.
func TestNodeOutlivesTheThreadThatStartedIt(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips starting a spool process")
	}
	c := clustertest.New(t, clustertest.Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type started struct {
		tid int
		err error
	}
	// The runtime ends a thread whose goroutine exits locked to it, except
	// the main thread (its id is the process's), which it keeps: a
	// goroutine that lands there holds it, and another one is tried.
	release := make(chan struct{})
	defer close(release)
	var s started
	for {
		done := make(chan started)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if syscall.Gettid() == os.Getpid() {
				done <- started{tid: -1}
				<-release
				runtime.UnlockOSThread()
				return
			}
			done <- started{syscall.Gettid(), c.Node(1).Start(ctx)}
		}()
		if s = <-done; s.tid != -1 {
			break
		}
	}
	require.NoError(t, s.err)
	// Once the thread is gone, a parent-death signal would have been sent.
	require.NoError(t, clustertest.Eventually(ctx, "the starting thread ends", func(context.Context) error {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid)); err == nil {
			return fmt.Errorf("thread %d still there", s.tid)
		}
		return nil
	}))
	// A node that answers after that was not killed by it.
	_, err := c.Node(1).Metadata(ctx)
	require.NoError(t, err)
	require.NoError(t, c.CheckExits())
}
