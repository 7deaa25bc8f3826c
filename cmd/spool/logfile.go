package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/segment"
)

// logReader walks the batches of a .log file from the start, reading the
// file with plain reads (never a map: the tools must not care whether a
// broker has the file open, and a short file must give an error, not a
// fault). It reads ahead readAhead bytes at a time, so small batches do not
// cost a system call each; a larger batch gets a buffer of its own. A
// batch whose length field claims more bytes than the file holds is
// reported, never allocated.
type logReader struct {
	f    *os.File
	path string
	size int64 // the file's size when opened; bytes appended later are not read
	pos  int64 // position of the next batch

	win    []byte // read-ahead window: the file's bytes from winPos
	winPos int64
	big    []byte // holds a batch larger than the window
}

// readAhead is the size of a logReader's read-ahead window.
const readAhead = 1 << 20

// framingError is a batch that cannot be framed: its length, magic byte or
// the file's end make it impossible to find where it ends, so a walk over
// the file stops there.
type framingError struct {
	Path     string
	Position int64
	Err      error // wraps record.ErrTruncated or record.ErrCorrupt
}

func (e *framingError) Error() string {
	return fmt.Sprintf("%s: position %d: cannot frame a batch: %v", e.Path, e.Position, e.Err)
}

func (e *framingError) Unwrap() error { return e.Err }

// openLog opens the .log file at path read-only.
func openLog(path string) (*logReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return &logReader{f: f, path: path, size: st.Size()}, nil
}

// Close closes the file.
func (r *logReader) Close() error { return r.f.Close() }

// Size is the file's size in bytes when it was opened.
func (r *logReader) Size() int64 { return r.size }

// next returns the batch at the walk's position and that position, and
// moves past the batch. The batch aliases the reader's buffer: it is valid
// until the next call. next returns io.EOF at the end of the file, a
// *framingError for bytes that do not frame a batch (the walk cannot go
// on), and other errors for failed reads. Only framing is checked here, not
// the CRC: see record.Batch.Verify.
func (r *logReader) next() (record.Batch, int64, error) {
	pos := r.pos
	left := r.size - pos
	if left <= 0 {
		return record.Batch{}, pos, io.EOF
	}
	hdr, err := r.bytesAt(pos, int(min(left, record.HeaderSize)))
	if err != nil {
		return record.Batch{}, pos, err
	}
	// ParseBatch checks the length and the magic byte before it checks
	// that the whole batch is present, so garbage is called corrupt, not
	// merely truncated.
	b, n, err := record.ParseBatch(hdr)
	if errors.Is(err, record.ErrTruncated) && len(hdr) >= record.HeaderSize {
		_, size, perr := record.PeekHeader(hdr)
		switch {
		case perr != nil:
			err = perr
		case int64(size) > left:
			err = fmt.Errorf("%w: batch of %d bytes, %d left in the file", record.ErrTruncated, size, left)
		default:
			buf, rerr := r.bytesAt(pos, size)
			if rerr != nil {
				return record.Batch{}, pos, rerr
			}
			b, n, err = record.ParseBatch(buf)
		}
	} else if errors.Is(err, record.ErrTruncated) {
		err = fmt.Errorf("%w: %d bytes left in the file, a batch header needs %d", record.ErrTruncated, left, record.HeaderSize)
	}
	if err != nil {
		return record.Batch{}, pos, &framingError{Path: r.path, Position: pos, Err: err}
	}
	r.pos = pos + int64(n)
	return b, pos, nil
}

// bytesAt returns the n bytes of the file at pos, which the caller has
// checked lie within its size. They are valid until the next call.
func (r *logReader) bytesAt(pos int64, n int) ([]byte, error) {
	if off := pos - r.winPos; r.win != nil && off >= 0 && off+int64(n) <= int64(len(r.win)) {
		return r.win[off : off+int64(n)], nil
	}
	if n > readAhead {
		if cap(r.big) < n {
			r.big = make([]byte, n)
		}
		buf := r.big[:n]
		return buf, r.readAt(buf, pos)
	}
	if r.win == nil {
		r.win = make([]byte, min(readAhead, r.size))
	}
	r.win = r.win[:min(readAhead, r.size-pos)]
	if err := r.readAt(r.win, pos); err != nil {
		r.win = nil
		return nil, err
	}
	r.winPos = pos
	return r.win[:n], nil
}

// readAt fills p from the file at pos; the file shrinking under the reader
// is an error, not a short read.
func (r *logReader) readAt(p []byte, pos int64) error {
	n, err := r.f.ReadAt(p, pos)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("%s: file ends at %d, before %d (did it shrink while being read?)", r.path, pos+int64(n), pos+int64(len(p)))
	}
	return err
}

// scanChunk is how much of the file validBatchAfter examines per read.
const scanChunk = 1 << 20

// validBatchAfter looks for a valid batch (framed, CRC-32C and header
// checked) starting anywhere in (from, size): after a batch that failed,
// it tells damage inside the file (valid data follows) from a torn tail
// left by a crash (nothing valid follows). It is the test the log's
// recovery applies before truncating a segment, so check and dump reach the
// same verdict as the next open.
func (r *logReader) validBatchAfter(from int64) (int64, bool, error) {
	chunk := make([]byte, scanChunk+record.HeaderSize)
	var big []byte
	for start := from + 1; start+record.HeaderSize <= r.size; start += scanChunk {
		n := int(min(int64(len(chunk)), r.size-start))
		buf := chunk[:n]
		if err := r.readAt(buf, start); err != nil {
			return 0, false, err
		}
		for i := 0; i < scanChunk && i+record.HeaderSize <= n; i++ {
			if buf[i+16] != record.Magic {
				continue
			}
			_, size, err := record.PeekHeader(buf[i:])
			p := start + int64(i)
			if err != nil || int64(size) > r.size-p {
				continue
			}
			var cand []byte
			if i+size <= n {
				cand = buf[i : i+size]
			} else {
				if cap(big) < size {
					big = make([]byte, size)
				}
				cand = big[:size]
				if err := r.readAt(cand, p); err != nil {
					return 0, false, err
				}
			}
			if b, _, err := record.ParseBatch(cand); err == nil && b.Verify() == nil {
				return p, true, nil
			}
		}
	}
	return 0, false, nil
}

// headerOf is what the index checks need to know of a batch.
func headerOf(b record.Batch, pos int64) segment.Header {
	return segment.Header{
		Position:     pos,
		BaseOffset:   b.BaseOffset(),
		LastOffset:   b.LastOffset(),
		Size:         b.Size(),
		MaxTimestamp: b.MaxTimestamp(),
		LeaderEpoch:  b.PartitionLeaderEpoch(),
	}
}
