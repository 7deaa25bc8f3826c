package spool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/txn"
)

// The idempotent and transactional Producer (KIP-98), in process.
//
// An idempotent producer stamps each batch, as it is sent, with its
// producer id, epoch and the partition's next sequence number; the
// partition's producer state (package partition) writes a batch sent twice
// once and refuses one out of order. Sequences are assigned by the one
// goroutine that sends a partition's batches, in order, so a batch that
// is never sent leaves no gap - only a batch that fails after it was
// stamped does, and then the producer moves on: to a new producer id
// outside a transaction, to a failed (abortable) transaction inside one,
// whose abort bumps the epoch (KIP-360) so that sequences start again.
//
// A transactional producer talks to the broker's transaction coordinator
// (package txn) directly, as a Kafka client does over the network:
// InitProducerId when it is made, AddPartitionsToTxn when a transaction's
// first batch for a partition is about to be sent, AddOffsetsToTxn and
// TxnOffsetCommit for SendOffsetsToTransaction, EndTxn to commit or abort.
// CommitTransaction and AbortTransaction return once the coordinator has
// written every marker, so that what was committed is readable
// read_committed when they return.

// DefaultTransactionTimeout is ProducerConfig.TransactionTimeout's default
// (Kafka's transaction.timeout.ms).
const DefaultTransactionTimeout = 60 * time.Second

// Transaction errors of a Producer.
var (
	// ErrNotTransactional means a transaction method of a producer
	// without a TransactionalID.
	ErrNotTransactional = errors.New("spool: producer has no TransactionalID")
	// ErrTransactionState means a call the transaction's state does not
	// allow: Produce or CommitTransaction outside a transaction,
	// BeginTransaction inside one.
	ErrTransactionState = errors.New("spool: not allowed in the producer's transaction state")
	// ErrTransactionAbortable means the transaction failed (a batch or
	// an offset commit of it did) and can only be aborted: AbortTransaction,
	// then try again in a new transaction.
	ErrTransactionAbortable = errors.New("spool: the transaction failed and must be aborted")
	// ErrProducerFenced means another producer with the same
	// TransactionalID has started (or the coordinator aborted this one's
	// transaction at its timeout, which fences it too). It is final:
	// Close the producer; a new one may take over.
	ErrProducerFenced = errors.New("spool: producer fenced by a newer instance of its transactional id")
)

// txnState is where a transactional producer is.
type txnState int8

const (
	txnReady      txnState = iota // no transaction open
	txnOngoing                    // BeginTransaction was called
	txnCommitting                 // CommitTransaction is running (or failed midway)
	txnAborting                   // AbortTransaction is running (or failed midway)
	txnAbortable                  // the transaction failed: only AbortTransaction
	txnFatal                      // fenced: nothing more
)

var txnStateNames = [...]string{"ready", "in a transaction", "committing", "aborting", "failed (abort it)", "fenced"}

func (s txnState) String() string { return txnStateNames[s] }

// txnStatus is a transactional producer's transaction, guarded by the
// producer's mu.
type txnStatus struct {
	state txnState
	gen   uint64 // the transaction's number, from 1; partitions added in it remember it
	err   error  // why the transaction failed (abortable) or the producer is fenced
	added bool   // something was added at the coordinator in this transaction
	bump  bool   // a sequence was lost: the epoch is bumped after the abort
}

// GroupMetadata is what a transactional producer needs of a consumer
// group member to commit its offsets inside a transaction
// (Kafka's ConsumerGroupMetadata): the coordinator refuses the commit of a
// member that a rebalance has replaced (KIP-447), so that a zombie cannot
// commit offsets for partitions that moved on.
type GroupMetadata struct {
	GroupID    string
	MemberID   string
	InstanceID string
	Generation int32
}

