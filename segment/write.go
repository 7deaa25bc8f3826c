package segment

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/spoolmq/spool/record"
)

// Fits reports why the batch cannot be appended to this segment, or nil if
// it can: ErrFull when the segment's size, offset range or indexes are
// exhausted (the log rolls then). maxBytes is the log's segment size limit;
// an empty segment takes a batch of any size up to MaxSize.
func (s *Segment) Fits(b record.Batch, maxBytes int64) error {
	size := s.size.Load()
	if size > 0 && size+int64(b.Size()) > maxBytes {
		return ErrFull
	}
	if size+int64(b.Size()) > MaxSize {
		if size == 0 {
			return fmt.Errorf("%w: batch of %d bytes is over the segment limit", record.ErrRecordTooLarge, b.Size())
		}
		return ErrFull
	}
	// Relative offsets are 32-bit in the indexes; Kafka keeps them below
	// 2^31 so they read as non-negative Java ints.
	if b.LastOffset()-s.base > math.MaxInt32 {
		return ErrFull
	}
	if ix := s.idx.Load(); ix != nil && (ix.off.Len()+2 > ix.off.Cap() || ix.tim.Len()+2 > ix.tim.Cap()) {
		// Two entries stay free: one for this batch, one written on seal.
		return ErrFull
	}
	return nil
}

// Reserve makes sure the indexes have disk blocks for what the next Append
// and Seal may add to them, growing the index files if not. It fails on a
// full disk having written nothing: the segment is as it was, and may be
// appended to once there is room. Append reserves first itself; the log
// calls Reserve beforehand to tell that error, which leaves it writable,
// from a failed write.
func (s *Segment) Reserve() error {
	if s.sealed.Load() {
		return fmt.Errorf("segment: append to sealed segment %s", s.logPath)
	}
	return s.idx.Load().reserve()
}

// Append writes a batch, whose offsets the log has already stamped, at the
// end of the .log file and indexes it. It reserves index space first (see
// Reserve): when that fails nothing is written. On a failed write it cuts
// the file back so that it holds whole batches only; if even that fails,
// the error says so and the segment must not be written again.
func (s *Segment) Append(b record.Batch) (pos int64, err error) {
	if err := s.Reserve(); err != nil {
		return 0, err
	}
	ix := s.idx.Load()
	pos = s.size.Load()
	f, err := s.acquire()
	if err != nil {
		return pos, err
	}
	defer s.file.Release()
	_, err = f.WriteAt(b.Bytes(), pos)
	// Clear synced only if set: a load costs far less than the store
	// (a locked exchange), and appends between fsyncs find it clear. Sync
	// sets it before its fsync, so a write this load saw as unsynced
	// came before that store and is covered by the fsync.
	if s.synced.Load() {
		s.synced.Store(false)
	}
	if err != nil {
		werr := fmt.Errorf("segment: write %s at %d: %w", s.logPath, pos, err)
		if terr := f.Truncate(pos); terr != nil {
			return pos, errors.Join(werr, fmt.Errorf("segment: cut back %s to %d: %w", s.logPath, pos, terr))
		}
		return pos, werr
	}
	if err := s.track(ix, Header{
		Position:     pos,
		BaseOffset:   b.BaseOffset(),
		LastOffset:   b.LastOffset(),
		Size:         b.Size(),
		MaxTimestamp: b.MaxTimestamp(),
	}); err != nil {
		return pos, err
	}
	s.size.Store(pos + int64(b.Size()))
	return pos, nil
}

// track does the bookkeeping for a batch now in the file: the greatest
// timestamp, the sparse index entries, the next offset.
func (s *Segment) track(ix *indexes, h Header) error {
	if h.MaxTimestamp > s.maxTS.Load() {
		s.maxTS.Store(h.MaxTimestamp)
		s.maxTSOffset = h.LastOffset
	}
	if s.sinceIndex > s.opts.IndexIntervalBytes {
		if err := ix.off.Append(h.LastOffset, h.Position); err != nil {
			return fmt.Errorf("segment: %w", err)
		}
		if _, err := ix.tim.MaybeAppend(s.maxTS.Load(), s.maxTSOffset); err != nil {
			return fmt.Errorf("segment: %w", err)
		}
		s.sinceIndex = 0
	}
	s.sinceIndex += h.Size
	if s.lastPos < 0 && h.Position == 0 {
		s.firstTS = h.MaxTimestamp
	}
	s.lastPos = h.Position
	s.next.Store(h.NextOffset())
	return nil
}

// Seal makes the segment read-only: it indexes the last batch and the
// greatest timestamp (so a later open needs no scan to know them) and trims
// both index files. It does not fsync; see Sync.
func (s *Segment) Seal() error {
	if s.sealed.Load() {
		return nil
	}
	ix := s.idx.Load()
	if err := s.finalEntries(ix); err != nil {
		return err
	}
	if err := errors.Join(ix.off.Trim(), ix.tim.Trim()); err != nil {
		return fmt.Errorf("segment: seal %s: %w", s.logPath, err)
	}
	s.sealed.Store(true)
	return nil
}

// finalEntries indexes the last batch and the greatest timestamp.
func (s *Segment) finalEntries(ix *indexes) error {
	if s.lastPos < 0 {
		return nil
	}
	if last, ok := ix.off.Last(); !ok || last.Offset < s.next.Load()-1 {
		if err := ix.off.Append(s.next.Load()-1, s.lastPos); err != nil {
			return fmt.Errorf("segment: seal %s: %w", s.logPath, err)
		}
	}
	if _, err := ix.tim.MaybeAppend(s.maxTS.Load(), s.maxTSOffset); err != nil {
		return fmt.Errorf("segment: seal %s: %w", s.logPath, err)
	}
	return nil
}

