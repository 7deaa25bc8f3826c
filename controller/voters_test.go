package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseVoters: controller.quorum.voters is ID@HOST:PORT,... with
// distinct non-negative ids, a host and a port every node can dial; any
// other list is ErrInvalidConfig, and FormatVoters gives one spelling of a
// list whatever its order.
func TestParseVoters(t *testing.T) {
	vs, err := ParseVoters(" 2@b:9093, 1@a:9093,3@[::1]:9093 ")
	require.NoError(t, err)
	require.Equal(t, []Voter{{2, "b:9093"}, {1, "a:9093"}, {3, "[::1]:9093"}}, vs)
	require.Equal(t, "1@a:9093,2@b:9093,3@[::1]:9093", FormatVoters(vs))

	for _, bad := range []string{
		"", ",", "1", "1@", "1@a", "a@a:9093", "-1@a:9093", "1@a:9093,1@b:9093",
		"1@a:0", "1@a:65536", "1@a:http", "1@:9093", "1@a:-1", "4294967296@a:9093",
	} {
		_, err := ParseVoters(bad)
		require.ErrorIs(t, err, ErrInvalidConfig, "%q", bad)
	}
}
