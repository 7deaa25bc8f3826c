package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// RecoveryResult reports what Recover found.
type RecoveryResult struct {
	// From is the position checking started at: the last index entry
	// before the requested position that checked out, or 0.
	From int64
	// ValidSize is the end of the last valid batch. The segment's size is
	// set to it: nothing after it is read, and appends go there.
	ValidSize int64
	// FileSize is the size of the file when checking began.
	FileSize int64
	// Batches is the number of batches checked.
	Batches int
	// Err says why checking stopped before FileSize; nil if it did not.
	Err error
	// DataAfter reports that a valid batch lies beyond the invalid one: the
	// damage is inside the file, not a torn tail left by a crash.
	DataAfter bool
}

// Recover checks every batch from position from to the end of the file -
// framing, magic, CRC-32C, offsets increasing and inside the segment's range
// - and rebuilds the index entries past from. Index entries before from are
// kept (the log made them durable with the data) once the last of them is
// confirmed against the batch it points at.
//
// Recover does not change the .log file: when it stops early, the caller
// either cuts the tail off (DropTail) or refuses the damage. The segment must
// be writable.
func (s *Segment) Recover(from int64) (RecoveryResult, error) {
	// Check to the end of the file, not to the size an earlier Resume or
	// Recover settled on: the bytes past it are what needs checking.
	f, err := s.acquire()
	if err != nil {
		return RecoveryResult{}, err
	}
	defer s.file.Release()
	st, err := f.Stat()
	if err != nil {
		return RecoveryResult{}, fmt.Errorf("segment: stat %s: %w", s.logPath, err)
	}
	return s.restore(from, st.Size(), true)
}

// DropTail cuts the .log file to the segment's size, removing what Recover
// found invalid, and fsyncs it.
func (s *Segment) DropTail() error {
	size := s.size.Load()
	f, err := s.acquire()
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	s.file.Release()
	s.synced.Store(false)
	if err != nil {
		return fmt.Errorf("segment: truncate %s to %d: %w", s.logPath, size, err)
	}
	return s.Sync()
}

// restore rebuilds the writer state and the index entries for the batches
// in [from, end): it keeps the index entries before from, confirms the last
// of them, and walks the batches from its position, checking each fully when
// verify is set (headers only otherwise).
func (s *Segment) restore(from, end int64, verify bool) (RecoveryResult, error) {
	ix := s.idx.Load()
	if ix == nil {
		return RecoveryResult{}, fmt.Errorf("segment: %s is not writable", s.logPath)
	}
	f, err := s.acquire()
	if err != nil {
		return RecoveryResult{}, err
	}
	defer s.file.Release()
	if s.rebuild.Swap(false) {
		from = 0
	}
	s.maxTS.Store(record.NoTimestamp)
	s.maxTSOffset, s.lastPos, s.sinceIndex = s.base, -1, 0
	s.firstTS = record.NoTimestamp
	s.next.Store(s.base)
	if from > 0 {
		if h, err := s.headerAt(0); err == nil {
			s.firstTS = h.MaxTimestamp
		}
	}

	ix.off.TruncateAt(math.MaxInt64, from)
	start := int64(0)
	if e, ok := ix.off.Last(); ok {
		if h, err := s.headerAt(e.Position); err == nil && h.LastOffset == e.Offset && h.End() <= end {
			start = e.Position
			ix.tim.TruncateAt(e.Offset + 1)
			if t, ok := ix.tim.Last(); ok {
				s.maxTS.Store(t.Timestamp)
				s.maxTSOffset = t.Offset
			}
		} else {
			start = 0
		}
	}
	if start == 0 {
		ix.off.Reset()
		ix.tim.Reset()
	}

	res := RecoveryResult{From: start, FileSize: end, ValidSize: start}
	v := newVerifier(f)
	expect := s.base // the least base offset the next batch may have
	pos := start
	for pos < end {
		var h Header
		var err error
		if verify {
			h, err = v.batchAt(pos, end)
		} else {
			h, err = v.headerAt(pos, end)
		}
		if err == nil {
			err = s.checkOffsets(h, expect)
		}
		if err != nil {
			res.Err = err
			if verify {
				res.DataAfter = v.anyBatchIn(pos+1, end)
			}
			break
		}
		if err := s.track(ix, h); err != nil {
			return res, err
		}
		expect = h.NextOffset()
		pos = h.End()
		res.Batches++
		res.ValidSize = pos
	}
	s.size.Store(res.ValidSize)
	s.committed.Store(res.ValidSize)
	return res, nil
}

// checkOffsets checks a batch's offsets against the segment and the batch
// before it.
func (s *Segment) checkOffsets(h Header, expect int64) error {
	if h.BaseOffset < expect {
		return fmt.Errorf("%w: base offset %d, expected at least %d", record.ErrCorrupt, h.BaseOffset, expect)
	}
	if h.LastOffset-s.base > math.MaxInt32 {
		return fmt.Errorf("%w: last offset %d is out of range for base %d", record.ErrCorrupt, h.LastOffset, s.base)
	}
	return nil
}

