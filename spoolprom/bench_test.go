package spoolprom_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/internal/measure"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/spoolprom"
	"github.com/spoolmq/spool/transport"
)

// BenchmarkProduceMetrics measures what spool's counting costs a producer
// through the Kafka server: franz-go writing 100-byte records, acks=1, to
// a broker that does not fsync, over loopback. "batched" lets franz-go
// batch as it does by default (throughput); "sync" sends one record per
// request and waits for each (the worst case for per-request counting).
// "on" counts everything and is scraped every 100 ms; "off" turns
// counting off (internal/measure) and is never scraped. Compare
// records/s of on and off side by side.
func BenchmarkProduceMetrics(b *testing.B) {
	for _, mode := range []string{"batched", "sync"} {
		for _, on := range []bool{false, true} {
			name := mode + "/off"
			if on {
				name = mode + "/on"
			}
			b.Run(name, func(b *testing.B) { benchProduce(b, mode == "sync", on) })
		}
	}
}

func benchProduce(b *testing.B, sync, on bool) {
	measure.Off.Store(!on)
	defer measure.Off.Store(false)
	br, err := spool.Open(b.TempDir(), spool.Options{Flush: log.None})
	require.NoError(b, err)
	defer br.Close()
	require.NoError(b, br.CreateTopic(context.Background(), "bench", spool.TopicConfig{Partitions: 4}))
	srv, err := transport.NewServer(br, transport.Options{})
	require.NoError(b, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	if on {
		reg := prometheus.NewRegistry()
		reg.MustRegister(spoolprom.NewCollector(br, spoolprom.Options{Server: srv}))
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					reg.Gather()
				}
			}
		}()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()), kgo.DefaultProduceTopic("bench"),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.MaxBufferedRecords(1<<16))
	require.NoError(b, err)
	defer cl.Close()
	value := make([]byte, 100)
	ctx := context.Background()
	require.NoError(b, cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr())
	var failed atomic.Pointer[error]
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Store(&err)
		}
	}
	b.SetBytes(int64(len(value)))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if sync {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				b.Fatal(err)
			}
			continue
		}
		cl.Produce(ctx, &kgo.Record{Value: value}, done)
	}
	require.NoError(b, cl.Flush(ctx))
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
}

// BenchmarkScrape measures one scrape of /metrics, encoded as Prometheus
// text, of a broker with 1,000 partitions (100 topics of 10) that have
// had traffic, and 10 consumer groups with committed offsets.
func BenchmarkScrape(b *testing.B) {
	br, err := spool.Open(b.TempDir(), spool.Options{Flush: log.None})
	require.NoError(b, err)
	defer br.Close()
	ctx := context.Background()
	p, err := br.NewProducer(spool.ProducerConfig{})
	require.NoError(b, err)
	for i := range 100 {
		name := fmt.Sprintf("topic-%03d", i)
		require.NoError(b, br.CreateTopic(ctx, name, spool.TopicConfig{Partitions: 10}))
		p.Produce(ctx, spool.Record{Topic: name, Value: []byte("v")}, nil)
	}
	require.NoError(b, p.Flush(ctx))
	require.NoError(b, p.Close())
	for g := range 10 {
		offs := map[spool.TopicPartition]int64{}
		for i := range 10 {
			offs[spool.TopicPartition{Topic: fmt.Sprintf("topic-%03d", g*10+i), Partition: 0}] = 0
		}
		require.NoError(b, commit(br, fmt.Sprintf("g%d", g), offs))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(spoolprom.NewCollector(br, spoolprom.Options{}))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest("GET", "/metrics", nil)
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		size = w.Body.Len()
		io.Copy(io.Discard, w.Body)
	}
	b.StopTimer() // not the broker's Close
	b.ReportMetric(float64(size), "bytes/scrape")
}

// commit commits offsets for a group from outside the group protocol.
func commit(br *spool.Broker, groupID string, offs map[spool.TopicPartition]int64) error {
	if err := br.PrepareGroups(context.Background()); err != nil {
		return err
	}
	req := group.CommitRequest{Group: groupID, Generation: -1, Offsets: map[group.TopicPartition]group.OffsetAndMetadata{}}
	for tp, o := range offs {
		req.Offsets[tp] = group.OffsetAndMetadata{Offset: o}
	}
	_, err := br.Groups().CommitOffsets(req)
	return err
}
