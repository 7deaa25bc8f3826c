package spoolprom_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/spoolprom"
	"github.com/spoolmq/spool/transport"
)

// serve opens a broker with a Kafka server on a loopback port.
func serve(t *testing.T) (*spool.Broker, *transport.Server, string) {
	t.Helper()
	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	srv, err := transport.NewServer(b, transport.Options{})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close()
	})
	return b, srv, ln.Addr().String()
}

// value finds one series in what the registry gathers: a counter's or
// gauge's value, a histogram's sample count; false if absent.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func mustValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := value(t, reg, name, labels)
	require.True(t, ok, "no series %s%v", name, labels)
	return v
}

// eventually waits for a series to reach want.
func eventually(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, _ := value(t, reg, name, labels)
		return v == want
	}, 5*time.Second, time.Millisecond, "%s%v never reached %v", name, labels, want)
}

// Produce and consume through the server with a real Kafka client: the
// topic's counters, the request counts and latency histograms, the
// partition's offsets and the group's lag all move as they should.
func TestCollectorFollowsTraffic(t *testing.T) {
	b, srv, addr := serve(t)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", spool.TopicConfig{Partitions: 1}))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(spoolprom.NewCollector(b, spoolprom.Options{Server: srv})))
	// Pedantic: every metric matches its description, no duplicates.
	_, err := reg.Gather()
	require.NoError(t, err)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer cl.Close()
	var produced int
	for i := range 10 {
		v := fmt.Appendf(nil, "value-%d", i)
		produced += len(v)
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr())
	}
	tl := map[string]string{"topic": "t"}
	require.Equal(t, 10.0, mustValue(t, reg, "spool_topic_records_in_total", tl))
	require.GreaterOrEqual(t, mustValue(t, reg, "spool_topic_bytes_in_total", tl), float64(produced))
	require.Equal(t, 10.0, mustValue(t, reg, "spool_topic_produce_requests_total", tl))
	require.Zero(t, mustValue(t, reg, "spool_topic_failed_produce_requests_total", tl))
	// A request is counted once its response is written: the client may
	// read the last answer a moment before.
	eventually(t, reg, "spool_requests_total", map[string]string{"api": "Produce"}, 10)
	require.Equal(t, 10.0, mustValue(t, reg, "spool_request_duration_seconds", map[string]string{"api": "Produce"}))
	require.Equal(t, 10.0, mustValue(t, reg, "spool_request_phase_duration_seconds", map[string]string{"api": "Produce", "phase": "local"}))
	pl := map[string]string{"topic": "t", "partition": "0"}
	require.Equal(t, 10.0, mustValue(t, reg, "spool_partition_log_end_offset", pl))
	require.Equal(t, 10.0, mustValue(t, reg, "spool_partition_high_watermark", pl))
	require.Greater(t, mustValue(t, reg, "spool_partition_log_size_bytes", pl), float64(produced))
	require.Equal(t, 1.0, mustValue(t, reg, "spool_partitions", nil))
	require.Equal(t, 1.0, mustValue(t, reg, "spool_leader_partitions", nil))
	require.Zero(t, mustValue(t, reg, "spool_under_replicated_partitions", nil))
	require.Equal(t, 1.0, mustValue(t, reg, "spool_active_controller", nil))
	require.GreaterOrEqual(t, mustValue(t, reg, "spool_connections", nil), 1.0)
	require.Greater(t, mustValue(t, reg, "spool_log_flush_duration_seconds", nil), 0.0) // acks=all on the default Sync policy: fsyncs

	// A group consumes 4 and commits: lag 6. Then it reads the rest: 0.
	gc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumerGroup("g"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer gc.Close()
	var got []*kgo.Record
	for len(got) < 10 {
		fs := gc.PollFetches(ctx)
		require.NoError(t, fs.Err())
		got = append(got, fs.Records()...)
	}
	require.NoError(t, gc.CommitRecords(ctx, got[3]))
	gl := map[string]string{"group": "g", "topic": "t", "partition": "0"}
	require.Equal(t, 6.0, mustValue(t, reg, "spool_consumer_group_lag", gl))
	require.Equal(t, 4.0, mustValue(t, reg, "spool_consumer_group_committed_offset", gl))
	lag, err := b.Lag(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, []spool.PartitionLag{{Topic: "t", Partition: 0, Committed: 4, End: 10, Lag: 6}}, lag)
	require.NoError(t, gc.CommitRecords(ctx, got[9]))
	require.Zero(t, mustValue(t, reg, "spool_consumer_group_lag", gl))

	// The fetches that returned the records counted their bytes out; the
	// long polls that waited for more counted remote time.
	require.GreaterOrEqual(t, mustValue(t, reg, "spool_topic_bytes_out_total", tl), float64(produced))
	require.GreaterOrEqual(t, mustValue(t, reg, "spool_topic_fetch_requests_total", tl), 1.0)
	require.GreaterOrEqual(t, mustValue(t, reg, "spool_requests_total", map[string]string{"api": "Fetch"}), 1.0)

	// A produce to a partition that does not exist fails: counted for the
	// topic, nothing written.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	d, err := b.DescribeTopic("t")
	require.NoError(t, err)
	rt.Topic, rt.TopicID = "t", d.ID // Produce v13 names topics by id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = 7
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.NotZero(t, resp.Topics[0].Partitions[0].ErrorCode, "%+v", resp)
	require.Equal(t, 10.0, mustValue(t, reg, "spool_topic_records_in_total", tl))
	require.Equal(t, 1.0, mustValue(t, reg, "spool_topic_failed_produce_requests_total", tl))
	require.Equal(t, 11.0, mustValue(t, reg, "spool_topic_produce_requests_total", tl))
}

