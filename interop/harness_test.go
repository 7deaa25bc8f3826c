package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/clustertest"
)

// The spool binary the tests run: $SPOOL_BIN, or built once from
// ../cmd/spool by TestMain.
var spoolBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if spoolBin = os.Getenv("SPOOL_BIN"); spoolBin == "" {
		dir, err := os.MkdirTemp("", "spool-interop-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		spoolBin = filepath.Join(dir, "spool")
		// The tool directive in go.mod names the command, so this builds
		// ../cmd/spool through the replace directive.
		out, err := exec.Command("go", "build", "-o", spoolBin, "github.com/spoolmq/spool/cmd/spool").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build spool: %v\n%s", err, out)
			return 1
		}
		// Package clustertest's clusters run the same binary.
		os.Setenv(clustertest.BinaryEnv, spoolBin)
	}
	return m.Run()
}

// server is a "spool serve" process with a recording proxy in front of it:
// clients connect to the proxy (the server advertises the proxy's address),
// which logs every request and response so that a failing test shows what
// the client sent and what came back.
type server struct {
	t     *testing.T
	Addr  string // the proxy's address: what clients use
	Data  string // the data directory
	cmd   *exec.Cmd
	done  chan struct{} // closed when stderr is read to the end
	proxy *proxy

	mu     sync.Mutex
	stderr strings.Builder
}

// startServer starts "spool serve" on a fresh data directory with extra
// flags (--sasl-plain ...). The server runs with --flush none (the
// scenarios test the protocol, not durability, and an fsync per file
// created makes the first group commit, which creates the 50 partitions of
// __consumer_offsets, take seconds on slow disks); INTEROP_FLUSH=sync (or
// a --flush in args, which comes later and wins) overrides it. When the test ends it stops the server with
// SIGTERM and fails the test unless it exits 0; if the test failed it logs
// the server's stderr and the proxy's transcript. INTEROP_TRACE=1 logs the
// transcript and a summary of the requests always.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), args...)
}

// restartServer starts "spool serve" again on a server's data directory
// (after the test stopped or killed it), behind a new proxy.
func restartServer(t *testing.T, old *server, args ...string) *server {
	t.Helper()
	return startServerIn(t, old.Data, args...)
}

func startServerIn(t *testing.T, data string, args ...string) *server {
	t.Helper()
	px, err := newProxy()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, Data: data, Addr: px.addr(), done: make(chan struct{}), proxy: px}
	flush := os.Getenv("INTEROP_FLUSH")
	if flush == "" {
		flush = "none"
	}
	s.cmd = exec.Command(spoolBin, append([]string{"serve", "--data", s.Data, "--listen", "127.0.0.1:0",
		"--advertised-addr", px.addr(), "--log-level", "debug", "--flush", flush}, args...)...)
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if a, ok := strings.CutPrefix(line, "spool: serving on "); ok {
				addrc <- a
			}
		}
		io.Copy(io.Discard, pipe)
	}()
	t.Cleanup(s.stop)
	select {
	case a := <-addrc:
		px.start(a)
	case <-s.done:
		s.cmd.Wait()
		t.Fatalf("spool serve exited before listening (%v):\n%s", s.cmd.ProcessState, s.Stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("spool serve did not report its address:\n%s", s.Stderr())
	}
	return s
}

// Stderr is what the server has logged so far.
func (s *server) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// stop sends SIGTERM and checks for a clean exit; it dumps the logs if the
// test failed.
func (s *server) stop() {
	t := s.t
	defer s.proxy.close()
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan error, 1)
		go func() {
			<-s.done
			waited <- s.cmd.Wait()
		}()
		select {
		case err := <-waited:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Errorf("spool serve exited with status %d after SIGTERM", exit.ExitCode())
			} else if err != nil {
				t.Errorf("spool serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			t.Errorf("spool serve did not stop within 30s of SIGTERM")
			<-waited
		}
	}
	if strings.Contains(s.Stderr(), "panic serving request") {
		t.Errorf("the server recovered from a panic (see its stderr)")
	}
	if t.Failed() || os.Getenv("INTEROP_TRACE") != "" {
		t.Logf("spool serve stderr:\n%s", tail(s.Stderr(), 200))
		t.Logf("requests and responses through the proxy (last 300):\n%s", tail(s.proxy.transcript(), 300))
		t.Logf("request summary: %s", s.proxy.summary())
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// testContext is the test's context with a deadline: a scenario that
// hangs fails with what it has seen rather than at the go test timeout.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return fmt.Sprintf("%s-%d", p.topic, p.partition) }

// delivery is one record as a client saw it.
type delivery struct {
	tp
	offset int64
	value  string
	by     string // the consumer (member) that received it
}

// ledger records what was produced (with the offsets the acknowledgements
// gave) and what was consumed, and checks one against the other. It is
// safe for concurrent use; deliveries are kept in the order they were
// recorded, which for one consumer is the order it received them.
type ledger struct {
	mu        sync.Mutex
	produced  map[tp]map[int64]string // partition -> offset -> value
	values    map[string]bool
	delivered []delivery
}

func newLedger() *ledger {
	return &ledger{produced: map[tp]map[int64]string{}, values: map[string]bool{}}
}

// produce records an acknowledged record. Values must be unique.
func (l *ledger) produce(t *testing.T, topic string, partition int32, offset int64, value string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.values[value] {
		t.Errorf("value %q produced twice by the test", value)
	}
	l.values[value] = true
	p := tp{topic, partition}
	if l.produced[p] == nil {
		l.produced[p] = map[int64]string{}
	}
	if old, ok := l.produced[p][offset]; ok {
		t.Errorf("%v offset %d acknowledged for both %q and %q", p, offset, old, value)
	}
	l.produced[p][offset] = value
}

// consume records a delivery.
func (l *ledger) consume(topic string, partition int32, offset int64, value, by string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered = append(l.delivered, delivery{tp{topic, partition}, offset, value, by})
}

// count is the number of produced records.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.produced {
		n += len(m)
	}
	return n
}

