package txn

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// InitProducerId's rules (Kafka's prepareInitProducerIdTransit and
// prepareIncrementProducerEpoch, KIP-360), one row per rule: the id's
// stored state, the request, and the answer and record that must follow.
func TestInitProducerIDRules(t *testing.T) {
	const id = "app-1"
	const pid, oldPID = int64(77), int64(66)
	stored := func(state State, epoch int16, prev int64) *Value {
		v := Value{ProducerID: pid, ProducerEpoch: epoch, TimeoutMs: 60000, State: state,
			LastUpdateMs: 1, StartMs: -1, PreviousProducerID: prev, NextProducerID: -1}
		if state != Empty {
			v.Partitions = []TopicPartition{}
		}
		if state == Ongoing || state.preparing() {
			v.Partitions, v.StartMs = []TopicPartition{tp("t", 0)}, 1
		}
		return &v
	}
	rotated := stored(Empty, 0, oldPID) // after a KIP-360 rotation away from oldPID at 32766
	none := int64(-1)
	for _, c := range []struct {
		name      string
		have      *Value
		timeout   time.Duration
		expPID    int64
		expEpoch  int16
		wantPID   int64
		wantEpoch int16
		wantErr   error
		wantPrev  int64 // PreviousProducerID of the record written; -2: no record written
		wantState State
	}{
		{name: "new id gets a new producer id at epoch 0", expPID: none, expEpoch: -1, wantPID: 1000, wantEpoch: 0, wantPrev: -1},
		{name: "new id, KIP-360 expected ids", expPID: 5, expEpoch: 3, wantPID: 1000, wantEpoch: 0, wantPrev: -1},
		{name: "Empty: bump", have: stored(Empty, 5, -1), expPID: none, expEpoch: -1, wantPID: pid, wantEpoch: 6, wantPrev: -1},
		{name: "CompleteCommit: bump", have: stored(CompleteCommit, 5, -1), expPID: none, expEpoch: -1, wantPID: pid, wantEpoch: 6, wantPrev: -1},
		{name: "CompleteAbort: KIP-360 bump remembers the epoch it continued", have: stored(CompleteAbort, 5, -1), expPID: pid, expEpoch: 5, wantPID: pid, wantEpoch: 6, wantPrev: pid},
		{name: "KIP-360 retry of that bump: same answer, no write", have: stored(Empty, 6, pid), expPID: pid, expEpoch: 5, wantPID: pid, wantEpoch: 6, wantPrev: -2},
		{name: "old epoch after a fresh bump: fenced", have: stored(Empty, 6, -1), expPID: pid, expEpoch: 5, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "older epoch than the last: fenced", have: stored(Empty, 6, pid), expPID: pid, expEpoch: 4, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "newer epoch than the id's: fenced", have: stored(Empty, 6, pid), expPID: pid, expEpoch: 7, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "another producer id: fenced", have: stored(Empty, 6, -1), expPID: 12, expEpoch: 6, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "exhausted epoch: new producer id", have: stored(Empty, math.MaxInt16-1, -1), expPID: none, expEpoch: -1, wantPID: 1000, wantEpoch: 0, wantPrev: -1},
		{name: "exhausted epoch, KIP-360: new producer id remembering the old", have: stored(CompleteCommit, math.MaxInt16-1, -1), expPID: pid, expEpoch: math.MaxInt16 - 1, wantPID: 1000, wantEpoch: 0, wantPrev: pid},
		{name: "fenced epoch MaxInt16: new producer id", have: stored(CompleteAbort, math.MaxInt16, -1), expPID: none, expEpoch: -1, wantPID: 1000, wantEpoch: 0, wantPrev: -1},
		{name: "retry of the rotation: same answer", have: rotated, expPID: oldPID, expEpoch: math.MaxInt16 - 1, wantPID: pid, wantEpoch: 0, wantPrev: -2},
		{name: "previous producer id with an epoch that was not exhausted: fenced", have: rotated, expPID: oldPID, expEpoch: 100, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "PrepareCommit: concurrent", have: stored(PrepareCommit, 5, -1), expPID: none, expEpoch: -1, wantErr: ErrConcurrentTransactions, wantPrev: -2},
		{name: "PrepareAbort: concurrent", have: stored(PrepareAbort, 5, -1), expPID: none, expEpoch: -1, wantErr: ErrConcurrentTransactions, wantPrev: -2},
		{name: "Ongoing: fence and abort", have: stored(Ongoing, 5, pid), expPID: none, expEpoch: -1, wantErr: ErrConcurrentTransactions, wantPrev: -1, wantState: PrepareAbort},
		{name: "fencing checks the expected producer first", have: stored(Ongoing, 5, -1), expPID: 12, expEpoch: 5, wantErr: ErrProducerFenced, wantPrev: -2},
		{name: "timeout zero", timeout: -1, expPID: none, expEpoch: -1, wantErr: ErrInvalidTransactionTimeout, wantPrev: -2},
		{name: "timeout above the maximum", timeout: 15*time.Minute + time.Millisecond, expPID: none, expEpoch: -1, wantErr: ErrInvalidTransactionTimeout, wantPrev: -2},
		{name: "expected epoch without producer id", expPID: none, expEpoch: 3, wantErr: ErrInvalidRequest, wantPrev: -2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if c.have != nil {
				// Markers of a loaded Prepare* stay unanswered: the
				// transaction must still be completing when we ask.
				h.markers.hold = make(chan struct{})
				h.seed(t, id, *c.have)
				h.c.Close()
				h.c = h.open(t, 1)
			}
			before := h.store.appends.Load()
			timeout := c.timeout
			switch timeout {
			case 0:
				timeout = 30 * time.Second
			case -1:
				timeout = 0
			}
			gotPID, gotEpoch, err := h.c.InitProducerID(context.Background(), id, timeout, c.expPID, c.expEpoch)
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
			} else {
				require.NoError(t, err)
				require.Equal(t, c.wantPID, gotPID)
				require.Equal(t, c.wantEpoch, gotEpoch)
			}
			if c.wantPrev == -2 {
				require.Equal(t, before, h.store.appends.Load(), "no record written")
				if c.have == nil {
					require.ErrorIs(t, h.describe(t, id).Err, ErrTransactionalIDNotFound)
				}
				return
			}
			require.Equal(t, before+1, h.store.appends.Load())
			v, ok := h.store.last(t, id)
			require.True(t, ok)
			require.Equal(t, c.wantState, v.State)
			require.Equal(t, c.wantPrev, v.PreviousProducerID)
			if c.wantErr == nil {
				require.Equal(t, gotPID, v.ProducerID)
				require.Equal(t, gotEpoch, v.ProducerEpoch)
				require.Equal(t, int32(timeout.Milliseconds()), v.TimeoutMs)
				require.Nil(t, v.Partitions, "Empty is stored with null partitions")
				require.Equal(t, int64(-1), v.StartMs)
			} else {
				require.Equal(t, c.have.ProducerEpoch+1, v.ProducerEpoch, "the fence bumps the epoch")
			}
		})
	}
}

