// Cluster shows replication between three brokers in one process. They join
// a LocalCluster; a topic with three partitions is placed on all three
// (ReplicationFactor 3), and a producer on broker 1 writes with acks=all
// (MinInSyncReplicas 2). Then a broker leading a partition shuts down; the
// controller moves its leaderships to in-sync replicas and the producer,
// finding the new leaders, keeps going. A consumer on another broker then
// reads every acknowledged record, each at the offset its acknowledgement
// gave. Last, the broker is opened again: it catches up and rejoins every
// ISR. (replica/replicatest crashes brokers instead, with faults on demand.)
//
//	go run ./examples/cluster
//
// Timings are short (a 300 ms session timeout, a 200 ms replica lag time)
// so the example finishes in a second or two; Kafka's defaults are 9 s and
// 30 s. The program exits 1
// if an acknowledged record is missing.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spoolmq/spool"
)

const topic = "orders"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "spool-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	c := spool.NewLocalCluster(spool.ClusterOptions{
		SessionTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		ReplicaLagTime: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
	})
	defer c.Close()
	open := func(id int32) (*spool.Broker, error) {
		return spool.Open(filepath.Join(dir, fmt.Sprint("node-", id)), spool.Options{Cluster: c, NodeID: id})
	}
	brokers := map[int32]*spool.Broker{}
	for id := int32(1); id <= 3; id++ {
		b, err := open(id)
		if err != nil {
			return err
		}
		brokers[id] = b
	}
	defer func() {
		for _, b := range brokers {
			b.Close()
		}
	}()
	if err := brokers[1].CreateTopic(ctx, topic, spool.TopicConfig{Partitions: 3, ReplicationFactor: 3, MinInSyncReplicas: 2}); err != nil {
		return err
	}
	if err := describe(brokers[1], "created"); err != nil {
		return err
	}

	p, err := brokers[1].NewProducer(spool.ProducerConfig{Acks: spool.AcksAll, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	defer p.Close()
	var mu sync.Mutex
	acked := map[string]spool.RecordMetadata{}
	produce := func(round string, n int) error {
		for i := 0; i < n; i++ {
			v := fmt.Sprintf("%s-%d", round, i)
			p.Produce(ctx, spool.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}, func(md spool.RecordMetadata, err error) {
				if err == nil {
					mu.Lock()
					acked[v] = md
					mu.Unlock()
				}
			})
		}
		return p.Flush(ctx)
	}
	if err := produce("before", 1000); err != nil {
		return err
	}

	// The leader of partition 0 goes away; if that is broker 1, which the
	// producer uses, take the leader of another partition instead.
	d, err := brokers[1].DescribeTopic(topic)
	if err != nil {
		return err
	}
	victim := d.Partitions[0].Leader
	if victim == 1 {
		victim = d.Partitions[1].Leader
	}
	fmt.Printf("broker %d shuts down\n", victim)
	if err := brokers[victim].Close(); err != nil {
		return err
	}
	delete(brokers, victim)
	if err := produce("after", 1000); err != nil {
		return err
	}
	if err := describe(brokers[1], "after the shutdown"); err != nil {
		return err
	}

	// Read everything back through another broker.
	reader := brokers[1]
	for id, b := range brokers {
		if id != 1 {
			reader = b
		}
	}
	cons, err := reader.NewConsumer(spool.ConsumerConfig{AutoOffsetReset: spool.ResetEarliest, FetchMaxWait: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer cons.Close()
	if err := cons.Assign(topic); err != nil {
		return err
	}
	got := map[string]int64{}
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(acked) && time.Now().Before(deadline); {
		recs, err := cons.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			got[string(r.Value)] = r.Offset
		}
	}
	for v, md := range acked {
		if off, ok := got[v]; !ok || off != md.Offset {
			return fmt.Errorf("acknowledged record %s at %d-%d was not read back there", v, md.Partition, md.Offset)
		}
	}
	fmt.Printf("%d records acknowledged, all read back at their offsets\n", len(acked))

	// The broker comes back and catches up.
	b, err := open(victim)
	if err != nil {
		return err
	}
	brokers[victim] = b
	for deadline := time.Now().Add(10 * time.Second); ; {
		d, err := b.DescribeTopic(topic)
		if err != nil {
			return err
		}
		full := true
		for _, pd := range d.Partitions {
			full = full && len(pd.ISR) == 3
		}
		if full {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %d did not rejoin the ISRs", victim)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return describe(b, fmt.Sprintf("broker %d is back", victim))
}

func describe(b *spool.Broker, when string) error {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		return err
	}
	fmt.Printf("%s:\n", when)
	for _, pd := range d.Partitions {
		fmt.Printf("  %s-%d  leader %d  replicas %v  isr %v  high watermark %d\n", topic, pd.Partition, pd.Leader, pd.Replicas, pd.ISR, pd.HighWatermark)
	}
	return nil
}
