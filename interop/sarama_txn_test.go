package interop

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// saramaTxnVersions are the protocol versions the transaction tests run
// at: the suite's default (V2_8_0_0: InitProducerId v4, AddPartitionsToTxn,
// AddOffsetsToTxn and EndTxn v3, TxnOffsetCommit v3 with the group's
// generation, Fetch v12) and Kafka 0.11.0, the first with transactions,
// where every transactional API is at version 0 (and Fetch at v5).
var saramaTxnVersions = []struct {
	name    string
	version sarama.KafkaVersion
}{
	{"default", sarama.V2_8_0_0},
	{"v0.11.0", sarama.V0_11_0_0},
}

// saramaTxnConfig is a transactional producer's configuration: sarama
// requires an idempotent producer with acks=all and one request in flight.
func saramaTxnConfig(name, txnID string, version sarama.KafkaVersion) *sarama.Config {
	cfg := saramaConfig(name)
	cfg.Version = version
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = txnID
	cfg.Producer.Transaction.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

// saramaTxnSend sends msgs inside the producer's open transaction and
// records the acknowledged offsets in each ledger of leds.
func saramaTxnSend(t *testing.T, p sarama.SyncProducer, msgs []*sarama.ProducerMessage, leds ...*ledger) {
	t.Helper()
	require.NoError(t, p.SendMessages(msgs))
	for _, m := range msgs {
		for _, led := range leds {
			led.produce(t, m.Topic, m.Partition, m.Offset, saramaValue(m))
		}
	}
}

// TestSaramaTransactions: sarama's transactional SyncProducer commits a
// transaction, aborts one and commits another; a sarama consumer at
// read_committed gets exactly the committed records, at their
// acknowledged offsets and in order, and one at read_uncommitted gets
// every record of both kinds (the commit and abort markers, which take
// offsets of their own, are delivered to neither). At the suite's
// protocol version and at Kafka 0.11.0's.
func TestSaramaTransactions(t *testing.T) {
	s := startServer(t)
	for _, v := range saramaTxnVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := testContext(t, 90*time.Second)
			topic := "sarama-txn-" + v.name
			saramaCreate(t, s, saramaConfig("sarama-admin"), topic, 3)
			committed, all := newLedger(), newLedger()

			p, err := sarama.NewSyncProducer([]string{s.Addr}, saramaTxnConfig("sarama-txn", "sarama-txn-"+v.name, v.version))
			require.NoError(t, err)
			require.True(t, p.IsTransactional())

			require.NoError(t, p.BeginTxn())
			saramaTxnSend(t, p, saramaMessages(topic, "commit1", 60), committed, all)
			require.NoError(t, p.CommitTxn())
			require.NoError(t, p.BeginTxn())
			saramaTxnSend(t, p, saramaMessages(topic, "abort", 40), all)
			require.NoError(t, p.AbortTxn())
			require.NoError(t, p.BeginTxn())
			saramaTxnSend(t, p, saramaMessages(topic, "commit2", 30), committed, all)
			require.NoError(t, p.CommitTxn())
			require.Equal(t, sarama.ProducerTxnFlagReady, p.TxnStatus())
			require.NoError(t, p.Close())

			rc := saramaConfig("sarama-read-committed")
			rc.Version = v.version
			rc.Consumer.IsolationLevel = sarama.ReadCommitted
			saramaConsumePartitions(t, ctx, s, rc, committed, topic, committed.count())
			committed.checkExactlyOnce(t)

			ru := saramaConfig("sarama-read-uncommitted")
			ru.Version = v.version
			ru.Consumer.IsolationLevel = sarama.ReadUncommitted
			saramaConsumePartitions(t, ctx, s, ru, all, topic, all.count())
			all.checkExactlyOnce(t)
		})
	}
}

