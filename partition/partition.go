package partition

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/notify"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// Options configure a Partition.
type Options struct {
	// Log configures the partition's log.
	Log log.Options
	// LeaderEpoch is the epoch this broker leads the partition in; appends
	// are stamped with it. A single broker uses 0, the default. Ignored when
	// Replicated.
	LeaderEpoch int32
	// Replicated hands the partition to a replication layer (package
	// replica): Open starts no epoch, the high watermark is what
	// SetHighWatermark last set rather than the log's committed offset, and
	// BecomeLeader or BecomeFollower says how appends are made.
	Replicated bool
	// HighWatermarkCheckpointInterval is how often a replicated
	// partition records a changed high watermark in HighWatermarkFile
	// (replica.high.watermark.checkpoint.interval.ms). Default 5s.
	HighWatermarkCheckpointInterval time.Duration
	// ProducerIDExpiration is how long an idempotent producer that writes
	// nothing is remembered (producer.id.expiration.ms). Default 24h.
	ProducerIDExpiration time.Duration
}

// Partition is one topic partition on this broker. Safe for concurrent
// use.
type Partition struct {
	topic  string
	id     int32
	dir    string
	log    *log.Log
	epochs *EpochCache
	epoch  atomic.Int32

	replicated bool
	hw         atomic.Int64 // replicated only
	hwNotify   notify.Notifier
	hwFile     *hwCheckpoint // replicated only

	recovery log.RecoveryInfo // what opening the log recovered

	producers          producerHolder // idempotent producers, loaded on first use
	producerExpiration time.Duration
}

// Open opens (or creates) the partition whose log lives in dir.
func Open(dir, topic string, id int32, opts Options) (*Partition, error) {
	p := &Partition{topic: topic, id: id, dir: dir, replicated: opts.Replicated, producerExpiration: opts.ProducerIDExpiration}
	if opts.Replicated && opts.Log.RetentionLimit == nil {
		// Retention never deletes past the high watermark: a follower
		// may not have copied those records yet. (hw is 0 until set
		// below, which only holds retention back.)
		opts.Log.RetentionLimit = p.hw.Load
	}
	if opts.Log.CleanLimit == nil {
		// Compaction never passes the last stable offset: a transaction
		// open there may still abort.
		opts.Log.CleanLimit = p.LastStableOffset
	}
	l, recovery, err := log.OpenWithInfo(dir, opts.Log)
	if err != nil {
		return nil, err
	}
	p.log, p.recovery = l, recovery
	p.epoch.Store(opts.LeaderEpoch)
	if opts.Replicated {
		p.epoch.Store(-1)
		p.hwFile = newHWCheckpoint(dir, topic, id, opts.HighWatermarkCheckpointInterval)
		hw, ok := p.hwFile.read()
		if !ok {
			hw = l.StartOffset()
		}
		p.hw.Store(min(max(hw, l.StartOffset()), l.EndOffset()))
	}
	if err := p.loadEpochs(opts); err != nil {
		l.Close()
		return nil, err
	}
	// Snapshots past the log end describe records a crash took away: drop
	// them now, before appends grow the log past them again. Snapshots
	// below the log start describe records that are gone too (a crash
	// inside StartAt can leave them; Kafka drops them on load as well).
	start, end := l.StartOffset(), l.EndOffset()
	if err := p.dropProducers(func(off int64) bool { return off > end || off < start }); err != nil {
		l.Close()
		return nil, err
	}
	if err := p.loadTxns(); err != nil {
		l.Close()
		return nil, err
	}
	l.SetLeaderEpoch(p.epoch.Load())
	return p, nil
}

// loadEpochs reads the leader-epoch cache, rebuilds it from the batches if
// it is damaged, trims it to the log, and starts this broker's epoch.
func (p *Partition) loadEpochs(opts Options) error {
	c, err := OpenEpochCache(nil, p.dir)
	rebuilt := false
	if errors.Is(err, ErrBadEpochFile) {
		c, err = newEpochCache(nil, p.dir), nil
		entries, rerr := p.scanEpochs()
		if rerr != nil {
			return rerr
		}
		c.entries, rebuilt = entries, true // written by settle
	}
	if err != nil {
		return err
	}
	end := p.log.EndOffset()
	check := func(entries []EpochEntry) error {
		if err := VerifyEpochs(entries, end, opts.LeaderEpoch); err != nil {
			return fmt.Errorf("partition %s-%d: %w", p.topic, p.id, err)
		}
		return nil
	}
	if err := c.settle(p.log.StartOffset(), end, !opts.Replicated, opts.LeaderEpoch, check, rebuilt); err != nil {
		return err
	}
	p.epochs = c
	return nil
}

