package partition

import (
	"encoding/binary"
	"math/rand/v2"
)

// Partitioner chooses the partition of each record a producer sends to one topic.
// A producer asks ForTopic once per topic and keeps the TopicPartitioner.
//
// The Partitioners of this package keep no state of their own: ForTopic may be
// called from several goroutines at once, and every TopicPartitioner it
// returns is independent of the others.
type Partitioner interface {
	// ForTopic returns a new TopicPartitioner for topic, with its own state
	// (sticky choice, round-robin position, random source).
	ForTopic(topic string) TopicPartitioner
}

// TopicPartitioner chooses partitions for one topic. It is called from one
// goroutine at a time (the producer serialises calls).
//
// -1 is the one result outside [0, n): it means that no partition can be
// chosen (ManualPartitioner without a valid requested partition, a
// PartitionerFunc choice out of range, or n <= 0), and the producer fails the
// record instead of sending it.
type TopicPartitioner interface {
	// Partition returns the partition in [0, n) for a record with the given
	// key (nil: no key). requested is the partition the record names; only
	// ManualPartitioner uses it (the others ignore it, as franz-go's do, so
	// that a record's zero-valued partition field sends nothing to
	// partition 0 by accident).
	Partition(key []byte, requested int32, n int32) int32
	// OnNewBatch tells the partitioner that the batch it was filling for partition p was sealed (full or lingered out); a sticky partitioner moves on (KIP-480).
	OnNewBatch(p int32)
}

// DefaultPartitioner returns Kafka's default partitioner, as the Java client
// has it since KIP-480 (Kafka 2.4):
//
//   - a keyed record goes to KeyPartition(key, n): the same partition the Java
//     client and franz-go choose, so keyed data lands where a Kafka client
//     would put it. An empty (non-nil, zero-length) key is a key;
//   - unkeyed records stick to one random partition until OnNewBatch reports
//     that partition's batch sealed, then stick to another random partition,
//     different from the previous one when n > 1.
func DefaultPartitioner() Partitioner { return defaultPartitioner{} }

// StickyPartitioner returns a partitioner that sends every record, keyed or
// not, to one random partition until OnNewBatch reports that partition's
// batch sealed, then to another random partition, different from the previous
// one when n > 1 (KIP-480's sticky choice, applied to keys too). Keys and
// requested partitions are ignored: records with the same key do not
// necessarily share a partition.
func StickyPartitioner() Partitioner { return stickyPartitioner{} }

// RoundRobinPartitioner returns a partitioner that sends the records of a
// topic to partitions 0, 1, ..., n-1, 0, 1, ... in turn, ignoring keys.
func RoundRobinPartitioner() Partitioner { return roundRobinPartitioner{} }

// HashPartitioner returns a partitioner that sends keyed records to
// KeyPartition(key, n), and unkeyed records round-robin, as
// RoundRobinPartitioner does. An empty (non-nil, zero-length) key is a key.
func HashPartitioner() Partitioner { return hashPartitioner{} }

// ManualPartitioner returns a partitioner that always uses the requested
// partition. A record with no requested partition (-1) or one outside [0, n)
// gets -1, which the producer turns into an error.
func ManualPartitioner() Partitioner { return manualPartitioner{} }

// PartitionerFunc returns a partitioner that asks fn for the partition of each
// record. fn gets the topic, the key (nil: no key) and the partition count
// n > 0, and must return a partition in [0, n);
// any other result, or a nil fn, makes Partition return -1, which the
// producer turns into an error.
//
// Each topic's calls to fn come from one goroutine at a time, but fn may be
// called concurrently for different topics.
func PartitionerFunc(fn func(topic string, key []byte, n int32) int32) Partitioner {
	return funcPartitioner{fn: fn}
}

