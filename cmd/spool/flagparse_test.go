package main

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlagsAfterPositionalArgs: every command with a positional argument
// takes its flags after it too.
func TestFlagsAfterPositionalArgs(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	code, stdout, stderr := runTool(t, "check", data, "--quiet")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stdout)

	code, stdout, stderr = runTool(t, "repair", data, "--dry-run")
	require.Equal(t, exitOK, code, stderr)
	require.NotEmpty(t, stdout)

	logs, err := filepath.Glob(filepath.Join(data, "events-0", "*.log"))
	require.NoError(t, err)
	code, stdout, stderr = runTool(t, "dump", logs[0], "--records")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, `value: "a"`)

	// After --, a name that looks like a flag is an argument.
	code, _, stderr = runTool(t, "check", "--", "--quiet")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--quiet: no such file")
}

// TestFlagErrorsSayDashDash: flag errors name flags as help does.
func TestFlagErrorsSayDashDash(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"check", "--nope", "x"}, "flag provided but not defined: --nope"},
		{[]string{"check", "-nope", "x"}, "flag provided but not defined: --nope"},
		{[]string{"consume", "--topic"}, "flag needs an argument: --topic"},
		{[]string{"consume", "--topic", "t", "--count", "x"}, "invalid value \"x\" for flag --count"},
		{[]string{"check", "--quiet=maybe", "x"}, "for --quiet"},
	} {
		code, _, stderr := runTool(t, tc.args...)
		require.Equal(t, exitUsage, code, tc.args)
		require.Contains(t, stderr, tc.msg, tc.args)
		require.NotContains(t, stderr, " -nope", tc.args)
	}
}

// TestErrorPrefixOnce: the root package's "spool: " is not repeated after
// the command's own prefix.
func TestErrorPrefixOnce(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	produce(t, data, "events", "a\n")
	code, _, stderr := runTool(t, "consume", "--data", data, "--topic", "nope")
	require.Equal(t, exitProblem, code)
	require.Contains(t, stderr, "spool consume: unknown topic")
	require.NotContains(t, stderr, "spool: unknown topic")
}

// TestVersion: spool version and spool --version say what was built.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runTool(t, args...)
		require.Equal(t, exitOK, code, stderr)
		require.Regexp(t, `^spool \S+\n`, stdout)
		require.Contains(t, stdout, "go: "+runtime.Version())
		require.Contains(t, stdout, "Kafka protocol: as Kafka 4.")
	}
	code, _, _ := runTool(t, "version", "extra")
	require.Equal(t, exitUsage, code)
}
