//go:build unix

package spool

import (
	"math"
	"syscall"
)

// openFilesLimit is the process's soft limit on open files (RLIMIT_NOFILE),
// or 0 if it cannot be read. (Go raises the soft limit to the hard one at
// start-up on Linux.)
func openFilesLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(rl.Cur, math.MaxInt32))
}
