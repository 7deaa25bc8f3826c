// Package spoolprom exposes a spool broker's measures as Prometheus
// metrics. It is the only library package of spool that imports
// prometheus/client_golang (the spool command does too, to serve it): the
// library keeps plain Stats() snapshots
// (spool.Broker.Stats, transport.Server.APIStats), and a Collector reads
// them when it is scraped, so nothing is counted twice and nothing is
// registered globally.
//
// Register a Collector on your own registry, never on
// prometheus.DefaultRegisterer from a library:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(spoolprom.NewCollector(broker, spoolprom.Options{Server: srv}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Two brokers in one process register under different labels with
// prometheus.WrapRegistererWith(prometheus.Labels{"broker": "1"}, reg).
//
// Names follow Prometheus' conventions: the prefix spool_, base units
// (seconds, bytes), _total on counters, latencies as histograms. Each
// mirrors one of Kafka's JMX measures; the README's "Operating spool"
// lists them.
package spoolprom

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/stats"
	"github.com/spoolmq/spool/transport"
)

// Options choose what a Collector reports beside the broker's own
// measures.
type Options struct {
	// Server, if set, adds the Kafka server's measures: requests per API
	// with their latency phases, connections, throttle time.
	Server *transport.Server
	// NoPartitionMetrics leaves out the per-partition series (log size,
	// offsets): one set per partition, which a broker with tens of
	// thousands of partitions may not want to export.
	NoPartitionMetrics bool
	// NoGroupLag leaves out consumer groups' lag per partition.
	NoGroupLag bool
}

// Collector is a prometheus.Collector over one broker (and its server).
// Every Collect reads the broker's Stats anew. It is safe for concurrent
// use.
type Collector struct {
	b    *spool.Broker
	opts Options
}

// NewCollector returns a Collector of the broker's measures.
func NewCollector(b *spool.Broker, opts Options) *Collector {
	return &Collector{b: b, opts: opts}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("spool_"+name, help, labels, nil)
}

