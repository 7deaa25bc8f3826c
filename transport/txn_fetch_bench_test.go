package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFetchIsolation: a franz-go consumer reads one partition of
// 200,000 transactional records of 100 bytes to its end - 4 producers
// interleaved, 50-record batches, a transaction every 4 batches, one in
// ten aborted - at read_uncommitted and at read_committed (the LSO bound,
// the aborted-transaction lookups, the client's filter). One op is one
// whole read; compare the two sub-benchmarks' ns/op (the data is the
// same; read_committed delivers the 90% that committed).
func BenchmarkFetchIsolation(b *testing.B) {
	br, _, addr := testServer(b, fetchOpts, Options{})
	const topic = "bench-isolation"
	fetchCreate(b, br, topic, 1)
	p, err := br.Partition(topic, 0)
	require.NoError(b, err)
	value := make([]byte, 100)
	recs := make([]record.Record, 50)
	for i := range recs {
		recs[i] = record.Record{Value: value}
	}
	seqs := map[int64]int32{}
	txns := 0
	committed, total := 0, 0
	for total < 200_000 {
		for pid := int64(1); pid <= 4; pid++ {
			for range 4 {
				bt, err := record.NewBatch(recs, record.BatchOptions{
					Producer: &record.ProducerInfo{ID: pid, BaseSequence: seqs[pid]}, Transactional: true, Now: time.Now()})
				require.NoError(b, err)
				seqs[pid] += int32(len(recs))
				_, _, err = p.AppendProduced(bt)
				require.NoError(b, err)
			}
			txns++
			commit := txns%10 != 0
			m, err := partition.MarkerBatch(pid, 0, commit, 0)
			require.NoError(b, err)
			_, _, err = p.AppendProduced(m)
			require.NoError(b, err)
			total += 4 * len(recs)
			if commit {
				committed += 4 * len(recs)
			}
		}
	}
	require.Equal(b, p.HighWatermark(), p.LastStableOffset())
	for _, tc := range []struct {
		name  string
		level kgo.IsolationLevel
		want  int
	}{{"read_uncommitted", kgo.ReadUncommitted(), total}, {"read_committed", kgo.ReadCommitted(), committed}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(total * len(value)))
			for i := 0; i < b.N; i++ {
				cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(tc.level))
				require.NoError(b, err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				n := 0
				for n < tc.want {
					fs := cl.PollFetches(ctx)
					if err := ctx.Err(); err != nil {
						b.Fatalf("%d of %d records: %v", n, tc.want, err)
					}
					n += fs.NumRecords()
				}
				cancel()
				cl.Close()
				if n != tc.want {
					b.Fatal(fmt.Sprintf("%d records, want %d", n, tc.want))
				}
			}
			b.ReportMetric(float64(tc.want)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
