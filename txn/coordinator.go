package txn

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/record"
)

// Coordinator is Kafka's transaction coordinator for the StateTopic
// partitions loaded into it (Load): for each transactional id of those
// partitions, the producer id and epoch, and the open transaction with its
// partitions and timeout. Safe for concurrent use.
//
// Every change of an id is computed as a pending transition, written to
// the Store, and applied only once the write succeeded; meanwhile other
// requests for that id get ErrConcurrentTransactions, and a failed write
// leaves the id as it was. Writes happen without the Coordinator's lock, so
// different ids never wait for each other.
type Coordinator struct {
	cfg Config

	mu     sync.Mutex // guards parts, every partition's ids and every entry
	parts  map[int32]*statePart
	closed bool

	ctx    context.Context // ends at Close; parent of every partition's
	cancel context.CancelFunc
	wg     sync.WaitGroup // marker senders and the timer goroutine
}

// statePart is one loaded (or loading) StateTopic partition. Unloading or
// reloading replaces it in Coordinator.parts: whoever let go of the lock
// checks that its statePart is still the one there before applying anything.
type statePart struct {
	id      int32
	epoch   int32 // the coordinator epoch: the partition's leader epoch
	loading bool
	ids     map[string]*entry
	ctx     context.Context // ends when the partition is unloaded
	cancel  context.CancelFunc
}

// entry is a transactional id in memory.
type entry struct {
	meta
	// busy marks a transition being written (or a producer id being
	// allocated for one); pending is the state it moves to, as Kafka's
	// pendingState.
	busy    bool
	pending State
	// fresh marks an id created by an InitProducerId whose first record
	// is not written yet: it is not described and is dropped if the write
	// fails.
	fresh bool
	// unmarked are the partitions of a Prepare* transaction still without
	// a marker; sending is set while a goroutine sends them.
	unmarked []TopicPartition
	sending  bool
}

// NewCoordinator returns a Coordinator with no partition loaded. Unless
// cfg.ManualTick is set it runs a goroutine calling Tick; Close stops it.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, parts: make(map[int32]*statePart)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !cfg.ManualTick {
		c.wg.Add(1)
		go c.run()
	}
	return c, nil
}

func (c *Coordinator) run() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.Tick(c.cfg.Now())
		}
	}
}

// Close stops the timer goroutine and the marker senders, and waits for
// them; later requests get ErrCoordinatorNotAvailable. Transactions whose
// markers were not all written stay Prepare* in the Store, and whoever loads
// the partition next sends them.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

func wrap(id, op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("txn %q: %s: %w", id, op, err)
}

// lookup finds an id's partition and entry (nil if the id is unknown).
// Called with c.mu held.
func (c *Coordinator) lookup(id string) (*statePart, *entry, error) {
	if c.closed {
		return nil, nil, fmt.Errorf("%w: closed", ErrCoordinatorNotAvailable)
	}
	if id == "" || len(id) > math.MaxInt16 {
		return nil, nil, fmt.Errorf("%w: transactional id of %d bytes", ErrInvalidRequest, len(id))
	}
	n := PartitionFor(id, c.cfg.Partitions)
	p := c.parts[n]
	switch {
	case p == nil:
		return nil, nil, fmt.Errorf("%w: %s-%d is not loaded here", ErrNotCoordinator, StateTopic, n)
	case p.loading:
		return nil, nil, fmt.Errorf("%w: %s-%d", ErrCoordinatorLoadInProgress, StateTopic, n)
	}
	return p, p.ids[id], nil
}

