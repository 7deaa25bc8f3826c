package spool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
)

// The one way producers and consumers reach a replicated partition's
// leader, wherever it is: a ReplicaSet in this process (this broker's, or
// another Broker's in a LocalCluster), or a broker in another process,
// reached over the Kafka protocol through Remote.

// leaderHandle is a partition's leader as a producer writes to it.
// *replica.ReplicaSet is one; remoteLeader is another.
type leaderHandle interface {
	// IsLeader reports whether it still leads the partition.
	IsLeader() bool
	// WriteBatches writes batches without waiting for the ISR; Commit
	// then tells when they are committed.
	WriteBatches(batches []record.Batch, opts replica.AppendOptions) (replica.AppendResult, replica.Pending)
	Commit(pd replica.Pending) (done bool, changed <-chan struct{}, err error)
	// TimeoutError is the error of a write not committed in time.
	TimeoutError(after time.Duration) error
	// AppendBatches writes and waits as opts.Acks says.
	AppendBatches(ctx context.Context, batches []record.Batch, opts replica.AppendOptions) replica.AppendResult
	// Append is AppendBatches for one batch.
	Append(ctx context.Context, b record.Batch, opts replica.AppendOptions) (int64, error)
}

// leaderFor returns the leader of partition n of a replicated topic for
// writing: the replica in this process that leads it or, on a networked
// node, the broker that does.
func (b *Broker) leaderFor(ctx context.Context, topic string, n int32) (leaderHandle, error) {
	rs, err := b.cl.leader(ctx, topic, n)
	if err == nil {
		return rs, nil
	}
	var nl *replica.NotLeaderError
	if errors.As(err, &nl) && nl.Leader >= 0 && nl.Leader != b.opts.NodeID {
		if h := b.cl.remoteLeader(topic, n, nl.Leader, nl.LeaderEpoch); h != nil {
			return h, nil
		}
	}
	return nil, err
}

// RemoteFetch is what a fetch from another broker returned.
type RemoteFetch struct {
	// Batches are whole record batches from the fetch offset on, each
	// CRC-checked on arrival.
	Batches        []byte
	HighWatermark  int64
	LogStartOffset int64
}

// remoteLeader is a partition's leader in another process: writes are
// Kafka produce requests, each waiting for the acks asked (so there is no
// separate commit to wait for), with the producer's ordering kept by
// sending one request at a time.
type remoteLeader struct {
	nc     *netCluster
	broker int32
	epoch  int32
	topic  string
	part   int32
}

func (r *remoteLeader) IsLeader() bool {
	st, ok := r.nc.q.Image().Partition(r.topic, r.part)
	return ok && st.Leader == r.broker && st.LeaderEpoch == r.epoch
}

func (r *remoteLeader) WriteBatches(batches []record.Batch, opts replica.AppendOptions) (replica.AppendResult, replica.Pending) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.nc.ctx, timeout+5*time.Second)
	defer cancel()
	return r.AppendBatches(ctx, batches, opts), replica.Pending{}
}

func (r *remoteLeader) AppendBatches(ctx context.Context, batches []record.Batch, opts replica.AppendOptions) replica.AppendResult {
	var res replica.AppendResult
	acks := AcksAll
	switch opts.Acks {
	case replica.AcksLeader:
		acks = AcksLeader
	case replica.AcksNone:
		acks = AcksNone
	}
	for _, b := range batches {
		base, err := r.nc.opts.Remote.Produce(ctx, r.broker, r.topic, r.part, b, ProduceOptions{Acks: acks, Timeout: opts.Timeout})
		if err != nil {
			if errors.Is(err, replica.ErrUnknownPartition) {
				// This node routed the batch there from its metadata: the
				// leader has not applied the topic's creation yet.
				err = fmt.Errorf("%w: the leader does not know the partition yet: %w", replica.ErrLeaderNotAvailable, err)
			}
			res.Err = fmt.Errorf("%s-%d at broker %d: %w", r.topic, r.part, r.broker, err)
			break
		}
		res.Bases = append(res.Bases, base)
	}
	return res
}

func (r *remoteLeader) Append(ctx context.Context, b record.Batch, opts replica.AppendOptions) (int64, error) {
	res := r.AppendBatches(ctx, []record.Batch{b}, opts)
	if res.Err != nil {
		return -1, res.Err
	}
	return res.Bases[0], nil
}

// Commit implements leaderHandle: a remote write was acknowledged as
// asked when WriteBatches returned.
func (r *remoteLeader) Commit(replica.Pending) (bool, <-chan struct{}, error) {
	return true, closedChan, nil
}

func (r *remoteLeader) TimeoutError(after time.Duration) error {
	return fmt.Errorf("%s-%d: %w after %v", r.topic, r.part, replica.ErrTimedOut, after)
}

// readable is a partition as a consumer reads it: *partition.Partition,
// or remotePartition for one led by another process.
type readable interface {
	Changed() <-chan struct{}
	StartOffset() int64
	HighWatermark() int64
	LeaderEpoch() int32
	OffsetForTime(t time.Time) (int64, bool, error)
	Fetch(ctx context.Context, offset int64, minBytes, maxBytes int, maxWait time.Duration) (partition.FetchResult, error)
	LastStableOffset() int64
	FetchCommitted(ctx context.Context, offset int64, minBytes, maxBytes int, maxWait time.Duration) (partition.FetchResult, error)
}

