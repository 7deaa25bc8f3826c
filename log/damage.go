package log

import (
	"sync"

	"github.com/spoolmq/spool/segment"
)

// Damage found by reads.
//
// Every read checks the batches it hands out: Read and ReadUpTo as they copy
// them, Span.Verify before a zero-copy send. A batch that does not verify is
// never returned; the log remembers where it is, so that it is logged and
// counted once however often it is read (a consumer retrying at it would
// otherwise flood the log), and so that a replica can repair its log
// (Damage, then Truncate and copy the batches again from a healthy replica).

// Stats counts what a log found that an operator must know.
type Stats struct {
	// CorruptBatches counts the damaged batches reads have found in this
	// log since it was opened, each once however often it was read. None
	// of them was returned; readers got an error wrapping ErrCorrupt.
	CorruptBatches int64
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.damage.mu.Lock()
	defer l.damage.mu.Unlock()
	return Stats{CorruptBatches: l.damage.found}
}

// damageSet is where reads found damaged batches.
type damageSet struct {
	mu    sync.Mutex
	at    map[damageKey]int64 // -> the first offset the damaged batch would hold
	found int64
}

// damageKey locates a damaged batch: the segment (by base offset) and the
// batch's byte position in it.
type damageKey struct{ base, pos int64 }

// noteDamage records the damaged batch at pos in s, which would begin at
// offset, and logs it the first time. truncs is the log's truncation count
// when the read began: if the log was truncated since, the read may have
// seen bytes cut and rewritten under it, which is no evidence of damage.
func (l *Log) noteDamage(s *segment.Segment, pos, offset int64, err error, truncs int64) {
	k := damageKey{s.Base(), pos}
	l.damage.mu.Lock()
	if _, seen := l.damage.at[k]; seen || l.truncs.Load() != truncs {
		l.damage.mu.Unlock()
		return
	}
	if l.damage.at == nil {
		l.damage.at = map[damageKey]int64{}
	}
	l.damage.at[k] = offset
	l.damage.found++
	l.damage.mu.Unlock()
	l.logger.Error("damaged batch: reads of it fail until it is repaired", "file", s.Path(), "position", pos, "offset", offset, "err", err)
}

// Damage returns the offset at which the lowest damaged batch that reads
// have found, and that the log still holds, would begin; ok is false if
// there is none. Truncating the log there (Truncate) removes the damage and
// everything after it, which a replica then copies again from a healthy
// one.
func (l *Log) Damage() (offset int64, ok bool) {
	start, next := l.start.Load(), l.next.Load()
	segs := l.segments()
	l.damage.mu.Lock()
	defer l.damage.mu.Unlock()
	for k, off := range l.damage.at {
		if off < start || off >= next || (ok && off >= offset) {
			continue
		}
		for _, s := range segs {
			if s.Base() == k.base && k.pos < s.Committed() {
				offset, ok = off, true
				break
			}
		}
	}
	return offset, ok
}

// truncated counts a truncation (readers re-seek; a read that overlapped it
// records no damage) and drops the damage records at or after offset: the
// log was cut there, and what is written at those positions next is new.
// Both under the damage lock, so that no read's record slips in between.
func (l *Log) truncated(offset int64) {
	l.damage.mu.Lock()
	defer l.damage.mu.Unlock()
	l.truncs.Add(1)
	for k, off := range l.damage.at {
		if off >= offset {
			delete(l.damage.at, k)
		}
	}
}
