package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spoolmq/spool/internal/vfs"
)

// The aborted-transaction index (Kafka's TransactionIndex).
//
// Each segment has a .txnindex file beside its .log: one entry per
// transaction whose ABORT marker is in the segment, in marker order, so
// that a read_committed fetch can tell its client which of the batches it
// returns belong to aborted transactions. Kafka's layout, 34 bytes an
// entry, big-endian:
//
//	version int16 (0) | producerId int64 | firstOffset int64 |
//	lastOffset int64 (the ABORT marker's offset) | lastStableOffset int64
//
// lastStableOffset is the partition's last stable offset once the
// transaction ended, leaving out the high watermark: the first offset of
// the oldest other open transaction, or lastOffset+1. A search for the
// transactions aborted in a range stops at the first entry whose
// lastStableOffset reaches the range's end: every transaction aborted
// later began at or after it.
//
// spool creates the file, empty, with the segment, so that a missing file
// means a lost one: the partition rebuilds it from the log (a transaction
// can span segments, so the rebuild replays the log from its start). An
// entry is written, and fsynced, after its marker is in the log and before
// the marker's transaction counts as ended; truncation of the log cuts the
// index with it.

// TxnIndexSuffix ends a segment's aborted-transaction index file name.
const TxnIndexSuffix = ".txnindex"

// TxnIndexEntrySize is the size of one .txnindex entry.
const TxnIndexEntrySize = 34

var (
	// ErrBadTxnIndex means a .txnindex file that is not a sequence of
	// valid entries: a torn last entry, a version other than 0, offsets
	// out of order or outside the segment.
	ErrBadTxnIndex = errors.New("segment: damaged transaction index")
	// ErrNoTxnIndex means a segment's .txnindex file is missing.
	ErrNoTxnIndex = errors.New("segment: transaction index missing")
)

// AbortedTxn is one .txnindex entry.
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64 // the ABORT marker's offset
	LastStableOffset int64
}

// AppendTxnIndexEntry appends e in the .txnindex layout to dst.
func AppendTxnIndexEntry(dst []byte, e AbortedTxn) []byte {
	dst = binary.BigEndian.AppendUint16(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ProducerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.FirstOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.LastOffset))
	return binary.BigEndian.AppendUint64(dst, uint64(e.LastStableOffset))
}

