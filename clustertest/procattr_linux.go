package clustertest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// The kernel sends a child its parent-death signal when the *thread* that
// forked it ends, not the process (go.dev/issue/27505), and the Go runtime
// does end threads: a node started from an ordinary goroutine was seen
// SIGKILLed in the middle of a test. So every node is forked from one
// goroutine locked to its thread for the life of the process: the signal
// then comes only when the test process dies (a panic, a timeout, a kill),
// so that no node outlives its test holding ports and data directories.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// startCmd starts cmd with the parent-death signal SIGKILL.
func startCmd(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			// Never unlocked, never returns: the thread lives as long as
			// the process.
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.done
}
