package controller

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
)

// The crash tests re-execute the test binary as a child that works on a
// store and prints each operation before it starts ("op ...") and after it
// returns ("ok"); the parent SIGKILLs it at a random moment, reopens the
// store and checks it holds what the acknowledged operations left, give or
// take the one in flight - which, for a StoreLogs, may have stored a prefix
// of its entries, and for a deletion of the tail may have deleted a part of
// it (never an entry before the cut, never leaving a hole).

const crashChildEnv = "SPOOL_RAFTSTORE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashChildEnv); spec != "" {
		kind, path, _ := strings.Cut(spec, ":")
		switch kind {
		case "log":
			logStoreCrashChild(path)
		case "stable":
			stableStoreCrashChild(path)
		}
		os.Exit(5)
	}
	os.Exit(m.Run())
}

func crashLogOptions() LogStoreOptions { return LogStoreOptions{SegmentBytes: 8 << 10} }

func crashRounds(t *testing.T, n int) int {
	if testing.Short() {
		n /= 4
	}
	if s := os.Getenv("SPOOL_CRASH_ROUNDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	return n
}

// say writes one line in one system call, so a kill never splits it.
func say(format string, args ...any) { os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n") }

func childFail(what string, err error) {
	fmt.Fprintf(os.Stderr, "child %s: %v\n", what, err)
	os.Exit(4)
}

// logStoreCrashChild drives a LogStore as a Raft follower would: appends,
// often with a new term; suffixes deleted at random entries (inside
// batches as often as not) and rewritten with a later term; head deletions;
// now and then everything deleted and the log started again elsewhere.
func logStoreCrashChild(dir string) {
	s, err := OpenLogStore(dir, crashLogOptions())
	if err != nil {
		childFail("open", err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	term := uint64(1)
	if last > 0 {
		var e raft.Log
		if err := s.GetLog(last, &e); err != nil {
			childFail("read last", err)
		}
		term = e.Term + 1
	}
	next := last + 1
	if last == 0 {
		next = 1 + uint64(rng.IntN(300))
	}
	for {
		switch p := rng.IntN(100); {
		case p < 20 && last > first && first > 0:
			from := uint64(max(int64(first)+1, int64(last)-int64(rng.IntN(15))))
			say("op del %d %d", from, last)
			if err := s.DeleteRange(from, last); err != nil {
				childFail("delete tail", err)
			}
			last, next, term = from-1, from, term+1
		case p < 30 && last > first && first > 0:
			to := first + uint64(rng.IntN(int(last-first)))
			say("op del %d %d", first, to)
			if err := s.DeleteRange(first, to); err != nil {
				childFail("delete head", err)
			}
			first = to + 1
		case p < 33 && first > 0:
			say("op del %d %d", first, last)
			if err := s.DeleteRange(first, last); err != nil {
				childFail("delete all", err)
			}
			next = uint64(max(1, int64(last)+50-int64(rng.IntN(100))))
			first, last, term = 0, 0, term+1
		default:
			if rng.IntN(4) == 0 {
				term++
			}
			n := 1 + uint64(rng.IntN(8))
			say("op store %d %d %d", next, n, term)
			if err := s.StoreLogs(testEntries(next, next+n-1, term)); err != nil {
				childFail("store", err)
			}
			if first == 0 {
				first = next
			}
			last = next + n - 1
			next = last + 1
		}
		say("ok")
	}
}

// raftState is what a LogStore holds: the term of each stored index.
type raftState struct {
	first, last uint64
	terms       map[uint64]uint64
}

func (st raftState) clone() raftState {
	c := st
	c.terms = make(map[uint64]uint64, len(st.terms))
	for k, v := range st.terms {
		c.terms[k] = v
	}
	return c
}

func (st raftState) String() string {
	if st.first == 0 {
		return "empty"
	}
	return fmt.Sprintf("[%d, %d] last term %d", st.first, st.last, st.terms[st.last])
}

func (st raftState) equal(o raftState) bool {
	if st.first != o.first || st.last != o.last {
		return false
	}
	for i := st.first; st.first != 0 && i <= st.last; i++ {
		if st.terms[i] != o.terms[i] {
			return false
		}
	}
	return true
}

// apply applies one op line (without "op ") to st, as the store does.
func (st *raftState) apply(t *testing.T, op string) {
	var a, b, c uint64
	if _, err := fmt.Sscanf(op, "store %d %d %d", &a, &b, &c); err == nil {
		if st.first == 0 {
			st.first = a
		} else {
			require.Equal(t, st.last+1, a, "op %q after %s", op, st)
		}
		for i := a; i < a+b; i++ {
			st.terms[i] = c
		}
		st.last = a + b - 1
		return
	}
	_, err := fmt.Sscanf(op, "del %d %d", &a, &b)
	require.NoError(t, err, "op %q", op)
	switch {
	case st.first == 0 || b < st.first || a > st.last:
	case a <= st.first && b >= st.last:
		*st = raftState{terms: map[uint64]uint64{}}
	case a <= st.first:
		st.first = b + 1
	case b >= st.last:
		st.last = a - 1
	default:
		t.Fatalf("op %q leaves a hole in %s", op, st)
	}
}

// readState reads every entry of s, checking each is the entry of its
// index and term, byte for byte.
func readState(t *testing.T, s *LogStore) raftState {
	first, err := s.FirstIndex()
	require.NoError(t, err)
	last, err := s.LastIndex()
	require.NoError(t, err)
	st := raftState{first: first, last: last, terms: map[uint64]uint64{}}
	for i := first; first != 0 && i <= last; i++ {
		var e raft.Log
		require.NoError(t, s.GetLog(i, &e), "index %d of [%d, %d]", i, first, last)
		requireEntry(t, testEntry(i, e.Term), &e)
		st.terms[i] = e.Term
	}
	return st
}

func TestLogStoreCrash(t *testing.T) {
	rounds := crashRounds(t, 40)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	model := raftState{terms: map[uint64]uint64{}}
	var ops, inFlightStores, unfinishedCuts int
	for round := 0; round < rounds; round++ {
		lines := runCrashChild(t, "log:"+dir, time.Duration(20+rng.IntN(200))*time.Millisecond)
		var pending string
		for _, line := range lines {
			switch {
			case strings.HasPrefix(line, "op "):
				require.Empty(t, pending, "round %d: an op began before %q finished", round, pending)
				pending = strings.TrimPrefix(line, "op ")
			case line == "ok":
				require.NotEmpty(t, pending, "round %d", round)
				model.apply(t, pending)
				pending = ""
				ops++
			}
		}
		// What the store may hold: what the acknowledged ops left, or that
		// plus the op in flight, or - for a store - a prefix of its entries.
		candidates := []raftState{model}
		if pending != "" {
			var from, n, term uint64
			if _, err := fmt.Sscanf(pending, "store %d %d %d", &from, &n, &term); err == nil {
				inFlightStores++
				for k := uint64(1); k <= n; k++ {
					c := model.clone()
					c.apply(t, fmt.Sprintf("store %d %d %d", from, k, term))
					candidates = append(candidates, c)
				}
			} else if _, err := fmt.Sscanf(pending, "del %d %d", &from, &n); err == nil && model.first != 0 && from > model.first && n >= model.last {
				// A tail deletion: the log may be cut anywhere from the
				// cut to its old end (the log deletes later segments
				// before it cuts the one that holds the cut).
				for k := from - 1; k < model.last; k++ {
					c := model.clone()
					c.apply(t, fmt.Sprintf("del %d %d", k+1, model.last))
					candidates = append(candidates, c)
				}
			} else {
				c := model.clone()
				c.apply(t, pending)
				candidates = append(candidates, c)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, truncateFile)); err == nil {
			unfinishedCuts++
		}

		s, err := OpenLogStore(dir, crashLogOptions())
		require.NoError(t, err, "round %d", round)
		got := readState(t, s)
		ok := false
		for _, c := range candidates {
			ok = ok || got.equal(c)
		}
		require.True(t, ok, "round %d: the store holds %s; acknowledged %s, in flight %q", round, got, model, pending)
		require.NoFileExists(t, filepath.Join(dir, truncateFile))
		require.NoError(t, s.Close())
		model = got
	}
	t.Logf("%d rounds, %d acknowledged ops, %d kills during a store, %d during a cut inside a batch; the log ends %s",
		rounds, ops, inFlightStores, unfinishedCuts, model)
}

// A crash can tear the last batch (a write cut short) or leave bytes past
// it; the log's recovery cuts them, and the store comes back at the last
// whole batch: LastIndex consistent with what is readable, the next index
// storable. Damage with whole batches after it is not cut but refused
// (acknowledged entries may lie past it).
func TestLogStoreTornTail(t *testing.T) {
	tails := map[string]func(seg []byte, lastBatch int) []byte{
		"cut one byte":      func(seg []byte, _ int) []byte { return seg[:len(seg)-1] },
		"cut mid-batch":     func(seg []byte, lb int) []byte { return seg[:lb+(len(seg)-lb)/2] },
		"cut inside header": func(seg []byte, lb int) []byte { return seg[:lb+20] },
		"garbage appended": func(seg []byte, _ int) []byte {
			return append(seg, []byte("\x00\x00\x00\x00\x00\x00\x00\x33garbage past the end")...)
		},
		"zeros appended":               func(seg []byte, _ int) []byte { return append(seg, make([]byte, 4096)...) },
		"a header copied past the end": func(seg []byte, lb int) []byte { return append(seg, seg[lb:lb+61]...) },
	}
	// How the process stopped: killed (the checkpoint is the one written
	// at open, not marked clean), killed with the checkpoint lost too, or
	// closed cleanly - and then only bytes past the end can appear: a cut
	// into data a clean close flushed is refused (see the log package).
	stops := []string{"killed", "no checkpoint", "clean close"}
	for name, tear := range tails {
		for _, stop := range stops {
			cut := strings.HasPrefix(name, "cut")
			if cut && stop == "clean close" {
				continue
			}
			t.Run(name+", "+stop, func(t *testing.T) {
				dir := t.TempDir()
				s, err := OpenLogStore(dir, LogStoreOptions{})
				require.NoError(t, err)
				cp := filepath.Join(dir, log.CheckpointFile)
				atOpen, err := os.ReadFile(cp)
				require.NoError(t, err)
				want := testEntries(1, 50, 1)
				for i := 0; i < 50; i += 5 {
					require.NoError(t, s.StoreLogs(want[i:i+5]))
				}
				require.NoError(t, s.Close())
				seg := filepath.Join(dir, "00000000000000000000.log")
				data, err := os.ReadFile(seg)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(seg, tear(data, lastBatchPosition(t, data)), 0o644))
				switch stop {
				case "killed":
					require.NoError(t, os.WriteFile(cp, atOpen, 0o644))
				case "no checkpoint":
					require.NoError(t, os.Remove(cp))
				}

				s, err = OpenLogStore(dir, LogStoreOptions{})
				require.NoError(t, err)
				last, err := s.LastIndex()
				require.NoError(t, err)
				keep := 50
				if cut {
					keep = 45 // the last batch (46..50) was torn
				}
				require.Equal(t, uint64(keep), last)
				requireRange(t, s, want[:keep])
				more := testEntries(uint64(keep+1), uint64(keep+3), 2)
				require.NoError(t, s.StoreLogs(more))
				s = reopen(t, s)
				requireRange(t, s, append(want[:keep:keep], more...))
				require.NoError(t, s.Close())
			})
		}
	}

	t.Run("damage before whole batches", func(t *testing.T) {
		dir := t.TempDir()
		s, err := OpenLogStore(dir, LogStoreOptions{})
		require.NoError(t, err)
		for i := uint64(1); i <= 50; i += 5 {
			require.NoError(t, s.StoreLogs(testEntries(i, i+4, 1)))
		}
		require.NoError(t, s.Close())
		seg := filepath.Join(dir, "00000000000000000000.log")
		data, err := os.ReadFile(seg)
		require.NoError(t, err)
		data[lastBatchPosition(t, data)-10] ^= 0xff // inside the batch before the last
		require.NoError(t, os.WriteFile(seg, data, 0o644))
		require.NoError(t, os.Remove(filepath.Join(dir, log.CheckpointFile)))
		_, err = OpenLogStore(dir, LogStoreOptions{})
		require.ErrorIs(t, err, log.ErrCorrupt)
		require.ErrorContains(t, err, seg)
	})
}

// lastBatchPosition is the byte position of the last batch in a segment.
func lastBatchPosition(t *testing.T, seg []byte) int {
	pos, last := 0, -1
	for pos+12 <= len(seg) {
		n := int(uint32(seg[pos+8])<<24|uint32(seg[pos+9])<<16|uint32(seg[pos+10])<<8|uint32(seg[pos+11])) + 12
		last, pos = pos, pos+n
	}
	require.Equal(t, len(seg), pos, "whole batches")
	return last
}

// stableStoreCrashChild sets the term and then the vote, as Raft does on
// an election, again and again.
func stableStoreCrashChild(path string) {
	s, err := OpenStableStore(path)
	if err != nil {
		childFail("open", err)
	}
	n, err := s.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		childFail("read", err)
	}
	for n++; ; n++ {
		say("op %d", n)
		if err := s.SetUint64([]byte("CurrentTerm"), n); err != nil {
			childFail("set term", err)
		}
		if err := s.Set([]byte("LastVoteCand"), []byte(fmt.Sprintf("cand-%d", n))); err != nil {
			childFail("set vote", err)
		}
		say("ok")
	}
}

// A kill during Set leaves the old value or the new one, never damage: the
// term is what the last acknowledged election set, or the one in flight,
// and so is the vote, never ahead of the term.
func TestStableStoreCrash(t *testing.T) {
	rounds := crashRounds(t, 30)
	path := filepath.Join(t.TempDir(), QuorumStateFile)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	acked := uint64(0)
	for round := 0; round < rounds; round++ {
		lines := runCrashChild(t, "stable:"+path, time.Duration(5+rng.IntN(100))*time.Millisecond)
		var started uint64
		for _, line := range lines {
			if _, err := fmt.Sscanf(line, "op %d", &started); err == nil {
				continue
			}
			if line == "ok" {
				acked = started
			}
		}
		s, err := OpenStableStore(path)
		require.NoError(t, err, "round %d", round)
		term, err := s.GetUint64([]byte("CurrentTerm"))
		require.NoError(t, err)
		vote, err := s.Get([]byte("LastVoteCand"))
		require.NoError(t, err)
		var voted uint64
		_, err = fmt.Sscanf(string(vote), "cand-%d", &voted)
		require.NoError(t, err, "round %d: vote %q", round, vote)
		require.Contains(t, []uint64{acked, acked + 1}, term, "round %d", round)
		require.Contains(t, []uint64{acked, acked + 1}, voted, "round %d", round)
		require.LessOrEqual(t, voted, term, "round %d", round)
		acked = term // the next child goes on from what is stored
		if voted < term {
			acked = voted
		}
	}
	t.Logf("%d rounds, last acknowledged term %d", rounds, acked)
}

// runCrashChild runs a child on spec, kills it after d (once it has
// acknowledged something) and returns the lines it printed.
func runCrashChild(t *testing.T, spec string, d time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+spec)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	var lines []string
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		acked := false
		for sc.Scan() {
			if sc.Text() == "ok" && !acked {
				close(first)
				acked = true
			}
			lines = append(lines, sc.Text())
		}
	}()
	select {
	case <-first:
	case <-done:
	case <-time.After(20 * time.Second):
	}
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, stderr.String())
	}
	require.Contains(t, lines, "ok", "child acknowledged nothing: %s", strings.TrimSpace(stderr.String()))
	return lines
}
