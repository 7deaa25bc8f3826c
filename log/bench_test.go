package log

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/record"
)

// Benchmarks of the log. Each names the flush policy it runs under; compare
// equal policies only. Payload bytes (b.SetBytes) are record values: the
// records' keys and the batch framing are overhead the log must carry.
//
//	go test -run XXX -bench . -benchtime 2s -count 3 ./log

// syncCountingFS counts file fsyncs, to show how many appends share one.
type syncCountingFS struct {
	vfs.FS
	syncs atomic.Int64
}

type syncCountingFile struct {
	vfs.File
	fs *syncCountingFS
}

func (c *syncCountingFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return syncCountingFile{f, c}, nil
}

func (f syncCountingFile) Sync() error {
	f.fs.syncs.Add(1)
	return f.File.Sync()
}

// benchOptions is the configuration of the append benchmarks: segments large
// enough that rolling does not dominate, batches up to 64 MiB.
func benchOptions(p FlushPolicy) Options {
	return Options{SegmentBytes: 256 << 20, MaxMessageBytes: 64 << 20, Flush: p}
}

// benchRecords returns n records with size-byte values and a short key,
// without timestamps (the log stamps the append time, as for producers that
// leave it to the broker).
func benchRecords(n, size int) []record.Record {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte('a' + rng.IntN(26))
		}
		recs[i] = record.Record{Key: []byte("key-" + strconv.Itoa(i)), Value: v}
	}
	return recs
}

func openBench(b *testing.B, dir string, opts Options) *Log {
	b.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func closeBench(b *testing.B, l *Log) {
	b.Helper()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAppend appends one batch per op with Append(recs...) - encoding
// included - under each flush policy. Allocations per op are allocations per
// appended batch; the target is zero.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, n := range []int{1, 100, 1000} {
			for _, p := range []FlushPolicy{Sync, None} {
				b.Run(fmt.Sprintf("size=%d/batch=%d/flush=%s", size, n, p), func(b *testing.B) {
					benchAppend(b, size, n, p)
				})
			}
		}
	}
}

// BenchmarkAppendPooled is BenchmarkAppend's smallest appends with the
// segment's file taken from a file pool (Options.Files) on each write.
func BenchmarkAppendPooled(b *testing.B) {
	for _, p := range []FlushPolicy{Sync, None} {
		b.Run(fmt.Sprintf("size=100/batch=1/flush=%s", p), func(b *testing.B) {
			benchAppendWith(b, 100, 1, p, NewFilePool(64))
		})
	}
}

func benchAppend(b *testing.B, size, n int, p FlushPolicy) {
	benchAppendWith(b, size, n, p, nil)
}

