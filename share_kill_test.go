package spool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/share"
	"github.com/stretchr/testify/require"
)

// The share-group worker child: a process that opens the broker and runs
// eight share consumers on the one partition of "jobs", acknowledging
// what they take, until it is killed. It prints "acked N" after each
// acknowledgement returns and "delivered N C" for each redelivery (C the
// delivery count), and "all done" once nothing is left.
const shareChildEnv = "SPOOL_TEST_SHARE_DIR"

var shareKillOptions = Options{OffsetsTopicPartitions: 1, ShareLockDuration: time.Second}

func runShareChild(dir string) int {
	b, err := Open(dir, shareKillOptions)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 2
	}
	defer b.Close()
	ctx := context.Background()
	var mu sync.Mutex // one line at a time
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range 8 {
		c, err := b.NewShareConsumer(ShareConsumerConfig{Group: "workers", Topics: []string{"jobs"}, MaxRecords: 7, FetchMaxWait: 20 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: consumer:", err)
			return 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for {
				recs, err := c.Poll(ctx)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child: poll:", err)
					os.Exit(2)
				}
				if len(recs) == 0 {
					if idle++; idle > 20 {
						return
					}
					continue
				}
				idle = 0
				for _, r := range recs {
					if r.DeliveryCount > 1 {
						say("delivered %d %d", r.Offset, r.DeliveryCount)
					}
				}
				time.Sleep(2 * time.Millisecond) // working
				if err := c.Ack(ctx, recs...); errors.Is(err, share.ErrInvalidRecordState) {
					// A lock expired while we worked (a slow machine, the
					// race detector): those jobs went to another worker,
					// and none of this batch was acknowledged.
					continue
				} else if err != nil {
					fmt.Fprintln(os.Stderr, "child: ack:", err)
					os.Exit(2)
				}
				for _, r := range recs {
					say("acked %d", r.Offset)
				}
			}
		}()
	}
	wg.Wait()
	say("all done")
	return 0
}

// Eight share consumers in a process SIGKILLed again and again - broker
// and all: no job acknowledged before a kill is delivered again after
// it, jobs in flight at a kill are delivered again, and in the end every
// job is acknowledged.
func TestShareGroupThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the share group kill test (child processes)")
	}
	dir := t.TempDir()
	const n = 3000
	{
		b := openBroker(t, dir, shareKillOptions)
		ctx := context.Background()
		require.NoError(t, b.CreateTopic(ctx, "jobs", TopicConfig{Partitions: 1}))
		p, err := b.NewProducer(ProducerConfig{})
		require.NoError(t, err)
		for i := range n {
			p.Produce(ctx, Record{Topic: "jobs", Value: []byte(strconv.Itoa(i))}, nil)
		}
		require.NoError(t, p.Close())
		require.NoError(t, b.Close())
	}
	start := func() (*exec.Cmd, <-chan string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), shareChildEnv+"="+dir)
		cmd.Stderr = &testLogWriter{t: t, prefix: "workers: "}
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 1<<16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		return cmd, lines
	}
	acked := map[int64]int{} // acknowledgements seen, by offset
	redelivered := 0
	read := func(l string) {
		switch f := strings.Fields(l); {
		case len(f) == 2 && f[0] == "acked":
			off, _ := strconv.ParseInt(f[1], 10, 64)
			acked[off]++
			require.Equal(t, 1, acked[off], "offset %d acknowledged again: it was delivered after its acknowledgement", off)
		case len(f) == 3 && f[0] == "delivered":
			off, _ := strconv.ParseInt(f[1], 10, 64)
			require.Zero(t, acked[off], "offset %d delivered after its acknowledgement", off)
			redelivered++
		}
	}
	for i := range 8 {
		cmd, lines := start()
		// Kill it once it has acknowledged some jobs, a little later
		// each time.
		deadline := time.After(60 * time.Second)
		before := len(acked)
	wait:
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the workers exited")
				require.NotEqual(t, "all done", l, "workers %d finished: the kills came too late", i+1)
				read(l)
				if len(acked) > before+100+50*i {
					break wait
				}
			case <-deadline:
				t.Fatal("no progress in 60 s")
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		for l := range lines {
			read(l) // what it printed before dying
		}
		t.Logf("workers %d killed with %d jobs acknowledged", i+1, len(acked))
	}
	cmd, lines := start()
	done := false
	for l := range lines {
		read(l)
		if l == "all done" {
			done = true
		}
	}
	require.NoError(t, cmd.Wait())
	require.True(t, done)
	require.Greater(t, redelivered, 0, "the kills left jobs in flight")
	// Every job acknowledged - those whose "acked" line a kill cut off
	// included: the share-partition is done up to the end.
	b := openBroker(t, dir, shareKillOptions)
	defer b.Close()
	sp := b.sharePartsOf("workers", "jobs", 1)
	require.Len(t, sp, 1)
	require.Equal(t, int64(n), sp[0].p.Start(), "every job done")
	t.Logf("%d of %d acknowledgements seen (the rest cut off by kills), %d redeliveries", len(acked), n, redelivered)
}
