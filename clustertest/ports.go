package clustertest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// A node keeps its ports across restarts, so they are chosen once, when
// the cluster is made. A port the kernel hands out for "port 0" lies in
// the ephemeral range, where any outgoing connection of this machine
// (the test's clients, the other nodes' peers) may take it as its local
// port while the node is down, and the restart would then fail with
// "address already in use". So ports are drawn below that range and
// probed by listening on them.
const (
	lowestPort   = 20000
	probeRetries = 200
)

// ephemeralLow is the lowest port of the kernel's ephemeral range (Linux
// ip_local_port_range), or 0 if it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// freePorts returns n distinct loopback ports that nothing listens on now,
// below the ephemeral range when it is known and leaves room, else ports
// the kernel picks.
func freePorts(host string, n int) ([]int, error) {
	out := make([]int, 0, n)
	seen := map[int]bool{}
	low := ephemeralLow()
	for tries := 0; len(out) < n && low-lowestPort > 1000 && tries < probeRetries; tries++ {
		p := lowestPort + rand.IntN(low-lowestPort)
		if seen[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		seen[p] = true
		out = append(out, p)
	}
	for len(out) < n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("clustertest: no free port on %s: %w", host, err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}
