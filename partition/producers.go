package partition

// Idempotent producers (Kafka's ProducerStateManager, KIP-98 and KIP-360).
//
// A Kafka producer with idempotence on stamps every batch with its producer
// id, epoch and the sequence number of the batch's first record. The
// partition remembers, per producer id, the epoch and the last
// producerWindow batches it appended - first and last sequence, first and
// last offset - and checks each new batch against them:
//
//	same sequence range as a remembered batch   duplicate: answer the original offsets, write nothing
//	epoch below the producer's                  ErrInvalidProducerEpoch (a fenced, older instance)
//	epoch above the producer's                  a new epoch: its sequences restart, so the first must be 0
//	same epoch                                  the first sequence must follow the last one (int32 wraps to 0)
//	unknown producer id                         the first sequence must be 0, or ErrUnknownProducerID
//
// The check, the append and the update of the state are atomic for each
// producer (a lock per producer id, held across the append); appends of
// different producers, and of batches without a producer id, run
// concurrently and share the log's group commit. A batch is remembered only
// once the log has accepted it - under the Sync flush policy, once it is on
// stable storage - so a duplicate is never answered for a batch that is not
// durable.
//
// # Snapshots
//
// The state is written beside the log as <offset>.snapshot, in Kafka's
// ProducerSnapshot layout (version 1), big-endian:
//
//	version int16 (1) | crc uint32 | count int32 | count × entry
//	entry: producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 |
//	       offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
//	       currentTxnFirstOffset int64
//
// coordinatorEpoch is that of the producer's last transaction marker (-1:
// none); currentTxnFirstOffset is the first offset of its open transaction
// (-1: none), every entry of a producer carrying the same two. A producer
// known only by a marker (no data batch remembered) has one entry with
// lastSequence and lastOffset -1, as Kafka writes it. The CRC-32C covers
// everything after the crc field. offset in the name is
// the log end offset the snapshot describes: it reflects every batch below
// it. Kafka writes one entry per producer (its last batch); spool writes one
// entry per remembered batch, oldest first, so that all of a producer's
// last batches survive a restart. Kafka's reader keeps the last entry of a
// producer id, which is its latest batch: the file means the same to it.
//
// A snapshot is taken when the log has rolled a segment, at most every
// snapshotInterval while the state changes, and by SnapshotProducers (to be
// called on Close); the latest snapshotsKept are kept. The state is loaded
// on first use: the newest snapshot at or below the log end offset (newer
// ones describe data a crash took away and are deleted; damaged ones are
// deleted too and the next older one is tried), then the batches after it
// are replayed from the log's batch headers. Without a usable snapshot the
// whole log is replayed.
//
// Producers are forgotten - and a later batch of theirs gets
// ErrUnknownProducerID, which clients answer by resetting their sequences
// (KIP-360) - when they have not written for the producer id expiration
// (Kafka's producer.id.expiration.ms, one day), and when retention has
// removed every batch they wrote (Kafka evicts those too). A producer with
// an open transaction is never forgotten: its transaction pins the last
// stable offset until a marker ends it.
//
// Transactions (KIP-98) are tracked here too; see txn.go.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/vfs"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
)

// Errors of idempotent appends, tested with errors.Is. Each is the Kafka
// error of the same name.
var (
	// ErrOutOfOrderSequence means a batch's first sequence does not follow
	// the producer's last one (OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrderSequence = errors.New("partition: out of order sequence number")
	// ErrUnknownProducerID means a batch with a sequence other than 0 from a
	// producer the partition does not know, or no longer knows
	// (UNKNOWN_PRODUCER_ID).
	ErrUnknownProducerID = errors.New("partition: unknown producer id")
	// ErrInvalidProducerEpoch means a batch from an epoch older than the
	// producer's latest: a fenced instance (INVALID_PRODUCER_EPOCH).
	ErrInvalidProducerEpoch = errors.New("partition: producer epoch is older than the latest")
	// ErrProducerState means the producer state could not be loaded from
	// the snapshots and the log (it wraps the cause).
	ErrProducerState = errors.New("partition: producer state unavailable")
	// ErrBadProducerSnapshot means a snapshot file is damaged.
	ErrBadProducerSnapshot = errors.New("partition: producer snapshot is damaged")
	// ErrInvalidTxnState means a batch that does not fit the producer's
	// transaction: a non-transactional batch from a producer with an open
	// transaction (INVALID_TXN_STATE).
	ErrInvalidTxnState = errors.New("partition: invalid transaction state")
	// ErrTransactionCoordinatorFenced means a transaction marker from a
	// coordinator epoch older than that of the producer's last marker: a
	// deposed coordinator (TRANSACTION_COORDINATOR_FENCED).
	ErrTransactionCoordinatorFenced = errors.New("partition: transaction coordinator epoch is older than the latest")
)

