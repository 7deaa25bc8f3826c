package spool

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/internal/measure"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/stats"
)

// What a broker measures, for operators: Broker.Stats is a plain snapshot
// (no metrics library needed to read it), package spoolprom turns it into
// Prometheus metrics at scrape time, and Broker.Lag is a consumer group's
// lag. The counters are atomics bumped on the produce and fetch paths; the
// gauges (partitions, ISR, sizes) are read when Stats is called.

// BrokerStats is a broker's measures at one time.
type BrokerStats struct {
	// NodeID is the broker's node id.
	NodeID int32
	// ActiveController says this broker is the cluster's active
	// controller (a standalone broker is its own: always true). Across a
	// cluster exactly one broker should say so.
	ActiveController bool
	// Topics are the traffic counters of each topic, by name.
	Topics []TopicStats
	// Partitions are the replicas this broker holds, by topic and number
	// (a standalone broker: every partition).
	Partitions []PartitionStats
	// PartitionCount is len(Partitions); LeaderCount how many of them this
	// broker leads.
	PartitionCount, LeaderCount int
	// UnderReplicated counts the partitions this broker leads whose ISR is
	// smaller than their replica set; UnderMinISR those whose ISR is
	// below min.insync.replicas (acks=all produce is refused), AtMinISR
	// those exactly at it though they have more replicas (one more
	// failure refuses it). Offline counts the partitions here that could
	// not be opened and, on the active controller, the cluster's
	// partitions with no leader. All 0 on a healthy cluster.
	UnderReplicated, UnderMinISR, AtMinISR, Offline int
	// ISRShrinks and ISRExpands count the ISR changes this broker made as
	// a leader (IsrShrinksPerSec, IsrExpandsPerSec).
	ISRShrinks, ISRExpands int64
	// TruncatedCommitted counts records a follower here removed from
	// below its high watermark: committed records lost to an unclean
	// election. Resignations and Repairs count leaderships given up over a
	// damaged batch and followers that cut a damaged tail to copy it
	// again.
	TruncatedCommitted, Resignations, Repairs int64
	// LogFlushes are the fsyncs of partitions' logs: their count and
	// latency (LogFlushRateAndTimeMs).
	LogFlushes stats.HistogramSnapshot
}

// TopicStats counts one topic's traffic through this broker since it
// opened: records and bytes produced (as the leader; replication is not
// counted), bytes fetched by consumers, and produce and fetch requests,
// counted per partition, with those that failed (BrokerTopicMetrics).
type TopicStats struct {
	Topic                                  string
	RecordsIn, BytesIn, BytesOut           int64
	ProduceRequests, FailedProduceRequests int64
	FetchRequests, FailedFetchRequests     int64
}

// PartitionStats is one replica of a partition on this broker.
type PartitionStats struct {
	Topic     string
	Partition int32
	// Leader is the leading broker (-1: none); IsLeader says it is this
	// one. LeaderEpoch is the epoch the replica knows.
	Leader      int32
	IsLeader    bool
	LeaderEpoch int32
	// Replicas and ISR are the sizes of the replica set and the in-sync
	// set; MinISR the topic's min.insync.replicas.
	Replicas, ISR, MinISR int
	// The log's offsets and its size on disk.
	StartOffset, EndOffset, HighWatermark int64
	Size                                  int64
	Segments                              int
	// Offline: the partition could not be opened, or has no leader.
	Offline bool
}

// UnderReplicated: this broker leads the partition and its ISR is smaller
// than its replica set.
func (p PartitionStats) UnderReplicated() bool { return p.IsLeader && p.ISR < p.Replicas }

// UnderMinISR: this broker leads the partition and its ISR is below
// min.insync.replicas.
func (p PartitionStats) UnderMinISR() bool { return p.IsLeader && p.ISR < p.MinISR }

// brokerMetrics are the counters Stats reads.
type brokerMetrics struct {
	topics sync.Map // topic name -> *topicTraffic
	flush  stats.Histogram
}

type topicTraffic struct {
	recordsIn, bytesIn, bytesOut atomic.Int64
	produce, failedProduce       atomic.Int64
	fetch, failedFetch           atomic.Int64
}

// topic returns a topic's counters. A failure is counted only for a topic
// counted before (one that had traffic): otherwise clients naming topics
// that do not exist would grow the map without end.
func (m *brokerMetrics) topic(name string, failed bool) *topicTraffic {
	if t, ok := m.topics.Load(name); ok {
		return t.(*topicTraffic)
	}
	if failed {
		return nil
	}
	t, _ := m.topics.LoadOrStore(name, new(topicTraffic))
	return t.(*topicTraffic)
}

