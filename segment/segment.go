package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/index"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// Defaults for Options.
const (
	DefaultIndexIntervalBytes = 4096
	DefaultIndexMaxBytes      = 10 << 20
)

// File name suffixes.
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
)

// MaxSize is the largest a segment's .log may grow: index positions are
// 32-bit, and a batch must start below 2 GiB, as in Kafka.
const MaxSize = math.MaxInt32

var (
	// ErrCorrupt is record.ErrCorrupt: errors.Is(err, segment.ErrCorrupt)
	// holds for every CorruptError and for corrupt batches.
	ErrCorrupt = record.ErrCorrupt
	// ErrClosed means the segment was closed or deleted.
	ErrClosed = errors.New("segment: closed")
	// ErrFull means the segment cannot take the batch: its size or offset
	// range or an index is exhausted. The log rolls to a new segment.
	ErrFull = errors.New("segment: full")
)

// CorruptError is damage found in a segment file: it names the file and the
// byte position. It matches ErrCorrupt with errors.Is.
type CorruptError struct {
	Path     string
	Position int64
	Err      error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt segment %s at position %d: %v", e.Path, e.Position, e.Err)
}

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes every CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Options configure a segment.
type Options struct {
	// FS is the file system; nil means the operating system's. Tests
	// inject faults through it.
	FS vfs.FS
	// IndexIntervalBytes is how many bytes of log pass between index
	// entries (index.interval.bytes). Default 4096.
	IndexIntervalBytes int
	// IndexMaxBytes is the most each index file may grow to
	// (segment.index.bytes); a full index rolls the segment. The files
	// grow in steps as entries arrive (package index). Default 10 MiB.
	IndexMaxBytes int
	// Files, if set, bounds the .log files open at once across every
	// segment that shares it: a segment opens its file on first use and
	// the pool may close it while it is not in use (see vfs.FilePool).
	// nil: each segment keeps its .log file open from Create or Open until
	// it closes.
	//
	// Durability is unchanged: the pool closes the file of a segment
	// holding writes not yet fsynced only after fsyncing it (clean files
	// go first), and a failed fsync there is kept as the failure of every
	// later Sync, as if Sync had failed (see Sync). A closed and reopened
	// file thus never makes unsynced data look synced, nor loses an fsync
	// error.
	Files *vfs.FilePool
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.IndexIntervalBytes <= 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.IndexMaxBytes <= 0 {
		o.IndexMaxBytes = DefaultIndexMaxBytes
	}
	return o
}

// FileName returns the name of a segment file: base zero-padded to 20
// digits, then suffix.
func FileName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// ParseFileName returns the base offset of a segment file name such as
// "00000000000000000042.log" and its suffix.
func ParseFileName(name string) (base int64, suffix string, ok bool) {
	i := strings.IndexByte(name, '.')
	if i != 20 {
		return 0, "", false
	}
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	base, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return base, name[20:], true
}

type indexes struct {
	off *index.Offset
	tim *index.Time
}

// reserve makes sure both index files have disk blocks for the entries
// the next append and a seal may add (one each; see Fits, which keeps two
// free), growing them if not.
func (ix *indexes) reserve() error {
	if err := ix.off.Reserve(2); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	if err := ix.tim.Reserve(2); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	return nil
}

func (ix *indexes) close(trim bool) error {
	var err error
	if trim {
		err = errors.Join(ix.off.Close(), ix.tim.Close())
	} else {
		err = errors.Join(ix.off.CloseNoTrim(), ix.tim.CloseNoTrim())
	}
	return err
}

// Segment is one .log file and its indexes. See the package comment for who
// may call what concurrently.
type Segment struct {
	base    int64
	dir     string
	opts    Options
	logPath string
	file    *vfs.Handle // the .log file; open while in use (see Options.Files)

	size      atomic.Int64 // bytes of whole batches written
	committed atomic.Int64 // bytes readers may see, <= size
	next      atomic.Int64 // offset after the last batch, or base when empty
	maxTS     atomic.Int64 // greatest batch MaxTimestamp, or NoTimestamp
	sealed    atomic.Bool

	// Writer state, guarded by the log's lock.
	maxTSOffset int64     // offset of the batch that set maxTS
	lastPos     int64     // position of the last batch, -1 when empty
	sinceIndex  int       // bytes appended since the last index entry
	firstTS     int64     // MaxTimestamp of the first batch, or NoTimestamp
	created     time.Time // when this process created or opened the segment

	idxMu   sync.Mutex // serialises loading and rebuilding indexes
	idx     atomic.Pointer[indexes]
	retired []*indexes // replaced by a rebuild; unmapped when the segment closes
	rebuild atomic.Bool

	txnMu sync.Mutex // guards txn
	txn   txnIndex   // the .txnindex, loaded on first use

	// synced is true while the .log file, as it is, is on stable storage:
	// set by a successful Sync (or AssumeSynced), cleared after every write
	// or truncation, so that Sync of an unchanged segment costs nothing.
	// syncMu makes a Sync that finds it set wait for one in flight.
	syncMu  sync.Mutex
	synced  atomic.Bool
	syncErr error // the first failed fsync; every later Sync returns it; guarded by syncMu

	refs        atomic.Int64 // the log's reference plus one per reader
	closeOnce   sync.Once
	closeErr    error
	trimOnClose atomic.Bool
}

