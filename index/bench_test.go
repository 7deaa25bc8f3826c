package index

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkOffsetAppend appends entries to writable offset indexes of the
// default maximum size (10 MiB), starting a new file whenever one fills,
// so the cost of allocating the file - up front, or in steps as it grows -
// is spread over the appends it serves, as in a segment's life.
func BenchmarkOffsetAppend(b *testing.B) {
	dir := b.TempDir()
	const maxBytes = 10 << 20
	open := func() *Offset {
		p := filepath.Join(dir, "i")
		_ = os.Remove(p)
		x, err := OpenOffset(nil, p, 0, maxBytes, true)
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	x := open()
	var i int64
	for b.Loop() {
		if x.Full() {
			if err := x.CloseNoTrim(); err != nil {
				b.Fatal(err)
			}
			x, i = open(), 0
		}
		i++
		if err := x.Append(i, i); err != nil {
			b.Fatal(err)
		}
	}
	if err := x.CloseNoTrim(); err != nil {
		b.Fatal(err)
	}
}
