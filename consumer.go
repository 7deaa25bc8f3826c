package spool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/quota"
	"github.com/spoolmq/spool/record"
)

// ErrNotAssigned means a consumer was asked about a partition it has not
// been assigned.
var ErrNotAssigned = errors.New("spool: partition not assigned to this consumer")

// OffsetReset is where a consumer starts reading a partition for which it
// has no valid position (auto.offset.reset). The zero value is ResetLatest.
type OffsetReset int8

// OffsetReset values.
const (
	// ResetLatest starts at the high watermark: only new records.
	ResetLatest OffsetReset = iota
	// ResetEarliest starts at the log start offset: everything retained.
	ResetEarliest
	// ResetNone fails Poll with an error wrapping ErrOffsetOutOfRange.
	ResetNone
)

// IsolationLevel is which records of transactions a consumer reads
// (isolation.level). The zero value is ReadUncommitted.
type IsolationLevel int8

// IsolationLevel values.
const (
	// ReadUncommitted reads every data record up to the high watermark,
	// those of open and aborted transactions included (Kafka's default).
	ReadUncommitted IsolationLevel = iota
	// ReadCommitted reads only up to the last stable offset - below it
	// every transaction is decided - and leaves out the records of aborted
	// transactions.
	ReadCommitted
)

// Consumer defaults (Kafka's).
const (
	DefaultFetchMinBytes          = 1
	DefaultFetchMaxWait           = 500 * time.Millisecond
	DefaultFetchMaxBytes          = 50 << 20
	DefaultMaxPartitionFetchBytes = 1 << 20
)

// ConsumerConfig configures a Consumer. Zero fields take their defaults.
type ConsumerConfig struct {
	// FetchMinBytes is how much Poll waits to gather (fetch.min.bytes).
	// Default 1: return as soon as anything is there.
	FetchMinBytes int
	// FetchMaxWait is how long Poll waits for FetchMinBytes
	// (fetch.max.wait.ms). Default 500 ms.
	FetchMaxWait time.Duration
	// FetchMaxBytes bounds the bytes of batches one Poll reads
	// (fetch.max.bytes); the first batch is always read whole. Default
	// 50 MiB.
	FetchMaxBytes int
	// MaxPartitionFetchBytes bounds the bytes read from one partition per
	// Poll (max.partition.fetch.bytes). Default 1 MiB.
	MaxPartitionFetchBytes int
	// AutoOffsetReset is where to start without a valid position
	// (auto.offset.reset). Default ResetLatest, as Kafka's: a group with
	// no committed offsets (a new one) sees only records produced after it
	// joined; ResetEarliest reads what is already there.
	AutoOffsetReset OffsetReset
	// IsolationLevel is which transactional records Poll returns
	// (isolation.level). Default ReadUncommitted. Transaction markers
	// are never returned at either level. ReadCommitted is not served
	// yet for a partition led by another process (a networked cluster):
	// Poll fails with an error wrapping errors.ErrUnsupported there.
	IsolationLevel IsolationLevel

	// Group makes the consumer a member of a consumer group (group.id):
	// the group shares the partitions of Topics among its members, and
	// each partition resumes at the group's committed offset. Without a
	// group, partitions are assigned by hand (Assign).
	Group string
	// Topics is the group subscription.
	Topics []string
	// GroupProtocol is the membership protocol (group.protocol):
	// GroupProtocolClassic (the default) or GroupProtocolConsumer
	// (KIP-848). With GroupProtocolConsumer the coordinator assigns and
	// times the member: Assignors, SessionTimeout and HeartbeatInterval
	// are not used (the broker's GroupConsumerSessionTimeout and
	// GroupConsumerHeartbeatInterval are), and RebalanceTimeout bounds how
	// long the member may take to give partitions up.
	GroupProtocol GroupProtocol
	// ServerAssignor names the coordinator's assignor with
	// GroupProtocolConsumer (group.remote.assignor): "uniform" (balanced
	// and sticky) or "range" (co-partitioned topics); "" for the group's
	// choice, uniform by default.
	ServerAssignor string
	// GroupInstanceID makes the member static (group.instance.id,
	// KIP-345): it keeps its partitions, with no rebalance, if it restarts
	// within SessionTimeout. Close does not leave the group.
	GroupInstanceID string
	// SessionTimeout is how long the group waits for a silent member
	// before giving its partitions away (session.timeout.ms). Default 45 s.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long a rebalance waits for the member to
	// call Poll and rejoin (max.poll.interval.ms). Default 5 min.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats
	// (heartbeat.interval.ms). Default 3 s, at most a third of
	// SessionTimeout.
	HeartbeatInterval time.Duration
	// Assignors are the partition assignment strategies the member
	// supports, preferred first (partition.assignment.strategy). Default
	// range, then cooperative-sticky, as Kafka's consumer.
	Assignors []group.Assignor
	// AutoCommit commits positions every AutoCommitInterval from Poll, on
	// revocation and on Close (enable.auto.commit). Default Enabled: at
	// least once, as positions are committed after Poll returned the
	// records.
	AutoCommit Toggle
	// AutoCommitInterval is the auto-commit period
	// (auto.commit.interval.ms). Default 5 s.
	AutoCommitInterval time.Duration
	// OnAssigned is called from Poll with the partitions the group gives
	// the member, after their positions are set (from the committed
	// offsets); it may Seek them.
	OnAssigned func([]TopicPartition)
	// OnRevoked is called from Poll with the partitions the member gives
	// up, before another member can get them; with AutoCommit their
	// positions are committed just before.
	OnRevoked func([]TopicPartition)

	// Quota, when set, holds the consumer to the consumer_byte_rate that
	// applies to ClientID and QuotaUser there (counting the bytes of the
	// records Poll returns): a Poll after one that took it over its quota
	// first waits as long as the quota asks. Give it the Manager of
	// transport.Options.Quotas and in-process and network clients share
	// one set of quotas.
	Quota *quota.Manager
	// ClientID and QuotaUser name the consumer to Quota.
	ClientID, QuotaUser string
}

