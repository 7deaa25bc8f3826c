package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// Errors of the Raft stores, tested with errors.Is. Damage to a file they
// read also wraps record.ErrCorrupt (log.ErrCorrupt).
var (
	// ErrBadEntry means a Raft entry cannot be stored as given: index 0,
	// a term past 2^31-1 (it is kept in a batch's 32-bit
	// partitionLeaderEpoch, as KRaft keeps its epochs), an AppendedAt
	// before 1970, or an entry larger than a segment. Nothing was written.
	ErrBadEntry = errors.New("controller: raft log entry cannot be stored")
	// ErrLogGap means StoreLogs was given entries that do not follow the
	// last stored index, or that skip or repeat an index among themselves.
	// Nothing was written.
	ErrLogGap = errors.New("controller: raft log entries do not follow on")
	// ErrBadDeleteRange means DeleteRange was asked to remove entries from
	// the middle of the log (which would leave a hole) or a range whose
	// min is past its max. Nothing was deleted.
	ErrBadDeleteRange = errors.New("controller: raft log range cannot be deleted")
)

// Defaults of LogStoreOptions.
const (
	// DefaultRaftSegmentBytes is the default segment size of the Raft log.
	// Head compaction frees disk a whole segment at a time, so segments are
	// small beside the partitions' 1 GiB: Raft keeps only the entries since
	// its last snapshot (plus TrailingLogs).
	DefaultRaftSegmentBytes = 16 << 20
	// batchTargetBytes is where StoreLogs cuts a run of entries of one
	// term into another batch: a read of one entry decodes its whole batch.
	batchTargetBytes = 1 << 20
)

// LogStoreOptions configure a LogStore. The zero value of every field
// means its default.
type LogStoreOptions struct {
	// SegmentBytes is the size at which a segment of the log is sealed and
	// the next begun; it also bounds one entry. Default
	// DefaultRaftSegmentBytes (16 MiB).
	SegmentBytes int64
	// Logger receives the log's warnings about recovery and failures.
	// Default: none.
	Logger *slog.Logger

	fs vfs.FS // the file layer of the store's own files; tests inject faults here
}

