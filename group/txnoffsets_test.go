package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// txnStore is a memStore that also takes transactional commits.
type txnStore struct {
	*memStore
	mu      sync.Mutex
	txnCall []int64 // producer ids, one per StoreTxnOffsets
	txnFail error
}

func (s *txnStore) StoreTxnOffsets(group string, pid int64, epoch int16, commits []StoredOffset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txnFail != nil {
		return s.txnFail
	}
	s.txnCall = append(s.txnCall, pid)
	return nil
}

func txnReq(group string, pid int64, offsets map[TopicPartition]int64) TxnCommitRequest {
	req := TxnCommitRequest{CommitRequest: CommitRequest{Group: group, Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{}}, ProducerID: pid}
	for tp, o := range offsets {
		req.Offsets[tp] = OffsetAndMetadata{Offset: o, LeaderEpoch: -1}
	}
	return req
}

func fetched(t *testing.T, c *Coordinator, group string, tp TopicPartition) int64 {
	t.Helper()
	got, err := c.FetchOffsets(group, []TopicPartition{tp})
	require.NoError(t, err)
	if o, ok := got[tp]; ok {
		return o.Offset
	}
	return -1
}

func all(string) bool { return true }

// Transactional offsets are invisible until the transaction commits, are
// reported unstable meanwhile, and are dropped by an abort.
func TestTxnOffsetsPendingUntilMarker(t *testing.T) {
	store := &txnStore{memStore: newMemStore()}
	c, _ := manual(t, func(o *Options) { o.Store = store })
	tp := TopicPartition{"in", 0}
	_, err := c.CommitOffsets(CommitRequest{Group: "g", Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{tp: {Offset: 5}}})
	require.NoError(t, err)

	res, err := c.TxnCommitOffsets(txnReq("g", 7, map[TopicPartition]int64{tp: 10}))
	require.NoError(t, err)
	require.NoError(t, res[tp])
	require.Equal(t, []int64{7}, store.txnCall)
	require.EqualValues(t, 5, fetched(t, c, "g", tp), "pending offsets are invisible")
	unstable, err := c.UnstableOffsets("g", []TopicPartition{tp, {"in", 1}})
	require.NoError(t, err)
	require.Equal(t, []TopicPartition{tp}, unstable)

	require.Equal(t, 0, c.CompleteTxn(8, true, all), "another producer's marker changes nothing")
	require.EqualValues(t, 5, fetched(t, c, "g", tp))
	require.Equal(t, 1, c.CompleteTxn(7, false, all))
	require.EqualValues(t, 5, fetched(t, c, "g", tp), "aborted offsets are dropped")
	unstable, _ = c.UnstableOffsets("g", nil)
	require.Empty(t, unstable)

	_, err = c.TxnCommitOffsets(txnReq("g", 7, map[TopicPartition]int64{tp: 12}))
	require.NoError(t, err)
	require.Equal(t, 0, c.CompleteTxn(7, true, func(string) bool { return false }), "a marker on another offsets partition")
	require.Equal(t, 1, c.CompleteTxn(7, true, all))
	require.EqualValues(t, 12, fetched(t, c, "g", tp))
	require.Equal(t, 0, c.CompleteTxn(7, true, all), "a marker retried changes nothing")
}

// An offset committed outside the transaction after the transaction wrote
// its own wins when the transaction commits: the log order decides.
func TestTxnOffsetsLaterCommitWins(t *testing.T) {
	c, _ := manual(t, func(o *Options) { o.Store = &txnStore{memStore: newMemStore()} })
	tp, other := TopicPartition{"in", 0}, TopicPartition{"in", 1}
	_, err := c.TxnCommitOffsets(txnReq("g", 1, map[TopicPartition]int64{tp: 10, other: 3}))
	require.NoError(t, err)
	_, err = c.CommitOffsets(CommitRequest{Group: "g", Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{tp: {Offset: 20}}})
	require.NoError(t, err)
	c.CompleteTxn(1, true, all)
	require.EqualValues(t, 20, fetched(t, c, "g", tp))
	require.EqualValues(t, 3, fetched(t, c, "g", other))

	// Two transactions on one partition: the later record wins whichever
	// commits first.
	_, err = c.TxnCommitOffsets(txnReq("g", 2, map[TopicPartition]int64{tp: 30}))
	require.NoError(t, err)
	_, err = c.TxnCommitOffsets(txnReq("g", 3, map[TopicPartition]int64{tp: 40}))
	require.NoError(t, err)
	c.CompleteTxn(3, true, all)
	c.CompleteTxn(2, true, all)
	require.EqualValues(t, 40, fetched(t, c, "g", tp))
}

