package log

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// openLogFiles counts the process's open descriptors of .log files under
// root (Linux: the entries of /proc/self/fd).
func openLogFiles(t *testing.T, root string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		target = strings.TrimSuffix(target, " (deleted)")
		if strings.HasPrefix(target, root) && strings.HasSuffix(target, ".log") {
			n++
		}
	}
	return n
}

// checkSpans reads the log from offset from through spans, from the files
// Span.File gives (as a zero-copy send does), and checks every record.
func checkSpans(t *testing.T, l *Log, from int64) {
	t.Helper()
	var recs []record.Record
	for off := from; off < l.CommittedOffset(); {
		sp, err := l.Span(off, 1+rand.IntN(3000), l.CommittedOffset())
		require.NoError(t, err)
		f := sp.File()
		require.NotNil(t, f)
		buf := make([]byte, sp.Len())
		_, err = f.ReadAt(buf, sp.Position())
		require.NoError(t, err)
		sp.Release()
		for len(buf) > 0 {
			b, n, err := record.ParseBatch(buf)
			require.NoError(t, err)
			require.NoError(t, b.Verify())
			rs, err := b.Records()
			require.NoError(t, err)
			for _, r := range rs {
				if r.Offset >= off {
					recs = append(recs, r)
					off = r.Offset + 1
				}
			}
			buf = buf[n:]
		}
	}
	checkRecords(t, recs, from, l.CommittedOffset())
}

// Many logs of many segments share a pool of 4 files: writing and reading
// them in turn, across evictions and a reopen, every byte reads back, and
// the process never holds more .log descriptors than the limit plus the
// files in use when a file last opened (at most two here: one goroutine
// takes at most two files at once).
func TestLogsShareAPoolOfFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	const limit, slack, logs = 4, 2, 8
	root := t.TempDir()
	pool := NewFilePool(limit)
	opts := tiny()
	opts.Files = pool
	open := func() []*Log {
		ls := make([]*Log, logs)
		for i := range ls {
			l, err := Open(filepath.Join(root, fmt.Sprint(i)), opts)
			require.NoError(t, err)
			ls[i] = l
			require.LessOrEqual(t, openLogFiles(t, root), limit+slack)
		}
		return ls
	}
	ls := open()
	rng := rand.New(rand.NewPCG(21, 21))
	for round := 0; round < 3; round++ {
		for _, l := range ls {
			appendN(t, l, 120, 6, rng)
			require.LessOrEqual(t, openLogFiles(t, root), limit+slack)
		}
		for _, l := range ls {
			checkRecords(t, readAll(t, l, 0), 0, l.CommittedOffset())
			require.LessOrEqual(t, openLogFiles(t, root), limit+slack)
			checkSpans(t, l, 0)
			require.LessOrEqual(t, openLogFiles(t, root), limit+slack)
		}
	}
	segs := 0
	for _, l := range ls {
		segs += l.NumSegments()
	}
	require.Greater(t, segs, 10*limit, "many more segments than files")
	require.Positive(t, pool.Stats().Evictions)
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
	require.Zero(t, openLogFiles(t, root))
	require.Zero(t, pool.Stats().Open)

	ls = open()
	for _, l := range ls {
		checkRecords(t, readAll(t, l, 0), 0, l.CommittedOffset())
		checkSpans(t, l, 0)
		require.LessOrEqual(t, openLogFiles(t, root), limit+slack)
	}
	for _, l := range ls {
		require.NoError(t, l.Close())
	}
	require.Zero(t, openLogFiles(t, root))
}