// LogStore is hashicorp/raft's LogStore (and MonotonicLogStore) kept as a
// Kafka-format log of package log, so that Kafka's tools and `spool dump`
// read the Raft log as they read a partition, as KRaft keeps its
// __cluster_metadata-0. A node keeps it in <data>/__cluster_metadata-0/.
//
// # Mapping
//
// Raft index i is log offset i-1. Each raft.Log is one record; each batch
// holds a run of entries of one term (as a KRaft leader's batch holds
// records of one epoch), cut at about 1 MiB:
//
//	batch header (61 bytes, package record)
//	  baseOffset             index-1 of the batch's first entry
//	  partitionLeaderEpoch   the entries' Raft Term (int32: a larger term is refused)
//	  producerId/Epoch/Seq   -1 (no producer)
//	  attributes             no compression, create time
//	record, one per raft.Log
//	  offset                 Index - 1
//	  timestamp              AppendedAt, in milliseconds (none if zero)
//	  key                    1 byte: Type (raft.LogType: 0 command, 1 noop,
//	                         4 barrier, 5 configuration, ...)
//	  value                  Data (null stays null, empty stays empty)
//	  header "ext"           Extensions, present only when not nil
//	  header "ns"            AppendedAt's nanoseconds below the millisecond,
//	                         4 bytes big-endian, present only when not 0
//
// FirstIndex is the log start offset + 1 and LastIndex the log end offset
// (the last offset + 1); both are 0 when the log holds no entry.
//
// # What Raft asks, and what it becomes
//
//	StoreLogs at LastIndex+1       append, one batch per run of one term, then
//	                               fsync (log.Sync policy) before returning
//	StoreLogs on an empty store    log.Reset(index-1) if the log is not already
//	                               there: Raft starts the log past a snapshot
//	DeleteRange(First, k), k<Last  log.DeleteRecordsBefore(k): after a snapshot
//	DeleteRange(i, Last), i>First  log.Truncate(i-1): a conflicting suffix
//	DeleteRange(First, Last)       log.DeleteRecordsBefore(end): after a snapshot
//	                               is installed (MonotonicLogStore)
//	anything else                  ErrBadDeleteRange (it would leave a hole)
//
// log.Truncate removes the whole batch that holds its offset, but Raft cuts
// between two entries of one term as often as not (the new leader had the
// first but not the second). Such a cut goes in steps: the entries of the
// batch to keep are written to a file in the directory, raft-truncate (the
// log start offset to keep, those entries as a batch, a CRC-32C of both;
// see truncateFile), fsynced; the batch is cut whole; the kept entries are
// appended again; the file is removed. A crash between the steps loses
// nothing Raft had stored: OpenLogStore finishes the cut from the file. A tail
// deletion a crash interrupts may be found partly done - the log ending
// anywhere from the cut to where it ended - which Raft, deleting the
// suffix again, takes in its stride: it never loses an entry before the
// cut nor leaves a hole. Every other change is whole or not at all after a
// crash, but for a StoreLogs in flight, which may leave a prefix of its
// entries.
//
// # Reads
//
// GetLog returns raft.ErrLogNotFound (that very error: Raft compares it)
// outside [FirstIndex, LastIndex]. Entries are read a batch at a time and
// the last few batches decoded are kept, as are the batches just stored:
// Raft reads sequentially (a follower's replication, the FSM's apply) and
// mostly what was just written, so most reads decode nothing. This is why
// raft.NewLogCache is not needed in front of it. The Data and Extensions
// GetLog returns are shared with that cache: they must not be modified.
//
// A LogStore is safe for concurrent use: writes (StoreLogs, DeleteRange)
// are serialised; reads wait only for a tail deletion or a restart of the
// log, never for an append or its fsync.
type LogStore struct {
	log  *log.Log
	fs   vfs.FS
	opts LogStoreOptions

	// mu serialises the writers, StoreLogs and DeleteRange. cutMu is held
	// by a writer while it changes what the log holds at offsets already
	// written (a tail truncation, a restart of the log), and by GetLog
	// while it reads: a reader never sees a truncation half done nor caches
	// what it removed. Appends and head deletions change no stored entry
	// and leave readers be. Order: mu, then cutMu.
	mu     sync.Mutex
	cutMu  sync.RWMutex
	bounds atomic.Pointer[indexRange]
	cache  batchCache
	iters  sync.Pool // *record.Iterator
	closed atomic.Bool
	broken error // a write that failed half way: refuse writes until reopened; guarded by mu
}

// indexRange is the stored entries' index range; first == 0 when there is
// none.
type indexRange struct{ first, last uint64 }

var (
	_ raft.LogStore          = (*LogStore)(nil)
	_ raft.MonotonicLogStore = (*LogStore)(nil)
)

// OpenLogStore opens (creating it if needed) the Raft log in dir, recovers
// it after a crash - the log's own recovery, then a tail deletion a crash
// interrupted - and returns the store. Only one process may have dir open.
func OpenLogStore(dir string, opts LogStoreOptions) (*LogStore, error) {
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = DefaultRaftSegmentBytes
	}
	if opts.fs == nil {
		opts.fs = vfs.Default
	}
	lopts := log.Options{
		SegmentBytes:    opts.SegmentBytes,
		MaxMessageBytes: int(min(opts.SegmentBytes, math.MaxInt32)),
		Flush:           log.Sync,
		// Raft alone decides what goes: never delete by age or size.
		RetentionTime:          log.Unlimited,
		RetentionBytes:         log.Unlimited,
		RetentionCheckInterval: -1,
		SegmentAge:             math.MaxInt64,
		Logger:                 opts.Logger,
	}
	l, err := log.Open(dir, lopts)
	if err != nil {
		return nil, fmt.Errorf("controller: raft log: %w", err)
	}
	s := &LogStore{log: l, fs: opts.fs, opts: opts}
	s.iters.New = func() any { return &record.Iterator{MaxUncompressedBytes: l.MaxUncompressedBytes()} }
	if err := s.finishInterruptedTruncation(); err != nil {
		l.Close()
		return nil, err
	}
	s.setBounds()
	return s, nil
}

// setBounds derives the index range from the log. Called with mu held (or
// before the store is shared).
func (s *LogStore) setBounds() {
	start, end := s.log.StartOffset(), s.log.EndOffset()
	r := indexRange{}
	if start < end {
		r = indexRange{first: uint64(start) + 1, last: uint64(end)}
	}
	s.bounds.Store(&r)
}

