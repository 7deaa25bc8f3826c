package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A number, as the perf lines print them.
const num = `[0-9]+(?:\.[0-9]+)?`

func TestPerfProduceThenConsume(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, stdout, stderr := runTool(t, "perf", "produce", "--data", data, "--topic", "perf", "--records", "2000", "--record-size", "100",
		"--partitions", "3", "--reporting-interval", "1ms", "--throughput", "20000")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Greater(t, len(lines), 1, "progress lines and a summary: %s", stdout)
	progress := regexp.MustCompile(`^` + num + ` records sent, ` + num + ` records/sec \(` + num + ` MB/sec\), ` + num + ` ms avg latency, ` + num + ` ms max latency\.$`)
	for _, line := range lines[:len(lines)-1] {
		require.Regexp(t, progress, line)
	}
	summary := regexp.MustCompile(`^2000 records sent, ` + num + ` records/sec \(` + num + ` MB/sec\), ` + num + ` ms avg latency, ` +
		num + ` ms p50, ` + num + ` ms p95, ` + num + ` ms p99, ` + num + ` ms p99.9, ` + num + ` ms max latency\.$`)
	require.Regexp(t, summary, lines[len(lines)-1])

	code, stdout, stderr = runTool(t, "topics", "describe", "--data", data, "--topic", "perf")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "PartitionCount: 3\t")

	code, stdout, stderr = runTool(t, "perf", "consume", "--data", data, "--topic", "perf")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^2000 records consumed \(0\.19 MB\) in `+num+` s, `+num+` records/sec \(`+num+` MB/sec\)\n\z`, stdout)

	code, stdout, stderr = runTool(t, "perf", "consume", "--data", data, "--topic", "perf", "--records", "500", "--max-partition-fetch-bytes", "1000")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^500 records consumed`, stdout)

	code, _, stderr = runTool(t, "perf", "consume", "--data", data, "--topic", "perf", "--records", "5000", "--timeout", "100ms")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "stopping after 2000 of 5000 records")
}

func TestPerfProduceOptions(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, stdout, stderr := runTool(t, "perf", "produce", "--data", data, "--topic", "perf", "--records", "300", "--record-size", "10",
		"--flush", "none", "--acks", "1", "--linger", "0", "--batch-bytes", "1000", "--compression", "lz4")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^300 records sent, `, stdout)
	code, stdout, stderr = runTool(t, "perf", "consume", "--data", data, "--topic", "perf")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^300 records consumed \(0\.00 MB\)`, stdout)
}

func TestPerfUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"perf"}, "no command given"},
		{[]string{"perf", "stress"}, "unknown command"},
		{[]string{"perf", "produce", "--records", "10", "--record-size", "10"}, "--topic is required"},
		{[]string{"perf", "produce", "--topic", "t", "--record-size", "10"}, "--records must be positive"},
		{[]string{"perf", "produce", "--topic", "t", "--records", "10"}, "--record-size must be positive"},
		{[]string{"perf", "produce", "--topic", "t", "--records", "10", "--record-size", "1", "--acks", "all-of-them"}, "invalid value"},
		{[]string{"perf", "consume"}, "--topic is required"},
	} {
		code, _, stderr := runTool(t, tc.args...)
		require.Equal(t, exitUsage, code, tc.args)
		require.Contains(t, stderr, tc.msg, tc.args)
	}
	code, stdout, _ := runTool(t, "help", "perf", "produce")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "--reporting-interval")
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	code, _, stderr := runTool(t, "perf", "consume", "--data", data, "--topic", "nope")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "unknown topic")
}
