package log

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// busyOptions make every background job of a log fall due every
// millisecond, so that the scheduler is never idle while they are open.
func busyOptions(s *Scheduler) Options {
	opts := tiny()
	opts.Flush = Interval(time.Millisecond)
	opts.CheckpointInterval = time.Millisecond
	opts.RetentionCheckInterval = time.Millisecond
	opts.Scheduler = s
	return opts
}

// eventually waits for cond, failing the test after a generous deadline:
// the deadline only bounds a broken test, nothing is measured by it.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Opening many logs must not start a goroutine for each: their jobs share
// the scheduler's timer goroutine and its few workers, whether the logs
// name a scheduler or share the package's default one.
func TestManyLogsRunOnAFewGoroutines(t *testing.T) {
	const logs = 200
	for _, name := range []string{"own scheduler", "default scheduler"} {
		t.Run(name, func(t *testing.T) {
			var s *Scheduler
			workers := defaultScheduler.workers
			if name == "own scheduler" {
				s = NewScheduler(2)
				workers = 2
				defer s.Close()
			}
			before := runtime.NumGoroutine()
			var open []*Log
			for range logs {
				l, err := Open(t.TempDir(), busyOptions(s))
				require.NoError(t, err)
				open = append(open, l)
				_, err = l.Append(record.Record{Value: []byte("v")})
				require.NoError(t, err)
			}
			grown := runtime.NumGoroutine() - before
			// The timer goroutine and the workers; a goroutine per log
			// would be 200.
			require.LessOrEqual(t, grown, 1+workers, "goroutines started for %d open logs", logs)
			for _, l := range open {
				require.NoError(t, l.Close())
			}
			if s != nil {
				require.NoError(t, s.Close())
				s.mu.Lock()
				defer s.mu.Unlock()
				require.False(t, s.ticking)
				require.Zero(t, s.running)
			}
		})
	}
}

// The background work a log registers still happens: the Interval flush
// makes appends durable, the checkpoint records the recovery point, and
// retention deletes old segments - with nobody calling Sync.
func TestBackgroundJobsRun(t *testing.T) {
	s := NewScheduler(0)
	defer s.Close()
	dir := t.TempDir()
	opts := busyOptions(s)
	opts.RetentionBytes = 8 << 10
	opts.RetentionTime = Unlimited
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	var end int64
	for i := range 200 {
		end, err = l.Append(record.Record{Value: make([]byte, 100+i%7)})
		require.NoError(t, err)
	}
	end++ // 200 records of 4 KiB segments: rolls, so retention has sealed segments to delete
	eventually(t, "an interval flush", func() bool {
		l.syncMu.Lock()
		defer l.syncMu.Unlock()
		return l.durable >= end
	})
	eventually(t, "a checkpoint at the end", func() bool {
		cp, err := readCheckpoint(vfs.Default, dir)
		return err == nil && cp.RecoveryPoint.Offset == end
	})
	eventually(t, "retention", func() bool { return l.StartOffset() > 0 })
}

// A roll asks for a checkpoint at once, not a CheckpointInterval later:
// the recovery point moves into the new segment, so that a crash checks
// only that one.
func TestRollTriggersCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opts := tiny() // CheckpointInterval: an hour
	opts.Flush = None
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	for l.NumSegments() < 2 {
		_, err := l.Append(record.Record{Value: make([]byte, 100)})
		require.NoError(t, err)
	}
	active := l.Segments()[1].BaseOffset
	eventually(t, "a checkpoint after the roll", func() bool {
		cp, err := readCheckpoint(vfs.Default, dir)
		return err == nil && cp.RecoveryPoint.SegmentBase == active
	})
}

