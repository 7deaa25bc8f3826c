package share

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1000, 0)

func offsets(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func ack(first, last int64, t AckType) AckBatch {
	return AckBatch{First: first, Last: last, Types: []AckType{t}}
}

// Every transition of a record's state.
func TestStateTransitions(t *testing.T) {
	cfg := Config{LockDuration: time.Second, DeliveryLimit: 2}
	for name, tc := range map[string]struct {
		do        func(p *Partition) []Delivery
		want      State
		count     int
		archived  bool
		startMove bool
	}{
		"accept": {func(p *Partition) []Delivery { a, _ := p.Acknowledge("m", []AckBatch{ack(0, 0, Accept)}, t0); return a }, Acknowledged, 1, false, true},
		"reject": {func(p *Partition) []Delivery { a, _ := p.Acknowledge("m", []AckBatch{ack(0, 0, Reject)}, t0); return a }, Archived, 1, true, true},
		"release": {func(p *Partition) []Delivery {
			a, _ := p.Acknowledge("m", []AckBatch{ack(0, 0, Release)}, t0)
			return a
		}, Available, 1, false, false},
		"gap":                  {func(p *Partition) []Delivery { a, _ := p.Acknowledge("m", []AckBatch{ack(0, 0, Gap)}, t0); return a }, Archived, 1, false, true},
		"renew":                {func(p *Partition) []Delivery { a, _ := p.Acknowledge("m", []AckBatch{ack(0, 0, Renew)}, t0); return a }, Acquired, 1, false, false},
		"lock expiry":          {func(p *Partition) []Delivery { return p.Expire(t0.Add(2 * time.Second)) }, Available, 1, false, false},
		"lock not yet expired": {func(p *Partition) []Delivery { return p.Expire(t0.Add(time.Second)) }, Acquired, 1, false, false},
		"member gone":          {func(p *Partition) []Delivery { return p.ReleaseMember("m") }, Available, 1, false, false},
		"other member gone":    {func(p *Partition) []Delivery { return p.ReleaseMember("x") }, Acquired, 1, false, false},
	} {
		t.Run(name, func(t *testing.T) {
			p := New(cfg, 0)
			got := p.Acquire("m", 0, []int64{0, 1}, 1, t0)
			require.Equal(t, []Delivery{{Offset: 0, DeliveryCount: 1}}, got)
			archived := tc.do(p)
			s, c := p.State(0)
			if tc.startMove {
				require.Equal(t, int64(1), p.Start(), "the start moves past a done record")
			} else {
				require.Equal(t, tc.want, s)
				require.Equal(t, tc.count, c)
				require.Equal(t, int64(0), p.Start())
			}
			require.Equal(t, tc.archived, len(archived) == 1)
		})
	}
}

// A record released (or expiring) at the delivery limit is archived and
// reported; the start moves past it.
func TestDeliveryLimitArchivesPoison(t *testing.T) {
	p := New(Config{LockDuration: time.Second, DeliveryLimit: 3}, 10)
	now := t0
	for i := 1; i <= 3; i++ {
		off, ok := p.FetchOffset()
		require.True(t, ok)
		require.Equal(t, int64(10), off)
		got := p.Acquire(fmt.Sprint("m", i), 10, []int64{10, 11}, 1, now)
		require.Equal(t, []Delivery{{Offset: 10, DeliveryCount: i}}, got)
		var archived []Delivery
		if i%2 == 0 {
			now = now.Add(2 * time.Second)
			archived = p.Expire(now)
		} else {
			var err error
			archived, err = p.Acknowledge(fmt.Sprint("m", i), []AckBatch{ack(10, 10, Release)}, now)
			require.NoError(t, err)
		}
		if i < 3 {
			require.Empty(t, archived)
		} else {
			require.Equal(t, []Delivery{{Offset: 10, DeliveryCount: 3}}, archived)
		}
	}
	require.Equal(t, int64(11), p.Start())
	require.Equal(t, []Delivery{{Offset: 11, DeliveryCount: 1}}, p.Acquire("m", 11, []int64{11}, 5, now))
}

// Acknowledgements the protocol does not allow are refused, and change
// nothing: of records not acquired, of another member's, acknowledged
// twice, overlapping or out of order, with the wrong number of types.
func TestAcknowledgeRefusals(t *testing.T) {
	p := New(Config{}, 0)
	require.Len(t, p.Acquire("a", 0, offsets(0, 4), 4, t0), 4)
	require.Len(t, p.Acquire("b", 4, offsets(4, 6), 2, t0), 2)
	_, err := p.Acknowledge("a", []AckBatch{ack(0, 0, Accept)}, t0)
	require.NoError(t, err)
	before := p.Snapshot()
	for name, tc := range map[string]struct {
		batches []AckBatch
		err     error
	}{
		"another member's":   {[]AckBatch{ack(4, 4, Accept)}, ErrInvalidRecordState},
		"acknowledged twice": {[]AckBatch{ack(1, 1, Accept), ack(0, 0, Accept)}, ErrInvalidRequest},
		"done already":       {[]AckBatch{ack(0, 0, Accept)}, ErrInvalidRecordState},
		"never delivered":    {[]AckBatch{ack(6, 6, Accept)}, ErrInvalidRecordState},
		"overlapping":        {[]AckBatch{ack(1, 2, Accept), ack(2, 3, Accept)}, ErrInvalidRequest},
		"out of order":       {[]AckBatch{ack(3, 3, Accept), ack(1, 1, Accept)}, ErrInvalidRequest},
		"last before first":  {[]AckBatch{ack(3, 1, Accept)}, ErrInvalidRequest},
		"types count":        {[]AckBatch{{First: 1, Last: 3, Types: []AckType{Accept, Reject}}}, ErrInvalidRequest},
		"no types":           {[]AckBatch{{First: 1, Last: 1}}, ErrInvalidRequest},
		"unknown type":       {[]AckBatch{ack(1, 1, 9)}, ErrInvalidRequest},
		"valid then invalid": {[]AckBatch{ack(1, 1, Accept), ack(4, 4, Accept)}, ErrInvalidRecordState},
		"negative":           {[]AckBatch{ack(-1, 1, Accept)}, ErrInvalidRequest},
	} {
		_, err := p.Acknowledge("a", tc.batches, t0)
		require.ErrorIs(t, err, tc.err, name)
		require.Equal(t, before, p.Snapshot(), "%s changed the partition", name)
	}
	// Per-offset types in one batch.
	_, err = p.Acknowledge("a", []AckBatch{{First: 1, Last: 3, Types: []AckType{Accept, Reject, Release}}}, t0)
	require.NoError(t, err)
	s, _ := p.State(3)
	require.Equal(t, Available, s)
	require.Equal(t, int64(3), p.Start())
}

// Acquisition skips what is not available, archives gaps the log passes
// over, and stops at MaxInFlight until the start moves.
func TestAcquireGapsAndWindow(t *testing.T) {
	p := New(Config{MaxInFlight: 5}, 0)
	// The log holds 0, 1, 3 (2 is a transaction marker), then 4...
	got := p.Acquire("a", 0, []int64{0, 1, 3}, 10, t0)
	require.Len(t, got, 3)
	s, _ := p.State(2)
	require.Equal(t, Archived, s, "a gap")
	got = p.Acquire("a", 4, offsets(4, 9), 10, t0)
	require.Equal(t, []Delivery{{Offset: 4, DeliveryCount: 1}}, got, "the window is full at 5")
	_, ok := p.FetchOffset()
	require.False(t, ok, "nothing to acquire")
	_, err := p.Acknowledge("a", []AckBatch{ack(0, 1, Accept)}, t0)
	require.NoError(t, err)
	require.Equal(t, int64(3), p.Start(), "past 0, 1 and the gap")
	off, ok := p.FetchOffset()
	require.True(t, ok)
	require.Equal(t, int64(5), off)
	require.Len(t, p.Acquire("b", 5, offsets(5, 20), 10, t0), 3)
}

// A snapshot restores what must survive: acknowledged and archived
// records stay done, acquired ones come back available with their counts;
// damaged snapshots are refused.
func TestSnapshotRestore(t *testing.T) {
	cfg := Config{DeliveryLimit: 3}
	p := New(cfg, 100)
	p.Acquire("a", 100, offsets(100, 106), 10, t0)
	_, err := p.Acknowledge("a", []AckBatch{ack(101, 101, Accept), ack(103, 103, Reject), ack(104, 104, Release)}, t0)
	require.NoError(t, err)
	q, err := Restore(cfg, p.Snapshot())
	require.NoError(t, err)
	require.Equal(t, p.Start(), q.Start())
	require.Equal(t, p.End(), q.End())
	for off, want := range map[int64]State{100: Available, 101: Acknowledged, 102: Available, 103: Archived, 104: Available, 105: Available} {
		s, c := q.State(off)
		require.Equal(t, want, s, "offset %d", off)
		if want == Available {
			require.Equal(t, 1, c, "offset %d keeps its count", off)
		}
	}
	got := q.Acquire("b", 100, offsets(100, 106), 10, t0)
	require.Equal(t, []Delivery{{100, 2}, {102, 2}, {104, 2}, {105, 2}}, got)

	snap := p.Snapshot()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": snap[:len(snap)-1],
		"longer":    append(snap[:len(snap):len(snap)], 0),
		"version":   append([]byte{0, 9}, snap[2:]...),
		"state":     append(snap[:14:14], append([]byte{7, 0}, snap[16:]...)...),
	} {
		_, err := Restore(cfg, b)
		require.ErrorIs(t, err, ErrCorruptSnapshot, name)
	}
}

