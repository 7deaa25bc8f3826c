package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// withFetchVerify runs the benchmark body twice, as sub-benchmarks
// crc=on (the CRC-32C check every fetch makes before sending) and crc=off
// (the check skipped), so that one run measures what the check costs.
func withFetchVerify(b *testing.B, body func(b *testing.B)) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("crc=%s", map[bool]string{true: "on", false: "off"}[on]), func(b *testing.B) {
			skipFetchVerify = !on
			defer func() { skipFetchVerify = false }()
			body(b)
		})
	}
}

// BenchmarkFetchZeroCopy serves fetches of 64 KiB, 1 MiB and 4 MiB to a
// bare client that reads each response whole, with no decoding. The record
// bytes go by sendfile; allocs/op must not grow with the bytes served.
// Each size runs with and without the CRC-32C check (withFetchVerify).
func BenchmarkFetchZeroCopy(b *testing.B) {
	br, _, addr := testServer(b, fetchOpts, Options{})
	const topic = "bench-zero-copy"
	fetchCreate(b, br, topic, 1)
	// 32 MiB of 16 KiB batches of 100-byte records.
	p, err := br.Partition(topic, 0)
	require.NoError(b, err)
	value := make([]byte, 100)
	recs := make([]record.Record, 140)
	for i := range recs {
		recs[i] = record.Record{Value: value}
	}
	for p.Log().Size() < 32<<20 {
		_, err := p.Append(recs...)
		require.NoError(b, err)
	}
	end := p.HighWatermark()
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			withFetchVerify(b, func(b *testing.B) {
				c, err := net.Dial("tcp", addr)
				require.NoError(b, err)
				defer c.Close()
				req := fetchReq(0, 1, int32(size), topic, map[int32]int64{0: 0}, int32(size))
				req.SetVersion(11)
				frame := make([]byte, 0, 256)
				resp := make([]byte, size+(1<<20))
				step := end / 64
				off := int64(0)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					req.Topics[0].Partitions[0].FetchOffset = off
					if off += step; off+int64(size/100) >= end {
						off = 0
					}
					frame = binary.BigEndian.AppendUint32(frame[:0], 0)
					frame = binary.BigEndian.AppendUint16(frame, uint16(kmsg.Fetch))
					frame = binary.BigEndian.AppendUint16(frame, 11)
					frame = binary.BigEndian.AppendUint32(frame, uint32(i))
					frame = binary.BigEndian.AppendUint16(frame, 0xffff)
					frame = req.AppendTo(frame)
					binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
					if _, err := c.Write(frame); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, resp[:4]); err != nil {
						b.Fatal(err)
					}
					n := int(binary.BigEndian.Uint32(resp))
					if n > len(resp) || n < size/2 {
						b.Fatalf("response of %d bytes", n)
					}
					if _, err := io.ReadFull(c, resp[:n]); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkFetchConsumeFranzGo measures one kgo consumer reading 1,000,000
// records of 100 bytes (produced with the library, spread over 1 or 8
// partitions) over loopback, and reports records/s, with and without the
// CRC-32C check of what is sent.
func BenchmarkFetchConsumeFranzGo(b *testing.B) {
	for _, parts := range []int32{1, 8} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			withFetchVerify(b, func(b *testing.B) { benchConsume(b, parts) })
		})
	}
}

func benchConsume(b *testing.B, parts int32) {
	const (
		topic = "bench-consume"
		n     = 1_000_000
	)
	br, _, addr := testServer(b, fetchOpts, Options{})
	require.NoError(b, br.CreateTopic(context.Background(), topic, spool.TopicConfig{Partitions: parts}))
	pr, err := br.NewProducer(spool.ProducerConfig{Partitioner: partition.RoundRobinPartitioner(), Linger: 5 * time.Millisecond})
	require.NoError(b, err)
	value := make([]byte, 100)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		pr.Produce(ctx, spool.Record{Topic: topic, Value: value}, nil)
	}
	require.NoError(b, pr.Close())
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		offsets := map[int32]kgo.Offset{}
		for p := int32(0); p < parts; p++ {
			offsets[p] = kgo.NewOffset().At(0)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
		require.NoError(b, err)
		start := time.Now()
		got := 0
		for got < n {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			got += fs.NumRecords()
		}
		elapsed += time.Since(start)
		cl.Close()
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "records/s")
}
