package main

import (
	"bufio"
	"bytes"
	"flag"
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

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
)

var (
	crashRounds = flag.Int("crash-rounds", 20, "rounds of TestProduceCrashLoop")
	crashSeed   = flag.Uint64("crash-seed", 0, "seed of TestProduceCrashLoop's kill times (0: random)")
)

// crashTopic is the crash test's topic. It has one partition, so that the
// i-th ack a producer prints is the i-th line it was given (acks of one
// partition come in the order of the lines).
const crashTopic = "crash"

// crashRound is what one round of the crash test did.
type crashRound struct {
	firstAck int64 // the offset of the first line's ack, if any
	acks     int64 // lines 0 to acks-1 were acknowledged, at firstAck...
}

// TestProduceCrashLoop runs "spool produce --print-acks" as a process fed
// from a pipe, SIGKILLs it at a random moment, and checks that every ack it
// printed before dying is durable: the acknowledged offset holds the line
// sent for it. Each round restarts the producer on the same data directory,
// so it also recovers what the previous kill left. Under the default Sync
// flush policy an ack is printed only once its record is on stable storage;
// a SIGKILL does not even lose the page cache, so this checks that no ack
// is printed early and that recovery keeps everything acknowledged.
func TestProduceCrashLoop(t *testing.T) {
	bin := spoolBinary(t)
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -crash-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	data := filepath.Join(t.TempDir(), "data")
	out, err := exec.Command(bin, "topics", "create", "--data", data, "--topic", crashTopic).CombinedOutput()
	require.NoError(t, err, "%s", out)

	var rounds []crashRound
	cl := newCrashLog()
	for r := range *crashRounds {
		killAfter := time.Duration(50+rng.IntN(251)) * time.Millisecond
		burst := 1 + rng.IntN(64)
		round := runCrashRound(t, bin, data, r, killAfter, burst)
		rounds = append(rounds, round)
		// spool check agrees that a kill leaves no corruption (a torn
		// tail is a warning).
		out, err := exec.Command(bin, "check", "--quiet", data).CombinedOutput()
		require.NoError(t, err, "spool check after round %d:\n%s", r, out)
		before := cl.end
		cl.check(t, data, rounds) // what this round added, and every ack
		t.Logf("round %d: %d lines/ms, killed after %v: %d acks, %d records", r, burst, killAfter, round.acks, cl.end-before)
	}
	// Once more from the start: recovery changed nothing checked before.
	again := newCrashLog()
	again.check(t, data, rounds)
	require.Equal(t, cl, again)
	end := cl.end
	var acked int64
	for _, r := range rounds {
		acked += r.acks
	}
	require.Positive(t, acked, "no round printed an ack")

	// The console consumer, as a process, reads the same.
	cmd := exec.Command(bin, "consume", "--data", data, "--topic", crashTopic, "--from", "earliest", "--count", strconv.FormatInt(end, 10), "--print-offsets")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	lines := strings.Split(strings.TrimSuffix(string(stdout), "\n"), "\n")
	require.Len(t, lines, int(end))
	for r, round := range rounds {
		for i := range round.acks {
			off := round.firstAck + i
			require.Equal(t, fmt.Sprintf("0 %d round-%d-line-%d", off, r, i), lines[off])
		}
	}
}

// runCrashRound starts a producer, feeds it lines "round-R-line-L", burst
// lines about every millisecond (as fast, the log would grow by a million
// records a second and the test would spend its time reading them),
// SIGKILLs it after killAfter, and returns the acks it printed.
func runCrashRound(t *testing.T, bin, data string, r int, killAfter time.Duration, burst int) crashRound {
	t.Helper()
	cmd := exec.Command(bin, "produce", "--print-acks", "--data", data, "--topic", crashTopic)
	stdinR, stdinW, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdin = stdinR
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	stdinR.Close() // the child has it

	// Write until the pipe breaks: the child is dead.
	go func() {
		defer stdinW.Close()
		var buf []byte
		for line := 0; ; {
			buf = buf[:0]
			for range burst {
				buf = fmt.Appendf(buf, "round-%d-line-%d\n", r, line)
				line++
			}
			if _, err := stdinW.Write(buf); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	acksDone := make(chan []string)
	go func() {
		var acks []string
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// A line cut short (never seen: each ack is one write to
				// a pipe, which is atomic) is not an ack.
				acksDone <- acks
				return
			}
			acks = append(acks, strings.TrimSuffix(line, "\n"))
		}
	}()

	time.Sleep(killAfter)
	killErr := cmd.Process.Kill() // SIGKILL
	acks := <-acksDone
	err = cmd.Wait()
	require.NoError(t, killErr, "the producer ended before the kill: %v: %s", err, stderr.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "%v: %s", err, stderr.String())
	require.Empty(t, stderr.String(), "the producer reported errors")

	// The i-th ack is line i's: consecutive offsets of partition 0.
	round := crashRound{acks: int64(len(acks))}
	for i, ack := range acks {
		p, off, ok := strings.Cut(ack, " ")
		require.True(t, ok, "ack %q", ack)
		require.Equal(t, "0", p, "ack %q", ack)
		n, err := strconv.ParseInt(off, 10, 64)
		require.NoError(t, err, "ack %q", ack)
		if i == 0 {
			round.firstAck = n
		}
		require.Equal(t, round.firstAck+int64(i), n, "ack %d of round %d: %q", i, r, ack)
	}
	return round
}

