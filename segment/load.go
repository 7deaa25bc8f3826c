package segment

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spoolmq/spool/index"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// indexes returns the segment's indexes, loading those of a read-only
// segment on first use.
func (s *Segment) indexes() (*indexes, error) {
	if ix := s.idx.Load(); ix != nil {
		return ix, nil
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if ix := s.idx.Load(); ix != nil {
		return ix, nil
	}
	ix, err := s.loadSealed()
	if err != nil {
		return nil, err
	}
	s.idx.Store(ix)
	return ix, nil
}

// loadSealed opens a sealed segment's index files read-only and checks them
// against the log: a sealed segment's last offset index entry is its last
// batch, and its last time index entry its greatest timestamp (Seal wrote
// both). Files that are missing, malformed or disagree with the log are
// rebuilt.
func (s *Segment) loadSealed() (*indexes, error) {
	ix, err := s.openIndexes(false)
	if err == nil {
		if err = s.checkSealed(ix); err == nil {
			return ix, nil
		}
		_ = ix.close(false)
	}
	if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, index.ErrCorrupt) && !errors.Is(err, errMismatch) {
		return nil, err
	}
	return s.rebuildSealed()
}

var errMismatch = errors.New("index does not match the log")

func (s *Segment) checkSealed(ix *indexes) error {
	size := s.size.Load()
	last, ok := ix.off.Last()
	if !ok {
		if size != 0 {
			return fmt.Errorf("%w: %s: empty index for %d bytes of log", errMismatch, s.indexPath(), size)
		}
		return nil
	}
	h, err := s.headerAt(last.Position)
	if err != nil || h.LastOffset != last.Offset || h.End() != size {
		return fmt.Errorf("%w: %s: last entry %+v", errMismatch, s.indexPath(), last)
	}
	if first, err := ix.off.Entry(0); err != nil {
		return err
	} else if fh, err := s.headerAt(first.Position); err != nil || fh.LastOffset != first.Offset {
		return fmt.Errorf("%w: %s: first entry %+v", errMismatch, s.indexPath(), first)
	}
	maxTS := int64(record.NoTimestamp)
	if t, ok := ix.tim.Last(); ok {
		if t.Offset > last.Offset {
			return fmt.Errorf("%w: %s: entry for offset %d after the last batch", errMismatch, s.timeIndexPath(), t.Offset)
		}
		maxTS = t.Timestamp
	}
	if h.MaxTimestamp > maxTS {
		return fmt.Errorf("%w: %s: last batch has timestamp %d, index %d", errMismatch, s.timeIndexPath(), h.MaxTimestamp, maxTS)
	}
	s.next.Store(last.Offset + 1)
	s.maxTS.Store(maxTS)
	s.lastPos = last.Position
	return nil
}

// rebuildSealed writes fresh index files for a sealed segment from a walk
// over its batch headers, replacing the old files atomically.
func (s *Segment) rebuildSealed() (*indexes, error) {
	offTmp, timTmp := s.indexPath()+".rebuild", s.timeIndexPath()+".rebuild"
	for _, p := range []string{offTmp, timTmp} {
		if err := s.opts.FS.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	ix, err := s.openIndexesAt(offTmp, timTmp, true)
	if err != nil {
		_ = s.opts.FS.Remove(offTmp)
		_ = s.opts.FS.Remove(timTmp)
		return nil, err
	}
	off, tim := ix.off, ix.tim
	fail := func(err error) (*indexes, error) {
		_ = ix.close(false)
		_ = s.opts.FS.Remove(offTmp)
		_ = s.opts.FS.Remove(timTmp)
		return nil, err
	}

	s.maxTS.Store(record.NoTimestamp)
	s.maxTSOffset, s.lastPos, s.sinceIndex = s.base, -1, 0
	s.next.Store(s.base)
	f, err := s.acquire()
	if err != nil {
		return fail(err)
	}
	defer s.file.Release()
	sc := newScanner(f, 0, s.size.Load(), 0)
	defer sc.close()
	expect := s.base
	for {
		pos := sc.pos
		h, err := sc.next()
		if err == io.EOF {
			break
		}
		if err == nil {
			err = s.checkOffsets(h, expect)
		}
		if err != nil {
			return fail(&CorruptError{Path: s.logPath, Position: pos, Err: err})
		}
		if err := s.track(ix, h); err != nil {
			return fail(err)
		}
		expect = h.NextOffset()
	}
	if err := s.finalEntries(ix); err != nil {
		return fail(err)
	}
	if err := errors.Join(off.Trim(), tim.Trim(), off.Sync(), tim.Sync()); err != nil {
		return fail(err)
	}
	if err := s.opts.FS.Rename(offTmp, s.indexPath()); err != nil {
		return fail(err)
	}
	if err := s.opts.FS.Rename(timTmp, s.timeIndexPath()); err != nil {
		return fail(err)
	}
	if err := s.opts.FS.SyncDir(s.dir); err != nil {
		return fail(err)
	}
	return ix, nil
}

// rebuildAfterMismatch replaces a sealed segment's indexes when a lookup
// found an entry that disagrees with the log. The old maps stay open for
// readers still using them until the segment closes.
func (s *Segment) rebuildAfterMismatch(old *indexes) {
	if !s.sealed.Load() {
		return
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx.Load() != old {
		return // someone else rebuilt it
	}
	ix, err := s.rebuildSealed()
	if err != nil {
		return // lookups go on scanning from the start of the file
	}
	s.retired = append(s.retired, old)
	s.idx.Store(ix)
}

// ScanEnd walks the batch headers of the .log file at path (any name: the
// cleaner's swap files too) and returns the offset after its last batch,
// or -1 for an empty file. It checks framing and offsets, not CRCs.
func ScanEnd(fsys vfs.FS, path string) (int64, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	sc := newScanner(f, 0, st.Size(), 0)
	defer sc.close()
	next := int64(-1)
	for {
		pos := sc.pos
		h, err := sc.next()
		if err == io.EOF {
			return next, nil
		}
		if err != nil {
			return 0, &CorruptError{Path: path, Position: pos, Err: err}
		}
		if h.BaseOffset < next {
			return 0, &CorruptError{Path: path, Position: pos, Err: fmt.Errorf("%w: base offset %d after %d", record.ErrCorrupt, h.BaseOffset, next)}
		}
		next = h.NextOffset()
	}
}
