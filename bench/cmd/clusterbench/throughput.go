package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicSpec is a topic the throughput test writes to.
type topicSpec struct {
	name       string
	rf, minISR int
}

// throughputTopics are the two topics of the comparison, on the same
// three processes: each partition on three brokers, acks=all waiting for
// two of them at least, against each partition on one broker.
var throughputTopics = []topicSpec{
	{name: "rf3", rf: 3, minISR: 2},
	{name: "rf1", rf: 1, minISR: 1},
}

// produceResult is one timed production.
type produceResult struct {
	took       time.Duration
	clusterCPU time.Duration // the nodes' CPU time meanwhile
	clientCPU  time.Duration // this process's
}

// rate is records per second.
func (r produceResult) rate(n int) float64 { return float64(n) / r.took.Seconds() }

// produce produces n records of size bytes to topic with a new client
// (kgo's defaults but compression: acks=all, idempotent, linger 10 ms, the
// sticky uniform-bytes partitioner) and waits for every acknowledgement;
// it returns the time from the first Produce call to the last
// acknowledgement, then checks that the topic's end offsets add up to what
// was acknowledged.
func produce(ctx context.Context, c *cluster, topic string, n, size int) (produceResult, error) {
	var res produceResult
	cl, err := c.client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	// Warm the producer id, the metadata and a connection: not timed.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		return res, fmt.Errorf("warm-up produce: %w", err)
	}
	vals := newValues(size)
	var failed atomic.Pointer[error]
	var acked atomic.Int64
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		acked.Add(1)
	}
	cpu0, self0 := c.cpuTime(), selfCPU()
	start := time.Now()
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: vals.value(i, time.Time{})}, cb)
	}
	if err := cl.Flush(ctx); err != nil {
		return res, err
	}
	res.took = time.Since(start)
	res.clusterCPU, res.clientCPU = c.cpuTime()-cpu0, selfCPU()-self0
	if p := failed.Load(); p != nil {
		return res, *p
	}
	if got := acked.Load(); got != int64(n) {
		return res, fmt.Errorf("%d of %d records acknowledged", got, n)
	}
	ends, err := endOffsets(ctx, cl, topic)
	if err != nil {
		return res, err
	}
	var total int64
	for _, e := range ends {
		total += e
	}
	if total != int64(n)+1 {
		return res, fmt.Errorf("topic %s ends at %d records in all, want %d", topic, total, n+1)
	}
	return res, nil
}

// endOffsets returns the high watermark of each partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	m, err := metadata(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	if len(m.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics", topic, len(m.Topics))
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range m.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.Partition, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	// kgo splits the request by partition leader.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("list offsets %s/%d: error code %d", topic, p.Partition, p.ErrorCode)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}

// values makes record values: size bytes of letters, the first 8 carrying
// the record's index and the next 8 a timestamp (big-endian), where the
// latency and failover tests need one.
type values struct{ base []byte }

func newValues(size int) *values {
	v := make([]byte, max(size, 16))
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return &values{base: v}
}

// value returns record i's value, newly allocated, stamped with at unless
// it is zero.
func (s *values) value(i int, at time.Time) []byte {
	v := make([]byte, len(s.base))
	copy(v, s.base)
	binary.BigEndian.PutUint64(v, uint64(i))
	if !at.IsZero() {
		binary.BigEndian.PutUint64(v[8:], uint64(at.UnixNano()))
	}
	return v
}

// stamp is the timestamp value put in v.
func stamp(v []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(v[8:16])))
}
