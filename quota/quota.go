// Package quota is Kafka's client quotas: byte rates for producers and
// consumers and a share of request handling time, set for (user,
// client-id) entities with defaults, measured over sampled windows, and
// enforced by delaying the client (KIP-13, KIP-55, KIP-124, KIP-219).
//
// A quota is configured for an entity: a user, a client id, or both, each
// named or the default (<default>: every user, or client id, without a
// quota of its own). The quota that applies to a (user, client-id) pair is
// the most specific configured one, in Kafka's order:
//
//	1 user=U, client-id=C           5 user=<default>, client-id=<default>
//	2 user=U, client-id=<default>   6 user=<default>
//	3 user=U                        7 client-id=C
//	4 user=<default>, client-id=C   8 client-id=<default>
//
// Usage is counted per matched entity: a quota for user=U is shared by all
// of U's connections and client ids; a default gives each user (or client
// id) a bucket of its own with the default value.
//
// Usage is a rate over Samples windows of Window each (Kafka's
// quota.window.num 11 and quota.window.size.seconds 1): the sum of the
// samples over the time since the oldest began, but never less than one
// window (Kafka: Samples-1 windows; see rate). A request that brings the
// rate O over the quota T is answered, and the client then waits (O-T)/T
// of that time: the delay that brings the rate back to the quota.
package quota

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Key names a quota (Kafka's keys).
type Key string

// Quota keys.
const (
	// ProducerByteRate is bytes per second of Produce requests.
	ProducerByteRate Key = "producer_byte_rate"
	// ConsumerByteRate is bytes per second of Fetch responses.
	ConsumerByteRate Key = "consumer_byte_rate"
	// RequestPercentage is the share of one request handler's time, in
	// percent (100: one handler busy all the time).
	RequestPercentage Key = "request_percentage"
	// ControllerMutationRate is partitions created or deleted per second.
	// CreateTopics, CreatePartitions and DeleteTopics count against it;
	// newer versions of them are refused THROTTLING_QUOTA_EXCEEDED while
	// the client is over it (KIP-599).
	ControllerMutationRate Key = "controller_mutation_rate"
)

// Keys are the quota keys a user or client-id entity may have.
var Keys = []Key{ProducerByteRate, ConsumerByteRate, RequestPercentage, ControllerMutationRate}

// Entity is what a quota is set for: a user, a client id, or both (Has*),
// each a name or the default.
type Entity struct {
	HasUser     bool
	UserDefault bool
	User        string
	HasClient   bool
	// ClientDefault is the default client id.
	ClientDefault bool
	ClientID      string
}

// String is Kafka's notation: "user=alice,client-id=<default>".
func (e Entity) String() string {
	var parts []string
	if e.HasUser {
		parts = append(parts, "user="+name(e.UserDefault, e.User))
	}
	if e.HasClient {
		parts = append(parts, "client-id="+name(e.ClientDefault, e.ClientID))
	}
	return strings.Join(parts, ",")
}

func name(def bool, n string) string {
	if def {
		return "<default>"
	}
	return n
}

// ErrInvalid means an entity or value Kafka would refuse (INVALID_REQUEST).
var ErrInvalid = errors.New("quota: invalid quota")

// Validate checks an entity: a user or a client id or both.
func (e Entity) Validate() error {
	if !e.HasUser && !e.HasClient {
		return fmt.Errorf("%w: an entity needs a user or a client id", ErrInvalid)
	}
	return nil
}

// ValidValue checks a quota value for a key.
func ValidValue(k Key, v float64) error {
	known := false
	for _, kk := range Keys {
		known = known || kk == k
	}
	switch {
	case !known:
		return fmt.Errorf("%w: unknown key %q", ErrInvalid, k)
	case !(v > 0) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %s must be positive, not %v", ErrInvalid, k, v)
	case k != RequestPercentage && k != ControllerMutationRate && v != math.Trunc(v):
		return fmt.Errorf("%w: %s must be a whole number of bytes, not %v", ErrInvalid, k, v)
	}
	return nil
}

// Store keeps a Manager's quotas: Save replaces them all, durably.
type Store interface {
	Save(map[Entity]map[Key]float64) error
}

// VersionedStore is a Store shared by several Managers: a cluster's
// nodes, whose quotas live in the cluster's metadata log. Each saved set
// has a version, one more than the set it was made from; a Manager saves
// with SaveAt, naming the version its quotas are at, and the store refuses
// the change if another was saved since. The Manager then learns the newer
// quotas through Sync, and the change can be made again.
type VersionedStore interface {
	Store
	// SaveAt replaces the quotas of version base with qs, as version
	// base+1, or fails if the stored ones are no longer at base.
	SaveAt(qs map[Entity]map[Key]float64, base int64) error
}

// Config configures a Manager.
type Config struct {
	// Window and Samples shape the measurement (quota.window.size.seconds,
	// quota.window.num). Defaults 1 s and 11.
	Window  time.Duration
	Samples int
	// Quotas are the quotas to start with (a Store's, as loaded).
	Quotas map[Entity]map[Key]float64
	// Store keeps changes; nil: in memory only.
	Store Store
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

// Manager holds the configured quotas and the usage they are measured
// against. Safe for concurrent use.
type Manager struct {
	cfg Config

	mu      sync.Mutex
	quotas  map[Entity]map[Key]float64
	buckets map[bucketKey]*rate
	pruned  time.Time // when buckets were last pruned
	storeMu sync.Mutex
	store   Store // cfg.Store, or SetStore's; under storeMu
	version int64 // of the quotas, with a VersionedStore; under storeMu
}

// bucketKey is one usage counter: a key, the entity whose quota applies
// and the user and client id it is counted for.
type bucketKey struct {
	key          Key
	entity       Entity
	user, client string
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	if cfg.Samples < 2 {
		cfg.Samples = 11
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Manager{cfg: cfg, store: cfg.Store, quotas: map[Entity]map[Key]float64{}, buckets: map[bucketKey]*rate{}}
	for e, vs := range cfg.Quotas {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		for k, v := range vs {
			if err := ValidValue(k, v); err != nil {
				return nil, err
			}
		}
		m.quotas[e] = clone(vs)
	}
	return m, nil
}

func clone(vs map[Key]float64) map[Key]float64 {
	out := make(map[Key]float64, len(vs))
	for k, v := range vs {
		out[k] = v
	}
	return out
}

// resolve finds the quota for (user, client) under key: the value, the
// entity it is configured for, and ok false if none applies. Called with
// mu held.
func (m *Manager) resolve(key Key, user, client string) (float64, Entity, bool) {
	for _, e := range []Entity{
		{HasUser: true, User: user, HasClient: true, ClientID: client},
		{HasUser: true, User: user, HasClient: true, ClientDefault: true},
		{HasUser: true, User: user},
		{HasUser: true, UserDefault: true, HasClient: true, ClientID: client},
		{HasUser: true, UserDefault: true, HasClient: true, ClientDefault: true},
		{HasUser: true, UserDefault: true},
		{HasClient: true, ClientID: client},
		{HasClient: true, ClientDefault: true},
	} {
		if v, ok := m.quotas[e][key]; ok {
			return v, e, true
		}
	}
	return 0, Entity{}, false
}

// Limit is the quota that applies to (user, client) under key, if any.
func (m *Manager) Limit(key Key, user, client string) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, _, ok := m.resolve(key, user, client)
	return v, ok
}

// Record counts value (bytes, or percent-seconds of handling time) for
// (user, client) under key and returns how long the client is to wait: 0
// while within its quota or without one.
func (m *Manager) Record(key Key, user, client string, value float64) time.Duration {
	d, _ := m.record(key, user, client, value, true)
	return d
}

// Check is Record for a response that may be held back (Kafka's Fetch
// under consumer_byte_rate): send is false when the client is over its
// quota already, before this response - it is then to be answered empty,
// and the value is not counted. A response the client is within its quota
// for is sent and counted even if it takes the client over (the wait says
// by how much): one response larger than a window's quota would otherwise
// never be sent, and the consumer never get past it.
func (m *Manager) Check(key Key, user, client string, value float64) (wait time.Duration, send bool) {
	return m.record(key, user, client, value, false)
}

func (m *Manager) record(key Key, user, client string, value float64, keepIfOver bool) (time.Duration, bool) {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prune(now)
	limit, e, ok := m.resolve(key, user, client)
	if !ok {
		return 0, true
	}
	bk := bucketKey{key: key, entity: e}
	if e.HasUser {
		bk.user = user
	}
	if e.HasClient {
		bk.client = client
	}
	r := m.buckets[bk]
	if r == nil {
		r = newRate(m.cfg.Window, m.cfg.Samples, now)
		m.buckets[bk] = r
	}
	before, _ := r.rate(now)
	r.add(value, now)
	observed, length := r.rate(now)
	if observed <= limit {
		return 0, true
	}
	wait := time.Duration((observed - limit) / limit * float64(length))
	if key == RequestPercentage {
		wait = min(wait, m.cfg.Window) // Kafka caps the request quota's throttle at one window
	}
	if !keepIfOver && before > limit {
		r.add(-value, now)
		return wait, false
	}
	return wait, true
}

// prune drops the usage of entities not seen for Samples windows, at most
// once a window: client ids are the client's to choose, and a default
// quota would otherwise keep a bucket for every one ever seen. Called with
// mu held.
func (m *Manager) prune(now time.Time) {
	if now.Sub(m.pruned) < m.cfg.Window {
		return
	}
	m.pruned = now
	idle := time.Duration(m.cfg.Samples) * m.cfg.Window
	for k, r := range m.buckets {
		if n := len(r.samples); n == 0 || now.Sub(r.samples[n-1].start) >= idle {
			delete(m.buckets, k)
		}
	}
}

// Buckets is the number of usage counters kept (for tests and metrics).
func (m *Manager) Buckets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}

// Quotas returns the configured quotas.
func (m *Manager) Quotas() map[Entity]map[Key]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Entity]map[Key]float64, len(m.quotas))
	for e, vs := range m.quotas {
		out[e] = clone(vs)
	}
	return out
}