// TestSaramaTransactionalConsumeTransformProduce: sarama's
// consume-transform-produce path. A partition consumer reads an input
// topic; a transactional producer writes a transformed record per input
// record and, with AddMessageToTxn, the group's next offset
// (AddOffsetsToTxn to the transaction coordinator, TxnOffsetCommit to the
// group coordinator) inside the same transaction. Committed: the group's
// offset and the output move together. Aborted: neither moves - the
// group's committed offset stays where the last commit put it and the
// aborted output is invisible at read_committed. (sarama keeps the offsets
// of AddMessageToTxn in the client until CommitTxn, which sends
// AddOffsetsToTxn and TxnOffsetCommit just before EndTxn; an aborted
// transaction never sends them, so the server's dropping of pending
// offsets on abort is tested with franz-go, in the transport package.)
// The aborted stretch is then processed again from the committed offset,
// and committed, so the output read read_committed holds every input
// record's transform exactly once.
func TestSaramaTransactionalConsumeTransformProduce(t *testing.T) {
	s := startServer(t)
	for _, v := range saramaTxnVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := testContext(t, 90*time.Second)
			in, out, group := "sarama-eos-in-"+v.name, "sarama-eos-out-"+v.name, "sarama-eos-"+v.name
			saramaCreate(t, s, saramaConfig("sarama-admin"), in, 1)
			saramaCreate(t, s, saramaConfig("sarama-admin"), out, 1)
			const n = 30
			input := make([]*sarama.ProducerMessage, n)
			for i := range input {
				input[i] = &sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder(fmt.Sprintf("in-%d", i))}
			}
			saramaSyncProduce(t, s, saramaConfig("sarama-input"), newLedger(), input)

			cfg := saramaConfig("sarama-eos")
			cfg.Version = v.version
			client, err := sarama.NewClient([]string{s.Addr}, cfg)
			require.NoError(t, err)
			defer client.Close()
			adm, err := sarama.NewClusterAdminFromClient(client)
			require.NoError(t, err)
			committedOffset := func() int64 {
				t.Helper()
				offs, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{in: {0}})
				require.NoError(t, err)
				block := offs.GetBlock(in, 0)
				require.NotNil(t, block)
				require.Equal(t, sarama.ErrNoError, block.Err)
				return block.Offset
			}
			// EndTxn is answered once the decision is durable; the
			// markers that make the offsets visible to OffsetFetch (sarama
			// does not ask for stable offsets) follow.
			waitCommitted := func(want int64) {
				t.Helper()
				var got int64
				require.NoError(t, waitFor(ctx, fmt.Sprintf("the group's offset at %d", want), func() bool {
					got = committedOffset()
					return got == want
				}), "committed offset %d", got)
			}
			cons, err := sarama.NewConsumer([]string{s.Addr}, cfg)
			require.NoError(t, err)
			defer cons.Close()
			p, err := sarama.NewSyncProducer([]string{s.Addr}, saramaTxnConfig("sarama-eos-producer", "sarama-eos-"+v.name, v.version))
			require.NoError(t, err)
			defer p.Close()

			// transform reads count input records from offset from and
			// writes their transforms and the group's offset in one
			// transaction, which it commits or aborts.
			transform := func(from int64, count int, commit bool) {
				t.Helper()
				pc, err := cons.ConsumePartition(in, 0, from)
				require.NoError(t, err)
				defer pc.Close()
				require.NoError(t, p.BeginTxn())
				for range count {
					var m *sarama.ConsumerMessage
					select {
					case m = <-pc.Messages():
					case err := <-pc.Errors():
						t.Fatalf("consume %s: %v", in, err)
					case <-ctx.Done():
						t.Fatalf("consume %s: %v", in, ctx.Err())
					}
					_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: out, Value: sarama.StringEncoder("out-" + string(m.Value))})
					require.NoError(t, err)
					require.NoError(t, p.AddMessageToTxn(m, group, nil))
				}
				if commit {
					require.NoError(t, p.CommitTxn())
				} else {
					require.NoError(t, p.AbortTxn())
				}
			}

			transform(sarama.OffsetOldest, 10, true)
			waitCommitted(10)
			transform(10, 10, false)
			require.Equal(t, int64(10), committedOffset(), "an aborted transaction's offsets are not committed")
			transform(committedOffset(), 20, true)
			waitCommitted(n)

			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprintf("out-in-%d", i)
			}
			rc := saramaConfig("sarama-eos-read-committed")
			rc.Version = v.version
			rc.Consumer.IsolationLevel = sarama.ReadCommitted
			require.Equal(t, want, saramaReadValues(t, ctx, s, rc, out, n))
			ru := saramaConfig("sarama-eos-read-uncommitted")
			ru.Version = v.version
			ru.Consumer.IsolationLevel = sarama.ReadUncommitted
			got := saramaReadValues(t, ctx, s, ru, out, n+10)
			require.Equal(t, slices.Concat(want[:10], want[10:20], want[10:]), got,
				"read_uncommitted sees the aborted attempt too")
		})
	}
}

// saramaReadValues reads partition 0 of topic from the oldest offset
// until n records came, then half a second more, and returns their values.
func saramaReadValues(t *testing.T, ctx context.Context, s *server, cfg *sarama.Config, topic string, n int) []string {
	t.Helper()
	c, err := sarama.NewConsumer([]string{s.Addr}, cfg)
	require.NoError(t, err)
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	require.NoError(t, err)
	defer pc.Close()
	var got []string
	quiet := time.After(time.Hour)
	for {
		select {
		case m := <-pc.Messages():
			got = append(got, string(m.Value))
			if len(got) == n {
				quiet = time.After(500 * time.Millisecond)
			}
		case err := <-pc.Errors():
			t.Fatalf("consume %s: %v", topic, err)
		case <-quiet:
			return got
		case <-ctx.Done():
			t.Fatalf("consume %s: %d of %d records: %v", topic, len(got), n, ctx.Err())
		}
	}
}