// A span's file stays open until the span is released, however many files
// open meanwhile, even past retention deleting its segment.
func TestSpanKeepsItsPooledFile(t *testing.T) {
	root := t.TempDir()
	pool := NewFilePool(1)
	opts := tiny()
	opts.Files = pool
	a, err := Open(filepath.Join(root, "a"), opts)
	require.NoError(t, err)
	b, err := Open(filepath.Join(root, "b"), opts)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(22, 22))
	appendN(t, a, 200, 5, rng)
	sp, err := a.Span(0, 1<<20, a.CommittedOffset())
	require.NoError(t, err)
	f := sp.File()
	require.NotNil(t, f)
	appendN(t, b, 200, 5, rng) // b's files take the pool's one place
	require.NoError(t, a.DeleteRecordsBefore(a.CommittedOffset()))
	require.Greater(t, a.StartOffset(), int64(0), "the span's segment is gone from the log")
	buf := make([]byte, sp.Len())
	_, err = f.ReadAt(buf, sp.Position())
	require.NoError(t, err, "the span's file was closed under it")
	bt, _, err := record.ParseBatch(buf)
	require.NoError(t, err)
	require.NoError(t, bt.Verify())
	require.Equal(t, int64(0), bt.BaseOffset())
	sp.Release()
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Zero(t, pool.Stats().Open)
}

// A log whose unsynced data is fsynced by the pool closing its file, and
// whose fsync fails there, fails its next flush - the error is not lost
// with the file, and a later fsync through a reopened file, which would
// succeed, is not believed - and takes no more writes.
func TestLogFsyncErrorAcrossEviction(t *testing.T) {
	root := t.TempDir()
	var sw vfs.Switch
	opts := tiny()
	opts.Flush = None
	opts.FS = vfs.NewFaultFS(vfs.Default, sw.Inject)
	opts.Files = NewFilePool(1)
	a, err := Open(filepath.Join(root, "a"), opts)
	require.NoError(t, err)
	b, err := Open(filepath.Join(root, "b"), opts)
	require.NoError(t, err)
	_, err = a.Append(record.Record{Value: []byte("unsynced")})
	require.NoError(t, err)
	aDir := a.Dir()
	sw.FailAfter(vfs.OpSync, func(p string) bool { return strings.HasPrefix(p, aDir) && strings.HasSuffix(p, ".log") }, 0, vfs.ErrIO, 1)
	syncs := sw.Count(vfs.OpSync)
	_, err = b.Append(record.Record{Value: []byte("b")}) // reopens b's file: a's goes
	require.NoError(t, err)
	require.Equal(t, syncs+1, sw.Count(vfs.OpSync), "a's file was fsynced as it closed")

	// The injected fault is spent; a fresh fsync would pass.
	require.ErrorIs(t, a.Sync(), vfs.ErrIO)
	_, err = a.Append(record.Record{Value: []byte("more")})
	require.Error(t, err, "a failed log takes no writes")
	require.NoError(t, b.Sync())
	_ = a.Close()
	require.NoError(t, b.Close())
}

