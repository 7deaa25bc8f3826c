package interop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoClient is a franz-go client of s with the test's options.
func kgoClient(t *testing.T, s *server, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(s.Addr),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.RetryTimeout(15 * time.Second),
		kgo.MetadataMinAge(100 * time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// kadmCreate creates a topic with kadm and fails the test on any error.
func kadmCreate(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err, "create %s: %s", topic, resp.ErrMessage)
}

// kgoProduce produces n records to topic from one client (its defaults:
// idempotent, acks=all) and records the acknowledged offsets.
func kgoProduce(t *testing.T, ctx context.Context, cl *kgo.Client, led *ledger, topic, prefix string, n int) {
	t.Helper()
	require.NoError(t, kgoProduceErr(t, ctx, cl, led, topic, prefix, n))
}

// kgoProduceErr is kgoProduce for goroutines other than the test's: it
// returns what failed.
func kgoProduceErr(t *testing.T, ctx context.Context, cl *kgo.Client, led *ledger, topic, prefix string, n int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		r := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 13)), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.Value, err))
				mu.Unlock()
				return
			}
			led.produce(t, r.Topic, r.Partition, r.Offset, string(r.Value))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// kgoConsumeAll polls cl until n distinct records are in the ledger.
func kgoConsumeAll(t *testing.T, ctx context.Context, cl *kgo.Client, led *ledger, n int, by string) {
	t.Helper()
	for led.distinct() < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", led.distinct(), n, ctx.Err())
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Errorf("fetch %s-%d: %v", topic, p, err)
		})
		if t.Failed() {
			t.FailNow()
		}
		fetches.EachRecord(func(r *kgo.Record) {
			led.consume(r.Topic, r.Partition, r.Offset, string(r.Value), by)
		})
	}
}

// TestFranzGoProduceConsume: an idempotent acks=all producer per
// compression codec, then a consumer of explicitly assigned partitions:
// every record exactly once, in offset order per partition, at the offset
// its acknowledgement gave.
func TestFranzGoProduceConsume(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	adm := kadm.NewClient(kgoClient(t, s))
	const topic = "kgo-produce"
	kadmCreate(t, ctx, adm, topic, 3, nil)

	led := newLedger()
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		cl := kgoClient(t, s, kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(kgo.AllISRAcks()))
		kgoProduce(t, ctx, cl, led, topic, name, 200)
		cl.Close()
	}
	// acks=1, not idempotent (kgo requires that combination).
	cl := kgoClient(t, s, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	kgoProduce(t, ctx, cl, led, topic, "acks1", 100)

	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range int32(3) {
		offsets[topic][p] = kgo.NewOffset().AtStart()
	}
	consumer := kgoClient(t, s, kgo.ConsumePartitions(offsets))
	kgoConsumeAll(t, ctx, consumer, led, led.count(), "kgo")
	// Nothing more arrives.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	consumer.PollFetches(short).EachRecord(func(r *kgo.Record) {
		led.consume(r.Topic, r.Partition, r.Offset, string(r.Value), "kgo")
	})
	led.checkExactlyOnce(t)

	// The end offsets the server lists agree with what was produced.
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		total += o.Offset
	})
	require.Equal(t, int64(led.count()), total)
}