// persist writes next (nil: a tombstone) as id's record, with e marked
// busy moving to pending, and applies it once durable. Called with c.mu
// held and e not busy; it lets go of the lock during the write and holds
// it again when it returns.
func (c *Coordinator) persist(p *statePart, id string, e *entry, next *meta, pending State) error {
	e.busy, e.pending = true, pending
	rec := record.Record{Key: EncodeKey(id), Timestamp: c.cfg.Now()}
	if next != nil {
		rec.Value = EncodeValue(next.value())
	}
	c.mu.Unlock()
	err := c.cfg.Store.Append(p.ctx, p.id, p.epoch, []record.Record{rec})
	c.mu.Lock()
	e.busy = false
	switch {
	case c.parts[p.id] != p:
		// Unloaded meanwhile: whoever loads the partition next reads the
		// record, if it was written.
		return fmt.Errorf("%w: %s-%d was unloaded", ErrNotCoordinator, StateTopic, p.id)
	case errors.Is(err, ErrNotCoordinator):
		c.dropFresh(p, id, e)
		return fmt.Errorf("writing %s-%d: %w", StateTopic, p.id, err)
	case err != nil:
		c.dropFresh(p, id, e)
		return fmt.Errorf("%w: writing %s-%d: %w", ErrCoordinatorNotAvailable, StateTopic, p.id, err)
	}
	if next == nil {
		delete(p.ids, id)
		return nil
	}
	e.meta, e.fresh = *next, false
	return nil
}

// dropFresh forgets an id whose first record could not be written.
func (c *Coordinator) dropFresh(p *statePart, id string, e *entry) {
	if e.fresh && p.ids[id] == e {
		delete(p.ids, id)
	}
}

// InitProducerID handles InitProducerId with a transactional id: it returns
// the producer id and epoch the producer is to use, bumping the epoch so
// that any older instance of the producer is fenced.
//
// timeout is the transaction timeout (transaction.timeout.ms); it must be
// positive and at most Config.MaxTimeout (ErrInvalidTransactionTimeout).
// expectedPID and expectedEpoch are the producer's current ones (KIP-360,
// InitProducerId v3+), or -1 and -1 for a new producer; one -1 without the
// other is ErrInvalidRequest.
//
// The rules, Kafka's:
//   - A new id gets a new producer id at epoch 0.
//   - With no transaction open (Empty, CompleteCommit, CompleteAbort) the
//     epoch is bumped; at epoch 32766 the id gets a new producer id at
//     epoch 0 instead, remembering the previous one.
//   - An expected producer id that is neither the current one nor the
//     previous one (with an exhausted epoch) is ErrProducerFenced, and so
//     is an expected epoch other than the current one, except the one the
//     last bump continued: that is a retry whose answer was lost, answered
//     with the current id and epoch without another bump, also after a
//     failover (the previous producer id is persisted, KAFKA-20357).
//   - With a transaction open (Ongoing) the epoch is bumped to fence the
//     old instance, the transaction aborted with markers at the new epoch,
//     and ErrConcurrentTransactions returned: the retry bumps again.
//   - While a transaction is being completed (Prepare*) or another change
//     is being written: ErrConcurrentTransactions.
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeout time.Duration, expectedPID int64, expectedEpoch int16) (int64, int16, error) {
	pid, epoch, err := c.initProducerID(ctx, id, timeout, expectedPID, expectedEpoch)
	return pid, epoch, wrap(id, "init producer id", err)
}