// KIP-447: a member of an old generation is fenced; a commit without group
// metadata (older clients) is accepted in any state; a failed store keeps
// nothing pending.
func TestTxnOffsetsFencing(t *testing.T) {
	store := &txnStore{memStore: newMemStore()}
	c := NewCoordinator(Options{TickInterval: 5 * time.Millisecond, Store: store, InitialRebalanceDelay: time.Millisecond})
	defer c.Close()
	tp := TopicPartition{"in", 0}

	req := txnReq("g", 1, map[TopicPartition]int64{tp: 4})
	req.MemberID, req.Generation = "nobody", 3
	_, err := c.TxnCommitOffsets(req)
	require.ErrorIs(t, err, ErrIllegalGeneration, "no such group with that generation")

	m := newTestClient(c, Range(), []string{"in"}, map[string]int32{"in": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, m.join(ctx))
	req.MemberID, req.Generation = m.id, m.gen
	_, err = c.TxnCommitOffsets(req)
	require.NoError(t, err, "the member of the current generation")
	req.Generation = m.gen - 1
	_, err = c.TxnCommitOffsets(req)
	require.ErrorIs(t, err, ErrIllegalGeneration, "a zombie of the last generation")
	req.MemberID, req.Generation = "someone-else", m.gen
	_, err = c.TxnCommitOffsets(req)
	require.ErrorIs(t, err, ErrUnknownMemberID)
	_, err = c.TxnCommitOffsets(txnReq("g", 1, map[TopicPartition]int64{tp: 5}))
	require.NoError(t, err, "no group metadata (clients before KIP-447): accepted with members")
	_, err = c.CommitOffsets(CommitRequest{Group: "g", Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{tp: {Offset: 5}}})
	require.ErrorIs(t, err, ErrUnknownMemberID, "unlike a plain commit from outside the group")
	c.CompleteTxn(1, false, all)

	store.txnFail = errors.New("disk gone")
	_, err = c.TxnCommitOffsets(txnReq("g", 2, map[TopicPartition]int64{tp: 4}))
	require.ErrorContains(t, err, "disk gone")
	unstable, _ := c.UnstableOffsets("g", nil)
	require.Empty(t, unstable, "nothing pending after a failed store")
	require.Empty(t, c.PendingTxns("g"))
}

// Restore brings back a replayed partition: committed offsets with their
// positions and the pending offsets of open transactions, ordered by
// position against what is stored next.
func TestTxnOffsetsRestore(t *testing.T) {
	c, _ := manual(t, func(o *Options) { o.Store = &txnStore{memStore: newMemStore()} })
	tp, tp2 := TopicPartition{"in", 0}, TopicPartition{"in", 1}
	c.Restore("g",
		map[TopicPartition]Positioned{tp: {OffsetAndMetadata{Offset: 50}, 100}, tp2: {OffsetAndMetadata{Offset: 1}, 10}},
		map[int64]map[TopicPartition]Positioned{9: {tp: {OffsetAndMetadata{Offset: 40}, 90}, tp2: {OffsetAndMetadata{Offset: 2}, 20}}})
	require.Equal(t, []int64{9}, c.PendingTxns("g"))
	unstable, _ := c.UnstableOffsets("g", nil)
	require.Equal(t, []TopicPartition{tp, tp2}, unstable)
	c.CompleteTxn(9, true, all)
	require.EqualValues(t, 50, fetched(t, c, "g", tp), "the pending record lies before the committed one")
	require.EqualValues(t, 2, fetched(t, c, "g", tp2))

	// What is stored after a restore lies after everything restored.
	c.Restore("h", nil, map[int64]map[TopicPartition]Positioned{9: {tp: {OffsetAndMetadata{Offset: 40}, 90}}})
	_, err := c.CommitOffsets(CommitRequest{Group: "h", Generation: -1, Offsets: map[TopicPartition]OffsetAndMetadata{tp: {Offset: 60}}})
	require.NoError(t, err)
	c.CompleteTxn(9, true, all)
	require.EqualValues(t, 60, fetched(t, c, "h", tp))
}
