package quota

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func user(u string) Entity   { return Entity{HasUser: true, User: u} }
func client(c string) Entity { return Entity{HasClient: true, ClientID: c} }
func userClient(u, c string) Entity {
	return Entity{HasUser: true, User: u, HasClient: true, ClientID: c}
}

var (
	defUser       = Entity{HasUser: true, UserDefault: true}
	defClient     = Entity{HasClient: true, ClientDefault: true}
	defUserClient = Entity{HasUser: true, UserDefault: true, HasClient: true, ClientDefault: true}
)

// Kafka's eight levels, most specific first.
func TestResolutionOrder(t *testing.T) {
	levels := []Entity{
		userClient("alice", "app"),
		{HasUser: true, User: "alice", HasClient: true, ClientDefault: true},
		user("alice"),
		{HasUser: true, UserDefault: true, HasClient: true, ClientID: "app"},
		defUserClient,
		defUser,
		client("app"),
		defClient,
	}
	qs := map[Entity]map[Key]float64{}
	for i, e := range levels {
		qs[e] = map[Key]float64{ProducerByteRate: float64(i + 1)}
	}
	for i := range levels {
		m, err := New(Config{Quotas: qs})
		require.NoError(t, err)
		v, ok := m.Limit(ProducerByteRate, "alice", "app")
		require.True(t, ok)
		require.Equal(t, float64(i+1), v, "level %d (%v) applies while configured", i+1, levels[i])
		delete(qs, levels[i])
	}
	m, err := New(Config{Quotas: qs})
	require.NoError(t, err)
	_, ok := m.Limit(ProducerByteRate, "alice", "app")
	require.False(t, ok, "nothing configured: no quota")
}

// The rate is measured over the time since the oldest sample, at least a
// window; a client over its quota waits (O-T)/T of that; a user's quota is
// one bucket for all its client ids; a default gives each user a bucket
// of its own.
func TestRecordAndThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	m, err := New(Config{Now: func() time.Time { return now }, Quotas: map[Entity]map[Key]float64{
		user("alice"): {ProducerByteRate: 100},
		defUser:       {ProducerByteRate: 50},
	}})
	require.NoError(t, err)
	// One window's worth at once is within 100 B/s.
	require.Zero(t, m.Record(ProducerByteRate, "alice", "a", 100))
	// 50 more from another client id: 150 B over 1 s; wait (150-100)/100 s.
	require.Equal(t, 500*time.Millisecond, m.Record(ProducerByteRate, "alice", "b", 50), "client ids share alice's bucket")
	// Four seconds on: 150 B over 4 s is within the quota again.
	now = now.Add(4 * time.Second)
	require.Zero(t, m.Record(ProducerByteRate, "alice", "a", 100)) // 250 B over 4 s
	require.Equal(t, 2*time.Second, m.Record(ProducerByteRate, "alice", "a", 350), "600 B over 4 s: (150-100)/100 of 4 s")
	// bob and carol each have 50 B/s of their own (the default).
	require.Zero(t, m.Record(ProducerByteRate, "bob", "x", 50))
	require.Zero(t, m.Record(ProducerByteRate, "carol", "x", 50))
	require.Equal(t, time.Second, m.Record(ProducerByteRate, "bob", "x", 50))
	// Check sends (and counts) a response while the client is within its
	// quota, even one that takes it over; once over, it holds responses
	// back without counting them.
	wait, send := m.Check(ProducerByteRate, "carol", "x", 100)
	require.True(t, send, "within quota before it: sent, however large")
	require.Equal(t, 2*time.Second, wait, "150 B over 1 s at 50 B/s")
	wait, send = m.Check(ProducerByteRate, "carol", "x", 10)
	require.False(t, send, "over quota: held back")
	require.Equal(t, 2200*time.Millisecond, wait)
	wait, send = m.Check(ProducerByteRate, "carol", "x", 0)
	require.False(t, send)
	require.Equal(t, 2*time.Second, wait, "the 10 held back bytes were not counted")
	// Eleven windows later the old samples have expired.
	now = now.Add(11 * time.Second)
	require.Zero(t, m.Record(ProducerByteRate, "alice", "a", 100))
}

func TestRequestPercentageThrottleIsCapped(t *testing.T) {
	now := time.Unix(0, 0)
	m, err := New(Config{Now: func() time.Time { return now }, Quotas: map[Entity]map[Key]float64{defClient: {RequestPercentage: 10}}})
	require.NoError(t, err)
	require.Equal(t, time.Second, m.Record(RequestPercentage, "u", "c", 1e6), "at most one window")
}

func TestAlterAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotas")
	store, qs, err := OpenFile(path)
	require.NoError(t, err)
	require.Empty(t, qs)
	m, err := New(Config{Store: store})
	require.NoError(t, err)
	errs := m.Alter([]Entity{
		user("alice"),
		{}, // no user, no client id
		client("c"),
		client("d"),
		client("e"),
	}, [][]Op{
		{{Key: ProducerByteRate, Value: 1 << 20}, {Key: RequestPercentage, Value: 12.5}},
		{{Key: ProducerByteRate, Value: 1}},
		{{Key: "bogus", Value: 1}},
		{{Key: ConsumerByteRate, Value: 1.5}},
		{{Key: ConsumerByteRate, Value: 1}, {Key: ConsumerByteRate, Value: 2}},
	}, false)
	require.NoError(t, errs[0])
	for _, e := range errs[1:] {
		require.ErrorIs(t, e, ErrInvalid)
	}
	_, qs, err = OpenFile(path)
	require.NoError(t, err)
	require.Equal(t, map[Entity]map[Key]float64{user("alice"): {ProducerByteRate: 1 << 20, RequestPercentage: 12.5}}, qs)

	require.NoError(t, m.Alter([]Entity{user("alice")}, [][]Op{{{Key: ProducerByteRate, Remove: true}, {Key: RequestPercentage, Remove: true}}}, false)[0])
	require.Empty(t, m.Quotas(), "an entity with no keys left is gone")
	require.NoError(t, m.Alter([]Entity{user("bob")}, [][]Op{{{Key: ProducerByteRate, Value: 5}}}, true)[0])
	require.Empty(t, m.Quotas(), "validate only changes nothing")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[3] ^= 1
	require.NoError(t, os.WriteFile(path, data, 0o600))
	_, _, err = OpenFile(path)
	require.ErrorIs(t, err, ErrBadFile)
}

// Buckets of entities not seen for Samples windows are dropped: client
// ids under a default quota cannot pile up.
func TestIdleBucketsArePruned(t *testing.T) {
	now := time.Unix(0, 0)
	m, err := New(Config{Now: func() time.Time { return now }, Quotas: map[Entity]map[Key]float64{defClient: {ProducerByteRate: 100}}})
	require.NoError(t, err)
	for i := range 1000 {
		m.Record(ProducerByteRate, "u", fmt.Sprint("client-", i), 1)
	}
	require.Equal(t, 1000, m.Buckets())
	now = now.Add(12 * time.Second)
	m.Record(ProducerByteRate, "u", "late", 1)
	require.Equal(t, 1, m.Buckets())
}

// sharedStore is a VersionedStore shared by several Managers, as a
// cluster's metadata log is.
type sharedStore struct {
	version int64
	data    []byte
}

var errStale = fmt.Errorf("stale")

func (s *sharedStore) Save(map[Entity]map[Key]float64) error { return fmt.Errorf("unversioned save") }
func (s *sharedStore) SaveAt(qs map[Entity]map[Key]float64, base int64) error {
	if base != s.version {
		return errStale
	}
	data, err := Marshal(qs)
	if err != nil {
		return err
	}
	s.version, s.data = base+1, data
	return nil
}

// Two Managers on one VersionedStore: a change made from an old version
// is refused and changes nothing; after Sync it is made again on top of
// the other's, and the synced quotas are enforced.
func TestVersionedStoreAndSync(t *testing.T) {
	st := &sharedStore{}
	m1, err := New(Config{Store: st})
	require.NoError(t, err)
	m2, err := New(Config{})
	require.NoError(t, err)
	m2.SetStore(st)

	set := func(m *Manager, e Entity, k Key, v float64) error {
		return m.Alter([]Entity{e}, [][]Op{{{Key: k, Value: v}}}, false)[0]
	}
	require.NoError(t, set(m1, user("alice"), ProducerByteRate, 1000))
	require.ErrorIs(t, set(m2, user("bob"), ProducerByteRate, 2000), errStale)
	require.Empty(t, m2.Quotas())

	qs, err := Unmarshal(st.data)
	require.NoError(t, err)
	require.NoError(t, m2.Sync(qs, st.version))
	v, ok := m2.Limit(ProducerByteRate, "alice", "c")
	require.True(t, ok)
	require.Equal(t, 1000.0, v)
	require.NoError(t, set(m2, user("bob"), ProducerByteRate, 2000))
	require.Equal(t, int64(2), st.version)
	require.Equal(t, int64(2), m2.Version())

	// Stale versions change nothing; invalid values are refused whole.
	require.NoError(t, m2.Sync(nil, 1))
	require.Len(t, m2.Quotas(), 2)
	require.ErrorIs(t, m1.Sync(map[Entity]map[Key]float64{user("x"): {ProducerByteRate: -1}}, 5), ErrInvalid)
	require.Len(t, m1.Quotas(), 1)

	// Usage is held to the synced quota.
	qs, err = Unmarshal(st.data)
	require.NoError(t, err)
	require.NoError(t, m1.Sync(qs, st.version))
	_, send := m1.Check(ProducerByteRate, "bob", "c", 10_000)
	require.True(t, send)
	wait := m1.Record(ProducerByteRate, "bob", "c", 10_000)
	require.Positive(t, wait, "bob's synced 2000 B/s quota throttles 10 KB at once")
}
