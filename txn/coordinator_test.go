package txn

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// A transaction's whole life, with every error the state machine answers
// on the way.
func TestStateMachine(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(c *Config) {
		c.GroupPartition = func(g string) TopicPartition { return tp(OffsetsTopic, 9) }
	})
	const id = "orders-app"
	a, b, o := tp("orders", 0), tp("orders", 1), tp(OffsetsTopic, 9)

	// Nothing before InitProducerId.
	_, err := h.c.AddPartitions(ctx, id, 1, 0, []TopicPartition{a})
	require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
	require.ErrorIs(t, h.c.EndTxn(ctx, id, 1, 0, true), ErrInvalidProducerIDMapping)
	require.ErrorIs(t, h.c.AddOffsets(ctx, id, 1, 0, "g"), ErrInvalidProducerIDMapping)
	_, err = h.c.VerifyPartitions(id, 1, 0, []TopicPartition{a})
	require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
	_, err = h.c.AddPartitions(ctx, "", 1, 0, []TopicPartition{a})
	require.ErrorIs(t, err, ErrInvalidRequest)

	pid, epoch, err := h.c.InitProducerID(ctx, id, time.Minute, -1, -1)
	require.NoError(t, err)
	require.Equal(t, Empty, h.describe(t, id).State)
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, true), ErrInvalidTxnState, "no transaction to end")
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, false), ErrInvalidTxnState)

	_, err = h.c.AddPartitions(ctx, id, pid+1, epoch, []TopicPartition{a})
	require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
	_, err = h.c.AddPartitions(ctx, id, pid, epoch+1, []TopicPartition{a})
	require.ErrorIs(t, err, ErrProducerFenced)
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch-1, true), ErrProducerFenced)

	verify, err := h.c.VerifyPartitions(id, pid, epoch, []TopicPartition{a})
	require.NoError(t, err)
	require.ErrorIs(t, verify[a], ErrTransactionAbortable, "not in a transaction yet (KIP-890)")

	h.clock.Advance(time.Second)
	errs, err := h.c.AddPartitions(ctx, id, pid, epoch, []TopicPartition{a})
	require.NoError(t, err)
	require.Nil(t, errs)
	d := h.describe(t, id)
	require.Equal(t, Ongoing, d.State)
	require.Equal(t, h.clock.Now(), d.Start)
	require.Equal(t, []TopicPartition{a}, d.Partitions)

	writes := h.store.appends.Load()
	_, err = h.c.AddPartitions(ctx, id, pid, epoch, []TopicPartition{a})
	require.NoError(t, err)
	require.Equal(t, writes, h.store.appends.Load(), "adding what is there writes nothing")

	h.clock.Advance(time.Second)
	_, err = h.c.AddPartitions(ctx, id, pid, epoch, []TopicPartition{b, a})
	require.NoError(t, err)
	require.NoError(t, h.c.AddOffsets(ctx, id, pid, epoch, "g"))
	d = h.describe(t, id)
	require.Equal(t, []TopicPartition{o, a, b}, d.Partitions)
	require.Equal(t, h.clock.Now().Add(-time.Second), d.Start, "the transaction began at its first partition")
	v, _ := h.store.last(t, id)
	require.Equal(t, Ongoing, v.State)
	require.Equal(t, []TopicPartition{o, a, b}, v.Partitions)

	verify, err = h.c.VerifyPartitions(id, pid, epoch, []TopicPartition{a, tp("other", 0)})
	require.NoError(t, err)
	require.NoError(t, verify[a])
	require.ErrorIs(t, verify[tp("other", 0)], ErrTransactionAbortable)
	_, err = h.c.VerifyPartitions(id, pid, epoch-1, []TopicPartition{a})
	require.ErrorIs(t, err, ErrProducerFenced)

	// Commit with the markers held: the transaction stays PrepareCommit,
	// and every request but Describe waits for it.
	hold := make(chan struct{})
	h.markers.mu.Lock()
	h.markers.hold = hold
	h.markers.mu.Unlock()
	require.NoError(t, h.c.EndTxn(ctx, id, pid, epoch, true))
	require.Equal(t, PrepareCommit, h.describe(t, id).State)
	v, _ = h.store.last(t, id)
	require.Equal(t, PrepareCommit, v.State, "EndTxn answers once PrepareCommit is durable")
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, true), ErrConcurrentTransactions, "retry while completing")
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, false), ErrInvalidTxnState, "the other outcome")
	_, err = h.c.AddPartitions(ctx, id, pid, epoch, []TopicPartition{a})
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	_, err = h.c.VerifyPartitions(id, pid, epoch, []TopicPartition{a})
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	_, _, err = h.c.InitProducerID(ctx, id, time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	close(hold)
	h.waitState(t, id, CompleteCommit)

	calls := h.markers.snapshot()
	require.Len(t, calls, 1)
	require.Equal(t, markerCall{pid: pid, epoch: epoch, commit: true, coordinatorEpoch: 1, partitions: []TopicPartition{o, a, b}}, calls[0])
	v, _ = h.store.last(t, id)
	require.Equal(t, CompleteCommit, v.State)
	require.NotNil(t, v.Partitions)
	require.Empty(t, v.Partitions, "Complete* is stored with an empty partition list")

	require.NoError(t, h.c.EndTxn(ctx, id, pid, epoch, true), "a retried commit succeeds again")
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, false), ErrInvalidTxnState)

	// The next transaction, aborted.
	_, err = h.c.AddPartitions(ctx, id, pid, epoch, []TopicPartition{b})
	require.NoError(t, err)
	require.Equal(t, []TopicPartition{b}, h.describe(t, id).Partitions, "a new transaction starts with no partitions")
	require.NoError(t, h.c.EndTxn(ctx, id, pid, epoch, false))
	h.waitState(t, id, CompleteAbort)
	require.NoError(t, h.c.EndTxn(ctx, id, pid, epoch, false))
	require.ErrorIs(t, h.c.EndTxn(ctx, id, pid, epoch, true), ErrInvalidTxnState)
	calls = h.markers.snapshot()
	require.Equal(t, markerCall{pid: pid, epoch: epoch, commit: false, coordinatorEpoch: 1, partitions: []TopicPartition{b}}, calls[len(calls)-1])
}

