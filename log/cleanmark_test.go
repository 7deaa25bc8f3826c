package log

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
	"github.com/stretchr/testify/require"
)

// cleanMarkWatch is an Injector that, before each operation that changes
// a segment's files (a write, an allocation, a truncation, a removal, a
// rename - a compaction's into the log directory), reads the checkpoint on disk and records the operation if the
// checkpoint still says the log was closed cleanly: a crash right then
// would leave a clean mark over files that differ from what it describes.
type cleanMarkWatch struct {
	dir        string
	mu         sync.Mutex
	violations []string
}

func (w *cleanMarkWatch) inject(op vfs.Op, path string, n int) (int, error) {
	switch op {
	case vfs.OpWrite, vfs.OpAllocate, vfs.OpTruncate, vfs.OpRemove, vfs.OpRename:
	default:
		return n, nil
	}
	if filepath.Base(filepath.Dir(path)) == cleaningDir && op != vfs.OpRename {
		return n, nil // a compaction's work files: the log's are untouched until renamed in
	}
	name := strings.TrimSuffix(filepath.Base(path), ".swap")
	if _, _, ok := segment.ParseFileName(name); !ok {
		return n, nil // the checkpoint itself, producer files, ...
	}
	data, err := os.ReadFile(filepath.Join(w.dir, CheckpointFile))
	if err != nil {
		return n, nil
	}
	if cp, err := ParseCheckpoint(data); err == nil && cp.CleanShutdown {
		w.mu.Lock()
		w.violations = append(w.violations, op.String()+" "+filepath.Base(path))
		w.mu.Unlock()
	}
	return n, nil
}

// Every change to a log opened after a clean close - by every path that
// changes its files - finds the clean mark gone from the checkpoint on
// disk before its first byte changes (Open keeps the mark, so that an
// idle log's open and close cost no fsync); and a log abandoned after the
// change, as a crash leaves it, is recovered on the next Open, not
// trusted.
func TestCleanMarkGoesBeforeEveryChange(t *testing.T) {
	keyed := func(k string) record.Record { return record.Record{Key: []byte(k), Value: []byte("v-" + k)} }
	cases := []struct {
		name    string
		opts    func(*Options)
		prepare func(t *testing.T, l *Log) // before the clean close
		change  func(t *testing.T, l *Log)
	}{
		{name: "append", prepare: func(t *testing.T, l *Log) {
			require.NoError(t, l.Roll()) // an empty active segment: the append cannot roll
		}, change: func(t *testing.T, l *Log) {
			n := l.NumSegments()
			appendN(t, l, 1, 1, rand.New(rand.NewPCG(6, 6)))
			require.Equal(t, n, l.NumSegments(), "appended without a roll")
		}},
		{name: "roll", change: func(t *testing.T, l *Log) { require.NoError(t, l.Roll()) }},
		{name: "truncate", change: func(t *testing.T, l *Log) {
			_, err := l.Truncate(l.EndOffset() - 1)
			require.NoError(t, err)
		}},
		{name: "reset", change: func(t *testing.T, l *Log) { require.NoError(t, l.Reset(l.EndOffset()+10)) }},
		{name: "delete records", change: func(t *testing.T, l *Log) {
			require.NoError(t, l.DeleteRecordsBefore(l.EndOffset()-1))
		}},
		{name: "retention", opts: func(o *Options) { o.RetentionBytes = 1 }, change: func(t *testing.T, l *Log) {
			n, err := l.ApplyRetention()
			require.NoError(t, err)
			require.NotZero(t, n)
		}},
		{name: "aborted txn", change: func(t *testing.T, l *Log) {
			end := l.EndOffset()
			require.NoError(t, l.AppendAbortedTxn(segment.AbortedTxn{ProducerID: 1, FirstOffset: end - 2, LastOffset: end - 1, LastStableOffset: end - 2}))
		}},
		{name: "cut aborted txns", prepare: func(t *testing.T, l *Log) {
			end := l.EndOffset()
			require.NoError(t, l.AppendAbortedTxn(segment.AbortedTxn{ProducerID: 1, FirstOffset: end - 2, LastOffset: end - 1, LastStableOffset: end - 2}))
		}, change: func(t *testing.T, l *Log) {
			require.NoError(t, l.TruncateAbortedTxns(l.EndOffset()-1))
		}},
		{name: "compaction", opts: func(o *Options) { o.Cleanup = Compact }, prepare: func(t *testing.T, l *Log) {
			for range 40 {
				for _, k := range []string{"a", "b", "c"} {
					_, err := l.Append(keyed(k))
					require.NoError(t, err)
				}
			}
		}, change: func(t *testing.T, l *Log) {
			st, err := l.Clean(true)
			require.NoError(t, err)
			require.True(t, st.Cleaned)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := &cleanMarkWatch{dir: dir}
			opts := tiny()
			opts.RetentionCheckInterval = -1
			if c.opts != nil {
				c.opts(&opts)
			}
			opts.fs = vfs.NewFaultFS(vfs.Default, w.inject)

			l, err := Open(dir, opts)
			require.NoError(t, err)
			appendN(t, l, 60, 3, rand.New(rand.NewPCG(5, 5)))
			if c.prepare != nil {
				c.prepare(t, l)
			}
			require.Greater(t, l.NumSegments(), 1)
			require.NoError(t, l.Close())

			l, info, err := OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.True(t, info.Clean)
			cp, err := ReadCheckpoint(dir)
			require.NoError(t, err)
			require.True(t, cp.CleanShutdown, "an unchanged log keeps the clean mark")
			w.mu.Lock()
			w.violations = nil
			w.mu.Unlock()

			c.change(t, l)
			w.mu.Lock()
			require.Empty(t, w.violations, "changed files under a clean mark")
			w.mu.Unlock()
			cp, err = ReadCheckpoint(dir)
			require.NoError(t, err)
			require.False(t, cp.CleanShutdown)
			end := l.EndOffset()

			l.abandon() // a crash: no flush, no checkpoint
			l, info, err = OpenWithInfo(dir, opts)
			require.NoError(t, err)
			require.False(t, info.Clean, "the changed log must be recovered, not trusted")
			require.Equal(t, end, l.EndOffset())
			require.NoError(t, l.Close())
		})
	}
}