// Create makes a new, empty segment with writable indexes. The caller
// fsyncs the directory before relying on the new files.
func Create(dir string, base int64, opts Options) (*Segment, error) {
	opts = opts.withDefaults()
	s := newSegment(dir, base, opts)
	f, err := opts.FS.OpenFile(s.logPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", s.logPath, err)
	}
	if s.file, err = vfs.NewHandle(opts.Files, opts.FS, s.logPath, os.O_RDWR, f, s.beforeClose); err != nil {
		f.Close()
		_ = opts.FS.Remove(s.logPath)
		return nil, err
	}
	// Index files left by an earlier segment of the same base (one removed
	// by truncation) would hold stale entries: start from empty files. A
	// new segment gets the first growth step of each index or fails (a
	// full disk): nothing is left of it then, and a roll on a full disk
	// fails at the roll rather than at the first append after it.
	ix, err := s.recreateIndexes()
	if err == nil {
		if err = ix.reserve(); err != nil {
			_ = ix.close(false)
		}
	}
	if err != nil {
		s.file.Close()
		_ = opts.FS.Remove(s.logPath)
		_ = opts.FS.Remove(s.indexPath())
		_ = opts.FS.Remove(s.timeIndexPath())
		return nil, err
	}
	// An empty .txnindex: from now on a missing one is a lost one.
	if err := s.createTxnIndex(); err != nil {
		_ = ix.close(false)
		s.file.Close()
		for _, p := range []string{s.logPath, s.indexPath(), s.timeIndexPath(), s.txnIndexPath()} {
			_ = opts.FS.Remove(p)
		}
		return nil, err
	}
	s.idx.Store(ix)
	return s, nil
}