// TestFranzGoGroupRebalance: members of one group (kgo's default
// cooperative-sticky balancer) join and leave while a producer writes.
// Rebalancing makes delivery at-least-once: see ledger.checkAtLeastOnce
// for what is checked. At the end the committed offsets must equal the
// end offsets (every member commits what it consumed when its partitions
// are revoked and when it leaves).
func TestFranzGoGroupRebalance(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 90*time.Second)
	adm := kadm.NewClient(kgoClient(t, s))
	const topic, group, total = "kgo-group", "kgo-group-1", 2000
	kadmCreate(t, ctx, adm, topic, 6, nil)

	led := newLedger()
	producer := kgoClient(t, s, kgo.ProducerLinger(time.Millisecond))
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		// 20 rounds of 100, spread over the membership changes below.
		for round := range 20 {
			if err := kgoProduceErr(t, ctx, producer, led, topic, fmt.Sprintf("r%d", round), total/20); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	type member struct {
		cl   *kgo.Client
		done chan struct{}
	}
	startMember := func(name string) *member {
		m := &member{done: make(chan struct{})}
		m.cl = kgoClient(t, s, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.AutoCommitInterval(300*time.Millisecond),
			kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.ClientID(name))
		go func() {
			defer close(m.done)
			for {
				fetches := m.cl.PollFetches(ctx)
				if fetches.IsClientClosed() || ctx.Err() != nil {
					return
				}
				fetches.EachError(func(topic string, p int32, err error) {
					t.Errorf("member %s: fetch %s-%d: %v", name, topic, p, err)
				})
				fetches.EachRecord(func(r *kgo.Record) {
					led.consume(r.Topic, r.Partition, r.Offset, string(r.Value), name)
				})
			}
		}()
		return m
	}
	leave := func(m *member) {
		m.cl.Close() // commits what was consumed, leaves the group
		<-m.done
	}

	a := startMember("a")
	time.Sleep(400 * time.Millisecond)
	b := startMember("b")
	time.Sleep(400 * time.Millisecond)
	c := startMember("c")
	time.Sleep(400 * time.Millisecond)
	leave(a)
	time.Sleep(300 * time.Millisecond)
	d := startMember("d")
	<-produced
	leave(b)
	if t.Failed() {
		t.FailNow()
	}
	require.NoError(t, waitFor(ctx, "every record consumed", func() bool { return led.distinct() >= led.count() }),
		"distinct %d of %d", led.distinct(), led.count())
	leave(c)
	leave(d)
	if led.checkAtLeastOnce(t) > 0 {
		// Allowed, but say why: the error responses around the
		// rebalances (a refused commit makes the next owner re-read).
		t.Logf("error responses:\n%s", s.errorResponses())
	}

	// Every member committed as it left; the last commits cover
	// everything.
	committed, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		require.True(t, ok, "no commit for partition %d", o.Partition)
		require.NoError(t, c.Err)
		require.Equal(t, o.Offset, c.At, "partition %d committed", o.Partition)
	})
	groups, err := adm.DescribeGroups(ctx, group)
	require.NoError(t, err)
	require.Equal(t, "Empty", groups[group].State)
}

