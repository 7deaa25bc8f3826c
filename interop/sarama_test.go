package interop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// saramaConfig is sarama's default configuration (protocol version
// V2_8_0_0) for tests: acks=all, hash partitioning, successes returned,
// consumers from the oldest offset.
func saramaConfig(name string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = name
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 15 * time.Second
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	return cfg
}

// saramaCreate creates a topic with sarama's ClusterAdmin.
func saramaCreate(t *testing.T, s *server, cfg *sarama.Config, topic string, partitions int32) {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{s.Addr}, cfg)
	require.NoError(t, err)
	defer adm.Close()
	require.NoError(t, adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false))
}

func saramaMessages(topic, prefix string, n int) []*sarama.ProducerMessage {
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(strconv.Itoa(i % 11)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return msgs
}

func saramaValue(m *sarama.ProducerMessage) string {
	b, _ := m.Value.Encode()
	return string(b)
}

// saramaSyncProduce sends msgs with a SyncProducer, in one SendMessages
// call and then one at a time, and records the acknowledged offsets.
func saramaSyncProduce(t *testing.T, s *server, cfg *sarama.Config, led *ledger, msgs []*sarama.ProducerMessage) {
	t.Helper()
	p, err := sarama.NewSyncProducer([]string{s.Addr}, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	half := len(msgs) / 2
	require.NoError(t, p.SendMessages(msgs[:half]))
	for _, m := range msgs[:half] {
		led.produce(t, m.Topic, m.Partition, m.Offset, saramaValue(m))
	}
	for _, m := range msgs[half:] {
		part, off, err := p.SendMessage(m)
		require.NoError(t, err)
		led.produce(t, m.Topic, part, off, saramaValue(m))
	}
}

// saramaConsumePartitions reads every partition of topic from the oldest
// offset with sarama's (non-group) Consumer until n records are in the
// ledger, then half a second more to catch extras.
func saramaConsumePartitions(t *testing.T, ctx context.Context, s *server, cfg *sarama.Config, led *ledger, topic string, n int) {
	t.Helper()
	c, err := sarama.NewConsumer([]string{s.Addr}, cfg)
	require.NoError(t, err)
	defer c.Close()
	parts, err := c.Partitions(topic)
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			for {
				select {
				case m := <-pc.Messages():
					led.consume(m.Topic, m.Partition, m.Offset, string(m.Value), "sarama")
				case err := <-pc.Errors():
					t.Errorf("consume %s-%d: %v", topic, p, err)
				case <-stop:
					return
				}
			}
		}()
	}
	err = waitFor(ctx, "every record consumed", func() bool { return led.distinct() >= n })
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.NoError(t, err, "consumed %d of %d", led.distinct(), n)
}

// TestSaramaProducers: a SyncProducer (acks=all), an idempotent
// SyncProducer (zstd) and an AsyncProducer (lz4), then a partition
// consumer: every record exactly once and in order per partition.
func TestSaramaProducers(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	const topic = "sarama-produce"
	saramaCreate(t, s, saramaConfig("sarama-admin"), topic, 3)
	led := newLedger()

	saramaSyncProduce(t, s, saramaConfig("sarama-sync"), led, saramaMessages(topic, "sync", 200))

	idem := saramaConfig("sarama-idempotent")
	idem.Producer.Idempotent = true
	idem.Net.MaxOpenRequests = 1
	idem.Producer.Compression = sarama.CompressionZSTD
	saramaSyncProduce(t, s, idem, led, saramaMessages(topic, "idem", 200))

	async := saramaConfig("sarama-async")
	async.Producer.Compression = sarama.CompressionLZ4
	async.Producer.Flush.Frequency = 5 * time.Millisecond
	ap, err := sarama.NewAsyncProducer([]string{s.Addr}, async)
	require.NoError(t, err)
	msgs := saramaMessages(topic, "async", 300)
	go func() {
		for _, m := range msgs {
			ap.Input() <- m
		}
	}()
	for range msgs {
		select {
		case m := <-ap.Successes():
			led.produce(t, m.Topic, m.Partition, m.Offset, saramaValue(m))
		case err := <-ap.Errors():
			t.Fatalf("async produce: %v", err)
		case <-ctx.Done():
			t.Fatalf("async produce: %v", ctx.Err())
		}
	}
	require.NoError(t, ap.Close())

	saramaConsumePartitions(t, ctx, s, saramaConfig("sarama-consumer"), led, topic, led.count())
	led.checkExactlyOnce(t)
}

