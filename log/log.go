package log

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/notify"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// Errors returned by a Log, tested with errors.Is.
var (
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("log: closed")
	// ErrOffsetOutOfRange means an offset below the log start offset or
	// beyond the end.
	ErrOffsetOutOfRange = errors.New("log: offset out of range")
	// ErrCorrupt is record.ErrCorrupt: damaged bytes in a segment, or a
	// malformed batch handed to AppendBatch. Errors about files name the
	// file and byte position (segment.CorruptError).
	ErrCorrupt = record.ErrCorrupt
	// ErrLocked means another process has the directory open.
	ErrLocked = vfs.ErrLocked
	// ErrFailed means an earlier write or fsync failed. The log refuses
	// writes until it is closed and reopened, which recovers it: after a
	// failed fsync nothing written since the last good one can be trusted,
	// and retrying the fsync could report success for lost data.
	ErrFailed = errors.New("log: failed; close and reopen to recover")
	// ErrOffsetOverflow means the log's offsets would pass 2^63-1.
	ErrOffsetOverflow = errors.New("log: offset overflow")
	// ErrOffsetMismatch means a replicated batch does not begin at the
	// log's end offset (AppendReplica).
	ErrOffsetMismatch = errors.New("log: batch does not start at the log end offset")
)

const lockFile = ".lock"

// Log is one partition's log: a directory of segments, appended at the end,
// read from anywhere, trimmed at the start by retention. See the package
// documentation for the format and guarantees.
//
// A Log is safe for concurrent use: appends are serialised (one writer);
// reads take no lock.
type Log struct {
	dir    string
	opts   Options
	fs     vfs.FS
	lock   io.Closer
	logger *slog.Logger

	// mu serialises the writer: appends, rolls, truncation, deletion.
	mu       sync.Mutex
	active   *segment.Segment   // the last segment; guarded by mu
	enc      []byte             // appendSmall's encoding buffer, at most smallBatch; guarded by mu
	unsynced []*segment.Segment // sealed but not yet fsynced (not under Sync); guarded by mu
	// Writeback (not under Sync): the active segment's bytes below wbPos
	// were handed to the kernel to write (wbSeg is the segment wbPos is
	// of), and wbQueued says the writeback job is due. Guarded by mu.
	wbSeg    *segment.Segment
	wbPos    int64
	wbQueued bool

	segs      atomic.Pointer[[]*segment.Segment] // immutable, sorted by base
	next      atomic.Int64                       // the offset the next append gets
	start     atomic.Int64                       // the log start offset
	committed atomic.Int64                       // readers see offsets below this
	truncs    atomic.Int64                       // bumped by Truncate: readers re-seek
	epoch     atomic.Int32                       // leader epoch stamped on appends; -1: none
	failure   atomic.Pointer[error]
	closed    atomic.Bool

	// Group commit state (Sync policy).
	writers     atomic.Int32 // under Sync, appends between entering append and finishing the write
	syncWaiters atomic.Int32 // callers in syncTo
	syncMu      sync.Mutex
	syncCond    *sync.Cond
	syncing     bool
	durable     int64 // offsets below are on stable storage; guarded by syncMu

	// cpMu serialises checkpoints; rp is the last recovery point written.
	cpMu          sync.Mutex
	rp            RecoveryPoint
	cleanerOffset int64   // compaction has cleaned offsets below; guarded by cpMu
	flushed       cpState // what the last full flush made durable; guarded by cpMu

	// cleanOnDisk is true while the checkpoint file still carries the
	// clean-shutdown mark of the last close: Open found the files as
	// that close left them and kept it, rather than spend two fsyncs
	// replacing it (an idle partition's open and close then fsync
	// nothing). Before anything changes the files - an append, a roll, a
	// truncation, a deletion, a compaction's swap, a .txnindex change -
	// markUnclean replaces the mark with openCP, durably: a crash must
	// never leave a clean mark over files that differ from what it
	// describes, or the next Open would trust them unchecked. Any
	// checkpoint written (all but Close's say "not clean") clears it.
	cleanOnDisk atomic.Bool
	openCP      Checkpoint // the checkpoint as Open would have written it: not clean
	cpFileMu    sync.Mutex // serialises writes of the checkpoint file; taken last, after cpMu and mu

	cleanMu sync.Mutex // one Clean at a time

	damage damageSet // where reads found damaged batches

	notify   notify.Notifier
	batchBuf sync.Pool // *[]byte, for Append's encoding
	iters    sync.Pool // *record.Iterator, for AppendBatch's checks

	jobs *jobGroup // the log's background work (startJobs), in opts.Scheduler
}

