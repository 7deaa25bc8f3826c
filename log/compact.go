package log

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// Compaction (cleanup.policy=compact) keeps the latest record of each key,
// as Kafka's log cleaner does.
//
// The log has a clean part, [start, cleaner offset), and a dirty part after
// it. Clean builds a map from key to latest offset over the dirty part of the
// sealed segments (never the active one, nor segments younger than
// MinCompactionLag), then rewrites the sealed segments from the start of the
// log up to the end of what it mapped, keeping:
//
//   - records without a key;
//   - records whose offset is the latest the map holds for their key (or
//     whose key the map lacks: the key was last written in the clean part);
//   - tombstones (a key, a nil value) until DeleteRetention after their
//     timestamp;
//   - transaction markers (control batches), always and whole.
//
// Records of aborted transactions (the .txnindex entries: a transactional
// batch of the producer from the transaction's first offset up to its
// ABORT marker) are dropped and never mapped, so an aborted record can
// never shadow a committed one. Clean stops before CleanLimit (a
// partition's last stable offset), so every transaction in what it
// cleans is decided. Markers are kept for good, where Kafka drops one once
// its transaction's data is gone and delete.retention.ms has passed.
//
// Kept records keep their offsets, timestamps and headers, re-encoded batch
// by batch with the same codec (record.Filter); consecutive small segments
// are merged into one of at most SegmentBytes.
//
// Swapping the cleaned segments in is crash-safe, in Kafka's way. A cleaned
// segment is written under <dir>/cleaning/ and fsynced; its index files, then
// its .log, are renamed to <base>.index.swap, .timeindex.swap and .log.swap in
// the log directory - the rename of the .log is the commit point; the
// replaced segments' files are removed; the .swap files are renamed to their
// final names. Open finishes or rolls back an interrupted swap: it removes
// cleaning/, and for each .log.swap removes the segments its offsets cover
// and renames the swap files into place. Readers that hold a replaced
// segment keep reading its unlinked files.

// ErrCleanerBufferTooSmall means the first dirty segment holds more keys
// than CleanerBufferBytes can map.
var ErrCleanerBufferTooSmall = errors.New("log: CleanerBufferBytes too small for one segment's keys")

const (
	cleaningDir = "cleaning"
	swapSuffix  = ".swap"
)

// CleanStats reports what one Clean did.
type CleanStats struct {
	// Cleaned is false when there was nothing to do or the log was not
	// due (its dirty ratio below MinCleanableDirtyRatio).
	Cleaned bool
	// DirtyRatio is the dirty share of the cleanable bytes before cleaning.
	DirtyRatio float64
	// FirstDirty and CleanedTo bound the dirty offsets mapped this time;
	// the cleaner offset is now CleanedTo.
	FirstDirty, CleanedTo int64
	// SegmentsRead and SegmentsWritten count segments replaced and made.
	SegmentsRead, SegmentsWritten int
	// BytesRead and BytesWritten count segment bytes.
	BytesRead, BytesWritten int64
	// RecordsRead, RecordsKept and TombstonesRemoved count records.
	RecordsRead, RecordsKept, TombstonesRemoved int64
	// MapEntries is the number of keys mapped; MapBytes the map's memory.
	MapEntries int
	MapBytes   int64
	// Duration is the time Clean took.
	Duration time.Duration
}

// CleanerOffset is where the dirty part of the log begins: compaction has
// cleaned the offsets below.
func (l *Log) CleanerOffset() int64 {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	return max(l.cleanerOffset, l.start.Load())
}

