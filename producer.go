package spool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/quota"
	"github.com/spoolmq/spool/record"
)

// Producer errors.
var (
	// ErrBufferFull means a record waited MaxBlock for buffer space.
	ErrBufferFull = errors.New("spool: producer buffer full")
	// ErrDeliveryTimeout means a record was not written within
	// DeliveryTimeout of being produced.
	ErrDeliveryTimeout = errors.New("spool: delivery timeout")
	// ErrProducerClosed means Produce after Close.
	ErrProducerClosed = errors.New("spool: producer closed")
)

// Acks is how much of a write a producer waits for before a record counts
// as delivered (acks), spelled as Kafka spells it: "all" (or "-1"), "1" or
// "0". The zero value "" is the default, AcksAll. Acks(0) does not compile,
// so Kafka's acks=0 cannot be mistaken for the default.
type Acks string

// Acks values.
const (
	// AcksAll waits until the record is committed: on one broker, written
	// to the log (and, under the Sync flush policy, on stable storage); on
	// a replicated topic, held by every in-sync replica, of which there are
	// at least MinInSyncReplicas. Kafka's acks=all; "-1" means the same.
	AcksAll Acks = "all"
	// AcksLeader waits until the partition leader has written the record;
	// on one broker the same as AcksAll. On a replicated topic the record
	// is lost if the leader fails before a follower copies it. Kafka's
	// acks=1.
	AcksLeader Acks = "1"
	// AcksNone reports delivery as soon as the record is accepted into a
	// batch, with offset -1, and reports no later error. Kafka's acks=0.
	AcksNone Acks = "0"
)

// ParseAcks returns the Acks that s spells as Kafka's acks setting does:
// all or -1 (AcksAll; also the empty string, the default), 1 (AcksLeader)
// or 0 (AcksNone), case-insensitively. Any other value is an error wrapping
// ErrInvalidConfig.
func ParseAcks(s string) (Acks, error) {
	if a, ok := Acks(strings.ToLower(strings.TrimSpace(s))).canonical(); ok {
		return a, nil
	}
	return "", invalidConfig("Acks", s, "want all, -1, 1 or 0")
}

// canonical is the one place Acks are normalised: the default and Kafka's
// "-1" become AcksAll. ok is false for a value Kafka does not define.
func (a Acks) canonical() (_ Acks, ok bool) {
	switch a {
	case "", "-1", AcksAll:
		return AcksAll, true
	case AcksLeader, AcksNone:
		return a, true
	}
	return a, false
}

// String returns the acks setting as Kafka spells it: all, 1 or 0 (the
// value itself, quoted, if it is none of them).
func (a Acks) String() string {
	if c, ok := a.canonical(); ok {
		return string(c)
	}
	return strconv.Quote(string(a))
}

// Producer defaults (Kafka's).
const (
	DefaultLinger          = 5 * time.Millisecond
	DefaultBatchBytes      = 16 << 10
	DefaultBufferBytes     = 32 << 20
	DefaultMaxBlock        = 60 * time.Second
	DefaultDeliveryTimeout = 120 * time.Second
)