// RecoveryInfo describes what Open had to do to the log.
type RecoveryInfo struct {
	// Clean is true when the log had been closed cleanly and nothing was
	// checked.
	Clean bool
	// SegmentsChecked and BytesChecked count what was validated.
	SegmentsChecked int
	BytesChecked    int64
	// TruncatedBytes counts bytes dropped: a torn tail, or (not under the
	// Sync policy) damaged data and everything after it.
	TruncatedBytes int64
	// SegmentsDropped counts whole segments removed after damage.
	SegmentsDropped int
	// TruncatedSegment is the file of the first segment whose tail was
	// cut, "" if none was.
	TruncatedSegment string
	// Duration is how long opening and recovery took.
	Duration time.Duration
}

// Open opens the log in dir, creating the directory if needed, and recovers
// it if it was not closed cleanly. Only one Log, in one process, may have a
// directory open at a time.
func Open(dir string, opts Options) (*Log, error) {
	l, _, err := OpenWithInfo(dir, opts)
	return l, err
}

// OpenWithInfo is Open that also reports what recovery did.
func OpenWithInfo(dir string, opts Options) (*Log, RecoveryInfo, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, RecoveryInfo{}, err
	}
	fsys := opts.fs
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, RecoveryInfo{}, fmt.Errorf("log: %w", err)
	}
	var lk io.Closer = noLock{}
	if !opts.DirLocked {
		if lk, err = fsys.Lock(filepath.Join(dir, lockFile)); err != nil {
			return nil, RecoveryInfo{}, fmt.Errorf("log: open %s: %w", dir, err)
		}
	}
	l := &Log{
		dir:    dir,
		opts:   opts,
		fs:     fsys,
		lock:   lk,
		logger: opts.Logger.With("log", dir),
	}
	l.syncCond = sync.NewCond(&l.syncMu)
	l.epoch.Store(-1)
	l.batchBuf.New = func() any { b := make([]byte, 0, 64<<10); return &b }
	l.iters.New = func() any { return new(record.Iterator) }

	began := time.Now()
	info, err := l.load()
	info.Duration = time.Since(began)
	if err == nil {
		err = l.startJobs()
	}
	if err != nil {
		l.closeSegments(false)
		lk.Close()
		return nil, info, err
	}
	return l, info, nil
}

// noLock stands for the directory lock of a log opened with DirLocked:
// its caller holds the lock that matters.
type noLock struct{}

func (noLock) Close() error { return nil }

