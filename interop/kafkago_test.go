package interop

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/stretchr/testify/require"
)

// kafkaGoCreate creates a topic the way kafka-go's README does: dial,
// find the controller, CreateTopics on a connection to it (Metadata v1 and
// CreateTopics on kafka-go's legacy Conn).
func kafkaGoCreate(t *testing.T, ctx context.Context, addr, topic string, partitions int) {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	controller, err := conn.Controller()
	require.NoError(t, err)
	cc, err := kafka.DialContext(ctx, "tcp", net.JoinHostPort(controller.Host, strconv.Itoa(controller.Port)))
	require.NoError(t, err)
	defer cc.Close()
	require.NoError(t, cc.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}))
}

// kafkaGoWrite writes n records with a Writer (RequiredAcks all, hash
// balancer) and records the offsets its Completion callback reports.
func kafkaGoWrite(t *testing.T, ctx context.Context, s *server, led *ledger, topic, prefix string, n int, compression kafka.Compression) {
	t.Helper()
	kafkaGoWriteWith(t, ctx, s, nil, led, topic, prefix, n, compression)
}

// kafkaGoWriteWith is kafkaGoWrite with a Transport (nil: the default).
func kafkaGoWriteWith(t *testing.T, ctx context.Context, s *server, tr *kafka.Transport, led *ledger, topic, prefix string, n int, compression kafka.Compression) {
	t.Helper()
	w := &kafka.Writer{
		Addr: kafka.TCP(s.Addr), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond, BatchSize: 50,
		Compression: compression,
		Completion: func(msgs []kafka.Message, err error) {
			if err != nil {
				return // WriteMessages returns it
			}
			for _, m := range msgs {
				led.produce(t, m.Topic, int32(m.Partition), m.Offset, string(m.Value))
			}
		},
	}
	if tr != nil { // a nil *Transport in the interface field would be used
		w.Transport = tr
	}
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(strconv.Itoa(i % 7)), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	require.NoError(t, w.WriteMessages(ctx, msgs...))
	require.NoError(t, w.Close())
}

// kafkaGoRead reads from r until n distinct records are in the ledger.
func kafkaGoRead(t *testing.T, ctx context.Context, r *kafka.Reader, led *ledger, n int, by string) {
	t.Helper()
	for led.distinct() < n {
		m, err := r.ReadMessage(ctx)
		require.NoError(t, err, "read %d of %d", led.distinct(), n)
		led.consume(m.Topic, int32(m.Partition), m.Offset, string(m.Value), by)
	}
}

// TestKafkaGo: a Writer with RequiredAcks all (plain and gzip), a Reader
// per partition, then a Reader with a GroupID (committing every message):
// both read every record exactly once, in order per partition, and the
// group's committed offsets end at the end offsets.
func TestKafkaGo(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 90*time.Second)
	const topic, partitions = "kafka-go", 3
	kafkaGoCreate(t, ctx, s.Addr, topic, partitions)

	led := newLedger()
	kafkaGoWrite(t, ctx, s, led, topic, "plain", 300, 0)
	kafkaGoWrite(t, ctx, s, led, topic, "gzip", 200, kafka.Gzip)
	total := led.count()

	byPartition := newLedger()
	byPartition.produced, byPartition.values = led.produced, led.values
	for p := range partitions {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{s.Addr}, Topic: topic, Partition: p, MaxWait: 200 * time.Millisecond})
		want := len(led.produced[tp{topic, int32(p)}])
		for got := 0; got < want; got++ {
			m, err := r.ReadMessage(ctx)
			require.NoError(t, err, "partition %d: read %d of %d", p, got, want)
			byPartition.consume(m.Topic, int32(m.Partition), m.Offset, string(m.Value), "reader")
		}
		require.NoError(t, r.Close())
	}
	byPartition.checkExactlyOnce(t)

	const group = "kafka-go-group"
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{s.Addr}, GroupID: group, Topic: topic, StartOffset: kafka.FirstOffset,
		MaxWait: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
	})
	kafkaGoRead(t, ctx, r, led, total, "group")
	require.NoError(t, r.Close())
	led.checkExactlyOnce(t)

	client := &kafka.Client{Addr: kafka.TCP(s.Addr), Timeout: 10 * time.Second}
	parts := []int{0, 1, 2}
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	require.NoError(t, err)
	require.NoError(t, committed.Error)
	var reqs []kafka.OffsetRequest
	for _, p := range parts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	require.NoError(t, err)
	endOf := map[int]int64{}
	for _, po := range ends.Topics[topic] {
		require.NoError(t, po.Error)
		endOf[po.Partition] = po.LastOffset
	}
	for _, c := range committed.Topics[topic] {
		require.NoError(t, c.Error)
		require.Equal(t, endOf[c.Partition], c.CommittedOffset, "partition %d", c.Partition)
	}
	require.Len(t, committed.Topics[topic], partitions)
}

