package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	spoollog "github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/spoolmq/spool/transport"
)

// makeDataDir makes a broker's data directory at data with spool.Open: a
// topic of small segments with the given partitions, each holding batches
// batches, and a small offsets topic. The broker is closed cleanly.
func makeDataDir(t *testing.T, data, topic string, partitions int32, batches int) {
	t.Helper()
	b, err := spool.Open(data, spool.Options{OffsetsTopicPartitions: 2})
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic(t.Context(), topic, spool.TopicConfig{Partitions: partitions, SegmentBytes: testSegmentSize}))
	require.NoError(t, b.PrepareGroups(t.Context()))
	for n := range partitions {
		p, err := b.Partition(topic, n)
		require.NoError(t, err)
		appendBatches(t, p.Log(), 0, batches)
	}
	require.NoError(t, b.Close())
}

// allValues reads every record value of every partition of topic, by
// partition.
func allValues(t *testing.T, b *spool.Broker, topic string) [][]string {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	require.NoError(t, err)
	var out [][]string
	var it record.Iterator
	for _, pd := range d.Partitions {
		p, err := b.Partition(topic, pd.Partition)
		require.NoError(t, err)
		var vals []string
		for off := p.StartOffset(); off < p.HighWatermark(); {
			res, err := p.Fetch(t.Context(), off, 0, 1<<20, 0)
			require.NoError(t, err)
			require.NotEmpty(t, res.Batches)
			for buf := res.Batches; len(buf) > 0; {
				batch, n, err := record.ParseBatch(buf)
				require.NoError(t, err)
				for it.Reset(batch); it.Next(); {
					if r := it.Record(); r.Offset >= off {
						vals = append(vals, string(r.Value))
					}
				}
				require.NoError(t, it.Err())
				off, buf = batch.NextOffset(), buf[n:]
			}
		}
		out = append(out, vals)
	}
	return out
}

// rewriteRegistry edits the topics.json of data and writes it back with a
// valid CRC, as a broker would: damage the CRC cannot catch.
func rewriteRegistry(t *testing.T, data string, edit func(reg map[string]any)) {
	t.Helper()
	path := filepath.Join(data, "topics.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	body, _, ok := strings.Cut(string(raw), "\ncrc32c ")
	require.True(t, ok)
	var reg map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &reg))
	edit(reg)
	out, err := json.MarshalIndent(reg, "", "  ")
	require.NoError(t, err)
	out = fmt.Appendf(out, "\ncrc32c %08x\n", crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, os.WriteFile(path, out, 0o644))
}