// The jobs of one group never run at the same time, however often they
// fall due or are triggered; jobs of different groups do run side by side
// (the workers are shared, not one per group).
func TestSchedulerSerialisesAGroupsJobs(t *testing.T) {
	s := NewScheduler(4)
	defer s.Close()
	const groups, runs = 4, 50
	type counter struct {
		inside, most atomic.Int32
		ran          atomic.Int64
	}
	var all counter // across groups
	cs := make([]*counter, groups)
	gs := make([]*jobGroup, groups)
	for i := range cs {
		c := new(counter)
		cs[i] = c
		run := func() {
			n := c.inside.Add(1)
			if n > c.most.Load() {
				c.most.Store(n)
			}
			m := all.inside.Add(1)
			for {
				old := all.most.Load()
				if m <= old || all.most.CompareAndSwap(old, m) {
					break
				}
			}
			runtime.Gosched()
			all.inside.Add(-1)
			c.inside.Add(-1)
			c.ran.Add(1)
		}
		g, err := s.register(jobSpec{period: time.Millisecond, run: run}, jobSpec{period: time.Millisecond, run: run}, jobSpec{run: run})
		require.NoError(t, err)
		gs[i] = g
	}
	for i := range runs {
		for _, g := range gs {
			g.trigger(i % 3)
		}
	}
	eventually(t, "every group's jobs running many times", func() bool {
		for _, c := range cs {
			if c.ran.Load() < runs {
				return false
			}
		}
		return true
	})
	for i, g := range gs {
		g.unregister()
		require.EqualValues(t, 1, cs[i].most.Load(), "group %d ran two jobs at once", i)
	}
	t.Logf("at most %d jobs of different groups ran at once", all.most.Load())
}

// unregister waits for the group's job that is running: once it returns,
// no job of the group runs, nor starts later.
func TestUnregisterWaitsForTheRunningJob(t *testing.T) {
	s := NewScheduler(1)
	defer s.Close()
	started, release := make(chan struct{}), make(chan struct{})
	var finished, after atomic.Bool
	var stopped atomic.Bool
	g, err := s.register(jobSpec{run: func() {
		if stopped.Load() {
			after.Store(true)
			return
		}
		close(started)
		<-release
		finished.Store(true)
	}})
	require.NoError(t, err)
	g.trigger(0)
	<-started
	done := make(chan struct{})
	go func() {
		g.unregister()
		stopped.Store(true)
		close(done)
	}()
	eventually(t, "unregister to begin", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return g.stopped
	})
	select {
	case <-done:
		t.Fatal("unregister returned while the job ran")
	default:
	}
	g.trigger(0) // ignored: the group is stopping
	close(release)
	<-done
	require.True(t, finished.Load(), "unregister returned before the job did")
	g.trigger(0)
	s.mu.Lock()
	require.Empty(t, s.ready)
	s.mu.Unlock()
	require.False(t, after.Load())
}

// A log's Close while its interval flush is in the middle of an fsync
// waits for the flush before it closes the files: Close returns after the
// job, and the close is clean.
func TestCloseWaitsForARunningFlush(t *testing.T) {
	s := NewScheduler(1)
	defer s.Close()
	dir := t.TempDir()
	var armed atomic.Bool
	var order []string
	var mu sync.Mutex
	note := func(what string) {
		mu.Lock()
		order = append(order, what)
		mu.Unlock()
	}
	entered, release := make(chan struct{}), make(chan struct{})
	opts := tiny()
	opts.Flush = Interval(time.Millisecond)
	opts.Scheduler = s
	opts.fs = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, _ string, n int) (int, error) {
		if op == vfs.OpSync && armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
			note("flush fsync")
		}
		return n, nil
	})
	l, err := Open(dir, opts)
	require.NoError(t, err)
	armed.Store(true) // before the append: the next flush has something to sync
	_, err = l.Append(record.Record{Value: []byte("v")})
	require.NoError(t, err)
	<-entered // the flush job is in its fsync
	closed := make(chan error)
	go func() {
		err := l.Close()
		note("close returned")
		closed <- err
	}()
	eventually(t, "Close to begin", l.closed.Load)
	select {
	case <-closed:
		t.Fatal("Close returned while the flush ran")
	default:
	}
	close(release)
	require.NoError(t, <-closed)
	require.Equal(t, []string{"flush fsync", "close returned"}, order)
	l, info, err := OpenWithInfo(dir, tiny())
	require.NoError(t, err)
	require.True(t, info.Clean)
	require.EqualValues(t, 1, l.EndOffset())
	require.NoError(t, l.Close())
}

// A closed scheduler accepts no log; a log that outlives its scheduler
// still closes cleanly.
func TestSchedulerClose(t *testing.T) {
	s := NewScheduler(0)
	dir := t.TempDir()
	l, err := Open(dir, busyOptions(s))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = Open(t.TempDir(), busyOptions(s))
	require.ErrorIs(t, err, ErrSchedulerClosed)
	_, err = l.Append(record.Record{Value: []byte("v")})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l, info, err := OpenWithInfo(dir, tiny())
	require.NoError(t, err)
	require.True(t, info.Clean)
	require.NoError(t, l.Close())
}
