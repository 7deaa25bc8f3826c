package txn

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
)

// memStore is an in-memory Store: one slice of records per partition. fail,
// if set, decides an append's error (nothing is stored then); hold, if set,
// is received from before an append is stored, so that a test can keep a
// write in flight.
type memStore struct {
	mu      sync.Mutex
	parts   map[int32][]record.Record
	fail    func(recs []record.Record) error
	hold    chan struct{}
	entered chan struct{} // receives when an append starts waiting on hold
	appends atomic.Int64
}

func newMemStore() *memStore { return &memStore{parts: map[int32][]record.Record{}} }

func (s *memStore) Append(ctx context.Context, partition, coordinatorEpoch int32, recs []record.Record) error {
	s.mu.Lock()
	hold, entered, fail := s.hold, s.entered, s.fail
	s.mu.Unlock()
	if hold != nil {
		if entered != nil {
			entered <- struct{}{}
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(recs); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		r = r.Clone()
		r.Offset = int64(len(s.parts[partition]))
		s.parts[partition] = append(s.parts[partition], r)
	}
	s.appends.Add(1)
	return nil
}

func (s *memStore) setFail(f func([]record.Record) error) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

// holdAppends makes appends wait until the returned release is called;
// entered receives once per waiting append.
func (s *memStore) holdAppends() (entered chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.entered = make(chan struct{}), make(chan struct{}, 16)
	hold := s.hold
	return s.entered, func() {
		s.mu.Lock()
		s.hold, s.entered = nil, nil
		s.mu.Unlock()
		close(hold)
	}
}

func (s *memStore) records(partition int32) iter.Seq2[*record.Record, error] {
	s.mu.Lock()
	recs := slices.Clone(s.parts[partition])
	s.mu.Unlock()
	return func(yield func(*record.Record, error) bool) {
		for i := range recs {
			if !yield(&recs[i], nil) {
				return
			}
		}
	}
}

// last returns the latest value stored for id (nil, true for a tombstone;
// ok false if none).
func (s *memStore) last(t *testing.T, id string) (v *Value, ok bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, recs := range s.parts {
		for _, r := range recs {
			k, err := DecodeKey(r.Key)
			require.NoError(t, err)
			if k != id {
				continue
			}
			ok = true
			if r.Value == nil {
				v = nil
				continue
			}
			d, err := DecodeValue(r.Value)
			require.NoError(t, err)
			v = &d
		}
	}
	return v, ok
}

// markerCall is one WriteMarkers call.
type markerCall struct {
	pid              int64
	epoch            int16
	commit           bool
	coordinatorEpoch int32
	partitions       []TopicPartition
}

// fakeMarkers is a MarkerWriter recording its calls; errFor, if set, gives
// each partition's error (call counts from 0).
type fakeMarkers struct {
	mu     sync.Mutex
	calls  []markerCall
	errFor func(call int, tp TopicPartition) error
	hold   chan struct{}
}

func (m *fakeMarkers) WriteMarkers(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32, tps []TopicPartition) []error {
	m.mu.Lock()
	hold := m.hold
	n := len(m.calls)
	m.calls = append(m.calls, markerCall{pid, epoch, commit, coordinatorEpoch, slices.Clone(tps)})
	errFor := m.errFor
	m.mu.Unlock()
	errs := make([]error, len(tps))
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	for i, tp := range tps {
		if errFor != nil {
			errs[i] = errFor(n, tp)
		}
	}
	return errs
}

func (m *fakeMarkers) setErr(f func(call int, tp TopicPartition) error) {
	m.mu.Lock()
	m.errFor = f
	m.mu.Unlock()
}

func (m *fakeMarkers) snapshot() []markerCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// testPartitions is the StateTopic partition count of the tests.
const testPartitions = 4

type harness struct {
	c       *Coordinator
	store   *memStore
	markers *fakeMarkers
	clock   *fakeClock
	nextPID atomic.Int64
	pidErr  atomic.Pointer[error]
	cfg     Config
}

// newHarness returns a Coordinator over an in-memory Store with every
// partition loaded at coordinator epoch 1, a fake clock and manual ticks.
func newHarness(t *testing.T, mod ...func(*Config)) *harness {
	t.Helper()
	h := &harness{store: newMemStore(), markers: &fakeMarkers{}, clock: &fakeClock{now: time.UnixMilli(1_700_000_000_000)}}
	h.nextPID.Store(1000)
	h.cfg = Config{
		Partitions: testPartitions,
		Store:      h.store,
		Markers:    h.markers,
		NewProducerID: func(ctx context.Context) (int64, error) {
			if e := h.pidErr.Load(); e != nil {
				return 0, *e
			}
			return h.nextPID.Add(1) - 1, nil
		},
		ManualTick:         true,
		MarkerRetryBackoff: time.Millisecond,
		Now:                h.clock.Now,
	}
	for _, m := range mod {
		m(&h.cfg)
	}
	h.c = h.open(t, 1)
	return h
}

// open starts a Coordinator over h's Store, loading every partition at
// coordinator epoch epoch.
func (h *harness) open(t *testing.T, epoch int32) *Coordinator {
	t.Helper()
	c, err := NewCoordinator(h.cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	for p := range int32(testPartitions) {
		require.NoError(t, c.Load(context.Background(), p, epoch, h.store.records(p)))
	}
	return c
}

// seed stores a value for id, as if written earlier; reopen the
// coordinator (or Load) to see it.
func (h *harness) seed(t *testing.T, id string, v Value) {
	t.Helper()
	require.NoError(t, h.store.Append(context.Background(), PartitionFor(id, testPartitions), 1,
		[]record.Record{{Key: EncodeKey(id), Value: EncodeValue(v)}}))
}

func (h *harness) describe(t *testing.T, id string) Description {
	t.Helper()
	d := h.c.Describe([]string{id})
	require.Len(t, d, 1)
	return d[0]
}

// waitState waits until id is in state s. The deadline only guards against
// a hang; nothing is measured.
func (h *harness) waitState(t *testing.T, id string, s State) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := h.describe(t, id)
		if d.Err == nil && d.State == s {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %v (err %v), want %v", id, d.State, d.Err, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// begin initialises id and opens a transaction on tps.
func (h *harness) begin(t *testing.T, id string, tps ...TopicPartition) (int64, int16) {
	t.Helper()
	ctx := context.Background()
	pid, epoch, err := h.c.InitProducerID(ctx, id, time.Minute, -1, -1)
	require.NoError(t, err)
	errs, err := h.c.AddPartitions(ctx, id, pid, epoch, tps)
	require.NoError(t, err)
	require.Nil(t, errs)
	return pid, epoch
}

var errTransient = errors.New("transient: not leader")

func tp(topic string, p int32) TopicPartition { return TopicPartition{topic, p} }

func (c markerCall) String() string {
	return fmt.Sprintf("pid %d epoch %d commit %v ce %d %v", c.pid, c.epoch, c.commit, c.coordinatorEpoch, c.partitions)
}