// The crash a lazy clean mark must survive: a log opened after a clean
// close is appended to until the segment that close named is sealed and
// a later one active, and then the machine dies before that segment's new
// tail was flushed (Flush None): its last batch is torn. The clean open
// checks only the last segment, so a clean mark left on disk would have
// the torn batch - in a segment no one checks - served as the log, with
// offsets after it. The next Open must recover from the recovery point
// instead: cut the torn batch, drop what follows it, keep the rest.
func TestAppendAfterCleanOpenThenCrashRecovers(t *testing.T) {
	dir := t.TempDir()
	opts := tiny()
	opts.Flush = None
	l, err := Open(dir, opts)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(9, 9))
	appendN(t, l, 50, 3, rng)
	require.NoError(t, l.Roll())
	require.NoError(t, l.Close())

	// No background checkpoint: it would flush the tail and move the
	// recovery point past it, which is not the case under test.
	sched := NewScheduler(1)
	opts.Scheduler = sched
	l, err = Open(dir, opts)
	require.NoError(t, err)
	require.NoError(t, sched.Close())
	segs := l.NumSegments()
	named := l.segments()[segs-1].Path() // the clean close's active segment, empty
	for l.NumSegments() == segs {
		appendN(t, l, 1, 1, rng)
	}
	end := appendN(t, l, 3, 1, rng)
	l.abandon()
	st, err := os.Stat(named)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(named, st.Size()-3)) // its unflushed last batch torn

	opts.Scheduler = nil
	l, info, err := OpenWithInfo(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	require.False(t, info.Clean, "the clean mark outlived the appends")
	require.Positive(t, info.TruncatedBytes)
	require.Equal(t, 1, info.SegmentsDropped)
	require.Less(t, l.EndOffset(), end)
	checkRecords(t, readAll(t, l, 0), 0, l.EndOffset())
}