// crashLog checks the crash topic's log, incrementally: every record is a
// line that was sent, and each round's records are its lines 0, 1, 2, ...
// at consecutive offsets (a prefix of what it was sent: a kill may cut the
// log short, never punch a hole in it or reorder it).
type crashLog struct {
	end        int64         // offsets below end are checked
	lastRound  int           // the round of the record at end-1; -1 before any
	roundStart map[int]int64 // the offset of each round's line 0
	roundEnd   map[int]int64 // the offset after each round's last line
}

func newCrashLog() *crashLog {
	return &crashLog{lastRound: -1, roundStart: map[int]int64{}, roundEnd: map[int]int64{}}
}

// check opens the data directory with the library, reads the log from
// where the last check ended to its end, and then checks every ack of
// rounds: its offset holds its line.
func (cl *crashLog) check(t *testing.T, data string, rounds []crashRound) {
	t.Helper()
	b, err := spool.Open(data, spool.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	d, err := b.DescribeTopic(crashTopic)
	require.NoError(t, err)
	end := d.Partitions[0].HighWatermark
	require.Equal(t, d.Partitions[0].EndOffset, end)
	require.GreaterOrEqual(t, end, cl.end, "the log shrank")

	c, err := b.NewConsumer(spool.ConsumerConfig{AutoOffsetReset: spool.ResetNone, FetchMaxWait: time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign(crashTopic))
	require.NoError(t, c.Seek(crashTopic, 0, cl.end))
	for cl.end < end {
		recs, err := c.Poll(t.Context())
		require.NoError(t, err)
		for _, rec := range recs {
			require.Equal(t, cl.end, rec.Offset)
			r, line, ok := parseCrashLine(rec.Value)
			require.True(t, ok, "offset %d holds %q, a line never sent", rec.Offset, rec.Value)
			if r != cl.lastRound {
				require.Greater(t, r, cl.lastRound, "offset %d: round %d after round %d", rec.Offset, r, cl.lastRound)
				cl.roundStart[r], cl.lastRound = rec.Offset, r
			}
			require.Equal(t, rec.Offset-cl.roundStart[r], line, "offset %d: round %d's line %d is out of place", rec.Offset, r, line)
			cl.end++
			cl.roundEnd[r] = cl.end
		}
	}
	for r, round := range rounds {
		if round.acks == 0 {
			continue
		}
		start, ok := cl.roundStart[r]
		require.True(t, ok, "round %d: %d acks from offset %d, and none of its records", r, round.acks, round.firstAck)
		require.Equal(t, round.firstAck, start, "round %d: first ack at %d, first record at %d", r, round.firstAck, start)
		require.GreaterOrEqual(t, cl.roundEnd[r], round.firstAck+round.acks,
			"round %d: %d acks from offset %d, its records end at %d", r, round.acks, round.firstAck, cl.roundEnd[r])
	}
}

// parseCrashLine parses "round-R-line-L".
func parseCrashLine(v []byte) (round int, line int64, ok bool) {
	s, ok := strings.CutPrefix(string(v), "round-")
	if !ok {
		return 0, 0, false
	}
	rs, ls, ok := strings.Cut(s, "-line-")
	if !ok {
		return 0, 0, false
	}
	r, err1 := strconv.Atoi(rs)
	l, err2 := strconv.ParseInt(ls, 10, 64)
	return r, l, err1 == nil && err2 == nil && r >= 0 && l >= 0
}