// Clean compacts the log if its cleanup policy includes compaction and it
// is due - its dirty ratio is at least MinCleanableDirtyRatio, or a dirty
// segment is older than MaxCompactionLag - or force is set. See the comment
// at the top of compact.go for what it keeps and how it swaps segments.
func (l *Log) Clean(force bool) (st CleanStats, err error) {
	if !l.opts.Cleanup.compacts() {
		return st, nil
	}
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	if err := l.writable(); err != nil {
		return st, err
	}
	started := time.Now()
	defer func() { st.Duration = time.Since(started) }()

	now := l.opts.now()
	firstDirty := l.CleanerOffset()
	st.FirstDirty, st.CleanedTo = firstDirty, firstDirty
	segs := l.segments()
	// Hold the sealed segments while we read them.
	var sealed []*segment.Segment
	for _, s := range segs[:len(segs)-1] {
		if !s.Acquire() {
			return st, nil // retention is deleting; try again later
		}
		sealed = append(sealed, s)
	}
	defer func() {
		for _, s := range sealed {
			s.Release()
		}
	}()

	// The cleanable segments: sealed, below CleanLimit, and older than
	// MinCompactionLag.
	cleanable := sealed
	if l.opts.CleanLimit != nil {
		limit := l.opts.CleanLimit()
		for i, s := range cleanable {
			next, err := s.NextOffset()
			if err != nil {
				return st, err
			}
			if next > limit {
				cleanable = cleanable[:i]
				break
			}
		}
	}
	if lag := l.opts.MinCompactionLag; lag > 0 {
		for i, s := range cleanable {
			mt, err := s.MaxTimestamp()
			if err != nil {
				return st, err
			}
			if mt > now.Add(-lag).UnixMilli() {
				cleanable = cleanable[:i]
				break
			}
		}
	}
	dirtyStart := -1
	var total, dirty int64
	for i, s := range cleanable {
		next, err := s.NextOffset()
		if err != nil {
			return st, err
		}
		total += s.Size()
		if next > firstDirty {
			if dirtyStart < 0 {
				dirtyStart = i
			}
			dirty += s.Size()
		}
	}
	if dirtyStart < 0 || total == 0 {
		return st, nil
	}
	st.DirtyRatio = float64(dirty) / float64(total)
	due := force || st.DirtyRatio >= l.opts.MinCleanableDirtyRatio
	if !due && l.opts.MaxCompactionLag < math.MaxInt64 {
		mt, err := cleanable[dirtyStart].MaxTimestamp()
		if err != nil {
			return st, err
		}
		due = mt >= 0 && mt < now.Add(-l.opts.MaxCompactionLag).UnixMilli()
	}
	if !due {
		return st, nil
	}

	// The aborted transactions: their records are neither mapped nor
	// kept. Their markers may lie in any later segment.
	aborted, err := abortedRanges(segs)
	if err != nil {
		return st, err
	}

	// Map the dirty segments' keys to their latest offsets, as far as
	// the buffer allows, stopping at a segment boundary.
	m := newOffsetMap(l.opts.CleanerBufferBytes)
	m.aborted = aborted
	st.MapBytes = int64(len(m.slots)) * mapSlotSize
	mapped := dirtyStart - 1
	for i := dirtyStart; i < len(cleanable); i++ {
		complete, err := l.mapSegment(m, cleanable[i], firstDirty)
		if err != nil {
			return st, err
		}
		if !complete {
			break
		}
		mapped = i
		if m.full() {
			break
		}
	}
	if mapped < dirtyStart {
		return st, fmt.Errorf("%w: %s", ErrCleanerBufferTooSmall, cleanable[dirtyStart].Path())
	}
	st.MapEntries = m.used
	cleanedTo, err := cleanable[mapped].NextOffset()
	if err != nil {
		return st, err
	}

	// Rewrite the segments from the start of the log through the last
	// mapped one, in groups that fit in one segment.
	for _, g := range l.groupSegments(cleanable[:mapped+1]) {
		if err := l.cleanGroup(g, m, now, &st); err != nil {
			return st, err
		}
	}

	l.cpMu.Lock()
	l.cleanerOffset = max(l.cleanerOffset, cleanedTo)
	err = l.writeStateLocked(l.start.Load())
	l.cpMu.Unlock()
	if err != nil {
		return st, err
	}
	st.Cleaned, st.CleanedTo = true, cleanedTo
	return st, nil
}