func benchAppendWith(b *testing.B, size, n int, p FlushPolicy, files *FilePool) {
	recs := benchRecords(n, size)
	opts := benchOptions(p)
	opts.Files = files
	l := openBench(b, b.TempDir(), opts)
	defer closeBench(b, l)
	// Warm up: the encode buffer grows to the batch size once.
	for range 3 {
		if _, err := l.Append(recs...); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(n * size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Append(recs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(l.NumSegments()), "segments")
}

// BenchmarkAppendBatch appends a pre-encoded batch per op (the produce
// request path: the batch is verified, not encoded). The same bytes are
// handed over every op: AppendBatch only restamps the base offset, which the
// CRC does not cover, and the log keeps no reference once it returns.
func BenchmarkAppendBatch(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, n := range []int{1, 1000} {
			for _, p := range []FlushPolicy{Sync, None} {
				b.Run(fmt.Sprintf("size=%d/batch=%d/flush=%s", size, n, p), func(b *testing.B) {
					raw, err := record.AppendBatch(nil, benchRecords(n, size), record.BatchOptions{Now: time.Now()})
					if err != nil {
						b.Fatal(err)
					}
					batch, _, err := record.ParseBatch(raw)
					if err != nil {
						b.Fatal(err)
					}
					l := openBench(b, b.TempDir(), benchOptions(p))
					defer closeBench(b, l)
					b.SetBytes(int64(n * size))
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						if _, err := l.AppendBatch(batch); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
				})
			}
		}
	}
}

// BenchmarkAppendConcurrent has g goroutines each append single 100-byte
// records under Sync. With group commit, appends that arrive during an fsync
// share the next one, so appends/s should grow with g while fsyncs/s stays
// about the same. One op is one append (by any goroutine).
func BenchmarkAppendConcurrent(b *testing.B) {
	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("flush=sync/goroutines=%d", g), func(b *testing.B) {
			counter := &syncCountingFS{FS: vfs.Default}
			opts := benchOptions(Sync)
			opts.fs = counter
			l := openBench(b, b.TempDir(), opts)
			defer closeBench(b, l)
			recs := make([][]record.Record, g)
			for i := range recs {
				recs[i] = benchRecords(1, 100)
			}
			b.ReportAllocs()
			b.ResetTimer()
			syncs0 := counter.syncs.Load()
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, g)
			for i := range g {
				k := b.N / g
				if i < b.N%g {
					k++
				}
				wg.Go(func() {
					for range k {
						if _, err := l.Append(recs[i]...); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			syncs := counter.syncs.Load() - syncs0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			b.ReportMetric(float64(syncs)/elapsed.Seconds(), "fsyncs/s")
			b.ReportMetric(float64(b.N)/float64(max(syncs, 1)), "appends/fsync")
		})
	}
}

// BenchmarkReadRandom reads one batch at a random offset (Read(offset, 1))
// from the same records held in 1 segment and in 1000 segments: the cost of
// finding the segment (a binary search of the segment list) and the batch
// (index lookup, header walk) should barely depend on the number of
// segments. Segment indexes are loaded before timing (steady state).
func BenchmarkReadRandom(b *testing.B) {
	const (
		segmentBytes = 64 << 10
		segments     = 1000
		valueSize    = 100
	)
	recs := benchRecords(1, valueSize)
	// Enough single-record batches to fill 1000 segments of 64 KiB.
	batch, err := record.AppendBatch(nil, recs, record.BatchOptions{Now: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	total := segments * (segmentBytes / len(batch))
	layouts := []struct {
		name string
		opts Options
	}{
		{"segments=1", Options{SegmentBytes: 256 << 20, Flush: None}},
		{fmt.Sprintf("segments=%d", segments), Options{SegmentBytes: segmentBytes, IndexMaxBytes: 4096, Flush: None}},
		// Through a file pool: one that holds every file (a use's cost
		// alone), and one of a tenth of them (reopening on most reads).
		{fmt.Sprintf("segments=%d/files=%d", segments, 2*segments), Options{SegmentBytes: segmentBytes, IndexMaxBytes: 4096, Flush: None, Files: NewFilePool(2 * segments)}},
		{fmt.Sprintf("segments=%d/files=%d", segments, segments/10), Options{SegmentBytes: segmentBytes, IndexMaxBytes: 4096, Flush: None, Files: NewFilePool(segments / 10)}},
	}
	for _, lay := range layouts {
		dir := b.TempDir()
		l := openBench(b, dir, lay.opts)
		for range total {
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		end := l.EndOffset()
		for off := int64(0); off < end; off += 16 {
			if _, err := l.Read(off, 1); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(lay.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 7))
			b.ReportAllocs()
			for b.Loop() {
				off := rng.Int64N(end)
				buf, err := l.Read(off, 1)
				if err != nil || len(buf) == 0 {
					b.Fatalf("read %d: %d bytes, %v", off, len(buf), err)
				}
			}
			b.ReportMetric(float64(l.NumSegments()), "segments")
			b.ReportMetric(float64(end), "records")
		})
		b.Run(lay.name+"/into", func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 7))
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			for b.Loop() {
				off := rng.Int64N(end)
				out, err := l.ReadInto(buf[:0], off, 1)
				if err != nil || len(out) == 0 {
					b.Fatalf("read %d: %d bytes, %v", off, len(out), err)
				}
			}
		})
		closeBench(b, l)
	}
}

// reopenBytes is the size of the log BenchmarkReopen builds. Override with
// SPOOL_BENCH_REOPEN_MB.
func reopenBytes() int64 {
	if s := os.Getenv("SPOOL_BENCH_REOPEN_MB"); s != "" {
		if mb, err := strconv.Atoi(s); err == nil && mb > 0 {
			return int64(mb) << 20
		}
	}
	return 2 << 30
}

