// Package testnet gives tests loopback addresses to listen on later.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

var (
	mu   sync.Mutex
	used = map[int]bool{}
)

// FreeAddr returns a loopback address nothing listens on, for a node to
// listen on later. It is taken below Linux's ephemeral range (32768 and
// up): a port the kernel picked for a probe listener could be handed, once
// closed, to any client socket of the tests running meanwhile (other
// packages' too) before the node binds it. Each is handed out once per
// process.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if used[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		used[port] = true
		return l.Addr().String()
	}
	tb.Fatal("testnet: no free port in 20000-31999")
	return ""
}
