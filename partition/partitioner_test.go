package partition

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionCounts are the partition counts the cross-checks run over.
var partitionCounts = []int32{1, 2, 3, 7, 12, 100}

// TestMurmur2KafkaVectors checks Murmur2 against the expectations of Kafka's
// own test, UtilsTest.testMurmur2 (apache/kafka,
// clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, commit
// f55581dc73953c3509a4702433aeeeddc2970779), and against the values Akka's
// Murmur2Spec records from Kafka's Utils.murmur2 (akka/akka,
// akka-cluster-sharding-typed/src/test/scala/akka/cluster/sharding/typed/internal/Murmur2Spec.scala),
// which add keys of length 1 and 5 mod 4 that Kafka's cases lack.
func TestMurmur2KafkaVectors(t *testing.T) {
	tests := []struct {
		source string
		key    []byte
		want   int32
	}{
		{"kafka UtilsTest", []byte("21"), -973932308},
		{"kafka UtilsTest", []byte("foobar"), -790332482},
		{"kafka UtilsTest", []byte("a-little-bit-long-string"), -985981536},
		{"kafka UtilsTest", []byte("a-little-bit-longer-string"), -1486304829},
		{"kafka UtilsTest", []byte("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971},
		{"kafka UtilsTest", []byte{'a', 'b', 'c'}, 479470107},
		{"akka Murmur2Spec", []byte("1"), -1993445489},
		{"akka Murmur2Spec", []byte("12"), 126087238},
		{"akka Murmur2Spec", []byte("123"), -267702483},
		{"akka Murmur2Spec", []byte("1234"), -1614185708},
		{"akka Murmur2Spec", []byte("12345"), -1188365604},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%q", tc.source, tc.key), func(t *testing.T) {
			require.Equal(t, tc.want, Murmur2(tc.key))
		})
	}
}

// TestMurmur2MatchesJavaTransliteration checks every bit of Murmur2, for every
// key length mod 4, against a line-by-line rendering of Kafka's Java code in
// signed int32 arithmetic with Java's >>> as a uint32 shift. (franz-go's
// murmur2 is unexported; the cross-checks below see only 31 bits of it.)
func TestMurmur2MatchesJavaTransliteration(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		key := randomKey(rng, 70)
		require.Equal(t, javaMurmur2(key), Murmur2(key), "key %x", key)
	}
}

// javaMurmur2 renders org.apache.kafka.common.utils.Utils.murmur2 in Go
// int32 arithmetic, as a reference implementation for tests.
func javaMurmur2(data []byte) int32 {
	ushr := func(x int32, s uint) int32 { return int32(uint32(x) >> s) }
	length := int32(len(data))
	seed := int32(-1756908916) // 0x9747b28c
	const m = int32(0x5bd1e995)
	const r = 24
	h := seed ^ length
	length4 := length / 4
	for i := int32(0); i < length4; i++ {
		i4 := i * 4
		k := int32(data[i4]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m
		k ^= ushr(k, r)
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= int32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= int32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= int32(data[tail])
		h *= m
	}
	h ^= ushr(h, 13)
	h *= m
	h ^= ushr(h, 15)
	return h
}

func TestMurmur2NilAndEmptyKeyHashAlike(t *testing.T) {
	require.Equal(t, Murmur2([]byte{}), Murmur2(nil))
}

// TestKeyPartitionClearsSignBit checks Kafka's toPositive on a key whose
// murmur2 is negative: the sign bit is cleared (x & 0x7fffffff), which is not
// the absolute value, and the two choose different partitions.
func TestKeyPartitionClearsSignBit(t *testing.T) {
	key := []byte("21")
	require.Equal(t, int32(-973932308), Murmur2(key))
	// -973932308 & 0x7fffffff == 1173551340; |-973932308| == 973932308.
	tests := []struct {
		n, want, abs int32
	}{
		{1, 0, 0},
		{3, 0, 2},
		{7, 3, 6},
		{12, 0, 8},
		{100, 40, 8},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, KeyPartition(key, tc.n), "n=%d", tc.n)
		require.Equal(t, int32(1173551340%tc.n), tc.want, "n=%d", tc.n)
		require.Equal(t, int32(973932308%tc.n), tc.abs, "n=%d", tc.n)
	}
}