// distinct is the number of distinct records delivered.
func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range l.delivered {
		seen[d.value] = true
	}
	return len(seen)
}

// producedInOrder lists a partition's acknowledged records by offset.
func (l *ledger) producedInOrder(p tp) []delivery {
	var out []delivery
	for off, v := range l.produced[p] {
		out = append(out, delivery{tp: p, offset: off, value: v})
	}
	slices.SortFunc(out, func(a, b delivery) int { return int(a.offset - b.offset) })
	return out
}

// checkExactlyOnce checks that every acknowledged record was delivered
// exactly once, that per partition the deliveries came in offset order,
// and that each delivered record is the one acknowledged at its offset.
// Offsets need not be contiguous (a transactional or compacted log may have
// gaps), but a produce that the server acknowledged at offset O must be
// read back at O.
func (l *ledger) checkExactlyOnce(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	byPart := map[tp][]delivery{}
	for _, d := range l.delivered {
		byPart[d.tp] = append(byPart[d.tp], d)
	}
	for p := range l.produced {
		want := l.producedInOrder(p)
		got := byPart[p]
		if len(got) != len(want) {
			t.Errorf("%v: %d records acknowledged, %d delivered", p, len(want), len(got))
		}
		for i := range min(len(got), len(want)) {
			if got[i].offset != want[i].offset || got[i].value != want[i].value {
				t.Errorf("%v: delivery %d is offset %d %q, want offset %d %q", p, i, got[i].offset, got[i].value, want[i].offset, want[i].value)
				break
			}
		}
	}
	for p, ds := range byPart {
		if _, ok := l.produced[p]; !ok {
			t.Errorf("%v: %d records delivered from a partition nothing was produced to", p, len(ds))
		}
	}
}

// checkAtLeastOnce is the check for consumer groups that rebalance while
// they consume. A member that loses a partition may have received records
// after its last commit; the next owner starts from the committed offset
// and gets them again - Kafka's at-least-once, so duplicates are allowed.
// What must hold:
//   - nothing is lost: every acknowledged record is delivered;
//   - each delivered record is the one acknowledged at its offset;
//   - per partition, the first delivery of each offset, in the order the
//     deliveries were recorded across all members, is in offset order
//     (a partition has one owner at a time, and a new owner starts where
//     the old one committed, at or before where it stopped, so a record
//     never reaches anyone before the records ahead of it).
//
// Deliveries are recorded by each member right after its poll returns
// them; a rebalance that hands a partition on takes several round trips
// (revoke, commit, join, sync, fetch), so the recorded order follows the
// real one.
func (l *ledger) checkAtLeastOnce(t *testing.T) (redelivered int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	first := map[tp][]delivery{}
	seen := map[tp]map[int64]bool{}
	dups := 0
	for _, d := range l.delivered {
		if want, ok := l.produced[d.tp][d.offset]; !ok || want != d.value {
			t.Errorf("%v offset %d delivered %q, acknowledged %q", d.tp, d.offset, d.value, want)
			continue
		}
		if seen[d.tp] == nil {
			seen[d.tp] = map[int64]bool{}
		}
		if seen[d.tp][d.offset] {
			dups++
			continue
		}
		seen[d.tp][d.offset] = true
		first[d.tp] = append(first[d.tp], d)
	}
	for p := range l.produced {
		want := l.producedInOrder(p)
		got := first[p]
		if len(got) != len(want) {
			t.Errorf("%v: %d records acknowledged, %d distinct delivered (lost %d)", p, len(want), len(got), len(want)-len(got))
		}
		for i := range min(len(got), len(want)) {
			if got[i].offset != want[i].offset {
				t.Errorf("%v: first delivery %d is offset %d (by %s), want %d", p, i, got[i].offset, got[i].by, want[i].offset)
				break
			}
		}
	}
	t.Logf("%d deliveries, %d of them redeliveries after a rebalance", len(l.delivered), dups)
	return dups
}

// checkDelivered is the check for share groups, which keep no order: every
// acknowledged record was delivered, each delivery the record acknowledged
// at its offset. It returns how many deliveries repeated one.
func (l *ledger) checkDelivered(t *testing.T) (redelivered int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[tp]map[int64]bool{}
	for _, d := range l.delivered {
		if want, ok := l.produced[d.tp][d.offset]; !ok || want != d.value {
			t.Errorf("%v offset %d delivered %q, acknowledged %q", d.tp, d.offset, d.value, want)
			continue
		}
		if seen[d.tp] == nil {
			seen[d.tp] = map[int64]bool{}
		}
		if seen[d.tp][d.offset] {
			redelivered++
		}
		seen[d.tp][d.offset] = true
	}
	for p, offs := range l.produced {
		for o := range offs {
			if !seen[p][o] {
				t.Errorf("%v offset %d acknowledged, never delivered", p, o)
			}
		}
	}
	t.Logf("%d deliveries, %d of them repeats", len(l.delivered), redelivered)
	return redelivered
}

// errorResponses lists the proxy's transcript lines of responses that
// carried an error code.
func (s *server) errorResponses() string {
	var out []string
	for _, line := range strings.Split(s.proxy.transcript(), "\n") {
		if strings.Contains(line, " ERRORS ") && !strings.Contains(line, "MEMBER_ID_REQUIRED") && !strings.Contains(line, "← ApiVersions") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
