package segment

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// Header is what a walk over a .log file learns of a batch from its header
// alone, without reading or checking its records.
type Header struct {
	Position     int64 // byte position of the batch in the .log file
	BaseOffset   int64
	LastOffset   int64
	Size         int   // bytes, header included
	MaxTimestamp int64 // Unix ms, or record.NoTimestamp
	LeaderEpoch  int32 // partition leader epoch stamped by the leader
}

// NextOffset is the offset after the batch.
func (h Header) NextOffset() int64 { return h.LastOffset + 1 }

// End is the byte position just after the batch.
func (h Header) End() int64 { return h.Position + int64(h.Size) }

// parseHeader reads a batch header. It checks the framing (length at least
// a header, magic 2) and that the offsets make sense; not the CRC.
func parseHeader(b []byte, pos int64) (Header, error) {
	if len(b) < record.HeaderSize {
		return Header{}, record.ErrTruncated
	}
	base, size, err := record.PeekHeader(b)
	if err != nil {
		return Header{}, err
	}
	if m := int8(b[16]); m != record.Magic {
		return Header{}, fmt.Errorf("%w: magic %d", record.ErrCorrupt, m)
	}
	delta := int32(binary.BigEndian.Uint32(b[23:]))
	if delta < 0 || base < 0 {
		return Header{}, fmt.Errorf("%w: base offset %d, last offset delta %d", record.ErrCorrupt, base, delta)
	}
	return Header{
		Position:     pos,
		BaseOffset:   base,
		LastOffset:   base + int64(delta),
		Size:         size,
		MaxTimestamp: int64(binary.BigEndian.Uint64(b[35:])),
		LeaderEpoch:  int32(binary.BigEndian.Uint32(b[12:])),
	}, nil
}

// scanBufSize is the read-ahead of a long header walk (an index rebuild);
// a lookup reads ahead only about an index interval (see newScanner), since
// the batch it looks for starts within one interval of the index entry, and
// copying more costs more than a second read would.
const scanBufSize = 64 << 10

var scanBufs = sync.Pool{New: func() any { b := make([]byte, scanBufSize); return &b }}

// scanner walks batch headers in [pos, end) of a file, reading ahead in
// chunks so that small batches do not cost a system call each.
type scanner struct {
	f        vfs.File
	pos, end int64
	buf      *[]byte
	readSize int   // bytes read ahead at a time, <= len(*buf)
	bufPos   int64 // file position of (*buf)[0]
	bufLen   int
}

// newScanner walks from pos to end reading ahead readAhead bytes at a time
// (0: scanBufSize).
// It is a value, to live on the caller's stack: lookups allocate nothing.
func newScanner(f vfs.File, pos, end int64, readAhead int) scanner {
	if readAhead <= 0 || readAhead > scanBufSize {
		readAhead = scanBufSize
	}
	readAhead = max(readAhead, record.HeaderSize)
	return scanner{f: f, pos: pos, end: end, buf: scanBufs.Get().(*[]byte), readSize: readAhead, bufPos: -1}
}

func (s *scanner) close() {
	if s.buf != nil {
		scanBufs.Put(s.buf)
		s.buf = nil
	}
}

// next returns the header of the batch at the scan position and moves past
// the batch. It returns io.EOF at end, and an error wrapping
// record.ErrTruncated when a header or batch runs past end.
func (s *scanner) next() (Header, error) {
	if s.pos >= s.end {
		return Header{}, io.EOF
	}
	if s.end-s.pos < record.HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes left, a header needs %d", record.ErrTruncated, s.end-s.pos, record.HeaderSize)
	}
	hb, err := s.headerBytes()
	if err != nil {
		return Header{}, err
	}
	h, err := parseHeader(hb, s.pos)
	if err != nil {
		return Header{}, err
	}
	if h.End() > s.end {
		return h, fmt.Errorf("%w: batch of %d bytes, %d left", record.ErrTruncated, h.Size, s.end-s.pos)
	}
	s.pos = h.End()
	return h, nil
}

// headerBytes returns the HeaderSize bytes at s.pos, from the read-ahead
// buffer when it holds them.
func (s *scanner) headerBytes() ([]byte, error) {
	buf := *s.buf
	if s.bufPos < 0 || s.pos < s.bufPos || s.pos+record.HeaderSize > s.bufPos+int64(s.bufLen) {
		n := int(min(int64(s.readSize), s.end-s.pos))
		m, err := s.f.ReadAt(buf[:n], s.pos)
		if m < record.HeaderSize {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("%w: file ends at %d", record.ErrTruncated, s.pos+int64(m))
			}
			s.bufPos = -1
			return nil, err
		}
		s.bufPos, s.bufLen = s.pos, m
	}
	off := int(s.pos - s.bufPos)
	return buf[off : off+record.HeaderSize], nil
}
