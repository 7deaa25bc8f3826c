package testnet

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Watchdog panics if stop is not called within d, with the stacks of the
// goroutines that run spool's or Raft's code in the message. A hang in a
// test's cleanup then ends the test binary at once, with those stacks at
// the end of its output, instead of at go test's timeout with every
// goroutine of the process printed.
func Watchdog(d time.Duration, what string) (stop func()) {
	t := time.AfterFunc(d, func() {
		buf := make([]byte, 16<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var keep []string
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if s := string(g); strings.Contains(s, "spoolmq/spool") || strings.Contains(s, "hashicorp/raft") {
				keep = append(keep, s)
			}
		}
		panic(fmt.Sprintf("testnet: %s did not finish in %s; its goroutines:\n\n%s", what, d, strings.Join(keep, "\n\n")))
	})
	return func() { t.Stop() }
}
