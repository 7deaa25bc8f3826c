package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/spoolmq/spool/internal/vfs"
)

// TimeEntrySize is the size of a time index entry.
const TimeEntrySize = 12

// TimeEntry says that the records up to Offset include one with timestamp
// Timestamp, the greatest so far in the segment.
type TimeEntry struct {
	Timestamp int64
	Offset    int64
}

// Time is a segment's time index (.timeindex). Like Offset, it has one
// writer and any number of concurrent readers.
type Time struct {
	*file
	base int64
}

// OpenTime opens or creates the time index at path; see OpenOffset.
func OpenTime(fsys vfs.FS, path string, base int64, maxBytes int, writable bool) (*Time, error) {
	f, err := open(fsys, path, TimeEntrySize, maxBytes, writable, validTimes)
	if err != nil {
		return nil, err
	}
	return &Time{file: f, base: base}, nil
}

// validTimes counts the leading entries whose timestamps strictly increase
// and whose offsets never decrease. A zero timestamp ends the run: entries
// for records without timestamps are never written, and it is what an
// unwritten entry of a grown file holds.
func validTimes(mm []byte, n int) int {
	var prevTS, prevOff int64 = 0, -1
	for i := 0; i < n; i++ {
		e := mm[i*TimeEntrySize:]
		ts, off := int64(binary.BigEndian.Uint64(e)), int64(binary.BigEndian.Uint32(e[8:]))
		if ts <= prevTS || off < prevOff {
			return i
		}
		prevTS, prevOff = ts, off
	}
	return n
}

// Path is the index file's path.
func (x *Time) Path() string { return x.path }

// Len is the number of entries.
func (x *Time) Len() int { return x.entries() }

// Full reports whether another entry would not fit.
func (x *Time) Full() bool { return x.entries() >= x.max }

// Cap is the number of entries the index can hold; see Offset.Cap.
func (x *Time) Cap() int { return x.max }

// MaybeAppend adds an entry if timestamp is greater than the last entry's;
// it reports whether it did. Timestamps <= 0 are not indexed.
func (x *Time) MaybeAppend(timestamp, offset int64) (bool, error) {
	rel := offset - x.base
	if rel < 0 || rel > math.MaxUint32 {
		return false, fmt.Errorf("%w: %s: offset %d does not fit base %d", ErrOutOfOrder, x.path, offset, x.base)
	}
	if timestamp <= 0 {
		return false, nil
	}
	if last, ok := x.Last(); ok {
		if timestamp <= last.Timestamp {
			return false, nil
		}
		if offset < last.Offset {
			return false, fmt.Errorf("%w: %s: offset %d after %d", ErrOutOfOrder, x.path, offset, last.Offset)
		}
	}
	err := x.appendEntry(func(e []byte) {
		binary.BigEndian.PutUint64(e, uint64(timestamp))
		binary.BigEndian.PutUint32(e[8:], uint32(rel))
	})
	return err == nil, err
}

// Entry returns entry i (0 <= i < Len).
func (x *Time) Entry(i int) (TimeEntry, error) {
	var e TimeEntry
	err := x.guard(func() {
		b := x.entry(i)
		e = TimeEntry{Timestamp: int64(binary.BigEndian.Uint64(b)), Offset: x.base + int64(binary.BigEndian.Uint32(b[8:]))}
	})
	return e, err
}

// Last returns the last entry, if any: the segment's greatest timestamp as
// far as the index knows.
func (x *Time) Last() (TimeEntry, bool) {
	n := x.entries()
	if n == 0 {
		return TimeEntry{}, false
	}
	e, err := x.Entry(n - 1)
	return e, err == nil
}

// Lookup returns the entry with the greatest timestamp < target: the records
// before its offset all have timestamps < target, so a search for the first
// record at or after target can start there. With no such entry it returns
// false and the search starts at the segment's start.
func (x *Time) Lookup(target int64) (TimeEntry, bool, error) {
	i, err := x.search(target-1, func(e []byte) int64 { return int64(binary.BigEndian.Uint64(e)) })
	if err != nil || i < 0 {
		return TimeEntry{}, false, err
	}
	e, err := x.Entry(i)
	return e, err == nil, err
}

// TruncateAt removes the entries for offsets >= offset.
func (x *Time) TruncateAt(offset int64) {
	n := x.entries()
	for n > 0 {
		e, err := x.Entry(n - 1)
		if err == nil && e.Offset < offset {
			break
		}
		n--
	}
	x.truncateEntries(n)
}

// Reserve makes sure the file has disk blocks for k more entries (or as
// many as Cap still allows), growing it if not. A full disk is an error
// here and nothing is written; after a nil return the next k appends
// cannot fail for lack of space.
func (x *Time) Reserve(k int) error { return x.reserve(k) }

// Reset removes every entry.
func (x *Time) Reset() { x.truncateEntries(0) }

// Trim cuts the file to its entries and makes the index read-only.
func (x *Time) Trim() error { return x.trim() }

// Sync makes the entries durable.
func (x *Time) Sync() error { return x.sync() }

// AssumeSynced records that the file, as it is, is on stable storage (its
// owner closed it cleanly after syncing it, and nothing wrote since): Sync
// does nothing until the index changes.
func (x *Time) AssumeSynced() { x.assumeSynced() }

// Close unmaps and closes the index; a writable one is trimmed first.
func (x *Time) Close() error { return x.close(true) }

// CloseNoTrim unmaps and closes the index without trimming it.
func (x *Time) CloseNoTrim() error { return x.close(false) }