// produced counts a write to a partition of a topic that put records
// records, bytes bytes, in its log, and failed if err is not nil (a write
// may fail after its records are in: acks=all without the followers).
func (m *brokerMetrics) produced(topic string, records, bytes int, err error) {
	if !measure.On() {
		return
	}
	t := m.topic(topic, err != nil && records == 0)
	if t == nil {
		return
	}
	t.produce.Add(1)
	if err != nil {
		t.failedProduce.Add(1)
	}
	t.recordsIn.Add(int64(records))
	t.bytesIn.Add(int64(bytes))
}

// appended counts a producer's batch appended to a partition (or refused
// with err); a retry recognised as a duplicate was not written again and
// is counted as a request only.
func (m *brokerMetrics) appended(topic string, batch record.Batch, duplicate bool, err error) {
	if err != nil || duplicate {
		m.produced(topic, 0, 0, err)
		return
	}
	m.produced(topic, int(batch.NumRecords()), batch.Size(), nil)
}

// RecordProduce counts a write of records records, bytes bytes, to one
// partition of a topic, failed if err is not nil. The broker counts the
// writes that go through it (Produce, Producer, ProduceBatch); a server
// that appends to a Partition itself (package transport, standalone)
// calls it for each partition of each Produce it serves.
func (b *Broker) RecordProduce(topic string, records, bytes int, err error) {
	b.metrics.produced(topic, records, bytes, err)
}

// RecordFetch counts a read of one partition of a topic by a consumer: a
// fetch request's share, bytes returned, failed if err is not nil. The
// broker counts its own consumers' reads; a server built on the broker
// (package transport) calls it for each partition of each Fetch it serves,
// so that Stats has BytesOut.
func (b *Broker) RecordFetch(topic string, bytes int64, err error) {
	if !measure.On() {
		return
	}
	t := b.metrics.topic(topic, err != nil)
	if t == nil {
		return
	}
	t.fetch.Add(1)
	if err != nil {
		t.failedFetch.Add(1)
		return
	}
	t.bytesOut.Add(bytes)
}

// Stats returns the broker's measures. It reads every partition's offsets
// and sizes: cheap, but not free with many thousands of partitions; call
// it at scrape intervals, not per request.
func (b *Broker) Stats() BrokerStats {
	st := BrokerStats{NodeID: b.opts.NodeID, LogFlushes: b.metrics.flush.Snapshot()}
	if b.node != nil {
		ns := b.node.Stats()
		st.ISRShrinks, st.ISRExpands = ns.ISRShrinks, ns.ISRExpands
		st.TruncatedCommitted, st.Resignations, st.Repairs = ns.TruncatedCommitted, ns.Resignations, ns.Repairs
	}
	switch cl := b.cl.(type) {
	case nil:
		st.ActiveController = true // a standalone broker is its own
	case *LocalCluster:
		// Its controller runs in this process beside the brokers: the
		// lowest-numbered one answers for it, as Metadata names it.
		st.ActiveController = cl.controllerBroker() == b.opts.NodeID
	default:
		if q := b.Quorum(); q != nil {
			st.ActiveController = q.Active()
		}
	}
	live := map[string]bool{}
	for _, name := range b.Topics() {
		live[name] = true
	}
	b.metrics.topics.Range(func(k, v any) bool {
		name := k.(string)
		if !live[name] {
			b.metrics.topics.Delete(k) // deleted since: its counters go with it
			return true
		}
		t := v.(*topicTraffic)
		st.Topics = append(st.Topics, TopicStats{
			Topic: name, RecordsIn: t.recordsIn.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load(),
			ProduceRequests: t.produce.Load(), FailedProduceRequests: t.failedProduce.Load(),
			FetchRequests: t.fetch.Load(), FailedFetchRequests: t.failedFetch.Load(),
		})
		return true
	})
	slices.SortFunc(st.Topics, func(a, b TopicStats) int { return cmp.Compare(a.Topic, b.Topic) })
	st.Partitions = b.partitionStats()
	for _, p := range st.Partitions {
		if p.IsLeader {
			st.LeaderCount++
		}
		if p.UnderReplicated() {
			st.UnderReplicated++
		}
		if p.UnderMinISR() {
			st.UnderMinISR++
		}
		if p.IsLeader && p.ISR == p.MinISR && p.Replicas > p.MinISR {
			st.AtMinISR++
		}
		if p.Offline && (b.cl == nil || p.Leader >= 0) {
			st.Offline++ // here: could not be opened
		}
	}
	st.PartitionCount = len(st.Partitions)
	if b.cl != nil && st.ActiveController {
		// The cluster's partitions with no leader, counted once, by the
		// controller, as Kafka's OfflinePartitionsCount is.
		for _, name := range b.cl.topicNames() {
			_, states, err := b.cl.topic(context.Background(), name)
			if err != nil {
				continue
			}
			for _, s := range states {
				if s.Leader < 0 {
					st.Offline++
				}
			}
		}
	}
	return st
}

