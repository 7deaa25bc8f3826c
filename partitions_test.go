package spool

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// disk is a file layer over the real one whose free space a test sets, as
// spool meets a full disk: an allocation (fallocate) fails with ENOSPC when
// it would grow its file by more than the free bytes, and a write (every
// write spool makes through the layer ends a file) when it is larger than
// them. Faults apply to paths containing only, if set.
type disk struct {
	mu   sync.Mutex
	free int64 // -1: no limit
	only string
}

func newDisk() *disk { return &disk{free: -1} }

// fs is the file layer to give Options.fs.
func (d *disk) fs() vfs.FS { return vfs.NewFaultFS(vfs.Default, d.inject) }

// fill leaves free bytes free on the paths containing only ("": all).
func (d *disk) fill(free int64, only string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.free, d.only = free, only
}

// clear frees the disk.
func (d *disk) clear() { d.fill(-1, "") }

func (d *disk) inject(op vfs.Op, path string, n int) (int, error) {
	d.mu.Lock()
	free, only := d.free, d.only
	d.mu.Unlock()
	if free < 0 || only != "" && !strings.Contains(path, only) {
		return n, nil
	}
	switch op {
	case vfs.OpAllocate:
		var size int64
		if st, err := os.Stat(path); err == nil {
			size = st.Size()
		}
		if int64(n)-size > free {
			return 0, vfs.ErrNoSpace
		}
	case vfs.OpWrite:
		if int64(n) > free {
			return 0, vfs.ErrNoSpace
		}
	}
	return n, nil
}

// logBuffer collects a logger's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// dirState is what a test compares before and after a failed creation: the
// names in the data directory and the registry's bytes.
func dirState(t *testing.T, dir string) (names []string, registry string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	data, err := os.ReadFile(filepath.Join(dir, registryFile))
	require.NoError(t, err)
	return names, string(data)
}

// A topic that cannot be created for lack of space is not created at all,
// wherever the creation fails: before any file (the staging directory's
// metadata), while allocating a partition's first index step, in the last
// partition, or at the registry write, after every partition was made. The error is typed and logged, the registry and the directory
// are as they were, and once there is space the same call succeeds without
// a restart.
func TestCreateTopicOnFullDisk(t *testing.T) {
	cases := []struct {
		name string
		free int64
		only string
	}{
		{"no space at all", 0, ""},
		{"no space for indexes", 0, segment.IndexSuffix},
		{"no space for the last partition", 0, "t-2"},
		{"no space for the registry", 0, registryFile + ".tmp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := newDisk()
			var logs logBuffer
			b := openBroker(t, dir, Options{fs: d.fs(), Logger: logs.logger()})
			ctx := context.Background()
			require.NoError(t, b.CreateTopic(ctx, "keep", TopicConfig{}))
			_, err := b.Produce(ctx, Record{Topic: "keep", Value: []byte("before")})
			require.NoError(t, err)
			names, reg := dirState(t, dir)

			d.fill(tc.free, tc.only)
			err = b.CreateTopic(ctx, "t", TopicConfig{Partitions: 3})
			require.ErrorIs(t, err, ErrStorage)
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.Equal(t, []string{"keep"}, b.Topics())
			_, err = b.DescribeTopic("t")
			require.ErrorIs(t, err, ErrUnknownTopic)
			gotNames, gotReg := dirState(t, dir)
			require.Equal(t, names, gotNames, "no file or directory is left behind")
			require.Equal(t, reg, gotReg, "the registry is unchanged")
			require.Contains(t, logs.String(), "level=WARN")
			require.Contains(t, logs.String(), "topic=t")
			require.Contains(t, logs.String(), "no space left on device")

			// The broker goes on serving, and creates the topic once there
			// is room, without a restart.
			_, err = b.Produce(ctx, Record{Topic: "keep", Value: []byte("during")})
			if tc.only == "" && tc.free == 0 {
				require.Error(t, err, "even the log of keep cannot write on a disk with no space")
			} else {
				require.NoError(t, err)
			}
			d.clear()
			require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 3}))
			for i := range 6 {
				_, err := b.Produce(ctx, Record{Topic: "t", Key: []byte{byte(i)}, Value: []byte("v")})
				require.NoError(t, err)
			}
			require.Len(t, consumeAll(t, b, "t"), 6)
			require.NoError(t, b.Close())

			b = openBroker(t, dir, Options{})
			defer b.Close()
			desc, err := b.DescribeTopic("t")
			require.NoError(t, err)
			require.Len(t, desc.Partitions, 3)
			require.Len(t, consumeAll(t, b, "t"), 6)
		})
	}
}