func (c *Coordinator) initProducerID(ctx context.Context, id string, timeout time.Duration, expectedPID int64, expectedEpoch int16) (int64, int16, error) {
	if timeout <= 0 || timeout > c.cfg.MaxTimeout || timeout.Milliseconds() > math.MaxInt32 {
		return noPID, noEpoch, fmt.Errorf("%w: %v (max %v)", ErrInvalidTransactionTimeout, timeout, c.cfg.MaxTimeout)
	}
	timeoutMs := int32(timeout.Milliseconds())
	var exp *producerEpoch
	switch {
	case expectedPID == noPID && expectedEpoch == noEpoch:
	case expectedPID >= 0 && expectedEpoch >= 0:
		exp = &producerEpoch{expectedPID, expectedEpoch}
	default:
		return noPID, noEpoch, fmt.Errorf("%w: expected producer id %d with epoch %d", ErrInvalidRequest, expectedPID, expectedEpoch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, e, err := c.lookup(id)
	if err != nil {
		return noPID, noEpoch, err
	}
	now := c.cfg.Now().UnixMilli()
	var next meta
	kind := initNewPID
	if e == nil {
		e = &entry{fresh: true, meta: meta{pid: noPID, epoch: noEpoch, prevPID: noPID, startMs: -1}}
		p.ids[id] = e
		next = freshInit(timeoutMs, now)
	} else {
		if e.busy {
			return noPID, noEpoch, fmt.Errorf("%w: %v is being written", ErrConcurrentTransactions, e.pending)
		}
		if next, kind, err = decideInit(e.meta, timeoutMs, exp, now); err != nil {
			return noPID, noEpoch, fmt.Errorf("%w (state %v, producer id %d epoch %d)", err, e.state, e.pid, e.epoch)
		}
	}
	switch kind {
	case initRetry:
		return e.pid, e.epoch, nil
	case initNewPID:
		// Allocating may ask the controller: do it without the lock, with
		// the id marked busy so that nothing else changes it meanwhile.
		e.busy, e.pending = true, Empty
		c.mu.Unlock()
		pid, err := c.cfg.NewProducerID(ctx)
		c.mu.Lock()
		e.busy = false
		if c.parts[p.id] != p {
			return noPID, noEpoch, fmt.Errorf("%w: %s-%d was unloaded", ErrNotCoordinator, StateTopic, p.id)
		}
		if err != nil {
			c.dropFresh(p, id, e)
			return noPID, noEpoch, fmt.Errorf("%w: allocating a producer id: %w", ErrCoordinatorNotAvailable, err)
		}
		next.pid = pid
	case initFence:
		if err := c.persist(p, id, e, &next, PrepareEpochFence); err != nil {
			return noPID, noEpoch, err
		}
		c.startMarkers(p, id, e)
		return noPID, noEpoch, fmt.Errorf("%w: fenced producer epoch %d, aborting its transaction", ErrConcurrentTransactions, next.epoch-1)
	}
	if err := c.persist(p, id, e, &next, Empty); err != nil {
		return noPID, noEpoch, err
	}
	return next.pid, next.epoch, nil
}

// AddPartitions handles AddPartitionsToTxn (v0-3): it adds partitions to
// the producer's transaction, beginning one (Ongoing, timeout running) if
// none is open. It is all or nothing. If a partition does not exist
// (Config.PartitionExists), nothing is added and the map gives it
// ErrUnknownTopicOrPartition and every other partition
// ErrOperationNotAttempted; the error is then nil. Otherwise the error,
// if any, is for every partition (ErrInvalidProducerIDMapping,
// ErrProducerFenced, ErrConcurrentTransactions, ErrInvalidTxnState, the
// coordinator errors) and the map is nil; on success both are nil.
// Adding partitions already in the transaction writes nothing.
//
// ctx is not used to cancel the write: once started, a write completes (or
// fails) so that memory follows the log; it ends with the partition's
// leadership. The same holds for AddOffsets and EndTxn.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, partitions []TopicPartition) (map[TopicPartition]error, error) {
	var unknown bool
	for _, tp := range partitions {
		if !c.cfg.PartitionExists(tp) {
			unknown = true
		}
	}
	if unknown {
		out := make(map[TopicPartition]error, len(partitions))
		for _, tp := range partitions {
			out[tp] = ErrOperationNotAttempted
			if !c.cfg.PartitionExists(tp) {
				out[tp] = ErrUnknownTopicOrPartition
			}
		}
		return out, nil
	}
	return nil, wrap(id, "add partitions", c.add(id, pid, epoch, partitions))
}

// AddOffsets handles AddOffsetsToTxn: it adds the OffsetsTopic partition of
// groupID (Config.GroupPartition), to which the producer's TxnOffsetCommit
// goes, to its transaction, so that the offsets commit or abort with it.
// Errors as AddPartitions.
func (c *Coordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, groupID string) error {
	return wrap(id, "add offsets", c.add(id, pid, epoch, []TopicPartition{c.cfg.GroupPartition(groupID)}))
}

func (c *Coordinator) add(id string, pid int64, epoch int16, tps []TopicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, e, err := c.lookup(id)
	switch {
	case err != nil:
		return err
	case e == nil || e.fresh:
		return fmt.Errorf("%w: unknown transactional id", ErrInvalidProducerIDMapping)
	}
	if err := checkProducer(e.meta, pid, epoch); err != nil {
		return fmt.Errorf("%w: producer id %d epoch %d, the id has %d epoch %d", err, pid, epoch, e.pid, e.epoch)
	}
	if e.busy {
		return fmt.Errorf("%w: %v is being written", ErrConcurrentTransactions, e.pending)
	}
	next, write, err := decideAdd(e.meta, pid, epoch, tps, c.cfg.Now().UnixMilli())
	if err != nil || !write {
		return wrapState(err, e)
	}
	return c.persist(p, id, e, &next, Ongoing)
}

func wrapState(err error, e *entry) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (state %v)", err, e.state)
}