// TestKafkaGoAcks0: kafka-go's zero-value Writer uses acks=0 (a produce
// request with no response). Every record written must still arrive, in
// order (one partition, one writer).
func TestKafkaGoAcks0(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	const topic, n = "kafka-go-acks0", 300
	kafkaGoCreate(t, ctx, s.Addr, topic, 1)
	w := &kafka.Writer{Addr: kafka.TCP(s.Addr), Topic: topic, RequiredAcks: kafka.RequireNone, BatchTimeout: 5 * time.Millisecond, BatchSize: 50}
	for i := range n {
		// One message per call, so each is its own request.
		require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: fmt.Appendf(nil, "v%d", i)}))
	}
	require.NoError(t, w.Close())
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{s.Addr}, Topic: topic, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	for i := range n {
		m, err := r.ReadMessage(ctx)
		require.NoError(t, err, "read %d of %d", i, n)
		require.Equal(t, int64(i), m.Offset)
		require.Equal(t, fmt.Sprintf("v%d", i), string(m.Value))
	}
}

// TestKafkaGoSASL: a Writer (Transport.SASL) and a group Reader
// (Dialer.SASLMechanism) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
func TestKafkaGoSASL(t *testing.T) {
	s := startServer(t, saslArgs...)
	ctx := testContext(t, 60*time.Second)
	for _, c := range saslCases {
		t.Run(c.name, func(t *testing.T) {
			var mech sasl.Mechanism
			var err error
			switch c.name {
			case "PLAIN":
				mech = plain.Mechanism{Username: c.user, Password: c.pass}
			case "SCRAM-SHA-256":
				mech, err = scram.Mechanism(scram.SHA256, c.user, c.pass)
			default:
				mech, err = scram.Mechanism(scram.SHA512, c.user, c.pass)
			}
			require.NoError(t, err)
			dialer := &kafka.Dialer{Timeout: 10 * time.Second, SASLMechanism: mech}
			topic := "kafka-go-sasl-" + c.name
			conn, err := dialer.DialContext(ctx, "tcp", s.Addr)
			require.NoError(t, err)
			require.NoError(t, conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}))
			conn.Close()

			led := newLedger()
			kafkaGoWriteWith(t, ctx, s, &kafka.Transport{SASL: mech}, led, topic, c.name, 100, 0)
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers: []string{s.Addr}, GroupID: topic + "-group", Topic: topic, StartOffset: kafka.FirstOffset,
				MaxWait: 200 * time.Millisecond, Dialer: dialer,
				HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
			})
			kafkaGoRead(t, ctx, r, led, 100, "group")
			require.NoError(t, r.Close())
			led.checkExactlyOnce(t)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		dialer := &kafka.Dialer{Timeout: 10 * time.Second, SASLMechanism: plain.Mechanism{Username: "plain-user", Password: "nope"}}
		_, err := dialer.DialContext(ctx, "tcp", s.Addr)
		require.Error(t, err)
		require.ErrorIs(t, err, kafka.SASLAuthenticationFailed)
	})
}