// saramaEOSHandler is a consume-transform-produce member of a sarama
// consumer group: one transaction per input record, holding its transform
// and the group's next offset committed with the member's generation and
// member id (TxnOffsetCommit v3, KIP-447). At input record staleAt it
// first tries a transaction whose offsets carry the next generation
// instead, which the group coordinator must refuse; the error goes to
// stale and the transaction is aborted.
type saramaEOSHandler struct {
	t          *testing.T
	p          sarama.SyncProducer
	group, out string
	staleAt    string
	staleTried bool
	stale      chan error // buffered: the stale commit's error
	processed  atomic.Int32
}

func (h *saramaEOSHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaEOSHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaEOSHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		meta := sarama.NewConsumerGroupMetadataFromSession(sess, h.group, nil)
		if string(m.Value) == h.staleAt && !h.staleTried {
			h.staleTried = true
			stale := *meta
			stale.GenerationID++
			err := h.transact(m, "stale-", &stale)
			h.stale <- err
			if err == nil {
				return nil
			}
			if err := h.p.AbortTxn(); err != nil {
				h.t.Errorf("abort after a stale generation's commit failed: %v", err)
				return err
			}
		}
		if err := h.transact(m, "out-", meta); err != nil {
			h.t.Errorf("transaction for %s: %v", m.Value, err)
			return err
		}
		h.processed.Add(1)
	}
	return nil
}

// transact writes the transform of m and its group offset in one
// transaction and commits it.
func (h *saramaEOSHandler) transact(m *sarama.ConsumerMessage, prefix string, meta *sarama.ConsumerGroupMetadata) error {
	if err := h.p.BeginTxn(); err != nil {
		return err
	}
	if _, _, err := h.p.SendMessage(&sarama.ProducerMessage{Topic: h.out, Value: sarama.StringEncoder(prefix + string(m.Value))}); err != nil {
		return err
	}
	if err := h.p.AddMessageToTxnWithGroupMetadata(m, meta, nil); err != nil {
		return err
	}
	return h.p.CommitTxn()
}

// TestSaramaTransactionalGroupMember: consume-transform-produce by a
// member of a sarama consumer group (read_committed, no auto-commit),
// committing its offsets inside each transaction with its generation and
// member id. A commit carrying a generation the group is not at gets
// ILLEGAL_GENERATION (KIP-447 fencing of a stale member) and the
// transaction is aborted; the output read read_committed holds every
// input record's transform exactly once and nothing of the refused
// attempt, and the group's committed offset is the input's end.
func TestSaramaTransactionalGroupMember(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 90*time.Second)
	const in, out, group = "sarama-eos-group-in", "sarama-eos-group-out", "sarama-eos-group"
	saramaCreate(t, s, saramaConfig("sarama-admin"), in, 1)
	saramaCreate(t, s, saramaConfig("sarama-admin"), out, 1)
	const n = 20
	input := make([]*sarama.ProducerMessage, n)
	want := make([]string, n)
	for i := range input {
		input[i] = &sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder(fmt.Sprintf("in-%d", i))}
		want[i] = fmt.Sprintf("out-in-%d", i)
	}
	saramaSyncProduce(t, s, saramaConfig("sarama-input"), newLedger(), input)

	p, err := sarama.NewSyncProducer([]string{s.Addr}, saramaTxnConfig("sarama-eos-group-producer", "sarama-eos-group", sarama.V2_8_0_0))
	require.NoError(t, err)
	defer p.Close()
	cfg := saramaConfig("sarama-eos-group-member")
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cg, err := sarama.NewConsumerGroup([]string{s.Addr}, group, cfg)
	require.NoError(t, err)
	h := &saramaEOSHandler{t: t, p: p, group: group, out: out, staleAt: "in-7", stale: make(chan error, 1)}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{in}, h); err != nil {
				t.Errorf("consume: %v", err)
				return
			}
		}
	}()
	err = waitFor(ctx, "every input record processed", func() bool { return h.processed.Load() >= n })
	cancel()
	<-done
	require.NoError(t, cg.Close())
	require.NoError(t, err, "processed %d of %d", h.processed.Load(), n)
	select {
	case err := <-h.stale:
		require.ErrorIs(t, err, sarama.ErrIllegalGeneration)
	default:
		t.Fatal("the stale commit was not tried")
	}

	rc := saramaConfig("sarama-eos-group-read")
	rc.Consumer.IsolationLevel = sarama.ReadCommitted
	require.Equal(t, want, saramaReadValues(t, ctx, s, rc, out, n))
	adm, err := sarama.NewClusterAdmin([]string{s.Addr}, saramaConfig("sarama-admin"))
	require.NoError(t, err)
	defer adm.Close()
	var got int64
	require.NoError(t, waitFor(ctx, "the group's offset at the end", func() bool {
		offs, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{in: {0}})
		require.NoError(t, err)
		got = offs.GetBlock(in, 0).Offset
		return got == n
	}), "committed %d", got)
}