// ProducerConfig configures a Producer. Zero fields take their defaults.
type ProducerConfig struct {
	// Acks is when a record counts as delivered (acks). Default AcksAll.
	Acks Acks
	// Linger is how long a batch waits for more records before it is
	// written (linger.ms). Default 5 ms; negative: no wait.
	//
	// Left at zero under the Sync flush policy, a batch of the broker's
	// own partitions instead waits only while its partition's previous
	// write and fsync are in flight - the fsync is the wait, so a batch
	// holds what arrived during one - and goes at once when none is
	// (group commit sized by the arrival rate). At low rates that is
	// more fsyncs, each covering fewer records, for a lower latency; set
	// Linger to have batches wait it out instead.
	Linger time.Duration
	// BatchBytes is the size at which a batch is written without waiting
	// out Linger (batch.size). Default 16 KiB.
	BatchBytes int
	// BufferBytes bounds the memory of records not yet delivered
	// (buffer.memory). Default 32 MiB.
	BufferBytes int
	// MaxBlock is how long Produce waits for buffer space before failing
	// with ErrBufferFull (max.block.ms). Default 60 s.
	MaxBlock time.Duration
	// DeliveryTimeout fails records not written this long after Produce
	// with ErrDeliveryTimeout (delivery.timeout.ms). Default 120 s. On a
	// replicated topic, sends that fail because leadership moved are
	// retried at the new leader within it - so a record whose first
	// outcome was unknown may be written twice (at least once).
	DeliveryTimeout time.Duration
	// RequestTimeout bounds how long one send to a replicated partition's
	// leader waits for the in-sync replicas (request.timeout.ms). Default
	// 30 s.
	RequestTimeout time.Duration
	// RetryBackoff is the wait before a send to a replicated partition is
	// retried (retry.backoff.ms). Default 100 ms.
	RetryBackoff time.Duration
	// Compression is the batch codec (compression.type). Default: the
	// topic's (TopicConfig.Compression).
	Compression record.Codec
	// Partitioner chooses partitions. Default: the broker's
	// (Options.Partitioner).
	Partitioner partition.Partitioner

	// Idempotent makes the producer idempotent (enable.idempotence):
	// its batches carry a producer id and per-partition sequence numbers,
	// so that a batch sent again after a leader change is written once,
	// and the partition refuses one out of order. Each partition then gets
	// every delivered record exactly once, in order. It needs AcksAll. A
	// batch that fails for good leaves a gap in its partition's sequence;
	// the producer then carries on under a new producer id (outside a
	// transaction) or fails the transaction (inside one).
	Idempotent bool
	// TransactionalID makes the producer transactional
	// (transactional.id; implies Idempotent): records are produced inside
	// transactions (BeginTransaction, CommitTransaction, AbortTransaction)
	// that commit or abort as one, together with consumer group offsets
	// (SendOffsetsToTransaction). NewProducer registers the id with its
	// transaction coordinator, which fences any earlier producer with the
	// same id and aborts its open transaction. The coordinator and the
	// partitions written must be on this broker (a standalone broker, or
	// partitions and coordinator this cluster node leads).
	TransactionalID string
	// TransactionTimeout is how long a transaction may stay open before
	// the coordinator aborts it (transaction.timeout.ms). Default 60 s; at
	// most Options.TransactionMaxTimeout.
	TransactionTimeout time.Duration

	// Quota, when set, holds the producer to the producer_byte_rate that
	// applies to ClientID and QuotaUser there: after each batch it writes,
	// the partition's sender waits as long as the quota asks, as a Kafka
	// client over its quota is muted. Give it the Manager of
	// transport.Options.Quotas and in-process and network clients share
	// one set of quotas.
	Quota *quota.Manager
	// ClientID and QuotaUser name the producer to Quota (client.id, and
	// the user a network client authenticates as).
	ClientID, QuotaUser string
}

// validate checks the fields NewProducer has given their defaults, and
// names the first one out of range.
func (cfg *ProducerConfig) validate() error {
	const c = "ProducerConfig."
	switch {
	case cfg.BatchBytes < 0:
		return invalidConfig(c+"BatchBytes", cfg.BatchBytes, "want 0 (the default) or more")
	case cfg.BufferBytes < 0:
		return invalidConfig(c+"BufferBytes", cfg.BufferBytes, "want 0 (the default) or more")
	case cfg.MaxBlock < 0:
		return invalidConfig(c+"MaxBlock", cfg.MaxBlock, "want 0 (the default) or more")
	case cfg.DeliveryTimeout < 0:
		return invalidConfig(c+"DeliveryTimeout", cfg.DeliveryTimeout, "want 0 (the default) or more")
	case cfg.TransactionTimeout < 0:
		return invalidConfig(c+"TransactionTimeout", cfg.TransactionTimeout, "want 0 (the default) or more")
	case cfg.Compression < record.None || cfg.Compression > record.ZSTD:
		return invalidConfig(c+"Compression", cfg.Compression, "want none, gzip, snappy, lz4 or zstd")
	}
	acks, ok := cfg.Acks.canonical()
	if !ok {
		return invalidConfig(c+"Acks", cfg.Acks, "want all, -1, 1 or 0")
	}
	if cfg.Idempotent && acks != AcksAll {
		field := c + "Idempotent"
		if cfg.TransactionalID != "" {
			field = c + "TransactionalID"
		}
		return fmt.Errorf("%w: %s with %s = %s: an idempotent or transactional producer needs AcksAll", ErrInvalidConfig, field, c+"Acks", quoteValue(cfg.Acks))
	}
	return nil
}