// Auto-creation by a produce is the same creation: on a full disk the
// produce fails with the typed error and nothing is registered; the next
// produce after space is freed creates the topic.
func TestAutoCreateOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	d := newDisk()
	b := openBroker(t, dir, Options{fs: d.fs(), DefaultPartitions: 2})
	defer b.Close()
	ctx := context.Background()
	d.fill(0, segment.IndexSuffix)
	_, err := b.Produce(ctx, Record{Topic: "auto", Value: []byte("x")})
	require.ErrorIs(t, err, ErrStorage)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Empty(t, b.Topics())
	names, _ := dirState(t, dir)
	for _, n := range names {
		require.False(t, strings.HasPrefix(n, "auto"), "left behind: %s", n)
	}
	d.clear()
	md, err := b.Produce(ctx, Record{Topic: "auto", Value: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, int64(0), md.Offset)
	require.Equal(t, []string{"auto"}, b.Topics())
}

// CreatePartitions is all or nothing too: on a full disk the topic keeps
// its partitions and data, none of the new ones is registered or left on
// disk, and the same call succeeds once there is room.
func TestCreatePartitionsOnFullDisk(t *testing.T) {
	for _, only := range []string{segment.IndexSuffix, "g-3", registryFile + ".tmp"} {
		t.Run("faults in "+only, func(t *testing.T) {
			dir := t.TempDir()
			d := newDisk()
			var logs logBuffer
			b := openBroker(t, dir, Options{fs: d.fs(), Logger: logs.logger(), Partitioner: partition.ManualPartitioner()})
			ctx := context.Background()
			require.NoError(t, b.CreateTopic(ctx, "g", TopicConfig{}))
			_, err := b.Produce(ctx, Record{Topic: "g", Value: []byte("kept")})
			require.NoError(t, err)
			names, reg := dirState(t, dir)

			d.fill(0, only)
			err = b.CreatePartitions(ctx, "g", 4)
			require.ErrorIs(t, err, ErrStorage)
			require.ErrorIs(t, err, syscall.ENOSPC)
			desc, err := b.DescribeTopic("g")
			require.NoError(t, err)
			require.Len(t, desc.Partitions, 1)
			gotNames, gotReg := dirState(t, dir)
			require.Equal(t, names, gotNames)
			require.Equal(t, reg, gotReg)
			require.Contains(t, logs.String(), "level=WARN")
			_, err = b.Partition("g", 1)
			require.ErrorIs(t, err, ErrUnknownPartition)

			d.clear()
			require.NoError(t, b.CreatePartitions(ctx, "g", 4))
			for n := int32(0); n < 4; n++ {
				_, err := b.Produce(ctx, Record{Topic: "g", Partition: n, Value: []byte(fmt.Sprint(n))})
				require.NoError(t, err)
			}
			require.NoError(t, b.Close())
			b = openBroker(t, dir, Options{})
			defer b.Close()
			desc, err = b.DescribeTopic("g")
			require.NoError(t, err)
			require.Len(t, desc.Partitions, 4)
			require.Len(t, consumeAll(t, b, "g"), 5)
		})
	}
}

// crashEnv names the crash point of TestCrashDuringCreation's child.
const crashEnv = "SPOOL_TEST_CREATION_CRASH"