// Random consumers acquiring, acknowledging, crashing and expiring: a
// record is never acquired by two at once, accepted ones are never
// delivered again, counts never pass the limit, and a snapshot taken at
// any point restores the same done set.
func TestRandomDeliveries(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := Config{LockDuration: time.Second, DeliveryLimit: 4, MaxInFlight: 50}
		p := New(cfg, 0)
		now := t0
		held := map[int64]string{}
		accepted := map[int64]bool{}
		const logEnd = 300
		for step := 0; step < 2000; step++ {
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
			m := fmt.Sprint("m", rng.IntN(4))
			switch r := rng.IntN(10); {
			case r < 4:
				from, ok := p.FetchOffset()
				if !ok {
					continue
				}
				for _, d := range p.Acquire(m, from, offsets(from, min(from+20, logEnd)), 1+rng.IntN(8), now) {
					require.NotContains(t, held, d.Offset, "seed %d: %d acquired twice", seed, d.Offset)
					require.False(t, accepted[d.Offset], "seed %d: %d delivered after its accept", seed, d.Offset)
					require.LessOrEqual(t, d.DeliveryCount, cfg.DeliveryLimit)
					held[d.Offset] = m
				}
			case r < 8:
				var mine []int64
				for o, h := range held {
					if h == m {
						mine = append(mine, o)
					}
				}
				if len(mine) == 0 {
					continue
				}
				o := mine[rng.IntN(len(mine))]
				typ := []AckType{Accept, Accept, Release, Reject}[rng.IntN(4)]
				_, err := p.Acknowledge(m, []AckBatch{ack(o, o, typ)}, now)
				require.NoError(t, err, "seed %d: %d is %s's", seed, o, m)
				if typ == Accept {
					accepted[o] = true
				}
				delete(held, o)
				// Another member cannot acknowledge it now.
				_, err = p.Acknowledge("other", []AckBatch{ack(o, o, Accept)}, now)
				require.ErrorIs(t, err, ErrInvalidRecordState)
			case r < 9:
				p.ReleaseMember(m)
				for o, h := range held {
					if h == m {
						delete(held, o)
					}
				}
			default:
				p.Expire(now)
				for o := range held {
					if s, _ := p.State(o); s != Acquired {
						delete(held, o)
					}
				}
			}
			// Expired locks are released lazily: forget what expired.
			for o := range held {
				if s, _ := p.State(o); s != Acquired {
					delete(held, o)
				}
			}
			q, err := Restore(cfg, p.Snapshot())
			require.NoError(t, err)
			require.Equal(t, p.Start(), q.Start())
		}
	}
}