// Open opens an existing segment. Its size is the file's size until Recover
// or Resume says otherwise. A writable segment (the one the log appends to,
// or one being recovered) maps its indexes for writing now; a read-only one
// loads them on first use, checking them against the log and rebuilding them
// if they are missing or wrong.
func Open(dir string, base int64, opts Options, writable bool) (*Segment, error) {
	opts = opts.withDefaults()
	s := newSegment(dir, base, opts)
	var (
		st  fs.FileInfo
		err error
	)
	if opts.Files != nil && !writable {
		// A sealed segment's file opens on first use: its size is all
		// opening it needs, and the path gives it.
		s.file, _ = vfs.NewHandle(opts.Files, opts.FS, s.logPath, os.O_RDWR, nil, s.beforeClose)
		if st, err = opts.FS.Stat(s.logPath); err != nil {
			return nil, fmt.Errorf("segment: open %s: %w", s.logPath, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("segment: open %s: not a regular file", s.logPath)
		}
	} else {
		if s.file, err = vfs.NewHandle(opts.Files, opts.FS, s.logPath, os.O_RDWR, nil, s.beforeClose); err != nil {
			return nil, fmt.Errorf("segment: open %s: %w", s.logPath, err)
		}
		f, err := s.file.Acquire()
		if err != nil {
			s.file.Close()
			return nil, fmt.Errorf("segment: open %s: %w", s.logPath, err)
		}
		st, err = f.Stat()
		s.file.Release()
		if err != nil {
			s.file.Close()
			return nil, err
		}
	}
	f := s.file // closed on the failures below
	if st.Size() > MaxSize {
		f.Close()
		return nil, &CorruptError{Path: s.logPath, Position: MaxSize, Err: fmt.Errorf("%w: file of %d bytes is over the 2 GiB limit", record.ErrCorrupt, st.Size())}
	}
	s.size.Store(st.Size())
	s.committed.Store(st.Size())
	if writable {
		ix, err := s.openIndexes(true)
		if err != nil {
			if !errors.Is(err, index.ErrCorrupt) {
				f.Close()
				return nil, err
			}
			// Unusable index files: start them afresh; Recover or
			// Resume refills them from the log.
			if ix, err = s.recreateIndexes(); err != nil {
				f.Close()
				return nil, err
			}
			s.rebuild.Store(true)
		}
		s.idx.Store(ix)
	} else {
		s.sealed.Store(true)
		// Not written by this process, and below the log's recovery
		// point (or it would be recovered, writable): on stable storage.
		// So the pool may close the file without an fsync.
		s.synced.Store(true)
	}
	return s, nil
}

func newSegment(dir string, base int64, opts Options) *Segment {
	s := &Segment{base: base, dir: dir, opts: opts, logPath: filepath.Join(dir, FileName(base, LogSuffix))}
	s.next.Store(base)
	s.maxTS.Store(record.NoTimestamp)
	s.maxTSOffset = base
	s.lastPos = -1
	s.firstTS = record.NoTimestamp
	s.created = time.Now()
	s.refs.Store(1)
	return s
}

func (s *Segment) indexPath() string { return filepath.Join(s.dir, FileName(s.base, IndexSuffix)) }
func (s *Segment) timeIndexPath() string {
	return filepath.Join(s.dir, FileName(s.base, TimeIndexSuffix))
}

// openIndexes opens both index files. Opening allocates nothing: a
// writable index keeps the size its file has, and grows as entries are
// appended (or reserved), so reopening and recovering a segment needs no
// more free space than the entries its data calls for.
func (s *Segment) openIndexes(writable bool) (*indexes, error) {
	return s.openIndexesAt(s.indexPath(), s.timeIndexPath(), writable)
}

func (s *Segment) openIndexesAt(offPath, timPath string, writable bool) (*indexes, error) {
	off, err := index.OpenOffset(s.opts.FS, offPath, s.base, s.opts.IndexMaxBytes, writable)
	if err != nil {
		return nil, err
	}
	tim, err := index.OpenTime(s.opts.FS, timPath, s.base, s.opts.IndexMaxBytes, writable)
	if err != nil {
		off.CloseNoTrim()
		return nil, err
	}
	return &indexes{off: off, tim: tim}, nil
}

// recreateIndexes replaces both index files with empty writable ones.
func (s *Segment) recreateIndexes() (*indexes, error) {
	for _, p := range []string{s.indexPath(), s.timeIndexPath()} {
		if err := s.opts.FS.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return s.openIndexes(true)
}

// Base is the segment's base offset.
func (s *Segment) Base() int64 { return s.base }

// Path is the .log file's path.
func (s *Segment) Path() string { return s.logPath }

// AcquireFile returns the open .log file, for zero-copy reads of
// committed bytes (sendfile), and keeps it open until ReleaseFile: with a
// file pool (Options.Files), it may be closed at any other time. Each
// successful AcquireFile must be paired with one ReleaseFile, before the
// segment is released.
func (s *Segment) AcquireFile() (vfs.File, error) { return s.acquire() }

// ReleaseFile ends a use of the file begun by AcquireFile.
func (s *Segment) ReleaseFile() { s.file.Release() }

// acquire returns the open .log file, kept open until s.file.Release.
func (s *Segment) acquire() (vfs.File, error) {
	f, err := s.file.Acquire()
	if err != nil {
		if errors.Is(err, vfs.ErrHandleClosed) {
			return nil, fmt.Errorf("%w: %s", ErrClosed, s.logPath)
		}
		return nil, fmt.Errorf("segment: open %s: %w", s.logPath, err)
	}
	return f, nil
}

// beforeClose is the file pool's question before it closes the .log file
// to make room (vfs.BeforeClose): the file may close once what was
// written to it is on stable storage - or once an fsync of it has failed,
// for that failure is kept and fails every later Sync. With flush, it
// fsyncs first, as Sync would. It never waits for a Sync in flight (which
// holds the file in use anyway).
func (s *Segment) beforeClose(f vfs.File, flush bool) bool {
	if !s.syncMu.TryLock() {
		return false
	}
	defer s.syncMu.Unlock()
	if s.syncErr != nil || s.synced.Load() {
		return true
	}
	if !flush {
		return false
	}
	s.synced.Store(true)
	if err := f.Sync(); err != nil {
		s.synced.Store(false)
		s.syncErr = fmt.Errorf("segment: fsync %s: %w", s.logPath, err)
	}
	return true
}

// holdOpen keeps the .log file open until the segment closes, for readers
// still holding the segment when its path is about to be removed or given
// to another file; if it cannot be opened, they get ErrClosed rather than
// whatever the path names next.
func (s *Segment) holdOpen() { _ = s.file.Keep() }

// HoldOpen keeps the .log file open until the segment closes: the log calls
// it before it removes the segment's files itself (a compaction's swap, which
// gives the path to the cleaned segment), so that readers holding the
// segment go on reading the file they found.
func (s *Segment) HoldOpen() { s.holdOpen() }

// Size is the number of bytes written.
func (s *Segment) Size() int64 { return s.size.Load() }

// Committed is the number of bytes readers may see.
func (s *Segment) Committed() int64 { return s.committed.Load() }

// Commit lets readers see the first size bytes. It never moves backwards
// except through Truncate.
func (s *Segment) Commit(size int64) {
	for {
		c := s.committed.Load()
		if size <= c || s.committed.CompareAndSwap(c, size) {
			return
		}
	}
}

// NextOffset is the offset after the last batch written (the base when the
// segment is empty). For a read-only segment it loads the indexes.
func (s *Segment) NextOffset() (int64, error) {
	if _, err := s.indexes(); err != nil {
		return 0, err
	}
	return s.next.Load(), nil
}

// MaxTimestamp is the greatest batch timestamp in the segment, or
// record.NoTimestamp. For a read-only segment it loads the indexes.
func (s *Segment) MaxTimestamp() (int64, error) {
	if _, err := s.indexes(); err != nil {
		return 0, err
	}
	return s.maxTS.Load(), nil
}

// Age is how old the segment is for segment.ms, as Kafka reckons it: the
// timestamp of the batch about to be appended (batchTS, Unix ms) minus that
// of the segment's first batch when both exist, otherwise the time since the
// segment was created or opened. Record time, not wall time, so a log
// replicated or restored with old timestamps does not roll on every batch.
// now is called only when the wall clock is needed.
func (s *Segment) Age(now func() time.Time, batchTS int64) time.Duration {
	if s.firstTS >= 0 && batchTS >= 0 {
		return time.Duration(batchTS-s.firstTS) * time.Millisecond
	}
	return now().Sub(s.created)
}

// Sealed reports whether the segment takes no more appends.
func (s *Segment) Sealed() bool { return s.sealed.Load() }

// Acquire takes a reader's reference; it fails once the segment is closed.
func (s *Segment) Acquire() bool {
	for {
		r := s.refs.Load()
		if r <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// Release drops a reference; the last one closes the files.
func (s *Segment) Release() { _ = s.release() }

// release drops a reference and, if it was the last, closes the files and
// returns the error from closing them.
func (s *Segment) release() error {
	if s.refs.Add(-1) != 0 {
		return nil
	}
	s.closeFiles()
	return s.closeErr
}

func (s *Segment) closeFiles() {
	s.closeOnce.Do(func() {
		trim := s.trimOnClose.Load()
		var errs []error
		if ix := s.idx.Load(); ix != nil {
			errs = append(errs, ix.close(trim))
		}
		s.idxMu.Lock()
		for _, ix := range s.retired {
			errs = append(errs, ix.close(false))
		}
		s.idxMu.Unlock()
		errs = append(errs, s.file.Close())
		s.closeErr = errors.Join(errs...)
	})
}

// Close drops the owner's reference. With clean set, the indexes are
// trimmed to their entries first (a clean shutdown); the files close when the
// last reader releases the segment.
func (s *Segment) Close(clean bool) error {
	s.trimOnClose.Store(clean)
	if s.refs.Load() > 1 {
		// Readers hold the segment: the directory may go (a deleted
		// topic) before they are done.
		s.holdOpen()
	}
	return s.release()
}

// Delete removes the segment's files and drops the owner's reference.
// Readers that hold the segment go on reading the unlinked files until they
// release it. The caller fsyncs the directory.
func (s *Segment) Delete() error {
	s.holdOpen()
	var errs []error
	for _, p := range []string{s.logPath, s.indexPath(), s.timeIndexPath(), s.txnIndexPath()} {
		if err := s.opts.FS.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.trimOnClose.Store(false)
	errs = append(errs, s.release())
	return errors.Join(errs...)
}

// ReadAt reads committed bytes of the .log file.
func (s *Segment) ReadAt(p []byte, pos int64) (int, error) {
	f, err := s.acquire()
	if err != nil {
		return 0, err
	}
	defer s.file.Release()
	return f.ReadAt(p, pos)
}