// Op changes one key of an entity: sets it to Value, or removes it.
type Op struct {
	Key    Key
	Value  float64
	Remove bool
}

// Alter applies each entity's ops (AlterClientQuotas): an entity whose
// ops are invalid (an unknown key, a value not positive, a key twice) gets
// its error and is not changed; the others are, and saved before Alter
// returns (validateOnly: checked only). A failed save changes nothing and
// is every valid entity's error.
func (m *Manager) Alter(entities []Entity, ops [][]Op, validateOnly bool) []error {
	errs := make([]error, len(entities))
	for i, e := range entities {
		errs[i] = e.Validate()
		seen := map[Key]bool{}
		for _, op := range ops[i] {
			if errs[i] != nil {
				break
			}
			if seen[op.Key] {
				errs[i] = fmt.Errorf("%w: %s twice for %v", ErrInvalid, op.Key, e)
				break
			}
			seen[op.Key] = true
			if op.Remove {
				if err := ValidValue(op.Key, 1); err != nil {
					errs[i] = err
				}
				continue
			}
			errs[i] = ValidValue(op.Key, op.Value)
		}
	}
	if validateOnly {
		return errs
	}
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	m.mu.Lock()
	before := make(map[Entity]map[Key]float64, len(m.quotas))
	for e, vs := range m.quotas {
		before[e] = clone(vs)
	}
	valid := 0
	for i, e := range entities {
		if errs[i] != nil {
			continue
		}
		valid++
		vs := m.quotas[e]
		if vs == nil {
			vs = map[Key]float64{}
		}
		for _, op := range ops[i] {
			if op.Remove {
				delete(vs, op.Key)
			} else {
				vs[op.Key] = op.Value
			}
		}
		if len(vs) == 0 {
			delete(m.quotas, e)
		} else {
			m.quotas[e] = vs
		}
	}
	snapshot := make(map[Entity]map[Key]float64, len(m.quotas))
	for e, vs := range m.quotas {
		snapshot[e] = clone(vs)
	}
	m.mu.Unlock()
	if valid == 0 {
		return errs // nothing to save
	}
	if err := m.save(snapshot); err != nil {
		m.mu.Lock()
		m.quotas = before
		m.mu.Unlock()
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

// save stores qs, the quotas after a change; called with storeMu.
func (m *Manager) save(qs map[Entity]map[Key]float64) error {
	switch s := m.store.(type) {
	case nil:
		return nil
	case VersionedStore:
		if err := s.SaveAt(qs, m.version); err != nil {
			return err
		}
		m.version++
		return nil
	default:
		return s.Save(qs)
	}
}

// SetStore makes s keep the Manager's changes from now on (package
// transport gives a cluster node's Manager the cluster's metadata log).
func (m *Manager) SetStore(s Store) {
	m.storeMu.Lock()
	m.store = s
	m.storeMu.Unlock()
}

// Sync installs quotas saved elsewhere as version: another node's change,
// read from the VersionedStore. Quotas at a version the Manager has
// reached already change nothing. It waits for a change in progress to
// finish. An invalid entity or value is an error and changes nothing.
func (m *Manager) Sync(qs map[Entity]map[Key]float64, version int64) error {
	next := make(map[Entity]map[Key]float64, len(qs))
	for e, vs := range qs {
		if err := e.Validate(); err != nil {
			return err
		}
		for k, v := range vs {
			if err := ValidValue(k, v); err != nil {
				return err
			}
		}
		if len(vs) > 0 {
			next[e] = clone(vs)
		}
	}
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	if version <= m.version {
		return nil
	}
	m.mu.Lock()
	m.quotas = next
	m.mu.Unlock()
	m.version = version
	return nil
}

// Version is the version of the quotas (see VersionedStore): 0 until a
// VersionedStore saves or Sync installs some.
func (m *Manager) Version() int64 {
	m.storeMu.Lock()
	defer m.storeMu.Unlock()
	return m.version
}

// Sorted returns the entities of qs in a stable order.
func Sorted(qs map[Entity]map[Key]float64) []Entity {
	out := make([]Entity, 0, len(qs))
	for e := range qs {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// rate is a sampled rate: Samples windows of Window each.
type rate struct {
	window  time.Duration
	samples []sample
}

type sample struct {
	start time.Time
	value float64
}

func newRate(window time.Duration, n int, now time.Time) *rate {
	return &rate{window: window, samples: make([]sample, 0, n)}
}

// add adds v to the current sample, starting a new one (dropping the
// oldest) when the current one has lasted a window.
func (r *rate) add(v float64, now time.Time) {
	n := len(r.samples)
	if n == 0 || now.Sub(r.samples[n-1].start) >= r.window {
		if n == cap(r.samples) {
			copy(r.samples, r.samples[1:])
			r.samples = r.samples[:n-1]
		}
		r.samples = append(r.samples, sample{start: now})
		n = len(r.samples)
	}
	r.samples[n-1].value += v
}

// rate is the rate now and the time it is measured over: the samples not
// older than Samples windows, over the time since the oldest began, never
// less than one window.
//
// Kafka measures over at least Samples-1 windows instead, so a new client
// may first send ten seconds' worth at once - and, when the sample holding
// that burst expires, again: its rate over any ten seconds swings between
// nothing and twice its quota. From one window the first burst is one
// window's worth, usage spreads evenly over the samples, and a sample
// expiring takes its share of the time with it.
func (r *rate) rate(now time.Time) (float64, time.Duration) {
	full := time.Duration(cap(r.samples)) * r.window
	var sum float64
	oldest := now
	for _, s := range r.samples {
		if now.Sub(s.start) >= full {
			continue // expired
		}
		sum += s.value
		if s.start.Before(oldest) {
			oldest = s.start
		}
	}
	length := max(now.Sub(oldest), r.window)
	return sum / length.Seconds(), length
}