// initIdentity gives an idempotent producer its producer id: from the
// transaction coordinator for a transactional one (fencing earlier
// instances), otherwise a fresh one from the broker.
func (p *Producer) initIdentity() error {
	if !p.cfg.Idempotent {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.MaxBlock)
	defer cancel()
	if p.cfg.TransactionalID == "" {
		pid, err := p.b.AllocateProducerID(ctx)
		if err != nil {
			return fmt.Errorf("spool: producer id for an idempotent producer: %w", err)
		}
		p.pid, p.epoch = pid, 0
		return nil
	}
	coord, err := p.b.TransactionCoordinator(ctx, p.cfg.TransactionalID)
	if err != nil {
		return fmt.Errorf("spool: transaction coordinator of %q: %w", p.cfg.TransactionalID, err)
	}
	if coord != p.b.opts.NodeID {
		return fmt.Errorf("spool: transactional id %q is coordinated by broker %d, in another process; the in-process producer needs its coordinator here: %w",
			p.cfg.TransactionalID, coord, errors.ErrUnsupported)
	}
	pid, epoch, err := p.txnCall(ctx, func() (int64, int16, error) {
		return p.b.txc.InitProducerID(ctx, p.cfg.TransactionalID, p.cfg.TransactionTimeout, -1, -1)
	})
	if err != nil {
		return fmt.Errorf("spool: init transactional producer %q: %w", p.cfg.TransactionalID, err)
	}
	p.pid, p.epoch = pid, epoch
	return nil
}

// txnCall calls the coordinator until it answers with something other than
// "busy, ask again" (a transaction being completed, a partition being
// loaded), with a short backoff, until ctx ends. Fencing comes back as
// ErrProducerFenced.
func (p *Producer) txnCall(ctx context.Context, call func() (int64, int16, error)) (int64, int16, error) {
	backoff := time.Millisecond
	for {
		pid, epoch, err := call()
		switch {
		case err == nil:
			return pid, epoch, nil
		case errors.Is(err, txn.ErrProducerFenced), errors.Is(err, txn.ErrInvalidProducerEpoch), errors.Is(err, txn.ErrInvalidProducerIDMapping):
			return -1, -1, fmt.Errorf("%w: %w", ErrProducerFenced, err)
		case !errors.Is(err, txn.ErrConcurrentTransactions) && !errors.Is(err, txn.ErrCoordinatorLoadInProgress) &&
			!errors.Is(err, txn.ErrCoordinatorNotAvailable):
			return -1, -1, err
		}
		if serr := sleepCtx(ctx, backoff); serr != nil {
			return -1, -1, fmt.Errorf("%w (last error: %w)", serr, err)
		}
		backoff = min(2*backoff, p.cfg.RetryBackoff)
	}
}

// txnAccepts reports whether Produce may add a record now: always for a
// producer without a TransactionalID, only inside a transaction for one
// with. Called with mu held.
func (p *Producer) txnAccepts() error {
	if p.cfg.TransactionalID == "" {
		return nil
	}
	switch p.tx.state {
	case txnOngoing:
		return nil
	case txnAbortable:
		return fmt.Errorf("%w: %w", ErrTransactionAbortable, p.tx.err)
	case txnFatal:
		return p.tx.err
	}
	return fmt.Errorf("%w: Produce while %v (BeginTransaction first)", ErrTransactionState, p.tx.state)
}

// stamp gives an idempotent producer's batch its producer id, epoch and
// sequence just before it is built and sent, after adding the partition
// to the transaction if it is the transaction's first batch for it. Only
// the goroutine sending a's batches calls it.
func (p *Producer) stamp(a *accum, bt *batch) error {
	if !p.cfg.Idempotent {
		return nil
	}
	p.mu.Lock()
	pid, epoch, tx := p.pid, p.epoch, p.tx
	p.mu.Unlock()
	if p.cfg.TransactionalID != "" {
		switch {
		case tx.state == txnFatal:
			return tx.err
		case tx.err != nil:
			return fmt.Errorf("%w: %w", ErrTransactionAbortable, tx.err)
		case a.addedTxn != tx.gen:
			if err := p.addPartition(a, pid, epoch); err != nil {
				return err
			}
			a.addedTxn = tx.gen
		}
	}
	if a.seqPID != pid || a.seqEpoch != epoch {
		a.seqPID, a.seqEpoch, a.seq = pid, epoch, 0
	}
	bt.bld.SetProducer(&record.ProducerInfo{ID: pid, Epoch: epoch, BaseSequence: a.seq}, p.cfg.TransactionalID != "")
	bt.stamped = true
	a.seq = nextSequence(a.seq, int32(bt.bld.Len()))
	return nil
}

