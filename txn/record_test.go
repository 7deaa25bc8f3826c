package txn

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Utils.abs(id.hashCode()) % n as the JDK computes it (printed by a Java
// program: String.hashCode, Kafka's Utils.abs, then % n).
func TestPartitionForMatchesKafka(t *testing.T) {
	for _, c := range []struct {
		id      string
		hash    int32
		p50, p7 int32
	}{
		{"", 0, 0, 0},
		{"a", 97, 47, 6},
		{"hello", 99162322, 22, 0},
		{"my-txn", -1061187895, 45, 5},
		{"transactional-id-0", 1051133890, 40, 2},
		{"grüße", 98768023, 23, 4},
		{"😀", 1772899, 49, 2},                     // a surrogate pair in UTF-16
		{"polygenelubricants", -2147483648, 0, 0}, // Integer.MIN_VALUE: Utils.abs gives 0
		{"kstreams-app-0_1", 1498502033, 33, 0},
	} {
		require.Equal(t, c.hash, javaStringHash(c.id), "%q", c.id)
		require.Equal(t, c.p50, PartitionFor(c.id, 50), "%q", c.id)
		require.Equal(t, c.p7, PartitionFor(c.id, 7), "%q", c.id)
	}
	require.Equal(t, int32(0), PartitionFor("a", 0), "no partitions: no division by zero")
	require.Equal(t, int32(0), PartitionFor("a", -3))
}

func sampleValue() Value {
	return Value{
		ProducerID: 4242, ProducerEpoch: 7, TimeoutMs: 60000, State: Ongoing,
		Partitions:   []TopicPartition{{"orders", 0}, {"orders", 3}, {"__consumer_offsets", 12}, {"orders", 1}},
		LastUpdateMs: 1700000001234, StartMs: 1700000000000,
		PreviousProducerID: -1, NextProducerID: -1,
	}
}

// Our keys and values decode with franz-go's kmsg definitions of Kafka's
// TransactionLogKey and TransactionLogValue (kmsg TxnMetadataKey/Value),
// and theirs with ours: Kafka's tools can read the topic, and we read
// Kafka's.
func TestRecordsAreKafkas(t *testing.T) {
	key := EncodeKey("my-txn")
	var k kmsg.TxnMetadataKey
	require.NoError(t, k.ReadFrom(key))
	require.Equal(t, int16(0), k.Version)
	require.Equal(t, "my-txn", k.TransactionalID)
	id, err := DecodeKey(k.AppendTo(nil))
	require.NoError(t, err)
	require.Equal(t, "my-txn", id)

	wantTopics := []kmsg.TxnMetadataValueTopic{
		{Topic: "orders", Partitions: []int32{0, 3}},
		{Topic: "__consumer_offsets", Partitions: []int32{12}},
		{Topic: "orders", Partitions: []int32{1}},
	}
	for _, c := range []struct {
		name    string
		mod     func(*Value)
		version int16
	}{
		{"v0", func(*Value) {}, 0},
		{"v1 previous pid", func(v *Value) { v.PreviousProducerID = 4241 }, 1},
		{"v1 every tag", func(v *Value) { v.PreviousProducerID, v.NextProducerID, v.ClientTransactionVersion = 1, 2, 2 }, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := sampleValue()
			c.mod(&v)
			b := EncodeValue(v)
			var kv kmsg.TxnMetadataValue
			require.NoError(t, kv.ReadFrom(b))
			require.Equal(t, c.version, kv.Version)
			require.Equal(t, v.ProducerID, kv.ProducerID)
			require.Equal(t, v.ProducerEpoch, kv.ProducerEpoch)
			require.Equal(t, v.TimeoutMs, kv.TimeoutMillis)
			require.Equal(t, int8(v.State), int8(kv.State))
			require.Len(t, kv.Topics, len(wantTopics))
			for i, tp := range kv.Topics {
				require.Equal(t, wantTopics[i].Topic, tp.Topic)
				require.Equal(t, wantTopics[i].Partitions, tp.Partitions)
			}
			require.Equal(t, v.LastUpdateMs, kv.LastUpdateTimestamp)
			require.Equal(t, v.StartMs, kv.StartTimestamp)
			require.Equal(t, v.PreviousProducerID, kv.PreviousProducerID)
			require.Equal(t, v.NextProducerID, kv.NextProducerID)
			require.Equal(t, v.ClientTransactionVersion, kv.ClientTransactionVersion)

			// kmsg's own encoding of the same value is byte for byte ours
			// and decodes to it.
			require.Equal(t, b, kv.AppendTo(nil))
			got, err := DecodeValue(kv.AppendTo(nil))
			require.NoError(t, err)
			require.Equal(t, v, got)
		})
	}
}

