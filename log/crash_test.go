package log

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// The crash test re-executes the test binary as a child that appends under
// the Sync policy and prints every acknowledged append; the parent SIGKILLs
// it at a random moment, reopens the log and checks that every acknowledged
// record is there, byte for byte, and nothing but whole valid batches.

const crashChildEnv = "SPOOL_LOG_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashOptions() Options {
	return Options{
		SegmentBytes:       32 << 10, // roll often: crashes land in rolls too
		IndexIntervalBytes: 512,
		IndexMaxBytes:      4 << 10,
		CheckpointInterval: 15 * time.Millisecond, // and in checkpoints
	}
}

// crashValue is the value of record i of writer w's append number seq.
func crashValue(w, seq, i int) []byte {
	head := fmt.Sprintf("w%d-s%d-r%d|", w, seq, i)
	return append([]byte(head), bytes.Repeat([]byte{byte('a' + (w+seq+i)%26)}, (seq*7+i*13)%200)...)
}

func crashChild(dir string) {
	l, err := Open(dir, crashOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each run of the child starts its sequence numbers from a
			// random base so rounds do not collide.
			seq := int(time.Now().UnixNano()%1_000_000) * 10
			for {
				n := 1 + seq%5
				recs := make([]record.Record, n)
				for i := range recs {
					recs[i] = record.Record{Key: []byte{byte(w)}, Value: crashValue(w, seq, i)}
				}
				off, err := l.Append(recs...)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				line := fmt.Sprintf("ack %d %d %d %d\n", off, w, seq, n)
				out.Lock()
				os.Stdout.WriteString(line) // one write per line: a kill cannot split it
				out.Unlock()
				seq++
			}
		}()
	}
	wg.Wait()
}

type ack struct {
	off       int64
	w, seq, n int
}

func TestCrashKeepsAcknowledgedAppends(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	if s := os.Getenv("SPOOL_CRASH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acks []ack
	for round := 0; round < rounds; round++ {
		got := runCrashChild(t, dir, time.Duration(10+rng.IntN(150))*time.Millisecond)
		acks = append(acks, got...)

		l, info, err := OpenWithInfo(dir, crashOptions())
		require.NoError(t, err, "round %d", round)
		require.False(t, info.Clean, "round %d: a killed process cannot have closed cleanly", round)
		recs := readAllBy(t, l, 0, func() int { return 1 << 20 }) // every batch CRC-checked
		byOffset := make(map[int64][]byte, len(recs))
		for i, r := range recs {
			require.Equal(t, int64(i), r.Offset, "round %d: offsets are dense", round)
			byOffset[r.Offset] = r.Value
		}
		require.Equal(t, l.EndOffset(), int64(len(recs)))
		for _, a := range acks {
			for i := 0; i < a.n; i++ {
				v, ok := byOffset[a.off+int64(i)]
				require.True(t, ok, "round %d: acknowledged offset %d lost", round, a.off+int64(i))
				require.Equal(t, crashValue(a.w, a.seq, i), v, "round %d: offset %d", round, a.off+int64(i))
			}
		}
		if round%10 == 0 {
			t.Logf("round %d: %d acked appends, %d records, %d segments, checked %d bytes in %d segments",
				round, len(acks), len(recs), l.NumSegments(), info.BytesChecked, info.SegmentsChecked)
		}
		// Half the rounds close cleanly, half leave the log as the crash
		// did, so the next child opens both kinds.
		if round%2 == 0 {
			require.NoError(t, l.Close())
		} else {
			l.abandon()
		}
	}
}

// runCrashChild runs a child appending in dir, kills it after d (once it has
// acknowledged something) and returns its acknowledgements.
func runCrashChild(t *testing.T, dir string, d time.Duration) []ack {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	var acks []ack
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a ack
			if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d %d", &a.off, &a.w, &a.seq, &a.n); err != nil {
				continue // a line cut by the kill was never acknowledged whole
			}
			if len(acks) == 0 {
				close(first)
			}
			acks = append(acks, a)
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
	require.NotEmpty(t, acks, "child acknowledged nothing: %s", strings.TrimSpace(stderr.String()))
	return acks
}
