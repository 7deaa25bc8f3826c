// Quickstart runs spool's embedded broker: it creates a topic with three
// partitions, produces keyed records, consumes them, closes the broker,
// reopens it and resumes consuming where it left off.
//
//	go run ./examples/quickstart            # in a fresh temporary directory
//	go run ./examples/quickstart -data dir  # in dir, which persists across runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/spoolmq/spool"
)

func main() {
	data := flag.String("data", "", "data directory (default: a new temporary directory)")
	flag.Parse()
	if err := run(*data); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "spool-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	ctx := context.Background()

	// Open the broker. Every partition is a durable log; by default an
	// acknowledged record is on stable storage (the Sync flush policy).
	b, err := spool.Open(dir, spool.Options{})
	if err != nil {
		return err
	}
	err = b.CreateTopic(ctx, "orders", spool.TopicConfig{Partitions: 3})
	if err != nil && !errors.Is(err, spool.ErrTopicExists) { // -data: a second run
		return err
	}
	fmt.Printf("broker in %s, topic orders with 3 partitions\n", dir)

	// Produce keyed records. A Producer batches per partition; records
	// with the same key land in the same partition (Kafka's murmur2), in
	// order.
	if err := produce(ctx, b, []string{"alice", "bob", "carol"}, 1); err != nil {
		return err
	}

	// Consume everything from the start of each partition.
	c, err := b.NewConsumer(spool.ConsumerConfig{FetchMaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := c.Assign("orders"); err != nil {
		return err
	}
	if err := c.SeekToStart("orders"); err != nil {
		return err
	}
	if err := consume(ctx, c, 6); err != nil {
		return err
	}
	// Remember where we are; consumer groups will keep this for us.
	positions := map[int32]int64{}
	for _, tp := range c.Assignment() {
		positions[tp.Partition], _ = c.Position(tp.Topic, tp.Partition)
	}
	c.Close()

	// Close the broker and open it again: the records are still there.
	if err := b.Close(); err != nil {
		return err
	}
	b, err = spool.Open(dir, spool.Options{})
	if err != nil {
		return err
	}
	defer b.Close()
	d, err := b.DescribeTopic("orders")
	if err != nil {
		return err
	}
	fmt.Println("reopened; partitions (start, end):")
	for _, p := range d.Partitions {
		fmt.Printf("  %d: [%d, %d)\n", p.Partition, p.StartOffset, p.EndOffset)
	}

	// More records arrive; a consumer resumes where the last one stopped.
	if err := produce(ctx, b, []string{"alice", "dave"}, 2); err != nil {
		return err
	}
	c, err = b.NewConsumer(spool.ConsumerConfig{FetchMaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Assign("orders"); err != nil {
		return err
	}
	for p, off := range positions {
		if err := c.Seek("orders", p, off); err != nil {
			return err
		}
	}
	fmt.Println("resuming:")
	return consume(ctx, c, 4)
}

// produce sends two orders per customer and waits for them to be written.
func produce(ctx context.Context, b *spool.Broker, customers []string, round int) error {
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return err
	}
	errs := make(chan error, 16)
	for i := 0; i < 2; i++ {
		for _, who := range customers {
			value := fmt.Sprintf("%s order %d.%d", who, round, i)
			p.Produce(ctx, spool.Record{Topic: "orders", Key: []byte(who), Value: []byte(value)},
				func(md spool.RecordMetadata, err error) {
					if err != nil {
						errs <- err
					}
				})
		}
	}
	if err := p.Close(); err != nil { // flushes
		return err
	}
	close(errs)
	return <-errs
}

// consume polls until n records have arrived and prints them by partition.
func consume(ctx context.Context, c *spool.Consumer, n int) error {
	var got []spool.Record
	for len(got) < n {
		recs, err := c.Poll(ctx)
		if err != nil {
			return err
		}
		got = append(got, recs...)
	}
	sort.SliceStable(got, func(i, j int) bool { return got[i].Partition < got[j].Partition })
	for _, r := range got {
		fmt.Printf("  partition %d offset %d  %-6s %s\n", r.Partition, r.Offset, r.Key, r.Value)
	}
	return nil
}