// VerifyPartitions answers KIP-890 part 1's question for a partition
// leader about to append a transactional batch (AddPartitionsToTxn v4+
// VerifyOnly): is each partition in the producer's ongoing transaction? It
// changes nothing. The error, if any, is for every partition (as
// AddPartitions); otherwise the map gives each partition nil, or
// ErrTransactionAbortable if it was not added.
func (c *Coordinator) VerifyPartitions(id string, pid int64, epoch int16, partitions []TopicPartition) (map[TopicPartition]error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, e, err := c.lookup(id)
	switch {
	case err != nil:
		return nil, wrap(id, "verify partitions", err)
	case e == nil || e.fresh:
		return nil, wrap(id, "verify partitions", fmt.Errorf("%w: unknown transactional id", ErrInvalidProducerIDMapping))
	}
	if err := checkProducer(e.meta, pid, epoch); err != nil {
		return nil, wrap(id, "verify partitions", err)
	}
	if e.busy || e.state.preparing() {
		return nil, wrap(id, "verify partitions", ErrConcurrentTransactions)
	}
	out := make(map[TopicPartition]error, len(partitions))
	for _, tp := range partitions {
		out[tp] = nil
		if e.state != Ongoing || !e.has(tp) {
			out[tp] = ErrTransactionAbortable
		}
	}
	return out, nil
}

// EndTxn handles EndTxn: it commits (commit true) or aborts the producer's
// open transaction. It returns once the decision (PrepareCommit or
// PrepareAbort) is durable; the markers are then written in the background
// and the transaction ends CompleteCommit or CompleteAbort. Meanwhile the
// id's requests get ErrConcurrentTransactions. A retry of a completed
// EndTxn with the same outcome succeeds again; one still being completed
// gets ErrConcurrentTransactions; the other outcome, or no transaction at
// all, ErrInvalidTxnState.
func (c *Coordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	return wrap(id, "end transaction", c.endTxn(id, pid, epoch, commit))
}

func (c *Coordinator) endTxn(id string, pid int64, epoch int16, commit bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, e, err := c.lookup(id)
	switch {
	case err != nil:
		return err
	case e == nil || e.fresh:
		return fmt.Errorf("%w: unknown transactional id", ErrInvalidProducerIDMapping)
	}
	if err := checkProducer(e.meta, pid, epoch); err != nil {
		return fmt.Errorf("%w: producer id %d epoch %d, the id has %d epoch %d", err, pid, epoch, e.pid, e.epoch)
	}
	if e.busy {
		return fmt.Errorf("%w: %v is being written", ErrConcurrentTransactions, e.pending)
	}
	next, write, err := decideEnd(e.meta, pid, epoch, commit, c.cfg.Now().UnixMilli())
	if err != nil || !write {
		return wrapState(err, e)
	}
	if err := c.persist(p, id, e, &next, next.state); err != nil {
		return err
	}
	c.startMarkers(p, id, e)
	return nil
}

// startMarkers starts sending the markers of e's decided transaction.
// Called with c.mu held, e in Prepare*.
func (c *Coordinator) startMarkers(p *statePart, id string, e *entry) {
	if e.sending {
		return
	}
	e.sending = true
	e.unmarked = slices.Clone(e.partitions)
	c.wg.Add(1)
	go c.sendMarkers(p, id, e)
}