var (
	topicLabels     = []string{"topic"}
	partitionLabels = []string{"topic", "partition"}

	descRecordsIn       = desc("topic_records_in_total", "Records produced to the topic through this broker (MessagesInPerSec).", topicLabels...)
	descBytesIn         = desc("topic_bytes_in_total", "Bytes of record batches produced to the topic through this broker (BytesInPerSec).", topicLabels...)
	descBytesOut        = desc("topic_bytes_out_total", "Bytes of records consumers fetched from the topic (BytesOutPerSec); replication is not counted.", topicLabels...)
	descProduceRequests = desc("topic_produce_requests_total", "Partition writes requested of the topic (TotalProduceRequestsPerSec).", topicLabels...)
	descFailedProduce   = desc("topic_failed_produce_requests_total", "Partition writes of the topic that failed (FailedProduceRequestsPerSec).", topicLabels...)
	descFetchRequests   = desc("topic_fetch_requests_total", "Partition reads of the topic by consumers (TotalFetchRequestsPerSec).", topicLabels...)
	descFailedFetch     = desc("topic_failed_fetch_requests_total", "Partition reads of the topic that failed (FailedFetchRequestsPerSec).", topicLabels...)

	descPartitions      = desc("partitions", "Partition replicas on this broker (PartitionCount).")
	descLeaders         = desc("leader_partitions", "Partitions this broker leads (LeaderCount).")
	descUnderReplicated = desc("under_replicated_partitions", "Partitions led here whose ISR is smaller than their replica set (UnderReplicatedPartitions).")
	descUnderMinISR     = desc("under_min_isr_partitions", "Partitions led here whose ISR is below min.insync.replicas: acks=all writes are refused (UnderMinIsrPartitionCount).")
	descAtMinISR        = desc("at_min_isr_partitions", "Partitions led here whose ISR is exactly min.insync.replicas (AtMinIsrPartitionCount).")
	descOffline         = desc("offline_partitions", "Partitions on this broker with no leader or that could not be opened (OfflinePartitionsCount).")
	descISRShrinks      = desc("isr_shrinks_total", "ISR changes that removed replicas, made by leaders on this broker (IsrShrinksPerSec).")
	descISRExpands      = desc("isr_expands_total", "ISR changes that added replicas, made by leaders on this broker (IsrExpandsPerSec).")
	descController      = desc("active_controller", "1 if this broker is the cluster's active controller (ActiveControllerCount); a standalone broker is its own.")
	descTruncated       = desc("truncated_committed_records_total", "Records a follower here removed from below its high watermark: committed records lost to an unclean election.")
	descResignations    = desc("damaged_leader_resignations_total", "Leaderships given up because the leader's log held a damaged batch.")
	descRepairs         = desc("damaged_follower_repairs_total", "Follower logs cut before a damaged batch to copy it again from the leader.")
	descFlush           = desc("log_flush_duration_seconds", "Time each fsync of a partition's log took (LogFlushRateAndTimeMs).")

	descLogSize       = desc("partition_log_size_bytes", "Bytes of the partition's log on disk (kafka.log Size).", partitionLabels...)
	descLogStart      = desc("partition_log_start_offset", "The partition's first readable offset.", partitionLabels...)
	descLogEnd        = desc("partition_log_end_offset", "The offset the partition's next record will get.", partitionLabels...)
	descHighWatermark = desc("partition_high_watermark", "The partition's high watermark: consumers read below it.", partitionLabels...)
	descISRSize       = desc("partition_in_sync_replicas", "The partition's in-sync replica count.", partitionLabels...)

	groupLabels     = []string{"group", "topic", "partition"}
	descGroupLag    = desc("consumer_group_lag", "Records between a consumer group's committed offset and the partition's high watermark.", groupLabels...)
	descGroupCommit = desc("consumer_group_committed_offset", "A consumer group's committed offset in the partition.", groupLabels...)

	apiLabels      = []string{"api"}
	descRequests   = desc("requests_total", "Requests served, by API (RequestsPerSec).", apiLabels...)
	descReqFailed  = desc("request_failures_total", "Requests that ended their connection: undecodable, an unsupported version, sent before authenticating, or the handler failed.", apiLabels...)
	descReqBytes   = desc("request_bytes_total", "Bytes of requests received, by API (RequestBytes).", apiLabels...)
	descReqTime    = desc("request_duration_seconds", "Time from a request read to its response written and any quota mute over (TotalTimeMs).", apiLabels...)
	descReqPhase   = desc("request_phase_duration_seconds", "Time in each phase of serving a request: queue (decode, authorize), local (the broker's work), remote (waits on followers or a long poll), send (writing the response), throttle (muted by a quota).", "api", "phase")
	descConns      = desc("connections", "Client connections open.")
	descAccepted   = desc("connections_accepted_total", "Client connections accepted (connection-creation-total).")
	descRefused    = desc("connections_refused_total", "Connections closed at once: their address had max.connections.per.ip open.")
	descTLSFailed  = desc("tls_handshake_failures_total", "TLS connections closed because their handshake failed.")
	descReadTO     = desc("request_read_timeouts_total", "Connections closed because a request did not arrive whole in time.")
	descMemory     = desc("request_memory_bytes", "Request memory reserved now (queued.max.request.bytes' pool).")
	descMemoryWait = desc("requests_waiting_for_memory", "Requests waiting for room in the request memory pool (RequestQueueSize).")
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRecordsIn, descBytesIn, descBytesOut, descProduceRequests, descFailedProduce, descFetchRequests, descFailedFetch,
		descPartitions, descLeaders, descUnderReplicated, descUnderMinISR, descAtMinISR, descOffline,
		descISRShrinks, descISRExpands, descController, descTruncated, descResignations, descRepairs, descFlush,
	} {
		ch <- d
	}
	if !c.opts.NoPartitionMetrics {
		for _, d := range []*prometheus.Desc{descLogSize, descLogStart, descLogEnd, descHighWatermark, descISRSize} {
			ch <- d
		}
	}
	if !c.opts.NoGroupLag {
		ch <- descGroupLag
		ch <- descGroupCommit
	}
	if c.opts.Server != nil {
		for _, d := range []*prometheus.Desc{descRequests, descReqFailed, descReqBytes, descReqTime, descReqPhase,
			descConns, descAccepted, descRefused, descTLSFailed, descReadTO, descMemory, descMemoryWait} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range st.Topics {
		counter(descRecordsIn, t.RecordsIn, t.Topic)
		counter(descBytesIn, t.BytesIn, t.Topic)
		counter(descBytesOut, t.BytesOut, t.Topic)
		counter(descProduceRequests, t.ProduceRequests, t.Topic)
		counter(descFailedProduce, t.FailedProduceRequests, t.Topic)
		counter(descFetchRequests, t.FetchRequests, t.Topic)
		counter(descFailedFetch, t.FailedFetchRequests, t.Topic)
	}
	gauge(descPartitions, float64(st.PartitionCount))
	gauge(descLeaders, float64(st.LeaderCount))
	gauge(descUnderReplicated, float64(st.UnderReplicated))
	gauge(descUnderMinISR, float64(st.UnderMinISR))
	gauge(descAtMinISR, float64(st.AtMinISR))
	gauge(descOffline, float64(st.Offline))
	counter(descISRShrinks, st.ISRShrinks)
	counter(descISRExpands, st.ISRExpands)
	gauge(descController, boolFloat(st.ActiveController))
	counter(descTruncated, st.TruncatedCommitted)
	counter(descResignations, st.Resignations)
	counter(descRepairs, st.Repairs)
	ch <- histogram(descFlush, st.LogFlushes)
	if !c.opts.NoPartitionMetrics {
		for _, p := range st.Partitions {
			if p.Offline {
				continue
			}
			n := strconv.Itoa(int(p.Partition))
			gauge(descLogSize, float64(p.Size), p.Topic, n)
			gauge(descLogStart, float64(p.StartOffset), p.Topic, n)
			gauge(descLogEnd, float64(p.EndOffset), p.Topic, n)
			gauge(descHighWatermark, float64(p.HighWatermark), p.Topic, n)
			gauge(descISRSize, float64(p.ISR), p.Topic, n)
		}
	}
	if !c.opts.NoGroupLag {
		c.collectLag(gauge)
	}
	if s := c.opts.Server; s != nil {
		c.collectServer(s, ch, counter, gauge)
	}
}