// Murmur2 returns Kafka's 32-bit murmur2 hash of key (the Java client's
// Utils.murmur2: seed 0x9747b28c, m 0x5bd1e995, r 24), bit for bit, as the
// signed int32 Java returns. A nil key hashes as an empty one.
func Murmur2(key []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	// Java computes in int with unsigned shifts (>>>); uint32 arithmetic
	// wraps identically, so only the final conversion restores the sign.
	h := seed ^ uint32(len(key))
	for ; len(key) >= 4; key = key[4:] {
		k := binary.LittleEndian.Uint32(key)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(key) {
	case 3:
		h ^= uint32(key[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KeyPartition returns the partition Kafka chooses for a keyed record among n
// partitions: toPositive(murmur2(key)) % n, where toPositive clears the sign
// bit (x & 0x7fffffff; not an absolute value). It returns -1 if n <= 0.
func KeyPartition(key []byte, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return (Murmur2(key) & 0x7fffffff) % n
}

// partitionInRange reports whether p names one of n partitions.
func partitionInRange(p, n int32) bool {
	return p >= 0 && p < n
}

// stickyChooser is KIP-480's sticky choice for one topic: the partition whose
// batch is being filled, kept until that batch is sealed.
//
// Its random source is its own, so the hot path takes no lock; the owning
// TopicPartitioner's callers serialise access to it.
type stickyChooser struct {
	rng *rand.Rand
	// cur is the partition records stick to; -1 until the first record, and
	// again once OnNewBatch has reported its batch sealed.
	cur int32
	// prev is the partition whose batch was sealed last; the next choice
	// avoids it when there is another. -1 if none.
	prev int32
}

func newStickyChooser() stickyChooser {
	return newSeededStickyChooser(rand.Uint64(), rand.Uint64())
}

func newSeededStickyChooser(seed1, seed2 uint64) stickyChooser {
	return stickyChooser{rng: rand.New(rand.NewPCG(seed1, seed2)), cur: -1, prev: -1}
}

// partition returns the sticky partition among n > 0, choosing one if there
// is none yet or if the topic shrank below it.
func (s *stickyChooser) partition(n int32) int32 {
	if s.cur < 0 || s.cur >= n {
		s.cur = s.choose(n)
	}
	return s.cur
}

// choose picks uniformly among the n partitions other than prev (all of them
// when n == 1 or prev is not among them), as the Java client's
// StickyPartitionCache does.
func (s *stickyChooser) choose(n int32) int32 {
	if n == 1 {
		return 0
	}
	if s.prev < 0 || s.prev >= n {
		return s.rng.Int32N(n)
	}
	p := s.rng.Int32N(n - 1)
	if p >= s.prev {
		p++
	}
	return p
}

// onNewBatch moves on from the sticky partition when p is it. A sealed batch
// for any other partition (a keyed record's, a requested partition's) leaves
// the choice alone, as in the Java client: only the sticky batch filling up
// is a reason to switch.
func (s *stickyChooser) onNewBatch(p int32) {
	if p >= 0 && p == s.cur {
		s.prev, s.cur = p, -1
	}
}

// roundRobinCounter hands out 0, 1, ..., n-1, 0, ... for one topic. When n
// changes between calls the turn carries on where it was, wrapping at the
// new n.
type roundRobinCounter struct {
	next int32
}

func (c *roundRobinCounter) partition(n int32) int32 {
	if c.next >= n {
		c.next = 0
	}
	p := c.next
	c.next++
	return p
}

type defaultPartitioner struct{}

func (defaultPartitioner) ForTopic(string) TopicPartitioner {
	return &defaultTopicPartitioner{sticky: newStickyChooser()}
}

type defaultTopicPartitioner struct {
	sticky stickyChooser
}

func (t *defaultTopicPartitioner) Partition(key []byte, _, n int32) int32 {
	switch {
	case n <= 0:
		return -1
	case key != nil:
		return KeyPartition(key, n)
	default:
		return t.sticky.partition(n)
	}
}

func (t *defaultTopicPartitioner) OnNewBatch(p int32) { t.sticky.onNewBatch(p) }

type stickyPartitioner struct{}

func (stickyPartitioner) ForTopic(string) TopicPartitioner {
	return &stickyTopicPartitioner{sticky: newStickyChooser()}
}

type stickyTopicPartitioner struct {
	sticky stickyChooser
}

func (t *stickyTopicPartitioner) Partition(_ []byte, _, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return t.sticky.partition(n)
}

func (t *stickyTopicPartitioner) OnNewBatch(p int32) { t.sticky.onNewBatch(p) }

type roundRobinPartitioner struct{}

func (roundRobinPartitioner) ForTopic(string) TopicPartitioner {
	return &roundRobinTopicPartitioner{}
}

type roundRobinTopicPartitioner struct {
	turn roundRobinCounter
}

func (t *roundRobinTopicPartitioner) Partition(_ []byte, _, n int32) int32 {
	switch {
	case n <= 0:
		return -1
	default:
		return t.turn.partition(n)
	}
}

func (*roundRobinTopicPartitioner) OnNewBatch(int32) {}

type hashPartitioner struct{}

func (hashPartitioner) ForTopic(string) TopicPartitioner {
	return &hashTopicPartitioner{}
}

type hashTopicPartitioner struct {
	turn roundRobinCounter
}

func (t *hashTopicPartitioner) Partition(key []byte, _, n int32) int32 {
	switch {
	case n <= 0:
		return -1
	case key != nil:
		return KeyPartition(key, n)
	default:
		return t.turn.partition(n)
	}
}

func (*hashTopicPartitioner) OnNewBatch(int32) {}

type manualPartitioner struct{}

func (manualPartitioner) ForTopic(string) TopicPartitioner { return manualTopicPartitioner{} }

type manualTopicPartitioner struct{}

func (manualTopicPartitioner) Partition(_ []byte, requested, n int32) int32 {
	if partitionInRange(requested, n) {
		return requested
	}
	return -1
}

func (manualTopicPartitioner) OnNewBatch(int32) {}

type funcPartitioner struct {
	fn func(topic string, key []byte, n int32) int32
}

func (f funcPartitioner) ForTopic(topic string) TopicPartitioner {
	return &funcTopicPartitioner{topic: topic, fn: f.fn}
}

type funcTopicPartitioner struct {
	topic string
	fn    func(topic string, key []byte, n int32) int32
}

func (t *funcTopicPartitioner) Partition(key []byte, _, n int32) int32 {
	switch {
	case n <= 0:
		return -1
	case t.fn == nil:
		return -1
	}
	if p := t.fn(t.topic, key, n); partitionInRange(p, n) {
		return p
	}
	return -1
}

func (*funcTopicPartitioner) OnNewBatch(int32) {}