// sendMarkers writes the markers of e's decided transaction until every
// partition has one, then writes Complete*. It gives up when the partition
// is unloaded or the Coordinator closed (the next coordinator resumes from
// the Prepare* record), and when a leader reports this coordinator fenced.
func (c *Coordinator) sendMarkers(p *statePart, id string, e *entry) {
	defer c.wg.Done()
	log := c.cfg.Logger.With("transactional_id", id, "partition", p.id)
	for {
		c.mu.Lock()
		if c.parts[p.id] != p || p.ids[id] != e || !e.state.preparing() {
			e.sending = false
			c.mu.Unlock()
			return
		}
		pid, epoch, commit, todo := e.pid, e.epoch, e.state == PrepareCommit, slices.Clone(e.unmarked)
		c.mu.Unlock()

		var left []TopicPartition
		if len(todo) > 0 {
			errs := c.cfg.Markers.WriteMarkers(p.ctx, pid, epoch, commit, p.epoch, todo)
			if len(errs) != len(todo) {
				log.Warn("txn: marker writer answered for the wrong number of partitions", "want", len(todo), "got", len(errs))
				left = todo
			}
			for i := 0; i < len(errs) && len(errs) == len(todo); i++ {
				switch err := errs[i]; {
				case err == nil:
				case errors.Is(err, ErrUnknownTopicOrPartition):
					log.Warn("txn: no marker for a partition that does not exist", "topic_partition", todo[i].String(), "err", err)
				case errors.Is(err, ErrCoordinatorFenced), errors.Is(err, ErrInvalidProducerEpoch):
					log.Warn("txn: markers refused, giving the transaction up to the newer coordinator", "topic_partition", todo[i].String(), "err", err)
					c.mu.Lock()
					e.sending = false
					c.mu.Unlock()
					return
				default:
					log.Debug("txn: marker not written yet, retrying", "topic_partition", todo[i].String(), "err", err)
					left = append(left, todo[i])
				}
			}
		}
		c.mu.Lock()
		if c.parts[p.id] != p || p.ids[id] != e {
			e.sending = false
			c.mu.Unlock()
			return
		}
		e.unmarked = left
		var err error
		if len(left) == 0 {
			next := completed(e.meta, c.cfg.Now().UnixMilli())
			if err = c.persist(p, id, e, &next, next.state); err == nil {
				e.sending, e.unmarked = false, nil
				c.mu.Unlock()
				return
			}
			if errors.Is(err, ErrNotCoordinator) {
				e.sending = false
				c.mu.Unlock()
				return
			}
			log.Warn("txn: writing the end of a transaction", "err", err)
		}
		c.mu.Unlock()
		select {
		case <-p.ctx.Done():
			c.mu.Lock()
			e.sending = false
			c.mu.Unlock()
			return
		case <-time.After(c.cfg.MarkerRetryBackoff):
		}
	}
}