// TestCrashDuringCreation kills a real process at points inside a
// creation: before the staging directory of a partition is renamed into
// place, and before the registry is renamed over the old one (every
// partition made and opened). The next Open finds the creation never
// happened: the topic (or the partitions) unregistered, no directory of
// them left, and the same creation then succeeds.
func TestCrashDuringCreation(t *testing.T) {
	if point := os.Getenv(crashEnv); point != "" {
		crashingCreation(point, os.Getenv(crashEnv+"_DIR"))
		return
	}
	for _, point := range []string{"topic:staging", "topic:registry", "partitions:staging", "partitions:registry"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			b := openBroker(t, dir, Options{})
			ctx := context.Background()
			require.NoError(t, b.CreateTopic(ctx, "g", TopicConfig{}))
			_, err := b.Produce(ctx, Record{Topic: "g", Value: []byte("kept")})
			require.NoError(t, err)
			require.NoError(t, b.Close())
			// Not a partition being created, though named like one: kept.
			require.NoError(t, os.Mkdir(filepath.Join(dir, "backup-create"), 0o755))
			names, reg := dirState(t, dir)

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDuringCreation$")
			cmd.Env = append(os.Environ(), crashEnv+"="+point, crashEnv+"_DIR="+dir)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "%s", out)
			left, _ := dirState(t, dir)
			require.NotEqual(t, names, left, "the crash left something for Open to clean up")

			b = openBroker(t, dir, Options{})
			defer b.Close()
			gotNames, gotReg := dirState(t, dir)
			require.Equal(t, names, gotNames, "Open removed what the creation left")
			require.Equal(t, reg, gotReg)
			require.Equal(t, []string{"g"}, b.Topics())
			desc, err := b.DescribeTopic("g")
			require.NoError(t, err)
			require.Len(t, desc.Partitions, 1)
			require.Len(t, consumeAll(t, b, "g"), 1)
			if strings.HasPrefix(point, "topic") {
				require.NoError(t, b.CreateTopic(ctx, "x", TopicConfig{Partitions: 2}))
			} else {
				require.NoError(t, b.CreatePartitions(ctx, "g", 3))
			}
		})
	}
}

// crashingCreation is the child of TestCrashDuringCreation: it creates a
// topic x of two partitions, or grows g to three, and SIGKILLs itself at
// the point named.
func crashingCreation(point, dir string) {
	what, at, _ := strings.Cut(point, ":")
	kill := func(op vfs.Op, path string, n int) (int, error) {
		if op != vfs.OpRename {
			return n, nil
		}
		staging := strings.HasSuffix(path, createSuffix) &&
			(what == "topic" && strings.Contains(path, "x-1.") || what == "partitions" && strings.Contains(path, "g-2."))
		if at == "staging" && staging || at == "registry" && filepath.Base(path) == registryFile+".tmp" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
		return n, nil
	}
	b, err := Open(dir, Options{fs: vfs.NewFaultFS(vfs.Default, kill)})
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if what == "topic" {
		err = b.CreateTopic(context.Background(), "x", TopicConfig{Partitions: 2})
	} else {
		err = b.CreatePartitions(context.Background(), "g", 3)
	}
	fmt.Println("not killed:", err)
	os.Exit(3)
}

// crashBroker stops a standalone broker as a killed process would: no
// partition is flushed or closed cleanly. Only the lock is released, so the
// test can open the directory again.
func crashBroker(t *testing.T, b *Broker) {
	t.Helper()
	for _, tp := range b.snapshot() {
		for _, p := range tp.online() {
			require.NoError(t, p.Crash(false))
		}
	}
	_ = b.Close() // the partitions report ErrClosed
}

