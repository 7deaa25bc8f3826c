package spool

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The in-process consume-transform-produce child: a process that opens the
// broker on a data directory and copies every record of "in" to "out" in
// transactions that also commit the group's offsets, until it is killed.
// TestMain runs it when eosChildEnv names the directory.
const eosChildEnv = "SPOOL_TEST_EOS_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(eosChildEnv); dir != "" {
		os.Exit(runEOSChild(dir))
	}
	if dir := os.Getenv(shareChildEnv); dir != "" {
		os.Exit(runShareChild(dir))
	}
	os.Exit(m.Run())
}

var eosOptions = Options{TransactionStatePartitions: 3, OffsetsTopicPartitions: 3, GroupInitialRebalanceDelay: time.Millisecond}

// runEOSChild copies "in" to "out", printing "committed N" after each
// transaction (N: the input records consumed so far, by the group's
// positions) and "caught up" once it has copied everything there is.
func runEOSChild(dir string) int {
	fail := func(what string, err error) int {
		fmt.Fprintln(os.Stderr, "child:", what+":", err)
		return 2
	}
	b, err := Open(dir, eosOptions)
	if err != nil {
		return fail("open", err)
	}
	defer b.Close()
	p, err := b.NewProducer(ProducerConfig{TransactionalID: "copier", TransactionTimeout: 10 * time.Second, Linger: time.Millisecond})
	if err != nil {
		return fail("producer", err)
	}
	c, err := b.NewConsumer(ConsumerConfig{
		Group: "eos", Topics: []string{"in"}, GroupInstanceID: "copier-0",
		AutoCommit: Disabled, IsolationLevel: ReadCommitted, AutoOffsetReset: ResetEarliest,
		MaxPartitionFetchBytes: 256, FetchMaxWait: 20 * time.Millisecond,
	})
	if err != nil {
		return fail("consumer", err)
	}
	var total int64
	for n := range int32(3) {
		part, err := b.Partition("in", n)
		if err != nil {
			return fail("in", err)
		}
		total += part.HighWatermark()
	}
	ctx := context.Background()
	said := false
	for {
		recs, err := c.Poll(ctx)
		if err != nil {
			return fail("poll", err)
		}
		if len(recs) == 0 {
			var at int64
			for _, o := range c.Positions() {
				at += o
			}
			if at == total && !said {
				fmt.Println("caught up")
				said = true
			}
			continue
		}
		if err := p.BeginTransaction(); err != nil {
			return fail("begin", err)
		}
		for _, r := range recs {
			p.Produce(ctx, Record{Topic: "out", Key: r.Key, Value: r.Value}, nil)
		}
		time.Sleep(5 * time.Millisecond) // so that kills land inside transactions too
		pos := c.Positions()
		if err := p.SendOffsetsToTransaction(ctx, pos, c.GroupMetadata()); err != nil {
			return fail("send offsets", err)
		}
		if err := p.CommitTransaction(ctx); err != nil {
			return fail("commit", err)
		}
		var done int64
		for _, o := range pos {
			done += o
		}
		fmt.Println("committed", done)
	}
}

// Consume-transform-produce with the in-process API (a transactional
// Producer and a read_committed group Consumer on an embedded broker) in a
// process SIGKILLed again and again - broker, coordinator and all: the
// output, read read_committed, holds every input record exactly once.
// Nothing of the transactions the kills cut short is read, or the
// re-copied records would be there twice.
func TestInProcessExactlyOnceThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the in-process consume-transform-produce kill test (child processes)")
	}
	dir := t.TempDir()
	ctx := context.Background()
	const n = 5000
	{
		b := openBroker(t, dir, eosOptions)
		require.NoError(t, b.CreateTopic(ctx, "in", TopicConfig{Partitions: 3}))
		require.NoError(t, b.CreateTopic(ctx, "out", TopicConfig{Partitions: 3}))
		// Small batches, so that each transaction copies a few.
		p, err := b.NewProducer(ProducerConfig{BatchBytes: 256})
		require.NoError(t, err)
		for i := range n {
			p.Produce(ctx, Record{Topic: "in", Key: []byte(strconv.Itoa(i % 17)), Value: []byte(strconv.Itoa(i))}, nil)
		}
		require.NoError(t, p.Close())
		require.NoError(t, b.Close())
	}

	// start runs a child; lines carries its stdout.
	start := func() (*exec.Cmd, <-chan string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), eosChildEnv+"="+dir)
		cmd.Stderr = &testLogWriter{t: t, prefix: "copier: "}
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // a failed test leaves no copier behind
		lines := make(chan string, 1024)
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
	await := func(lines <-chan string, want func(string) bool) string {
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the copier exited")
				if want(l) {
					return l
				}
			case <-timeout:
				t.Fatal("the copier made no progress in 60 s")
			}
		}
	}
	var last int64
	for i := range 10 {
		cmd, lines := start()
		// Kill it once it has committed a transaction, a little later
		// each time.
		l := await(lines, func(l string) bool { return strings.HasPrefix(l, "committed ") || l == "caught up" })
		if l == "caught up" {
			t.Fatalf("copier %d found everything copied: the kills came too late to test anything", i+1)
		}
		time.Sleep(time.Duration(5*i) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		done, _ := strconv.ParseInt(strings.TrimPrefix(l, "committed "), 10, 64)
		require.GreaterOrEqual(t, done, last, "the group's committed positions never go back")
		last = done
		t.Logf("copier %d killed after committing up to %d inputs", i+1, done)
	}
	cmd, lines := start()
	await(lines, func(l string) bool { return l == "caught up" })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL)) // a crash too: nothing is open now
	_ = cmd.Wait()

	b := openBroker(t, dir, eosOptions)
	defer b.Close()
	seen := map[string]int{}
	committed := readIsolated(t, b, "out", ReadCommitted)
	for _, v := range committed {
		seen[v]++
	}
	for i := range n {
		require.Equal(t, 1, seen[strconv.Itoa(i)], "input %d in the committed output", i)
	}
	require.Len(t, committed, n, "nothing in the committed output that was not an input")
	all := readIsolated(t, b, "out", ReadUncommitted)
	t.Logf("out holds %d records read_uncommitted (%d from transactions the kills cut short), %d read_committed", len(all), len(all)-n, len(committed))
	for p := range int32(3) {
		part, err := b.Partition("out", p)
		require.NoError(t, err)
		require.Equal(t, part.HighWatermark(), part.LastStableOffset(), "out-%d: no transaction left open", p)
	}
}

// testLogWriter logs a child's stderr lines.
type testLogWriter struct {
	t      *testing.T
	prefix string
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s%s", w.prefix, p)
	return len(p), nil
}
