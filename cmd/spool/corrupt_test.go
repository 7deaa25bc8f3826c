package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/segment"
)

// TestCorruptBatchIsNeverServed is issue 17's reproduction, with the CLI
// only: 3,000 records, one byte of "value-100" changed on disk. check must
// find it; neither the library's read path (spool consume) nor Fetch over
// the wire (spool serve, read with franz-go) may hand the damaged record
// out as data: readers get every record before the damaged batch, then an
// error - for a Kafka client, CORRUPT_MESSAGE.
func TestCorruptBatchIsNeverServed(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runTool(t, "topics", "create", "--data", data, "--topic", "t")
	require.Equal(t, exitOK, code, stderr)
	var in strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&in, "value-%d\n", i)
	}
	produce(t, data, "t", in.String())

	path := filepath.Join(data, "t-0", segment.FileName(0, segment.LogSuffix))
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	at := bytes.Index(file, []byte("value-100"))
	require.Positive(t, at)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("w"), int64(at))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	// The offset the damaged batch begins at: the records before it are
	// intact and must be served.
	positions, counts := batchPositions(t, path)
	damagedBase := 0
	for i := 0; i+1 < len(positions) && positions[i+1] <= int64(at); i++ {
		damagedBase += counts[i]
	}

	code, out, _ := runTool(t, "check", data)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, "crc32c")

	// The library's read path.
	code, out, stderr = runTool(t, "consume", "--data", data, "--topic", "t", "--from", "earliest", "--print-offsets", "--timeout", "5s")
	require.Equal(t, exitProblem, code, "consume must fail at the damaged batch\nstdout:\n%s\nstderr:\n%s", out, stderr)
	require.NotContains(t, out, "walue")
	require.Contains(t, stderr, "corrupt")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		lines = nil
	}
	require.Len(t, lines, damagedBase, "every record before the damaged batch, and none after")
	for i, line := range lines {
		require.Equal(t, fmt.Sprintf("0 %d value-%d", i, i+1), line)
	}

	// Fetch over the wire: franz-go must get CORRUPT_MESSAGE at the damaged
	// batch, after the records before it, and no damaged record.
	s := startServe(t, "--data", data)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().At(0)}}),
		kgo.KeepRetryableFetchErrors())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := 0
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "no error after %d records", got)
		for _, r := range fs.Records() {
			require.Equal(t, fmt.Sprintf("value-%d", r.Offset+1), string(r.Value))
			require.EqualValues(t, got, r.Offset)
			got++
		}
		var fetchErr error
		fs.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			require.True(t, errors.Is(fetchErr, kerr.CorruptMessage), "want CORRUPT_MESSAGE from the broker, got %v", fetchErr)
			break
		}
	}
	require.Equal(t, damagedBase, got)
	// The broker logs what it refused to serve (its stderr is read as it
	// comes, so wait for the line).
	for !strings.Contains(s.log(), "damaged batch") {
		require.NoError(t, ctx.Err(), "the broker never logged the damaged batch")
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 1, strings.Count(s.log(), "damaged batch"), "logged once, however often it is fetched")
}

// A clustered broker keeps its replicas under <data>/replicas/: check
// verifies them too, and reports damage in a replica the way it does in a
// standalone partition.
func TestCheckFindsDamageInReplicas(t *testing.T) {
	root := t.TempDir()
	c := spool.NewLocalCluster(spool.ClusterOptions{SessionTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		ReplicaLagTime: 200 * time.Millisecond, FetchMaxWait: 50 * time.Millisecond, FetchBackoff: 50 * time.Millisecond})
	defer c.Close()
	var brokers []*spool.Broker
	for id := int32(1); id <= 2; id++ {
		b, err := spool.Open(filepath.Join(root, fmt.Sprint("node-", id)), spool.Options{Cluster: c, NodeID: id})
		require.NoError(t, err)
		brokers = append(brokers, b)
	}
	ctx := t.Context()
	require.NoError(t, brokers[0].CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 1, ReplicationFactor: 2}))
	for i := range 20 {
		_, err := brokers[0].Produce(ctx, spool.Record{Topic: "t", Value: fmt.Appendf(nil, "value-%d", i)})
		require.NoError(t, err)
	}
	// acks=all: both replicas hold every record once Produce returned.
	for _, b := range brokers {
		require.NoError(t, b.Close())
	}

	data := filepath.Join(root, "node-2")
	dir := filepath.Join(data, spool.ReplicasDir, "t-0")
	path := filepath.Join(dir, segment.FileName(0, segment.LogSuffix))
	code, out, _ := runTool(t, "check", data)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "partition "+dir)

	file, err := os.ReadFile(path)
	require.NoError(t, err)
	at := bytes.Index(file, []byte("value-7"))
	require.Positive(t, at)
	file[at] = 'w'
	require.NoError(t, os.WriteFile(path, file, 0o644))
	code, out, _ = runTool(t, "check", data)
	require.Equal(t, exitProblem, code, out)
	require.Contains(t, out, "error: "+path)
	require.Contains(t, out, "crc32c")
}