// One partition that cannot be opened does not keep the broker, or the
// topic's other partitions, offline: it is reported (DescribeTopic, the log
// at error) and answers reads and writes with ErrPartitionOffline, while
// the others serve. Once the cause is gone, the next Open serves it again
// with its data.
func TestPartitionThatCannotOpenIsOffline(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, d *disk) // called with the broker closed or crashed
		reason error                                   // what the offline error wraps
		repair func(t *testing.T, dir string, d *disk)
	}{
		{
			name: "no space for its indexes",
			damage: func(t *testing.T, dir string, d *disk) {
				d.fill(0, "o-1"+string(filepath.Separator))
			},
			reason: syscall.ENOSPC,
			repair: func(t *testing.T, dir string, d *disk) { d.clear() },
		},
		{
			name: "damaged data followed by valid data (Sync)",
			damage: func(t *testing.T, dir string, d *disk) {
				f := filepath.Join(dir, "o-1", segment.FileName(0, segment.LogSuffix))
				data, err := os.ReadFile(f)
				require.NoError(t, err)
				data[100] ^= 0xff // inside the first batch's records
				require.NoError(t, os.WriteFile(f, data, 0o644))
			},
			reason: log.ErrCorrupt,
		},
		{
			name: "directory of another topic",
			damage: func(t *testing.T, dir string, d *disk) {
				require.NoError(t, writePartitionMeta(filepath.Join(dir, "o-1"), newTopicID()))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := newDisk()
			opts := Options{fs: d.fs(), Partitioner: partition.ManualPartitioner()}
			b := openBroker(t, dir, opts)
			ctx := context.Background()
			require.NoError(t, b.CreateTopic(ctx, "o", TopicConfig{Partitions: 3}))
			require.NoError(t, b.CreateTopic(ctx, "other", TopicConfig{}))
			for i := range 30 {
				_, err := b.Produce(ctx, Record{Topic: "o", Partition: int32(i % 3), Value: []byte(fmt.Sprint("v", i))})
				require.NoError(t, err)
			}
			crashBroker(t, b) // no clean close: every partition is recovered
			tc.damage(t, dir, d)

			var logs logBuffer
			opts.Logger = logs.logger()
			b = openBroker(t, dir, opts)
			require.Equal(t, []string{"o", "other"}, b.Topics())
			desc, err := b.DescribeTopic("o")
			require.NoError(t, err)
			require.Len(t, desc.Partitions, 3)
			off := desc.Partitions[1]
			require.Error(t, off.Offline)
			if tc.reason != nil {
				require.ErrorIs(t, off.Offline, tc.reason)
			}
			require.Equal(t, int32(-1), off.Leader)
			require.Empty(t, off.ISR)
			for _, n := range []int{0, 2} {
				require.NoError(t, desc.Partitions[n].Offline)
				require.Equal(t, int64(10), desc.Partitions[n].EndOffset)
			}
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), "partition offline")

			_, err = b.Partition("o", 1)
			require.ErrorIs(t, err, ErrPartitionOffline)
			require.ErrorIs(t, err, ErrStorage)
			_, err = b.Produce(ctx, Record{Topic: "o", Partition: 1, Value: []byte("x")})
			require.ErrorIs(t, err, ErrPartitionOffline)
			_, err = b.Produce(ctx, Record{Topic: "o", Partition: 2, Value: []byte("v30")})
			require.NoError(t, err)
			_, err = b.Produce(ctx, Record{Topic: "other", Value: []byte("x")})
			require.NoError(t, err)

			// A consumer of the whole topic reads the other partitions; an
			// explicit seek on the offline one says why it cannot.
			c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 10 * time.Millisecond, AutoOffsetReset: ResetEarliest})
			require.NoError(t, err)
			require.NoError(t, c.Assign("o"))
			require.ErrorIs(t, c.SeekToStart("o", 1), ErrPartitionOffline)
			var got []Record
			for len(got) < 21 {
				recs, err := c.Poll(ctx)
				require.NoError(t, err)
				got = append(got, recs...)
			}
			for _, r := range got {
				require.NotEqual(t, int32(1), r.Partition)
			}
			require.NoError(t, c.Close())

			// The directory of the offline partition is kept.
			_, err = os.Stat(filepath.Join(dir, "o-1"))
			require.NoError(t, err)
			require.NoError(t, b.Close())

			if tc.repair == nil {
				// The damage stays: deleting the topic still removes it all.
				b = openBroker(t, dir, opts)
				require.NoError(t, b.DeleteTopic(ctx, "o"))
				for n := range 3 {
					_, err := os.Stat(filepath.Join(dir, fmt.Sprint("o-", n)))
					require.ErrorIs(t, err, os.ErrNotExist)
				}
				require.NoError(t, b.Close())
				return
			}
			tc.repair(t, dir, d)
			b = openBroker(t, dir, opts)
			defer b.Close()
			p, err := b.Partition("o", 1)
			require.NoError(t, err)
			require.Equal(t, int64(10), p.EndOffset())
		})
	}
}

// The offsets topic is the exception: a partition of __consumer_offsets
// that cannot be opened refuses Open, since the groups whose offsets it
// holds would otherwise look as if they had committed nothing.
func TestOffsetsPartitionThatCannotOpenRefusesOpen(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{OffsetsTopicPartitions: 2})
	require.NoError(t, b.PrepareGroups(context.Background()))
	require.NoError(t, b.Close())
	require.NoError(t, writePartitionMeta(filepath.Join(dir, OffsetsTopic+"-1"), newTopicID()))
	_, err := Open(dir, Options{OffsetsTopicPartitions: 2})
	require.ErrorContains(t, err, OffsetsTopic+"-1")
}

