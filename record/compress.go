package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is a batch compression codec, as numbered in the batch attributes.
type Codec int8

// The codecs Kafka defines.
const (
	None   Codec = 0
	Gzip   Codec = 1
	Snappy Codec = 2
	LZ4    Codec = 3
	ZSTD   Codec = 4
)

// String returns the codec's Kafka name (compression.type).
func (c Codec) String() string {
	switch c {
	case None:
		return "none"
	case Gzip:
		return "gzip"
	case Snappy:
		return "snappy"
	case LZ4:
		return "lz4"
	case ZSTD:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// ParseCodec maps a Kafka compression.type name to a Codec.
func ParseCodec(name string) (Codec, error) {
	switch name {
	case "none", "":
		return None, nil
	case "gzip":
		return Gzip, nil
	case "snappy":
		return Snappy, nil
	case "lz4":
		return LZ4, nil
	case "zstd":
		return ZSTD, nil
	}
	return None, fmt.Errorf("%w: %q", ErrUnsupportedCodec, name)
}

// DefaultMaxUncompressedBytes is the default cap on the decompressed size of
// one batch's records (Iterator.MaxUncompressedBytes).
const DefaultMaxUncompressedBytes = 64 << 20

// ErrDecompressedTooLarge means a compressed batch expands beyond the cap:
// either a decompression bomb or a limit set too low.
var ErrDecompressedTooLarge = fmt.Errorf("%w: decompressed batch exceeds the limit", ErrRecordTooLarge)

// Encoders and decoders are expensive to build and hold large tables, so they
// are pooled and reused across batches.
var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
		return &gzipWriter{w: w}
	}}
	lz4Writers = sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		// 64 KiB blocks, as the Java client writes; the 4 MiB default is
		// several times slower on batch-sized inputs. One goroutine.
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ConcurrencyOption(1)); err != nil {
			panic(err) // options are constants; cannot fail
		}
		return &lz4Writer{w: w}
	}}
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		// EncodeAll is safe for concurrent use; one encoder serves all.
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true),
			zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			panic(err) // options are constants; cannot fail
		}
		return e
	})

	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	lz4Readers  = sync.Pool{New: func() any { return &lz4Reader{r: lz4.NewReader(nil)} }}
	zstdReaders = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			panic(err) // options are constants; cannot fail
		}
		return &zstdReader{d: d}
	}}
)

// Writers are pooled with the appendWriter they write to, so that handing
// it to them as an io.Writer does not allocate.
type gzipWriter struct {
	out appendWriter
	w   *gzip.Writer
}

type lz4Writer struct {
	out appendWriter
	w   *lz4.Writer
}

type gzipReader struct {
	src byteReader
	r   gzip.Reader
	ok  bool // r has been initialised by a successful Reset
}

type lz4Reader struct {
	src byteReader
	r   *lz4.Reader
}

type zstdReader struct {
	src byteReader
	d   *zstd.Decoder
}

// byteReader is a bytes.Reader without a Bytes method, so decoders stream
// from it (and honour our size cap) instead of decoding it whole.
type byteReader struct{ r bytes.Reader }

func (b *byteReader) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *byteReader) ReadByte() (byte, error)    { return b.r.ReadByte() }

