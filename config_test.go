package spool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/record"
)

// TestParseAcksTakesKafkasSpellings checks that acks are spelled as Kafka
// spells them: "0" is none (not the default), "-1" is all, "" the default.
func TestParseAcksTakesKafkasSpellings(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Acks
	}{
		{"", AcksAll}, {"all", AcksAll}, {"ALL", AcksAll}, {"-1", AcksAll},
		{"1", AcksLeader}, {"0", AcksNone},
	} {
		got, err := ParseAcks(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"2", "none", "leader", "-2", "all,1"} {
		_, err := ParseAcks(bad)
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
		require.ErrorContains(t, err, "Acks", bad)
	}
	require.Equal(t, "all", Acks("").String())
	require.Equal(t, "all", Acks("-1").String())
	require.Equal(t, "0", AcksNone.String())
}

// TestProducerAcksKafkaValues produces with Acks("0") and Acks("-1"): the
// first is Kafka's acks=0 (offset -1 at once), the second acks=all.
func TestProducerAcksKafkaValues(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))

	for _, tc := range []struct {
		acks       Acks
		wantOffset int64
	}{{Acks("0"), -1}, {Acks("-1"), 1}, {Acks("all"), 2}, {"", 3}, {Acks("1"), 4}} {
		p, err := b.NewProducer(ProducerConfig{Acks: tc.acks, Linger: -1})
		require.NoError(t, err, "acks %q", tc.acks)
		got := make(chan RecordMetadata, 1)
		p.Produce(ctx, Record{Topic: "t", Value: []byte("v")}, func(md RecordMetadata, err error) {
			if err != nil {
				md.Offset = -2
			}
			got <- md
		})
		require.NoError(t, p.Close())
		require.Equal(t, tc.wantOffset, (<-got).Offset, "acks %q", tc.acks)
	}
}

// TestProducerConfigErrorsNameTheField checks that each refused
// ProducerConfig field is named in the error, with its value, and that the
// error is not a dump of the whole struct.
func TestProducerConfigErrorsNameTheField(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	for _, tc := range []struct {
		field string
		cfg   ProducerConfig
		value string
	}{
		{"ProducerConfig.Acks", ProducerConfig{Acks: "2"}, `"2"`},
		{"ProducerConfig.Acks", ProducerConfig{Acks: "none"}, `"none"`},
		{"ProducerConfig.BatchBytes", ProducerConfig{BatchBytes: -1}, "-1"},
		{"ProducerConfig.BufferBytes", ProducerConfig{BufferBytes: -5}, "-5"},
		{"ProducerConfig.MaxBlock", ProducerConfig{MaxBlock: -time.Second}, "-1s"},
		{"ProducerConfig.DeliveryTimeout", ProducerConfig{DeliveryTimeout: -time.Second}, "-1s"},
		{"ProducerConfig.TransactionTimeout", ProducerConfig{TransactionTimeout: -time.Second}, "-1s"},
		{"ProducerConfig.Compression", ProducerConfig{Compression: record.Codec(9)}, "codec(9)"},
		{"ProducerConfig.Idempotent", ProducerConfig{Idempotent: true, Acks: AcksLeader}, `"1"`},
		{"ProducerConfig.TransactionalID", ProducerConfig{TransactionalID: "x", Acks: AcksNone}, `"0"`},
	} {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			p, err := b.NewProducer(tc.cfg)
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.field)
			require.ErrorContains(t, err, tc.value)
			require.NotContains(t, err.Error(), "{", "no struct dump")
		})
	}
	_, err := b.NewProducer(ProducerConfig{Acks: "2"})
	require.EqualError(t, err, `spool: invalid configuration: ProducerConfig.Acks = "2": want all, -1, 1 or 0`)
}