// Producer batches records per partition and writes them in the
// background, as Kafka's producer does: a batch is written when it reaches
// BatchBytes or has waited Linger. Records produced to one partition are
// written, and their callbacks called, in the order of the Produce calls.
// Memory is bounded by BufferBytes. Safe for concurrent use.
type Producer struct {
	b   *Broker
	cfg ProducerConfig

	mu      sync.Mutex
	topics  map[string]*producerTopic
	used    int           // buffer bytes reserved by undelivered records
	space   chan struct{} // closed when buffer space is freed, if someone waits
	pending int           // records accepted and not yet completed
	idle    chan struct{} // closed when pending reaches 0, if someone waits
	closed  bool
	// free holds completed batches for reuse, with their builders and
	// slices: with many partitions each batch holds few records, and
	// allocating a batch and growing its buffers again for each would
	// cost as much as encoding its records. freeBytes is the memory they
	// retain, at most BufferBytes/4.
	free      []*batch
	freeBytes int

	// view is topics as of its last change, for Produce to read without
	// mu; closing mirrors closed for the same reason. Both are written
	// with mu held.
	view    atomic.Pointer[map[string]*producerTopic]
	closing atomic.Bool

	// Open batches, in the order they were opened, which is the order of
	// their deadlines since every batch lingers as long: the linger loop
	// seals those due from the front, in time proportional to how many
	// are due, not to the partitions. An entry whose batch was sealed
	// early (full, or Flush) is stale and skipped. Guarded by mu.
	lingering []lingerEntry
	lingerOff int    // lingering[:lingerOff] are done with
	openSeq   uint64 // numbers batches, so an entry can tell its batch

	lingerArmed bool // the linger loop has a deadline to wait for; guarded by mu

	// Batches of the broker's own partitions are written by a pool of at
	// most maxSenders goroutines, started as work needs them, which take
	// partitions in turn from ready: a partition is in ready when it has
	// sealed batches, or an open one that has waited out Linger, and no
	// sender has it (its sending flag is set while it is in ready or with
	// a sender), so one sender at a time writes a partition, in order. A
	// replicated partition has a sender goroutine of its own while it has
	// batches (sendReplicated): its writes wait for other brokers. All
	// guarded by mu.
	ready      []*accum
	readyOff   int // ready[:readyOff] are taken
	senders    int // senders running
	maxSenders int // senderLimit
	// eager: under the Sync flush policy, with Linger left at its
	// default, a partition's open batch goes to a sender as soon as one
	// is free, without waiting out Linger: the
	// write and fsync in flight are the wait, and records that arrive
	// meanwhile form the next batch (group commit sized by the arrival
	// rate). Only for the broker's own partitions.
	eager       bool
	idleSenders int        // senders waiting on senderWake
	senderWake  *sync.Cond // on mu: work is ready, or the pool stops
	sendersStop bool       // Close: senders exit once ready is empty

	wake chan struct{} // tells the linger loop of an earlier deadline
	stop chan struct{} // closed by Close: the linger loop ends, senders stop waiting
	// goroutines counts the linger loop and the senders: Close waits for
	// all of them. A sender is started (Add) only with mu held and the
	// producer open, or by the linger loop or Close's flush while the
	// count is above zero.
	goroutines sync.WaitGroup

	// The idempotent producer's identity, guarded by mu: batches are
	// stamped with it as they are sent.
	pid   int64
	epoch int16
	tx    txnStatus // the transaction, with a TransactionalID

	quotaUntil time.Time // Quota: no partition's sender writes before this; guarded by mu

	stats producerStats // what Stats reads (stats.go)

	// Records that failed since the last Flush and the first one's error,
	// guarded by mu: Flush reports them, so that a failure is never lost,
	// even without a callback.
	failed     int
	firstError error
}

// producerTopic is a producer's state for one topic.
type producerTopic struct {
	t      *topic // nil for a replicated topic
	name   string
	n      int32 // a replicated topic's partition count
	tp     partition.TopicPartitioner
	codec  record.Codec
	max    int // the topic's MaxMessageBytes
	accums []*accum
}

// accum accumulates one partition's records.
type accum struct {
	pt      *producerTopic
	topic   string
	id      int32
	part    *partition.Partition // nil for a replicated topic
	leader  leaderHandle         // a replicated partition's leader, as last found
	queued  chan struct{}        // replicated: signalled when seal queues a batch
	open    *batch               // the batch being filled, or nil
	openSeq uint64               // open's number, for its lingerEntry
	dueSeq  uint64               // the number of the last batch the linger loop found due
	queue   []*batch             // sealed batches, in order
	sending bool                 // a goroutine is writing queue, or a is in ready
	taken   []*batch             // the batches a sender took from queue (pool senders)
	results []sendResult         // send's, kept for reuse

	// Idempotence, touched only by the goroutine sending the partition:
	// the producer id and epoch of the sequence, the next sequence, and
	// the transaction the partition was last added to.
	seqPID   int64
	seqEpoch int16
	seq      int32
	addedTxn uint64
}

// lingerEntry is an open batch waiting out Linger: a's batch numbered seq,
// due at deadline.
type lingerEntry struct {
	a        *accum
	seq      uint64
	deadline time.Time
}

// batch is a batch of records and what to do when it is written.
type batch struct {
	bld      *record.Builder
	cbs      []func(RecordMetadata, error)
	ts       []int64 // record timestamps, Unix ms
	reserved int     // buffer bytes
	size     int     // the built batch's bytes, once built (for Stats)
	created  time.Time
	stamped  bool // given a producer id and sequence (Idempotent)
}