// TestKeyPartitionMatchesFranzGo runs thousands of random keys through our
// keyed choice and through franz-go's StickyKeyPartitioner with its Kafka
// hasher (the Java client's keyed choice), and requires the same partition.
func TestKeyPartitionMatchesFranzGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := [][]byte{{}, {0}, {0xff, 0xff, 0xff, 0xff}, []byte("21")}
	for i := 0; i < 4000; i++ {
		keys = append(keys, randomKey(rng, 100))
	}
	for _, n := range partitionCounts {
		franz := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		ours := DefaultPartitioner().ForTopic("t")
		hash := HashPartitioner().ForTopic("t")
		for _, key := range keys {
			want := int32(franz.Partition(&kgo.Record{Key: key}, int(n)))
			require.Equal(t, want, KeyPartition(key, n), "key %x n=%d", key, n)
			require.Equal(t, want, ours.Partition(key, -1, n), "default: key %x n=%d", key, n)
			require.Equal(t, want, hash.Partition(key, -1, n), "hash: key %x n=%d", key, n)
		}
	}
}

// FuzzKeyPartitionMatchesFranzGo extends TestKeyPartitionMatchesFranzGo to
// fuzzed keys and partition counts.
func FuzzKeyPartitionMatchesFranzGo(f *testing.F) {
	f.Add([]byte(""), int32(1))
	f.Add([]byte("21"), int32(3))
	f.Add([]byte("foobar"), int32(12))
	f.Add([]byte("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), int32(100))
	f.Add([]byte{0x80, 0, 0, 0, 0xff}, int32(2147483647))
	f.Fuzz(func(t *testing.T, key []byte, n int32) {
		if key == nil {
			key = []byte{} // the fuzzer may pass nil; nil is "no key"
		}
		if n <= 0 {
			require.Equal(t, int32(-1), KeyPartition(key, n))
			return
		}
		franz := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		require.Equal(t, int32(franz.Partition(&kgo.Record{Key: key}, int(n))), KeyPartition(key, n))
	})
}

// TestEmptyKeyIsAKey: Kafka hashes an empty byte array like any other key,
// so an empty key always lands on KeyPartition's choice, never on the sticky
// partition.
func TestEmptyKeyIsAKey(t *testing.T) {
	for _, n := range partitionCounts {
		want := KeyPartition([]byte{}, n)
		for _, p := range []Partitioner{DefaultPartitioner(), HashPartitioner()} {
			tp := p.ForTopic("t")
			for i := 0; i < 50; i++ {
				require.Equal(t, want, tp.Partition([]byte{}, -1, n), "n=%d", n)
				tp.OnNewBatch(want)
				tp.OnNewBatch(tp.Partition(nil, -1, n))
			}
		}
	}
}

// stickyCases are the partitioners whose unkeyed records stick to a partition
// until OnNewBatch, with the key they are tested with: DefaultPartitioner
// for unkeyed records, StickyPartitioner for keyed and unkeyed ones.
func stickyCases() []struct {
	name string
	p    Partitioner
	key  []byte
} {
	return []struct {
		name string
		p    Partitioner
		key  []byte
	}{
		{"default/unkeyed", DefaultPartitioner(), nil},
		{"sticky/unkeyed", StickyPartitioner(), nil},
		{"sticky/keyed", StickyPartitioner(), []byte("k")},
		{"sticky/empty-key", StickyPartitioner(), []byte{}},
	}
}

// TestStickyStaysUntilOnNewBatch follows Kafka's StickyPartitionCacheTest and
// BuiltInPartitionerTest.testStickyPartitioning (apache/kafka,
// clients/src/test/java/org/apache/kafka/clients/producer/internals/): the
// partition holds until its batch is sealed, then changes; a sealed batch of
// another partition changes nothing.
func TestStickyStaysUntilOnNewBatch(t *testing.T) {
	for _, tc := range stickyCases() {
		for _, n := range []int32{2, 3, 7, 100} {
			t.Run(fmt.Sprintf("%s/n=%d", tc.name, n), func(t *testing.T) {
				tp := tc.p.ForTopic("t")
				cur := tp.Partition(tc.key, -1, n)
				for batch := 0; batch < 200; batch++ {
					require.True(t, cur >= 0 && cur < n)
					for i := 0; i < 20; i++ {
						require.Equal(t, cur, tp.Partition(tc.key, -1, n))
					}
					// Sealed batches of other partitions (keyed records',
					// requested partitions') leave the choice alone.
					tp.OnNewBatch((cur + 1) % n)
					tp.OnNewBatch(-1)
					require.Equal(t, cur, tp.Partition(tc.key, -1, n))

					tp.OnNewBatch(cur)
					next := tp.Partition(tc.key, -1, n)
					require.NotEqual(t, cur, next, "batch %d", batch)
					// A repeated notice for the old partition is stale.
					tp.OnNewBatch(cur)
					require.Equal(t, next, tp.Partition(tc.key, -1, n))
					cur = next
				}
			})
		}
	}
}

// TestStickyTwoPartitionsAlternate: with two partitions, "different from the
// previous one" leaves one choice.
func TestStickyTwoPartitionsAlternate(t *testing.T) {
	for _, tc := range stickyCases() {
		tp := tc.p.ForTopic("t")
		cur := tp.Partition(tc.key, -1, 2)
		for i := 0; i < 100; i++ {
			tp.OnNewBatch(cur)
			next := tp.Partition(tc.key, -1, 2)
			require.Equal(t, 1-cur, next, tc.name)
			cur = next
		}
	}
}

// TestStickyOnePartition: as BuiltInPartitionerTest checks, switching works
// with one partition - it always switches to partition 0.
func TestStickyOnePartition(t *testing.T) {
	for _, tc := range stickyCases() {
		tp := tc.p.ForTopic("t")
		for i := 0; i < 100; i++ {
			require.Equal(t, int32(0), tp.Partition(tc.key, -1, 1), tc.name)
			tp.OnNewBatch(0)
		}
	}
}

// TestStickySpreadsUniformly: over many batches the sticky choice visits
// every partition about equally. With 4 partitions each expects 25% of
// 10000 batches (standard deviation under 0.5%), so 15%-35% fails only on a
// broken choice, never by chance.
func TestStickySpreadsUniformly(t *testing.T) {
	const n, batches = 4, 10000
	for _, tc := range stickyCases() {
		t.Run(tc.name, func(t *testing.T) {
			tp := tc.p.ForTopic("t")
			var counts [n]int
			for i := 0; i < batches; i++ {
				p := tp.Partition(tc.key, -1, n)
				counts[p]++
				tp.OnNewBatch(p)
			}
			for p, c := range counts {
				require.GreaterOrEqual(t, c, batches*15/100, "partition %d: %v", p, counts)
				require.LessOrEqual(t, c, batches*35/100, "partition %d: %v", p, counts)
			}
		})
	}
}

// TestStickyChooserAvoidsPrevious checks the choice after a sealed batch is
// uniform over the other partitions, including the one after the previous
// (which a "previous+1 on collision" shortcut would favour).
func TestStickyChooserAvoidsPrevious(t *testing.T) {
	const n, rounds = 5, 20000
	s := newSeededStickyChooser(5, 6)
	var counts [n]int
	for i := 0; i < rounds; i++ {
		s.cur, s.prev = -1, 2
		counts[s.partition(n)]++
	}
	require.Zero(t, counts[2])
	for p, c := range counts {
		if p != 2 {
			// 25% expected each; standard deviation about 0.3%.
			require.InDelta(t, rounds/4, c, rounds/20, "partition %d: %v", p, counts)
		}
	}
}

// TestStickyFollowsPartitionCount: if the topic grows, the sticky partition
// stays; if the count drops below it, a partition in range is chosen.
func TestStickyFollowsPartitionCount(t *testing.T) {
	for _, tc := range stickyCases() {
		tp := tc.p.ForTopic("t")
		cur := tp.Partition(tc.key, -1, 10)
		require.Equal(t, cur, tp.Partition(tc.key, -1, 20), tc.name)
		for n := int32(1); n <= 10; n++ {
			p := tp.Partition(tc.key, -1, n)
			require.True(t, p >= 0 && p < n, "%s: n=%d p=%d", tc.name, n, p)
		}
	}
}

func TestStickyPartitionerIgnoresRequested(t *testing.T) {
	tp := StickyPartitioner().ForTopic("t")
	cur := tp.Partition(nil, -1, 100)
	for r := int32(0); r < 100; r++ {
		require.Equal(t, cur, tp.Partition(nil, r, 100))
	}
}

func TestRoundRobinCycles(t *testing.T) {
	for _, n := range partitionCounts {
		tp := RoundRobinPartitioner().ForTopic("t")
		other := RoundRobinPartitioner().ForTopic("u")
		for cycle := 0; cycle < 3; cycle++ {
			for want := int32(0); want < n; want++ {
				key := []byte(fmt.Sprint(cycle, want))
				if want%2 == 0 {
					key = nil
				}
				require.Equal(t, want, tp.Partition(key, -1, n), "n=%d cycle %d", n, cycle)
				tp.OnNewBatch(want)
			}
		}
		// Each TopicPartitioner keeps its own turn.
		require.Equal(t, int32(0), other.Partition(nil, -1, n))
	}
}

func TestRoundRobinIgnoresRequested(t *testing.T) {
	tp := RoundRobinPartitioner().ForTopic("t")
	require.Equal(t, int32(0), tp.Partition(nil, -1, 4))
	require.Equal(t, int32(1), tp.Partition(nil, 3, 4))
	require.Equal(t, int32(2), tp.Partition(nil, -1, 4))
}

func TestRoundRobinFollowsPartitionCount(t *testing.T) {
	tp := RoundRobinPartitioner().ForTopic("t")
	var got []int32
	for _, n := range []int32{4, 4, 4, 2, 2, 5, 5, 5, 5} {
		got = append(got, tp.Partition(nil, -1, n))
	}
	require.Equal(t, []int32{0, 1, 2, 0, 1, 2, 3, 4, 0}, got)
}

func TestHashPartitioner(t *testing.T) {
	const n = 7
	tp := HashPartitioner().ForTopic("t")
	rng := rand.New(rand.NewPCG(7, 8))
	turn := int32(0)
	for i := 0; i < 1000; i++ {
		if i%3 == 0 {
			key := randomKey(rng, 20)
			require.Equal(t, KeyPartition(key, n), tp.Partition(key, -1, n))
			continue
		}
		// Unkeyed records go round-robin; keyed ones don't take a turn.
		require.Equal(t, turn, tp.Partition(nil, -1, n))
		turn = (turn + 1) % n
	}
}

func TestManualPartitioner(t *testing.T) {
	tp := ManualPartitioner().ForTopic("t")
	for _, key := range [][]byte{nil, {}, []byte("k")} {
		for r := int32(0); r < 5; r++ {
			require.Equal(t, r, tp.Partition(key, r, 5))
		}
		for _, r := range []int32{-1, -2, 5, 6, 1 << 30} {
			require.Equal(t, int32(-1), tp.Partition(key, r, 5), "requested %d", r)
		}
	}
}

// TestRequestedPartitionWins: where documented, a requested partition in
// [0, n) wins over keys and over the sticky or round-robin choice, and one
// out of range is ignored.
// Only ManualPartitioner uses the requested partition; the others ignore
// it, as franz-go's do, so a record whose partition field was left at zero
// is not sent to partition 0 by accident.
func TestOnlyManualUsesRequested(t *testing.T) {
	const n = 5
	manual := ManualPartitioner().ForTopic("t")
	for r := int32(0); r < n; r++ {
		require.Equal(t, r, manual.Partition([]byte("k"), r, n))
	}
	key := []byte("k")
	want := KeyPartition(key, n)
	for name, p := range map[string]Partitioner{"default": DefaultPartitioner(), "hash": HashPartitioner()} {
		tp := p.ForTopic("t")
		for r := int32(-1); r < n+2; r++ {
			require.Equal(t, want, tp.Partition(key, r, n), "%s: requested %d", name, r)
		}
	}
	fn := PartitionerFunc(func(string, []byte, int32) int32 { return 4 }).ForTopic("t")
	for r := int32(-1); r < n; r++ {
		require.Equal(t, int32(4), fn.Partition(nil, r, n))
	}
}

func TestPartitionerFunc(t *testing.T) {
	type call struct {
		topic string
		key   string
		n     int32
	}
	var calls []call
	choice := int32(2)
	p := PartitionerFunc(func(topic string, key []byte, n int32) int32 {
		calls = append(calls, call{topic, string(key), n})
		return choice
	})
	tp := p.ForTopic("orders")
	require.Equal(t, int32(2), tp.Partition([]byte("k"), -1, 3))
	require.Equal(t, int32(2), tp.Partition(nil, 1, 3)) // requested is ignored
	require.Equal(t, []call{{"orders", "k", 3}, {"orders", "", 3}}, calls)

	for _, bad := range []int32{-1, -5, 3, 100} {
		choice = bad
		require.Equal(t, int32(-1), tp.Partition([]byte("k"), -1, 3), "fn returned %d", bad)
	}

	nilFn := PartitionerFunc(nil).ForTopic("t")
	require.Equal(t, int32(-1), nilFn.Partition([]byte("k"), -1, 3))
	require.Equal(t, int32(-1), nilFn.Partition([]byte("k"), 1, 3))
}

// allPartitioners lists every partitioner of the package by name.
func allPartitioners() map[string]Partitioner {
	return map[string]Partitioner{
		"default":     DefaultPartitioner(),
		"sticky":      StickyPartitioner(),
		"round-robin": RoundRobinPartitioner(),
		"hash":        HashPartitioner(),
		"manual":      ManualPartitioner(),
		"func":        PartitionerFunc(func(_ string, key []byte, n int32) int32 { return KeyPartition(key, n) }),
	}
}

func TestOnePartitionIsAlwaysZero(t *testing.T) {
	for name, p := range allPartitioners() {
		tp := p.ForTopic("t")
		for i := 0; i < 50; i++ {
			for _, key := range [][]byte{nil, {}, []byte(fmt.Sprint(i))} {
				want := int32(0)
				if name == "manual" {
					want = -1
				}
				require.Equal(t, want, tp.Partition(key, -1, 1), name)
				require.Equal(t, int32(0), tp.Partition(key, 0, 1), name)
				tp.OnNewBatch(0)
			}
		}
	}
}

// TestNoPartitionsNeverPanics: n > 0 is the contract, but a caller that
// breaks it gets -1 (an error for the producer), not a division by zero.
func TestNoPartitionsNeverPanics(t *testing.T) {
	for name, p := range allPartitioners() {
		tp := p.ForTopic("t")
		for _, n := range []int32{0, -1, -100} {
			for _, key := range [][]byte{nil, {}, []byte("k")} {
				require.Equal(t, int32(-1), tp.Partition(key, -1, n), "%s n=%d", name, n)
				require.Equal(t, int32(-1), tp.Partition(key, 0, n), "%s n=%d", name, n)
			}
		}
	}
	require.Equal(t, int32(-1), KeyPartition([]byte("k"), 0))
}

// TestPartitionAlwaysInRange drives every partitioner with random keys,
// requested partitions, partition counts and sealed batches, and requires
// every answer in [0, n) - or -1 exactly where documented.
func TestPartitionAlwaysInRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for name, p := range allPartitioners() {
		tp := p.ForTopic("t")
		for i := 0; i < 20000; i++ {
			n := 1 + rng.Int32N(50)
			requested := rng.Int32N(60) - 5
			var key []byte
			if rng.IntN(2) == 0 {
				key = randomKey(rng, 10)
			}
			got := tp.Partition(key, requested, n)
			if name == "manual" && (requested < 0 || requested >= n) {
				require.Equal(t, int32(-1), got)
				continue
			}
			require.True(t, got >= 0 && got < n, "%s: n=%d requested=%d got=%d", name, n, requested, got)
			if rng.IntN(10) == 0 {
				tp.OnNewBatch(got)
			}
		}
	}
}

func TestPartitionDoesNotAllocate(t *testing.T) {
	key := []byte("a-little-bit-long-string")
	for name, p := range allPartitioners() {
		tp := p.ForTopic("t")
		i := int32(0)
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			tp.Partition(key, -1, 12)
			tp.Partition(nil, -1, 12)
			tp.Partition([]byte{}, -1, 12)
			tp.Partition(key, i%12, 12)
			tp.OnNewBatch(tp.Partition(nil, -1, 12))
		})
		require.Zero(t, allocs, name)
	}
	require.Zero(t, testing.AllocsPerRun(1000, func() { KeyPartition(key, 12) }))
}