// Close waits for a write in progress and closes the log; later calls
// return log.ErrClosed. Shut Raft down first.
func (s *LogStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return log.ErrClosed
	}
	return s.log.Close()
}

// Dir is the directory of the log.
func (s *LogStore) Dir() string { return s.log.Dir() }

// IsMonotonic implements raft.MonotonicLogStore: the log cannot hold a gap
// between indexes, so Raft deletes every entry after restoring a snapshot
// instead of leaving a gap, and the next StoreLogs starts the log again.
func (s *LogStore) IsMonotonic() bool { return true }

// FirstIndex implements raft.LogStore: the first stored index, 0 if none.
func (s *LogStore) FirstIndex() (uint64, error) {
	if s.closed.Load() {
		return 0, log.ErrClosed
	}
	return s.bounds.Load().first, nil
}

// LastIndex implements raft.LogStore: the last stored index, 0 if none.
func (s *LogStore) LastIndex() (uint64, error) {
	if s.closed.Load() {
		return 0, log.ErrClosed
	}
	return s.bounds.Load().last, nil
}

// GetLog implements raft.LogStore: it fills out with the entry at index, or
// returns raft.ErrLogNotFound if none is stored there.
func (s *LogStore) GetLog(index uint64, out *raft.Log) error {
	if s.closed.Load() {
		return log.ErrClosed
	}
	s.cutMu.RLock()
	defer s.cutMu.RUnlock()
	r := s.bounds.Load()
	if r.first == 0 || index < r.first || index > r.last {
		return raft.ErrLogNotFound
	}
	off := int64(index - 1)
	if e, ok := s.cache.get(off); ok {
		*out = *e
		return nil
	}
	buf, err := s.log.Read(off, 1) // the one batch that holds off
	switch {
	case errors.Is(err, log.ErrOffsetOutOfRange):
		return raft.ErrLogNotFound // deleted from the head since the bounds were read
	case err != nil:
		return fmt.Errorf("controller: raft log: read index %d: %w", index, err)
	case len(buf) == 0:
		return raft.ErrLogNotFound
	}
	b, _, err := record.ParseBatch(buf)
	if err != nil {
		return fmt.Errorf("controller: raft log: read index %d: %w", index, err)
	}
	db, err := s.decode(b)
	if err != nil {
		return fmt.Errorf("controller: raft log: read index %d: %w", index, err)
	}
	e := db.entry(off)
	if e == nil {
		return fmt.Errorf("controller: raft log: %w: index %d lies in no record of the batch at offset %d",
			record.ErrCorrupt, index, b.BaseOffset())
	}
	s.cache.put(db)
	*out = *e
	return nil
}

// StoreLog implements raft.LogStore.
func (s *LogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: it appends entries, whose indexes must
// follow LastIndex one by one (or, on an empty store, start anywhere), and
// returns once they are on stable storage. Entries that cannot be stored
// (ErrBadEntry, ErrLogGap) are refused before anything is written.
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	r := s.bounds.Load()
	first, last := logs[0].Index, logs[len(logs)-1].Index
	if first == 0 || last > math.MaxInt64 || last < first {
		return fmt.Errorf("%w: indexes %d..%d outside [1, 2^63-1]", ErrBadEntry, first, last)
	}
	if r.first != 0 && first != r.last+1 {
		return fmt.Errorf("%w: index %d stored after index %d", ErrLogGap, first, r.last)
	}
	for i, l := range logs[1:] {
		if l.Index != logs[i].Index+1 {
			return fmt.Errorf("%w: index %d given after index %d", ErrLogGap, l.Index, logs[i].Index)
		}
	}
	batches, err := encodeBatches(logs, int(s.opts.SegmentBytes))
	if err != nil {
		return err
	}

	// An empty store starts wherever Raft says: past a snapshot it
	// installed, or below entries a snapshot replaced.
	if r.first == 0 && s.log.EndOffset() != int64(first-1) {
		s.cutMu.Lock()
		err := s.log.Reset(int64(first - 1))
		s.cache.drop(func(*decodedBatch) bool { return true })
		s.cutMu.Unlock()
		if err != nil {
			return fmt.Errorf("controller: raft log: start at index %d: %w", first, err)
		}
	}
	var pending log.Pending
	for _, eb := range batches {
		base, p, err := s.log.AppendTrustedNoWait(eb.batch)
		if err == nil && base != int64(eb.entries[0].Index-1) {
			// Only this store writes the log, under mu: this cannot
			// happen unless the log was changed under it.
			err = fmt.Errorf("%w: index %d went to offset %d", record.ErrCorrupt, eb.entries[0].Index, base)
		}
		if err != nil {
			// Earlier batches may be written: what the store holds is
			// no longer what Raft was told. The log has failed too, for
			// an I/O error; a reopen recovers both.
			s.broken = fmt.Errorf("controller: raft log: append index %d: %w", eb.entries[0].Index, err)
			return s.broken
		}
		pending = p
	}
	if err := s.log.WaitDurable(pending); err != nil {
		s.broken = fmt.Errorf("controller: raft log: flush through index %d: %w", last, err)
		return s.broken
	}
	for _, eb := range batches {
		s.cache.put(eb.decoded())
	}
	next := indexRange{first: r.first, last: last}
	if next.first == 0 {
		next.first = first
	}
	s.bounds.Store(&next)
	return nil
}

