package group

import (
	"maps"
	"slices"
	"time"
)

// Transactional offset commits (KIP-98, KIP-447): a TxnOffsetCommit stores
// a group's offsets in the offsets partition as part of a producer's
// transaction. They stay pending - invisible to FetchOffsets - until the
// transaction's marker lands on that offsets partition: a COMMIT makes
// them the group's committed offsets, an ABORT drops them. Until then a
// fetch that asks for stable offsets is told to retry
// (ErrUnstableOffsetCommit).
//
// A pending offset becomes the committed one only if its record lies
// after the record of the offset committed now: an offset committed
// outside the transaction after the transaction wrote its own (or
// another transaction's, committed first) wins, as the log order says
// and as compaction of the offsets partition would keep it. The group
// orders its records by position: the record's offset in the offsets
// partition when loaded (Restore), and a counter continuing from there
// for what this coordinator stores.

// TxnCommitRequest is a TxnOffsetCommit request: a CommitRequest made
// inside the transaction of ProducerID at ProducerEpoch. Generation -1
// with no member id (clients before KIP-447: sarama, kafkajs) skips the
// member checks in any group state; otherwise the member and generation
// are checked as for a commit (KIP-447 zombie fencing).
type TxnCommitRequest struct {
	CommitRequest
	ProducerID    int64
	ProducerEpoch int16
}

// TxnOffsetStore is what an OffsetStore implements to store transactional
// commits: the records are written in the producer's transaction (a
// transactional batch with its producer id and epoch), durable before the
// method returns.
type TxnOffsetStore interface {
	StoreTxnOffsets(group string, producerID int64, producerEpoch int16, commits []StoredOffset) error
}

// Positioned is an offset with the position of its record in the offsets
// partition (the record's offset), for Restore.
type Positioned struct {
	OffsetAndMetadata
	Position int64
}

// pendingOffset is a transactional offset awaiting its transaction's end.
type pendingOffset struct {
	OffsetAndMetadata
	pos int64
}

// txnState is a group's part of transactions: where its committed offsets
// were written, and its pending transactional offsets by producer id.
type txnState struct {
	pos     int64                                      // the position of the last record stored
	written map[TopicPartition]int64                   // committed offsets' positions
	pending map[int64]map[TopicPartition]pendingOffset // by producer id
}

func (t *txnState) init() {
	if t.written == nil {
		t.written = make(map[TopicPartition]int64)
		t.pending = make(map[int64]map[TopicPartition]pendingOffset)
	}
}

// validateTxnCommit decides whether a TxnOffsetCommit may proceed (Kafka's
// validateOffsetCommit with isTransactional).
func (g *classicGroup) validateTxnCommit(now time.Time, req TxnCommitRequest) error {
	if g.state == Dead {
		return ErrUnknownMemberID
	}
	if req.Generation < 0 && req.MemberID == "" && req.GroupInstanceID == "" {
		return nil
	}
	if err := g.validateMember(req.MemberID, req.GroupInstanceID); err != nil {
		return err
	}
	if req.Generation != g.generation {
		return ErrIllegalGeneration
	}
	if m := g.members[req.MemberID]; m != nil && (g.state == Stable || g.state == PreparingRebalance) {
		m.expires = now.Add(m.session)
	}
	return nil
}