// AddPartitionsToTxn is all or nothing: an unknown partition gets
// UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED, and
// nothing is added.
func TestAddPartitionsUnknownPartition(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(c *Config) {
		c.PartitionExists = func(tp TopicPartition) bool { return tp.Topic != "gone" }
	})
	pid, epoch, err := h.c.InitProducerID(ctx, "x", time.Minute, -1, -1)
	require.NoError(t, err)
	writes := h.store.appends.Load()
	errs, err := h.c.AddPartitions(ctx, "x", pid, epoch, []TopicPartition{tp("a", 0), tp("gone", 1), tp("a", 1)})
	require.NoError(t, err)
	require.Len(t, errs, 3)
	require.ErrorIs(t, errs[tp("gone", 1)], ErrUnknownTopicOrPartition)
	require.ErrorIs(t, errs[tp("a", 0)], ErrOperationNotAttempted)
	require.ErrorIs(t, errs[tp("a", 1)], ErrOperationNotAttempted)
	require.Equal(t, writes, h.store.appends.Load())
	require.Equal(t, Empty, h.describe(t, "x").State)
}

// While EndTxn's PrepareCommit is being written, AddPartitions (and a
// retried EndTxn) get CONCURRENT_TRANSACTIONS, and the state is still the
// old one; once written, EndTxn succeeds.
func TestConcurrentEndTxnAndAddPartitions(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch := h.begin(t, "x", tp("a", 0))
	entered, release := h.store.holdAppends()
	done := make(chan error, 1)
	go func() { done <- h.c.EndTxn(ctx, "x", pid, epoch, true) }()
	<-entered
	_, err := h.c.AddPartitions(ctx, "x", pid, epoch, []TopicPartition{tp("a", 1)})
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	require.ErrorIs(t, h.c.EndTxn(ctx, "x", pid, epoch, true), ErrConcurrentTransactions)
	_, _, err = h.c.InitProducerID(ctx, "x", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	d := h.describe(t, "x")
	require.Equal(t, Ongoing, d.State, "pending, not applied")
	require.Equal(t, []TopicPartition{tp("a", 0)}, d.Partitions)
	// Other ids are not held up by the write.
	require.ErrorIs(t, h.c.EndTxn(ctx, "another-id", pid, epoch, true), ErrInvalidProducerIDMapping)
	release()
	require.NoError(t, <-done)
	h.waitState(t, "x", CompleteCommit)
}

// Many producers racing EndTxn against AddPartitions on one id: every
// answer is a success or CONCURRENT_TRANSACTIONS / INVALID_TXN_STATE, and
// the id ends up consistent (run with -race).
func TestConcurrentRequestsRace(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch := h.begin(t, "x", tp("a", 0))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				var err error
				if (i+j)%2 == 0 {
					err = h.c.EndTxn(ctx, "x", pid, epoch, true)
				} else {
					_, err = h.c.AddPartitions(ctx, "x", pid, epoch, []TopicPartition{tp("a", int32(j%3))})
				}
				if err != nil && !errors.Is(err, ErrConcurrentTransactions) && !errors.Is(err, ErrInvalidTxnState) {
					t.Errorf("unexpected %v", err)
				}
				h.c.Describe([]string{"x"})
			}
		}()
	}
	wg.Wait()
	// Whatever is open commits, once what is completing has completed.
	for {
		err := h.c.EndTxn(ctx, "x", pid, epoch, true)
		if !errors.Is(err, ErrConcurrentTransactions) {
			require.NoError(t, err)
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.waitState(t, "x", CompleteCommit)
	d := h.describe(t, "x")
	require.Equal(t, pid, d.ProducerID)
	require.Equal(t, epoch, d.ProducerEpoch)
}

// A failed Store write leaves the id as it was, and nothing is sent.
func TestStoreFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch := h.begin(t, "x", tp("a", 0))
	h.store.setFail(func([]record.Record) error { return errors.New("not enough replicas") })
	err := h.c.EndTxn(ctx, "x", pid, epoch, true)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	_, err = h.c.AddPartitions(ctx, "x", pid, epoch, []TopicPartition{tp("b", 0)})
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	d := h.describe(t, "x")
	require.Equal(t, Ongoing, d.State)
	require.Equal(t, []TopicPartition{tp("a", 0)}, d.Partitions)
	require.Empty(t, h.markers.snapshot())

	h.store.setFail(nil)
	require.NoError(t, h.c.EndTxn(ctx, "x", pid, epoch, false))
	h.waitState(t, "x", CompleteAbort)
}