// mapSegment puts the keys of s's records at or after from into m. It
// reports false if m filled up before the segment's end.
func (l *Log) mapSegment(m *offsetMap, s *segment.Segment, from int64) (bool, error) {
	var it record.Iterator
	var buf []byte
	target := s.Base()
	for {
		out, _, err := s.Read(buf[:0], target, 1<<20, s.Committed())
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		buf = out
		for len(out) > 0 {
			b, n, err := record.ParseBatch(out)
			if err != nil {
				return false, &segment.CorruptError{Path: s.Path(), Position: -1, Err: err}
			}
			out = out[n:]
			target = b.NextOffset()
			if b.NextOffset() <= from || b.IsControl() || m.aborted.holds(b) {
				continue
			}
			for it.Reset(b); it.Next(); {
				r := it.Record()
				if r.Key == nil || r.Offset < from {
					continue
				}
				if !m.put(r.Key, r.Offset) {
					return false, nil
				}
			}
			if err := it.Err(); err != nil {
				return false, &segment.CorruptError{Path: s.Path(), Position: -1, Err: err}
			}
		}
	}
}

// groupSegments splits segments into runs whose total size fits in one
// segment and whose offsets fit a segment's 32-bit relative offsets, as
// Kafka's groupSegmentsBySize does.
func (l *Log) groupSegments(segs []*segment.Segment) [][]*segment.Segment {
	var groups [][]*segment.Segment
	for len(segs) > 0 {
		n, size := 1, segs[0].Size()
		for n < len(segs) {
			next, err := segs[n].NextOffset()
			if err != nil || size+segs[n].Size() > l.opts.SegmentBytes || next-segs[0].Base() > math.MaxInt32 {
				break
			}
			size += segs[n].Size()
			n++
		}
		groups = append(groups, segs[:n])
		segs = segs[n:]
	}
	return groups
}

// cleanGroup writes the kept records of a group of segments into one new
// segment and swaps it in.
func (l *Log) cleanGroup(group []*segment.Segment, m *offsetMap, now time.Time, st *CleanStats) error {
	dir := filepath.Join(l.dir, cleaningDir)
	if err := l.fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := group[0].Base()
	out, err := segment.Create(dir, base, l.opts.segmentOptions())
	if err != nil {
		return err
	}
	discard := func(err error) error {
		out.Delete()
		return err
	}
	horizon := now.Add(-l.opts.DeleteRetention).UnixMilli()
	keep := func(r *record.Record) bool {
		st.RecordsRead++
		if r.Key == nil {
			st.RecordsKept++
			return true
		}
		if latest, ok := m.get(r.Key); ok && r.Offset < latest {
			return false
		}
		if r.Value == nil && !r.Timestamp.IsZero() && r.Timestamp.UnixMilli() < horizon {
			st.TombstonesRemoved++
			return false
		}
		st.RecordsKept++
		return true
	}
	var it record.Iterator
	var in, filtered []byte
	for _, s := range group {
		st.BytesRead += s.Size()
		target := s.Base()
		for {
			buf, _, err := s.Read(in[:0], target, 1<<20, s.Committed())
			if err == io.EOF {
				break
			}
			if err != nil {
				return discard(err)
			}
			in = buf
			for len(buf) > 0 {
				b, n, err := record.ParseBatch(buf)
				if err != nil {
					return discard(&segment.CorruptError{Path: s.Path(), Position: -1, Err: err})
				}
				buf = buf[n:]
				target = b.NextOffset()
				if m.aborted.holds(b) {
					st.RecordsRead += int64(b.NumRecords())
					continue // aborted: never to be read at read_committed
				}
				var kept int
				if b.IsControl() {
					// A marker is kept whole: readers need it to end its
					// transaction, and it is never compacted by key.
					filtered, kept = append(filtered[:0], b.Bytes()...), 1
					st.RecordsRead++
					st.RecordsKept++
				} else {
					filtered, kept, err = record.Filter(filtered[:0], b, &it, keep)
				}
				if err != nil {
					return discard(fmt.Errorf("log: clean %s: %w", s.Path(), err))
				}
				if kept == 0 {
					continue
				}
				fb, _, err := record.ParseBatch(filtered)
				if err != nil {
					return discard(err)
				}
				if err := out.Fits(fb, math.MaxInt32); err != nil {
					return discard(fmt.Errorf("log: clean %s: cleaned segment full: %w", s.Path(), err))
				}
				if _, err := out.Append(fb); err != nil {
					return discard(err)
				}
			}
		}
	}
	// The aborted transactions of the group go with it: the markers are
	// kept (control batches are never cleaned), so the entries still hold.
	for _, s := range group {
		entries, err := s.AbortedTxns()
		if err != nil {
			return discard(fmt.Errorf("log: clean %s: %w", s.Path(), err))
		}
		for _, e := range entries {
			if err := out.AppendAbortedTxn(e); err != nil {
				return discard(err)
			}
		}
	}
	out.Commit(out.Size())
	st.BytesWritten += out.Size()
	if err := errors.Join(out.Seal(), out.Sync(), out.SyncIndexes()); err != nil {
		return discard(err)
	}
	if err := out.Close(true); err != nil {
		return err
	}
	if err := l.fs.SyncDir(dir); err != nil {
		return err
	}
	st.SegmentsRead += len(group)
	st.SegmentsWritten++
	return l.swapIn(group, base)
}

