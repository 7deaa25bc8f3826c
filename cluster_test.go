package spool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/log"
	"github.com/stretchr/testify/require"
)

// fastCluster is a LocalCluster that notices failures within a few hundred
// milliseconds.
func fastCluster(t testing.TB) *LocalCluster {
	c := NewLocalCluster(ClusterOptions{SessionTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		ReplicaLagTime: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, FetchBackoff: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func openNode(t testing.TB, c *LocalCluster, root string, id int32, flush log.FlushPolicy) *Broker {
	t.Helper()
	b, err := Open(filepath.Join(root, fmt.Sprintf("node-%d", id)), Options{Cluster: c, NodeID: id, Flush: flush})
	require.NoError(t, err)
	return b
}

func threeNodes(t testing.TB, flush log.FlushPolicy) (*LocalCluster, []*Broker, string) {
	c := fastCluster(t)
	root := t.TempDir()
	var bs []*Broker
	for id := int32(1); id <= 3; id++ {
		bs = append(bs, openNode(t, c, root, id, flush))
	}
	t.Cleanup(func() {
		for _, b := range bs {
			b.Close()
		}
	})
	return c, bs, root
}

// produceAcked produces n records with values prefix-i to topic and waits for
// every acknowledgement, returning the offsets by value.
func produceAcked(t testing.TB, p *Producer, topic, prefix string, n int) map[string]RecordMetadata {
	t.Helper()
	var mu sync.Mutex
	acked := map[string]RecordMetadata{}
	var errs []error
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s-%d", prefix, i)
		p.Produce(context.Background(), Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(md RecordMetadata, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			acked[v] = md
		})
	}
	require.NoError(t, p.Flush(context.Background()))
	require.Empty(t, errs)
	return acked
}

// readAllFrom reads topic's records from the start on broker b, by value,
// until it has at least want and a poll finds nothing more.
func readAllFrom(t testing.TB, b *Broker, topic string, want int) map[string]Record {
	t.Helper()
	c, err := b.NewConsumer(ConsumerConfig{FetchMaxWait: 20 * time.Millisecond, AutoOffsetReset: ResetEarliest})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Assign(topic))
	got := map[string]Record{}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		recs, err := c.Poll(context.Background())
		require.NoError(t, err)
		for _, r := range recs {
			got[string(r.Value)] = r
		}
		if len(recs) == 0 && len(got) >= want {
			break
		}
	}
	require.GreaterOrEqual(t, len(got), want)
	return got
}