// Kafka writes a null partition array for Empty; it stays null (nil), and
// an empty array stays empty.
func TestValueNullPartitions(t *testing.T) {
	for _, flexible := range []bool{false, true} {
		v := Value{ProducerID: 1, State: Empty, StartMs: -1, PreviousProducerID: -1, NextProducerID: -1}
		if flexible {
			v.PreviousProducerID = 9
		}
		var kv kmsg.TxnMetadataValue
		require.NoError(t, kv.ReadFrom(EncodeValue(v)))
		require.Nil(t, kv.Topics)
		got, err := DecodeValue(EncodeValue(v))
		require.NoError(t, err)
		require.Nil(t, got.Partitions)
		require.Equal(t, v, got)

		v.State, v.Partitions = CompleteCommit, []TopicPartition{}
		got, err = DecodeValue(EncodeValue(v))
		require.NoError(t, err)
		require.NotNil(t, got.Partitions)
		require.Empty(t, got.Partitions)
	}
}

// A value of a later version is read as version 1 (KIP-915), skipping tags
// we do not know; a key of another version is reported as such.
func TestValueLaterVersionAndUnknownTags(t *testing.T) {
	kv := kmsg.NewTxnMetadataValue()
	kv.Version = 1
	kv.ProducerID, kv.ProducerEpoch, kv.State = 5, 3, kmsg.TransactionState(PrepareAbort)
	kv.Topics = []kmsg.TxnMetadataValueTopic{{Topic: "t", Partitions: []int32{4}}}
	kv.StartTimestamp = 10
	kv.NextProducerEpoch = 4 // tag 3: Kafka 4.1, unknown to us
	kv.UnknownTags.Set(77, []byte("future"))
	b := kv.AppendTo(nil)
	binary.BigEndian.PutUint16(b, 3)
	v, err := DecodeValue(b)
	require.NoError(t, err)
	require.Equal(t, Value{ProducerID: 5, ProducerEpoch: 3, State: PrepareAbort,
		Partitions: []TopicPartition{{"t", 4}}, StartMs: 10, PreviousProducerID: -1, NextProducerID: -1}, v)

	k := kmsg.TxnMetadataKey{Version: 1, TransactionalID: "x"}
	_, err = DecodeKey(k.AppendTo(nil))
	require.ErrorIs(t, err, ErrUnknownKeyVersion)
	require.NotErrorIs(t, err, ErrMalformedRecord)
}

func TestDecodeMalformed(t *testing.T) {
	good := EncodeValue(sampleValue())
	goodV1 := func() []byte { v := sampleValue(); v.PreviousProducerID = 1; return EncodeValue(v) }()
	withState := func(s byte) []byte { b := append([]byte(nil), good...); b[16] = s; return b }
	for name, b := range map[string][]byte{
		"empty":                 {},
		"one byte":              {0},
		"negative version":      append([]byte{0xff, 0xff}, good[2:]...),
		"truncated":             good[:len(good)-1],
		"truncated v1":          goodV1[:len(goodV1)-1],
		"trailing byte":         append(append([]byte(nil), good...), 0),
		"unknown state":         withState(8),
		"negative state":        withState(0xff),
		"huge partition count":  append(append([]byte(nil), good[:17]...), 0x7f, 0xff, 0xff, 0xff),
		"negative array length": append(append([]byte(nil), good[:17]...), 0xff, 0xff, 0xff, 0xfe),
		"bad tag size": func() []byte {
			b := append([]byte(nil), goodV1[:len(goodV1)-11]...) // tags: count, tag, size, 8 bytes
			return append(b, 1, 0, 4, 0, 0, 0, 1)
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeValue(b)
			require.ErrorIs(t, err, ErrMalformedRecord)
		})
	}
	for name, b := range map[string][]byte{
		"empty":         {},
		"no string":     {0, 0},
		"short string":  {0, 0, 0, 5, 'a'},
		"null string":   {0, 0, 0xff, 0xff},
		"trailing byte": append(EncodeKey("a"), 0),
	} {
		t.Run("key "+name, func(t *testing.T) {
			_, err := DecodeKey(b)
			require.ErrorIs(t, err, ErrMalformedRecord)
		})
	}
}

// FuzzDecodeValue: any bytes either decode, and then re-encode to bytes that
// decode to the same value, or fail with ErrMalformedRecord; never a panic.
func FuzzDecodeValue(f *testing.F) {
	f.Add(EncodeValue(sampleValue()))
	v := sampleValue()
	v.PreviousProducerID, v.ClientTransactionVersion = 3, 2
	f.Add(EncodeValue(v))
	f.Add(EncodeValue(Value{State: Empty, StartMs: -1, PreviousProducerID: -1, NextProducerID: -1}))
	f.Add([]byte{0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeValue(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedRecord) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := DecodeValue(EncodeValue(v))
		if err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		require.Equal(t, v, again)
	})
}

func FuzzDecodeKey(f *testing.F) {
	f.Add(EncodeKey("my-txn"))
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeKey(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedRecord) && !errors.Is(err, ErrUnknownKeyVersion) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		require.Equal(t, EncodeKey(id), b)
	})
}