// Retention moving the log's start past the share start keeps the states
// from there on: acknowledged records stay done.
func TestTrimKeepsAcknowledged(t *testing.T) {
	p := New(Config{}, 100)
	p.Acquire("a", 100, offsets(100, 110), 10, t0)
	_, err := p.Acknowledge("a", []AckBatch{ack(105, 109, Accept)}, t0)
	require.NoError(t, err)
	p.Trim(103)
	require.Equal(t, int64(103), p.Start())
	for o := int64(105); o < 110; o++ {
		_, err := p.Acknowledge("a", []AckBatch{ack(o, o, Accept)}, t0)
		require.ErrorIs(t, err, ErrInvalidRecordState, "offset %d is done", o)
	}
	p.ReleaseMember("a")
	got := p.Acquire("b", 103, offsets(103, 115), 20, t0)
	require.Equal(t, []int64{103, 104, 110, 111, 112, 113, 114}, deliveredOffsets(got), "103-104 again, 105-109 never")
	p.Trim(200)
	require.Equal(t, int64(200), p.Start())
	require.Equal(t, int64(200), p.End())
}

// An Available offset the log no longer holds (compacted away) is archived
// when a read passes over it, so the start does not stall on it.
func TestAcquireArchivesVanishedOffsets(t *testing.T) {
	p := New(Config{MaxInFlight: 4}, 0)
	p.Acquire("a", 0, offsets(0, 4), 4, t0)
	p.ReleaseMember("a")
	// 1 and 2 were compacted away meanwhile.
	got := p.Acquire("b", 0, []int64{0, 3, 4, 5}, 10, t0)
	require.Equal(t, []int64{0, 3}, deliveredOffsets(got))
	_, err := p.Acknowledge("b", []AckBatch{ack(0, 0, Accept), ack(3, 3, Accept)}, t0)
	require.NoError(t, err)
	require.Equal(t, int64(4), p.Start(), "past the vanished offsets")
	// Gap, like any acknowledgement, only for what the member holds.
	p.Acquire("b", 4, []int64{4}, 1, t0)
	_, err = p.Acknowledge("c", []AckBatch{ack(4, 4, Gap)}, t0)
	require.ErrorIs(t, err, ErrInvalidRecordState)
}

func deliveredOffsets(ds []Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Offset
	}
	return out
}