// nextSequence is the sequence n records after seq: sequences wrap from
// MaxInt32 to 0, as the partition expects.
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// addPartition adds a's partition to the open transaction at the
// coordinator (AddPartitionsToTxn), retrying while the coordinator is busy
// until DeliveryTimeout. A failure fails the transaction.
func (p *Producer) addPartition(a *accum, pid int64, epoch int16) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DeliveryTimeout)
	defer cancel()
	tp := txn.TopicPartition{Topic: a.topic, Partition: a.id}
	_, _, err := p.txnCall(ctx, func() (int64, int16, error) {
		res, err := p.b.txc.AddPartitions(ctx, p.cfg.TransactionalID, pid, epoch, []txn.TopicPartition{tp})
		if err == nil {
			err = res[tp] // nil when res is
		}
		return pid, epoch, err
	})
	if err != nil {
		err = fmt.Errorf("spool: adding %s to the transaction: %w", tp, err)
		p.txnFailed(err)
		return err
	}
	p.mu.Lock()
	p.tx.added = true
	p.mu.Unlock()
	return nil
}

// txnFailed records why the open transaction failed: it can only be
// aborted now, unless the producer was fenced, which is final.
func (p *Producer) txnFailed(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if errors.Is(err, ErrProducerFenced) {
		p.tx.state, p.tx.err = txnFatal, err
		return
	}
	if p.tx.err == nil {
		p.tx.err = err
	}
	if p.tx.state == txnOngoing {
		p.tx.state = txnAbortable
	}
}

// sequenceLost is called when a stamped batch of a failed for good: the
// partition may or may not have it, so its sequence is unknown. Outside a
// transaction the producer takes a new producer id (the broker hands out
// each once), so that later batches start a fresh sequence; inside one
// the transaction fails, and its abort bumps the epoch.
func (p *Producer) sequenceLost(a *accum, err error) {
	if p.cfg.TransactionalID != "" {
		p.mu.Lock()
		p.tx.bump = true
		p.mu.Unlock()
		p.txnFailed(fmt.Errorf("%s-%d: %w", a.topic, a.id, err))
		return
	}
	p.mu.Lock()
	lost := a.seqPID == p.pid && a.seqEpoch == p.epoch // not renewed already
	p.mu.Unlock()
	if !lost || p.b.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	pid, aerr := p.b.AllocateProducerID(ctx)
	if aerr != nil {
		p.b.logger.Warn("idempotent producer: no new producer id after a failed batch; the next batch may fail out of order", "err", aerr)
		return
	}
	p.mu.Lock()
	if a.seqPID == p.pid {
		p.pid, p.epoch = pid, 0
	}
	p.mu.Unlock()
}

// checkLeader refuses, for a transactional producer, a partition led in
// another process: its batches would need the transactional id with
// them, which a broker-to-broker produce does not carry.
func (p *Producer) checkLeader(l leaderHandle) error {
	if p.cfg.TransactionalID == "" {
		return nil
	}
	if r, ok := l.(*remoteLeader); ok {
		return fmt.Errorf("spool: transactional produce to %s-%d, led by broker %d in another process: %w", r.topic, r.part, r.broker, errors.ErrUnsupported)
	}
	return nil
}

// BeginTransaction opens a transaction: records produced until
// CommitTransaction or AbortTransaction belong to it. Only one is open at
// a time.
func (p *Producer) BeginTransaction() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.txnCheck("BeginTransaction", txnReady); err != nil {
		return err
	}
	p.tx = txnStatus{state: txnOngoing, gen: p.tx.gen + 1}
	return nil
}