// saramaHandler records deliveries and marks them for auto-commit.
type saramaHandler struct {
	name string
	led  *ledger
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.led.consume(m.Topic, m.Partition, m.Offset, string(m.Value), h.name)
		sess.MarkMessage(m, "")
	}
	return nil
}

// TestSaramaConsumerGroup: sarama ConsumerGroup members (range assignor,
// eager rebalancing) join and leave while records are produced; at least
// once, in order per partition among first deliveries (see
// ledger.checkAtLeastOnce), and the final commits cover everything. Then
// sarama's ClusterAdmin lists, describes and deletes the group.
func TestSaramaConsumerGroup(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 90*time.Second)
	const topic, group = "sarama-group", "sarama-group-1"
	saramaCreate(t, s, saramaConfig("sarama-admin"), topic, 4)
	led := newLedger()
	saramaSyncProduce(t, s, saramaConfig("sarama-sync"), led, saramaMessages(topic, "first", 400))

	type member struct {
		cg     sarama.ConsumerGroup
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string) *member {
		cfg := saramaConfig(name)
		cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
		cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
		cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
		cg, err := sarama.NewConsumerGroup([]string{s.Addr}, group, cfg)
		require.NoError(t, err)
		mctx, cancel := context.WithCancel(ctx)
		m := &member{cg: cg, cancel: cancel, done: make(chan struct{})}
		go func() {
			for err := range cg.Errors() {
				t.Errorf("member %s: %v", name, err)
			}
		}()
		go func() {
			defer close(m.done)
			for mctx.Err() == nil {
				if err := cg.Consume(mctx, []string{topic}, &saramaHandler{name, led}); err != nil {
					if !errors.Is(err, sarama.ErrClosedConsumerGroup) {
						t.Errorf("member %s: consume: %v", name, err)
					}
					return
				}
			}
		}()
		return m
	}
	leave := func(m *member) {
		m.cancel()
		<-m.done
		require.NoError(t, m.cg.Close())
	}

	a := start("a")
	require.NoError(t, waitFor(ctx, "member a consuming", func() bool { return led.distinct() > 0 }))
	b := start("b")
	saramaSyncProduce(t, s, saramaConfig("sarama-sync"), led, saramaMessages(topic, "second", 400))
	time.Sleep(time.Second)
	leave(a)
	saramaSyncProduce(t, s, saramaConfig("sarama-sync"), led, saramaMessages(topic, "third", 400))
	require.NoError(t, waitFor(ctx, "every record consumed", func() bool { return led.distinct() >= led.count() }),
		"distinct %d of %d", led.distinct(), led.count())
	leave(b)
	if led.checkAtLeastOnce(t) > 0 {
		// Allowed, but say why: the error responses around the
		// rebalances (a refused commit makes the next owner re-read).
		t.Logf("error responses:\n%s", s.errorResponses())
	}

	adm, err := sarama.NewClusterAdmin([]string{s.Addr}, saramaConfig("sarama-admin"))
	require.NoError(t, err)
	defer adm.Close()
	client, err := sarama.NewClient([]string{s.Addr}, saramaConfig("sarama-client"))
	require.NoError(t, err)
	defer client.Close()
	offsets, err := adm.ListConsumerGroupOffsets(group, nil)
	require.NoError(t, err)
	require.Equal(t, sarama.ErrNoError, offsets.Err)
	for p := range int32(4) {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(t, err)
		block := offsets.GetBlock(topic, p)
		require.NotNil(t, block, "partition %d", p)
		require.Equal(t, sarama.ErrNoError, block.Err)
		require.Equal(t, end, block.Offset, "partition %d committed", p)
	}
	groups, err := adm.ListConsumerGroups()
	require.NoError(t, err)
	require.Contains(t, groups, group)
	desc, err := adm.DescribeConsumerGroups([]string{group})
	require.NoError(t, err)
	require.Len(t, desc, 1)
	require.Equal(t, "Empty", desc[0].State)
	require.NoError(t, adm.DeleteConsumerGroup(group))
	groups, err = adm.ListConsumerGroups()
	require.NoError(t, err)
	require.NotContains(t, groups, group)
}