// Markers that fail are sent again until they succeed; a partition that
// no longer exists is given up; only then is the transaction complete.
func TestMarkerRetries(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	a, b, gone := tp("a", 0), tp("b", 0), tp("gone", 0)
	h.markers.setErr(func(call int, p TopicPartition) error {
		switch {
		case p == gone:
			return ErrUnknownTopicOrPartition
		case p == b && call < 3:
			return errTransient
		}
		return nil
	})
	pid, epoch := h.begin(t, "x", a, b, gone)
	require.NoError(t, h.c.EndTxn(ctx, "x", pid, epoch, true))
	h.waitState(t, "x", CompleteCommit)
	calls := h.markers.snapshot()
	require.Len(t, calls, 4)
	require.Equal(t, []TopicPartition{a, b, gone}, calls[0].partitions)
	for _, c := range calls[1:] {
		require.Equal(t, []TopicPartition{b}, c.partitions, "only the failed partition is retried")
		require.True(t, c.commit)
		require.Equal(t, epoch, c.epoch)
	}
}

// A leader that reports this coordinator fenced stops its markers: the
// transaction stays PrepareCommit for the newer coordinator to finish.
func TestMarkersFencedCoordinatorStops(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.markers.setErr(func(int, TopicPartition) error { return ErrCoordinatorFenced })
	pid, epoch := h.begin(t, "x", tp("a", 0))
	require.NoError(t, h.c.EndTxn(ctx, "x", pid, epoch, true))
	h.c.Close() // waits for the sender, which must have stopped by itself
	require.Len(t, h.markers.snapshot(), 1)
	v, _ := h.store.last(t, "x")
	require.Equal(t, PrepareCommit, v.State)
}

