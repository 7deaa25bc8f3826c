package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/spoolmq/spool/index"
	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// indexFile is an index file's entries, read without modifying the file.
// Exactly one of Offsets and Times is used, by the file's kind.
type indexFile struct {
	Path    string
	Base    int64
	Suffix  string // segment.IndexSuffix or segment.TimeIndexSuffix
	Offsets []index.OffsetEntry
	Times   []index.TimeEntry
	// Untrimmed is set when zeros follow the in-order entries: the
	// unwritten rest of the file's last growth step. That is how a log
	// that is open, or was not closed cleanly, leaves its active
	// segment's indexes (a closed segment's are cut to their entries).
	Untrimmed bool
	// FileSize is the file's size in bytes.
	FileSize int64
}

// Len is the number of entries.
func (x *indexFile) Len() int { return len(x.Offsets) + len(x.Times) }

// isTime reports whether the suffix names a time index.
func isTime(suffix string) bool { return suffix == segment.TimeIndexSuffix }

// readIndex reads the offset index (suffix .index) or time index
// (.timeindex) at path, for a segment whose base offset is base. It opens
// the file read-only with package index, which reads any index file -
// trimmed, or untrimmed at whatever size its growth had reached - and
// rejects one that is not whole entries in order followed only by zeros
// (index.ErrCorrupt). A missing file gives an error wrapping
// os.ErrNotExist.
func readIndex(path string, base int64, suffix string) (*indexFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	x := &indexFile{Path: path, Base: base, Suffix: suffix, FileSize: st.Size()}
	if isTime(suffix) {
		err = x.readTimes()
	} else {
		err = x.readOffsets()
	}
	if err != nil {
		return nil, err
	}
	return x, nil
}

// readOffsets reads an offset index with package index. (The maximum size
// matters only to a writable index.)
func (x *indexFile) readOffsets() error {
	ix, err := index.OpenOffset(vfs.Default, x.Path, x.Base, segment.DefaultIndexMaxBytes, false)
	if err != nil {
		return err
	}
	defer ix.Close()
	x.Untrimmed = ix.Untrimmed()
	x.Offsets = make([]index.OffsetEntry, 0, ix.Len())
	for i := range ix.Len() {
		e, err := ix.Entry(i)
		if err != nil {
			return err
		}
		x.Offsets = append(x.Offsets, e)
	}
	return nil
}

// readTimes reads a time index with package index.
func (x *indexFile) readTimes() error {
	ix, err := index.OpenTime(vfs.Default, x.Path, x.Base, segment.DefaultIndexMaxBytes, false)
	if err != nil {
		return err
	}
	defer ix.Close()
	x.Untrimmed = ix.Untrimmed()
	x.Times = make([]index.TimeEntry, 0, ix.Len())
	for i := range ix.Len() {
		e, err := ix.Entry(i)
		if err != nil {
			return err
		}
		x.Times = append(x.Times, e)
	}
	return nil
}

// indexChecker checks a segment's offset and time index entries against
// the batches of its .log, which are fed to it in file order (observe) -
// a merge of two sorted sequences, so a segment of any size is checked in
// memory proportional to its index entries:
//
//   - an offset index entry must point at the position where a batch
//     starts, and that batch's last offset must be the entry's offset;
//   - a time index entry's offset must lie within the log, and its
//     timestamp must be the greatest batch max-timestamp of the batches up
//     to (and including) the one holding that offset.
//
// Either index may be nil (missing or unreadable).
type indexChecker struct {
	off, tim *indexFile
	nextOff  int // next offset index entry to match
	nextTim  int // next time index entry to match
	maxTS    int64
	verdicts map[*indexFile]*indexVerdict
}

// indexVerdict is what an indexChecker found in one index file.
type indexVerdict struct {
	// Problems are the entries that disagree with the log, by entry
	// number, with the reason.
	Problems map[int]string
	// UncheckedFrom is the first of the entries that could not be checked
	// because they lie past the point where the log could no longer be
	// read (damage, a torn tail); it is the index's length when every
	// entry was checked.
	UncheckedFrom int
}

