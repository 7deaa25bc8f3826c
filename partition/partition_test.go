package partition

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

func TestEpochCache(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenEpochCache(nil, dir)
	require.NoError(t, err)
	require.Equal(t, int32(-1), c.Latest())
	e, off := c.EndOffsetFor(5, 100)
	require.Equal(t, int32(-1), e)
	require.Equal(t, int64(-1), off)

	require.NoError(t, c.Assign(0, 0))
	require.NoError(t, c.Assign(2, 50))
	require.NoError(t, c.Assign(2, 70)) // known epoch: ignored
	require.NoError(t, c.Assign(1, 60)) // older epoch: ignored
	require.NoError(t, c.Assign(5, 80))
	require.Equal(t, []EpochEntry{{0, 0}, {2, 50}, {5, 80}}, c.Entries())

	// KIP-279: the largest known epoch <= the requested one, and its end.
	for _, tc := range []struct {
		ask    int32
		epoch  int32
		endsAt int64
	}{{0, 0, 50}, {1, 0, 50}, {2, 2, 80}, {3, 2, 80}, {5, 5, 120}, {9, 5, 120}} {
		e, off := c.EndOffsetFor(tc.ask, 120)
		require.Equal(t, tc.epoch, e, "ask %d", tc.ask)
		require.Equal(t, tc.endsAt, off, "ask %d", tc.ask)
	}

	// Persisted in Kafka's format.
	data, err := os.ReadFile(filepath.Join(dir, EpochFile))
	require.NoError(t, err)
	require.Equal(t, "0\n3\n0 0\n2 50\n5 80\n", string(data))
	c2, err := OpenEpochCache(nil, dir)
	require.NoError(t, err)
	require.Equal(t, c.Entries(), c2.Entries())

	require.NoError(t, c.TruncateFromEnd(60))
	require.Equal(t, []EpochEntry{{0, 0}, {2, 50}}, c.Entries())
	require.NoError(t, c.TruncateFromStart(55))
	require.Equal(t, []EpochEntry{{2, 55}}, c.Entries())
	// Older than every entry: the asked epoch, ending where the log's
	// first known epoch starts (Kafka PR #5678).
	e, off = c.EndOffsetFor(1, 60)
	require.Equal(t, int32(1), e)
	require.Equal(t, int64(55), off)
	// A new epoch starting where an empty one did replaces it.
	require.NoError(t, c.Assign(3, 90))
	require.NoError(t, c.Assign(4, 90))
	require.Equal(t, []EpochEntry{{2, 55}, {4, 90}}, c.Entries())
}

func TestEpochFileDamage(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":      "hello",
		"bad version":  "1\n0\n",
		"short":        "0\n2\n0 0\n",
		"out of order": "0\n2\n3 10\n2 20\n",
		"negative":     "0\n1\n-1 0\n",
		"trailing":     "0\n1\n0 0\n7 7\n",
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, EpochFile), []byte(content), 0o644))
		_, err := OpenEpochCache(nil, dir)
		require.ErrorIs(t, err, ErrBadEpochFile, name)
	}
}

func opts(flush log.FlushPolicy) Options {
	return Options{Log: log.Options{SegmentBytes: 8192, Flush: flush}}
}

func TestPartitionEpochsSurviveAndRebuild(t *testing.T) {
	dir := t.TempDir()
	p, err := Open(dir, "t", 0, opts(log.None))
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		_, err := p.Append(record.Record{Value: []byte("v")})
		require.NoError(t, err)
	}
	require.NoError(t, p.Close())

	o := opts(log.None)
	o.LeaderEpoch = 3
	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		_, err := p.Append(record.Record{Value: []byte("w")})
		require.NoError(t, err)
	}
	buf, err := p.Log().Read(22, 100)
	require.NoError(t, err)
	b, _, err := record.ParseBatch(buf)
	require.NoError(t, err)
	require.Equal(t, int32(3), b.PartitionLeaderEpoch())
	require.Equal(t, []EpochEntry{{0, 0}, {3, 20}}, p.Epochs().Entries())
	require.NoError(t, p.Close())

	// A damaged cache is rebuilt from the batches.
	require.NoError(t, os.WriteFile(filepath.Join(dir, EpochFile), []byte("junk"), 0o644))
	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	require.Equal(t, []EpochEntry{{0, 0}, {3, 20}}, p.Epochs().Entries())
	require.NoError(t, p.Close())
	onDisk, err := OpenEpochCache(nil, dir)
	require.NoError(t, err, "the rebuilt cache was written")
	require.Equal(t, []EpochEntry{{0, 0}, {3, 20}}, onDisk.Entries())

	// A broker may not lead in an epoch older than the log's.
	o.LeaderEpoch = 1
	_, err = Open(dir, "t", 0, o)
	require.ErrorIs(t, err, ErrNewerLeaderEpoch)
	require.ErrorIs(t, VerifyEpochs([]EpochEntry{{0, 0}, {3, 20}}, 25, 1), ErrNewerLeaderEpoch, "what tools check, without opening")
}

