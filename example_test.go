package spool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spoolmq/spool"
)

// Open a broker, create a topic, produce a record and read it back.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	b, err := spool.Open(dir, spool.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "events", spool.TopicConfig{Partitions: 1}); err != nil {
		panic(err)
	}
	md, err := b.Produce(ctx, spool.Record{Topic: "events", Key: []byte("k"), Value: []byte("hello")})
	if err != nil {
		panic(err)
	}
	fmt.Println("written to partition", md.Partition, "at offset", md.Offset)

	d, _ := b.DescribeTopic("events")
	fmt.Println("high watermark", d.Partitions[0].HighWatermark)
	// Output:
	// written to partition 0 at offset 0
	// high watermark 1
}

// A Producer batches records per partition and reports each through its
// callback; Flush waits for everything produced so far.
func ExampleBroker_NewProducer() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, _ := spool.Open(dir, spool.Options{})
	defer b.Close()

	p, err := b.NewProducer(spool.ProducerConfig{Linger: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	done := make(chan string, 3)
	for _, v := range []string{"a", "b", "c"} {
		p.Produce(ctx, spool.Record{Topic: "letters", Value: []byte(v)}, func(md spool.RecordMetadata, err error) {
			done <- fmt.Sprintf("%s at offset %d, err %v", v, md.Offset, err)
		})
	}
	if err := p.Flush(ctx); err != nil {
		panic(err)
	}
	p.Close()
	for i := 0; i < 3; i++ {
		fmt.Println(<-done)
	}
	// Output:
	// a at offset 0, err <nil>
	// b at offset 1, err <nil>
	// c at offset 2, err <nil>
}

// A Consumer reads the partitions assigned to it from positions it seeks
// to, waiting for records to arrive.
func ExampleBroker_NewConsumer() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, _ := spool.Open(dir, spool.Options{})
	defer b.Close()
	for _, v := range []string{"one", "two", "three"} {
		b.Produce(ctx, spool.Record{Topic: "numbers", Value: []byte(v)})
	}

	c, err := b.NewConsumer(spool.ConsumerConfig{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Assign("numbers")
	c.Seek("numbers", 0, 1) // skip "one"
	recs, err := c.Poll(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println(r.Offset, string(r.Value))
	}
	// Output:
	// 1 two
	// 2 three
}

// Three brokers in one process replicate a topic: every partition has a
// leader and two followers, and an acks=all record is acknowledged once the
// in-sync replicas hold it.
func ExampleNewLocalCluster() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	c := spool.NewLocalCluster(spool.ClusterOptions{})
	defer c.Close()
	var brokers []*spool.Broker
	for id := int32(1); id <= 3; id++ {
		b, err := spool.Open(filepath.Join(dir, fmt.Sprint("node-", id)), spool.Options{Cluster: c, NodeID: id})
		if err != nil {
			panic(err)
		}
		defer b.Close()
		brokers = append(brokers, b)
	}
	err := brokers[0].CreateTopic(ctx, "orders", spool.TopicConfig{Partitions: 1, ReplicationFactor: 3, MinInSyncReplicas: 2})
	if err != nil {
		panic(err)
	}
	// Any broker's producer finds the leader.
	md, err := brokers[2].Produce(ctx, spool.Record{Topic: "orders", Value: []byte("first")})
	if err != nil {
		panic(err)
	}
	d, _ := brokers[1].DescribeTopic("orders")
	p := d.Partitions[0]
	fmt.Printf("offset %d; leader %d, replicas %v, %d in sync, high watermark %d\n", md.Offset, p.Leader, p.Replicas, len(p.ISR), p.HighWatermark)
	// Output: offset 0; leader 1, replicas [1 2 3], 3 in sync, high watermark 1
}

// A transactional producer: what a transaction writes is read
// read_committed once it commits, and never if it aborts.
func ExampleProducer_BeginTransaction() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, err := spool.Open(dir, spool.Options{TransactionStatePartitions: 1})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "ledger", spool.TopicConfig{Partitions: 1}); err != nil {
		panic(err)
	}
	p, err := b.NewProducer(spool.ProducerConfig{TransactionalID: "ledger-writer"})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	write := func(commit bool, values ...string) {
		if err := p.BeginTransaction(); err != nil {
			panic(err)
		}
		for _, v := range values {
			p.Produce(ctx, spool.Record{Topic: "ledger", Value: []byte(v)}, nil)
		}
		if commit {
			err = p.CommitTransaction(ctx)
		} else {
			err = p.AbortTransaction(ctx)
		}
		if err != nil {
			panic(err)
		}
	}
	write(true, "debit 10", "credit 10")
	write(false, "debit 99") // aborted
	write(true, "debit 5", "credit 5")

	c, err := b.NewConsumer(spool.ConsumerConfig{IsolationLevel: spool.ReadCommitted, AutoOffsetReset: spool.ResetEarliest, FetchMaxWait: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Assign("ledger"); err != nil {
		panic(err)
	}
	for n := 0; n < 4; {
		recs, err := c.Poll(ctx)
		if err != nil {
			panic(err)
		}
		for _, r := range recs {
			fmt.Println(string(r.Value))
		}
		n += len(recs)
	}
	// Output:
	// debit 10
	// credit 10
	// debit 5
	// credit 5
}

// Stats and Lag read what a broker measured, without a metrics library: a
// topic's traffic, each partition's offsets and size, a consumer group's
// lag (package spoolprom exports the same to Prometheus).
func ExampleBroker_Stats() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, err := spool.Open(dir, spool.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "events", spool.TopicConfig{Partitions: 1}); err != nil {
		panic(err)
	}
	for i := range 10 {
		if _, err := b.Produce(ctx, spool.Record{Topic: "events", Value: fmt.Appendf(nil, "e%d", i)}); err != nil {
			panic(err)
		}
	}

	// A group member has processed four records and commits that: six
	// behind.
	c, err := b.NewConsumer(spool.ConsumerConfig{Group: "billing", Topics: []string{"events"},
		AutoOffsetReset: spool.ResetEarliest})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Poll(ctx); err != nil {
		panic(err)
	}
	if err := c.CommitOffsets(ctx, map[spool.TopicPartition]int64{{Topic: "events", Partition: 0}: 4}); err != nil {
		panic(err)
	}

	st := b.Stats()
	// Partitions: events' one and __consumer_offsets' fifty.
	fmt.Println("records in:", st.Topics[0].RecordsIn, "partitions:", st.PartitionCount, "under-replicated:", st.UnderReplicated)
	lag, err := b.Lag(ctx, "billing")
	if err != nil {
		panic(err)
	}
	for _, l := range lag {
		fmt.Printf("%s-%d committed %d of %d: lag %d\n", l.Topic, l.Partition, l.Committed, l.End, l.Lag)
	}
	// Output:
	// records in: 10 partitions: 51 under-replicated: 0
	// events-0 committed 4 of 10: lag 6
}