func newIndexChecker(off, tim *indexFile) *indexChecker {
	c := &indexChecker{off: off, tim: tim, maxTS: record.NoTimestamp, verdicts: map[*indexFile]*indexVerdict{}}
	for _, x := range []*indexFile{off, tim} {
		if x != nil {
			c.verdicts[x] = &indexVerdict{Problems: map[int]string{}, UncheckedFrom: x.Len()}
		}
	}
	return c
}

// observe takes the next batch of the .log.
func (c *indexChecker) observe(h segment.Header) {
	if c.off != nil {
		es, bad := c.off.Offsets, c.verdicts[c.off].Problems
		for ; c.nextOff < len(es) && es[c.nextOff].Position <= h.Position; c.nextOff++ {
			e := es[c.nextOff]
			if e.Position < h.Position {
				bad[c.nextOff] = fmt.Sprintf("position %d is inside a batch, not at its start", e.Position)
			} else if e.Offset != h.LastOffset {
				bad[c.nextOff] = fmt.Sprintf("the batch at position %d ends at offset %d, not %d", e.Position, h.LastOffset, e.Offset)
			}
		}
	}
	if c.tim != nil {
		c.settleTimes(h.BaseOffset)
	}
	c.maxTS = max(c.maxTS, h.MaxTimestamp)
}

// settleTimes checks the time index entries whose offsets lie before
// offset, against the greatest timestamp seen so far.
func (c *indexChecker) settleTimes(offset int64) {
	es, bad := c.tim.Times, c.verdicts[c.tim].Problems
	for ; c.nextTim < len(es) && es[c.nextTim].Offset < offset; c.nextTim++ {
		if e := es[c.nextTim]; e.Timestamp != c.maxTS {
			bad[c.nextTim] = fmt.Sprintf("timestamp %d, but the greatest batch timestamp up to offset %d is %d", e.Timestamp, e.Offset, c.maxTS)
		}
	}
}

// finish checks the entries no batch matched. validEnd is the end of the
// last batch observed and nextOffset the offset after it; complete says
// whether the batches observed were the whole file. When they were not,
// the entries past validEnd (or nextOffset) are left unchecked rather
// than called wrong: the log's damage is the problem to report.
func (c *indexChecker) finish(validEnd, nextOffset int64, complete bool) {
	if c.off != nil {
		v := c.verdicts[c.off]
		for ; c.nextOff < len(c.off.Offsets); c.nextOff++ {
			e := c.off.Offsets[c.nextOff]
			switch {
			case e.Position < validEnd:
				v.Problems[c.nextOff] = fmt.Sprintf("position %d is inside a batch, not at its start", e.Position)
			case !complete:
				v.UncheckedFrom = c.nextOff
				c.nextOff = len(c.off.Offsets)
			default:
				v.Problems[c.nextOff] = fmt.Sprintf("position %d is past the last batch, which ends at %d", e.Position, validEnd)
			}
		}
	}
	if c.tim != nil {
		c.settleTimes(nextOffset)
		v := c.verdicts[c.tim]
		if !complete {
			v.UncheckedFrom = c.nextTim
			c.nextTim = len(c.tim.Times)
		}
		for ; c.nextTim < len(c.tim.Times); c.nextTim++ {
			e := c.tim.Times[c.nextTim]
			v.Problems[c.nextTim] = fmt.Sprintf("offset %d is past the end of the log (next offset %d)", e.Offset, nextOffset)
		}
	}
}

// verdict returns what was found in x, which must be one of the checker's
// indexes, after finish.
func (c *indexChecker) verdict(x *indexFile) *indexVerdict { return c.verdicts[x] }

// sortedKeys returns m's keys in increasing order.
func sortedKeys(m map[int]string) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// segmentFile parses a segment file name of one of the three kinds.
func segmentFile(name string) (base int64, suffix string, ok bool) {
	base, suffix, ok = segment.ParseFileName(name)
	if !ok {
		return 0, "", false
	}
	switch suffix {
	case segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, segment.TxnIndexSuffix:
		return base, suffix, true
	}
	return 0, "", false
}
