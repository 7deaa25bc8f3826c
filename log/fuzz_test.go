package log

import (
	"os"
	"sync"
	"testing"

	"github.com/spoolmq/spool/record"
)

var fuzzLog struct {
	once sync.Once
	l    *Log
	err  error
}

// FuzzAppendBatch hands arbitrary bytes to AppendBatch. A rejected batch
// must leave the log unchanged; an accepted one must read back byte for byte
// (but for the base offset the log stamps).
func FuzzAppendBatch(f *testing.F) {
	for _, c := range []record.Codec{record.None, record.Gzip, record.Snappy, record.LZ4, record.ZSTD} {
		b, err := record.NewBatch([]record.Record{{Key: []byte("k"), Value: []byte("v")}, {Value: []byte("w")}}, record.BatchOptions{Compression: c})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzLog.once.Do(func() {
			dir, err := os.MkdirTemp("", "spool-fuzz-")
			if err != nil {
				fuzzLog.err = err
				return
			}
			fuzzLog.l, fuzzLog.err = Open(dir, Options{Flush: None, MaxMessageBytes: 1 << 20})
		})
		if fuzzLog.err != nil {
			t.Fatal(fuzzLog.err)
		}
		l := fuzzLog.l
		b, _, err := record.ParseBatch(data)
		if err != nil {
			return
		}
		before := l.EndOffset()
		size := l.Size()
		off, err := l.AppendBatch(b)
		if err != nil {
			if l.EndOffset() != before || l.Size() != size {
				t.Fatalf("rejected batch changed the log: %v", err)
			}
			return
		}
		if off != before || l.EndOffset() != before+int64(b.NumRecords()) {
			t.Fatalf("appended at %d, end %d, for %d records from %d", off, l.EndOffset(), b.NumRecords(), before)
		}
		got, err := l.Read(off, 1)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(b.Bytes()) {
			t.Fatal("read back different bytes")
		}
	})
}