// txnCheck checks that the producer is transactional, open, and in one of
// the states allowed. Called with mu held.
func (p *Producer) txnCheck(op string, allowed ...txnState) error {
	switch {
	case p.cfg.TransactionalID == "":
		return ErrNotTransactional
	case p.closed:
		return ErrProducerClosed
	case p.tx.state == txnFatal:
		return p.tx.err
	}
	for _, s := range allowed {
		if p.tx.state == s {
			return nil
		}
	}
	if p.tx.state == txnAbortable {
		return fmt.Errorf("%w: %s: %w", ErrTransactionAbortable, op, p.tx.err)
	}
	return fmt.Errorf("%w: %s while %v", ErrTransactionState, op, p.tx.state)
}

// CommitTransaction commits the open transaction: it flushes the
// transaction's records, then has the coordinator write COMMIT markers to
// every partition written (and to the group offsets sent), and returns
// once they are written - the records are then visible to read_committed
// consumers and the offsets to the group. If a record of the transaction
// failed the error wraps ErrTransactionAbortable: AbortTransaction, and
// try again. If ctx ends first CommitTransaction may be called again (or
// the transaction aborted, if the commit was not decided yet).
func (p *Producer) CommitTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, true)
}

// AbortTransaction aborts the open (or failed) transaction: the records
// already written stay in the log but read_committed consumers skip them,
// and offsets sent with it are dropped. It waits for the transaction's
// records in flight, then for the ABORT markers. After a failed record it
// also bumps the producer epoch (KIP-360), so that the next transaction
// starts every partition's sequence afresh.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, false)
}

func (p *Producer) endTransaction(ctx context.Context, commit bool) error {
	op, mid := "AbortTransaction", txnAborting
	allowed := []txnState{txnOngoing, txnAbortable, txnAborting, txnCommitting}
	if commit {
		op, mid = "CommitTransaction", txnCommitting
		allowed = []txnState{txnOngoing, txnCommitting}
	}
	p.mu.Lock()
	if err := p.txnCheck(op, allowed...); err != nil {
		p.mu.Unlock()
		return err
	}
	prev := p.tx.state
	p.tx.state = mid
	p.mu.Unlock()

	if err := p.flush(ctx); err != nil {
		p.mu.Lock()
		if p.tx.state == mid && prev == txnOngoing {
			p.tx.state = prev
		}
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	// The transaction's records are reported by its outcome (tx.err makes
	// a commit fail), not again by the next Flush.
	p.takeFailures()
	failed, added, pid, epoch := p.tx.err, p.tx.added, p.pid, p.epoch
	if p.tx.state == txnFatal {
		p.mu.Unlock()
		return failed
	}
	if commit && failed != nil {
		p.tx.state = txnAbortable
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrTransactionAbortable, failed)
	}
	p.mu.Unlock()

	if added {
		if err := p.endTxn(ctx, pid, epoch, commit); err != nil {
			if errors.Is(err, ErrProducerFenced) {
				p.txnFailed(err)
			}
			return err
		}
	}
	if !commit {
		if err := p.bumpAfterAbort(ctx); err != nil {
			return err
		}
	}
	p.mu.Lock()
	if p.tx.state == mid {
		p.tx = txnStatus{state: txnReady, gen: p.tx.gen}
	}
	p.mu.Unlock()
	return nil
}