// scanEpochs rebuilds the epoch entries from the batch headers.
func (p *Partition) scanEpochs() ([]EpochEntry, error) {
	var entries []EpochEntry
	offset := p.log.StartOffset()
	var buf []byte
	for offset < p.log.CommittedOffset() {
		out, err := p.log.ReadInto(buf[:0], offset, 1<<20)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			break
		}
		buf = out
		for len(out) > 0 {
			b, n, err := record.ParseBatch(out)
			if err != nil {
				return nil, err
			}
			if e := b.PartitionLeaderEpoch(); e >= 0 && (len(entries) == 0 || e > entries[len(entries)-1].Epoch) {
				entries = append(entries, EpochEntry{Epoch: e, StartOffset: b.BaseOffset()})
			}
			offset = b.NextOffset()
			out = out[n:]
		}
	}
	return entries, nil
}

// Topic is the partition's topic.
func (p *Partition) Topic() string { return p.topic }

// ID is the partition number.
func (p *Partition) ID() int32 { return p.id }

// Dir is the partition's directory.
func (p *Partition) Dir() string { return p.dir }

// Log is the partition's log.
func (p *Partition) Log() *log.Log { return p.log }

// Recovery reports what recovering the partition's log did when it was
// opened (Clean: nothing to recover), for the opener to log.
func (p *Partition) Recovery() log.RecoveryInfo { return p.recovery }

// Epochs is the leader-epoch cache.
func (p *Partition) Epochs() *EpochCache { return p.epochs }

// LeaderEpoch is the partition's current leader epoch: the one this broker
// leads it in, or, for a follower, the leader's. -1 for a replicated
// partition with no role yet.
func (p *Partition) LeaderEpoch() int32 { return p.epoch.Load() }

// HighWatermark is the offset below which consumers may read: on a single
// broker, the log's committed offset; on a replicated partition, what the
// replication layer set, never past the committed offset.
func (p *Partition) HighWatermark() int64 {
	if p.replicated {
		return min(p.hw.Load(), p.log.CommittedOffset())
	}
	return p.log.CommittedOffset()
}

// StartOffset is the log start offset.
func (p *Partition) StartOffset() int64 { return p.log.StartOffset() }

// EndOffset is the log end offset.
func (p *Partition) EndOffset() int64 { return p.log.EndOffset() }

// Append encodes records as one batch and appends it; see log.Log.Append.
func (p *Partition) Append(recs ...record.Record) (int64, error) { return p.log.Append(recs...) }

// AppendRecords is Append that also returns the bytes of the batch written.
func (p *Partition) AppendRecords(recs []record.Record) (int64, int, error) {
	return p.log.AppendRecords(recs)
}

// AppendBatch appends a batch from outside, after checking it; see
// log.Log.AppendBatch.
func (p *Partition) AppendBatch(b record.Batch) (int64, error) { return p.log.AppendBatch(b) }

// AppendTrusted appends a batch this process encoded; see
// log.Log.AppendTrusted.
func (p *Partition) AppendTrusted(b record.Batch) (int64, error) { return p.log.AppendTrusted(b) }

// AppendTrustedNoWait writes a batch this process encoded without waiting
// for it to be durable; see log.Log.AppendTrustedNoWait and WaitDurable.
func (p *Partition) AppendTrustedNoWait(b record.Batch) (int64, log.Pending, error) {
	return p.log.AppendTrustedNoWait(b)
}

// WaitDurable waits for an append made with AppendTrustedNoWait.
func (p *Partition) WaitDurable(pd log.Pending) error { return p.log.WaitDurable(pd) }

// OffsetForTime is the offset of the first record at or after t; see
// log.Log.OffsetForTime.
func (p *Partition) OffsetForTime(t time.Time) (int64, bool, error) { return p.log.OffsetForTime(t) }