// A coordinator that stops after PrepareCommit is durable but before the
// markers are written: the next one to load the partition (at a newer
// coordinator epoch) sends them and completes the transaction.
func TestResumeMarkersAfterCrash(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.markers.setErr(func(int, TopicPartition) error { return errTransient }) // the leaders are unreachable
	pid, epoch := h.begin(t, "x", tp("a", 0), tp("b", 2))
	require.NoError(t, h.c.EndTxn(ctx, "x", pid, epoch, true))
	h.c.Close()
	v, _ := h.store.last(t, "x")
	require.Equal(t, PrepareCommit, v.State)

	h.markers = &fakeMarkers{}
	h.cfg.Markers = h.markers
	h.c = h.open(t, 7)
	h.waitState(t, "x", CompleteCommit)
	calls := h.markers.snapshot()
	require.Equal(t, []markerCall{{pid: pid, epoch: epoch, commit: true, coordinatorEpoch: 7, partitions: []TopicPartition{tp("a", 0), tp("b", 2)}}}, calls)
	v, _ = h.store.last(t, "x")
	require.Equal(t, CompleteCommit, v.State)
}

// An Ongoing transaction past its timeout is aborted by Tick with its
// epoch fenced; the late producer's commit is refused.
func TestTimeoutAbort(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch, err := h.c.InitProducerID(ctx, "x", 10*time.Second, -1, -1)
	require.NoError(t, err)
	_, err = h.c.AddPartitions(ctx, "x", pid, epoch, []TopicPartition{tp("a", 0)})
	require.NoError(t, err)

	h.c.Tick(h.clock.Advance(10 * time.Second)) // start + timeout: not past yet
	require.Equal(t, Ongoing, h.describe(t, "x").State)
	require.Empty(t, h.markers.snapshot())

	h.c.Tick(h.clock.Advance(time.Millisecond))
	h.waitState(t, "x", CompleteAbort)
	d := h.describe(t, "x")
	require.Equal(t, epoch+1, d.ProducerEpoch)
	require.Equal(t, []markerCall{{pid: pid, epoch: epoch + 1, commit: false, coordinatorEpoch: 1, partitions: []TopicPartition{tp("a", 0)}}}, h.markers.snapshot())

	require.ErrorIs(t, h.c.EndTxn(ctx, "x", pid, epoch, true), ErrProducerFenced)
	_, _, err = h.c.InitProducerID(ctx, "x", time.Minute, pid, epoch)
	require.ErrorIs(t, err, ErrProducerFenced, "a fence is no KIP-360 continuation")
}

// Zombie fencing: a second instance's InitProducerId fences the first,
// aborting its open transaction with markers at the bumped epoch; the
// first is refused from then on, and no marker ever carries its epoch.
func TestZombieFencing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pidA, epochA := h.begin(t, "x", tp("a", 0))

	_, _, err := h.c.InitProducerID(ctx, "x", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrConcurrentTransactions)
	h.waitState(t, "x", CompleteAbort)
	pidB, epochB, err := h.c.InitProducerID(ctx, "x", time.Minute, -1, -1) // the retry
	require.NoError(t, err)
	require.Equal(t, pidA, pidB)
	require.Equal(t, epochA+2, epochB)

	require.ErrorIs(t, h.c.EndTxn(ctx, "x", pidA, epochA, true), ErrProducerFenced)
	_, err = h.c.AddPartitions(ctx, "x", pidA, epochA, []TopicPartition{tp("a", 1)})
	require.ErrorIs(t, err, ErrProducerFenced)
	require.ErrorIs(t, h.c.AddOffsets(ctx, "x", pidA, epochA, "g"), ErrProducerFenced)
	_, err = h.c.VerifyPartitions("x", pidA, epochA, []TopicPartition{tp("a", 0)})
	require.ErrorIs(t, err, ErrProducerFenced)

	for _, c := range h.markers.snapshot() {
		require.NotEqual(t, epochA, c.epoch, "a marker at the zombie's epoch: %v", c)
		require.False(t, c.commit)
	}
	require.Len(t, h.markers.snapshot(), 1)
}