// TopicPartition names a partition.
type TopicPartition = group.TopicPartition

// Consumer reads records from the partitions assigned to it, each from its
// own position, up to the high watermark: only committed records, each
// batch CRC-checked. Poll is meant for one goroutine; the other methods may
// be called from any.
type Consumer struct {
	b   *Broker
	cfg ConsumerConfig

	mu       sync.Mutex
	assigned []*assignment
	byTP     map[TopicPartition]*assignment
	next     int // where the next Poll starts, for fairness
	closed   bool

	grp *groupMember // nil without a group

	throttledUntil time.Time     // Quota: when Poll may read again; Poll's goroutine only
	stats          consumerStats // what Stats reads (stats.go)
}

type assignment struct {
	tp      TopicPartition
	part    *partition.Partition // nil for a replicated topic: see partOf
	offline error                // the partition could not be opened (part is nil)
	pos     int64
	valid   bool  // pos was set (Seek or reset) and not found out of range
	end     int64 // the high watermark (read_committed: the last stable offset) the last fetch saw; -1 before one
}

// NewConsumer returns a Consumer of the broker with nothing assigned.
func (b *Broker) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if cfg.FetchMinBytes == 0 {
		cfg.FetchMinBytes = DefaultFetchMinBytes
	}
	if cfg.FetchMaxWait == 0 {
		cfg.FetchMaxWait = DefaultFetchMaxWait
	}
	if cfg.FetchMaxBytes == 0 {
		cfg.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if cfg.MaxPartitionFetchBytes == 0 {
		cfg.MaxPartitionFetchBytes = DefaultMaxPartitionFetchBytes
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{b: b, cfg: cfg, byTP: map[TopicPartition]*assignment{}}
	if cfg.Group != "" {
		g, err := newGroupMember(b, c)
		if err != nil {
			return nil, err
		}
		c.grp = g
	}
	return c, nil
}

// validate checks the fields NewConsumer has given their defaults, and
// names the first one out of range.
func (cfg *ConsumerConfig) validate() error {
	const c = "ConsumerConfig."
	if err := firstNegative(c,
		nonNegative{"FetchMinBytes", cfg.FetchMinBytes, cfg.FetchMinBytes < 0},
		nonNegative{"FetchMaxWait", cfg.FetchMaxWait, cfg.FetchMaxWait < 0},
		nonNegative{"FetchMaxBytes", cfg.FetchMaxBytes, cfg.FetchMaxBytes < 0},
		nonNegative{"MaxPartitionFetchBytes", cfg.MaxPartitionFetchBytes, cfg.MaxPartitionFetchBytes < 0},
		nonNegative{"SessionTimeout", cfg.SessionTimeout, cfg.SessionTimeout < 0},
		nonNegative{"RebalanceTimeout", cfg.RebalanceTimeout, cfg.RebalanceTimeout < 0},
		nonNegative{"HeartbeatInterval", cfg.HeartbeatInterval, cfg.HeartbeatInterval < 0},
		nonNegative{"AutoCommitInterval", cfg.AutoCommitInterval, cfg.AutoCommitInterval < 0},
	); err != nil {
		return err
	}
	switch {
	case cfg.AutoOffsetReset < ResetLatest || cfg.AutoOffsetReset > ResetNone:
		return invalidConfig(c+"AutoOffsetReset", cfg.AutoOffsetReset, "want ResetLatest, ResetEarliest or ResetNone")
	case cfg.IsolationLevel < ReadUncommitted || cfg.IsolationLevel > ReadCommitted:
		return invalidConfig(c+"IsolationLevel", cfg.IsolationLevel, "want ReadUncommitted or ReadCommitted")
	case cfg.AutoCommit < Default || cfg.AutoCommit > Disabled:
		return invalidConfig(c+"AutoCommit", cfg.AutoCommit, "want Default, Enabled or Disabled")
	case cfg.Group == "" && len(cfg.Topics) > 0:
		return invalidConfig(c+"Topics", cfg.Topics, "a group subscription needs Group; without one, use Assign")
	case cfg.Group != "" && len(cfg.Topics) == 0:
		return invalidConfig(c+"Topics", cfg.Topics, "a group consumer needs Topics")
	case cfg.GroupProtocol != "" && cfg.GroupProtocol != GroupProtocolClassic && cfg.GroupProtocol != GroupProtocolConsumer:
		return invalidConfig(c+"GroupProtocol", cfg.GroupProtocol, "want classic or consumer")
	case cfg.ServerAssignor != "" && cfg.GroupProtocol != GroupProtocolConsumer:
		return invalidConfig(c+"ServerAssignor", cfg.ServerAssignor, "needs GroupProtocolConsumer")
	}
	return nil
}

// Assign adds partitions of a topic to the consumer (all of them when none
// are named). A newly assigned partition starts where AutoOffsetReset says,
// unless Seek places it first.
func (c *Consumer) Assign(topic string, partitions ...int32) error {
	if c.grp != nil {
		return ErrGroupMode
	}
	count, parts, offline, err := c.b.route(topic).consumerParts(topic)
	if err != nil {
		return err
	}
	if len(partitions) == 0 {
		for i := int32(0); i < count; i++ {
			partitions = append(partitions, i)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for _, n := range partitions {
		if n < 0 || n >= count {
			return fmt.Errorf("%w: %s-%d (the topic has %d)", ErrUnknownPartition, topic, n, count)
		}
	}
	for _, n := range partitions {
		tp := TopicPartition{Topic: topic, Partition: n}
		if c.byTP[tp] != nil {
			continue
		}
		a := &assignment{tp: tp, end: -1}
		if parts != nil {
			a.part, a.offline = parts[n], nil
			if a.part == nil {
				a.offline = offline(n)
			}
		}
		c.byTP[tp] = a
		c.assigned = append(c.assigned, a)
	}
	return nil
}

// Unassign removes partitions of a topic (all of them when none are named).
func (c *Consumer) Unassign(topic string, partitions ...int32) {
	if c.grp != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.assigned[:0]
	for _, a := range c.assigned {
		drop := a.tp.Topic == topic && (len(partitions) == 0 || containsPartition(partitions, a.tp.Partition))
		if drop {
			delete(c.byTP, a.tp)
		} else {
			keep = append(keep, a)
		}
	}
	clear(c.assigned[len(keep):])
	c.assigned = keep
}

func containsPartition(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// Assignment lists the assigned partitions, sorted.
func (c *Consumer) Assignment() []TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TopicPartition, 0, len(c.assigned))
	for _, a := range c.assigned {
		out = append(out, a.tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// lookup returns the assignment of a partition. Called with mu held.
func (c *Consumer) lookup(topic string, n int32) (*assignment, error) {
	a := c.byTP[TopicPartition{Topic: topic, Partition: n}]
	if a == nil {
		return nil, fmt.Errorf("%w: %s-%d", ErrNotAssigned, topic, n)
	}
	return a, nil
}

// Seek sets the next offset to read from an assigned partition. An offset
// outside the log is handled by AutoOffsetReset at the next Poll.
func (c *Consumer) Seek(topic string, partition int32, offset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.lookup(topic, partition)
	if err != nil {
		return err
	}
	a.pos, a.valid = offset, true
	return nil
}

// seekEach applies where to every named partition (all assigned partitions
// of the topic when none are named).
func (c *Consumer) seekEach(topic string, partitions []int32, where func(readable) (int64, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var targets []*assignment
	if len(partitions) == 0 {
		for _, a := range c.assigned {
			if a.tp.Topic == topic {
				targets = append(targets, a)
			}
		}
	}
	for _, n := range partitions {
		a, err := c.lookup(topic, n)
		if err != nil {
			return err
		}
		targets = append(targets, a)
	}
	for _, a := range targets {
		part, err := c.partOf(context.Background(), a)
		if err != nil {
			return err
		}
		off, err := where(part)
		if err != nil {
			return err
		}
		a.pos, a.valid = off, true
	}
	return nil
}

// SeekToStart moves partitions to their log start offset (all assigned
// partitions of the topic when none are named).
func (c *Consumer) SeekToStart(topic string, partitions ...int32) error {
	return c.seekEach(topic, partitions, func(p readable) (int64, error) { return p.StartOffset(), nil })
}

// SeekToEnd moves partitions to their high watermark (at ReadCommitted,
// their last stable offset): only records produced from now on.
func (c *Consumer) SeekToEnd(topic string, partitions ...int32) error {
	return c.seekEach(topic, partitions, func(p readable) (int64, error) { return c.end(p), nil })
}

// end is where a consumer's "latest" is: the high watermark, or at
// ReadCommitted the last stable offset (Kafka's ListOffsets at
// read_committed).
func (c *Consumer) end(p readable) int64 {
	if c.cfg.IsolationLevel == ReadCommitted {
		return p.LastStableOffset()
	}
	return p.HighWatermark()
}

// SeekToTime moves partitions to the first record whose timestamp is at or
// after t (through the time index), or to the high watermark if there is
// none.
func (c *Consumer) SeekToTime(topic string, t time.Time, partitions ...int32) error {
	return c.seekEach(topic, partitions, func(p readable) (int64, error) {
		off, ok, err := p.OffsetForTime(t)
		if err != nil || !ok {
			return p.HighWatermark(), err
		}
		return off, nil
	})
}

// Position is the offset the next record read from a partition will have
// (at least), or -1 before the first Poll places it.
func (c *Consumer) Position(topic string, partition int32) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.lookup(topic, partition)
	if err != nil {
		return 0, err
	}
	if !a.valid {
		return -1, nil
	}
	return a.pos, nil
}

// Positions are the positions of the assigned partitions that have one:
// the offset after the last record Poll returned from each (or where
// Seek, the group's committed offset or AutoOffsetReset placed it). They
// are what SendOffsetsToTransaction commits for consume-transform-produce.
func (c *Consumer) Positions() map[TopicPartition]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[TopicPartition]int64, len(c.assigned))
	for _, a := range c.assigned {
		if a.valid {
			out[a.tp] = a.pos
		}
	}
	return out
}

// reset places a partition without a valid position per AutoOffsetReset.
func (c *Consumer) reset(part readable, a *assignment, cause error) error {
	switch c.cfg.AutoOffsetReset {
	case ResetEarliest:
		a.pos = part.StartOffset()
	case ResetNone:
		if cause == nil {
			cause = fmt.Errorf("%w: no position", ErrOffsetOutOfRange)
		}
		return fmt.Errorf("spool: %s-%d: %w", a.tp.Topic, a.tp.Partition, cause)
	default:
		a.pos = c.end(part)
	}
	a.valid = true
	return nil
}

// partOf is the partition to read a's records from: the local one, or the
// current leader's replica of a replicated one.
func (c *Consumer) partOf(ctx context.Context, a *assignment) (readable, error) {
	if a.part != nil {
		return a.part, nil
	}
	if a.offline != nil {
		return nil, a.offline
	}
	return c.b.leaderPartition(ctx, a.tp)
}

// Poll returns the next records from the assigned partitions: it reads
// from each partition (starting with a different one each call, for
// fairness) up to MaxPartitionFetchBytes and FetchMaxBytes in all, and waits
// up to FetchMaxWait for FetchMinBytes, or until ctx ends. It may return no
// records. The records' byte slices are the caller's to keep. An offline
// partition (see PartitionDescription.Offline) gives nothing until the
// broker is reopened; Poll reads the others.
func (c *Consumer) Poll(ctx context.Context) ([]Record, error) {
	if err := c.quotaWait(ctx); err != nil {
		return nil, err
	}
	recs, err := c.poll(ctx)
	c.quotaRecord(recs)
	c.count(recs)
	return recs, err
}

// quotaWait waits out what the records of earlier polls cost under
// ConsumerConfig.Quota.
func (c *Consumer) quotaWait(ctx context.Context) error {
	if wait := time.Until(c.throttledUntil); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// quotaRecord counts records returned against ConsumerConfig.Quota: their
// keys', values' and headers' bytes.
func (c *Consumer) quotaRecord(recs []Record) {
	if c.cfg.Quota == nil || len(recs) == 0 {
		return
	}
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	if wait := c.cfg.Quota.Record(quota.ConsumerByteRate, c.cfg.QuotaUser, c.cfg.ClientID, float64(n)); wait > 0 {
		c.throttledUntil = time.Now().Add(wait)
	}
}

func (c *Consumer) poll(ctx context.Context) ([]Record, error) {
	deadline := time.Now().Add(c.cfg.FetchMaxWait)
	var wake <-chan struct{}
	if c.grp != nil {
		if c.isClosed() {
			return nil, ErrClosed
		}
		if err := c.ensureActive(ctx); err != nil {
			return nil, err
		}
		c.maybeAutoCommit(ctx)
		wake = c.grp.m.Wake()
	}
	for {
		recs, bytes, changed, err := c.fetchOnce(ctx)
		if err != nil || len(recs) > 0 && bytes >= c.cfg.FetchMinBytes {
			return recs, err
		}
		wait := time.Until(deadline)
		if wait <= 0 || len(changed) == 0 {
			if len(changed) == 0 && wait > 0 {
				// Nothing assigned: wait out the poll, as Kafka does.
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return recs, ctx.Err()
				}
			}
			return recs, nil
		}
		// Wait for any assigned partition to move, the deadline, or ctx.
		timer := time.NewTimer(wait)
		cases := make([]reflect.SelectCase, 0, len(changed)+3)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wake)}) // nil channel: never ready
		for _, ch := range changed {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		chosen, _, _ := reflect.Select(cases)
		timer.Stop()
		switch chosen {
		case 0:
			return recs, ctx.Err()
		case 1:
			if len(recs) > 0 {
				return recs, nil
			}
			// One last look after the deadline.
			recs, _, _, err = c.fetchOnce(ctx)
			return recs, err
		case 2:
			return recs, nil // the group rebalances: the next Poll rejoins
		}
	}
}

func (c *Consumer) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fetchOnce reads what is there now from every assigned partition, without
// waiting. It returns the records, the bytes of batches read, and the change
// channels of the partitions (taken before reading, so nothing is missed).
func (c *Consumer) fetchOnce(ctx context.Context) ([]Record, int, []<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, nil, ErrClosed
	}
	if c.b.closed.Load() {
		return nil, 0, nil, ErrClosed
	}
	var recs []Record
	total := 0
	changed := make([]<-chan struct{}, 0, len(c.assigned))
	n := len(c.assigned)
	for i := 0; i < n; i++ {
		a := c.assigned[(c.next+i)%n]
		part, err := c.partOf(ctx, a)
		if err != nil {
			if retriable(err) {
				continue // no leader right now: try again at the next poll
			}
			if errors.Is(err, ErrPartitionOffline) {
				continue // it has nothing to give until the broker is reopened
			}
			return recs, total, changed, err
		}
		changed = append(changed, part.Changed())
		if total >= c.cfg.FetchMaxBytes {
			continue
		}
		if !a.valid {
			if err := c.reset(part, a, nil); err != nil {
				return recs, total, changed, err
			}
		}
		limit := min(c.cfg.MaxPartitionFetchBytes, c.cfg.FetchMaxBytes-total)
		fetch := part.Fetch
		if c.cfg.IsolationLevel == ReadCommitted {
			fetch = part.FetchCommitted
		}
		res, err := fetch(ctx, a.pos, 0, limit, 0)
		if errors.Is(err, ErrOffsetOutOfRange) {
			if err := c.reset(part, a, err); err != nil {
				return recs, total, changed, err
			}
			res, err = fetch(ctx, a.pos, 0, limit, 0)
		}
		if err != nil && a.part == nil && errors.Is(err, log.ErrClosed) {
			continue // the leader went down under us: find the next one at the next poll
		}
		if err != nil {
			return recs, total, changed, c.b.wrapClosed(fmt.Errorf("spool: fetch %s-%d at %d: %w", a.tp.Topic, a.tp.Partition, a.pos, err))
		}
		total += len(res.Batches)
		a.end = res.HighWatermark
		if c.cfg.IsolationLevel == ReadCommitted {
			a.end = res.LastStableOffset
		}
		c.countFetch(a, part, len(res.Batches))
		recs, err = decodeRecords(recs, a, res.Batches, res.AbortedTxns)
		if err != nil {
			return recs, total, changed, err
		}
	}
	if n > 0 {
		c.next = (c.next + 1) % n
	}
	return recs, total, changed, nil
}

