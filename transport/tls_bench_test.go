package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/internal/testcerts"
	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkTLS measures one franz-go client producing 100-byte records
// (acks=all, default batching) and then consuming them, over plaintext and
// over TLS (TLS 1.3, ECDSA P-256, the cipher Go picks) to the same kind of
// server: compare records/s of the two in one run. One op is one record.
func BenchmarkTLS(b *testing.B) {
	ca, err := testcerts.NewCA("bench CA")
	require.NoError(b, err)
	pair, err := ca.Issue(testcerts.Options{Subject: pkix.Name{CommonName: "broker"}, Hosts: []string{"127.0.0.1"}})
	require.NoError(b, err)
	cert, err := pair.TLS()
	require.NoError(b, err)
	for _, mode := range []string{"plaintext", "tls"} {
		var opts Options
		var client []kgo.Opt
		if mode == "tls" {
			opts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			client = append(client, kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool()}))
		}
		br, _, addr := testServer(b, spool.Options{Flush: log.None}, opts)
		require.NoError(b, br.CreateTopic(context.Background(), "t", spool.TopicConfig{Partitions: 1}))
		value := make([]byte, 100)
		b.Run("produce/"+mode, func(b *testing.B) {
			cl, err := kgo.NewClient(append(client, kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))...)
			require.NoError(b, err)
			defer cl.Close()
			ctx := context.Background()
			b.SetBytes(100)
			start := time.Now()
			for b.Loop() {
				cl.Produce(ctx, &kgo.Record{Value: value}, nil)
			}
			require.NoError(b, cl.Flush(ctx))
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
		part, err := br.Partition("t", 0)
		require.NoError(b, err)
		if part.HighWatermark() < 200_000 {
			pr, _ := br.NewProducer(spool.ProducerConfig{})
			for range 200_000 {
				pr.Produce(context.Background(), spool.Record{Topic: "t", Value: value}, nil)
			}
			require.NoError(b, pr.Close())
		}
		end := part.HighWatermark()
		b.Run("consume/"+mode, func(b *testing.B) {
			b.SetBytes(100)
			start := time.Now()
			read := 0
			for read < b.N {
				cl, err := kgo.NewClient(append(client, kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
				require.NoError(b, err)
				var got int64
				for got < end && read < b.N {
					fs := cl.PollFetches(context.Background())
					require.NoError(b, fs.Err0())
					n := fs.NumRecords()
					got += int64(n)
					read += n
				}
				cl.Close()
			}
			b.ReportMetric(float64(read)/time.Since(start).Seconds(), "records/s")
		})
	}
}
