package controller

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spoolmq/spool/record"
)

// Record header keys of a stored raft.Log (see LogStore).
const (
	headerExtensions = "ext"
	headerNanos      = "ns"
)

// typeKeys holds the one-byte record keys, one per raft.LogType, so that
// encoding an entry does not allocate its key.
var typeKeys = func() (k [256][1]byte) {
	for i := range k {
		k[i][0] = byte(i)
	}
	return k
}()

// encodedBatch is a batch StoreLogs writes, with the entries it holds.
type encodedBatch struct {
	batch   record.Batch
	entries []*raft.Log
}

// decoded is the batch as the read cache keeps it.
func (eb encodedBatch) decoded() *decodedBatch {
	db := &decodedBatch{base: int64(eb.entries[0].Index - 1), entries: make([]raft.Log, len(eb.entries))}
	for i, e := range eb.entries {
		db.entries[i] = *e
	}
	return db
}

// encodeBatches encodes entries as batches: one per run of entries of one
// term, cut before an entry that would take the batch past
// batchTargetBytes (or maxBatch, if smaller). An entry that cannot be
// stored, or alone makes a batch over maxBatch bytes, is ErrBadEntry.
func encodeBatches(logs []*raft.Log, maxBatch int) ([]encodedBatch, error) {
	target := min(batchTargetBytes, maxBatch)
	var (
		out  []encodedBatch
		bld  record.Builder
		run  []*raft.Log
		term uint64
		hdrs [2]record.Header
	)
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		built, err := bld.Build()
		if err != nil {
			return fmt.Errorf("%w: index %d: %w", ErrBadEntry, run[0].Index, err)
		}
		if built.Size() > maxBatch {
			return fmt.Errorf("%w: index %d: %d bytes encoded, more than a segment (%d bytes)",
				ErrBadEntry, run[0].Index, built.Size(), maxBatch)
		}
		b, _, err := record.ParseBatch(bytes.Clone(built.Bytes())) // Build aliases the builder
		if err != nil {
			return err
		}
		b.SetPartitionLeaderEpoch(int32(term))
		out = append(out, encodedBatch{batch: b, entries: run})
		run = nil
		return nil
	}
	for _, l := range logs {
		if l.Term > math.MaxInt32 {
			return nil, fmt.Errorf("%w: index %d: term %d does not fit the 32-bit partitionLeaderEpoch", ErrBadEntry, l.Index, l.Term)
		}
		rec, err := entryRecord(l, hdrs[:0])
		if err != nil {
			return nil, err
		}
		if len(run) > 0 && (l.Term != term || bld.Size()+record.EncodedSize(&rec, int32(len(run)), 0) > target) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if len(run) == 0 {
			bld.Reset(record.BatchOptions{})
			term = l.Term
		}
		if err := bld.Add(&rec); err != nil {
			return nil, fmt.Errorf("%w: index %d: %w", ErrBadEntry, l.Index, err)
		}
		run = append(run, l)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// entryRecord is the record that stores l; its headers use hdrs' memory.
func entryRecord(l *raft.Log, hdrs []record.Header) (record.Record, error) {
	r := record.Record{Key: typeKeys[l.Type][:], Value: l.Data}
	if !l.AppendedAt.IsZero() {
		if l.AppendedAt.Before(time.Unix(0, 0)) {
			return r, fmt.Errorf("%w: index %d: AppendedAt %v is before 1970", ErrBadEntry, l.Index, l.AppendedAt)
		}
		r.Timestamp = l.AppendedAt
		if ns := l.AppendedAt.Nanosecond() % int(time.Millisecond); ns != 0 {
			hdrs = append(hdrs, record.Header{Key: headerNanos, Value: binary.BigEndian.AppendUint32(nil, uint32(ns))})
		}
	}
	if l.Extensions != nil {
		hdrs = append(hdrs, record.Header{Key: headerExtensions, Value: l.Extensions})
	}
	if len(hdrs) > 0 {
		r.Headers = hdrs
	}
	return r, nil
}

// decode turns a batch read from the log back into entries, in memory of
// their own.
func (s *LogStore) decode(b record.Batch) (*decodedBatch, error) {
	term := b.PartitionLeaderEpoch()
	if term < 0 {
		return nil, fmt.Errorf("%w: batch at offset %d has no term (partitionLeaderEpoch %d)", record.ErrCorrupt, b.BaseOffset(), term)
	}
	it := s.iters.Get().(*record.Iterator)
	defer s.iters.Put(it)
	it.Reset(b) // checks the CRC first
	if err := it.Err(); err != nil {
		return nil, err
	}
	// The record count comes from the batch: it sizes nothing before the
	// records themselves are decoded (each takes at least 7 bytes).
	db := &decodedBatch{base: b.BaseOffset(), entries: make([]raft.Log, 0, max(0, min(int(b.NumRecords()), b.Size()/7)))}
	for it.Next() {
		r := it.Record()
		if want := db.base + int64(len(db.entries)); r.Offset != want {
			return nil, fmt.Errorf("%w: batch at offset %d: record at offset %d, want %d", record.ErrCorrupt, db.base, r.Offset, want)
		}
		if len(r.Key) != 1 {
			return nil, fmt.Errorf("%w: record at offset %d: a %d-byte key, want the 1-byte entry type", record.ErrCorrupt, r.Offset, len(r.Key))
		}
		e := raft.Log{Index: uint64(r.Offset) + 1, Term: uint64(term), Type: raft.LogType(r.Key[0]), Data: bytes.Clone(r.Value)}
		var nanos time.Duration
		for _, h := range r.Headers {
			switch h.Key {
			case headerExtensions:
				e.Extensions = append([]byte{}, h.Value...)
			case headerNanos:
				if len(h.Value) != 4 {
					return nil, fmt.Errorf("%w: record at offset %d: a %d-byte %q header", record.ErrCorrupt, r.Offset, len(h.Value), headerNanos)
				}
				nanos = time.Duration(binary.BigEndian.Uint32(h.Value))
			}
		}
		if !r.Timestamp.IsZero() {
			e.AppendedAt = r.Timestamp.Add(nanos)
		}
		db.entries = append(db.entries, e)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return db, nil
}

// decodedBatch is the entries of one batch, immutable once made: readers
// share it.
type decodedBatch struct {
	base    int64 // offset of entries[0]
	entries []raft.Log
}

// entry is the entry at offset off, or nil.
func (d *decodedBatch) entry(off int64) *raft.Log {
	if i := off - d.base; i >= 0 && i < int64(len(d.entries)) {
		return &d.entries[i]
	}
	return nil
}

func (d *decodedBatch) end() int64 { return d.base + int64(len(d.entries)) }

// cacheBatches is how many decoded batches the read cache keeps: enough
// for the FSM, a few followers' replication and the batches just stored.
const cacheBatches = 16

// batchCache keeps the last batches decoded or stored. Entries that
// changed on disk (a truncation, a restart of the log) are dropped from it
// by the writer while readers are held off (LogStore.cutMu), so it never
// serves an entry the log no longer has at that index.
type batchCache struct {
	mu    sync.Mutex
	slots [cacheBatches]*decodedBatch
	next  int // the slot to fill next
}

// get returns the cached entry at offset off.
func (c *batchCache) get(off int64) (*raft.Log, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.slots {
		if d == nil {
			continue
		}
		if e := d.entry(off); e != nil {
			return e, true
		}
	}
	return nil, false
}

// put keeps d, replacing any batch that overlaps it, else the oldest.
func (c *batchCache) put(d *decodedBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.slots {
		if o != nil && o.base < d.end() && d.base < o.end() {
			c.slots[i] = nil
		}
	}
	c.slots[c.next] = d
	c.next = (c.next + 1) % len(c.slots)
}

// drop forgets the batches for which gone reports true.
func (c *batchCache) drop(gone func(*decodedBatch) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range c.slots {
		if d != nil && gone(d) {
			c.slots[i] = nil
		}
	}
}
