package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/spoolmq/spool/internal/vfs"
)

// OffsetEntrySize is the size of an offset index entry.
const OffsetEntrySize = 8

// OffsetEntry maps an offset to the byte position of the batch that ends at
// it.
type OffsetEntry struct {
	Offset   int64
	Position int64
}

// Offset is a segment's offset index (.index). Append and the other
// mutators belong to one writer; Lookup and Entry may run concurrently with
// them.
type Offset struct {
	*file
	base int64
}

// OpenOffset opens or creates the offset index at path for a segment whose
// base offset is base. A writable index may be appended to until it holds
// maxBytes of entries; it is mapped at that size but its file grows in
// steps as entries arrive (see Reserve). A read-only one is mapped as it
// is. A file that is not a valid index gives an error wrapping ErrCorrupt.
func OpenOffset(fsys vfs.FS, path string, base int64, maxBytes int, writable bool) (*Offset, error) {
	f, err := open(fsys, path, OffsetEntrySize, maxBytes, writable, validOffsets)
	if err != nil {
		return nil, err
	}
	return &Offset{file: f, base: base}, nil
}

// validOffsets counts the leading entries whose relative offsets and
// positions both strictly increase.
func validOffsets(mm []byte, n int) int {
	var prevOff, prevPos int64 = -1, -1
	for i := 0; i < n; i++ {
		e := mm[i*OffsetEntrySize:]
		off, pos := int64(binary.BigEndian.Uint32(e)), int64(binary.BigEndian.Uint32(e[4:]))
		if off <= prevOff || pos <= prevPos {
			return i
		}
		prevOff, prevPos = off, pos
	}
	return n
}

// Base is the segment's base offset.
func (x *Offset) Base() int64 { return x.base }

// Path is the index file's path.
func (x *Offset) Path() string { return x.path }

// Len is the number of entries.
func (x *Offset) Len() int { return x.entries() }

// Full reports whether another entry would not fit.
func (x *Offset) Full() bool { return x.entries() >= x.max }

// Cap is the number of entries the index can hold: maxBytes of them while
// writable, its entries once trimmed. The file holds disk blocks for
// fewer until it grows (Allocated).
func (x *Offset) Cap() int { return x.max }

// Append adds an entry. The offset and position must both be greater than
// the last entry's, and the offset must be within 2^32-1 of the base.
func (x *Offset) Append(offset, position int64) error {
	rel := offset - x.base
	if rel < 0 || rel > math.MaxUint32 || position < 0 || position > math.MaxUint32 {
		return fmt.Errorf("%w: %s: offset %d at position %d does not fit base %d", ErrOutOfOrder, x.path, offset, position, x.base)
	}
	if last, ok := x.Last(); ok && (offset <= last.Offset || position <= last.Position) {
		return fmt.Errorf("%w: %s: offset %d at %d after offset %d at %d", ErrOutOfOrder, x.path, offset, position, last.Offset, last.Position)
	}
	return x.appendEntry(func(e []byte) {
		binary.BigEndian.PutUint32(e, uint32(rel))
		binary.BigEndian.PutUint32(e[4:], uint32(position))
	})
}

// Entry returns entry i (0 <= i < Len).
func (x *Offset) Entry(i int) (OffsetEntry, error) {
	var e OffsetEntry
	err := x.guard(func() { e = x.decode(x.entry(i)) })
	return e, err
}

func (x *Offset) decode(b []byte) OffsetEntry {
	return OffsetEntry{
		Offset:   x.base + int64(binary.BigEndian.Uint32(b)),
		Position: int64(binary.BigEndian.Uint32(b[4:])),
	}
}

// Last returns the last entry, if any.
func (x *Offset) Last() (OffsetEntry, bool) {
	n := x.entries()
	if n == 0 {
		return OffsetEntry{}, false
	}
	e, err := x.Entry(n - 1)
	return e, err == nil
}

// Lookup returns the entry with the greatest offset <= target. When there
// is none it returns false, and the scan starts at the segment's start.
func (x *Offset) Lookup(target int64) (OffsetEntry, bool, error) {
	rel := target - x.base
	if rel < 0 {
		return OffsetEntry{}, false, nil
	}
	if rel > math.MaxUint32 {
		rel = math.MaxUint32
	}
	i, err := x.search(rel, func(e []byte) int64 { return int64(binary.BigEndian.Uint32(e)) })
	if err != nil || i < 0 {
		return OffsetEntry{}, false, err
	}
	e, err := x.Entry(i)
	return e, err == nil, err
}

// TruncateAt removes the entries with an offset >= offset or a position >=
// position, as when the log is truncated there.
func (x *Offset) TruncateAt(offset, position int64) {
	n := x.entries()
	for n > 0 {
		e, err := x.Entry(n - 1)
		if err == nil && e.Offset < offset && e.Position < position {
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
func (x *Offset) Reserve(k int) error { return x.reserve(k) }

// Reset removes every entry.
func (x *Offset) Reset() { x.truncateEntries(0) }

// Trim cuts the file to its entries and makes the index read-only, as when
// its segment is sealed.
func (x *Offset) Trim() error { return x.trim() }

// Sync makes the entries durable.
func (x *Offset) Sync() error { return x.sync() }

// AssumeSynced records that the file, as it is, is on stable storage (its
// owner closed it cleanly after syncing it, and nothing wrote since): Sync
// does nothing until the index changes.
func (x *Offset) AssumeSynced() { x.assumeSynced() }

// Close unmaps and closes the index; a writable one is trimmed first.
func (x *Offset) Close() error { return x.close(true) }

// CloseNoTrim unmaps and closes the index without trimming it (the index of
// a segment whose log is not being closed cleanly).
func (x *Offset) CloseNoTrim() error { return x.close(false) }
