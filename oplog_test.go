package spool

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/segment"
)

// captured is a log record as a test sees it: message, level and every
// attribute (those of With included), by key.
type captured struct {
	msg   string
	level slog.Level
	attrs map[string]slog.Value
}

// captureHandler is a slog.Handler that keeps every record.
type captureHandler struct {
	mu    *sync.Mutex
	recs  *[]captured
	attrs []slog.Attr
}

func newCapture() (*slog.Logger, *captureHandler) {
	h := &captureHandler{mu: new(sync.Mutex), recs: new([]captured)}
	return slog.New(h), h
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) WithGroup(string) slog.Handler            { return h }
func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{mu: h.mu, recs: h.recs, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	c := captured{msg: r.Message, level: r.Level, attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		c.attrs[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool { c.attrs[a.Key] = a.Value; return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, c)
	h.mu.Unlock()
	return nil
}

// find returns the records with message msg.
func (h *captureHandler) find(msg string) []captured {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []captured
	for _, c := range *h.recs {
		if c.msg == msg {
			out = append(out, c)
		}
	}
	return out
}

// TestRetentionLogsOnce checks that a retention round that deletes
// segments logs it once, at info, with the partition and what went.
func TestRetentionLogsOnce(t *testing.T) {
	lg, h := newCapture()
	b := openBroker(t, t.TempDir(), Options{Logger: lg, RetentionCheckInterval: time.Hour})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{SegmentBytes: 200, RetentionBytes: 200}))
	p, err := b.NewProducer(ProducerConfig{Linger: -1})
	require.NoError(t, err)
	for i := range 20 {
		p.Produce(ctx, Record{Topic: "t", Value: fmt.Appendf(nil, "value %03d %0100d", i, i)}, nil)
		require.NoError(t, p.Flush(ctx)) // one batch each: segments roll
	}
	require.NoError(t, p.Close())
	require.Empty(t, h.find("retention deleted segments"))

	b.maintain()
	recs := h.find("retention deleted segments")
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, slog.LevelInfo, r.level)
	require.Equal(t, "t", r.attrs["topic"].String())
	require.EqualValues(t, 0, r.attrs["partition"].Int64())
	require.Positive(t, r.attrs["segments"].Int64())
	require.Positive(t, r.attrs["bytes"].Int64())
	part, err := b.Partition("t", 0)
	require.NoError(t, err)
	require.Equal(t, part.StartOffset(), r.attrs["log_start_offset"].Int64())

	b.maintain() // nothing more to delete: nothing logged
	require.Len(t, h.find("retention deleted segments"), 1)
}

// TestCompactionLogsOnce checks that a compaction run is logged once per
// partition it cleaned, with bytes before and after.
func TestCompactionLogsOnce(t *testing.T) {
	lg, h := newCapture()
	b := openBroker(t, t.TempDir(), Options{Logger: lg, RetentionCheckInterval: time.Hour})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "c", TopicConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 300}))
	p, err := b.NewProducer(ProducerConfig{Linger: -1})
	require.NoError(t, err)
	for i := range 30 {
		p.Produce(ctx, Record{Topic: "c", Key: []byte{byte(i % 2)}, Value: fmt.Appendf(nil, "%050d", i)}, nil)
		require.NoError(t, p.Flush(ctx))
	}
	require.NoError(t, p.Close())
	st, err := b.Compact(ctx, "c")
	require.NoError(t, err)
	require.True(t, st.Cleaned)
	recs := h.find("compacted a partition")
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, slog.LevelInfo, r.level)
	require.Equal(t, "c", r.attrs["topic"].String())
	require.EqualValues(t, 0, r.attrs["partition"].Int64())
	require.Greater(t, r.attrs["bytes_before"].Int64(), r.attrs["bytes_after"].Int64())
}

// TestRecoveryLogsOnce checks that opening a partition whose log needed
// recovery - its tail torn - logs it once, with the segment and the bytes
// cut.
func TestRecoveryLogsOnce(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, dir, Options{})
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))
	p, err := b.NewProducer(ProducerConfig{})
	require.NoError(t, err)
	p.Produce(ctx, Record{Topic: "t", Value: []byte("v")}, nil)
	require.NoError(t, p.Close())
	require.NoError(t, b.Close())
	// A torn tail, and no checkpoint to say the log was closed cleanly:
	// the next open checks the log and cuts the tail.
	pdir := partitionDir(dir, "t", 0)
	path := filepath.Join(pdir, segment.FileName(0, segment.LogSuffix))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Remove(filepath.Join(pdir, log.CheckpointFile)))

	lg, h := newCapture()
	b = openBroker(t, dir, Options{Logger: lg})
	t.Cleanup(func() { b.Close() })
	recs := h.find("recovered a partition's log")
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, slog.LevelInfo, r.level)
	require.Equal(t, "t", r.attrs["topic"].String())
	require.EqualValues(t, 0, r.attrs["partition"].Int64())
	require.Equal(t, path, r.attrs["truncated_segment"].String())
	require.EqualValues(t, 10, r.attrs["truncated_bytes"].Int64())
}

// TestClusterLogsBecameLeaderOnce checks that electing a partition's
// leader in an in-process cluster is logged once, with its leader epoch,
// through the leading broker's Options.Logger, and each follower's
// change once through its own.
func TestClusterLogsBecameLeaderOnce(t *testing.T) {
	c := fastCluster(t)
	root := t.TempDir()
	var bs []*Broker
	var hs []*captureHandler
	for id := int32(1); id <= 3; id++ {
		lg, h := newCapture()
		b, err := Open(filepath.Join(root, fmt.Sprintf("node-%d", id)), Options{Cluster: c, NodeID: id, Logger: lg})
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		bs, hs = append(bs, b), append(hs, h)
	}
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "t", TopicConfig{Partitions: 1, ReplicationFactor: 3}))
	var leaders, followers []captured
	count := func() {
		leaders, followers = nil, nil
		for _, h := range hs {
			leaders = append(leaders, h.find("became leader")...)
			followers = append(followers, h.find("became follower")...)
		}
	}
	require.Eventually(t, func() bool { count(); return len(leaders) == 1 && len(followers) == 2 }, 10*time.Second, 10*time.Millisecond)
	l := leaders[0]
	require.Equal(t, slog.LevelInfo, l.level)
	require.Equal(t, "t", l.attrs["topic"].String())
	require.EqualValues(t, 0, l.attrs["partition"].Int64())
	require.Contains(t, l.attrs, "leader_epoch")
	for _, f := range followers {
		require.Equal(t, l.attrs["leader_epoch"].Int64(), f.attrs["leader_epoch"].Int64())
	}
}