// endTxn has the coordinator decide the transaction (EndTxn) and waits
// until its markers are written.
func (p *Producer) endTxn(ctx context.Context, pid int64, epoch int16, commit bool) error {
	id := p.cfg.TransactionalID
	if _, _, err := p.txnCall(ctx, func() (int64, int16, error) {
		return pid, epoch, p.b.txc.EndTxn(ctx, id, pid, epoch, commit)
	}); err != nil {
		return fmt.Errorf("spool: end transaction of %q: %w", id, err)
	}
	done := txn.CompleteAbort
	if commit {
		done = txn.CompleteCommit
	}
	backoff := 200 * time.Microsecond
	for {
		d := p.b.txc.Describe([]string{id})[0]
		switch {
		case d.Err == nil && (d.ProducerID != pid || d.ProducerEpoch != epoch):
			return fmt.Errorf("%w: %q is at producer id %d epoch %d", ErrProducerFenced, id, d.ProducerID, d.ProducerEpoch)
		case d.Err == nil && d.State == done:
			return nil
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return fmt.Errorf("spool: waiting for the markers of %q: %w", id, err)
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// bumpAfterAbort bumps the producer epoch after an aborted transaction in
// which a batch failed (KIP-360's InitProducerId with the current id and
// epoch): the sequences of the partitions start again at 0, and no batch
// of the old epoch can land any more.
func (p *Producer) bumpAfterAbort(ctx context.Context) error {
	p.mu.Lock()
	bump, pid, epoch := p.tx.bump, p.pid, p.epoch
	p.mu.Unlock()
	if !bump {
		return nil
	}
	npid, nepoch, err := p.txnCall(ctx, func() (int64, int16, error) {
		return p.b.txc.InitProducerID(ctx, p.cfg.TransactionalID, p.cfg.TransactionTimeout, pid, epoch)
	})
	if err != nil {
		if errors.Is(err, ErrProducerFenced) {
			p.txnFailed(err)
		}
		return fmt.Errorf("spool: bumping the epoch of %q after an abort: %w", p.cfg.TransactionalID, err)
	}
	p.mu.Lock()
	p.pid, p.epoch, p.tx.bump = npid, nepoch, false
	p.mu.Unlock()
	return nil
}

// SendOffsetsToTransaction commits a consumer group's offsets (the next
// offset to consume, per partition) inside the open transaction: the group
// sees them when the transaction commits, never if it aborts. This is the
// consume-transform-produce step of exactly-once processing: records read,
// their results written, and the read positions moved, all or nothing.
// md is the consuming member's (Consumer.GroupMetadata): the group refuses
// the offsets of a member a rebalance replaced, and the transaction must
// then be aborted. The group's coordinator must be this broker.
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, offsets map[TopicPartition]int64, md GroupMetadata) error {
	p.mu.Lock()
	if err := p.txnCheck("SendOffsetsToTransaction", txnOngoing); err != nil {
		p.mu.Unlock()
		return err
	}
	pid, epoch := p.pid, p.epoch
	p.mu.Unlock()
	if md.GroupID == "" {
		return fmt.Errorf("%w: SendOffsetsToTransaction needs a group id", ErrInvalidConfig)
	}
	if len(offsets) == 0 {
		return nil
	}
	id := p.cfg.TransactionalID
	if _, _, err := p.txnCall(ctx, func() (int64, int16, error) {
		return pid, epoch, p.b.txc.AddOffsets(ctx, id, pid, epoch, md.GroupID)
	}); err != nil {
		err = fmt.Errorf("spool: adding group %q's offsets to the transaction: %w", md.GroupID, err)
		p.txnFailed(err)
		return err
	}
	p.mu.Lock()
	p.tx.added = true
	p.mu.Unlock()

	req := group.TxnCommitRequest{
		CommitRequest: group.CommitRequest{
			Group: md.GroupID, MemberID: md.MemberID, GroupInstanceID: md.InstanceID, Generation: md.Generation,
			Offsets: make(map[group.TopicPartition]group.OffsetAndMetadata, len(offsets)),
		},
		ProducerID: pid, ProducerEpoch: epoch,
	}
	for tp, off := range offsets {
		if off < 0 {
			return fmt.Errorf("%w: offset %d for %s-%d", ErrInvalidConfig, off, tp.Topic, tp.Partition)
		}
		req.Offsets[tp] = group.OffsetAndMetadata{Offset: off, LeaderEpoch: -1}
	}
	perTP, err := p.b.coord.TxnCommitOffsets(req)
	if err == nil {
		var errs []error
		for tp, e := range perTP {
			if e != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", tp.Topic, tp.Partition, e))
			}
		}
		err = errors.Join(errs...)
	}
	if err != nil {
		err = fmt.Errorf("spool: transactional commit for group %q: %w", md.GroupID, err)
		p.txnFailed(err)
		return p.b.wrapClosed(err)
	}
	return nil
}
