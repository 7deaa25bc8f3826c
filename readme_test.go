package spool

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeGroupSnippetsSayWhereANewGroupStarts checks the README's
// consumer group snippets: a group that starts after records were produced
// sees none of them under the default ResetLatest, so each snippet that
// makes a group consumer sets AutoOffsetReset, and the text says so.
func TestReadmeGroupSnippetsSayWhereANewGroupStarts(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	groupConfig := regexp.MustCompile(`(?s)\bspool\.ConsumerConfig\{[^}]*Group:`) // not ShareConsumerConfig: it starts at the start
	found := 0
	for _, b := range blocks {
		if groupConfig.Match(b[1]) {
			found++
			require.Contains(t, string(b[1]), "AutoOffsetReset", "a group snippet sets where a new group starts:\n%s", b[1])
		}
	}
	require.NotZero(t, found, "the README has a consumer group snippet")
	require.Contains(t, string(readme), "`ResetLatest`")
}