// headerAt reads and parses the batch header at pos.
func (s *Segment) headerAt(pos int64) (Header, error) {
	f, err := s.acquire()
	if err != nil {
		return Header{}, err
	}
	var hb [record.HeaderSize]byte
	n, err := f.ReadAt(hb[:], pos)
	s.file.Release()
	if n < len(hb) {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: file ends at %d", record.ErrTruncated, pos+int64(n))
		}
		return Header{}, err
	}
	return parseHeader(hb[:], pos)
}

// verifyBufSize is the read-ahead of a verifying walk. Batches up to this
// size are checked in memory; larger ones are checksummed piece by piece.
const verifyBufSize = 1 << 20

// minVerifyBufSize is the smallest read buffer of a walk: above the Go
// runtime's largest size class (32 KiB), so it is a large object.
const minVerifyBufSize = 64 << 10

// verifier walks a file reading ahead, to check batches in full.
type verifier struct {
	f      vfs.File
	buf    []byte
	bufPos int64
	bufLen int
}

func newVerifier(f vfs.File) *verifier {
	return &verifier{f: f, bufPos: -1}
}

// window returns the n bytes at pos (n <= verifyBufSize), reading them in if
// the buffer does not hold them.
func (v *verifier) window(pos int64, n int, end int64) ([]byte, error) {
	if v.bufPos < 0 || pos < v.bufPos || pos+int64(n) > v.bufPos+int64(v.bufLen) {
		// No bigger than what is left to read: reopening a log closed
		// cleanly walks only its last batch, and a 1 MiB buffer
		// zeroed per partition was a sixth of the CPU of opening
		// thousands of idle ones. No smaller than minVerifyBufSize
		// either: a large object has spans of its own, while small
		// ones, short-lived among a partition's long-lived objects,
		// left their spans part-used (1.4 KiB more heap in use a
		// partition, with less live data).
		if need := int(min(int64(verifyBufSize), max(int64(n), end-pos, minVerifyBufSize))); len(v.buf) < need {
			v.buf = make([]byte, need)
		}
		want := int(min(int64(len(v.buf)), end-pos))
		m, err := v.f.ReadAt(v.buf[:want], pos)
		if m < n {
			v.bufPos = -1
			if err == nil || err == io.EOF {
				err = fmt.Errorf("%w: file ends at %d", record.ErrTruncated, pos+int64(m))
			}
			return nil, err
		}
		v.bufPos, v.bufLen = pos, m
	}
	off := int(pos - v.bufPos)
	return v.buf[off : off+n], nil
}

// headerAt parses the header at pos and checks the batch ends by end.
func (v *verifier) headerAt(pos, end int64) (Header, error) {
	if end-pos < record.HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes left, a header needs %d", record.ErrTruncated, end-pos, record.HeaderSize)
	}
	hb, err := v.window(pos, record.HeaderSize, end)
	if err != nil {
		return Header{}, err
	}
	h, err := parseHeader(hb, pos)
	if err != nil {
		return Header{}, err
	}
	if h.End() > end {
		return Header{}, fmt.Errorf("%w: batch of %d bytes, %d left", record.ErrTruncated, h.Size, end-pos)
	}
	return h, nil
}

// batchAt checks the whole batch at pos: framing, CRC-32C, header fields.
func (v *verifier) batchAt(pos, end int64) (Header, error) {
	h, err := v.headerAt(pos, end)
	if err != nil {
		return Header{}, err
	}
	if h.Size <= verifyBufSize {
		b, err := v.window(pos, h.Size, end)
		if err != nil {
			return Header{}, err
		}
		batch, _, err := record.ParseBatch(b)
		if err == nil {
			err = batch.Verify()
		}
		return h, err
	}
	// A batch larger than the buffer: checksum it in pieces.
	hb, err := v.window(pos, record.HeaderSize, end)
	if err != nil {
		return Header{}, err
	}
	var hdr [record.HeaderSize]byte
	copy(hdr[:], hb)
	if err := record.VerifyHeader(hdr[:], h.Size); err != nil {
		return Header{}, err
	}
	want := binary.BigEndian.Uint32(hdr[17:])
	crc := uint32(0)
	for p, stop := pos+21, h.End(); p < stop; {
		n := int(min(int64(verifyBufSize), stop-p))
		b, err := v.window(p, n, end)
		if err != nil {
			return Header{}, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		p += int64(n)
	}
	if crc != want {
		return Header{}, fmt.Errorf("%w: crc32c is %08x, header says %08x", record.ErrCorrupt, crc, want)
	}
	return h, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// anyBatchIn reports whether a valid batch starts anywhere in [from, end):
// after an invalid batch, this tells damage inside the file (valid data
// follows) from a torn tail (nothing valid follows).
func (v *verifier) anyBatchIn(from, end int64) bool {
	for p := from; p+record.HeaderSize <= end; p++ {
		hb, err := v.window(p, record.HeaderSize, end)
		if err != nil {
			return false
		}
		if hb[16] != record.Magic {
			continue
		}
		if _, err := v.batchAt(p, end); err == nil {
			return true
		}
	}
	return false
}