// Changed returns a channel closed when the high watermark next moves (or
// the log is truncated, fails or closes).
func (p *Partition) Changed() <-chan struct{} {
	if p.replicated {
		return p.hwNotify.Wait()
	}
	return p.log.Changed()
}

// FetchResult is what Fetch returns.
type FetchResult struct {
	// Batches holds whole record batches, each CRC-checked, the first of
	// which contains the fetch offset (and may begin before it).
	Batches []byte
	// HighWatermark and LogStartOffset are the partition's when the fetch
	// returned.
	HighWatermark  int64
	LogStartOffset int64
	// LastStableOffset is the partition's when the fetch returned
	// (FetchCommitted only; 0 otherwise).
	LastStableOffset int64
	// AbortedTxns are the aborted transactions whose batches Batches may
	// hold, in marker order (FetchCommitted only): a reader drops a
	// transactional batch of an aborted transaction's producer from its
	// first offset up to its ABORT marker.
	AbortedTxns []AbortedTxn
}

// Fetch reads committed batches from offset - at most maxBytes, but always
// the first batch whole - waiting up to maxWait for at least minBytes to be
// available, or until ctx ends. An offset outside [StartOffset, EndOffset]
// is an error wrapping log.ErrOffsetOutOfRange; one past the high watermark
// but not past the end (written, not yet committed) waits like one at the
// high watermark. With minBytes <= 0 it returns at once.
func (p *Partition) Fetch(ctx context.Context, offset int64, minBytes, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	return p.FetchInto(ctx, nil, offset, minBytes, maxBytes, maxWait)
}

// FetchInto is Fetch appending to buf, to reuse it.
func (p *Partition) FetchInto(ctx context.Context, buf []byte, offset int64, minBytes, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	return p.fetch(ctx, buf, offset, minBytes, maxBytes, maxWait, false)
}

// FetchCommitted is Fetch at Kafka's read_committed isolation level: it
// reads only below the last stable offset (an offset between it and the
// end waits, as one past the high watermark does for Fetch), and reports
// the last stable offset and the aborted transactions the batches read
// may hold. The batches are as the log holds them - aborted data and
// transaction markers included - for the reader to filter with
// AbortedTxns, as Kafka's consumers do.
func (p *Partition) FetchCommitted(ctx context.Context, offset int64, minBytes, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	return p.fetch(ctx, nil, offset, minBytes, maxBytes, maxWait, true)
}

func (p *Partition) fetch(ctx context.Context, buf []byte, offset int64, minBytes, maxBytes int, maxWait time.Duration, committed bool) (FetchResult, error) {
	var deadline <-chan time.Time
	for {
		changed := p.Changed()
		hw := p.HighWatermark()
		limit, lso := hw, int64(0)
		if committed {
			lso = p.LastStableOffset()
			limit = lso
		}
		var out []byte
		var err error
		if offset <= limit || offset > p.log.EndOffset() {
			out, err = p.log.ReadUpTo(buf[:0], offset, maxBytes, limit)
		} // else written but not committed (or not decided) yet: nothing to return, as Kafka
		res := FetchResult{Batches: out, HighWatermark: hw, LogStartOffset: p.StartOffset(), LastStableOffset: lso}
		if err == nil && committed && len(out) > 0 {
			res.AbortedTxns, err = p.AbortedTransactions(offset, lastBatchEnd(out))
		}
		if err != nil || len(out) >= minBytes || maxWait <= 0 {
			return res, err
		}
		if deadline == nil {
			t := time.NewTimer(maxWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-deadline:
			return res, nil
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// Close snapshots the producer state and closes the log.
func (p *Partition) Close() error {
	serr := p.SnapshotProducers()
	if p.hwFile != nil {
		serr = errors.Join(serr, p.hwFile.close(p.HighWatermark()))
	}
	err := p.log.Close()
	p.hwNotify.Broadcast()
	if err == nil {
		err = serr
	}
	return err
}

// lastBatchEnd is the offset after the last whole batch in batches.
func lastBatchEnd(batches []byte) int64 {
	end := int64(-1)
	for len(batches) > 0 {
		b, n, err := record.ParseBatch(batches)
		if err != nil {
			break
		}
		end = b.NextOffset()
		batches = batches[n:]
	}
	return end
}