// registryTopic returns the entry of the named topic in a decoded
// registry.
func registryTopic(t *testing.T, reg map[string]any, name string) map[string]any {
	t.Helper()
	for _, rt := range reg["topics"].([]any) {
		if m := rt.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("no topic %q in the registry", name)
	return nil
}

// serveOpens opens data as spool serve does - spool.Open with the default
// options, then the Kafka server, which reads meta.properties - and
// returns the first error.
func serveOpens(t *testing.T, data string) error {
	t.Helper()
	b, err := spool.Open(data, spool.Options{})
	if err != nil {
		return err
	}
	defer func() { require.NoError(t, b.Close()) }()
	if _, err = transport.NewServer(b, transport.Options{}); err != nil {
		return err
	}
	// A partition that cannot open does not stop the broker: it serves the
	// others and that one is offline - refused all the same.
	for _, name := range b.Topics() {
		d, err := b.DescribeTopic(name)
		if err != nil {
			return err
		}
		for _, p := range d.Partitions {
			if p.Offline != nil {
				return p.Offline
			}
		}
	}
	return nil
}

// TestCheckTruncatedRegistryThenRepair is issue 17's reproduction: a
// topics.json cut in half makes spool serve refuse the directory, and
// check must say so, naming the file; repair rebuilds it from the
// partition directories, after which check is clean, the broker opens,
// and every record and committed offset is still there.
func TestCheckTruncatedRegistryThenRepair(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	makeDataDir(t, data, "orders", 3, 20)
	b, err := spool.Open(data, spool.Options{})
	require.NoError(t, err)
	before := allValues(t, b, "orders")
	desc, err := b.DescribeTopic("orders")
	require.NoError(t, err)
	offsetsDesc, err := b.DescribeTopic(spool.OffsetsTopic)
	require.NoError(t, err)
	c := groupConsumer(t, b, "billing", "orders")
	pollN(t, c, 3*20*recordsPerBatch)
	require.NoError(t, c.Commit(t.Context()))
	require.NoError(t, c.Close())
	require.NoError(t, b.Close())
	require.Len(t, before, 3)
	require.Len(t, before[2], 20*recordsPerBatch)

	reg := filepath.Join(data, "topics.json")
	st, err := os.Stat(reg)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(reg, st.Size()/2))
	damaged, err := os.ReadFile(reg)
	require.NoError(t, err)

	_, err = spool.Open(data, spool.Options{})
	require.ErrorContains(t, err, "topic registry is damaged")
	code, out, _ := runTool(t, "check", data)
	require.Equal(t, exitProblem, code, out)
	errs := problemLines(out, "error")
	require.Len(t, errs, 1, out)
	require.True(t, strings.HasPrefix(errs[0], "error: "+reg+": "), errs[0])
	require.Contains(t, errs[0], "crc32c mismatch")
	require.Contains(t, errs[0], `run "spool repair `+data+`"`)
	// Every partition's log was checked all the same.
	require.Contains(t, out, "checked 5 partitions")

	partFiles := map[string]map[string]string{}
	for n := range 3 {
		dir := filepath.Join(data, fmt.Sprintf("orders-%d", n))
		partFiles[dir] = snapshot(t, dir)
	}
	code, out, stderr := runTool(t, "repair", data)
	require.Equal(t, exitOK, code, "%s%s", out, stderr)
	require.Contains(t, out, fmt.Sprintf("topic orders: id %s (the id its partitions record), 3 partitions, keeps every record", desc.ID))
	require.Contains(t, out, fmt.Sprintf("topic %s: id %s (the id its partitions record), 2 partitions, the offsets topic's settings", spool.OffsetsTopic, offsetsDesc.ID))
	require.Contains(t, out, `warning: `+reg+`: topics' own settings were only in the registry and are lost: ["orders"]`)
	require.Contains(t, out, "wrote "+data+"/topics.json with 2 topics")
	for dir, files := range partFiles {
		require.Equal(t, files, snapshot(t, dir), "repair touched %s", dir)
	}
	copies, err := filepath.Glob(reg + ".damaged-*")
	require.NoError(t, err)
	require.Len(t, copies, 1)
	kept, err := os.ReadFile(copies[0])
	require.NoError(t, err)
	require.Equal(t, damaged, kept)

	code, out, _ = runTool(t, "check", data)
	require.Equal(t, exitOK, code, out)
	require.Empty(t, problemLines(out, "warning"), out)
	require.Contains(t, out, ": clean")

	b, err = spool.Open(data, spool.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	require.Equal(t, []string{spool.OffsetsTopic, "orders"}, b.Topics())
	got, err := b.DescribeTopic("orders")
	require.NoError(t, err)
	require.Equal(t, desc.ID, got.ID)
	require.Len(t, got.Partitions, 3)
	require.Negative(t, got.Config.RetentionTime, "a rebuilt topic keeps every record")
	require.Negative(t, got.Config.RetentionBytes)
	require.Equal(t, before, allValues(t, b, "orders"))
	off, err := b.DescribeTopic(spool.OffsetsTopic)
	require.NoError(t, err)
	require.True(t, off.Internal)
	require.Equal(t, offsetsDesc.Config, off.Config, "the offsets topic gets its own settings back")
	committed, err := b.Groups().FetchOffsets("billing", []group.TopicPartition{{Topic: "orders", Partition: 2}})
	require.NoError(t, err)
	require.Equal(t, int64(20*recordsPerBatch), committed[group.TopicPartition{Topic: "orders", Partition: 2}].Offset)
}

// TestCheckAgreesWithServe damages a data directory in each of the ways
// spool serve looks at on open, and checks that spool check fails where
// serve refuses, and otherwise reports the file at the level expected.
// Check may fail where serve does not (damage the open does not read, such
// as a bit flip in a sealed segment) but never the other way round.
func TestCheckAgreesWithServe(t *testing.T) {
	const topic = "orders"
	part := func(data string, n int) string { return filepath.Join(data, fmt.Sprintf("%s-%d", topic, n)) }
	write := func(t *testing.T, path, content string) {
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, data string) string // returns the path check must name
		level   string                                 // of check's line about it
		want    string                                 // in that line
		refused bool                                   // serve refuses
	}{
		{"registry truncated", func(t *testing.T, data string) string {
			p := filepath.Join(data, "topics.json")
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, st.Size()/2))
			return p
		}, "error", "crc32c mismatch", true},
		{"registry missing", func(t *testing.T, data string) string {
			p := filepath.Join(data, "topics.json")
			require.NoError(t, os.Remove(p))
			return p
		}, "error", "missing, but", true},
		{"registry version", func(t *testing.T, data string) string {
			rewriteRegistry(t, data, func(reg map[string]any) { reg["version"] = 2 })
			return filepath.Join(data, "topics.json")
		}, "error", "version 2, want 1", true},
		{"registry topic id", func(t *testing.T, data string) string {
			rewriteRegistry(t, data, func(reg map[string]any) { registryTopic(t, reg, topic)["id"] = "not-an-id" })
			return filepath.Join(data, "topics.json")
		}, "error", `topic id "not-an-id"`, true},
		{"registry topic name", func(t *testing.T, data string) string {
			rewriteRegistry(t, data, func(reg map[string]any) { registryTopic(t, reg, topic)["name"] = "../escape" })
			return filepath.Join(data, "topics.json")
		}, "error", "invalid topic name", true},
		{"registry topic twice", func(t *testing.T, data string) string {
			rewriteRegistry(t, data, func(reg map[string]any) {
				other := registryTopic(t, reg, spool.OffsetsTopic)
				other["name"] = topic
			})
			return filepath.Join(data, "topics.json")
		}, "error", "is listed twice", true},
		{"registry topic settings", func(t *testing.T, data string) string {
			rewriteRegistry(t, data, func(reg map[string]any) {
				registryTopic(t, reg, topic)["config"] = map[string]any{"segment.bytes": -5}
			})
			return filepath.Join(data, "topics.json")
		}, "error", "its partitions cannot open with its settings", true},
		{"partition.metadata garbage", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 1), "partition.metadata")
			write(t, p, "version: 0\ntopic_id: ???\n")
			return p
		}, "error", "delete partition.metadata", true},
		{"partition.metadata another topic's", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 1), "partition.metadata")
			write(t, p, "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
			return p
		}, "error", "belongs to topic id AAAAAAAAAAAAAAAAAAAAAQ", true},
		{"partition.metadata missing", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 1), "partition.metadata")
			require.NoError(t, os.Remove(p))
			return p
		}, "info", "missing: the broker writes it from the registry", false},
		{"registered partition directory missing", func(t *testing.T, data string) string {
			p := part(data, 2)
			require.NoError(t, os.RemoveAll(p))
			return p
		}, "warning", "the broker creates it empty", false},
		{"file instead of a partition directory", func(t *testing.T, data string) string {
			p := part(data, 2)
			require.NoError(t, os.RemoveAll(p))
			write(t, p, "x")
			return p
		}, "error", "not a directory", true},
		{"partition of a deleted topic", func(t *testing.T, data string) string {
			p := filepath.Join(data, "gone-0")
			require.NoError(t, os.Mkdir(p, 0o755))
			write(t, filepath.Join(p, "partition.metadata"), "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n")
			return p
		}, "warning", "the broker DELETES this directory", false},
		{"partition directory of nobody", func(t *testing.T, data string) string {
			p := filepath.Join(data, "stray-0")
			require.NoError(t, os.Mkdir(p, 0o755))
			return p
		}, "warning", "the broker leaves it alone", false},
		{"log checkpoint damaged", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 0), spoollog.CheckpointFile)
			modify(t, p, func(b []byte) []byte {
				return []byte(strings.Replace(string(b), "log-start-offset 0", "log-start-offset 9", 1))
			})
			return p
		}, "warning", "checkpoint file is damaged", false},
		{"log shorter than its recovery point", func(t *testing.T, data string) string {
			logs := segmentLogs(t, part(data, 0))
			last := logs[len(logs)-1]
			positions, _ := batchPositions(t, last)
			require.NoError(t, os.Truncate(last, positions[len(positions)-1]))
			return filepath.Join(part(data, 0), spoollog.CheckpointFile)
		}, "error", "is past the end of the log", true},
		{"leader-epoch-checkpoint damaged", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 0), partition.EpochFile)
			write(t, p, "0\n2\n0 0\n")
			return p
		}, "warning", "rebuilds it from the batches' leader epochs", false},
		{"leader epoch newer than a standalone broker's", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 0), partition.EpochFile)
			write(t, p, "0\n2\n0 0\n3 10\n")
			return p
		}, "error", "epoch 3 from offset 10, newer than this broker's 0", true},
		{"producer snapshot damaged", func(t *testing.T, data string) string {
			p := filepath.Join(part(data, 0), segment.FileName(30, partition.SnapshotSuffix))
			write(t, p, "\x00\x01garbage")
			return p
		}, "warning", "producer snapshot is damaged", false},
		{"meta.properties without a cluster id", func(t *testing.T, data string) string {
			p := filepath.Join(data, "meta.properties")
			write(t, p, "version=1\nnode.id=0\n")
			return p
		}, "error", "has no cluster.id", true},
		{"producer ids damaged", func(t *testing.T, data string) string {
			p := filepath.Join(data, spool.ProducerIDsFile)
			write(t, p, "spool-producer-ids 1\nnext-block 3000\ncrc32c 00000000\n")
			return p
		}, "error", "producer id file is damaged", true},
		{"replica's high watermark damaged", func(t *testing.T, data string) string {
			dir := filepath.Join(data, spool.ReplicasDir, "replicated-0")
			makeLog(t, dir, 20)
			p := filepath.Join(dir, partition.HighWatermarkFile)
			write(t, p, "0\n1\nreplicated 7 12\n")
			return p
		}, "warning", "high watermark checkpoint is damaged", false},
		{"interrupted compaction's swap file damaged", func(t *testing.T, data string) string {
			logs := segmentLogs(t, part(data, 1))
			p := logs[1] + ".swap"
			raw, err := os.ReadFile(logs[1])
			require.NoError(t, err)
			positions, _ := batchPositions(t, logs[1])
			write(t, p, string(raw[:positions[1]])+"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01garbage")
			return p
		}, "error", "the log refuses to open", true},
		{"committed offsets damaged", func(t *testing.T, data string) string {
			// The broker reads the whole offsets topic when it opens.
			b, err := spool.Open(data, spool.Options{})
			require.NoError(t, err)
			for g := range 10 {
				_, err = b.Groups().CommitOffsets(group.CommitRequest{Group: fmt.Sprintf("g%d", g), Generation: -1,
					Offsets: map[group.TopicPartition]group.OffsetAndMetadata{{Topic: topic, Partition: 0}: {Offset: 5, LeaderEpoch: -1}}})
				require.NoError(t, err)
			}
			require.NoError(t, b.Close())
			var logs []string
			for n := range 2 {
				dir := filepath.Join(data, fmt.Sprintf("%s-%d", spool.OffsetsTopic, n))
				if st, err := os.Stat(filepath.Join(dir, segment.FileName(0, segment.LogSuffix))); err == nil && st.Size() > 0 {
					logs = append(logs, filepath.Join(dir, segment.FileName(0, segment.LogSuffix)))
				}
			}
			require.NotEmpty(t, logs)
			modify(t, logs[0], func(b []byte) []byte { b[80] ^= 1; return b })
			return logs[0]
		}, "error", "crc32c", true},
		{"a segment damaged inside", func(t *testing.T, data string) string {
			logs := segmentLogs(t, part(data, 1))
			positions, _ := batchPositions(t, logs[0])
			modify(t, logs[0], func(b []byte) []byte { b[positions[1]+100] ^= 1; return b })
			return logs[0]
		}, "error", "crc32c", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			makeDataDir(t, data, topic, 3, 15)
			path := tc.damage(t, data)

			code, out, stderr := runTool(t, "check", data)
			require.Contains(t, []int{exitOK, exitProblem}, code, stderr)
			var found bool
			for _, l := range problemLines(out, tc.level) {
				found = found || strings.HasPrefix(l, tc.level+": "+path+": ") && strings.Contains(l, tc.want)
			}
			require.True(t, found, "want a line \"%s: %s: ...%s...\" in\n%s", tc.level, path, tc.want, out)

			err := serveOpens(t, data)
			require.Equal(t, tc.refused, err != nil, "serve: %v", err)
			if tc.refused {
				require.Equal(t, exitProblem, code, "serve refuses (%v) but check exits %d:\n%s", err, code, out)
			}
			if tc.level == "error" {
				require.Equal(t, exitProblem, code, out)
			} else {
				require.Equal(t, exitOK, code, out)
			}
		})
	}
}
