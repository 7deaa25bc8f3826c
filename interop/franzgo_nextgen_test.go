package interop

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFranzGoConsumerGroup848: franz-go's KIP-848 consumer
// (kgo.ServerSideBalancer) against spool serve. Members join and leave
// while records are produced: no partition is ever held by two members
// (kgo's assign and revoke callbacks), nothing is lost (at least once),
// each record is the one acknowledged at its offset, and the group
// commits everything; the coordinator describes it as a consumer group.
func TestFranzGoConsumerGroup848(t *testing.T) {
	s := startServer(t, "--group-consumer-heartbeat-interval", "200ms")
	ctx := testContext(t, 90*time.Second)
	adm := kadm.NewClient(kgoClient(t, s))
	const topic, group, total = "kgo-848", "kgo-848-group", 2000
	kadmCreate(t, ctx, adm, topic, 6, nil)

	led := newLedger()
	producer := kgoClient(t, s, kgo.ProducerLinger(time.Millisecond))
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for round := range 20 {
			if err := kgoProduceErr(t, ctx, producer, led, topic, fmt.Sprintf("r%d", round), total/20); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	var mu sync.Mutex
	owner := map[int32]string{}
	var doubled []string
	type member struct {
		cl   *kgo.Client
		done chan struct{}
	}
	startMember := func(name string) *member {
		m := &member{done: make(chan struct{})}
		drop := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ps[topic] {
				if owner[p] == name {
					delete(owner, p)
				}
			}
		}
		m.cl = kgoClient(t, s, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ServerSideBalancer(),
			kgo.AutoCommitInterval(300*time.Millisecond), kgo.ClientID(name),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range ps[topic] {
					if o, ok := owner[p]; ok && o != name {
						doubled = append(doubled, fmt.Sprintf("partition %d given to %s while %s holds it", p, name, o))
					}
					owner[p] = name
				}
			}),
			kgo.OnPartitionsRevoked(drop), kgo.OnPartitionsLost(drop))
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
		// kgo's auto-commit commits only what earlier polls returned; its
		// documentation asks for a last commit before leaving.
		if err := m.cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Errorf("final commit: %v", err)
		}
		m.cl.Close()
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
	described, err := adm.DescribeConsumerGroups(ctx, group)
	if err == nil {
		t.Logf("ConsumerGroupDescribe: %+v", described)
	}
	leave(c)
	leave(d)
	if led.checkAtLeastOnce(t) > 0 {
		t.Logf("error responses:\n%s", s.errorResponses())
	}
	mu.Lock()
	require.Empty(t, doubled)
	mu.Unlock()

	committed, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		require.True(t, ok, "no commit for partition %d", o.Partition)
		require.Equal(t, o.Offset, c.At, "partition %d committed; error responses:\n%s", o.Partition, s.errorResponses())
	})
	listed, err := adm.ListGroups(ctx)
	require.NoError(t, err)
	require.Contains(t, listed, group)
}

// TestFranzGoShareGroup: franz-go's share consumer (kgo.ShareGroup,
// KIP-932) against spool serve: eight consumers on one partition accept
// every record once; then the server is SIGKILLed and restarted on its
// data, and no record whose acceptance was confirmed (FlushAcks returned)
// is delivered again, while the rest are.
func TestFranzGoShareGroup(t *testing.T) {
	s := startServer(t, "--flush", "sync", "--group-consumer-heartbeat-interval", "1s", "--share-lock-duration", "3s")
	ctx := testContext(t, 120*time.Second)
	adm := kadm.NewClient(kgoClient(t, s))
	const topic, group, total = "kgo-share", "kgo-share-group", 4000
	kadmCreate(t, ctx, adm, topic, 1, nil)
	setShareEarliest(t, ctx, kgoClient(t, s), group)
	led := newLedger()
	kgoProduce(t, ctx, kgoClient(t, s), led, topic, "job", total)

	var mu sync.Mutex
	confirmed := map[int64]bool{}
	var late []string
	run := func(ctx context.Context, wg *sync.WaitGroup, name string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
			kgo.ShareMaxRecords(25), kgo.FetchMaxWait(200*time.Millisecond), kgo.RetryTimeout(15*time.Second))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for ctx.Err() == nil {
				fs := cl.PollRecords(ctx, 25)
				var got []*kgo.Record
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					if confirmed[r.Offset] {
						late = append(late, strconv.FormatInt(r.Offset, 10))
					}
					mu.Unlock()
					led.consume(r.Topic, r.Partition, r.Offset, string(r.Value), name)
					r.Ack(kgo.AckAccept)
					got = append(got, r)
				})
				if len(got) == 0 {
					continue
				}
				if cl.FlushAcks(ctx) == nil {
					mu.Lock()
					for _, r := range got {
						confirmed[r.Offset] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	phase := func(until func() bool, then func()) {
		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 8 {
			run(pctx, &wg, fmt.Sprint("c", i))
		}
		require.NoError(t, waitFor(ctx, "progress", until))
		then()
		cancel()
		wg.Wait()
	}
	// Half way, with the consumers busy, the server is SIGKILLed; then it
	// starts again on the same data and new consumers carry on.
	phase(func() bool { mu.Lock(); defer mu.Unlock(); return len(confirmed) >= total/2 }, func() {
		require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
		_ = s.cmd.Wait()
	})
	s = restartServer(t, s, "--flush", "sync", "--group-consumer-heartbeat-interval", "1s", "--share-lock-duration", "3s")
	phase(func() bool { return led.distinct() >= total }, func() {})
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, late, "records delivered after their acceptance was confirmed")
	require.Positive(t, led.checkDelivered(t), "the kill left records in flight, delivered again")
}

// setShareEarliest sets a share group's share.auto.offset.reset to
// earliest (IncrementalAlterConfigs on resource type GROUP), as a kgo
// application must to be given records produced before it joined.
func setShareEarliest(t *testing.T, ctx context.Context, cl *kgo.Client, group string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value, c.Op = "share.auto.offset.reset", kadm.StringPtr("earliest"), kmsg.IncrementalAlterConfigOpSet
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, resp.Resources[0].ErrorCode, "%v", resp.Resources[0].ErrorMessage)
}