// load opens the segments and recovers what may not be durable.
func (l *Log) load() (RecoveryInfo, error) {
	var info RecoveryInfo
	bases, err := l.scanDir()
	if err != nil {
		return info, err
	}
	cp, err := readCheckpoint(l.fs, l.dir)
	cpRead := err == nil
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		cp = Checkpoint{} // nothing known: check everything
	case errors.Is(err, ErrBadCheckpoint):
		l.logger.Warn("damaged checkpoint; checking every segment", "err", err)
		cp = Checkpoint{}
	default:
		return info, err
	}
	info.Clean = cp.CleanShutdown && len(bases) > 0

	segOpts := l.opts.segmentOptions()
	if len(bases) == 0 {
		base := max(cp.StartOffset, cp.RecoveryPoint.Offset)
		s, err := segment.Create(l.dir, base, segOpts)
		if err != nil {
			return info, err
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			s.Close(false)
			return info, err
		}
		l.publish([]*segment.Segment{s})
		l.active = s
		l.next.Store(base)
		l.rp = RecoveryPoint{Offset: base, SegmentBase: base}
	} else {
		if err := l.openSegments(bases, cp, &info); err != nil {
			return info, err
		}
	}

	// Offsets below the recovery point were on stable storage; if they are
	// gone, the disk lost acknowledged data, and reusing their offsets
	// would hand consumers different records under offsets they have seen.
	if end := l.next.Load(); cp.RecoveryPoint.Offset > end {
		err := fmt.Errorf("%w: the log ends at offset %d but offsets up to %d were flushed (checkpoint %s)",
			ErrCorrupt, end, cp.RecoveryPoint.Offset, filepath.Join(l.dir, CheckpointFile))
		if l.opts.Flush.kind == flushSync {
			return info, err
		}
		l.logger.Warn("flushed data is missing; continuing from the end of what is left", "err", err)
	}
	segs := l.segments()
	first := segs[0].Base()
	start := max(cp.StartOffset, first)
	end := l.next.Load()
	if start > end {
		start = end
	}
	l.start.Store(start)
	l.committed.Store(end)
	l.durable = end
	keepMark := info.Clean // and the files are still as the clean close left them

	// A torn tail took markers with it: their aborted transactions are
	// not aborted (a missing or damaged index is left for the partition
	// to rebuild).
	if l.active.TxnIndexErr() == nil {
		if txnCutChanges(l.active, end) {
			keepMark = false
		}
		if err := l.active.TruncateAbortedTxns(end); err != nil {
			return info, err
		}
	}

	// Segments wholly below the start offset are what a crash left of a
	// DeleteRecordsBefore or Reset: nothing in them is readable.
	deleted := false
	if n := whollyBelow(segs, start); n > 0 {
		keepMark, deleted = false, true // the files are no longer as the clean close left them
		l.logger.Info("deleting segments below the log start offset", "segments", n, "start_offset", start)
		if err := l.deleteFirst(n); err != nil {
			return info, err
		}
		segs = l.segments()
	}

	// After a crash, the checkpoint on disk says already that the log was
	// not closed cleanly, and its recovery point is still true: what lies
	// below it was durable, and recovery checked what follows. Under None
	// and Interval, where no append promised durability, Open leaves it
	// so: the next checkpoint (CheckpointInterval, or Close) makes the
	// recovered tail durable and moves the recovery point past it, and a
	// crash before then checks the tail again. Opening after a crash then
	// costs no fsync. Under Sync - and whenever the checkpoint on disk
	// would not say exactly this - Open flushes and records as below.
	if cpRead && !cp.CleanShutdown && !deleted && l.opts.Flush.kind != flushSync && cp.RecoveryPoint.Offset <= end {
		kept := Checkpoint{RecoveryPoint: l.rp, StartOffset: start, CleanerOffset: min(cp.CleanerOffset, end)}
		if kept == cp {
			l.cleanerOffset = kept.CleanerOffset
			l.openCP = kept
			l.syncMu.Lock()
			l.durable = cp.RecoveryPoint.Offset
			l.syncMu.Unlock()
			l.flushed = cpState{} // the next checkpoint flushes
			return info, nil
		}
	}

	// What is on disk now was checked (or closed cleanly). Make it durable
	// and record that, so the next unclean restart starts from here, and
	// mark the log open: until a clean close, a restart must recover.
	if err := l.flushAll(segs); err != nil {
		return info, err
	}
	l.rp = RecoveryPoint{Offset: end, SegmentBase: l.active.Base(), Position: l.active.Size()}
	l.cleanerOffset = min(cp.CleanerOffset, end)
	l.openCP = Checkpoint{RecoveryPoint: l.rp, StartOffset: start, CleanerOffset: l.cleanerOffset}
	l.flushed = l.cpStateLocked(l.active.Size(), end, start)
	if keepMark && cp == (Checkpoint{RecoveryPoint: l.rp, StartOffset: start, CleanerOffset: l.cleanerOffset, CleanShutdown: true}) {
		// The files are as the clean close left them, and its
		// checkpoint says so exactly: keep it until the first change
		// (markUnclean). A crash before then finds them as it says.
		l.cleanOnDisk.Store(true)
		return info, nil
	}
	if err := l.writeCheckpoint(l.openCP); err != nil {
		return info, err
	}
	return info, nil
}

// markUnclean replaces a clean-shutdown mark Open kept (cleanOnDisk) with
// a checkpoint that says "not closed cleanly", durably, before the caller
// changes the log's files; once replaced it costs an atomic load. Any
// caller may hold cpMu and mu or neither. A failure fails the log: the
// change must not happen while the mark may still be on disk.
func (l *Log) markUnclean() error {
	if !l.cleanOnDisk.Load() {
		return nil
	}
	l.cpFileMu.Lock()
	defer l.cpFileMu.Unlock()
	if !l.cleanOnDisk.Load() {
		return nil
	}
	if err := writeCheckpoint(l.fs, l.dir, l.openCP); err != nil {
		return l.fail(err)
	}
	l.cleanOnDisk.Store(false)
	return nil
}