// Reopening an idle partition leaves its leader-epoch file alone: its one
// entry, the epoch it is opened in starting at the log end, is dropped as
// empty and assigned again, and rewriting the file for that cost two
// atomic replacements (four fsyncs) per partition at every broker Open.
func TestReopenIdleKeepsEpochFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, EpochFile)
	p, err := Open(dir, "t", 0, opts(log.None))
	require.NoError(t, err)
	require.NoError(t, p.Close())
	before, err := os.Stat(path)
	require.NoError(t, err)

	p, err = Open(dir, "t", 0, opts(log.None))
	require.NoError(t, err)
	require.Equal(t, []EpochEntry{{0, 0}}, p.Epochs().Entries())
	require.NoError(t, p.Close())
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the epoch file was replaced")

	// A new epoch is still written.
	o := opts(log.None)
	o.LeaderEpoch = 2
	p, err = Open(dir, "t", 0, o)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	c, err := OpenEpochCache(nil, dir)
	require.NoError(t, err)
	require.Equal(t, []EpochEntry{{2, 0}}, c.Entries())
}

func TestVerifyEpochs(t *testing.T) {
	for _, tc := range []struct {
		entries []EpochEntry
		end     int64
		leader  int32
		ok      bool
	}{
		{nil, 0, 0, true},
		{[]EpochEntry{{0, 0}}, 10, 0, true},
		{[]EpochEntry{{0, 0}, {2, 5}}, 10, 2, true},
		{[]EpochEntry{{0, 0}, {2, 5}}, 10, 1, false},
		{[]EpochEntry{{0, 0}, {2, 5}}, 5, 1, true}, // epoch 2 starts at the end: Open drops it
		{[]EpochEntry{{3, 0}}, 1, 0, false},
	} {
		err := VerifyEpochs(tc.entries, tc.end, tc.leader)
		if tc.ok {
			require.NoError(t, err, "%+v", tc)
		} else {
			require.ErrorIs(t, err, ErrNewerLeaderEpoch, "%+v", tc)
		}
	}
}

func TestFetchLongPoll(t *testing.T) {
	p, err := Open(t.TempDir(), "t", 0, opts(log.Sync))
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()

	// Nothing there: waits maxWait, returns empty.
	start := time.Now()
	res, err := p.Fetch(ctx, 0, 1, 1<<20, 50*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, res.Batches)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	// Data arriving wakes the fetch before maxWait.
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.Append(record.Record{Value: []byte("hello")})
	}()
	res, err = p.Fetch(ctx, 0, 1, 1<<20, time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, res.Batches)
	require.Equal(t, int64(1), res.HighWatermark)

	// minBytes more than there is: waits for more.
	done := make(chan FetchResult)
	go func() {
		r, _ := p.Fetch(ctx, 0, 500, 1<<20, time.Minute)
		done <- r
	}()
	for i := 0; i < 10; i++ {
		_, err := p.Append(record.Record{Value: make([]byte, 100)})
		require.NoError(t, err)
	}
	select {
	case r := <-done:
		require.GreaterOrEqual(t, len(r.Batches), 500)
	case <-time.After(10 * time.Second):
		t.Fatal("fetch did not return once minBytes were there")
	}

	// Context cancellation ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err = p.Fetch(cctx, p.HighWatermark(), 1, 1<<20, time.Minute)
	require.ErrorIs(t, err, context.Canceled)

	// Out of range.
	_, err = p.Fetch(ctx, p.HighWatermark()+1, 0, 100, 0)
	require.ErrorIs(t, err, log.ErrOffsetOutOfRange)
}