// Stats without Prometheus: the same counters, read directly.
func TestBrokerStatsInProcess(t *testing.T) {
	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	defer b.Close()
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "a", spool.TopicConfig{Partitions: 2}))
	p, err := b.NewProducer(spool.ProducerConfig{Partitioner: partition.RoundRobinPartitioner()})
	require.NoError(t, err)
	for range 100 {
		p.Produce(ctx, spool.Record{Topic: "a", Value: []byte("0123456789")}, nil)
	}
	require.NoError(t, p.Flush(ctx))
	ps := p.Stats()
	require.EqualValues(t, 100, ps.Records)
	require.Zero(t, ps.Failed)
	require.Zero(t, ps.Buffered)
	require.GreaterOrEqual(t, ps.Bytes, int64(1000))
	require.EqualValues(t, ps.Batches, ps.Latency.Count)
	require.NoError(t, p.Close())

	c, err := b.NewConsumer(spool.ConsumerConfig{})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign("a", 0))
	require.NoError(t, c.Seek("a", 0, 20))
	cs := c.Stats()
	require.Equal(t, map[spool.TopicPartition]int64{{Topic: "a", Partition: 0}: 30}, cs.Lag)
	require.EqualValues(t, 30, cs.LagMax)
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 30)
	cs = c.Stats()
	require.EqualValues(t, 30, cs.Records)
	require.GreaterOrEqual(t, cs.Bytes, int64(300), "the batches holding the 30 records")
	require.Zero(t, cs.LagMax)

	st := b.Stats()
	require.Len(t, st.Topics, 1)
	ts := st.Topics[0]
	require.Equal(t, "a", ts.Topic)
	require.EqualValues(t, 100, ts.RecordsIn)
	require.Equal(t, ps.Bytes, ts.BytesIn, "the producer's batches are what the broker took in")
	require.Equal(t, cs.Bytes, ts.BytesOut, "the consumer's reads are what the broker gave out")
	require.Equal(t, ps.Batches, ts.ProduceRequests)
	require.Positive(t, ts.FetchRequests)
	require.Zero(t, ts.FailedProduceRequests+ts.FailedFetchRequests)
	require.Len(t, st.Partitions, 2)
	require.Equal(t, 2, st.LeaderCount)
	require.True(t, st.ActiveController)
	var size int64
	for _, p := range st.Partitions {
		require.EqualValues(t, 50, p.EndOffset)
		size += p.Size
	}
	require.Equal(t, size, ts.BytesIn, "bytes in are the bytes the logs hold")

	// A deleted topic's counters go with it.
	require.NoError(t, b.DeleteTopic(ctx, "a"))
	require.Empty(t, b.Stats().Topics)
}

// Two brokers in one process register side by side under a label.
func TestTwoBrokersOneRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, id := range []string{"1", "2"} {
		b, err := spool.Open(t.TempDir(), spool.Options{})
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.CreateTopic(context.Background(), "t", spool.TopicConfig{}))
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"broker": id}, reg)
		require.NoError(t, wrapped.Register(spoolprom.NewCollector(b, spoolprom.Options{})))
	}
	n, err := testutil.GatherAndCount(reg, "spool_partitions")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	// The exposition lints clean (names, units, help).
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	for _, p := range problems {
		require.False(t, strings.Contains(p.Text, "counter metrics should have"), "%s: %s", p.Metric, p.Text)
	}
	require.Empty(t, problems)
}