func (c *Collector) collectLag(gauge func(*prometheus.Desc, float64, ...string)) {
	coord := c.b.Groups()
	if coord == nil {
		return
	}
	for _, g := range coord.List() {
		if g.Type == "share" {
			continue
		}
		lags, err := c.b.Lag(context.Background(), g.Group)
		if err != nil {
			continue // not coordinated here, or gone since List
		}
		for _, l := range lags {
			n := strconv.Itoa(int(l.Partition))
			gauge(descGroupLag, float64(l.Lag), g.Group, l.Topic, n)
			gauge(descGroupCommit, float64(l.Committed), g.Group, l.Topic, n)
		}
	}
}

func (c *Collector) collectServer(s *transport.Server, ch chan<- prometheus.Metric,
	counter func(*prometheus.Desc, int64, ...string), gauge func(*prometheus.Desc, float64, ...string)) {
	for _, a := range s.APIStats() {
		counter(descRequests, a.Requests, a.Name)
		counter(descReqFailed, a.Failed, a.Name)
		counter(descReqBytes, a.Bytes, a.Name)
		ch <- histogram(descReqTime, a.Total, a.Name)
		ch <- histogram(descReqPhase, a.Queue, a.Name, "queue")
		ch <- histogram(descReqPhase, a.Local, a.Name, "local")
		ch <- histogram(descReqPhase, a.Remote, a.Name, "remote")
		ch <- histogram(descReqPhase, a.Send, a.Name, "send")
		ch <- histogram(descReqPhase, a.Throttle, a.Name, "throttle")
	}
	ss := s.Stats()
	gauge(descConns, float64(ss.Connections))
	counter(descAccepted, ss.AcceptedConnections)
	counter(descRefused, ss.RefusedConnections)
	counter(descTLSFailed, ss.TLSHandshakeFailures)
	counter(descReadTO, ss.RequestReadTimeouts)
	gauge(descMemory, float64(ss.RequestBytesInFlight))
	gauge(descMemoryWait, float64(ss.RequestsWaitingForMemory))
}

// histogram turns a stats histogram into a Prometheus one.
func histogram(d *prometheus.Desc, h stats.HistogramSnapshot, labels ...string) prometheus.Metric {
	cum := h.Cumulative()
	buckets := make(map[float64]uint64, len(cum))
	for i, b := range stats.Bounds() {
		buckets[b] = cum[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