// partitionStats lists this broker's replicas.
func (b *Broker) partitionStats() []PartitionStats {
	var out []PartitionStats
	if b.node != nil {
		for _, rs := range b.node.ReplicaSets() {
			s := rs.State()
			p := rs.Partition()
			ps := PartitionStats{
				Topic: s.Topic, Partition: s.Partition, Leader: s.Leader, IsLeader: rs.IsLeader(),
				LeaderEpoch: s.LeaderEpoch, Replicas: len(s.Replicas), ISR: len(s.ISR), MinISR: rs.MinInSyncReplicas(),
				Offline: s.Leader < 0,
			}
			if p != nil {
				ps.StartOffset, ps.EndOffset, ps.HighWatermark = p.StartOffset(), p.EndOffset(), p.HighWatermark()
				ps.Size, ps.Segments = p.Log().Size(), p.Log().NumSegments()
			}
			out = append(out, ps)
		}
	}
	// The topics this broker holds by itself: every topic of a standalone
	// broker, the internal ones it keeps alone in a cluster.
	for _, t := range b.snapshot() {
		minISR := max(b.effective(t.config()).MinInSyncReplicas, 1)
		for i, p := range t.partitions() {
			ps := PartitionStats{Topic: t.name, Partition: int32(i), Leader: -1, Replicas: 1, MinISR: int(minISR), Offline: p == nil}
			if p != nil {
				ps.Leader, ps.IsLeader, ps.LeaderEpoch, ps.ISR = b.opts.NodeID, true, p.LeaderEpoch(), 1
				ps.StartOffset, ps.EndOffset, ps.HighWatermark = p.StartOffset(), p.EndOffset(), p.HighWatermark()
				ps.Size, ps.Segments = p.Log().Size(), p.Log().NumSegments()
			}
			out = append(out, ps)
		}
	}
	slices.SortFunc(out, func(a, b PartitionStats) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// highWatermark is a partition's high watermark as this broker can learn
// it: its own replica's (a follower's trails the leader's by at most a
// fetch), else the leader's, asked over the network on a cluster node.
// False if the partition is unknown, offline or its leader unreachable.
func (b *Broker) highWatermark(ctx context.Context, tp TopicPartition) (int64, bool) {
	if t, ok := b.snapshot()[tp.Topic]; ok {
		p, err := t.partition(tp.Partition)
		if err != nil {
			return 0, false
		}
		return p.HighWatermark(), true
	}
	if b.node != nil {
		if rs, ok := b.node.ReplicaSet(tp.Topic, tp.Partition); ok && rs.Partition() != nil {
			return rs.HighWatermark(), true
		}
	}
	if b.cl == nil {
		return 0, false
	}
	r, err := b.readerFor(ctx, tp)
	if err != nil {
		return 0, false
	}
	if rp, ok := r.(*remotePartition); ok {
		rp.refresh()
		if rp.hw.Load() < 0 {
			return 0, false // the leader did not answer
		}
	}
	return r.HighWatermark(), true
}

// PartitionLag is a consumer group's position in one partition.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset; End the partition's high
	// watermark, the offset the next record consumers can read will get.
	Committed, End int64
	// Lag is End - Committed: records the group has not yet committed (0
	// if the committed offset is past the end, as after records are
	// deleted).
	Lag int64
}

// Lag returns a consumer group's lag in each partition it has committed
// an offset for, by topic and partition: what kafka-consumer-groups
// --describe shows. The broker must coordinate the group (in a cluster,
// group.ErrNotCoordinator otherwise); a group with no committed offsets
// has no lag to report (an empty slice). A partition whose end cannot be
// learned (a topic deleted since the commit, a partition offline, its
// leader unreachable) is left out, never reported as lag 0. On a cluster
// node the end of a partition led elsewhere is its local replica's high
// watermark if it holds one, else the leader's, asked over the network.
func (b *Broker) Lag(ctx context.Context, groupID string) ([]PartitionLag, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	offs, err := b.coord.FetchOffsets(groupID, nil)
	if err != nil {
		return nil, err
	}
	byTopic := map[string][]group.TopicPartition{}
	for tp := range offs {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp)
	}
	var out []PartitionLag
	for _, tps := range byTopic {
		for _, tp := range tps {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			end, ok := b.highWatermark(ctx, tp)
			if !ok {
				continue
			}
			c := offs[tp].Offset
			out = append(out, PartitionLag{Topic: tp.Topic, Partition: tp.Partition, Committed: c, End: end, Lag: max(end-c, 0)})
		}
	}
	slices.SortFunc(out, func(a, b PartitionLag) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}

// count adds a poll's records to the consumer's counters.
func (c *Consumer) count(recs []Record) {
	if len(recs) == 0 || !measure.On() {
		return
	}
	c.stats.polls.Add(1)
	c.stats.records.Add(int64(len(recs)))
}

// countFetch counts a read of one partition, n bytes of batches: for the
// consumer, and for the broker of this process that holds the partition
// (a read of another process's leader is counted by its server).
func (c *Consumer) countFetch(a *assignment, part readable, n int) {
	if !measure.On() {
		return
	}
	c.stats.bytes.Add(int64(n))
	owner := c.b
	if a.part == nil {
		p, ok := part.(*partition.Partition)
		if !ok {
			return // another process's
		}
		owner = c.b.holderOf(p)
	}
	owner.RecordFetch(a.tp.Topic, int64(n), nil)
}

// countedBy is the broker that counts a's writes: the one of this process
// holding the partition's leader, nil if it is in another process (whose
// server counts them).
func (p *Producer) countedBy(a *accum) *Broker {
	if a.part != nil {
		return p.b
	}
	rs, ok := a.leader.(*replica.ReplicaSet)
	if !ok {
		return nil
	}
	return p.b.holderOf(rs.Partition())
}

// holderOf is the broker of this process whose replica part is: b itself,
// or another broker of b's LocalCluster.
func (b *Broker) holderOf(part *partition.Partition) *Broker {
	lc, ok := b.cl.(*LocalCluster)
	if !ok {
		return b
	}
	lc.mu.RLock()
	defer lc.mu.RUnlock()
	for _, o := range lc.brokers {
		if o.node == nil {
			continue
		}
		if rs, ok := o.node.ReplicaSet(part.Topic(), part.ID()); ok && rs.Partition() == part {
			return o
		}
	}
	return b
}

// consumerStats are a Consumer's counters.
type consumerStats struct {
	polls, records, bytes atomic.Int64
}

// ConsumerStats is a consumer's measures at one time.
type ConsumerStats struct {
	// Polls counts the polls that returned records; Records what they
	// returned; Bytes the record batches read to return them.
	Polls, Records, Bytes int64
	// Lag is, for each assigned partition with a position, how many
	// records the consumer is behind the partition's high watermark (its
	// last stable offset under read_committed): records-lag. For a
	// partition of a standalone broker it is the high watermark now; for
	// a replicated one, the one its last fetch saw (a partition not yet
	// fetched is left out). LagMax is the largest (records-lag-max).
	Lag    map[TopicPartition]int64
	LagMax int64
}

// Stats returns the consumer's counters and its lag.
func (c *Consumer) Stats() ConsumerStats {
	st := ConsumerStats{Polls: c.stats.polls.Load(), Records: c.stats.records.Load(), Bytes: c.stats.bytes.Load(),
		Lag: map[TopicPartition]int64{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.assigned {
		if !a.valid {
			continue
		}
		end := a.end
		if a.part != nil {
			end = a.part.HighWatermark()
			if c.cfg.IsolationLevel == ReadCommitted {
				end = a.part.LastStableOffset()
			}
		}
		if end < 0 {
			continue
		}
		lag := max(end-a.pos, 0)
		st.Lag[a.tp] = lag
		st.LagMax = max(st.LagMax, lag)
	}
	return st
}

// producerStats are a Producer's counters.
type producerStats struct {
	records, failed, bytes, batches atomic.Int64
	latency                         stats.Histogram
}

// ProducerStats is a producer's measures at one time.
type ProducerStats struct {
	// Records counts the records delivered, Failed those that failed
	// (reported to their callbacks, and to Flush), Bytes the delivered
	// records' bytes, Batches the batches written.
	Records, Failed, Bytes, Batches int64
	// Buffered is how many records are produced and not yet delivered or
	// failed; BufferedBytes the buffer space they hold.
	Buffered, BufferedBytes int
	// Latency is each batch's time from its first record's Produce to its
	// delivery (or failure): linger, the wait for the partition's sender,
	// the write and the acks (record-queue-time plus request-latency).
	Latency stats.HistogramSnapshot
}

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	st := ProducerStats{Records: p.stats.records.Load(), Failed: p.stats.failed.Load(), Bytes: p.stats.bytes.Load(),
		Batches: p.stats.batches.Load(), Latency: p.stats.latency.Snapshot()}
	p.mu.Lock()
	st.Buffered, st.BufferedBytes = p.pending, p.used
	p.mu.Unlock()
	return st
}

// completed counts a batch of n records, reserved bytes, delivered or
// failed with err.
func (p *Producer) completed(bt *batch, err error) {
	if !measure.On() {
		return
	}
	p.stats.latency.Since(bt.created)
	n := int64(len(bt.cbs))
	if err != nil {
		p.stats.failed.Add(n)
		return
	}
	p.stats.batches.Add(1)
	p.stats.records.Add(n)
	p.stats.bytes.Add(int64(bt.size))
}