// NewProducer returns a Producer writing to the broker.
func (b *Broker) NewProducer(cfg ProducerConfig) (*Producer, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	lingerDefault := cfg.Linger == 0
	switch {
	case cfg.Linger == 0:
		cfg.Linger = DefaultLinger
	case cfg.Linger < 0:
		cfg.Linger = 0
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.BufferBytes == 0 {
		cfg.BufferBytes = DefaultBufferBytes
	}
	if cfg.MaxBlock == 0 {
		cfg.MaxBlock = DefaultMaxBlock
	}
	if cfg.DeliveryTimeout == 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.Partitioner == nil {
		cfg.Partitioner = b.opts.Partitioner
	}
	if cfg.TransactionalID != "" {
		cfg.Idempotent = true
		if cfg.TransactionTimeout == 0 {
			cfg.TransactionTimeout = DefaultTransactionTimeout
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Acks, _ = cfg.Acks.canonical()
	p := &Producer{
		b: b, cfg: cfg, topics: map[string]*producerTopic{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
		pid: -1, epoch: -1,
	}
	p.senderWake = sync.NewCond(&p.mu)
	p.maxSenders = p.senderLimit()
	p.eager = b.opts.Flush == log.Sync && lingerDefault
	p.view.Store(&map[string]*producerTopic{})
	if err := p.initIdentity(); err != nil {
		return nil, err
	}
	p.goroutines.Go(p.lingerLoop)
	return p, nil
}

// Produce adds a record to its partition's batch and returns; cb (which
// may be nil) is called once, from another goroutine, when the record is
// delivered or has failed. Produce blocks only while the buffer is full -
// for up to MaxBlock, or until ctx ends - and then fails the record with
// ErrBufferFull. Errors known at once (an unknown topic, a record too
// large, a closed producer) are reported through cb before Produce returns.
// The record's key, value and headers are copied: the caller may reuse them
// when Produce returns.
//
// Every failure, with or without cb, is also counted, and the next Flush
// (or Close) returns an error saying how many records failed and why the
// first did: a producer with a nil cb loses no failure silently.
//
// Callbacks run on the producer's senders - a small pool shared by the
// partitions this broker holds (half as many as CPUs under None and
// Interval), as the Java producer runs them on its one I/O thread - so a
// callback must be quick and must not block: while it runs, the
// partitions waiting for that sender wait too. In particular a callback
// that calls Produce while the buffer is full can wait out MaxBlock,
// since the sender that would free the buffer is the one running it; hand
// such work to another goroutine.
func (p *Producer) Produce(ctx context.Context, rec Record, cb func(RecordMetadata, error)) {
	if cb == nil {
		cb = func(RecordMetadata, error) {}
	}
	if err := p.produce(ctx, &rec, cb); err != nil {
		p.stats.failed.Add(1)
		p.mu.Lock()
		p.recordFailures(1, err)
		p.mu.Unlock()
		cb(RecordMetadata{Topic: rec.Topic, Partition: rec.Partition, Offset: -1}, err)
	}
}

// recordFailures counts n records failed with err, for Flush. Called with
// mu held.
func (p *Producer) recordFailures(n int, err error) {
	if p.failed == 0 {
		p.firstError = err
	}
	p.failed += n
}

// takeFailures returns the error Flush reports for the records failed
// since the last call (nil: none) and starts counting afresh. Called with
// mu held.
func (p *Producer) takeFailures() error {
	n, err := p.failed, p.firstError
	p.failed, p.firstError = 0, nil
	switch {
	case n == 0:
		return nil
	case n == 1:
		return fmt.Errorf("spool: 1 record failed since the last Flush: %w", err)
	}
	return fmt.Errorf("spool: %d records failed since the last Flush; the first: %w", n, err)
}

func (p *Producer) produce(ctx context.Context, rec *Record, cb func(RecordMetadata, error)) error {
	pt, err := p.topicState(ctx, rec.Topic)
	if err != nil {
		return err
	}
	if rec.Timestamp.IsZero() {
		rec.Timestamp = time.Now()
	}
	r := record.Record{Timestamp: rec.Timestamp, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
	size := record.EncodedSize(&r, 0, 0) + 16 // the deltas' varints may grow
	if size+record.HeaderSize > pt.max {
		return fmt.Errorf("%w: record of about %d bytes, the topic takes batches of %d", ErrRecordTooLarge, size, pt.max)
	}
	if size > p.cfg.BufferBytes {
		return fmt.Errorf("%w: record of about %d bytes is larger than BufferBytes %d", ErrRecordTooLarge, size, p.cfg.BufferBytes)
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProducerClosed
	}
	if err := p.reserve(ctx, size); err != nil {
		p.mu.Unlock()
		return err
	}
	if p.closed { // while reserve waited
		p.release(size)
		p.mu.Unlock()
		return ErrProducerClosed
	}
	if err := p.txnAccepts(); err != nil {
		p.release(size)
		p.mu.Unlock()
		return err
	}
	var parts []*partition.Partition
	count := pt.n
	if pt.t != nil {
		parts = pt.t.partitions()
		count = int32(len(parts))
	}
	n := pt.tp.Partition(r.Key, rec.Partition, count)
	if n < 0 || n >= count {
		p.release(size)
		p.mu.Unlock()
		return fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, rec.Topic, rec.Partition, count)
	}
	if parts != nil && parts[n] == nil {
		// Offline: nothing may be queued for it (a nil part means a
		// replicated partition to send).
		p.release(size)
		p.mu.Unlock()
		return pt.t.offlineError(n)
	}
	for int32(len(pt.accums)) < count { // the topic grew
		a := &accum{pt: pt, topic: pt.name, id: int32(len(pt.accums))}
		if parts != nil {
			a.part = parts[a.id]
		}
		pt.accums = append(pt.accums, a)
	}
	a := pt.accums[n]
	if a.open != nil && (a.open.bld.Size()+size > p.cfg.BatchBytes || a.open.bld.Size()+size > pt.max) {
		p.seal(a)
	}
	if a.open == nil {
		p.openBatch(a)
	}
	bt := a.open
	if err := bt.bld.Add(&r); err != nil {
		if bt.bld.Len() == 0 {
			p.putBatch(bt)
			a.open = nil
		}
		p.release(size)
		p.mu.Unlock()
		return err
	}
	bt.reserved += size
	bt.ts = append(bt.ts, r.Timestamp.UnixMilli())
	p.pending++
	if p.cfg.Acks == AcksNone {
		bt.cbs = append(bt.cbs, nil)
	} else {
		bt.cbs = append(bt.cbs, cb)
	}
	if bt.bld.Size() >= p.cfg.BatchBytes || p.cfg.Linger == 0 {
		p.seal(a)
	} else if p.eager && !a.sending && a.part != nil {
		p.makeReady(a) // a sender takes the open batch, and what joins it meanwhile
	}
	p.mu.Unlock()
	if p.cfg.Acks == AcksNone {
		cb(RecordMetadata{Topic: rec.Topic, Partition: n, Offset: -1, Timestamp: rec.Timestamp.Truncate(time.Millisecond)}, nil)
	}
	return nil
}

// topicState returns the producer's state for a topic, creating the topic
// if the broker allows.
func (p *Producer) topicState(ctx context.Context, name string) (*producerTopic, error) {
	if p.closing.Load() {
		return nil, ErrProducerClosed
	}
	pt := (*p.view.Load())[name]
	return p.b.route(name).producerTopic(ctx, p, name, pt)
}

// setTopic makes pt the producer's state for its topic. Called with mu
// held.
func (p *Producer) setTopic(pt *producerTopic) {
	p.topics[pt.name] = pt
	view := make(map[string]*producerTopic, len(p.topics))
	for name, pt := range p.topics {
		view[name] = pt
	}
	p.view.Store(&view)
}

// producerTopic is topicState for a topic of the broker's own registry: a
// producer's state for it, valid while the topic is the same (not deleted
// and created again); cached is the state it had.
func (s soloStore) producerTopic(ctx context.Context, p *Producer, name string, pt *producerTopic) (*producerTopic, error) {
	if pt != nil && p.b.snapshot()[name] == pt.t {
		return pt, nil
	}
	t, err := p.b.topic(ctx, name, true)
	if err != nil {
		return nil, err
	}
	cfg := p.b.effective(t.config())
	codec := p.cfg.Compression
	if codec == record.None {
		codec = cfg.Compression
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pt = p.topics[name]; pt == nil || pt.t != t {
		pt = &producerTopic{t: t, name: name, tp: p.cfg.Partitioner.ForTopic(name), codec: codec, max: cfg.MaxMessageBytes}
		p.setTopic(pt)
	}
	return pt, nil
}

// reserve takes size bytes of buffer, waiting for space up to MaxBlock.
// Called with mu held; it may release and retake it.
func (p *Producer) reserve(ctx context.Context, size int) error {
	var timer *time.Timer
	for p.used+size > p.cfg.BufferBytes {
		if p.closed {
			return ErrProducerClosed
		}
		if timer == nil {
			timer = time.NewTimer(p.cfg.MaxBlock)
			defer timer.Stop()
		}
		if p.space == nil {
			p.space = make(chan struct{})
		}
		space := p.space
		p.mu.Unlock()
		select {
		case <-space:
			p.mu.Lock()
		case <-timer.C:
			p.mu.Lock()
			return fmt.Errorf("%w: waited %v for %d bytes (%d of %d in use)", ErrBufferFull, p.cfg.MaxBlock, size, p.used, p.cfg.BufferBytes)
		case <-ctx.Done():
			p.mu.Lock()
			return ctx.Err()
		}
	}
	p.used += size
	return nil
}

// release returns buffer bytes. Called with mu held.
func (p *Producer) release(size int) {
	p.used -= size
	if p.space != nil {
		close(p.space)
		p.space = nil
	}
}

// newBatch returns an empty batch, reusing a free one if there is one.
// Called with mu held.
func (p *Producer) newBatch(codec record.Codec) *batch {
	var bt *batch
	if n := len(p.free); n > 0 {
		bt = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.freeBytes -= bt.retained()
	} else {
		bt = &batch{bld: new(record.Builder)}
	}
	bt.bld.Reset(record.BatchOptions{Compression: codec})
	bt.created = time.Now()
	return bt
}

// putBatch keeps a batch that is done with for reuse, unless the free
// batches already retain BufferBytes/4. Called with mu held.
func (p *Producer) putBatch(bt *batch) {
	clear(bt.cbs) // let the callbacks go
	bt.cbs, bt.ts = bt.cbs[:0], bt.ts[:0]
	bt.reserved, bt.size, bt.stamped = 0, 0, false
	if r := bt.retained(); p.freeBytes+r <= p.cfg.BufferBytes/4 {
		p.free = append(p.free, bt)
		p.freeBytes += r
	}
}

// retained is the memory a batch holds for reuse.
func (bt *batch) retained() int {
	return bt.bld.Retained() + 8*cap(bt.cbs) + 8*cap(bt.ts)
}

// openBatch opens a new batch for a and sets it to linger. Called with mu
// held.
func (p *Producer) openBatch(a *accum) {
	a.open = p.newBatch(a.pt.codec)
	p.openSeq++
	a.openSeq = p.openSeq
	if p.cfg.Linger == 0 {
		return // sealed before Produce returns
	}
	if p.lingerOff > 0 && p.lingerOff == len(p.lingering) {
		p.lingering, p.lingerOff = p.lingering[:0], 0
	} else if p.lingerOff >= 1024 && p.lingerOff >= len(p.lingering)/2 {
		n := copy(p.lingering, p.lingering[p.lingerOff:])
		clear(p.lingering[n:])
		p.lingering, p.lingerOff = p.lingering[:n], 0
	}
	p.lingering = append(p.lingering, lingerEntry{a: a, seq: a.openSeq, deadline: a.open.created.Add(p.cfg.Linger)})
	// Every batch lingers as long, so a new batch's deadline is never
	// before one the linger loop already waits for: wake it only when it
	// waits for none.
	if !p.lingerArmed {
		p.lingerArmed = true
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// seal closes a's open batch and queues it for writing. Called with mu
// held.
func (p *Producer) seal(a *accum) {
	if a.open == nil {
		return
	}
	a.queue = append(a.queue, a.open)
	a.open = nil
	a.pt.tp.OnNewBatch(a.id)
	switch {
	case a.sending:
		if a.queued != nil {
			select {
			case a.queued <- struct{}{}:
			default:
			}
		}
	case a.part == nil:
		a.sending = true
		p.goroutines.Go(func() { p.sendReplicated(a) })
	default:
		p.makeReady(a)
	}
}

// makeReady queues a, which has batches to write and no sender, for the
// pool's senders, starting one if none waits. Called with mu held.
func (p *Producer) makeReady(a *accum) {
	a.sending = true
	p.ready = append(p.ready, a)
	if p.idleSenders > 0 {
		p.senderWake.Signal()
	} else if p.senders < p.maxSenders {
		p.senders++
		p.goroutines.Go(p.sendLoop)
	}
}

// lingered reports whether a's open batch has waited out Linger: the
// linger loop found it due, or it is at now. Called with mu held.
func (p *Producer) lingered(a *accum, now time.Time) bool {
	return a.open != nil && (p.eager || a.dueSeq == a.openSeq || !now.Before(a.open.created.Add(p.cfg.Linger)))
}

// due is the linger loop's word that a's open batch has waited out
// Linger. A replicated partition's batch is sealed then. One of the
// broker's own partitions is queued for a sender with the batch still
// open, as Kafka's accumulator does: records produced before a sender
// takes it still join it. When the senders fall behind - many
// partitions, each with few records per Linger - batches grow instead
// of queueing up in ever more writes of a few records each. Called with
// mu held.
func (p *Producer) due(a *accum) {
	if a.part == nil {
		p.seal(a)
		return
	}
	a.dueSeq = a.openSeq
	if !a.sending {
		p.makeReady(a)
	}
	// Otherwise a sender has a, and takes the open batch when done with
	// what it holds.
}

// maxSenders bounds the pool of goroutines writing the broker's own
// partitions under the Sync flush policy, where each partition's write
// waits for its fsync: as many partitions as this sync at once. Under the
// other policies a write only copies into the page cache, and the pool has
// half as many senders as CPUs (at least one), as Kafka's producer has one
// sender thread: the other CPUs are for the goroutines calling Produce,
// and a pool that falls behind is what lets batches grow (see due)
// instead of every partition writing a few records at a time (over 1000
// partitions, on 2 CPUs, 2 senders wrote batches of 15-35 records, 1
// sender 35-90).
const maxSenders = 64

// senderLimit is the size of the producer's pool of senders.
func (p *Producer) senderLimit() int {
	if p.b.opts.Flush == log.Sync {
		return maxSenders
	}
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// sendChunk is how many ready partitions a sender takes at once: it
// writes them all and then settles their batches under one lock.
const sendChunk = 8

// sendLoop is a pool sender: it takes ready partitions, writes their
// sealed batches and reports them, until Close stops the pool and nothing
// is ready.
func (p *Producer) sendLoop() {
	var work []*accum
	var done sendDone
	p.mu.Lock()
	for {
		for p.readyOff == len(p.ready) && !p.sendersStop {
			p.idleSenders++
			p.senderWake.Wait()
			p.idleSenders--
		}
		if p.readyOff == len(p.ready) {
			p.senders--
			p.mu.Unlock()
			return
		}
		n := min(sendChunk, len(p.ready)-p.readyOff)
		work = append(work[:0], p.ready[p.readyOff:p.readyOff+n]...)
		clear(p.ready[p.readyOff : p.readyOff+n])
		p.readyOff += n
		if p.readyOff == len(p.ready) {
			p.ready, p.readyOff = p.ready[:0], 0
		} else if p.readyOff >= 1024 && p.readyOff >= len(p.ready)/2 {
			// Never empty under load: reuse the front.
			k := copy(p.ready, p.ready[p.readyOff:])
			clear(p.ready[k:])
			p.ready, p.readyOff = p.ready[:k], 0
		}
		now := time.Now()
		for _, a := range work {
			a.taken, a.queue = a.queue, a.taken[:0]
			if p.lingered(a, now) {
				a.taken = append(a.taken, a.open)
				a.open = nil
				a.pt.tp.OnNewBatch(a.id)
			}
		}
		p.mu.Unlock()

		for _, a := range work {
			p.send(a, &done)
		}

		p.mu.Lock()
		p.settleDone(&done)
		now = time.Now()
		for _, a := range work {
			clear(a.taken)
			a.taken = a.taken[:0]
			if len(a.queue) > 0 || p.lingered(a, now) {
				p.ready = append(p.ready, a) // behind the others: take turns
			} else {
				a.sending = false
			}
		}
		clear(work)
	}
}

// sendDone is what a sender gives back, under one lock, for the batches it
// completed.
type sendDone struct {
	batches  []*batch
	failed   int   // records failed
	firstErr error // the first one's error
	records  int
	reserved int
}

// settleDone gives back what the batches in done held, counts their
// failures for Flush and keeps them for reuse. Called with mu held.
func (p *Producer) settleDone(done *sendDone) {
	if done.failed > 0 {
		p.recordFailures(done.failed, done.firstErr)
	}
	if done.reserved > 0 {
		p.release(done.reserved)
	}
	p.pending -= done.records
	if p.pending == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	for _, bt := range done.batches {
		p.putBatch(bt)
	}
	clear(done.batches)
	*done = sendDone{batches: done.batches[:0]}
}

// send writes the batches a sender took for one of the broker's own
// partitions, in order, and waits once for them to be durable: under the
// Sync policy one fsync covers them all. It reports them to their
// callbacks and adds them to done.
func (p *Producer) send(a *accum, done *sendDone) {
	batches := a.taken
	results := a.results[:0]
	var last log.Pending
	written := -1 // the last batch written
	for i, bt := range batches {
		r := sendResult{base: -1}
		if age := time.Since(bt.created); age > p.cfg.DeliveryTimeout {
			r.err = fmt.Errorf("%w: batch waited %v", ErrDeliveryTimeout, age.Round(time.Millisecond))
		} else if r.err = p.stamp(a, bt); r.err != nil {
		} else if b, err := bt.bld.Build(); err != nil {
			r.err = err
		} else if p.built(bt, b); p.cfg.Idempotent {
			// Through the producer state: sequences, transactions.
			// It waits for durability itself.
			r.base, _, r.err = a.part.AppendProduced(b)
		} else if r.base, last, r.err = a.part.AppendTrustedNoWait(b); r.err == nil {
			written = i
		}
		results = append(results, r)
	}
	if written >= 0 {
		if err := a.part.WaitDurable(last); err != nil {
			for i := range results[:written+1] {
				if results[i].err == nil {
					results[i].err = err
				}
			}
		}
	}
	for i, bt := range batches {
		err := p.b.wrapClosed(results[i].err)
		p.report(a, bt, results[i].base, err)
		if err != nil {
			if done.failed == 0 {
				done.firstErr = err
			}
			done.failed += len(bt.cbs)
		}
		done.records += len(bt.cbs)
		done.reserved += bt.reserved
		done.batches = append(done.batches, bt)
	}
	a.results = results[:0]
}

type sendResult struct {
	base int64
	err  error
}

// complete reports a batch's records to their callbacks, in order, and
// gives back its buffer space; the batch is reused afterwards.
func (p *Producer) complete(a *accum, bt *batch, base int64, err error) {
	p.report(a, bt, base, err)
	p.mu.Lock()
	if err != nil {
		p.recordFailures(len(bt.cbs), err)
	}
	p.release(bt.reserved)
	p.pending -= len(bt.cbs)
	if p.pending == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.putBatch(bt)
	p.mu.Unlock()
}

// report counts a batch delivered (base: its first offset) or failed, and
// calls its records' callbacks, in order. The batch still holds its buffer
// space.
func (p *Producer) report(a *accum, bt *batch, base int64, err error) {
	if err != nil && bt.stamped {
		p.sequenceLost(a, err)
	}
	if b := p.countedBy(a); b != nil {
		b.metrics.produced(a.topic, len(bt.cbs), bt.size, err)
	}
	p.completed(bt, err)
	for i, cb := range bt.cbs {
		if cb == nil {
			continue // AcksNone: reported already
		}
		md := RecordMetadata{Topic: a.topic, Partition: a.id, Offset: -1, Timestamp: time.UnixMilli(bt.ts[i])}
		if err == nil {
			md.Offset = base + int64(i)
		}
		cb(md, err)
	}
}

// built notes a batch's size once built, for Stats, and waits as the
// Quota says before it is written.
func (p *Producer) built(bt *batch, b record.Batch) {
	bt.size = b.Size()
	p.quotaWait(bt.size)
}

// quotaWait counts a batch about to be written against the Quota and
// waits until the producer may write it: one deadline for all its
// partitions' senders, as one muted connection would be, so that their
// waits do not add up. Without a Quota it does nothing.
func (p *Producer) quotaWait(size int) {
	if p.cfg.Quota == nil {
		return
	}
	wait := p.cfg.Quota.Record(quota.ProducerByteRate, p.cfg.QuotaUser, p.cfg.ClientID, float64(size))
	p.mu.Lock()
	if until := time.Now().Add(wait); wait > 0 && until.After(p.quotaUntil) {
		p.quotaUntil = until
	}
	until := p.quotaUntil
	p.mu.Unlock()
	if d := time.Until(until); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.stop:
		}
	}
}

// lingerLoop seals batches whose Linger has passed.
func (p *Producer) lingerLoop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-timer.C:
		}
		next := p.sealDue(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if next.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(time.Until(next))
		}
	}
}

// sealDue hands every open batch whose deadline is at or before now to be
// written (see due) and returns the earliest deadline left (zero: none).
func (p *Producer) sealDue(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var next time.Time
	for ; p.lingerOff < len(p.lingering); p.lingerOff++ {
		e := &p.lingering[p.lingerOff]
		if e.a.open != nil && e.a.openSeq == e.seq { // not sealed early
			if e.deadline.After(now) {
				next = e.deadline
				break
			}
			p.due(e.a)
		}
		*e = lingerEntry{}
	}
	p.lingerArmed = !next.IsZero()
	return next
}

// Flush writes every batch now, without waiting out Linger, and returns
// once every record produced before the call is delivered or failed, or ctx
// ends (ctx's error). If any record produced since the previous Flush
// failed - whether or not its callback was nil - Flush returns an error
// that counts them and wraps the first one's error ("3 records failed
// since the last Flush; the first: ..."), so errors.Is finds its cause;
// the count then starts again from zero.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.flush(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeFailures()
}

// flush is Flush without the report of failures: it writes every batch now
// and waits until every record produced before the call is delivered or
// failed, or ctx ends.
func (p *Producer) flush(ctx context.Context) error {
	p.mu.Lock()
	for _, e := range p.lingering[p.lingerOff:] {
		if e.a.open != nil && e.a.openSeq == e.seq {
			p.seal(e.a)
		}
	}
	clear(p.lingering)
	p.lingering, p.lingerOff = p.lingering[:0], 0
	if p.pending == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes the producer (waiting up to DeliveryTimeout) and stops it;
// Produce fails with ErrProducerClosed afterwards. A transactional
// producer's open transaction is aborted first. As Flush, it returns an
// error if any record produced since the last Flush failed. It returns once
// every goroutine the producer started has ended. If the flush outlasts
// DeliveryTimeout, the error wraps context.DeadlineExceeded and the
// failures of the records the stopped senders then gave up on.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProducerClosed
	}
	if open := p.cfg.TransactionalID != "" && p.tx.state != txnReady && p.tx.state != txnFatal; open {
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DeliveryTimeout)
		if err := p.AbortTransaction(ctx); err != nil {
			p.b.logger.Warn("closing a transactional producer: its transaction was not aborted; the coordinator aborts it at its timeout",
				"transactional_id", p.cfg.TransactionalID, "err", err)
		}
		cancel()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ErrProducerClosed
		}
	}
	p.closed = true
	p.closing.Store(true)
	if p.space != nil { // wake producers blocked for space: they fail
		close(p.space)
		p.space = nil
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DeliveryTimeout)
	defer cancel()
	err := p.Flush(ctx)
	close(p.stop) // a sender still retrying (Flush timed out) gives up
	p.mu.Lock()
	p.sendersStop = true // pool senders exit once what is ready is written
	p.senderWake.Broadcast()
	p.mu.Unlock()
	p.goroutines.Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		// Flush stopped waiting at DeliveryTimeout, but the senders
		// have ended since, each record delivered or failed: report
		// the failures Flush would have, had it waited that little
		// longer, beside the wait's end.
		p.mu.Lock()
		if p.pending == 0 {
			if ferr := p.takeFailures(); ferr != nil {
				err = errors.Join(ferr, err)
			}
		}
		p.mu.Unlock()
	}
	return err
}

// stopped reports whether Close has stopped the producer's goroutines.
func (p *Producer) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}