const (
	// DefaultProducerIDExpiration is how long a producer that writes
	// nothing is remembered (producer.id.expiration.ms).
	DefaultProducerIDExpiration = 24 * time.Hour

	// SnapshotSuffix ends a producer snapshot's file name.
	SnapshotSuffix = ".snapshot"

	producerWindow   = 5           // batches remembered per producer (Kafka's, and the clients' max in flight)
	snapshotInterval = time.Minute // at most this long between snapshots of a changing state
	expiryInterval   = time.Minute // how often expiry runs
	snapshotsKept    = 2

	snapshotVersion   = 1
	snapshotHeader    = 2 + 4 + 4 // version, crc, count
	snapshotEntrySize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendProduced appends a batch a Kafka producer sent, as AppendBatch does,
// after the idempotent-producer checks when it carries a producer id (see
// the comment at the top of producers.go). It returns the batch's base
// offset; for a retry of one of the producer's last batches it writes
// nothing and returns the original base offset with duplicate set. Batches
// without a producer id are appended unchecked, as AppendBatch.
//
// Transactional batches and transaction markers (control batches, see
// MarkerBatch) come in here too, and get the checks of txn.go: a
// transactional batch opens or continues its producer's transaction, a
// non-transactional one while a transaction is open is ErrInvalidTxnState,
// a marker ends the transaction (ErrInvalidProducerEpoch for an older
// producer epoch, ErrTransactionCoordinatorFenced for an older coordinator
// epoch, an error wrapping record.ErrBadControlRecord for a control batch
// that is no marker). Whether a client may send such batches at all is the
// caller's decision (a Kafka client may not send control batches, and may
// send transactional ones only inside a transaction its coordinator knows).
//
// The caller validates what Kafka validates before this point: a data batch
// with a producer id has a non-negative base sequence.
func (p *Partition) AppendProduced(b record.Batch) (base int64, duplicate bool, err error) {
	if b.IsZero() || b.ProducerID() < 0 {
		base, err = p.AppendBatch(b)
		return base, false, err
	}
	st, err := p.producerState()
	if err != nil {
		return 0, false, err
	}
	return st.append(b)
}

// SnapshotProducers writes a snapshot of the producer state now, if it has
// been loaded and changed since the last one, so that the next open replays
// nothing. Close should call it before closing the log.
func (p *Partition) SnapshotProducers() error {
	h := p.producerHolder()
	h.mu.Lock()
	st := h.st
	h.mu.Unlock()
	if st == nil {
		return nil // never loaded: the snapshots on disk still hold
	}
	return st.snapshot(true)
}

// ResetProducers forgets the producer state after the log was truncated
// (a replica whose log diverged from its leader's): snapshots past the new
// log end are deleted now, and the next idempotent append loads the state
// again from what remains.
func (p *Partition) ResetProducers() error {
	end := p.log.EndOffset()
	return p.dropProducers(func(off int64) bool { return off > end })
}

// dropProducers forgets the producer state and deletes the snapshots at
// the offsets drop picks.
func (p *Partition) dropProducers(drop func(offset int64) bool) error {
	h := p.producerHolder()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st != nil {
		// An append in flight finishes against the old state; the
		// truncation already failed or removed it.
		h.st.snapMu.Lock()
		defer h.st.snapMu.Unlock()
	}
	h.st = nil
	offsets, err := listSnapshots(p.dir)
	if err != nil {
		return err
	}
	for _, off := range offsets {
		if drop(off) {
			if err := os.Remove(filepath.Join(p.dir, snapshotName(off))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// ProducerInfo is what a partition knows of one active idempotent
// producer: Kafka's ProducerStateEntry, as DescribeProducers reports it.
type ProducerInfo struct {
	// ID and Epoch are the producer's id and latest epoch.
	ID    int64
	Epoch int16
	// LastSequence is the sequence of the last record of its last batch.
	LastSequence int32
	// LastOffset is the offset of the last record of its last batch.
	LastOffset int64
	// LastTimestamp is when the producer last appended, in Unix
	// milliseconds: the wall clock of its last append here, or for a
	// batch replayed from the log when the state was loaded, the batch's
	// max timestamp. It is what expiration counts from.
	LastTimestamp int64
	// CoordinatorEpoch is the coordinator epoch of the producer's last
	// transaction marker here, -1 if none.
	CoordinatorEpoch int32
	// CurrentTxnStartOffset is the first offset of the producer's open
	// transaction, -1 if none.
	CurrentTxnStartOffset int64
}

// Producers lists the partition's active idempotent producers, by id. The
// first call loads the producer state from the snapshots and the log, as
// the first idempotent append would; nothing is changed: a producer past
// the expiration, or whose batches retention has removed, is left out
// (the next append forgets it), as is one whose first batch is being
// appended.
func (p *Partition) Producers() ([]ProducerInfo, error) {
	st, err := p.producerState()
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	cutoff := st.now().Add(-st.expiration).UnixMilli()
	start := st.log.StartOffset()
	out := make([]ProducerInfo, 0, len(st.producers))
	for pid, e := range st.producers {
		if e.empty() || e.expired(cutoff, start) {
			continue
		}
		info := ProducerInfo{ID: pid, Epoch: e.epoch, LastSequence: -1, LastOffset: -1, LastTimestamp: e.lastSeen,
			CoordinatorEpoch: e.coordinatorEpoch(), CurrentTxnStartOffset: e.currentTxnFirst()}
		if len(e.batches) > 0 {
			last := e.batches[len(e.batches)-1]
			info.LastSequence, info.LastOffset = last.lastSeq, last.lastOffset
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// producerHolder is a partition's producer state, loaded on first use.
type producerHolder struct {
	mu sync.Mutex
	st *producerState
}

func (p *Partition) producerHolder() *producerHolder { return &p.producers }

// producerState returns the partition's producer state, loading it the
// first time.
func (p *Partition) producerState() (*producerState, error) {
	h := p.producerHolder()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st != nil {
		return h.st, nil
	}
	st, err := loadProducerState(p.log, p.dir, p.producerExpiration, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %s-%d: %w", ErrProducerState, p.topic, p.id, err)
	}
	st.wake = p.wakeFetches
	h.st = st
	return st, nil
}

// producerBatch is what a partition remembers of one batch of a producer.
type producerBatch struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is one producer id's state.
type producerEntry struct {
	// lock is held by one append of this producer at a time, from the
	// check to the update of the state.
	lock sync.Mutex

	// Guarded by producerState.mu.
	refs     int             // appends holding or waiting for lock
	epoch    int16           // latest epoch
	batches  []producerBatch // the latest, oldest first; empty: no data batch known
	lastSeen int64           // Unix ms of the last append (replayed: the batch's max timestamp)

	marked     bool  // a transaction marker of this producer was appended
	coordEpoch int32 // coordinator epoch of its last marker, when marked
	inTxn      bool  // it has an open transaction here
	txnFirst   int64 // first offset of its open transaction, when inTxn
}

func newProducerEntry() *producerEntry { return &producerEntry{epoch: -1} }

// empty reports an entry that knows nothing worth keeping: no batch, no
// marker.
func (e *producerEntry) empty() bool { return len(e.batches) == 0 && !e.marked && !e.inTxn }

// coordinatorEpoch is the coordinator epoch of the last marker, -1 if none.
func (e *producerEntry) coordinatorEpoch() int32 {
	if e.marked {
		return e.coordEpoch
	}
	return -1
}

// currentTxnFirst is the first offset of the open transaction, -1 if none.
func (e *producerEntry) currentTxnFirst() int64 {
	if e.inTxn {
		return e.txnFirst
	}
	return -1
}

// expired reports whether a producer is to be forgotten: idle since before
// cutoff (Unix ms), or every batch it wrote is below the log start. One
// with an open transaction never is.
func (e *producerEntry) expired(cutoff, start int64) bool {
	if e.inTxn {
		return false
	}
	if e.lastSeen < cutoff {
		return true
	}
	return len(e.batches) > 0 && e.batches[len(e.batches)-1].lastOffset < start
}

// add remembers a batch; a new epoch forgets the old epoch's batches.
func (e *producerEntry) add(epoch int16, pb producerBatch, seen int64) {
	if epoch != e.epoch {
		e.epoch = epoch
		e.batches = e.batches[:0]
	}
	if len(e.batches) == producerWindow {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:producerWindow-1]
	}
	e.batches = append(e.batches, pb)
	e.lastSeen = max(e.lastSeen, seen)
}

// check decides what to do with a batch of this producer: append it (nil
// error), answer it as a duplicate of a remembered batch, or refuse it.
func (e *producerEntry) check(epoch int16, first, last int32) (dup *producerBatch, err error) {
	if first < 0 {
		// No sequence: a transactional batch a transaction coordinator
		// wrote (TxnOffsetCommit), as Kafka's appends from the
		// coordinator: only the epoch is checked, and it is never a
		// duplicate.
		if (len(e.batches) > 0 || e.marked) && epoch < e.epoch {
			return nil, fmt.Errorf("%w: epoch %d, latest %d", ErrInvalidProducerEpoch, epoch, e.epoch)
		}
		return nil, nil
	}
	if len(e.batches) == 0 {
		if e.marked && epoch < e.epoch {
			return nil, fmt.Errorf("%w: epoch %d, latest %d", ErrInvalidProducerEpoch, epoch, e.epoch)
		}
		if first != 0 {
			return nil, fmt.Errorf("%w: first sequence %d", ErrUnknownProducerID, first)
		}
		return nil, nil
	}
	switch {
	case epoch < e.epoch:
		return nil, fmt.Errorf("%w: epoch %d, latest %d", ErrInvalidProducerEpoch, epoch, e.epoch)
	case epoch > e.epoch:
		if first != 0 {
			return nil, fmt.Errorf("%w: new epoch %d starts at sequence %d, not 0", ErrOutOfOrderSequence, epoch, first)
		}
		return nil, nil
	}
	for i := range e.batches {
		if e.batches[i].firstSeq == first && e.batches[i].lastSeq == last {
			return &e.batches[i], nil
		}
	}
	if want := nextSequence(e.batches[len(e.batches)-1].lastSeq); first != want {
		return nil, fmt.Errorf("%w: epoch %d, sequence %d, expected %d", ErrOutOfOrderSequence, epoch, first, want)
	}
	return nil, nil
}

// nextSequence is the sequence after seq: sequences wrap from MaxInt32 to 0.
func nextSequence(seq int32) int32 {
	if seq == math.MaxInt32 {
		return 0
	}
	return seq + 1
}

// lastSequence is the sequence of a batch's last record (Kafka's
// DefaultRecordBatch.incrementSequence).
func lastSequence(first, delta int32) int32 {
	if first > math.MaxInt32-delta {
		return delta - (math.MaxInt32 - first) - 1
	}
	return first + delta
}

// firstSequence undoes lastSequence (Kafka's decrementSequence).
func firstSequence(last, delta int32) int32 {
	if last < delta {
		return math.MaxInt32 - (delta - last) + 1
	}
	return last - delta
}

// producerState is one partition's idempotent-producer state.
type producerState struct {
	log        *log.Log
	dir        string
	expiration time.Duration
	now        func() time.Time

	mu           sync.Mutex
	producers    map[int64]*producerEntry
	inflight     int       // appends between their check and their update
	changed      bool      // since the last snapshot
	segments     int       // the log's segment count at the last snapshot
	lastSnapshot time.Time // or the load
	lastExpiry   time.Time

	// Transactions (txn.go), guarded by mu.
	open  map[int64]*producerEntry // producers with an open transaction
	done  []doneTxn                // ended, marker not yet below the high watermark
	txns  atomic.Int64             // len(open) + len(done), read without mu
	index abortedTxnIndex          // nil: aborted transactions are not indexed
	wake  func()                   // wakes fetches waiting for the LSO to move; nil: none

	// markerMu orders markers: held from a marker's append to its index
	// entry, so that entries are written in marker order.
	markerMu sync.Mutex

	snapMu sync.Mutex // one snapshot written at a time, in offset order
}

// append checks and appends a batch that carries a producer id: a data
// batch, or a transaction marker.
func (st *producerState) append(b record.Batch) (int64, bool, error) {
	pid, epoch, first := b.ProducerID(), b.ProducerEpoch(), b.BaseSequence()
	last := lastSequence(first, b.LastOffsetDelta())
	var marker record.ControlRecord
	if b.IsControl() {
		cr, err := record.ParseControlBatch(b)
		if err != nil {
			return 0, false, err
		}
		marker = cr
	}

	st.mu.Lock()
	st.expireLocked()
	e := st.producers[pid]
	if e == nil {
		e = newProducerEntry()
		st.producers[pid] = e
	}
	e.refs++
	st.mu.Unlock()

	e.lock.Lock()
	defer func() {
		e.lock.Unlock()
		st.mu.Lock()
		e.refs--
		if e.refs == 0 && e.empty() {
			delete(st.producers, pid) // a producer id that never got a batch in
		}
		st.mu.Unlock()
	}()

	st.mu.Lock()
	var dup *producerBatch
	var err error
	if b.IsControl() {
		err = e.checkMarker(epoch, marker)
	} else if dup, err = e.check(epoch, first, last); err == nil && dup == nil {
		err = e.checkTxn(epoch, b.IsTransactional())
	}
	if dup != nil {
		off := dup.firstOffset
		st.mu.Unlock()
		return off, true, nil
	}
	if err != nil {
		st.mu.Unlock()
		return 0, false, err
	}
	// A transaction's first batch pins the last stable offset before it
	// is written, at the log end it cannot land below: a read_committed
	// reader must never see it as committed, even between the write and
	// the update below. Fixed to the batch's base offset once written.
	provisional := b.IsTransactional() && !b.IsControl() && !e.inTxn
	if provisional {
		st.openTxnLocked(pid, e, st.log.EndOffset())
	}
	st.inflight++
	st.mu.Unlock()

	if b.IsControl() {
		st.markerMu.Lock()
	}
	base, err := st.log.AppendBatch(b)
	if err == nil && b.IsControl() {
		// The marker is in the log; its transaction stays open (the last
		// stable offset stays below it) until the aborted-transaction
		// index has its entry, so no reader sees an aborted
		// transaction's data without it.
		err = st.endTxn(pid, e, epoch, marker, base, st.now().UnixMilli())
	}
	if b.IsControl() {
		st.markerMu.Unlock()
	}

	st.mu.Lock()
	st.inflight--
	switch {
	case err != nil:
		if provisional {
			st.closeTxnLocked(pid, e, -1)
		}
	case !b.IsControl():
		e.add(epoch, producerBatch{firstSeq: first, lastSeq: last, firstOffset: base, lastOffset: base + int64(b.LastOffsetDelta())},
			st.now().UnixMilli())
		if provisional {
			st.openTxnLocked(pid, e, base)
		}
		st.changed = true
	}
	st.mu.Unlock()
	st.maybeSnapshot()
	return base, false, err
}

// maybeSnapshot writes a snapshot when one is due: the log rolled, or
// snapshotInterval passed, since the last.
func (st *producerState) maybeSnapshot() {
	st.mu.Lock()
	due := st.changed && st.inflight == 0 &&
		(st.log.NumSegments() != st.segments || st.now().Sub(st.lastSnapshot) >= snapshotInterval)
	st.mu.Unlock()
	if due {
		// A failed snapshot costs only a longer replay at the next load;
		// the append itself succeeded.
		_ = st.snapshot(false)
	}
}

// expireLocked forgets producers idle longer than the expiration and those
// whose batches retention has removed, at most every expiryInterval. Called
// with mu held.
func (st *producerState) expireLocked() {
	now := st.now()
	if now.Sub(st.lastExpiry) < expiryInterval {
		return
	}
	st.lastExpiry = now
	cutoff := now.Add(-st.expiration).UnixMilli()
	start := st.log.StartOffset()
	for pid, e := range st.producers {
		if e.refs > 0 || e.empty() {
			continue
		}
		if e.expired(cutoff, start) {
			delete(st.producers, pid)
			st.changed = true
		}
	}
}

// snapshot writes the state to <end offset>.snapshot and removes all but
// the latest snapshotsKept. Unless force is set it gives up when another
// snapshot is being written. It writes nothing while an append is between
// its check and its update: the state would not match the log end then.
func (st *producerState) snapshot(force bool) error {
	if force {
		st.snapMu.Lock()
	} else if !st.snapMu.TryLock() {
		return nil
	}
	defer st.snapMu.Unlock()
	st.mu.Lock()
	if st.inflight > 0 || !st.changed {
		st.mu.Unlock()
		return nil
	}
	offset := st.log.EndOffset()
	data := encodeProducerSnapshot(st.producers)
	st.changed = false
	st.segments = st.log.NumSegments()
	st.lastSnapshot = st.now()
	st.mu.Unlock()

	err := vfs.WriteFileAtomic(vfs.Default, filepath.Join(st.dir, snapshotName(offset)), data)
	if err == nil {
		err = pruneSnapshots(st.dir, snapshotsKept)
	}
	if err != nil {
		st.mu.Lock()
		st.changed = true // try again later
		st.mu.Unlock()
		return fmt.Errorf("partition: producer snapshot in %s: %w", st.dir, err)
	}
	return nil
}

// loadProducerState loads the state from the newest usable snapshot and
// the log batches after it - or, with fromStart, from the whole log,
// ignoring the snapshots. The aborted-transaction index entries for
// markers in what is replayed are written again: an index entry the
// replay finds missing (a crash between a marker and its entry) is
// restored, and with fromStart every index is rebuilt.
func loadProducerState(l *log.Log, dir string, expiration time.Duration, fromStart bool) (*producerState, error) {
	if expiration <= 0 {
		expiration = DefaultProducerIDExpiration
	}
	st := &producerState{log: l, dir: dir, expiration: expiration, now: time.Now, producers: map[int64]*producerEntry{}, open: map[int64]*producerEntry{}}
	st.lastSnapshot = st.now()
	st.lastExpiry = st.lastSnapshot
	st.segments = l.NumSegments()
	st.index = logTxnIndex{l}
	from := int64(0)
	offsets, err := listSnapshots(dir)
	if err != nil {
		return nil, err
	}
	if fromStart {
		offsets = nil
	}
	end := l.EndOffset()
	for i := len(offsets) - 1; i >= 0; i-- {
		path := filepath.Join(dir, snapshotName(offsets[i]))
		if offsets[i] <= end {
			data, err := vfs.ReadFile(vfs.Default, path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			if err == nil {
				if err = decodeProducerSnapshot(data, st.producers); err == nil {
					from = offsets[i]
					break
				}
				clear(st.producers)
			}
		}
		// Newer than the log (a crash took the data it describes away) or
		// damaged: never to be trusted again.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	for pid, e := range st.producers {
		if e.inTxn {
			st.open[pid] = e
		}
	}
	st.publishTxnsLocked()
	from = max(from, l.StartOffset())
	if err := l.TruncateAbortedTxns(from); err != nil {
		return nil, err
	}
	if err := st.replay(from); err != nil {
		return nil, err
	}
	st.changed = from != end
	return st, nil
}

// replay applies the producer batches from offset to the committed end,
// without the checks of append: they passed them when they were written.
func (st *producerState) replay(offset int64) error {
	var buf []byte
	for offset < st.log.CommittedOffset() {
		out, err := st.log.ReadInto(buf[:0], offset, 1<<20)
		if err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		buf = out
		for len(out) > 0 {
			b, n, err := record.ParseBatch(out)
			if err != nil {
				return err
			}
			out = out[n:]
			if b.BaseOffset() < offset {
				continue // before the snapshot: already in it
			}
			offset = b.NextOffset()
			seen := b.MaxTimestamp()
			if seen < 0 {
				seen = st.now().UnixMilli() // no timestamp: count from the load
			}
			if err := st.apply(b, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeProducerSnapshot lays the state out in Kafka's ProducerSnapshot
// format, one entry per remembered batch, oldest first, producers in id
// order.
func encodeProducerSnapshot(producers map[int64]*producerEntry) []byte {
	n := 0
	pids := make([]int64, 0, len(producers))
	for pid, e := range producers {
		switch {
		case len(e.batches) > 0:
			pids = append(pids, pid)
			n += len(e.batches)
		case e.marked:
			pids = append(pids, pid) // known by its marker: one epoch-only entry
			n++
		}
	}
	slices.Sort(pids)
	out := make([]byte, snapshotHeader, snapshotHeader+n*snapshotEntrySize)
	binary.BigEndian.PutUint16(out, snapshotVersion)
	binary.BigEndian.PutUint32(out[6:], uint32(n))
	entry := func(pid int64, e *producerEntry, lastSeq int32, lastOffset int64, delta int32) {
		out = binary.BigEndian.AppendUint64(out, uint64(pid))
		out = binary.BigEndian.AppendUint16(out, uint16(e.epoch))
		out = binary.BigEndian.AppendUint32(out, uint32(lastSeq))
		out = binary.BigEndian.AppendUint64(out, uint64(lastOffset))
		out = binary.BigEndian.AppendUint32(out, uint32(delta))
		out = binary.BigEndian.AppendUint64(out, uint64(e.lastSeen))
		out = binary.BigEndian.AppendUint32(out, uint32(e.coordinatorEpoch()))
		out = binary.BigEndian.AppendUint64(out, uint64(e.currentTxnFirst()))
	}
	for _, pid := range pids {
		e := producers[pid]
		if len(e.batches) == 0 {
			entry(pid, e, -1, -1, 0)
			continue
		}
		for _, pb := range e.batches {
			entry(pid, e, pb.lastSeq, pb.lastOffset, int32(pb.lastOffset-pb.firstOffset))
		}
	}
	binary.BigEndian.PutUint32(out[2:], crc32.Checksum(out[6:], castagnoli))
	return out
}

// VerifyProducerSnapshot checks the contents of a producer snapshot file
// (<offset>.snapshot) as loading it does, without loading it (tools use
// it): any deviation from the layout is ErrBadProducerSnapshot. A damaged
// snapshot is never an error for the partition: it is deleted, and the
// state is rebuilt from an older one and the log.
func VerifyProducerSnapshot(data []byte) error {
	return decodeProducerSnapshot(data, map[int64]*producerEntry{})
}

// decodeProducerSnapshot reads a snapshot into producers. Any deviation
// from the layout is ErrBadProducerSnapshot.
func decodeProducerSnapshot(data []byte, producers map[int64]*producerEntry) error {
	if len(data) < snapshotHeader {
		return fmt.Errorf("%w: %d bytes", ErrBadProducerSnapshot, len(data))
	}
	if v := int16(binary.BigEndian.Uint16(data)); v != snapshotVersion {
		return fmt.Errorf("%w: version %d", ErrBadProducerSnapshot, v)
	}
	if crc, want := crc32.Checksum(data[6:], castagnoli), binary.BigEndian.Uint32(data[2:]); crc != want {
		return fmt.Errorf("%w: crc %08x, stored %08x", ErrBadProducerSnapshot, crc, want)
	}
	n := int64(int32(binary.BigEndian.Uint32(data[6:])))
	if n < 0 || int64(len(data)-snapshotHeader) != n*snapshotEntrySize {
		return fmt.Errorf("%w: %d entries in %d bytes", ErrBadProducerSnapshot, n, len(data))
	}
	for p := data[snapshotHeader:]; len(p) > 0; p = p[snapshotEntrySize:] {
		pid := int64(binary.BigEndian.Uint64(p))
		epoch := int16(binary.BigEndian.Uint16(p[8:]))
		lastSeq := int32(binary.BigEndian.Uint32(p[10:]))
		lastOffset := int64(binary.BigEndian.Uint64(p[14:]))
		delta := int32(binary.BigEndian.Uint32(p[22:]))
		seen := int64(binary.BigEndian.Uint64(p[26:]))
		coordEpoch := int32(binary.BigEndian.Uint32(p[34:]))
		txnFirst := int64(binary.BigEndian.Uint64(p[38:]))
		if pid < 0 || coordEpoch < -1 || txnFirst < -1 || epoch < 0 && (coordEpoch >= 0 || txnFirst >= 0) {
			return fmt.Errorf("%w: entry for producer %d: epoch %d, coordinator epoch %d, transaction at %d",
				ErrBadProducerSnapshot, pid, epoch, coordEpoch, txnFirst)
		}
		epochOnly := lastOffset == -1
		if !epochOnly && (lastOffset < 0 || lastSeq < 0 || delta < 0 || lastOffset < int64(delta) || txnFirst > lastOffset) {
			return fmt.Errorf("%w: entry for producer %d: sequence %d, offset %d, delta %d, transaction at %d",
				ErrBadProducerSnapshot, pid, lastSeq, lastOffset, delta, txnFirst)
		}
		if epochOnly && txnFirst >= 0 {
			// An open transaction has data here: its batches are
			// remembered, so an epoch-only entry cannot carry one.
			return fmt.Errorf("%w: epoch-only entry for producer %d with a transaction at %d", ErrBadProducerSnapshot, pid, txnFirst)
		}
		e := producers[pid]
		if e == nil {
			e = newProducerEntry()
			producers[pid] = e
		}
		if epochOnly {
			// Kafka writes one for a producer known only by its epoch
			// (a marker, or data all gone): keep the epochs for fencing.
			if epoch < 0 {
				continue
			}
			e.epoch, e.marked, e.lastSeen = epoch, true, max(e.lastSeen, seen)
			e.batches = e.batches[:0]
		} else {
			e.add(epoch, producerBatch{
				firstSeq: firstSequence(lastSeq, delta), lastSeq: lastSeq,
				firstOffset: lastOffset - int64(delta), lastOffset: lastOffset,
			}, seen)
		}
		// The last entry of a producer wins, as in Kafka's reader.
		e.coordEpoch, e.txnFirst, e.inTxn = coordEpoch, txnFirst, txnFirst >= 0
		if coordEpoch >= 0 {
			e.marked = true
		}
	}
	return nil
}

func snapshotName(offset int64) string { return fmt.Sprintf("%020d%s", offset, SnapshotSuffix) }

// listSnapshots returns the offsets of the snapshot files in dir, sorted.
func listSnapshots(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var offsets []int64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), SnapshotSuffix)
		if !ok || len(name) != 20 || e.IsDir() {
			continue
		}
		if off, err := strconv.ParseInt(name, 10, 64); err == nil && off >= 0 {
			offsets = append(offsets, off)
		}
	}
	slices.Sort(offsets)
	return offsets, nil
}

// pruneSnapshots removes all but the newest keep snapshots.
func pruneSnapshots(dir string, keep int) error {
	offsets, err := listSnapshots(dir)
	if err != nil || len(offsets) <= keep {
		return err
	}
	for _, off := range offsets[:len(offsets)-keep] {
		if err := os.Remove(filepath.Join(dir, snapshotName(off))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
