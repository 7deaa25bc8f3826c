package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// produce runs "spool produce" with lines as stdin and returns its
// stdout, failing the test unless it succeeds.
func produce(t *testing.T, data, topic, stdin string, flags ...string) string {
	t.Helper()
	args := append([]string{"produce", "--data", data, "--topic", topic}, flags...)
	code, stdout, stderr := runToolInput(t, stdin, args...)
	require.Equal(t, exitOK, code, stderr)
	return stdout
}

// consume runs "spool consume" and returns its stdout, failing the test
// unless it succeeds.
func consume(t *testing.T, data, topic string, flags ...string) string {
	t.Helper()
	args := append([]string{"consume", "--data", data, "--topic", topic}, flags...)
	code, stdout, stderr := runTool(t, args...)
	require.Equal(t, exitOK, code, stderr)
	return stdout
}

// numbered returns "prefix0\nprefix1\n...".
func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

func TestProducePrintAcksThenConsume(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	// The topic does not exist: produce creates it, with one partition.
	acks := produce(t, data, "events", "first\nsecond\n\nfourth, after an empty line\nlast, without a newline", "--print-acks")
	require.Equal(t, "0 0\n0 1\n0 2\n0 3\n0 4\n", acks)

	out := consume(t, data, "events", "--from", "earliest", "--count", "5", "--print-offsets")
	require.Equal(t, "0 0 first\n0 1 second\n0 2 \n0 3 fourth, after an empty line\n0 4 last, without a newline\n", out)

	// A second run appends; --count stops exactly there.
	acks = produce(t, data, "events", numbered("more-", 100), "--print-acks")
	require.Equal(t, 100, strings.Count(acks, "\n"))
	require.True(t, strings.HasPrefix(acks, "0 5\n0 6\n"), acks)
	require.True(t, strings.HasSuffix(acks, "0 104\n"), acks)
	out = consume(t, data, "events", "--from", "earliest", "--count", "7", "--print-offsets")
	require.Equal(t, "0 0 first\n0 1 second\n0 2 \n0 3 fourth, after an empty line\n0 4 last, without a newline\n0 5 more-0\n0 6 more-1\n", out)
}

func TestProduceKeySeparator(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "kv", "user-1::signed up\nno key here\n::empty key\nuser-2::a::b\n", "--key-separator", "::")
	out := consume(t, data, "kv", "--from", "earliest", "--count", "4", "--print-keys")
	require.Equal(t, "user-1\tsigned up\nnull\tno key here\n\tempty key\nuser-2\ta::b\n", out)

	// Without --key-separator the separator is part of the value.
	produce(t, data, "plain", "user-1::signed up\n")
	out = consume(t, data, "plain", "--from", "earliest", "--count", "1", "--print-keys")
	require.Equal(t, "null\tuser-1::signed up\n", out)
}

func TestProduceToPartition(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "events", "--partitions", "3")
	require.Equal(t, exitOK, code, stderr)
	acks := produce(t, data, "events", "a\nb\nc\n", "--partition", "2", "--print-acks")
	require.Equal(t, "2 0\n2 1\n2 2\n", acks)
	out := consume(t, data, "events", "--from", "earliest", "--count", "3", "--print-offsets", "--partition", "2")
	require.Equal(t, "2 0 a\n2 1 b\n2 2 c\n", out)

	code, _, stderr = runToolInput(t, "a\n", "produce", "--data", data, "--topic", "events", "--partition", "3")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "unknown partition: events-3 (the topic has 3)")

	// Unkeyed records go where the sticky partitioner puts them; every
	// one is acked on some partition, in order within it.
	acks = produce(t, data, "events", numbered("x", 1000), "--print-acks", "--linger", "0")
	next := map[string]int{"0": 0, "1": 0, "2": 3}
	for _, line := range strings.Split(strings.TrimSuffix(acks, "\n"), "\n") {
		p, off, ok := strings.Cut(line, " ")
		require.True(t, ok, line)
		require.Equal(t, fmt.Sprint(next[p]), off, line)
		next[p]++
	}
	require.Equal(t, 1003, next["0"]+next["1"]+next["2"])
}

func TestProduceLongLines(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "big", "--max-message-bytes", "300000")
	require.Equal(t, exitOK, code, stderr)
	long := strings.Repeat("0123456789", 20_000) // 200 KB: more than bufio's and Scanner's buffers
	tooLong := strings.Repeat("x", 400_000)
	stdin := "short\n" + long + "\n" + tooLong + "\n" + "after\n"
	code, stdout, stderr := runToolInput(t, stdin, "produce", "--data", data, "--topic", "big", "--print-acks")
	require.Equal(t, exitProblem, code)
	require.Equal(t, "0 0\n0 1\n0 2\n", stdout)
	require.Contains(t, stderr, "line 3: ")
	require.Contains(t, stderr, "the line has 400000 bytes")
	require.Contains(t, stderr, "1 of 4 records failed")

	out := consume(t, data, "big", "--from", "earliest", "--count", "3")
	require.Equal(t, "short\n"+long+"\nafter\n", out)
}

func TestProduceAcksNone(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	acks := produce(t, data, "events", "a\nb\n", "--print-acks", "--acks", "0")
	require.Equal(t, "0 -1\n0 -1\n", acks)
	require.Equal(t, "a\nb\n", consume(t, data, "events", "--from", "earliest", "--count", "2"))
}

func TestProduceUsage(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{}, "--topic is required"},
		{[]string{"--topic", "t", "--acks", "2"}, "invalid value"},
		{[]string{"--topic", "t", "--partition", "-2"}, "--partition"},
		{[]string{"--topic", "t", "--batch-bytes", "0"}, "--batch-bytes"},
	} {
		code, _, stderr := runTool(t, append([]string{"produce", "--data", data}, tc.args...)...)
		require.Equal(t, exitUsage, code, tc.args)
		require.Contains(t, stderr, tc.msg, tc.args)
	}
	code, _, stderr := runToolInput(t, "a\n", "produce", "--data", data, "--topic", "bad/name")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "line 1: invalid topic name")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestProduceInterrupted(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"produce", "--data", data, "--topic", "events", "--print-acks"}, stdinR, &stdout, &stderr)
	}()

	_, err := io.WriteString(stdinW, "a\nb\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return stdout.String() == "0 0\n0 1\n" }, 10*time.Second, time.Millisecond)
	// stdin stays open: the signal alone ends the command.
	cancel()
	require.Equal(t, exitOK, <-done, stderr.String())
	require.Contains(t, stderr.String(), "interrupted")
	require.Equal(t, "a\nb\n", consume(t, data, "events", "--from", "earliest", "--count", "2"))
}

func TestReadLine(t *testing.T) {
	input := "one\n\n" + strings.Repeat("y", 100) + "\nlast"
	r := bufioReaderSize(input, 16)
	var got []string
	var lens []int
	for {
		line, n, err := readLine(r, make([]byte, 0, 1), 50)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, string(line))
		lens = append(lens, n)
	}
	require.Equal(t, []string{"one", "", strings.Repeat("y", 50), "last"}, got)
	require.Equal(t, []int{3, 0, 100, 4}, lens)
}

func bufioReaderSize(s string, size int) *bufio.Reader {
	return bufio.NewReaderSize(strings.NewReader(s), size)
}