// DeleteRange implements raft.LogStore: it deletes the entries min..max
// (inclusive), which must reach the first or the last stored entry so that
// no hole is left (ErrBadDeleteRange otherwise). The deletion is on stable
// storage before it returns.
func (s *LogStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if min > max {
		return fmt.Errorf("%w: [%d, %d]", ErrBadDeleteRange, min, max)
	}
	r := *s.bounds.Load()
	if r.first == 0 || max < r.first || min > r.last {
		return nil // nothing stored in the range
	}
	var err error
	switch {
	case min <= r.first && max >= r.last:
		// Everything: Raft installed a snapshot. The log stays where it
		// ends, empty, until the next StoreLogs says where to start.
		err = s.log.DeleteRecordsBefore(int64(r.last))
	case min <= r.first:
		err = s.log.DeleteRecordsBefore(int64(max))
		s.cache.drop(func(d *decodedBatch) bool { return d.end() <= int64(max) })
	case max >= r.last:
		err = s.truncate(int64(min - 1))
	default:
		return fmt.Errorf("%w: [%d, %d] lies inside the stored [%d, %d] and would leave a hole",
			ErrBadDeleteRange, min, max, r.first, r.last)
	}
	s.setBounds()
	if err != nil {
		return fmt.Errorf("controller: raft log: delete [%d, %d]: %w", min, max, err)
	}
	return nil
}

// writable reports why the store refuses writes, or nil. Called with mu
// held.
func (s *LogStore) writable() error {
	if s.closed.Load() {
		return log.ErrClosed
	}
	return s.broken
}

// truncate removes the entries at offsets off and after; off lies after
// the log start and before its end. Called with mu held.
func (s *LogStore) truncate(off int64) error {
	s.cutMu.Lock()
	defer s.cutMu.Unlock()
	defer s.cache.drop(func(d *decodedBatch) bool { return d.end() > off })
	buf, err := s.log.Read(off, 1)
	if err != nil {
		return err
	}
	b, _, err := record.ParseBatch(buf)
	if err != nil {
		return err
	}
	if b.BaseOffset() == off {
		_, err := s.log.Truncate(off) // a batch boundary: the log cuts exactly
		return err
	}
	t, err := s.keptPrefix(b, off)
	if err != nil {
		return err
	}
	return s.truncateInsideBatch(t)
}

// finishInterruptedTruncation completes a truncation inside a batch that a
// crash interrupted, from the file it left.
func (s *LogStore) finishInterruptedTruncation() error {
	path := filepath.Join(s.log.Dir(), truncateFile)
	data, err := vfs.ReadFile(s.fs, path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("controller: raft log: %w", err)
	}
	t, err := parseTruncation(data)
	if err != nil {
		return fmt.Errorf("controller: raft log: %s: %w", path, err)
	}
	if o := s.opts.Logger; o != nil {
		o.Warn("finishing a raft log truncation a crash interrupted", "dir", s.log.Dir(),
			"end", t.kept.NextOffset(), "log_end", s.log.EndOffset())
	}
	return s.applyTruncation(t)
}