// TxnCommitOffsets handles a TxnOffsetCommit: after the checks of
// CommitOffsets (see TxnCommitRequest for the member checks), it stores
// the offsets in the producer's transaction through the Store's
// TxnOffsetStore and keeps them pending until CompleteTxn. The error and
// the map are as CommitOffsets's. A coordinator without a TxnOffsetStore
// keeps the pending offsets in memory only.
func (c *Coordinator) TxnCommitOffsets(req TxnCommitRequest) (map[TopicPartition]error, error) {
	if c.closed.Load() {
		return nil, wrap(req.Group, "commit transactional offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(req.Group); err != nil {
		return nil, wrap(req.Group, "commit transactional offsets", err)
	}
	e := c.lockGroup(req.Group, req.Generation < 0)
	if e == nil {
		return nil, wrap(req.Group, "commit transactional offsets", ErrIllegalGeneration)
	}
	defer c.unlock(e)
	now := c.opts.Now()
	if err := e.validateCommit(now, req.MemberID, req.Generation, req.Offsets, func() error { return e.g.validateTxnCommit(now, req) }); err != nil {
		return nil, wrap(req.Group, "commit transactional offsets", err)
	}
	records, results := e.g.checkCommitOffsets(now, req.Offsets)
	if len(records) == 0 {
		return results, nil
	}
	if ts, ok := c.opts.Store.(TxnOffsetStore); ok {
		if err := ts.StoreTxnOffsets(e.g.id, req.ProducerID, req.ProducerEpoch, records); err != nil {
			return nil, wrap(req.Group, "commit transactional offsets", err)
		}
	}
	t := &e.g.txn
	t.init()
	p := t.pending[req.ProducerID]
	if p == nil {
		p = make(map[TopicPartition]pendingOffset)
		t.pending[req.ProducerID] = p
	}
	for _, r := range records {
		t.pos++
		p[r.TopicPartition] = pendingOffset{OffsetAndMetadata: r.OffsetAndMetadata, pos: t.pos}
	}
	return results, nil
}

// CompleteTxn applies the end of producerID's transaction to the groups
// owns reports true of - those of the offsets partition its marker landed
// on: with commit, each pending offset that lies after the group's
// committed one becomes the committed offset; either way the pending
// offsets are gone. The marker is already durable: nothing is stored. It
// returns how many groups had pending offsets of the producer.
func (c *Coordinator) CompleteTxn(producerID int64, commit bool, owns func(group string) bool) int {
	n := 0
	for _, e := range c.entries() {
		if !owns(e.g.id) {
			continue
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		if e.g.completeTxn(producerID, commit) {
			n++
		}
		c.unlock(e)
	}
	return n
}

func (g *classicGroup) completeTxn(producerID int64, commit bool) bool {
	t := &g.txn
	p, ok := t.pending[producerID]
	if !ok {
		return false
	}
	delete(t.pending, producerID)
	if commit {
		for tp, o := range p {
			if _, has := g.offsets[tp]; has && t.written[tp] > o.pos {
				continue
			}
			g.offsets[tp] = o.OffsetAndMetadata
			t.written[tp] = o.pos
		}
	}
	return true
}

// UnstableOffsets lists the partitions among tps (all of the group's if
// tps is nil) for which the group has transactional offsets awaiting
// their transaction's end: an OffsetFetch that requires stable offsets
// answers them with ErrUnstableOffsetCommit.
func (c *Coordinator) UnstableOffsets(group string, tps []TopicPartition) ([]TopicPartition, error) {
	if c.closed.Load() {
		return nil, wrap(group, "fetch offsets", ErrCoordinatorClosed)
	}
	if err := c.owns(group); err != nil {
		return nil, wrap(group, "fetch offsets", err)
	}
	e := c.lockGroup(group, false)
	if e == nil {
		return nil, nil
	}
	defer c.unlock(e)
	pendingAt := map[TopicPartition]bool{}
	for _, p := range e.g.txn.pending {
		for tp := range p {
			pendingAt[tp] = true
		}
	}
	var out []TopicPartition
	if tps == nil {
		tps = slices.SortedFunc(maps.Keys(pendingAt), compareTP)
	}
	for _, tp := range tps {
		if pendingAt[tp] {
			out = append(out, tp)
		}
	}
	return out, nil
}

// PendingTxns lists the producer ids with transactional offsets pending in
// the group, sorted.
func (c *Coordinator) PendingTxns(group string) []int64 {
	e := c.lockGroup(group, false)
	if e == nil {
		return nil
	}
	defer c.unlock(e)
	return slices.Sorted(maps.Keys(e.g.txn.pending))
}

// Restore loads a group from the Store as a replay of its offsets
// partition left it: its committed offsets and the transactional offsets
// of transactions not yet ended, each with its record's position. It
// creates the group (Empty) if needed and writes nothing.
func (c *Coordinator) Restore(group string, committed map[TopicPartition]Positioned, pending map[int64]map[TopicPartition]Positioned) {
	e := c.lockGroup(group, true)
	defer c.unlock(e)
	g := e.g
	t := &g.txn
	t.init()
	for tp, o := range committed {
		g.offsets[tp] = o.OffsetAndMetadata
		t.written[tp] = o.Position
		t.pos = max(t.pos, o.Position)
	}
	for pid, offs := range pending {
		p := t.pending[pid]
		if p == nil {
			p = make(map[TopicPartition]pendingOffset)
			t.pending[pid] = p
		}
		for tp, o := range offs {
			p[tp] = pendingOffset{OffsetAndMetadata: o.OffsetAndMetadata, pos: o.Position}
			t.pos = max(t.pos, o.Position)
		}
	}
}