// An id idle beyond IDExpiration is forgotten, with a tombstone, also
// after a reload; an id with an open transaction is not.
func TestIDExpiration(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(c *Config) { c.IDExpiration = time.Hour })
	_, _, err := h.c.InitProducerID(ctx, "idle", 10*time.Minute, -1, -1)
	require.NoError(t, err)
	pid, epoch, err := h.c.InitProducerID(ctx, "busy", 15*time.Minute, -1, -1)
	require.NoError(t, err)
	h.c.Tick(h.clock.Advance(59 * time.Minute))
	_, err = h.c.AddPartitions(ctx, "busy", pid, epoch, []TopicPartition{tp("a", 0)})
	require.NoError(t, err)
	h.c.Tick(h.clock.Advance(time.Minute))
	require.ErrorIs(t, h.describe(t, "idle").Err, ErrTransactionalIDNotFound)
	require.Equal(t, Ongoing, h.describe(t, "busy").State)
	v, ok := h.store.last(t, "idle")
	require.True(t, ok)
	require.Nil(t, v, "a tombstone")

	h.c.Close()
	h.c = h.open(t, 2)
	require.ErrorIs(t, h.describe(t, "idle").Err, ErrTransactionalIDNotFound)
	pid2, epoch2, err := h.c.InitProducerID(ctx, "idle", time.Minute, -1, -1)
	require.NoError(t, err)
	require.Equal(t, int16(0), epoch2)
	require.NotEqual(t, pid, pid2)
}

