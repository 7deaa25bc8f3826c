package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The failover split is read from the nodes' logs: findLog must take only
// lines at or after since that hold every part, and skip what is not a
// slog line (the "spool: serving on" lines, a goroutine dump).
func TestFindLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	log := `clusterbench: starting node 1 at 2026-12-01T15:52:35.380321562Z
spool: serving on 127.0.0.1:1
time=2026-12-01T15:52:36.000Z level=WARN msg="broker session expired; fencing" node=3 broker=12 broker_epoch=5
time=2026-12-01T15:52:37.000Z level=WARN msg="broker session expired; fencing" node=3 broker=2 broker_epoch=7
time=2026-12-01T15:52:38.500Z level=WARN msg="broker session expired; fencing" node=3 broker=2 broker_epoch=9
goroutine 1 gp=0x1 m=nil [select]:
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	nd := &node{logPath: path}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fence := `msg="broker session expired; fencing"`
	for _, c := range []struct {
		since string
		want  string // "" for none
	}{
		{"2026-12-01T15:52:30Z", "2026-12-01T15:52:37Z"},       // broker=12 is not broker=2
		{"2026-12-01T15:52:37.0004Z", "2026-12-01T15:52:37Z"},  // slog's millisecond: the same instant
		{"2026-12-01T15:52:37.001Z", "2026-12-01T15:52:38.5Z"}, // the later incarnation's
		{"2026-12-01T15:52:39Z", ""},
	} {
		e, ok := nd.findLog(at(c.since), fence, "broker=2 ")
		switch {
		case c.want == "" && ok:
			t.Errorf("since %s: found %q, want none", c.since, e.line)
		case c.want != "" && !ok:
			t.Errorf("since %s: found none, want %s", c.since, c.want)
		case c.want != "" && !e.at.Equal(at(c.want)):
			t.Errorf("since %s: found %v, want %s", c.since, e.at, c.want)
		}
	}
	if _, ok := (&node{logPath: filepath.Join(t.TempDir(), "none")}).findLog(time.Time{}, fence); ok {
		t.Error("found a line in a missing file")
	}
}

// The failover's "ack" is the first acknowledgement for the victim's
// partition after the kill by any other broker: not an earlier one, not
// another partition's, not the victim's own (a response in flight when it
// died).
func TestAckLogFirst(t *testing.T) {
	var l ackLog
	t0 := time.Now()
	add := func(d time.Duration, node, partition int32) {
		l.events = append(l.events, ackEvent{t0.Add(d), node, partition})
	}
	add(-time.Second, 2, 0)
	add(time.Millisecond, 1, 0) // the victim's, after the kill
	add(2*time.Millisecond, 2, 1)
	add(3*time.Second, 2, 0)
	add(4*time.Second, 3, 0)
	e, ok := l.first(t0, 0, 1)
	if !ok || !e.at.Equal(t0.Add(3*time.Second)) || e.node != 2 {
		t.Errorf("first(t0, partition 0, not 1) = %+v, %v; want node 2 at +3s", e, ok)
	}
	if e, ok := l.first(t0, 1, -2); !ok || e.node != 2 {
		t.Errorf("first(t0, partition 1, any) = %+v, %v; want node 2", e, ok)
	}
	if _, ok := l.first(t0.Add(5*time.Second), 0, 1); ok {
		t.Error("found an acknowledgement after the last")
	}
	if _, ok := l.first(t0, 2, -2); ok {
		t.Error("found an acknowledgement of a partition never acknowledged")
	}
	// The hook appends what it is given, in order.
	var h ackLog
	h.OnProduceBatchWritten(kgo.BrokerMetadata{NodeID: 3}, failoverTopic, 2, kgo.ProduceBatchMetrics{})
	if len(h.events) != 1 || h.events[0].node != 3 || h.events[0].partition != 2 {
		t.Errorf("hook recorded %+v", h.events)
	}
}

// The Java-like client backs off 100 ms doubling to 1 s, with 20% jitter.
func TestJavaBackoff(t *testing.T) {
	for fails, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond,
		2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		for range 20 {
			got := javaBackoff(fails)
			if lo, hi := want*8/10, want*12/10; got < lo || got > hi {
				t.Fatalf("javaBackoff(%d) = %v, want within [%v, %v]", fails, got, lo, hi)
			}
		}
	}
}

// The CPU columns read /proc/PID/stat; a process that burnt CPU has some.
func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here: the CPU columns show 0")
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	if got := procCPU(os.Getpid()); got <= 0 {
		t.Errorf("procCPU(self) = %v after spinning 100 ms", got)
	}
	if got := procCPU(-1); got != 0 {
		t.Errorf("procCPU(-1) = %v, want 0", got)
	}
	if got := selfCPU(); got <= 0 {
		t.Errorf("selfCPU() = %v", got)
	}
}

func TestPercentileAndMedians(t *testing.T) {
	v := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := percentile(v, 0.5); got != 6 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(v, 0.99); got != 10 {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("p50 of none = %v", got)
	}
	if got := medianOf([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v", got)
	}
}