// BenchmarkReopen times Open of a log that was closed cleanly: a clean log
// needs no recovery, so the time should not grow with the data, only
// (slightly) with the number of segments. One op is one Open; the Close before
// it is not timed. The log is built once (reopenBytes of 1 KiB records in
// 1000-record batches) and reused by every op.
func BenchmarkReopen(b *testing.B) {
	size := reopenBytes()
	for _, segBytes := range []int64{1 << 30, 64 << 20, 8 << 20} {
		opts := Options{SegmentBytes: segBytes, MaxMessageBytes: 64 << 20, Flush: None}
		dir := filepath.Join(b.TempDir(), "log")
		l := openBench(b, dir, opts)
		recs := benchRecords(1000, 1024)
		built := time.Now()
		for l.Size() < size {
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		logBytes, segs := l.Size(), l.NumSegments()
		closeBench(b, l)
		b.Logf("built %d MiB in %d segments in %v", logBytes>>20, segs, time.Since(built).Round(time.Millisecond))
		b.Run(fmt.Sprintf("bytes=%dMiB/segments=%d", logBytes>>20, segs), func(b *testing.B) {
			var closeTime time.Duration
			for b.Loop() {
				l, info, err := OpenWithInfo(dir, opts)
				if err != nil {
					b.Fatal(err)
				}
				if !info.Clean {
					b.Fatalf("reopen was not clean: %+v", info)
				}
				b.StopTimer()
				t := time.Now()
				closeBench(b, l)
				closeTime += time.Since(t)
				b.StartTimer()
			}
			b.ReportMetric(float64(logBytes), "log-bytes")
			b.ReportMetric(float64(segs), "segments")
			b.ReportMetric(float64(closeTime.Nanoseconds())/float64(b.N), "close-ns/op")
		})
	}
}

// BenchmarkReopenAfterCrash times Open of a log whose process died: the
// recovery checks only the batches written after the last checkpoint (the
// unflushed tail), so the time should follow the tail's size, not the log's.
// The log (reopenBytes, in 256 MiB segments) and its checkpoint are restored
// before each op; one op is one Open with recovery.
func BenchmarkReopenAfterCrash(b *testing.B) {
	size := reopenBytes()
	opts := Options{SegmentBytes: 256 << 20, MaxMessageBytes: 64 << 20, Flush: None, CheckpointInterval: time.Hour}
	recs := benchRecords(1000, 1024)
	for _, tail := range []int64{1 << 20, 16 << 20, 128 << 20} {
		dir := filepath.Join(b.TempDir(), "log")
		l := openBench(b, dir, opts)
		for l.Size() < size {
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Sync(); err != nil { // the recovery point
			b.Fatal(err)
		}
		for start := l.Size(); l.Size()-start < tail; {
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		logBytes := l.Size()
		l.abandon()
		cp, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("bytes=%dMiB/tail=%dMiB", logBytes>>20, tail>>20), func(b *testing.B) {
			var checked int64
			for b.Loop() {
				b.StopTimer()
				if err := os.WriteFile(filepath.Join(dir, CheckpointFile), cp, 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				l, info, err := OpenWithInfo(dir, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if info.Clean || info.BytesChecked < tail {
					b.Fatalf("no recovery of the tail: %+v", info)
				}
				checked = info.BytesChecked
				l.abandon()
				b.StartTimer()
			}
			b.ReportMetric(float64(checked), "bytes-checked")
			b.ReportMetric(float64(logBytes), "log-bytes")
		})
	}
}

// BenchmarkWriteBaseline is the physical floor BenchmarkAppend is measured
// against, in the same process and file system: the exact bytes of the batch
// Append would write, encoded once (raw) or on every op as Append does
// (encode), written with os.File.WriteAt at the end of one file, fsynced per
// op under sync.
func BenchmarkWriteBaseline(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, n := range []int{1, 100, 1000} {
			for _, p := range []FlushPolicy{Sync, None} {
				for _, encode := range []bool{false, true} {
					mode := "raw"
					if encode {
						mode = "encode"
					}
					b.Run(fmt.Sprintf("size=%d/batch=%d/flush=%s/%s", size, n, p, mode), func(b *testing.B) {
						recs := benchRecords(n, size)
						buf, err := record.AppendBatch(nil, recs, record.BatchOptions{Now: time.Now()})
						if err != nil {
							b.Fatal(err)
						}
						f, err := os.OpenFile(filepath.Join(b.TempDir(), "00000000000000000000.log"), os.O_RDWR|os.O_CREATE, 0o644)
						if err != nil {
							b.Fatal(err)
						}
						defer f.Close()
						var pos int64
						b.SetBytes(int64(n * size))
						b.ReportAllocs()
						for b.Loop() {
							if encode {
								if buf, err = record.AppendBatch(buf[:0], recs, record.BatchOptions{Now: time.Now()}); err != nil {
									b.Fatal(err)
								}
							}
							if _, err := f.WriteAt(buf, pos); err != nil {
								b.Fatal(err)
							}
							pos += int64(len(buf))
							if p == Sync {
								if err := f.Sync(); err != nil {
									b.Fatal(err)
								}
							}
						}
						b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
					})
				}
			}
		}
	}
}

// BenchmarkAppendVsWrite is the ratio README quotes for single-record
// appends: Append of one 100 B record under None against the raw write of
// the same bytes (BenchmarkWriteBaseline's raw: os.File.WriteAt at the end of
// a file). The two run interleaved in rounds of 1000 ops, taking turns going
// first, so that a shared machine's drift hits both alike; run separately,
// as BenchmarkAppend and BenchmarkWriteBaseline are, the ratio swings by
// tens of percent between runs. One op is one append plus one raw write; it
// reports each side's ns/op and append-% (raw ns / append ns: Append's rate
// as a percentage of the raw write's). append-%-med is the median of the
// rounds' own ratios: a burst of other work on the machine that slows a few
// rounds moves the totals' ratio but hardly the median, so comparisons of
// two builds need fewer runs.
func BenchmarkAppendVsWrite(b *testing.B) {
	const round = 1000
	recs := benchRecords(1, 100)
	l := openBench(b, filepath.Join(b.TempDir(), "log"), benchOptions(None))
	defer closeBench(b, l)
	raw, err := record.AppendBatch(nil, recs, record.BatchOptions{Now: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "00000000000000000000.log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var pos int64
	appends := func(k int) time.Duration {
		t := time.Now()
		for range k {
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t)
	}
	writes := func(k int) time.Duration {
		t := time.Now()
		for range k {
			if _, err := f.WriteAt(raw, pos); err != nil {
				b.Fatal(err)
			}
			pos += int64(len(raw))
		}
		return time.Since(t)
	}
	appends(3) // warm up: the encode buffer grows once
	var tAppend, tWrite time.Duration
	ratios := make([]float64, 0, b.N/round+1)
	b.ReportAllocs()
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		k := min(round, b.N-done)
		var a, w time.Duration
		if i%2 == 0 {
			a = appends(k)
			w = writes(k)
		} else {
			w = writes(k)
			a = appends(k)
		}
		tAppend += a
		tWrite += w
		ratios = append(ratios, 100*float64(w)/float64(a))
		done += k
	}
	b.ReportMetric(float64(tAppend.Nanoseconds())/float64(b.N), "append-ns/op")
	b.ReportMetric(float64(tWrite.Nanoseconds())/float64(b.N), "write-ns/op")
	b.ReportMetric(100*float64(tWrite)/float64(tAppend), "append-%")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "append-%-med")
}

// BenchmarkClean measures the cleaner: one op cleans a log of 64 MiB of
// 100-byte records over 100,000 keys (so most records are superseded),
// written fresh before each op. It reports MB/s of log read and the map's
// memory, which CleanerBufferBytes bounds.
func BenchmarkClean(b *testing.B) {
	const keys = 100_000
	value := make([]byte, 100)
	var stats CleanStats
	for b.Loop() {
		b.StopTimer()
		opts := Options{Cleanup: Compact, SegmentBytes: 16 << 20, Flush: None, CleanerBufferBytes: 8 << 20}
		l := openBench(b, filepath.Join(b.TempDir(), "log"), opts)
		recs := make([]record.Record, 100)
		k := 0
		for l.Size() < 64<<20 {
			for i := range recs {
				recs[i] = record.Record{Key: []byte(fmt.Sprintf("key-%06d", k%keys)), Value: value}
				k++
			}
			if _, err := l.Append(recs...); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Roll(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var err error
		stats, err = l.Clean(true)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		closeBench(b, l)
		b.StartTimer()
	}
	b.ReportMetric(float64(stats.BytesRead)/1e6/stats.Duration.Seconds(), "MB/s-cleaned")
	b.ReportMetric(float64(stats.MapBytes), "map-bytes")
	b.ReportMetric(float64(stats.BytesWritten), "bytes-after")
	b.ReportMetric(float64(stats.BytesRead), "bytes-before")
}