// TestSaramaAdmin: sarama's ClusterAdmin topic calls.
func TestSaramaAdmin(t *testing.T) {
	s := startServer(t)
	cfg := saramaConfig("sarama-admin")
	adm, err := sarama.NewClusterAdmin([]string{s.Addr}, cfg)
	require.NoError(t, err)
	defer adm.Close()

	require.NoError(t, adm.CreateTopic("sarama-adm", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": ptr("3600000")}}, false))
	err = adm.CreateTopic("sarama-adm", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false)
	require.ErrorIs(t, err, sarama.ErrTopicAlreadyExists)

	topics, err := adm.ListTopics()
	require.NoError(t, err)
	require.Contains(t, topics, "sarama-adm")
	require.Equal(t, int32(2), topics["sarama-adm"].NumPartitions)

	require.NoError(t, adm.CreatePartitions("sarama-adm", 5, nil, false))
	meta, err := adm.DescribeTopics([]string{"sarama-adm"})
	require.NoError(t, err)
	require.Len(t, meta, 1)
	require.Len(t, meta[0].Partitions, 5)

	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-adm"})
	require.NoError(t, err)
	found := false
	for _, e := range entries {
		if e.Name == "retention.ms" {
			found = true
			require.Equal(t, "3600000", e.Value)
		}
	}
	require.True(t, found, "retention.ms not described: %+v", entries)

	require.NoError(t, adm.DeleteTopic("sarama-adm"))
	topics, err = adm.ListTopics()
	require.NoError(t, err)
	require.NotContains(t, topics, "sarama-adm")
}

func ptr[T any](v T) *T { return &v }

// TestSaramaOldProtocolVersions: sarama configured for Kafka 0.8.2 (Produce
// v0 and Fetch v0: message format v0, no timestamps) and for 0.10.2
// (Produce v2 and Fetch v3: message format v1, gzip-wrapped here), as
// services pinned to an old Config.Version run: spool up-converts what they
// produce and down-converts what they fetch. Every record exactly once, in
// order per partition, with the v1 timestamps kept.
func TestSaramaOldProtocolVersions(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	for _, c := range []struct {
		name    string
		version sarama.KafkaVersion
		codec   sarama.CompressionCodec
	}{
		{"v0.8.2", sarama.V0_8_2_0, sarama.CompressionNone},
		{"v0.10.2", sarama.V0_10_2_0, sarama.CompressionGZIP},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "sarama-old-" + c.name
			saramaCreate(t, s, saramaConfig("sarama-admin"), topic, 2)
			led := newLedger()
			cfg := saramaConfig("sarama-" + c.name)
			cfg.Version = c.version
			cfg.Producer.Compression = c.codec
			msgs := saramaMessages(topic, c.name, 200)
			stamp := time.UnixMilli(1_700_000_000_000)
			for _, m := range msgs {
				m.Timestamp = stamp
			}
			saramaSyncProduce(t, s, cfg, led, msgs)

			cons, err := sarama.NewConsumer([]string{s.Addr}, cfg)
			require.NoError(t, err)
			defer cons.Close()
			for p := int32(0); p < 2; p++ {
				pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
				require.NoError(t, err)
				led.mu.Lock()
				want := len(led.produced[tp{topic, p}])
				led.mu.Unlock()
				for range want {
					select {
					case m := <-pc.Messages():
						led.consume(m.Topic, m.Partition, m.Offset, string(m.Value), c.name)
						if c.version.IsAtLeast(sarama.V0_10_0_0) {
							require.Equal(t, stamp.UnixMilli(), m.Timestamp.UnixMilli(), "message format v1 keeps CreateTime")
						}
					case err := <-pc.Errors():
						t.Fatalf("consume %s-%d: %v", topic, p, err)
					case <-ctx.Done():
						t.Fatalf("consume %s-%d: %v", topic, p, ctx.Err())
					}
				}
				require.NoError(t, pc.Close())
			}
			led.checkExactlyOnce(t)
		})
	}
}
