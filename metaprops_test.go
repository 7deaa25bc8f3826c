package spool

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/controller"
)

// TestStandaloneOpenRefusesClusterNodeDir: a cluster node's data directory
// - the metadata log (with the quorum's term and vote) or its snapshots,
// no topics.json - is
// refused by a standalone Open and by RebuildRegistry with
// ErrInvalidConfig naming the node and how to serve it, and neither writes
// anything: a topics.json there would make the directory unusable as the
// node's.
func TestStandaloneOpenRefusesClusterNodeDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(dir string)
		want string
	}{
		{"metadata log and meta.properties", func(dir string) {
			require.NoError(t, os.MkdirAll(controller.MetadataDir(dir), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(controller.MetadataDir(dir), "00000000000000000000.log"), []byte("raft"), 0o644))
			require.NoError(t, writeMetaProperties(dir, metaProperties{clusterID: "c1uster1dAAAAAAAAAAAAA", nodeID: 3}))
		}, "is the data directory of node 3 of cluster c1uster1dAAAAAAAAAAAAA (it holds __cluster_metadata-0"},
		{"only the quorum's term and vote", func(dir string) {
			require.NoError(t, os.MkdirAll(controller.MetadataDir(dir), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(controller.MetadataDir(dir), controller.QuorumStateFile), []byte("state"), 0o644))
		}, "is the data directory of a cluster node (it holds __cluster_metadata-0"},
		{"a partition besides the snapshots", func(dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(controller.SnapshotsDir(dir), "1-2-3"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "orders-0"), 0o755))
		}, "(it holds __cluster_metadata-snapshots; a cluster node keeps its topics in the metadata log, not in topics.json), which a standalone broker cannot open: serve it as that node, with spool serve --node-id N --controller-quorum-voters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(dir)
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o644))
			before := treeOf(t, dir)

			_, err := Open(dir, Options{})
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, treeOf(t, dir))

			rep, err := RebuildRegistry(dir, RepairOptions{})
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, rep)
			require.Equal(t, before, treeOf(t, dir))
		})
	}

	// A directory with neither stays a standalone broker's, as always.
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.FileExists(t, filepath.Join(dir, registryFile))
}

// treeOf maps every path under dir to its contents ("" for a directory).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			out[path] = ""
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = string(data)
		return err
	}))
	return out
}
