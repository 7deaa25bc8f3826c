package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
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

// waitStopped waits (up to a second) until the kernel shows process pid
// stopped by a signal, or running again: SIGSTOP and SIGCONT take effect
// after kill returns, and a request sent in between could be answered by a
// node that is about to be paused.
func waitStopped(pid int, stopped bool) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name, which is in parentheses.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return
		}
		state := s[i+2]
		if (state == 'T' || state == 't') == stopped {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