// swapIn replaces group with the cleaned segment of the same base waiting
// in cleaning/.
func (l *Log) swapIn(group []*segment.Segment, base int64) error {
	defer l.lockState()()
	cleaned := func(suffix string) string { return filepath.Join(l.dir, cleaningDir, segment.FileName(base, suffix)) }
	swap := func(suffix string) string { return filepath.Join(l.dir, segment.FileName(base, suffix)+swapSuffix) }
	final := func(b int64, suffix string) string { return filepath.Join(l.dir, segment.FileName(b, suffix)) }
	abandon := func(err error) error {
		for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
			_ = l.fs.Remove(cleaned(suffix))
		}
		return err
	}
	if err := l.writable(); err != nil {
		return abandon(err)
	}
	// The group must still be in the log, whole and in place: retention or
	// truncation may have changed it while we cleaned.
	segs := l.segments()
	at := -1
	for i, s := range segs {
		if s == group[0] {
			at = i
			break
		}
	}
	if at < 0 || at+len(group) > len(segs)-1 {
		return abandon(nil)
	}
	for i, s := range group {
		if segs[at+i] != s {
			return abandon(nil)
		}
	}

	if err := l.markUnclean(); err != nil {
		return abandon(err)
	}
	// Before the commit point a failure leaves the old segments in force.
	removeSwaps := func() {
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
			_ = l.fs.Remove(swap(suffix))
		}
	}
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
		if err := l.fs.Rename(cleaned(suffix), swap(suffix)); err != nil {
			removeSwaps()
			return abandon(err)
		}
	}
	if err := l.fs.Rename(cleaned(segment.LogSuffix), swap(segment.LogSuffix)); err != nil {
		removeSwaps()
		return abandon(err)
	}
	// Committed: from here a failure must stop the log, and Open finishes
	// the swap.
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(err)
	}
	for _, s := range group {
		// Readers holding it go on reading the file they found, not
		// the cleaned one about to take its path.
		s.HoldOpen()
	}
	for _, s := range group {
		for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
			if err := l.fs.Remove(final(s.Base(), suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return l.fail(err)
			}
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(err)
	}
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix, segment.LogSuffix} {
		if err := l.fs.Rename(swap(suffix), final(base, suffix)); err != nil {
			return l.fail(err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(err)
	}
	ns, err := segment.Open(l.dir, base, l.opts.segmentOptions(), false)
	if err != nil {
		return l.fail(err)
	}
	ns.Commit(ns.Size())
	newSegs := append(append(append([]*segment.Segment(nil), segs[:at]...), ns), segs[at+len(group):]...)
	l.publish(newSegs)
	l.unsynced = dropDeleted(l.unsynced, group)
	for _, s := range group {
		s.Close(false) // its files are gone; readers holding it finish first
	}
	return nil
}

// finishSwaps completes or rolls back cleanings a crash interrupted: it
// removes cleaning/, and for every <base>.log.swap removes the segments whose
// offsets it covers and renames the swap files into place. Index swap files
// without a .log.swap belong to an uncommitted swap and are removed.
func (l *Log) finishSwaps() error {
	if err := removeAll(l, filepath.Join(l.dir, cleaningDir)); err != nil {
		return err
	}
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	logSwaps := map[int64]bool{}
	var bases []int64
	for _, e := range entries {
		if base, suffix, ok := segment.ParseFileName(e.Name()); ok && suffix == segment.LogSuffix+swapSuffix {
			logSwaps[base] = true
		} else if ok && suffix == segment.LogSuffix {
			bases = append(bases, base)
		}
	}
	changed := false
	for _, e := range entries {
		base, suffix, ok := segment.ParseFileName(e.Name())
		if ok && strings.HasSuffix(suffix, swapSuffix) && suffix != segment.LogSuffix+swapSuffix && !logSwaps[base] {
			if err := l.fs.Remove(filepath.Join(l.dir, e.Name())); err != nil {
				return err
			}
			changed = true
		}
	}
	for base := range logSwaps {
		swapLog := filepath.Join(l.dir, segment.FileName(base, segment.LogSuffix)+swapSuffix)
		next, err := segment.ScanEnd(l.fs, swapLog)
		if err != nil {
			return fmt.Errorf("log: finish an interrupted compaction: %w", err)
		}
		for _, b := range bases {
			if b >= base && (b < next || b == base) {
				for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix} {
					if err := l.fs.Remove(filepath.Join(l.dir, segment.FileName(b, suffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
						return err
					}
				}
			}
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix, segment.LogSuffix} {
			from := filepath.Join(l.dir, segment.FileName(base, suffix)+swapSuffix)
			if err := l.fs.Rename(from, filepath.Join(l.dir, segment.FileName(base, suffix))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		l.logger.Warn("finished a compaction swap interrupted by a crash", "segment", base, "covers_to", next)
		changed = true
	}
	if changed {
		return l.fs.SyncDir(l.dir)
	}
	return nil
}

// removeAll removes a directory of files (the cleaner's scratch space).
func removeAll(l *Log, dir string) error {
	entries, err := l.fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := l.fs.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return l.fs.Remove(dir)
}

// abortedTxns maps a producer id to its aborted transactions' offset
// ranges, [first offset, marker offset), in marker order.
type abortedTxns map[int64][][2]int64

// abortedRanges reads the aborted transactions of segs' .txnindex files.
func abortedRanges(segs []*segment.Segment) (abortedTxns, error) {
	out := abortedTxns{}
	for _, s := range segs {
		entries, err := s.AbortedTxns()
		if err != nil {
			return nil, fmt.Errorf("log: clean: %w", err)
		}
		for _, e := range entries {
			out[e.ProducerID] = append(out[e.ProducerID], [2]int64{e.FirstOffset, e.LastOffset})
		}
	}
	return out, nil
}

// holds reports whether b is data of an aborted transaction.
func (a abortedTxns) holds(b record.Batch) bool {
	if len(a) == 0 || !b.IsTransactional() || b.IsControl() {
		return false
	}
	for _, r := range a[b.ProducerID()] {
		if b.BaseOffset() >= r[0] && b.BaseOffset() < r[1] {
			return true
		}
	}
	return false
}
