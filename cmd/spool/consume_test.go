package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConsumeFromOffset(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", numbered("v", 10))

	require.Equal(t, "0 7 v7\n0 8 v8\n0 9 v9\n", consume(t, data, "events", "--from", "7", "--count", "3", "--print-offsets"))
	require.Equal(t, "v0\nv1\n", consume(t, data, "events", "--from", "0", "--count", "2"))
	// Past the end: only new records, and there are none.
	require.Empty(t, consume(t, data, "events", "--from", "1000", "--timeout", "100ms"))
	// Without --count, --timeout ends the run successfully once nothing new comes.
	require.Equal(t, "v8\nv9\n", consume(t, data, "events", "--from", "8", "--timeout", "100ms"))

	// With several partitions the offset applies to each.
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "multi", "--partitions", "2")
	require.Equal(t, exitOK, code, stderr)
	produce(t, data, "multi", "a0\na1\na2\n", "--partition", "0")
	produce(t, data, "multi", "b0\nb1\nb2\n", "--partition", "1")
	out := consume(t, data, "multi", "--from", "1", "--count", "4", "--print-offsets")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.ElementsMatch(t, []string{"0 1 a1", "0 2 a2", "1 1 b1", "1 2 b2"}, lines)
	require.Equal(t, "1 2 b2\n", consume(t, data, "multi", "--from", "2", "--partition", "1", "--count", "1", "--print-offsets"))
}

func TestConsumeFromTime(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "old-0\nold-1\n")
	time.Sleep(20 * time.Millisecond) // timestamps are in milliseconds
	from := time.Now()
	time.Sleep(20 * time.Millisecond)
	produce(t, data, "events", "new-0\nnew-1\n")

	out := consume(t, data, "events", "--from", from.Format(time.RFC3339Nano), "--count", "2", "--print-offsets")
	require.Equal(t, "0 2 new-0\n0 3 new-1\n", out)
	// Before everything: from the start; after everything: nothing.
	require.Equal(t, "old-0\n", consume(t, data, "events", "--from", "2001-02-03T04:05:06Z", "--count", "1"))
	require.Empty(t, consume(t, data, "events", "--from", time.Now().Add(time.Hour).Format(time.RFC3339), "--timeout", "100ms"))
}

func TestConsumeLatest(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\nb\n")
	require.Empty(t, consume(t, data, "events", "--timeout", "100ms"))
	require.Empty(t, consume(t, data, "events", "--from", "latest", "--timeout", "100ms"))
}

func TestConsumeTimeoutBeforeCount(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\nb\n")
	code, stdout, stderr := runTool(t, "consume", "--data", data, "--topic", "events", "--from", "earliest", "--count", "5", "--timeout", "100ms")
	require.Equal(t, exitProblem, code)
	require.Equal(t, "a\nb\n", stdout)
	require.Contains(t, stderr, "stopping after 2 of 5 records")
	require.Contains(t, stderr, "Processed a total of 2 messages")
}

func TestConsumeInterrupted(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\nb\n")
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	done := make(chan int)
	// No --count, no --timeout: only a signal ends it.
	go func() {
		done <- run(ctx, []string{"consume", "--data", data, "--topic", "events", "--from", "earliest"}, nil, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return stdout.String() == "a\nb\n" }, 10*time.Second, time.Millisecond)
	cancel()
	require.Equal(t, exitOK, <-done, stderr.String())
	// The broker was closed: the directory can be opened again.
	require.Equal(t, "a\n", consume(t, data, "events", "--from", "earliest", "--count", "1"))
}

func TestConsumeErrors(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--topic", "nope"}, exitProblem, "unknown topic"},
		{[]string{"--topic", "events", "--partition", "1"}, exitProblem, "unknown partition: events-1 (the topic has 1)"},
		{[]string{}, exitUsage, "--topic is required"},
		{[]string{"--topic", "events", "--from", "yesterday"}, exitUsage, "want earliest, latest, an offset or an RFC 3339 time"},
		{[]string{"--topic", "events", "--from", "-3"}, exitUsage, "negative"},
		{[]string{"--topic", "events", "--count", "-1"}, exitUsage, "--count"},
	} {
		code, _, stderr := runTool(t, append([]string{"consume", "--data", data}, tc.args...)...)
		require.Equal(t, tc.code, code, tc.args)
		require.Contains(t, stderr, tc.msg, tc.args)
	}
}

func TestParseStartPosition(t *testing.T) {
	for in, want := range map[string]startPosition{
		"earliest":                  {kind: "earliest"},
		"latest":                    {kind: "latest"},
		"0":                         {kind: "offset"},
		"42":                        {kind: "offset", offset: 42},
		"2024-05-06T07:08:09Z":      {kind: "time", time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)},
		"2024-05-06T07:08:09.5Z":    {kind: "time", time: time.Date(2024, 5, 6, 7, 8, 9, 5e8, time.UTC)},
		"2024-05-06T09:08:09+02:00": {kind: "time", time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)},
	} {
		got, err := parseStartPosition(in)
		require.NoError(t, err, in)
		require.Equal(t, want.kind, got.kind, in)
		require.Equal(t, want.offset, got.offset, in)
		require.True(t, want.time.Equal(got.time), in)
	}
	for _, in := range []string{"", "first", "-1", "2024-05-06", "1.5"} {
		_, err := parseStartPosition(in)
		require.Error(t, err, in)
	}
}