// KAFKA-20357: a KIP-360 InitProducerId whose answer is lost, retried at a
// coordinator that took over after a failover, gets the same answer instead
// of PRODUCER_FENCED, because the previous producer id is persisted.
func TestRetriedInitAfterFailover(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pid, epoch, err := h.c.InitProducerID(ctx, "app", time.Minute, -1, -1)
	require.NoError(t, err)
	pid2, epoch2, err := h.c.InitProducerID(ctx, "app", time.Minute, pid, epoch)
	require.NoError(t, err)
	require.Equal(t, pid, pid2)
	require.Equal(t, epoch+1, epoch2)

	h.c.Close() // the coordinator fails over before the producer hears back
	h.c = h.open(t, 2)
	writes := h.store.appends.Load()
	pid3, epoch3, err := h.c.InitProducerID(ctx, "app", time.Minute, pid, epoch)
	require.NoError(t, err)
	require.Equal(t, pid2, pid3)
	require.Equal(t, epoch2, epoch3)
	require.Equal(t, writes, h.store.appends.Load(), "a retry writes nothing")

	// A fresh instance fences the old one; the old epoch is then no retry.
	_, epoch4, err := h.c.InitProducerID(ctx, "app", time.Minute, -1, -1)
	require.NoError(t, err)
	h.c.Close()
	h.c = h.open(t, 3)
	_, _, err = h.c.InitProducerID(ctx, "app", time.Minute, pid, epoch2)
	require.ErrorIs(t, err, ErrProducerFenced)
	_, _, err = h.c.InitProducerID(ctx, "app", time.Minute, pid, epoch4)
	require.NoError(t, err)
}

// A producer id allocation that fails leaves no trace of a new id; a
// failed bump leaves the old epoch.
func TestInitFailuresChangeNothing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	boom := errors.New("controller unreachable")
	h.pidErr.Store(&boom)
	_, _, err := h.c.InitProducerID(ctx, "a", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, h.describe(t, "a").Err, ErrTransactionalIDNotFound)
	h.pidErr.Store(nil)

	h.store.setFail(func([]record.Record) error { return errors.New("disk full") })
	_, _, err = h.c.InitProducerID(ctx, "a", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	require.ErrorIs(t, h.describe(t, "a").Err, ErrTransactionalIDNotFound)
	h.store.setFail(nil)

	pid, epoch, err := h.c.InitProducerID(ctx, "a", time.Minute, -1, -1)
	require.NoError(t, err)
	h.store.setFail(func([]record.Record) error { return errors.Join(ErrNotCoordinator, errors.New("lost leadership")) })
	_, _, err = h.c.InitProducerID(ctx, "a", time.Minute, -1, -1)
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.NotErrorIs(t, err, ErrCoordinatorNotAvailable)
	d := h.describe(t, "a")
	require.Equal(t, pid, d.ProducerID)
	require.Equal(t, epoch, d.ProducerEpoch)
}