// Writers and readers of several logs sharing a pool of 2 files run at
// once (run it with -race): every read - by copy and through a span's file
// - returns the records written, whatever the pool closes meanwhile.
func TestPooledFilesUnderConcurrentUse(t *testing.T) {
	const logs, perLog, readers = 4, 400, 4
	root := t.TempDir()
	opts := tiny()
	opts.Flush = None
	opts.Files = NewFilePool(2)
	ls := make([]*Log, logs)
	for i := range ls {
		l, err := Open(filepath.Join(root, fmt.Sprint(i)), opts)
		require.NoError(t, err)
		ls[i] = l
	}
	errs := make(chan error, logs+readers)
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(0); off < perLog; off++ {
				r := record.Record{Key: []byte(fmt.Sprint(off)), Value: value(off)}
				if _, err := l.Append(r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	checkBatches := func(buf []byte, from int64) error {
		for len(buf) > 0 {
			b, n, err := record.ParseBatch(buf)
			if err != nil {
				return err
			}
			if err := b.Verify(); err != nil {
				return err
			}
			rs, err := b.Records()
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r.Offset >= from && !bytes.Equal(r.Value, value(r.Offset)) {
					return fmt.Errorf("offset %d: read %q", r.Offset, r.Value)
				}
			}
			buf = buf[n:]
		}
		return nil
	}
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 23))
			for i := 0; i < 500; i++ {
				l := ls[rng.IntN(logs)]
				end := l.CommittedOffset()
				if end == 0 {
					continue
				}
				off := rng.Int64N(end)
				buf, err := l.Read(off, 1+rng.IntN(2000))
				if err == nil {
					err = checkBatches(buf, off)
				}
				if err != nil {
					errs <- fmt.Errorf("read %s at %d: %w", l.Dir(), off, err)
					return
				}
				sp, err := l.Span(off, 1+rng.IntN(2000), end)
				if err != nil {
					errs <- err
					return
				}
				f := sp.File()
				buf = make([]byte, sp.Len())
				if f == nil {
					err = errors.New("span without a file")
				} else {
					_, err = f.ReadAt(buf, sp.Position())
				}
				sp.Release()
				if err == nil {
					err = checkBatches(buf, off)
				}
				if err != nil {
					errs <- fmt.Errorf("span %s at %d: %w", l.Dir(), off, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, l := range ls {
		checkRecordsKeyed(t, readAll(t, l, 0), perLog)
		require.NoError(t, l.Close())
	}
	require.Zero(t, opts.Files.Stats().Open)
}

// checkRecordsKeyed checks that recs are offsets 0 to n-1 with the keys and
// values TestPooledFilesUnderConcurrentUse wrote.
func checkRecordsKeyed(t *testing.T, recs []record.Record, n int) {
	t.Helper()
	require.Len(t, recs, n)
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset)
		require.Equal(t, fmt.Sprint(i), string(r.Key))
		require.Equal(t, value(int64(i)), r.Value)
	}
}

// A compaction's swap gives a cleaned file the path of the first segment
// it replaces. A reader holding the old segment - its file closed by the
// pool just before the swap - goes on reading the old file, never the
// cleaned one now at its path.
func TestCompactionSwapKeepsReadersOnTheOldFile(t *testing.T) {
	clock := time.UnixMilli(1_700_000_000_000)
	opts := compactOptions(&clock)
	opts.Files = NewFilePool(1)
	var other atomic.Pointer[Log]
	var evictErr error
	opts.FS = vfs.NewFaultFS(vfs.Default, func(op vfs.Op, path string, n int) (int, error) {
		// As the cleaned .log file is renamed into the log's directory,
		// another log's read takes the pool's one place.
		if o := other.Load(); o != nil && op == vfs.OpRename && strings.Contains(path, cleaningDir) && strings.HasSuffix(path, ".log") {
			if _, err := o.Read(0, 100); err != nil && evictErr == nil {
				evictErr = err
			}
		}
		return n, nil
	})
	l, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer l.Close()
	o, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer o.Close()
	_, err = o.Append(record.Record{Value: []byte("other")})
	require.NoError(t, err)
	for i := 0; i < 200; i++ {
		_, err := l.Append(record.Record{Key: []byte(fmt.Sprint("k", i%5)), Value: value(int64(i)),
			Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))})
		require.NoError(t, err)
	}
	require.Greater(t, l.NumSegments(), 3)
	sp, err := l.Span(0, 1<<20, l.CommittedOffset())
	require.NoError(t, err)
	defer sp.Release()
	want := make([]byte, sp.Len())
	_, err = sp.ReadAt(want, 0)
	require.NoError(t, err)
	clock = clock.Add(time.Hour)
	other.Store(o)
	st, err := l.Clean(true)
	require.NoError(t, err)
	require.NoError(t, evictErr)
	require.Positive(t, st.SegmentsWritten, "the first segments were cleaned and swapped")
	require.Zero(t, l.Segments()[0].Size, "the span's path now names the cleaned (empty) segment")
	f := sp.File()
	require.NotNil(t, f)
	got := make([]byte, sp.Len())
	_, err = f.ReadAt(got, sp.Position())
	require.NoError(t, err)
	require.Equal(t, want, got, "read the old file")
}
