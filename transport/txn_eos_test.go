package transport

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The consume-transform-produce child: a franz-go GroupTransactSession
// that copies every record of "in" to "out" inside transactions that also
// commit the group's offsets, until it is killed. TestMain runs it when
// eosChildEnv names the server.
const eosChildEnv = "SPOOL_TEST_EOS_CHILD"

func TestMain(m *testing.M) {
	if addr := os.Getenv(eosChildEnv); addr != "" {
		os.Exit(runEOSChild(addr))
	}
	if addr := os.Getenv(shareChildEnv); addr != "" {
		os.Exit(runShareChild(addr))
	}
	os.Exit(m.Run())
}

func runEOSChild(addr string) int {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addr),
		kgo.TransactionalID("eos-copier"),
		kgo.TransactionTimeout(5*time.Second),
		kgo.ConsumerGroup("eos"),
		kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.DefaultProduceTopic("out"),
		kgo.SessionTimeout(6*time.Second),
		kgo.RebalanceTimeout(6*time.Second),
		kgo.FetchMaxPartitionBytes(4<<10),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer sess.Close()
	ctx := context.Background()
	for {
		// Small transactions with a pause inside, so that the kills land
		// in the middle of some.
		fs := sess.PollRecords(ctx, 50)
		if fs.IsClientClosed() {
			return 0
		}
		fs.EachError(func(t string, p int32, err error) { fmt.Fprintln(os.Stderr, "child fetch:", t, p, err) })
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "child begin:", err)
			return 3
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					fmt.Fprintln(os.Stderr, "child produce:", err)
				}
			})
		})
		time.Sleep(20 * time.Millisecond)
		if _, err := sess.End(ctx, kgo.TryCommit); err != nil {
			fmt.Fprintln(os.Stderr, "child end:", err)
		}
	}
}

// Consume-transform-produce with franz-go's GroupTransactSession in a
// process SIGKILLed and restarted again and again: the output, read
// read_committed, holds every input record exactly once - nothing of the
// transactions the kills cut short, nothing twice.
func TestExactlyOnceThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the consume-transform-produce kill test (child processes, ~20s)")
	}
	opts := txnBrokerOptions
	opts.GroupInitialRebalanceDelay = time.Millisecond
	b, _, addr := testServer(t, opts, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, b.CreateTopic(ctx, "in", spool.TopicConfig{Partitions: 3}))
	require.NoError(t, b.CreateTopic(ctx, "out", spool.TopicConfig{Partitions: 3}))

	admin, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer admin.Close()
	const n = 3000
	for i := range n {
		admin.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i % 17)), Value: []byte(strconv.Itoa(i))}, nil)
	}
	require.NoError(t, admin.Flush(ctx))

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), eosChildEnv+"="+addr)
		cmd.Stderr = &testLogWriter{t: t, prefix: "copier: "}
		require.NoError(t, cmd.Start())
		return cmd
	}
	// written is how many records the copiers have written to "out",
	// committed or not.
	written := func() int64 {
		var n int64
		for i := range int32(3) {
			p, err := b.Partition("out", i)
			require.NoError(t, err)
			n += p.EndOffset()
		}
		return n
	}
	for i := range 5 {
		before := written()
		cmd := start()
		// Kill it once it is copying, a little later each time.
		require.Eventually(t, func() bool { return written() > before }, 60*time.Second, 5*time.Millisecond, "copier %d copies", i+1)
		time.Sleep(time.Duration(30*i) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		t.Logf("copier %d killed", i+1)
	}
	cmd := start()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Read "out" read_committed until every input is there.
	seen := map[string]int{}
	reader, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	total := 0
	for total < n {
		fs := reader.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d distinct of %d records before the deadline", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			total++
		})
	}
	// Anything committed late would show now: give it a moment.
	extra, cancelExtra := context.WithTimeout(ctx, 2*time.Second)
	fs := reader.PollFetches(extra)
	cancelExtra()
	fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	for i := range n {
		require.Equal(t, 1, seen[strconv.Itoa(i)], "input %d in the committed output", i)
	}
	all := readAll(t, addr, "out", false, n)
	t.Logf("out holds %d data records read_uncommitted (%d of them from transactions the kills cut short), %d read_committed", len(all), len(all)-n, total)
	require.Len(t, seen, n, "nothing in the committed output that was not an input")
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