func TestClusterReplicatesAndFailsOver(t *testing.T) {
	_, bs, root := threeNodes(t, log.Sync)
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "orders", TopicConfig{Partitions: 3, ReplicationFactor: 3, MinInSyncReplicas: 2}))
	require.ErrorIs(t, bs[1].CreateTopic(ctx, "orders", TopicConfig{}), ErrTopicExists)
	require.Contains(t, bs[2].Topics(), "orders", "every broker sees the cluster's topics")

	d, err := bs[1].DescribeTopic("orders")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 3)
	leaders := map[int32]bool{}
	for _, p := range d.Partitions {
		require.Len(t, p.Replicas, 3)
		require.ElementsMatch(t, p.Replicas, p.ISR)
		require.Equal(t, p.Replicas[0], p.Leader, "the preferred replica leads")
		leaders[p.Leader] = true
	}
	require.Len(t, leaders, 3, "leaders spread over the brokers")
	require.Equal(t, 2, d.Config.MinInSyncReplicas)

	// Produce through broker 1; every partition's leader takes its share.
	p, err := bs[0].NewProducer(ProducerConfig{Acks: AcksAll, Linger: time.Millisecond})
	require.NoError(t, err)
	acked := produceAcked(t, p, "orders", "a", 300)
	require.Len(t, acked, 300)
	// Consume through broker 2: everything, at the acknowledged offsets.
	got := readAllFrom(t, bs[1], "orders", 300)
	for v, md := range acked {
		require.Equal(t, md.Offset, got[v].Offset, v)
		require.Equal(t, md.Partition, got[v].Partition, v)
	}

	// Broker 3 goes away (a controlled shutdown: its leaderships move).
	// Producing goes on through the new leaders.
	require.NoError(t, bs[2].Close())
	more := produceAcked(t, p, "orders", "b", 300)
	require.NoError(t, p.Close())
	d, err = bs[0].DescribeTopic("orders")
	require.NoError(t, err)
	for _, pd := range d.Partitions {
		require.NotEqual(t, int32(3), pd.Leader)
		require.NotContains(t, pd.ISR, int32(3))
	}
	got = readAllFrom(t, bs[0], "orders", 600)
	for v, md := range more {
		require.Equal(t, md.Offset, got[v].Offset, v)
	}

	// It comes back, catches up and rejoins every ISR.
	bs[2] = openNode(t, bs[0].opts.Cluster, root, 3, log.Sync)
	require.Eventually(t, func() bool {
		d, err := bs[2].DescribeTopic("orders")
		if err != nil {
			return false
		}
		for _, pd := range d.Partitions {
			if len(pd.ISR) != 3 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	for n := int32(0); n < 3; n++ {
		local, err := bs[2].Partition("orders", n)
		require.NoError(t, err)
		d, _ := bs[0].DescribeTopic("orders")
		require.Equal(t, d.Partitions[n].HighWatermark, local.EndOffset(), "replica %d caught up", n)
	}
}

func TestClusterLeaderLossWithConsumerGroup(t *testing.T) {
	_, bs, _ := threeNodes(t, log.None)
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "events", TopicConfig{Partitions: 2, ReplicationFactor: 3, MinInSyncReplicas: 2}))
	// Producer and consumer work through broker 1; a partition leader on
	// another broker goes away under them.
	p, err := bs[0].NewProducer(ProducerConfig{Linger: time.Millisecond})
	require.NoError(t, err)
	defer p.Close()
	produceAcked(t, p, "events", "x", 100)

	c, err := bs[0].NewConsumer(ConsumerConfig{Group: "g", Topics: []string{"events"}, AutoOffsetReset: ResetEarliest,
		FetchMaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	seen := map[string]bool{}
	poll := func(want int) {
		deadline := time.Now().Add(30 * time.Second)
		for len(seen) < want && time.Now().Before(deadline) {
			recs, err := c.Poll(ctx)
			require.NoError(t, err)
			for _, r := range recs {
				seen[string(r.Value)] = true
			}
		}
		require.Len(t, seen, want)
	}
	poll(100)
	d, err := bs[0].DescribeTopic("events")
	require.NoError(t, err)
	gone := d.Partitions[0].Leader
	if gone == 1 {
		gone = d.Partitions[1].Leader
	}
	require.NotEqual(t, int32(1), gone, "two partitions, two leaders")
	require.NoError(t, bs[gone-1].Close())
	produceAcked(t, p, "events", "y", 100)
	poll(200)
}

func TestClusterRefusals(t *testing.T) {
	ctx := context.Background()
	// A standalone broker has no replicas to place.
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	require.ErrorIs(t, b.CreateTopic(ctx, "t", TopicConfig{ReplicationFactor: 2}), ErrInvalidConfig)
	require.NotContains(t, b.Topics(), "t")

	_, bs, root := threeNodes(t, log.None)
	require.ErrorIs(t, bs[0].CreateTopic(ctx, "big", TopicConfig{ReplicationFactor: 4}), ErrInvalidConfig, "more replicas than brokers")
	require.ErrorIs(t, bs[0].CreateTopic(ctx, "odd", TopicConfig{ReplicationFactor: 2, MinInSyncReplicas: 3}), ErrInvalidConfig)
	require.ErrorIs(t, bs[0].CreateTopic(ctx, "neg", TopicConfig{ReplicationFactor: -1}), ErrInvalidConfig)
	require.NotContains(t, bs[0].Topics(), "big")
	// The same node id twice in one cluster.
	_, err := Open(filepath.Join(root, "dup"), Options{Cluster: bs[0].opts.Cluster, NodeID: 2})
	require.ErrorIs(t, err, ErrInvalidConfig)

	require.NoError(t, bs[0].CreateTopic(ctx, "r", TopicConfig{ReplicationFactor: 2}))
	for name, err := range map[string]error{
		"DeleteTopic":      bs[0].DeleteTopic(ctx, "r"),
		"CreatePartitions": bs[0].CreatePartitions(ctx, "r", 4),
		"AlterTopicConfig": bs[0].AlterTopicConfig(ctx, "r", func(c TopicConfig) (TopicConfig, error) { return c, nil }),
	} {
		require.True(t, errors.Is(err, errors.ErrUnsupported), "%s: %v", name, err)
	}
	_, err = bs[0].Compact(ctx, "r")
	require.ErrorIs(t, err, ErrInvalidConfig, "not a compacted topic")

	// acks=all with the ISR below MinInSyncReplicas: refused, then the
	// producer gives up at its delivery timeout.
	require.NoError(t, bs[0].CreateTopic(ctx, "strict", TopicConfig{ReplicationFactor: 3, MinInSyncReplicas: 3}))
	d, err := bs[0].DescribeTopic("strict")
	require.NoError(t, err)
	for _, id := range d.Partitions[0].Replicas {
		if id != d.Partitions[0].Leader && id != 1 {
			require.NoError(t, bs[id-1].Close())
			break
		}
	}
	p, err := bs[0].NewProducer(ProducerConfig{DeliveryTimeout: time.Second, RetryBackoff: 20 * time.Millisecond})
	require.NoError(t, err)
	defer p.Close()
	_, err = produceSync(p, Record{Topic: "strict", Value: []byte("v")})
	require.ErrorIs(t, err, ErrDeliveryTimeout)
}

// TestCheckPartition: CheckPartition answers from the topic's partition
// count - the cluster's, on a cluster node - not from the replicas this
// broker holds, which Partition returns: a group coordinator takes offsets
// for partitions stored on other brokers.
func TestCheckPartition(t *testing.T) {
	ctx := context.Background()
	b := openBroker(t, t.TempDir(), Options{})
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{Partitions: 2}))
	require.NoError(t, b.CheckPartition("t", 0))
	require.NoError(t, b.CheckPartition("t", 1))
	require.ErrorIs(t, b.CheckPartition("t", 2), ErrUnknownPartition)
	require.ErrorIs(t, b.CheckPartition("t", -1), ErrUnknownPartition)
	require.ErrorIs(t, b.CheckPartition("nosuch", 0), ErrUnknownTopic)
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.CheckPartition("t", 0), ErrClosed)

	_, bs, _ := threeNodes(t, log.None)
	require.NoError(t, bs[0].CreateTopic(ctx, "one", TopicConfig{Partitions: 3, ReplicationFactor: 1}))
	elsewhere := 0
	for _, nb := range bs {
		for n := range int32(3) {
			if _, err := nb.Partition("one", n); err != nil {
				require.ErrorIs(t, err, ErrUnknownPartition)
				elsewhere++
			}
			require.NoError(t, nb.CheckPartition("one", n), "broker %d, partition %d", nb.opts.NodeID, n)
		}
		require.ErrorIs(t, nb.CheckPartition("one", 3), ErrUnknownPartition)
		require.ErrorIs(t, nb.CheckPartition("nosuch", 0), ErrUnknownTopic)
	}
	require.Positive(t, elsewhere, "some broker holds no replica of some partition")
}

