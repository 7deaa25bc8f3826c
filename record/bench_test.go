package record

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchValue returns a value of n bytes that compresses like typical
// application data (words from a small vocabulary with random numbers), so
// the codec benchmarks neither flatter nor punish the codecs.
func benchValue(rng *rand.Rand, n int) []byte {
	words := []string{"order", "user", "id", "amount", "status", "shipped", "created", "eu-west", "{", "}", ":", ","}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		if rng.IntN(3) == 0 {
			b = fmt.Appendf(b, "%d", rng.Uint32())
		} else {
			b = append(b, words[rng.IntN(len(words))]...)
		}
	}
	return b[:n]
}

// benchRecords returns n records with values of size bytes and a short key.
func benchRecords(n, size int) []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: fmt.Appendf(nil, "key-%06d", i), Value: benchValue(rng, size)}
	}
	return recs
}

// payloadBytes is the bytes of values in recs: what b.SetBytes counts.
func payloadBytes(recs []Record) int64 {
	var n int64
	for i := range recs {
		n += int64(len(recs[i].Value))
	}
	return n
}

type encodeCase struct {
	codec Codec
	n     int
	size  int
}

func (c encodeCase) name() string {
	return fmt.Sprintf("codec=%s/records=%d/size=%d", c.codec, c.n, c.size)
}

// encodeCases is every uncompressed batch shape, plus every codec on the
// largest.
func encodeCases() []encodeCase {
	var cs []encodeCase
	for _, size := range []int{100, 1024} {
		for _, n := range []int{1, 100, 1000} {
			cs = append(cs, encodeCase{None, n, size})
		}
	}
	for _, c := range []Codec{Gzip, Snappy, LZ4, ZSTD} {
		cs = append(cs, encodeCase{c, 1000, 1024})
	}
	return cs
}

var benchNow = time.UnixMilli(1_700_000_000_000)

// BenchmarkAppendBatch measures encoding records into a reused buffer.
func BenchmarkAppendBatch(b *testing.B) {
	for _, c := range encodeCases() {
		b.Run(c.name(), func(b *testing.B) {
			recs := benchRecords(c.n, c.size)
			o := BatchOptions{Compression: c.codec, Now: benchNow}
			buf, err := AppendBatch(nil, recs, o)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(payloadBytes(recs))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				buf, err = AppendBatch(buf[:0], recs, o)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(len(buf)), "batch-bytes")
		})
	}
}

// BenchmarkIterator measures verifying (CRC), decompressing and decoding a
// batch with a reused Iterator.
func BenchmarkIterator(b *testing.B) {
	for _, c := range encodeCases() {
		b.Run(c.name(), func(b *testing.B) {
			recs := benchRecords(c.n, c.size)
			batch, err := NewBatch(recs, BatchOptions{Compression: c.codec, Now: benchNow})
			if err != nil {
				b.Fatal(err)
			}
			var it Iterator
			b.SetBytes(payloadBytes(recs))
			b.ReportAllocs()
			b.ResetTimer()
			var got int
			for b.Loop() {
				it.Reset(batch)
				for it.Next() {
					got += len(it.Record().Value)
				}
				if err := it.Err(); err != nil {
					b.Fatal(err)
				}
			}
			if int64(got) != payloadBytes(recs)*int64(b.N) {
				b.Fatalf("decoded %d value bytes, want %d", got, payloadBytes(recs)*int64(b.N))
			}
			b.ReportMetric(float64(c.n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(batch.Size()), "batch-bytes")
		})
	}
}

// BenchmarkSkip measures the walk a log makes over a produced batch before
// appending it (log.checkProducerBatch): Reset on a batch whose CRC was
// checked where it arrived, then Skip over every record. Uncompressed
// batches of 100 B values without keys, as a Kafka producer sends them,
// and with keys and headers.
func BenchmarkSkip(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range []string{"value", "key+headers"} {
		b.Run(shape, func(b *testing.B) {
			recs := make([]Record, 4000)
			for i := range recs {
				recs[i] = Record{Timestamp: benchNow.Add(time.Duration(i) * time.Microsecond), Value: benchValue(rng, 100)}
				if shape != "value" {
					recs[i].Key = fmt.Appendf(nil, "key-%06d", i)
					recs[i].Headers = []Header{{Key: "trace", Value: []byte("0123456789abcdef")}}
				}
			}
			batch, err := NewBatch(recs, BatchOptions{Now: benchNow})
			if err != nil {
				b.Fatal(err)
			}
			if batch, err = batch.CheckCRC(); err != nil {
				b.Fatal(err)
			}
			var it Iterator
			b.SetBytes(int64(batch.Size()))
			b.ReportAllocs()
			for b.Loop() {
				it.Reset(batch)
				n := 0
				for it.Skip() {
					n++
				}
				if err := it.Err(); err != nil || n != len(recs) {
					b.Fatalf("skipped %d of %d records: %v", n, len(recs), err)
				}
			}
			b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
