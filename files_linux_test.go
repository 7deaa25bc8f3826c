package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spoolmq/spool/partition"
	"github.com/stretchr/testify/require"
)

// openSegmentFiles counts the process's open descriptors of .log files
// under root.
func openSegmentFiles(t *testing.T, root string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		target = strings.TrimSuffix(target, " (deleted)")
		if strings.HasPrefix(target, root) && strings.HasSuffix(target, ".log") {
			n++
		}
	}
	return n
}

// A broker with many partitions of many segments and a small
// MaxOpenSegmentFiles writes and reads them all, every record checked,
// before and after a restart, holding no more .log descriptors than the
// limit plus the few files in use when one last opened.
func TestManyPartitionsFewSegmentFiles(t *testing.T) {
	const limit, slack, parts, perPart = 8, 4, 40, 60
	dir := t.TempDir()
	ctx := context.Background()
	opts := Options{MaxOpenSegmentFiles: limit, Partitioner: partition.ManualPartitioner()}
	b := openBroker(t, dir, opts)
	require.NoError(t, b.CreateTopic(ctx, "many", TopicConfig{Partitions: parts, SegmentBytes: 1024}))
	val := func(p, i int) string { return fmt.Sprintf("p%02d-v%04d-%s", p, i, strings.Repeat("x", i%40)) }
	for i := 0; i < perPart; i++ {
		for p := 0; p < parts; p++ {
			md, err := b.Produce(ctx, Record{Topic: "many", Partition: int32(p), Value: []byte(val(p, i))})
			require.NoError(t, err)
			require.Equal(t, int32(p), md.Partition)
			require.Equal(t, int64(i), md.Offset)
		}
		require.LessOrEqual(t, openSegmentFiles(t, dir), limit+slack)
	}
	check := func() {
		t.Helper()
		recs := consumeAll(t, b, "many")
		require.Len(t, recs, parts*perPart)
		for _, r := range recs {
			require.Equal(t, val(int(r.Partition), int(r.Offset)), string(r.Value))
		}
		require.LessOrEqual(t, openSegmentFiles(t, dir), limit+slack)
	}
	check()
	p0, err := b.Partition("many", 0)
	require.NoError(t, err)
	require.Greater(t, p0.Log().NumSegments(), 2, "many segments a partition")
	require.Positive(t, b.files.Stats().Evictions)
	require.NoError(t, b.Close())
	require.Zero(t, openSegmentFiles(t, dir))

	b = openBroker(t, dir, opts)
	require.LessOrEqual(t, openSegmentFiles(t, dir), limit+slack, "reopening opens few files")
	check()
	require.NoError(t, b.Close())
}

// The default bound is half the process's limit on open files, and a
// negative one means none.
func TestMaxOpenSegmentFilesDefault(t *testing.T) {
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, max(openFilesLimit()/2, MinOpenSegmentFiles), o.MaxOpenSegmentFiles)
	require.Positive(t, openFilesLimit())
	b := openBroker(t, t.TempDir(), Options{MaxOpenSegmentFiles: -1})
	require.Nil(t, b.files)
	require.NoError(t, b.Close())
}