func produceSync(p *Producer, r Record) (RecordMetadata, error) {
	type res struct {
		md  RecordMetadata
		err error
	}
	ch := make(chan res, 1)
	p.Produce(context.Background(), r, func(md RecordMetadata, err error) { ch <- res{md, err} })
	out := <-ch
	return out.md, out.err
}

var _ = sort.Strings

// crashNode stops a clustered broker as a crash would: its node stops
// without telling the controller (which notices when heartbeats stop) and
// its replicas close without flushing.
func crashNode(t *testing.T, b *Broker) {
	t.Helper()
	b.node.Halt()
	b.opts.Cluster.net.Unregister(b.opts.NodeID)
	for _, p := range b.replicaPartitions() {
		p.Crash(false)
	}
}

func TestClusterLeaderCrash(t *testing.T) {
	_, bs, _ := threeNodes(t, log.Sync)
	ctx := context.Background()
	require.NoError(t, bs[0].CreateTopic(ctx, "c", TopicConfig{Partitions: 2, ReplicationFactor: 3, MinInSyncReplicas: 2}))
	p, err := bs[0].NewProducer(ProducerConfig{Linger: time.Millisecond, RetryBackoff: 10 * time.Millisecond})
	require.NoError(t, err)
	defer p.Close()

	var mu sync.Mutex
	acked := map[string]RecordMetadata{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprint("v", i)
			md, err := produceSync(p, Record{Topic: "c", Key: []byte(v), Value: []byte(v)})
			if err == nil {
				mu.Lock()
				acked[v] = md
				mu.Unlock()
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	d, err := bs[0].DescribeTopic("c")
	require.NoError(t, err)
	victim := d.Partitions[0].Leader
	if victim == 1 {
		victim = d.Partitions[1].Leader
	}
	crashNode(t, bs[victim-1])
	time.Sleep(time.Second) // the session expires, a new leader is elected, producing resumes
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	d, err = bs[0].DescribeTopic("c")
	require.NoError(t, err)
	for _, pd := range d.Partitions {
		require.NotEqual(t, victim, pd.Leader)
	}
	got := readAllFrom(t, bs[0], "c", len(acked))
	for v, md := range acked {
		require.Equal(t, md.Offset, got[v].Offset, "%s acknowledged at %d", v, md.Offset)
	}
}

// BenchmarkReplicatedProducer measures one goroutine producing 100-byte
// records with acks=all through a Producer, in one run side by side: a
// standalone broker (RF=1), and a three-broker LocalCluster with RF=1 and
// with RF=3, MinInSyncReplicas=2 - the "RF=3 acks=all vs RF=1"
// ratio, on one machine and workload. Six partitions, default batching.
func BenchmarkReplicatedProducer(b *testing.B) {
	for _, flush := range []log.FlushPolicy{log.None, log.Sync} {
		for _, setup := range []struct {
			name    string
			cluster bool
			rf      int
		}{{"standalone-rf1", false, 1}, {"cluster-rf1", true, 1}, {"cluster-rf3", true, 3}} {
			b.Run(fmt.Sprintf("flush=%s/%s", flush, setup.name), func(b *testing.B) {
				var br *Broker
				if setup.cluster {
					c := NewLocalCluster(ClusterOptions{})
					defer c.Close()
					root := b.TempDir()
					var bs []*Broker
					for id := int32(1); id <= 3; id++ {
						bs = append(bs, openNode(b, c, root, id, flush))
					}
					defer func() {
						for _, x := range bs {
							x.Close()
						}
					}()
					br = bs[0]
				} else {
					br = openBroker(b, b.TempDir(), Options{Flush: flush})
					defer br.Close()
				}
				ctx := context.Background()
				cfg := TopicConfig{Partitions: 6, ReplicationFactor: setup.rf, MinInSyncReplicas: min(2, setup.rf)}
				if err := br.CreateTopic(ctx, "t", cfg); err != nil {
					b.Fatal(err)
				}
				p, err := br.NewProducer(ProducerConfig{Acks: AcksAll})
				if err != nil {
					b.Fatal(err)
				}
				value := make([]byte, 100)
				var failed atomic.Int64
				cb := func(_ RecordMetadata, err error) {
					if err != nil {
						failed.Add(1)
					}
				}
				b.SetBytes(100)
				start := time.Now()
				for b.Loop() {
					p.Produce(ctx, Record{Topic: "t", Value: value}, cb)
				}
				if err := p.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
				if failed.Load() > 0 {
					b.Fatalf("%d records failed", failed.Load())
				}
				p.Close()
			})
		}
	}
}