// Unloaded partitions answer NOT_COORDINATOR, loading ones
// COORDINATOR_LOAD_IN_PROGRESS; a malformed record fails the load, a key
// of an unknown version is skipped.
func TestLoadUnload(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch := h.begin(t, "x", tp("a", 0))
	p := PartitionFor("x", testPartitions)
	require.True(t, h.c.Unload(p))
	require.False(t, h.c.Unload(p))
	require.ErrorIs(t, h.c.EndTxn(ctx, "x", pid, epoch, true), ErrNotCoordinator)
	_, _, err := h.c.InitProducerID(ctx, "x", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.ErrorIs(t, h.describe(t, "x").Err, ErrNotCoordinator)

	// A load that waits on its records.
	gate := make(chan struct{})
	loaded := make(chan error, 1)
	go func() {
		loaded <- h.c.Load(ctx, p, 2, func(yield func(*record.Record, error) bool) {
			<-gate
			for r, err := range h.store.records(p) {
				if !yield(r, err) {
					return
				}
			}
			yield(&record.Record{Key: []byte{0, 9, 0, 0}, Value: []byte("from the future")}, nil)
		})
	}()
	require.Eventually(t, func() bool {
		return errors.Is(h.c.EndTxn(ctx, "x", pid, epoch, true), ErrCoordinatorLoadInProgress)
	}, 20*time.Second, time.Millisecond)
	_, _, err = h.c.List(ListFilter{})
	require.ErrorIs(t, err, ErrCoordinatorLoadInProgress)
	close(gate)
	require.NoError(t, <-loaded)
	require.Equal(t, Ongoing, h.describe(t, "x").State)
	require.NoError(t, h.c.EndTxn(ctx, "x", pid, epoch, true))
	h.waitState(t, "x", CompleteCommit)
	require.Equal(t, int32(2), h.markers.snapshot()[0].coordinatorEpoch)

	bad := func(yield func(*record.Record, error) bool) {
		yield(&record.Record{Key: EncodeKey("x"), Value: []byte{0, 0, 1}}, nil)
	}
	err = h.c.Load(ctx, p, 3, bad)
	require.ErrorIs(t, err, ErrMalformedRecord)
	require.ErrorIs(t, h.describe(t, "x").Err, ErrNotCoordinator)
	readErr := errors.New("read failed")
	err = h.c.Load(ctx, p, 3, func(yield func(*record.Record, error) bool) { yield(nil, readErr) })
	require.ErrorIs(t, err, readErr)
	require.ErrorIs(t, h.c.Load(ctx, testPartitions, 1, h.store.records(0)), ErrInvalidRequest)
}

func TestDescribeAndList(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pa, _ := h.begin(t, "alpha", tp("a", 1), tp("a", 0))
	h.clock.Advance(time.Minute)
	pb, _, err := h.c.InitProducerID(ctx, "beta", 45*time.Second, -1, -1)
	require.NoError(t, err)
	pg, eg := h.begin(t, "gamma", tp("g", 0))
	require.NoError(t, h.c.EndTxn(ctx, "gamma", pg, eg, true))
	h.waitState(t, "gamma", CompleteCommit)

	ds := h.c.Describe([]string{"alpha", "beta", "nope", ""})
	require.Equal(t, Description{TransactionalID: "alpha", State: Ongoing, ProducerID: pa, ProducerEpoch: 0,
		Timeout: time.Minute, Start: h.clock.Now().Add(-time.Minute), Partitions: []TopicPartition{tp("a", 0), tp("a", 1)}}, ds[0])
	require.Equal(t, Description{TransactionalID: "beta", State: Empty, ProducerID: pb, Timeout: 45 * time.Second}, ds[1])
	require.ErrorIs(t, ds[2].Err, ErrTransactionalIDNotFound)
	require.ErrorIs(t, ds[3].Err, ErrTransactionalIDNotFound)

	names := func(ls []Listing) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.TransactionalID+":"+l.State.String())
		}
		return out
	}
	for _, c := range []struct {
		f       ListFilter
		want    []string
		unknown []string
	}{
		{ListFilter{}, []string{"alpha:Ongoing", "beta:Empty", "gamma:CompleteCommit"}, nil},
		{ListFilter{States: []string{"Ongoing", "Bogus"}}, []string{"alpha:Ongoing"}, []string{"Bogus"}},
		{ListFilter{States: []string{"Bogus"}}, nil, []string{"Bogus"}},
		{ListFilter{ProducerIDs: []int64{pb, pg}}, []string{"beta:Empty", "gamma:CompleteCommit"}, nil},
		{ListFilter{MinDuration: 30 * time.Second}, []string{"alpha:Ongoing"}, nil},
		{ListFilter{MinDuration: time.Hour}, nil, nil},
		{ListFilter{IDPattern: "^(al|ga)"}, []string{"alpha:Ongoing", "gamma:CompleteCommit"}, nil},
	} {
		got, unknown, err := h.c.List(c.f)
		require.NoError(t, err)
		require.Equal(t, c.want, names(got), "%+v", c.f)
		require.Equal(t, c.unknown, unknown)
	}
	_, _, err = h.c.List(ListFilter{IDPattern: "("})
	require.ErrorIs(t, err, ErrInvalidRegularExpression)

	for s := Empty; s <= PrepareEpochFence; s++ {
		got, ok := ParseState(s.String())
		require.True(t, ok)
		require.Equal(t, s, got)
	}
	require.Equal(t, "PrepareEpochFence", PrepareEpochFence.String())
}

// A closed Coordinator refuses everything.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.c.Close()
	_, _, err := h.c.InitProducerID(ctx, "x", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	require.ErrorIs(t, h.c.Load(ctx, 0, 1, h.store.records(0)), ErrCoordinatorNotAvailable)
	_, err = NewCoordinator(Config{})
	require.Error(t, err)
}
