package spool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProducerIDsFile(t *testing.T) {
	dir := t.TempDir()
	p, err := openProducerIDs(dir)
	require.NoError(t, err)
	for want := int64(0); want < producerIDBlock+5; want++ {
		id, err := p.allocate(context.Background())
		require.NoError(t, err)
		require.Equal(t, want, id)
	}
	require.True(t, p.issued(producerIDBlock+4))
	require.False(t, p.issued(producerIDBlock+5))
	p, err = openProducerIDs(dir)
	require.NoError(t, err)
	id, err := p.allocate(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(2*producerIDBlock), id)

	next, err := parseProducerIDs(formatProducerIDs(42))
	require.NoError(t, err)
	require.Equal(t, int64(42), next)
	damaged := formatProducerIDs(42)
	damaged[len("spool-producer-ids 1\nnext-block ")] = '9'
	_, err = parseProducerIDs(damaged)
	require.Error(t, err)
	for _, bad := range []string{"", "spool-producer-ids 1\n", "spool-producer-ids 2\nnext-block 1\ncrc32c 0\n"} {
		_, err = parseProducerIDs([]byte(bad))
		require.Error(t, err)
	}
}
