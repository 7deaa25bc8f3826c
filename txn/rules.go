package txn

import (
	"math"
	"slices"
)

// This file holds the state machine's decisions as pure functions of an
// id's metadata and a request: what to write next, or why not. The
// Coordinator writes what they return and applies it once durable.

// noEpoch is Kafka's RecordBatch.NO_PRODUCER_EPOCH; noPID its NO_PRODUCER_ID.
const (
	noEpoch int16 = -1
	noPID   int64 = -1
)

// exhaustedEpoch is the first producer epoch that is not bumped: an id at
// it (or at math.MaxInt16, reached only by fencing) gets a new producer id
// at its next InitProducerId (Kafka's isEpochExhausted).
const exhaustedEpoch = math.MaxInt16 - 1

func exhausted(epoch int16) bool { return epoch >= exhaustedEpoch }

// meta is the state of one transactional id, as stored.
type meta struct {
	pid   int64
	epoch int16
	// prevPID is the producer id whose epoch the last epoch change
	// continued (a KIP-360 InitProducerId that named its current producer
	// id and epoch), noPID if the last change was a fresh InitProducerId or
	// a fence. It is all this package persists of Kafka's in-memory
	// lastProducerEpoch (see lastEpoch), so that a retried InitProducerId
	// is recognised after a failover too (KAFKA-20357).
	prevPID    int64
	timeoutMs  int32
	state      State
	partitions []TopicPartition // sorted; nil when none
	// startMs is when the open (or last) transaction began, -1 if none;
	// lastUpdateMs when the id last changed.
	startMs, lastUpdateMs int64
}

// lastEpoch is the producer epoch the last epoch change replaced, if that
// change continued it (KIP-360), else noEpoch. Epochs only move by one
// bump at a time, and a rotation to a new producer id continues only an
// exhausted epoch that a client held, exhaustedEpoch itself (epochs above
// it come from fencing and are never handed out), so prevPID determines it.
func (m meta) lastEpoch() int16 {
	switch {
	case m.prevPID == noPID:
		return noEpoch
	case m.prevPID == m.pid:
		return m.epoch - 1
	default:
		return exhaustedEpoch
	}
}

func (m meta) value() Value {
	v := Value{
		ProducerID: m.pid, ProducerEpoch: m.epoch, TimeoutMs: m.timeoutMs, State: m.state,
		LastUpdateMs: m.lastUpdateMs, StartMs: m.startMs,
		PreviousProducerID: m.prevPID, NextProducerID: noPID,
	}
	if m.state != Empty {
		v.Partitions = slices.Clone(m.partitions)
		if v.Partitions == nil {
			v.Partitions = []TopicPartition{} // Kafka writes null for Empty only
		}
	}
	return v
}

// metaFromValue is a stored value as this package keeps it. Kafka never
// stores PrepareEpochFence (a pending state only); should one be found, it
// is taken for the Ongoing transaction it was fencing, which the timeout
// then aborts.
func metaFromValue(v Value) meta {
	m := meta{
		pid: v.ProducerID, epoch: v.ProducerEpoch, prevPID: v.PreviousProducerID,
		timeoutMs: v.TimeoutMs, state: v.State, startMs: v.StartMs, lastUpdateMs: v.LastUpdateMs,
	}
	if m.state == PrepareEpochFence {
		m.state = Ongoing
	}
	if len(v.Partitions) > 0 {
		m.partitions = slices.Clone(v.Partitions)
		slices.SortFunc(m.partitions, compareTP)
		m.partitions = slices.Compact(m.partitions)
	}
	return m
}

// producerEpoch is a producer id and epoch named by a request.
type producerEpoch struct {
	pid   int64
	epoch int16
}

// initKind says what an InitProducerId does.
type initKind int

const (
	// initWrite: write next (an epoch bump) and answer it.
	initWrite initKind = iota
	// initNewPID: like initWrite, with a newly allocated producer id.
	initNewPID
	// initRetry: a retry of a bump already made; answer the current
	// producer id and epoch without writing.
	initRetry
	// initFence: write next, the abort of the open transaction at a bumped
	// epoch, send its markers, and answer ErrConcurrentTransactions.
	initFence
)

// decideInit is InitProducerId on an existing id (Kafka's
// prepareInitProducerIdTransit and prepareIncrementProducerEpoch). exp is
// the producer's current id and epoch (KIP-360), nil if it sent none.
func decideInit(m meta, timeoutMs int32, exp *producerEpoch, nowMs int64) (meta, initKind, error) {
	if exp != nil && m.epoch != noEpoch && exp.pid != m.pid && (exp.pid != m.prevPID || !exhausted(exp.epoch)) {
		// Neither this id's producer, nor a retry of the rotation away
		// from the previous one.
		return m, 0, ErrProducerFenced
	}
	switch {
	case m.state.preparing():
		return m, 0, ErrConcurrentTransactions
	case m.state == Ongoing:
		return fence(m, nowMs), initFence, nil
	case !m.state.complete():
		return m, 0, ErrInvalidTxnState // Dead: never kept in memory
	}
	if exp != nil && m.epoch != noEpoch && exp.epoch != m.epoch {
		if exp.pid == m.prevPID && exp.epoch == m.lastEpoch() {
			return m, initRetry, nil
		}
		return m, 0, ErrProducerFenced
	}
	next := meta{
		pid: m.pid, epoch: m.epoch + 1, prevPID: noPID, timeoutMs: timeoutMs,
		state: Empty, startMs: -1, lastUpdateMs: nowMs,
	}
	kind := initWrite
	if exhausted(m.epoch) {
		next.pid, next.epoch, kind = noPID, 0, initNewPID // the caller fills the new pid in
	}
	if exp != nil && m.epoch != noEpoch {
		next.prevPID = m.pid
	}
	return next, kind, nil
}