// PrepareCleanClose indexes the last batch and the greatest timestamp of an
// active segment so that a clean reopen finds them without a scan. Close with
// clean set then trims the index files.
func (s *Segment) PrepareCleanClose() error {
	if s.sealed.Load() {
		return nil
	}
	return s.finalEntries(s.idx.Load())
}

// Sync flushes the .log file to stable storage. A segment not written or
// truncated since its last Sync (or AssumeSynced) is not fsynced again.
// The flag is set before the fsync: a write while it runs clears it again
// once written, so the next Sync covers it. A failed fsync fails every
// later Sync of the segment: the kernel may have dropped the pages it could
// not write, and a later fsync that succeeds says nothing about them (two
// callers racing to sync, one seeing the failure, must not have the other
// report the data durable). That holds across a file pool's closing and
// reopening the file: the pool fsyncs a file with unsynced writes before
// closing it, through the same rule (see Options.Files).
func (s *Segment) Sync() error {
	s.syncMu.Lock()
	if s.syncErr != nil || s.synced.Load() {
		err := s.syncErr
		s.syncMu.Unlock()
		return err
	}
	s.syncMu.Unlock()
	// The file is taken before syncMu, never after: the pool, closing a
	// file not in use, takes syncMu (beforeClose) while it holds the
	// file's handle.
	f, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.file.Release()
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.syncErr != nil {
		return s.syncErr
	}
	if s.synced.Load() {
		return nil
	}
	s.synced.Store(true)
	if err := f.Sync(); err != nil {
		s.synced.Store(false)
		s.syncErr = fmt.Errorf("segment: fsync %s: %w", s.logPath, err)
		return s.syncErr
	}
	return nil
}

// AssumeSynced records that the segment's .log file and its loaded index
// files, as they are, are on stable storage: the log closed it cleanly,
// having synced them, and nothing has written since. Sync and SyncIndexes
// then do nothing until something changes. A caller that finds the files
// other than the clean close left them must not call it (or must call
// ForgetSynced before relying on a Sync).
func (s *Segment) AssumeSynced() {
	s.synced.Store(true)
	if ix := s.idx.Load(); ix != nil {
		ix.off.AssumeSynced()
		ix.tim.AssumeSynced()
	}
}

// ForgetSynced undoes AssumeSynced for the .log file (the index files are
// marked unsynced by any change to them): the next Sync fsyncs it.
func (s *Segment) ForgetSynced() { s.synced.Store(false) }

// SyncIndexes flushes both index files to stable storage.
func (s *Segment) SyncIndexes() error {
	ix, err := s.indexes()
	if err != nil {
		return err
	}
	return errors.Join(ix.off.Sync(), ix.tim.Sync())
}

// Truncate removes the batches whose last offset is >= offset: the batch
// holding offset goes whole. It returns the new next offset, which is <=
// offset. Committed bytes shrink with it. The segment must be writable.
func (s *Segment) Truncate(offset int64) (int64, error) {
	if s.sealed.Load() {
		return 0, fmt.Errorf("segment: truncate sealed segment %s", s.logPath)
	}
	h, err := s.Find(offset, s.size.Load())
	if err == io.EOF {
		return s.next.Load(), nil // nothing at or after offset
	}
	if err != nil {
		return 0, err
	}
	f, err := s.acquire()
	if err != nil {
		return 0, err
	}
	err = f.Truncate(h.Position)
	s.file.Release()
	s.synced.Store(false)
	if err != nil {
		return 0, fmt.Errorf("segment: truncate %s to %d: %w", s.logPath, h.Position, err)
	}
	if _, err := s.restore(h.Position, h.Position, false); err != nil {
		return 0, err
	}
	if s.lastPos < 0 {
		// Nothing left: the segment starts where it always did.
		s.next.Store(s.base)
	}
	// Transactions aborted by markers that are gone are not aborted.
	if err := s.TruncateAbortedTxns(s.next.Load()); err != nil {
		return 0, err
	}
	return s.next.Load(), nil
}

// Resume prepares a writable segment that was closed cleanly for appends:
// it takes the last index entries as true (after checking the batch they
// point at) and walks the headers from there to the end of the file.
func (s *Segment) Resume() error {
	size := s.size.Load()
	res, err := s.restore(size, size, false)
	if err != nil {
		return err
	}
	if res.Err != nil {
		return &CorruptError{Path: s.logPath, Position: res.ValidSize, Err: res.Err}
	}
	return nil
}

// StartWriteback asks the operating system to begin writing the .log
// file's bytes [off, off+n) to the disk, and returns without waiting. It is
// a hint that spreads the writeback of a large segment over the time it is
// written, so that the fsync that makes it durable later (a checkpoint
// after a roll) finds little left to write; it makes nothing durable and
// does not change what Sync does. A file system without the hint ignores
// it.
func (s *Segment) StartWriteback(off, n int64) error {
	if n <= 0 {
		return nil
	}
	f, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.file.Release()
	osf := f.OS()
	if osf == nil {
		return nil
	}
	rc, err := osf.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Control(func(fd uintptr) { werr = startWriteback(fd, off, n) }); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("segment: start writeback of %s: %w", s.logPath, werr)
	}
	return nil
}