// decodeRecords appends the records of batches at or after a's position and moves
// the position past them. Uncompressed records alias batches, which belongs
// to this Poll; compressed ones get a buffer of their own.
//
// Transaction markers are skipped. With aborted (a read_committed fetch's
// aborted transactions) a transactional batch of a producer at or after
// the first offset of its oldest pending aborted transaction is dropped,
// and that producer's ABORT marker ends the transaction: Kafka's consumer
// filter.
func decodeRecords(recs []Record, a *assignment, batches []byte, aborted []partition.AbortedTxn) ([]Record, error) {
	var pending map[int64][]int64 // producer id -> first offsets of its aborted transactions, oldest first
	if len(aborted) > 0 {
		pending = map[int64][]int64{}
		for _, t := range aborted {
			pending[t.ProducerID] = append(pending[t.ProducerID], t.FirstOffset)
		}
	}
	// Size the result once: growing it record by record copies it over
	// and over.
	count := 0
	for rest := batches; len(rest) > 0; {
		b, n, err := record.ParseBatch(rest)
		if err != nil {
			break
		}
		count += int(b.NumRecords())
		rest = rest[n:]
	}
	recs = slices.Grow(recs, count)
	var it record.Iterator
	for len(batches) > 0 {
		b, n, err := record.ParseBatch(batches)
		if err != nil {
			return recs, err // cannot happen: the log checked the batches
		}
		batches = batches[n:]
		if b.IsControl() {
			if firsts := pending[b.ProducerID()]; len(firsts) > 0 {
				if m, err := record.ParseControlBatch(b); err == nil && m.Type == record.ControlAbort && b.BaseOffset() >= firsts[0] {
					pending[b.ProducerID()] = firsts[1:]
				}
			}
			a.pos = max(a.pos, b.NextOffset())
			continue
		}
		if firsts := pending[b.ProducerID()]; b.IsTransactional() && len(firsts) > 0 && b.BaseOffset() >= firsts[0] {
			a.pos = max(a.pos, b.NextOffset()) // aborted
			continue
		}
		if b.Compression() != record.None {
			it = record.Iterator{} // a fresh buffer: the records keep pointing into it
		}
		it.Reset(b)
		for it.Next() {
			r := it.Record()
			if r.Offset < a.pos {
				continue
			}
			out := Record{Topic: a.tp.Topic, Partition: a.tp.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
			if len(r.Headers) > 0 {
				out.Headers = append([]Header(nil), r.Headers...)
			}
			recs = append(recs, out)
		}
		if err := it.Err(); err != nil {
			return recs, fmt.Errorf("spool: %s-%d: %w", a.tp.Topic, a.tp.Partition, err)
		}
		a.pos = max(a.pos, b.NextOffset())
	}
	return recs, nil
}

// Close releases the consumer; Poll fails with ErrClosed afterwards. A group
// member commits its positions (with AutoCommit) and leaves the group - a
// static member stays, to come back within its session timeout.
func (c *Consumer) Close() error {
	if c.isClosed() {
		return nil
	}
	if c.grp != nil && !c.b.closed.Load() {
		c.leaveGroup()
	} else if c.grp != nil {
		c.stopHeartbeat()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.assigned, c.byTP = nil, map[TopicPartition]*assignment{}
	return nil
}
