package spool

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
)

// An in-process cluster: exactly one broker says it is the active
// controller; a producer's records are counted by the broker that leads
// each partition (so the brokers' counts add up to what was produced, and
// each matches its own partitions' logs); a group's lag and a consumer's
// lag are known on replicated partitions too.
func TestStatsInLocalCluster(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := NewLocalCluster(ClusterOptions{})
	defer c.Close()
	var brokers []*Broker
	for id := int32(1); id <= 3; id++ {
		b, err := Open(filepath.Join(dir, fmt.Sprint(id)), Options{Cluster: c, NodeID: id})
		require.NoError(t, err)
		defer b.Close()
		brokers = append(brokers, b)
	}
	require.NoError(t, brokers[0].CreateTopic(ctx, "t", TopicConfig{Partitions: 3, ReplicationFactor: 3}))

	controllers := 0
	for _, b := range brokers {
		if b.Stats().ActiveController {
			controllers++
		}
	}
	require.Equal(t, 1, controllers)

	p, err := brokers[0].NewProducer(ProducerConfig{Partitioner: partition.RoundRobinPartitioner()})
	require.NoError(t, err)
	for i := range 30 {
		p.Produce(ctx, Record{Topic: "t", Value: fmt.Appendf(nil, "v%02d", i)}, nil)
	}
	require.NoError(t, p.Flush(ctx))
	require.NoError(t, p.Close())
	_, err = brokers[1].Produce(ctx, Record{Topic: "t", Value: []byte("one more")})
	require.NoError(t, err)

	var total int64
	for _, b := range brokers {
		st := b.Stats()
		var in, led int64
		for _, ts := range st.Topics {
			if ts.Topic == "t" {
				in = ts.RecordsIn
			}
		}
		for _, ps := range st.Partitions {
			if ps.Topic == "t" && ps.IsLeader {
				led += ps.EndOffset
			}
		}
		require.Equal(t, led, in, "broker %d counts the records of the partitions it leads", st.NodeID)
		require.Equal(t, 3, len(st.Partitions), "broker %d holds a replica of each partition", st.NodeID)
		total += in
	}
	require.EqualValues(t, 31, total)

	// A group on broker 1 reads everything, commits 1 short in each
	// partition: lag 1 each, learned from the replicas broker 1 holds.
	cons, err := brokers[0].NewConsumer(ConsumerConfig{Group: "g", Topics: []string{"t"}, AutoOffsetReset: ResetEarliest})
	require.NoError(t, err)
	defer cons.Close()
	var got int
	for got < 31 {
		recs, err := cons.Poll(ctx)
		require.NoError(t, err)
		got += len(recs)
	}
	cs := cons.Stats()
	require.Len(t, cs.Lag, 3, "lag of replicated partitions, as their last fetches saw")
	require.Zero(t, cs.LagMax)
	commit := map[TopicPartition]int64{}
	for tp, pos := range cons.Positions() {
		commit[tp] = pos - 1
	}
	require.NoError(t, cons.CommitOffsets(ctx, commit))
	require.Eventually(t, func() bool {
		lag, err := brokers[0].Lag(ctx, "g")
		if err != nil || len(lag) != 3 {
			return false
		}
		for _, l := range lag {
			if l.Lag != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
}

// A producer's retry that the broker recognises as a duplicate is a
// request, not records in: counting it again would overstate the traffic.
func TestStatsDuplicateBatchIsNotCountedIn(t *testing.T) {
	ctx := context.Background()
	b := openBroker(t, t.TempDir(), Options{})
	defer b.Close()
	require.NoError(t, b.CreateTopic(ctx, "t", TopicConfig{}))
	pid, err := b.AllocateProducerID(ctx)
	require.NoError(t, err)
	batch, err := record.NewBatch([]record.Record{{Value: []byte("a")}, {Value: []byte("b")}},
		record.BatchOptions{Producer: &record.ProducerInfo{ID: pid, Epoch: 0, BaseSequence: 0}, Now: time.Now()})
	require.NoError(t, err)
	for range 2 {
		base, err := b.ProduceBatch(ctx, "t", 0, batch, ProduceOptions{})
		require.NoError(t, err)
		require.Zero(t, base)
	}
	st := b.Stats().Topics[0]
	require.EqualValues(t, 2, st.ProduceRequests)
	require.EqualValues(t, 2, st.RecordsIn, "the retry was not written again")
	require.EqualValues(t, batch.Size(), st.BytesIn)
}