// Tick aborts the Ongoing transactions that have outlived their timeout at
// now, fencing their producer epoch first (so the producer cannot go on
// writing to them), and expires ids that have been without a transaction
// for longer than Config.IDExpiration, writing their tombstones. The timer
// goroutine calls it every Config.TickInterval. It returns once the aborts
// are decided and durable; their markers follow in the background.
func (c *Coordinator) Tick(now time.Time) {
	nowMs := now.UnixMilli()
	expiration := int64(math.MaxInt64)
	if c.cfg.IDExpiration > 0 {
		expiration = c.cfg.IDExpiration.Milliseconds()
	}
	type job struct {
		p  *statePart
		id string
		e  *entry
	}
	var jobs []job
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for _, n := range slices.Sorted(maps.Keys(c.parts)) {
		p := c.parts[n]
		if p.loading {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(p.ids)) {
			if e := p.ids[id]; !e.busy && !e.fresh && (e.timedOut(nowMs) || e.expired(nowMs, expiration)) {
				jobs = append(jobs, job{p, id, e})
			}
		}
	}
	for _, j := range jobs {
		// Each write lets go of the lock: check again before each.
		e := j.e
		if c.closed || c.parts[j.p.id] != j.p || j.p.ids[j.id] != e || e.busy {
			continue
		}
		switch {
		case e.timedOut(nowMs):
			next := fence(e.meta, nowMs)
			if err := c.persist(j.p, j.id, e, &next, PrepareEpochFence); err != nil {
				c.cfg.Logger.Warn("txn: aborting a timed-out transaction", "transactional_id", j.id, "err", err)
				continue
			}
			c.cfg.Logger.Info("txn: aborted a timed-out transaction", "transactional_id", j.id, "producer_id", next.pid, "epoch", next.epoch)
			c.startMarkers(j.p, j.id, e)
		case e.expired(nowMs, expiration):
			if err := c.persist(j.p, j.id, e, nil, Dead); err != nil {
				c.cfg.Logger.Warn("txn: expiring a transactional id", "transactional_id", j.id, "err", err)
			}
		}
	}
}

// Load makes the Coordinator coordinate the transactional ids of a
// StateTopic partition, replacing what it had of that partition: a broker
// calls it when it becomes the partition's leader, with coordinatorEpoch
// the partition's leader epoch (which the markers carry, so that leaders
// refuse a deposed coordinator's). records are the partition's committed
// records from its start, in offset order; the latest record of each id
// wins, and a tombstone (nil value) removes the id. Keys of unknown
// versions are skipped, as are ids that do not belong to the partition.
// Meanwhile the partition's ids get ErrCoordinatorLoadInProgress.
//
// Once loaded, the markers of every transaction left PrepareCommit or
// PrepareAbort are sent again, and the transaction then completed; Ongoing
// transactions resume with their timeout. Load fails, leaving the
// partition unloaded (ErrNotCoordinator), if ctx ends, records yields an
// error, a record is malformed (ErrMalformedRecord: a transaction state
// cannot be skipped safely), or the partition was unloaded meanwhile.
func (c *Coordinator) Load(ctx context.Context, partition, coordinatorEpoch int32, records iter.Seq2[*record.Record, error]) error {
	if partition < 0 || int(partition) >= c.cfg.Partitions {
		return fmt.Errorf("txn: load %s-%d: %w: %d partitions", StateTopic, partition, ErrInvalidRequest, c.cfg.Partitions)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("txn: load %s-%d: %w: closed", StateTopic, partition, ErrCoordinatorNotAvailable)
	}
	if old := c.parts[partition]; old != nil {
		old.cancel()
	}
	p := &statePart{id: partition, epoch: coordinatorEpoch, loading: true, ids: make(map[string]*entry)}
	p.ctx, p.cancel = context.WithCancel(c.ctx)
	c.parts[partition] = p
	c.mu.Unlock()

	latest, err := c.replay(ctx, partition, records)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parts[partition] != p {
		return fmt.Errorf("txn: load %s-%d: %w: unloaded while loading", StateTopic, partition, ErrNotCoordinator)
	}
	if err != nil {
		delete(c.parts, partition)
		p.cancel()
		return fmt.Errorf("txn: load %s-%d: %w", StateTopic, partition, err)
	}
	for id, v := range latest {
		if v == nil || v.State == Dead {
			continue
		}
		p.ids[id] = &entry{meta: metaFromValue(*v)}
	}
	p.loading = false
	for _, id := range slices.Sorted(maps.Keys(p.ids)) {
		if e := p.ids[id]; e.state.preparing() {
			c.startMarkers(p, id, e)
		}
	}
	return nil
}

