package controller

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// truncateFile is the file in the log's directory that holds a truncation
// inside a batch while it is under way (see LogStore):
//
//	 0          8                               8+n      12+n
//	+----------+-------------------------------+---------+
//	| keep     | kept: the batch's entries     | crc32c  |
//	| start    | before the cut, as a batch    | of all  |
//	| int64    | at the batch's base offset    | before  |
//	+----------+-------------------------------+---------+
//
// keep start is the log start offset to restore (the batch may begin below
// it: a head deletion may have cut it before); big-endian, as Kafka.
const truncateFile = "raft-truncate"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// truncation is a cut inside a batch: the log goes back to the batch's
// base and kept, the batch's entries before the cut, is appended again.
type truncation struct {
	keepStart int64
	kept      record.Batch
}

func (t truncation) encode() []byte {
	out := binary.BigEndian.AppendUint64(nil, uint64(t.keepStart))
	out = append(out, t.kept.Bytes()...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// parseTruncation decodes a truncation file; damage is record.ErrCorrupt.
func parseTruncation(data []byte) (truncation, error) {
	if len(data) < 8+record.HeaderSize+4 {
		return truncation{}, fmt.Errorf("%w: %d bytes, too short", record.ErrCorrupt, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return truncation{}, fmt.Errorf("%w: crc32c mismatch", record.ErrCorrupt)
	}
	b, n, err := record.ParseBatch(bytes.Clone(body[8:]))
	if err != nil {
		return truncation{}, err
	}
	if n != len(body)-8 {
		return truncation{}, fmt.Errorf("%w: %d bytes after the batch", record.ErrCorrupt, len(body)-8-n)
	}
	if err := b.Verify(); err != nil {
		return truncation{}, err
	}
	start := int64(binary.BigEndian.Uint64(body))
	if start < 0 || start > b.NextOffset() {
		return truncation{}, fmt.Errorf("%w: start offset %d outside [0, %d]", record.ErrCorrupt, start, b.NextOffset())
	}
	return truncation{keepStart: start, kept: b}, nil
}

// keptPrefix re-encodes the records of b before offset off (b holds off,
// and begins before it) as one batch, as they were: offsets, timestamps,
// keys, values, headers and the batch's term.
func (s *LogStore) keptPrefix(b record.Batch, off int64) (truncation, error) {
	it := s.iters.Get().(*record.Iterator)
	defer s.iters.Put(it)
	var bld record.Builder
	bld.Reset(record.BatchOptions{})
	it.Reset(b)
	for it.Next() && it.Record().Offset < off {
		if err := bld.Add(it.Record()); err != nil {
			return truncation{}, err
		}
	}
	if err := it.Err(); err != nil {
		return truncation{}, err
	}
	built, err := bld.Build()
	if err != nil {
		return truncation{}, err
	}
	kept, _, err := record.ParseBatch(bytes.Clone(built.Bytes()))
	if err != nil {
		return truncation{}, err
	}
	kept.SetBaseOffset(b.BaseOffset())
	kept.SetPartitionLeaderEpoch(b.PartitionLeaderEpoch())
	if kept.NextOffset() != off {
		return truncation{}, fmt.Errorf("%w: the batch at offset %d does not hold offsets %d..%d densely",
			record.ErrCorrupt, b.BaseOffset(), b.BaseOffset(), off-1)
	}
	return truncation{keepStart: s.log.StartOffset(), kept: kept}, nil
}

// truncateInsideBatch cuts the log at the end of t.kept: it records t
// durably, then applies it. Called with mu and cutMu held.
func (s *LogStore) truncateInsideBatch(t truncation) error {
	if err := vfs.WriteFileAtomic(s.fs, filepath.Join(s.log.Dir(), truncateFile), t.encode()); err != nil {
		return s.fail(err) // the file may be there: a reopen applies it
	}
	return s.applyTruncation(t)
}

// applyTruncation brings the log from wherever a crash left it - not yet
// cut, cut to the batch's base, or cut and refilled - to the log cut at the
// end of t.kept, and then removes the truncation file. It refuses a log in
// any other state. Called with mu and cutMu held, or at open.
func (s *LogStore) applyTruncation(t truncation) error {
	path := filepath.Join(s.log.Dir(), truncateFile)
	base, next := t.kept.BaseOffset(), t.kept.NextOffset()
	if s.log.EndOffset() > next {
		if _, err := s.log.Truncate(next); err != nil { // the batch holding next goes whole
			return s.fail(err)
		}
	}
	switch end := s.log.EndOffset(); end {
	case base:
		if _, err := s.log.AppendTrusted(t.kept); err != nil {
			return s.fail(err)
		}
	case next:
	default:
		return s.fail(fmt.Errorf("%w: the log ends at offset %d, neither where the batch being cut starts (%d) nor where its kept entries end (%d) (%s)",
			record.ErrCorrupt, end, base, next, path))
	}
	if s.log.StartOffset() < t.keepStart {
		// A crash between the cut and the refill made the log empty at
		// base, below the start: put the start back.
		if err := s.log.DeleteRecordsBefore(t.keepStart); err != nil {
			return s.fail(err)
		}
	}
	if err := s.fs.Remove(path); err != nil {
		return s.fail(err)
	}
	if err := s.fs.SyncDir(s.log.Dir()); err != nil {
		return s.fail(err)
	}
	return nil
}

// fail records a write that stopped half way: the store refuses writes
// until it is reopened, which finishes the work from the truncation file.
// Called with mu held (or at open).
func (s *LogStore) fail(err error) error {
	if s.broken == nil {
		s.broken = fmt.Errorf("controller: raft log: truncation failed half way; reopen to finish it: %w", err)
	}
	return s.broken
}