// readerFor returns the leader of a replicated partition for reading.
func (b *Broker) readerFor(ctx context.Context, tp TopicPartition) (readable, error) {
	rs, err := b.cl.leader(ctx, tp.Topic, tp.Partition)
	if err == nil {
		return rs.Partition(), nil
	}
	var nl *replica.NotLeaderError
	if errors.As(err, &nl) && nl.Leader >= 0 && nl.Leader != b.opts.NodeID {
		if r := b.cl.remoteReader(tp, nl.Leader, nl.LeaderEpoch); r != nil {
			return r, nil
		}
	}
	return nil, err
}

// remoteLeader implements clusterBackend: a leader in another process,
// written to over the Kafka protocol.
func (nc *netCluster) remoteLeader(topic string, n, broker, epoch int32) leaderHandle {
	return &remoteLeader{nc: nc, broker: broker, epoch: epoch, topic: topic, part: n}
}

// remoteReader implements clusterBackend: a leader in another process,
// read over the Kafka protocol.
func (nc *netCluster) remoteReader(tp TopicPartition, broker, epoch int32) readable {
	return nc.remotePartition(tp, broker, epoch)
}

// remoteLeader implements clusterBackend: every leader of a LocalCluster
// is in this process.
func (c *LocalCluster) remoteLeader(string, int32, int32, int32) leaderHandle { return nil }

// remoteReader implements clusterBackend.
func (c *LocalCluster) remoteReader(TopicPartition, int32, int32) readable { return nil }

// remotePollInterval is how often a consumer looks again at a partition
// led by another process when it found nothing new there (it cannot wait
// on the partition's changes as on a local one).
const remotePollInterval = 50 * time.Millisecond

// remotePartition reads a partition led by another process with Kafka
// fetches; it remembers the offsets its last fetch reported.
type remotePartition struct {
	nc     *netCluster
	broker int32
	epoch  int32
	tp     TopicPartition
	hw     atomic.Int64
	start  atomic.Int64
}

func (nc *netCluster) remotePartition(tp TopicPartition, broker, epoch int32) *remotePartition {
	p := &remotePartition{nc: nc, broker: broker, epoch: epoch, tp: tp}
	p.hw.Store(-1)
	p.start.Store(-1)
	return p
}

func (p *remotePartition) Changed() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(remotePollInterval, func() { close(ch) })
	return ch
}

// refresh learns the partition's offsets once, for a consumer placing
// itself before its first fetch.
func (p *remotePartition) refresh() {
	if p.hw.Load() >= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(p.nc.ctx, 10*time.Second)
	defer cancel()
	if res, err := p.nc.opts.Remote.Fetch(ctx, p.broker, p.tp.Topic, p.tp.Partition, -1, 0); err == nil {
		p.hw.Store(res.HighWatermark)
		p.start.Store(res.LogStartOffset)
	}
}

func (p *remotePartition) StartOffset() int64   { p.refresh(); return max(p.start.Load(), 0) }
func (p *remotePartition) HighWatermark() int64 { p.refresh(); return max(p.hw.Load(), 0) }

func (p *remotePartition) Fetch(ctx context.Context, offset int64, _, maxBytes int, _ time.Duration) (partition.FetchResult, error) {
	res, err := p.nc.opts.Remote.Fetch(ctx, p.broker, p.tp.Topic, p.tp.Partition, offset, maxBytes)
	if err != nil {
		return partition.FetchResult{}, fmt.Errorf("%s-%d at broker %d: %w", p.tp.Topic, p.tp.Partition, p.broker, err)
	}
	p.hw.Store(res.HighWatermark)
	p.start.Store(res.LogStartOffset)
	return partition.FetchResult{Batches: res.Batches, HighWatermark: res.HighWatermark, LogStartOffset: res.LogStartOffset}, nil
}

// LeaderEpoch is the leader epoch the metadata gave the leader.
func (p *remotePartition) LeaderEpoch() int32 { return p.epoch }

// LastStableOffset is the high watermark: a consumer at read_committed
// cannot read a partition led by another process yet (FetchCommitted).
func (p *remotePartition) LastStableOffset() int64 { return p.HighWatermark() }

// FetchCommitted is not served for a partition led by another process
// yet: the remote fetch does not carry the isolation level and the aborted
// transactions.
func (p *remotePartition) FetchCommitted(context.Context, int64, int, int, time.Duration) (partition.FetchResult, error) {
	return partition.FetchResult{}, fmt.Errorf("spool: read_committed from %s-%d, led by broker %d in another process: %w", p.tp.Topic, p.tp.Partition, p.broker, errors.ErrUnsupported)
}

// OffsetForTime is not served for a partition led by another process yet.
func (p *remotePartition) OffsetForTime(time.Time) (int64, bool, error) {
	return 0, false, fmt.Errorf("spool: seeking by time in %s-%d, led by broker %d in another process: %w", p.tp.Topic, p.tp.Partition, p.broker, errors.ErrUnsupported)
}