// writeCheckpoint replaces the checkpoint file with c, one writer at a
// time. Once a checkpoint that is not clean is on disk, the mark Open kept
// is gone (cleanOnDisk).
func (l *Log) writeCheckpoint(c Checkpoint) error {
	l.cpFileMu.Lock()
	defer l.cpFileMu.Unlock()
	if err := writeCheckpoint(l.fs, l.dir, c); err != nil {
		return err
	}
	l.cleanOnDisk.Store(c.CleanShutdown)
	return nil
}

// scanDir lists the segments' base offsets and removes debris: temporary
// files from interrupted writes and index files without a log.
func (l *Log) scanDir() ([]int64, error) {
	if err := l.finishSwaps(); err != nil {
		return nil, err
	}
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	logs := map[int64]bool{}
	var bases []int64
	for _, e := range entries {
		if base, suffix, ok := segment.ParseFileName(e.Name()); ok && suffix == segment.LogSuffix {
			logs[base] = true
			bases = append(bases, base)
		}
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(l.dir, name)
		switch {
		case strings.HasSuffix(name, ".tmp"), strings.HasSuffix(name, ".rebuild"), strings.HasSuffix(name, ".deleted"):
			if err := l.fs.Remove(p); err != nil {
				return nil, fmt.Errorf("log: remove %s: %w", p, err)
			}
		default:
			// An index with no .log is left over from a deleted segment.
			// Other files named by offset (a partition's producer
			// snapshots) are not the log's to remove.
			if base, suffix, ok := segment.ParseFileName(name); ok && (suffix == segment.IndexSuffix || suffix == segment.TimeIndexSuffix || suffix == segment.TxnIndexSuffix) && !logs[base] {
				if err := l.fs.Remove(p); err != nil {
					return nil, fmt.Errorf("log: remove %s: %w", p, err)
				}
			}
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// openSegments opens the segments. After a clean close only the last is
// touched; otherwise every segment from the one holding the recovery point is
// checked batch by batch.
func (l *Log) openSegments(bases []int64, cp Checkpoint, info *RecoveryInfo) error {
	segOpts := l.opts.segmentOptions()
	rpSeg := int64(-1) // segments with base >= this are recovered
	if !cp.CleanShutdown {
		rpSeg = bases[0]
		for _, b := range bases {
			if b <= cp.RecoveryPoint.SegmentBase {
				rpSeg = b
			}
		}
	}
	var segs []*segment.Segment
	fail := func(err error) error {
		for _, s := range segs {
			s.Close(false)
		}
		return err
	}
	last := len(bases) - 1
	for i, base := range bases {
		recover := rpSeg >= 0 && base >= rpSeg
		s, err := segment.Open(l.dir, base, segOpts, recover || i == last)
		if err != nil {
			return fail(err)
		}
		segs = append(segs, s)
		if !recover {
			continue
		}
		from := int64(0)
		if base == cp.RecoveryPoint.SegmentBase {
			from = cp.RecoveryPoint.Position
		}
		res, err := s.Recover(from)
		if err != nil {
			return fail(err)
		}
		info.SegmentsChecked++
		info.BytesChecked += res.ValidSize - res.From
		if res.Err != nil {
			damaged := &segment.CorruptError{Path: s.Path(), Position: res.ValidSize, Err: res.Err}
			tornTail := i == last && !res.DataAfter
			if !tornTail && l.opts.Flush.kind == flushSync {
				// Under Sync every batch here may have been
				// acknowledged as durable: refuse rather than drop it.
				return fail(fmt.Errorf("log: %w (valid data follows; not truncating acknowledged data: inspect with spool check)", damaged))
			}
			info.TruncatedBytes += res.FileSize - res.ValidSize
			info.TruncatedSegment = cmp.Or(info.TruncatedSegment, s.Path())
			l.logger.Warn("truncating log after invalid batch", "file", s.Path(), "position", res.ValidSize,
				"bytes", res.FileSize-res.ValidSize, "torn_tail", tornTail, "err", res.Err)
			if err := s.DropTail(); err != nil {
				return fail(err)
			}
			// Later segments cannot follow a hole: drop them.
			for _, b := range bases[i+1:] {
				info.SegmentsDropped++
				for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
					p := filepath.Join(l.dir, segment.FileName(b, suffix))
					if st, err := l.fs.Stat(p); err == nil && suffix == segment.LogSuffix {
						info.TruncatedBytes += st.Size()
					}
					if err := l.fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
						return fail(err)
					}
				}
			}
			if err := l.fs.SyncDir(l.dir); err != nil {
				return fail(err)
			}
			last = i
			break
		}
	}
	// Segments before the last are sealed; a recovered one needs its final
	// index entries, and must end before the next one begins. (Segments
	// before the recovery point were checked when they were written; their
	// indexes load on first use.)
	for i, s := range segs[:last] {
		if s.Sealed() {
			continue
		}
		if err := s.Seal(); err != nil {
			return fail(err)
		}
		next, err := s.NextOffset()
		if err != nil {
			return fail(err)
		}
		if segs[i+1].Base() < next {
			return fail(&segment.CorruptError{Path: segs[i+1].Path(), Position: 0,
				Err: fmt.Errorf("%w: segment base %d overlaps the previous segment, which ends at %d", ErrCorrupt, segs[i+1].Base(), next)})
		}
	}
	active := segs[last]
	if rpSeg < 0 {
		var err error
		if active.Base() == cp.RecoveryPoint.SegmentBase && active.Size() != cp.RecoveryPoint.Position {
			err = fmt.Errorf("%s is %d bytes, %d at the clean close", active.Path(), active.Size(), cp.RecoveryPoint.Position)
		} else {
			// The clean close synced the segment it names and that
			// segment's indexes before recording itself, and the
			// segment is the size it left: the flush at the end of
			// load need not sync them again (whatever Resume writes
			// to the indexes, it syncs).
			if active.Base() == cp.RecoveryPoint.SegmentBase {
				active.AssumeSynced()
			}
			err = active.Resume()
		}
		if err != nil {
			active.ForgetSynced()
			// The clean marker is wrong about this segment: check it.
			l.logger.Warn("active segment disagrees with its clean close; checking it", "err", err)
			info.SegmentsChecked++
			res, rerr := active.Recover(0)
			if rerr != nil {
				return fail(rerr)
			}
			if res.Err != nil {
				if res.DataAfter && l.opts.Flush.kind == flushSync {
					return fail(&segment.CorruptError{Path: active.Path(), Position: res.ValidSize, Err: res.Err})
				}
				info.TruncatedBytes += res.FileSize - res.ValidSize
				info.TruncatedSegment = cmp.Or(info.TruncatedSegment, active.Path())
				if err := active.DropTail(); err != nil {
					return fail(err)
				}
			}
		}
	}
	next, err := active.NextOffset()
	if err != nil {
		return fail(err)
	}
	l.publish(segs[:last+1])
	l.active = active
	l.next.Store(next)
	// Until the flush below, the old recovery point still holds.
	l.rp = cp.RecoveryPoint
	if rpSeg >= 0 {
		l.rp.SegmentBase = rpSeg
	}
	return nil
}

// segments returns the current segment list. It must not be modified.
func (l *Log) segments() []*segment.Segment { return *l.segs.Load() }

// publish installs a new segment list.
func (l *Log) publish(segs []*segment.Segment) { l.segs.Store(&segs) }

// fail records the first fatal error: from then on the log refuses writes.
func (l *Log) fail(err error) error {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	if l.failure.CompareAndSwap(nil, &wrapped) {
		l.logger.Error("log failed; refusing writes until reopened", "err", err)
	}
	l.notify.Broadcast()
	return *l.failure.Load()
}

// failed returns the recorded fatal error, or nil.
func (l *Log) failed() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// StartOffset is the log start offset: the first offset that may be read.
func (l *Log) StartOffset() int64 { return l.start.Load() }

// EndOffset is the offset the next appended record will get (the log end
// offset).
func (l *Log) EndOffset() int64 { return l.next.Load() }

// CommittedOffset is the offset below which readers see records: under the
// Sync policy the end of what is on stable storage, otherwise the end
// offset.
func (l *Log) CommittedOffset() int64 { return l.committed.Load() }

// Size is the total size of the segment files in bytes.
func (l *Log) Size() int64 {
	var n int64
	for _, s := range l.segments() {
		n += s.Size()
	}
	return n
}

// NumSegments is the number of segments.
func (l *Log) NumSegments() int { return len(l.segments()) }

// Close flushes everything, records a clean shutdown so the next Open need
// check nothing, and releases the directory. Readers waiting in Next return
// ErrClosed. Close after a failure closes without the clean mark.
func (l *Log) Close() error {
	if l.closed.Swap(true) {
		return ErrClosed
	}
	l.stopJobs()
	l.notify.Broadcast()

	defer l.lockState()()
	var err error
	clean := l.failed() == nil
	if clean {
		err = l.active.PrepareCleanClose()
		segs := l.segments()
		if err == nil {
			err = l.flushAll(segs)
		}
		if err == nil {
			rp := RecoveryPoint{Offset: l.next.Load(), SegmentBase: l.active.Base(), Position: l.active.Size()}
			cp := Checkpoint{RecoveryPoint: rp, StartOffset: l.start.Load(), CleanShutdown: true, CleanerOffset: l.cleanerOffset}
			// A log not changed since Open kept the clean mark has
			// that very checkpoint on disk already: closing it
			// writes nothing.
			unchanged := l.openCP
			unchanged.CleanShutdown = true
			if !l.cleanOnDisk.Load() || cp != unchanged {
				err = l.writeCheckpoint(cp)
			}
		}
		clean = err == nil
	}
	l.closeSegments(clean)
	l.syncMu.Lock()
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	if lerr := l.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// Crash closes the log as if its process had died: nothing is flushed and
// no clean shutdown is recorded, so the next Open recovers the tail. With
// dropUnsynced, every record not yet on stable storage is cut from the
// files too, as a power failure may do: under Sync, what no append has
// returned for; under Interval and None, what the last flush did not cover.
// It is for crash tests of the layers above; a closed log reports ErrClosed.
func (l *Log) Crash(dropUnsynced bool) error {
	if l.closed.Swap(true) {
		return ErrClosed
	}
	l.stopJobs()
	l.notify.Broadcast()
	unlock := l.lockState()
	var err error
	if dropUnsynced {
		keep := l.rp.Offset
		if l.opts.Flush.kind == flushSync {
			l.syncMu.Lock()
			keep = max(keep, l.durable)
			l.syncMu.Unlock()
		}
		if keep < l.next.Load() {
			segs := l.segments()
			n := 0
			for n < len(segs) && segs[n].Base() <= keep {
				n++
			}
			if n == 0 {
				n = 1
			}
			err = l.truncateInto(segs, n, max(keep, segs[0].Base()))
		}
	}
	l.closeSegments(false)
	l.syncMu.Lock()
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	unlock()
	if lerr := l.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

func (l *Log) closeSegments(clean bool) {
	p := l.segs.Load()
	if p == nil {
		return
	}
	for _, s := range *p {
		if err := s.Close(clean); err != nil {
			l.logger.Warn("closing segment", "file", s.Path(), "err", err)
		}
	}
}

// flushAll makes the data and indexes of the segments from the recovery
// point on durable.
func (l *Log) flushAll(segs []*segment.Segment) error {
	for _, s := range segs {
		if s.Base() < l.rp.SegmentBase {
			continue
		}
		if err := s.Sync(); err != nil {
			return l.fail(err)
		}
		if err := s.SyncIndexes(); err != nil {
			return l.fail(err)
		}
	}
	return nil
}

// SegmentInfo describes one segment of a log.
type SegmentInfo struct {
	// BaseOffset is the offset the segment's name gives (its first batch's
	// base offset, or where it starts if empty).
	BaseOffset int64
	// Size is its committed bytes.
	Size int64
	// ModTime is its .log file's modification time: when it was last
	// written.
	ModTime time.Time
}

// Segments describes the log's segments, oldest first. Kafka's ListOffsets
// v0 answers from them (offsets by segment and file time).
func (l *Log) Segments() []SegmentInfo {
	segs := l.segments()
	out := make([]SegmentInfo, 0, len(segs))
	for _, s := range segs {
		si := SegmentInfo{BaseOffset: s.Base(), Size: s.Size()}
		if st, err := os.Stat(s.Path()); err == nil {
			si.ModTime = st.ModTime()
		} else {
			continue // deleted by retention meanwhile
		}
		out = append(out, si)
	}
	return out
}