// TestFranzGoAdmin drives kadm's topic, config, group and offset calls,
// and the errors Kafka gives for the usual mistakes.
func TestFranzGoAdmin(t *testing.T) {
	s := startServer(t)
	ctx := testContext(t, 60*time.Second)
	adm := kadm.NewClient(kgoClient(t, s))

	// Create, list, describe.
	retention := "3600000"
	created, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": &retention}, "adm-a", "adm-b")
	require.NoError(t, err)
	for _, c := range created {
		require.NoError(t, c.Err, "%s: %s", c.Topic, c.ErrMessage)
		require.Equal(t, int32(2), c.NumPartitions)
		require.False(t, c.ID.String() == "AAAAAAAAAAAAAAAAAAAAAA", "topic ID is zero")
	}
	// The single-topic kadm calls return the topic's error.
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "adm-a")
	require.ErrorIs(t, err, kerr.TopicAlreadyExists)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "bad/name")
	require.ErrorIs(t, err, kerr.InvalidTopicException)

	topics, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	require.True(t, topics.Has("adm-a") && topics.Has("adm-b"), "listed %v", topics.Names())
	require.Len(t, topics["adm-a"].Partitions, 2)
	require.Equal(t, int32(1), topics["adm-a"].Partitions[0].Leader)

	// Configs: describe, alter incrementally, describe again.
	configs, err := adm.DescribeTopicConfigs(ctx, "adm-a")
	require.NoError(t, err)
	rc, err := configs.On("adm-a", nil)
	require.NoError(t, err)
	require.NoError(t, rc.Err)
	require.Equal(t, "3600000", configValue(rc, "retention.ms"))
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("7200000")}}, "adm-a")
	require.NoError(t, err)
	for _, a := range altered {
		require.NoError(t, a.Err, "%s", a.ErrMessage)
	}
	configs, err = adm.DescribeTopicConfigs(ctx, "adm-a")
	require.NoError(t, err)
	rc, _ = configs.On("adm-a", nil)
	require.Equal(t, "7200000", configValue(rc, "retention.ms"))

	// More partitions.
	cp, err := adm.CreatePartitions(ctx, 2, "adm-b")
	require.NoError(t, err)
	for _, r := range cp {
		require.NoError(t, r.Err, "%s", r.ErrMessage)
	}
	topics, err = adm.ListTopics(ctx, "adm-b")
	require.NoError(t, err)
	require.Len(t, topics["adm-b"].Partitions, 4)

	// Offsets: produce, list start/end, commit for a group, fetch,
	// describe and delete the group.
	led := newLedger()
	kgoProduce(t, ctx, kgoClient(t, s), led, "adm-b", "v", 100)
	starts, err := adm.ListStartOffsets(ctx, "adm-b")
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, "adm-b")
	require.NoError(t, err)
	sum := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		s, _ := starts.Lookup("adm-b", o.Partition)
		require.Equal(t, int64(0), s.Offset)
		sum += o.Offset
	})
	require.Equal(t, int64(100), sum)

	const group = "adm-group"
	toCommit := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		toCommit.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	commits, err := adm.CommitOffsets(ctx, group, toCommit)
	require.NoError(t, err)
	require.NoError(t, commits.Error())
	fetched, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	require.NoError(t, fetched.Error())
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := fetched.Lookup("adm-b", o.Partition)
		require.True(t, ok)
		require.Equal(t, o.Offset, c.At)
	})
	lag, err := adm.Lag(ctx, group)
	require.NoError(t, err)
	require.NoError(t, lag.Error())
	require.Equal(t, int64(0), lag[group].Lag.Total())

	// A live member: the group is Stable with one member, and cannot be
	// deleted until it leaves.
	const liveGroup = "adm-live"
	member := kgoClient(t, s, kgo.ConsumerGroup(liveGroup), kgo.ConsumeTopics("adm-b"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < 100 {
		fs := member.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		n += fs.NumRecords()
	}
	described, err := adm.DescribeGroups(ctx, liveGroup)
	require.NoError(t, err)
	require.NoError(t, described.Error())
	require.Equal(t, "Stable", described[liveGroup].State)
	require.Len(t, described[liveGroup].Members, 1)
	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	require.Contains(t, listed.Groups(), liveGroup)
	require.Contains(t, listed.Groups(), group)
	_, err = adm.DeleteGroup(ctx, liveGroup)
	require.ErrorIs(t, err, kerr.NonEmptyGroup)
	member.Close()

	_, err = adm.DeleteGroup(ctx, group)
	require.NoError(t, err)
	listed, err = adm.ListGroups(ctx)
	require.NoError(t, err)
	require.NotContains(t, listed.Groups(), group)

	// Delete topics; deleting one that does not exist is an error.
	deleted, err := adm.DeleteTopics(ctx, "adm-a", "adm-b")
	require.NoError(t, err)
	require.NoError(t, deleted.Error())
	_, err = adm.DeleteTopic(ctx, "adm-a")
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	// kgo answers metadata requests from its cache for MetadataMinAge, so
	// poll (Kafka too propagates a deletion asynchronously).
	require.NoError(t, waitFor(ctx, "deleted topics gone from metadata", func() bool {
		topics, err = adm.ListTopics(ctx)
		return err == nil && !topics.Has("adm-a") && !topics.Has("adm-b")
	}), "listed %v (%v)", topics.Names(), err)
}

// configValue is a config's value in a described resource, "" if absent.
func configValue(rc kadm.ResourceConfig, name string) string {
	for _, c := range rc.Configs {
		if c.Key == name && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}