// Reopening a broker on a disk with little free space opens every
// partition: after a clean close (which trimmed the indexes), and after
// the case of the report - the disk filled, a segment roll failed to
// allocate the next segment's indexes (the full one sealed, its indexes
// trimmed), the process died. Recovery takes only the space its data
// needs.
func TestReopenOnNearlyFullDisk(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "clean close", true: "crash after a failed roll"}[crash], func(t *testing.T) {
			dir := t.TempDir()
			d := newDisk()
			var logs logBuffer
			opts := Options{fs: d.fs(), Logger: logs.logger(), Topic: TopicConfig{SegmentBytes: 4 << 10}}
			b := openBroker(t, dir, opts)
			ctx := context.Background()
			require.NoError(t, b.CreateTopic(ctx, "n", TopicConfig{Partitions: 3}))
			acked := 0
			for i := range 600 {
				_, err := b.Produce(ctx, Record{Topic: "n", Key: []byte(fmt.Sprint(i)), Value: bytes.Repeat([]byte{'v'}, 50)})
				require.NoError(t, err)
				acked++
			}
			if crash {
				d.fill(0, segment.IndexSuffix) // appends go on; a roll cannot
				for i := 600; ; i++ {
					_, err := b.Produce(ctx, Record{Topic: "n", Key: []byte(fmt.Sprint(i)), Value: bytes.Repeat([]byte{'v'}, 50)})
					if err != nil {
						require.ErrorIs(t, err, syscall.ENOSPC)
						break
					}
					acked++
				}
				crashBroker(t, b)
			} else {
				require.NoError(t, b.Close())
			}
			d.fill(64<<10, "")
			var reopened logBuffer
			opts.Logger = reopened.logger()
			b = openBroker(t, dir, opts)
			defer b.Close()
			desc, err := b.DescribeTopic("n")
			require.NoError(t, err)
			for _, p := range desc.Partitions {
				require.NoError(t, p.Offline, "partition %d", p.Partition)
				require.Greater(t, p.Segments, 1)
			}
			require.NotContains(t, reopened.String(), "level=ERROR")
			require.Len(t, consumeAll(t, b, "n"), acked)
		})
	}
}

// Open opens the registered partitions concurrently, yet reports as if it
// had opened them one by one in registry order: of several offsets
// partitions that cannot be opened, the error names the first, every
// time; of several offline partitions of a topic, the log names them in
// order.
func TestOpenReportsFailuresInRegistryOrder(t *testing.T) {
	dir := t.TempDir()
	opts := Options{OffsetsTopicPartitions: 8}
	b := openBroker(t, dir, opts)
	require.NoError(t, b.PrepareGroups(context.Background()))
	require.NoError(t, b.CreateTopic(context.Background(), "o", TopicConfig{Partitions: 8}))
	require.NoError(t, b.Close())

	for _, n := range []int{6, 3, 1} {
		require.NoError(t, writePartitionMeta(filepath.Join(dir, fmt.Sprint("o-", n)), newTopicID()))
	}
	for range 3 {
		var logs logBuffer
		opts.Logger = logs.logger()
		b = openBroker(t, dir, opts)
		var offline []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "partition offline") {
				i := strings.Index(line, "partition=")
				offline = append(offline, strings.Fields(line[i:])[0])
			}
		}
		require.Equal(t, []string{"partition=1", "partition=3", "partition=6"}, offline)
		require.NoError(t, b.Close())
	}

	var saved [][]byte
	for _, n := range []int{2, 4, 7} {
		meta := filepath.Join(dir, fmt.Sprint(OffsetsTopic, "-", n), partitionMetaFile)
		data, err := os.ReadFile(meta)
		require.NoError(t, err)
		saved = append(saved, data)
		require.NoError(t, writePartitionMeta(filepath.Dir(meta), newTopicID()))
	}
	opts.Logger = nil
	for range 3 {
		_, err := Open(dir, opts)
		require.ErrorContains(t, err, OffsetsTopic+"-2")
		require.NotContains(t, err.Error(), OffsetsTopic+"-4")
	}
	for i, n := range []int{2, 4, 7} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(OffsetsTopic, "-", n), partitionMetaFile), saved[i], 0o644))
	}
	b = openBroker(t, dir, opts) // the failed Opens closed what they opened
	require.NoError(t, b.Close())
}