// TestTopicPartitionersAreIndependent uses one TopicPartitioner per topic
// from its own goroutine, as a producer does, all from one Partitioner;
// under -race this shows they share no unsynchronised state.
func TestTopicPartitionersAreIndependent(t *testing.T) {
	for name, p := range allPartitioners() {
		t.Run(name, func(t *testing.T) {
			partitionConcurrently(p, 4)
		})
	}
}

// partitionConcurrently runs topics goroutines, each with its own
// TopicPartitioner from p, through a mix of keyed, unkeyed and requested
// records and sealed batches.
func partitionConcurrently(p Partitioner, topics int) {
	var wg sync.WaitGroup
	for g := 0; g < topics; g++ {
		wg.Go(func() {
			tp := p.ForTopic(fmt.Sprint("topic-", g))
			for i := 0; i < 1000; i++ {
				var key []byte
				if i%2 == 0 {
					key = []byte{byte(i)}
				}
				got := tp.Partition(key, int32(i%3)-1, 8)
				if got >= 0 {
					tp.OnNewBatch(got)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkMurmur2(b *testing.B) {
	key := []byte("a-little-bit-longer-string")
	b.SetBytes(int64(len(key)))
	b.ReportAllocs()
	for b.Loop() {
		Murmur2(key)
	}
}

func BenchmarkDefaultPartitioner(b *testing.B) {
	key := []byte("a-little-bit-longer-string")
	b.Run("keyed", func(b *testing.B) {
		tp := DefaultPartitioner().ForTopic("t")
		b.ReportAllocs()
		for b.Loop() {
			tp.Partition(key, -1, 12)
		}
	})
	b.Run("unkeyed", func(b *testing.B) {
		tp := DefaultPartitioner().ForTopic("t")
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p := tp.Partition(nil, -1, 12)
			if i++; i%100 == 0 {
				tp.OnNewBatch(p)
			}
		}
	})
}

// randomKey returns a non-nil key of random length in [0, maxLen].
func randomKey(rng *rand.Rand, maxLen int) []byte {
	key := make([]byte, rng.IntN(maxLen+1))
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	return key
}