// replay reads a partition's records into the latest value of each id
// (nil for a tombstone).
func (c *Coordinator) replay(ctx context.Context, partition int32, records iter.Seq2[*record.Record, error]) (map[string]*Value, error) {
	latest := make(map[string]*Value)
	for r, err := range records {
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id, err := DecodeKey(r.Key)
		if errors.Is(err, ErrUnknownKeyVersion) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key at offset %d: %w", r.Offset, err)
		}
		if PartitionFor(id, c.cfg.Partitions) != partition {
			c.cfg.Logger.Warn("txn: skipping a transactional id of another partition", "transactional_id", id, "partition", partition, "offset", r.Offset)
			continue
		}
		if r.Value == nil {
			latest[id] = nil
			continue
		}
		v, err := DecodeValue(r.Value)
		if err != nil {
			return nil, fmt.Errorf("value of %q at offset %d: %w", id, r.Offset, err)
		}
		latest[id] = &v
	}
	return latest, nil
}

// Unload stops coordinating a StateTopic partition - this broker no
// longer leads it - dropping its ids from memory (not from the Store) and
// stopping its marker senders; its ids then get ErrNotCoordinator. It
// reports whether the partition was loaded.
func (c *Coordinator) Unload(partition int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[partition]
	if p == nil {
		return false
	}
	p.cancel()
	delete(c.parts, partition)
	return true
}

// Describe handles DescribeTransactions: one Description per id, in order.
func (c *Coordinator) Describe(ids []string) []Description {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Description, len(ids))
	for i, id := range ids {
		d := &out[i]
		d.TransactionalID = id
		_, e, err := c.lookup(id)
		switch {
		case errors.Is(err, ErrInvalidRequest):
			d.Err = ErrTransactionalIDNotFound
		case err != nil:
			d.Err = err
		case e == nil || e.fresh:
			d.Err = ErrTransactionalIDNotFound
		default:
			d.State, d.ProducerID, d.ProducerEpoch = e.state, e.pid, e.epoch
			d.Timeout = time.Duration(e.timeoutMs) * time.Millisecond
			if e.startMs >= 0 && e.state != Empty {
				d.Start = time.UnixMilli(e.startMs)
			}
			d.Partitions = slices.Clone(e.partitions)
		}
	}
	return out
}

// List handles ListTransactions: the ids of every loaded partition that
// pass the filter, sorted by id, and the filter's state names that are no
// state. It fails with ErrCoordinatorLoadInProgress while a partition is
// loading (as Kafka does), and ErrInvalidRegularExpression for a bad
// IDPattern.
func (c *Coordinator) List(f ListFilter) (txns []Listing, unknownStates []string, err error) {
	var re *regexp.Regexp
	if f.IDPattern != "" {
		if re, err = regexp.Compile(f.IDPattern); err != nil {
			return nil, nil, fmt.Errorf("txn: list transactions: %w: %w", ErrInvalidRegularExpression, err)
		}
	}
	states := map[State]bool{}
	for _, name := range f.States {
		if s, ok := ParseState(name); ok {
			states[s] = true
		} else {
			unknownStates = append(unknownStates, name)
		}
	}
	if len(f.States) > 0 && len(states) == 0 {
		return nil, unknownStates, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, unknownStates, fmt.Errorf("txn: list transactions: %w: closed", ErrCoordinatorNotAvailable)
	}
	nowMs := c.cfg.Now().UnixMilli()
	for _, p := range c.parts {
		if p.loading {
			return nil, unknownStates, fmt.Errorf("txn: list transactions: %w: %s-%d", ErrCoordinatorLoadInProgress, StateTopic, p.id)
		}
		for id, e := range p.ids {
			switch {
			case e.fresh:
			case len(states) > 0 && !states[e.state]:
			case len(f.ProducerIDs) > 0 && !slices.Contains(f.ProducerIDs, e.pid):
			case f.MinDuration > 0 && (e.state == Empty || e.startMs < 0 || nowMs-e.startMs <= f.MinDuration.Milliseconds()):
			case re != nil && !re.MatchString(id):
			default:
				txns = append(txns, Listing{TransactionalID: id, ProducerID: e.pid, State: e.state})
			}
		}
	}
	slices.SortFunc(txns, func(a, b Listing) int { return cmpString(a.TransactionalID, b.TransactionalID) })
	return txns, unknownStates, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