// freshInit is InitProducerId on an id never seen (or expired): a new
// producer id at epoch 0, which the caller fills in.
func freshInit(timeoutMs int32, nowMs int64) meta {
	return meta{pid: noPID, epoch: 0, prevPID: noPID, timeoutMs: timeoutMs, state: Empty, startMs: -1, lastUpdateMs: nowMs}
}

// fence is the abort of an Ongoing transaction with the producer epoch
// bumped (Kafka's prepareFenceProducerEpoch followed by PrepareAbort): its
// markers carry the new epoch, so partition leaders refuse the old
// producer from then on, and nobody holds the new epoch until the next
// InitProducerId bumps it again. Epochs never exceed math.MaxInt16; an
// Ongoing transaction at that epoch (which no client can hold) is aborted
// without a bump.
func fence(m meta, nowMs int64) meta {
	next := m
	next.partitions = slices.Clone(m.partitions)
	if next.epoch < math.MaxInt16 {
		next.epoch++
	}
	next.prevPID = noPID
	next.state = PrepareAbort
	next.lastUpdateMs = nowMs
	return next
}

// checkProducer checks a request's producer id and epoch against the id's
// (the checks every request after InitProducerId starts with).
func checkProducer(m meta, pid int64, epoch int16) error {
	switch {
	case pid != m.pid:
		return ErrInvalidProducerIDMapping
	case epoch != m.epoch:
		return ErrProducerFenced
	}
	return nil
}

// decideAdd is AddPartitionsToTxn (Kafka's prepareAddPartitions); write
// false means the partitions are in the transaction already.
func decideAdd(m meta, pid int64, epoch int16, tps []TopicPartition, nowMs int64) (next meta, write bool, err error) {
	if err := checkProducer(m, pid, epoch); err != nil {
		return m, false, err
	}
	switch {
	case m.state.preparing():
		return m, false, ErrConcurrentTransactions
	case m.state == Ongoing:
		if !slices.ContainsFunc(tps, func(tp TopicPartition) bool { return !m.has(tp) }) {
			return m, false, nil
		}
	case !m.state.complete():
		return m, false, ErrInvalidTxnState
	case len(tps) == 0:
		return m, false, nil // nothing to begin a transaction with
	}
	next = m
	next.partitions = slices.Concat(m.partitions, tps)
	if m.state != Ongoing {
		next.partitions = slices.Clone(tps)
		next.startMs = nowMs
	}
	slices.SortFunc(next.partitions, compareTP)
	next.partitions = slices.Compact(next.partitions)
	next.state = Ongoing
	next.lastUpdateMs = nowMs
	return next, true, nil
}

func (m meta) has(tp TopicPartition) bool {
	_, ok := slices.BinarySearchFunc(m.partitions, tp, compareTP)
	return ok
}

// decideEnd is EndTxn (Kafka's endTransaction for a client): write false
// with no error answers a retry of an EndTxn already completed.
func decideEnd(m meta, pid int64, epoch int16, commit bool, nowMs int64) (next meta, write bool, err error) {
	if err := checkProducer(m, pid, epoch); err != nil {
		return m, false, err
	}
	prepare, complete := PrepareAbort, CompleteAbort
	if commit {
		prepare, complete = PrepareCommit, CompleteCommit
	}
	switch m.state {
	case Ongoing:
		next = m
		next.partitions = slices.Clone(m.partitions)
		next.state = prepare
		next.lastUpdateMs = nowMs
		return next, true, nil
	case complete:
		return m, false, nil
	case prepare:
		return m, false, ErrConcurrentTransactions
	}
	return m, false, ErrInvalidTxnState
}

// completed is the record ending a transaction once its markers are
// written (Kafka's prepareComplete): the partitions are cleared.
func completed(m meta, nowMs int64) meta {
	next := m
	next.partitions = nil
	next.state = CompleteAbort
	if m.state == PrepareCommit {
		next.state = CompleteCommit
	}
	next.lastUpdateMs = nowMs
	return next
}

// timedOut reports whether an Ongoing transaction has outlived its
// timeout at now (Kafka: start + timeout < now).
func (m meta) timedOut(nowMs int64) bool {
	return m.state == Ongoing && m.startMs+int64(m.timeoutMs) < nowMs
}

// expired reports whether an id without an open transaction has been idle
// for longer than expiration (Kafka: lastUpdate <= now - expiration).
func (m meta) expired(nowMs, expirationMs int64) bool {
	return m.state.complete() && m.lastUpdateMs <= nowMs-expirationMs
}