// appendWriter is an io.Writer that appends to a slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// compress appends src compressed with c to dst.
func compress(c Codec, dst, src []byte) ([]byte, error) {
	switch c {
	case None:
		return append(dst, src...), nil
	case Gzip:
		gw := gzipWriters.Get().(*gzipWriter)
		defer gzipWriters.Put(gw)
		gw.out.b = dst
		gw.w.Reset(&gw.out)
		_, err := gw.w.Write(src)
		if err == nil {
			err = gw.w.Close()
		}
		out := gw.out.b
		gw.out.b = nil
		if err != nil {
			return dst, err
		}
		return out, nil
	case Snappy:
		// A raw snappy block, as franz-go and librdkafka write; every
		// Kafka client reads it.
		n := len(dst)
		need := s2.MaxEncodedLen(len(src))
		if need < 0 {
			return dst, fmt.Errorf("%w: %d bytes is too large for snappy", ErrRecordTooLarge, len(src))
		}
		dst = grow(dst, need)
		out := s2.EncodeSnappy(dst[n:n+need], src)
		return dst[:n+len(out)], nil
	case LZ4:
		lw := lz4Writers.Get().(*lz4Writer)
		defer lz4Writers.Put(lw)
		lw.out.b = dst
		lw.w.Reset(&lw.out)
		_, err := lw.w.Write(src)
		if err == nil {
			err = lw.w.Close()
		}
		out := lw.out.b
		lw.out.b = nil
		if err != nil {
			return dst, err
		}
		return out, nil
	case ZSTD:
		return zstdEnc().EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("%w: %d", ErrUnsupportedCodec, c)
}

// decompress appends the decompression of src to dst, refusing to produce
// more than max bytes.
func decompress(c Codec, dst, src []byte, max int) ([]byte, error) {
	switch c {
	case None:
		if len(src) > max {
			return dst, ErrDecompressedTooLarge
		}
		return append(dst, src...), nil
	case Gzip:
		r := gzipReaders.Get().(*gzipReader)
		defer gzipReaders.Put(r)
		r.src.r.Reset(src)
		if err := r.r.Reset(&r.src); err != nil {
			return dst, fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
		}
		r.r.Multistream(false)
		return readLimited(dst, &r.r, max, "gzip")
	case Snappy:
		if isXerial(src) {
			return decodeXerial(dst, src, max)
		}
		return decodeSnappyBlock(dst, src, max)
	case LZ4:
		r := lz4Readers.Get().(*lz4Reader)
		defer lz4Readers.Put(r)
		r.src.r.Reset(src)
		r.r.Reset(&r.src)
		return readLimited(dst, r.r, max, "lz4")
	case ZSTD:
		r := zstdReaders.Get().(*zstdReader)
		defer zstdReaders.Put(r)
		r.src.r.Reset(src)
		if err := r.d.Reset(&r.src); err != nil {
			return dst, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		out, err := readLimited(dst, r.d, max, "zstd")
		// Drop the reference to src so the pool does not pin it.
		r.src.r.Reset(nil)
		_ = r.d.Reset(&r.src)
		return out, err
	}
	return dst, fmt.Errorf("%w: %d", ErrUnsupportedCodec, c)
}

// readLimited reads r to its end, appending to dst, and fails once more than
// max bytes come out.
func readLimited(dst []byte, r io.Reader, max int, name string) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = grow(dst, 32<<10)
		}
		room := cap(dst) - len(dst)
		if limit := max + 1 - (len(dst) - start); room > limit {
			room = limit
		}
		n, err := r.Read(dst[len(dst) : len(dst)+room])
		dst = dst[:len(dst)+n]
		if len(dst)-start > max {
			return dst[:start], ErrDecompressedTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:start], fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
		}
		if n == 0 && room == 0 {
			return dst[:start], ErrDecompressedTooLarge
		}
	}
}

func decodeSnappyBlock(dst, src []byte, max int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return dst, fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
	}
	if n > max {
		return dst, ErrDecompressedTooLarge
	}
	start := len(dst)
	dst = grow(dst, n)
	out, err := s2.Decode(dst[start:start+n], src)
	if err != nil || len(out) != n {
		return dst[:start], fmt.Errorf("%w: snappy: %v", ErrCorrupt, err)
	}
	return dst[:start+n], nil
}

// The xerial snappy framing (snappy-java's SnappyOutputStream), which the Java
// client writes: a 16-byte header (magic, version, compatible version), then
// blocks, each a big-endian int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderSize = 16

func isXerial(src []byte) bool {
	return len(src) >= xerialHeaderSize && bytes.Equal(src[:len(xerialMagic)], xerialMagic)
}

func decodeXerial(dst, src []byte, max int) ([]byte, error) {
	start := len(dst)
	src = src[xerialHeaderSize:]
	for len(src) > 0 {
		if len(src) < 4 {
			return dst[:start], fmt.Errorf("%w: snappy: truncated xerial block length", ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(src)
		src = src[4:]
		if uint64(n) > uint64(len(src)) {
			return dst[:start], fmt.Errorf("%w: snappy: xerial block of %d bytes, %d left", ErrCorrupt, n, len(src))
		}
		var err error
		dst, err = decodeSnappyBlock(dst, src[:n], max-(len(dst)-start))
		if err != nil {
			return dst[:start], err
		}
		src = src[n:]
	}
	return dst, nil
}

// grow returns b with room for at least n more bytes.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), 2*cap(b)+n)
	copy(nb, b)
	return nb
}