// TestConsumerConfigErrorsNameTheField is the same for ConsumerConfig.
func TestConsumerConfigErrorsNameTheField(t *testing.T) {
	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	for _, tc := range []struct {
		field string
		cfg   ConsumerConfig
		value string
	}{
		{"ConsumerConfig.FetchMinBytes", ConsumerConfig{FetchMinBytes: -1}, "-1"},
		{"ConsumerConfig.FetchMaxWait", ConsumerConfig{FetchMaxWait: -time.Second}, "-1s"},
		{"ConsumerConfig.FetchMaxBytes", ConsumerConfig{FetchMaxBytes: -2}, "-2"},
		{"ConsumerConfig.MaxPartitionFetchBytes", ConsumerConfig{MaxPartitionFetchBytes: -3}, "-3"},
		{"ConsumerConfig.AutoOffsetReset", ConsumerConfig{AutoOffsetReset: 7}, "7"},
		{"ConsumerConfig.IsolationLevel", ConsumerConfig{IsolationLevel: 5}, "5"},
		{"ConsumerConfig.AutoCommit", ConsumerConfig{Group: "g", Topics: []string{"t"}, AutoCommit: 9}, "9"},
		{"ConsumerConfig.AutoCommitInterval", ConsumerConfig{Group: "g", Topics: []string{"t"}, AutoCommitInterval: -time.Second}, "-1s"},
		{"ConsumerConfig.SessionTimeout", ConsumerConfig{Group: "g", Topics: []string{"t"}, SessionTimeout: -time.Second}, "-1s"},
		{"ConsumerConfig.RebalanceTimeout", ConsumerConfig{Group: "g", Topics: []string{"t"}, RebalanceTimeout: -time.Second}, "-1s"},
		{"ConsumerConfig.HeartbeatInterval", ConsumerConfig{Group: "g", Topics: []string{"t"}, HeartbeatInterval: -time.Second}, "-1s"},
		{"ConsumerConfig.Topics", ConsumerConfig{Topics: []string{"t"}}, "[t]"},
		{"ConsumerConfig.Topics", ConsumerConfig{Group: "g"}, "[]"},
		{"ConsumerConfig.GroupProtocol", ConsumerConfig{Group: "g", Topics: []string{"t"}, GroupProtocol: "eager"}, `"eager"`},
		{"ConsumerConfig.ServerAssignor", ConsumerConfig{Group: "g", Topics: []string{"t"}, ServerAssignor: "range"}, `"range"`},
	} {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			c, err := b.NewConsumer(tc.cfg)
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.field)
			require.ErrorContains(t, err, tc.value)
			require.NotContains(t, err.Error(), "{", "no struct dump")
		})
	}
}

// TestOtherConfigErrorsNameTheField covers Options, TopicConfig and
// ShareConsumerConfig.
func TestOtherConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		opts  Options
	}{
		{"Options.DefaultPartitions", Options{DefaultPartitions: -1}},
		{"Options.OffsetsTopicPartitions", Options{OffsetsTopicPartitions: -1}},
		{"Options.CleanerBufferBytes", Options{CleanerBufferBytes: -1}},
		{"Options.TransactionStatePartitions", Options{TransactionStatePartitions: -1}},
		{"Options.TransactionMaxTimeout", Options{TransactionMaxTimeout: -1}},
		{"Options.NodeID", Options{NodeID: -1}},
		{"TopicConfig.SegmentBytes", Options{Topic: TopicConfig{SegmentBytes: -1}}},
	} {
		_, err := tc.opts.withDefaults()
		require.ErrorIs(t, err, ErrInvalidConfig, tc.field)
		require.ErrorContains(t, err, tc.field)
		require.NotContains(t, err.Error(), "{", tc.field)
	}

	b := openBroker(t, t.TempDir(), Options{})
	t.Cleanup(func() { b.Close() })
	for _, tc := range []struct {
		field string
		cfg   TopicConfig
	}{
		{"TopicConfig.Partitions", TopicConfig{Partitions: -1}},
		{"TopicConfig.SegmentAge", TopicConfig{SegmentAge: -1}},
		{"TopicConfig.MaxMessageBytes", TopicConfig{MaxMessageBytes: -1}},
		{"TopicConfig.CleanupPolicy", TopicConfig{CleanupPolicy: "shred"}},
		{"TopicConfig.DeleteRetention", TopicConfig{DeleteRetention: -1}},
		{"TopicConfig.MinCompactionLag", TopicConfig{MinCompactionLag: -1}},
		{"TopicConfig.MaxCompactionLag", TopicConfig{MaxCompactionLag: -1}},
		{"TopicConfig.MinCleanableDirtyRatio", TopicConfig{MinCleanableDirtyRatio: 2}},
		{"TopicConfig.Compression", TopicConfig{Compression: 12}},
		{"TopicConfig.ReplicationFactor", TopicConfig{ReplicationFactor: -1}},
		{"TopicConfig.MinInSyncReplicas", TopicConfig{MinInSyncReplicas: -1}},
	} {
		err := b.CheckTopicConfig(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, tc.field)
		require.ErrorContains(t, err, tc.field)
		require.NotContains(t, err.Error(), "{", tc.field)
	}

	for _, tc := range []struct {
		field string
		cfg   ShareConsumerConfig
	}{
		{"ShareConsumerConfig.Group", ShareConsumerConfig{Topics: []string{"t"}}},
		{"ShareConsumerConfig.Topics", ShareConsumerConfig{Group: "g"}},
		{"ShareConsumerConfig.MaxRecords", ShareConsumerConfig{Group: "g", Topics: []string{"t"}, MaxRecords: -1}},
		{"ShareConsumerConfig.FetchMaxWait", ShareConsumerConfig{Group: "g", Topics: []string{"t"}, FetchMaxWait: -1}},
	} {
		_, err := b.NewShareConsumer(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, tc.field)
		require.ErrorContains(t, err, tc.field)
		require.NotContains(t, err.Error(), "{", tc.field)
	}
}
