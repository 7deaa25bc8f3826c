package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenRefusesInvalidRegistry: a registry whose CRC is right but whose
// topics Open cannot open side by side - a name that is no directory name,
// a name or id listed twice, the zero id, a negative count - is refused
// with errBadRegistry, as a damaged one is, rather than opened (a name
// like "../x" would have made directories outside the data directory).
func TestOpenRefusesInvalidRegistry(t *testing.T) {
	id1, id2 := newTopicID().String(), newTopicID().String()
	for _, tc := range []struct {
		name   string
		topics []registryTopic
		want   string
	}{
		{"name outside the directory", []registryTopic{{Name: "../escape", ID: id1, Partitions: 1}}, "invalid topic name"},
		{"empty name", []registryTopic{{Name: "", ID: id1, Partitions: 1}}, "invalid topic name"},
		{"name twice", []registryTopic{{Name: "t", ID: id1, Partitions: 1}, {Name: "t", ID: id2, Partitions: 1}}, `"t" is listed twice`},
		{"id twice", []registryTopic{{Name: "a", ID: id1, Partitions: 1}, {Name: "b", ID: id1, Partitions: 1}}, `is also "a"'s`},
		{"zero id", []registryTopic{{Name: "t", ID: TopicID{}.String(), Partitions: 1}}, "the zero topic id"},
		{"bad id", []registryTopic{{Name: "t", ID: "short", Partitions: 1}}, `topic id "short"`},
		{"negative partitions", []registryTopic{{Name: "t", ID: id1, Partitions: -1}}, "-1 partitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, writeRegistry(dir, registry{Topics: tc.topics}))
			_, err := Open(dir, Options{})
			require.ErrorIs(t, err, errBadRegistry)
			require.ErrorContains(t, err, tc.want)
			entries, err := os.ReadDir(filepath.Dir(dir))
			require.NoError(t, err)
			require.Len(t, entries, 1, "Open created something beside the data directory")

			c, err := CheckDataDir(dir, Options{})
			require.NoError(t, err)
			require.True(t, c.Refused())
		})
	}
}

// TestRebuildRegistryRoundTrip: a rebuilt registry opens, keeps the
// topics' ids and partition counts, and makes Open delete nothing.
func TestRebuildRegistryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{OffsetsTopicPartitions: 2})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "a", TopicConfig{Partitions: 3, RetentionTime: 1000}))
	require.NoError(t, b.CreateTopic(ctx, "b.c-d", TopicConfig{}))
	require.NoError(t, b.PrepareGroups(ctx))
	want := map[string]TopicDescription{}
	for _, name := range b.Topics() {
		d, err := b.DescribeTopic(name)
		require.NoError(t, err)
		want[name] = d
	}
	require.NoError(t, b.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, registryFile)))
	c, err := CheckDataDir(dir, Options{})
	require.NoError(t, err)
	require.True(t, c.Refused())

	rep, err := RebuildRegistry(dir, RepairOptions{})
	require.NoError(t, err)
	require.True(t, rep.Written)
	require.Len(t, rep.Topics, 3)
	c, err = CheckDataDir(dir, Options{})
	require.NoError(t, err)
	require.False(t, c.Refused(), "%+v", c.Findings)
	require.Empty(t, c.Findings)

	b = openBroker(t, dir, Options{})
	defer b.Close()
	require.Equal(t, []string{OffsetsTopic, "a", "b.c-d"}, b.Topics())
	for name, w := range want {
		d, err := b.DescribeTopic(name)
		require.NoError(t, err)
		require.Equal(t, w.ID, d.ID, name)
		require.Len(t, d.Partitions, len(w.Partitions), name)
		require.Equal(t, w.Internal, d.Internal, name)
	}
	d, _ := b.DescribeTopic("a")
	require.Negative(t, d.Config.RetentionTime, "a lost setting never becomes a shorter retention")
	names, err := partitionDirNames(dir)
	require.NoError(t, err)
	require.Len(t, names, 3+1+2, "Open deleted a partition directory")
}