// ParseTxnIndex decodes a .txnindex file's contents. Anything but whole,
// valid entries with strictly increasing lastOffset is an error wrapping
// ErrBadTxnIndex that names the byte position; the entries before the bad
// one are returned with it.
func ParseTxnIndex(data []byte) ([]AbortedTxn, error) {
	out := make([]AbortedTxn, 0, len(data)/TxnIndexEntrySize)
	for pos := 0; pos < len(data); pos += TxnIndexEntrySize {
		if len(data)-pos < TxnIndexEntrySize {
			return out, fmt.Errorf("%w: torn entry of %d bytes at position %d", ErrBadTxnIndex, len(data)-pos, pos)
		}
		p := data[pos:]
		if v := int16(binary.BigEndian.Uint16(p)); v != 0 {
			return out, fmt.Errorf("%w: version %d at position %d", ErrBadTxnIndex, v, pos)
		}
		e := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(p[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(p[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(p[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(p[26:])),
		}
		if err := checkEntry(e, out); err != nil {
			return out, fmt.Errorf("%w at position %d", err, pos)
		}
		out = append(out, e)
	}
	return out, nil
}

// checkEntry checks an entry against itself and the entries before it.
func checkEntry(e AbortedTxn, before []AbortedTxn) error {
	if e.ProducerID < 0 || e.FirstOffset < 0 || e.FirstOffset > e.LastOffset || e.LastStableOffset < 0 || e.LastStableOffset > e.LastOffset+1 {
		return fmt.Errorf("%w: entry %+v", ErrBadTxnIndex, e)
	}
	if n := len(before); n > 0 && e.LastOffset <= before[n-1].LastOffset {
		return fmt.Errorf("%w: entry at offset %d after one at %d", ErrBadTxnIndex, e.LastOffset, before[n-1].LastOffset)
	}
	return nil
}

// txnIndex is a segment's aborted transactions, loaded on first use.
// Guarded by Segment.txnMu.
type txnIndex struct {
	loaded  bool
	entries []AbortedTxn // never modified in place: replaced
	err     error        // ErrNoTxnIndex or ErrBadTxnIndex once loaded
}

func (s *Segment) txnIndexPath() string {
	return filepath.Join(s.dir, FileName(s.base, TxnIndexSuffix))
}

// TxnIndexPath is the segment's .txnindex file path.
func (s *Segment) TxnIndexPath() string { return s.txnIndexPath() }

// createTxnIndex makes the segment's empty .txnindex file, replacing one
// an earlier segment of the same base left.
func (s *Segment) createTxnIndex() error {
	f, err := s.opts.FS.OpenFile(s.txnIndexPath(), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", s.txnIndexPath(), err)
	}
	s.txn = txnIndex{loaded: true}
	return f.Close()
}

// loadTxnLocked reads the .txnindex file. Called with txnMu held.
func (s *Segment) loadTxnLocked() {
	if s.txn.loaded {
		return
	}
	s.txn.loaded = true
	data, err := vfs.ReadFile(s.opts.FS, s.txnIndexPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.txn.err = fmt.Errorf("%w: %s", ErrNoTxnIndex, s.txnIndexPath())
		return
	case err != nil:
		s.txn.err = fmt.Errorf("%w: %s: %w", ErrBadTxnIndex, s.txnIndexPath(), err)
		return
	}
	entries, err := ParseTxnIndex(data)
	if err == nil && len(entries) > 0 {
		if e := entries[0]; e.LastOffset < s.base {
			err = fmt.Errorf("%w: entry at offset %d below the segment base", ErrBadTxnIndex, e.LastOffset)
		}
	}
	if err != nil {
		s.txn.err = fmt.Errorf("%s: %w", s.txnIndexPath(), err)
		return
	}
	s.txn.entries = entries
}

// TxnIndexErr reports whether the segment's .txnindex is usable: nil, or
// an error wrapping ErrNoTxnIndex or ErrBadTxnIndex. A damaged or missing
// index is to be rebuilt with ResetAbortedTxns and AppendAbortedTxn.
func (s *Segment) TxnIndexErr() error {
	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.loadTxnLocked()
	return s.txn.err
}

// AbortedTxns returns the segment's .txnindex entries, in marker order.
// The slice must not be modified. A missing or damaged index is an error
// (see TxnIndexErr).
func (s *Segment) AbortedTxns() ([]AbortedTxn, error) {
	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.loadTxnLocked()
	return s.txn.entries, s.txn.err
}

// AppendAbortedTxn adds an entry to the .txnindex and fsyncs it. Its
// lastOffset must lie in the segment and after every entry's (else
// ErrBadTxnIndex, nothing written). A write that fails leaves the file
// cut back to its entries; the error says so.
func (s *Segment) AppendAbortedTxn(e AbortedTxn) error {
	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.loadTxnLocked()
	if s.txn.err != nil {
		return s.txn.err
	}
	if e.LastOffset < s.base {
		return fmt.Errorf("%w: entry at offset %d below the segment base %d", ErrBadTxnIndex, e.LastOffset, s.base)
	}
	if err := checkEntry(e, s.txn.entries); err != nil {
		return err
	}
	path := s.txnIndexPath()
	f, err := s.opts.FS.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("segment: open %s: %w", path, err)
	}
	size := int64(len(s.txn.entries) * TxnIndexEntrySize)
	_, err = f.WriteAt(AppendTxnIndexEntry(nil, e), size)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		err = fmt.Errorf("segment: write %s: %w", path, err)
		if terr := f.Truncate(size); terr != nil {
			err = errors.Join(err, fmt.Errorf("segment: cut back %s: %w", path, terr))
		}
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("segment: close %s: %w", path, err)
	}
	s.txn.entries = append(slices.Clip(s.txn.entries), e)
	return nil
}

// TruncateAbortedTxns removes the entries whose marker is at or after
// offset, and fsyncs the file. A missing or damaged index is replaced by
// an empty one (what remains is rebuilt by appending).
func (s *Segment) TruncateAbortedTxns(offset int64) error {
	s.txnMu.Lock()
	defer s.txnMu.Unlock()
	s.loadTxnLocked()
	if s.txn.err != nil {
		if err := s.createTxnIndex(); err != nil {
			return err
		}
		return s.opts.FS.SyncDir(s.dir)
	}
	keep := len(s.txn.entries)
	for keep > 0 && s.txn.entries[keep-1].LastOffset >= offset {
		keep--
	}
	if keep == len(s.txn.entries) {
		return nil
	}
	path := s.txnIndexPath()
	f, err := s.opts.FS.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("segment: open %s: %w", path, err)
	}
	err = f.Truncate(int64(keep * TxnIndexEntrySize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.txn = txnIndex{} // reload: the file is in an unknown state
		return fmt.Errorf("segment: truncate %s: %w", path, err)
	}
	s.txn.entries = slices.Clip(s.txn.entries[:keep])
	return nil
}

// ReadTxnIndexFile reads and decodes a .txnindex file (tools use it).
func ReadTxnIndexFile(fsys vfs.FS, path string) ([]AbortedTxn, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	data, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return nil, err
	}
	return ParseTxnIndex(data)
}
