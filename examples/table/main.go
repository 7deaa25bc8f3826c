// Table shows a compacted topic used as a changelog: the durable form of a
// key-value table, as Kafka Streams and Kafka Connect keep their state.
//
// Every change to the table is a record: an update is the key with its new
// value, a delete is a tombstone - the key with a nil value. Replaying the
// topic from the start rebuilds the table. Compaction
// (CleanupPolicy: spool.CleanupCompact) keeps only the latest record of
// each key, so the topic stays proportional to the table rather than to its
// history, and the replay gets shorter.
//
// The program writes a history of price changes and deletions for a
// handful of products, rebuilds the table by consuming the topic from the
// start, compacts the topic with Broker.Compact, then closes and reopens
// the broker and rebuilds the table again from the compacted topic: the
// same contents from far fewer records. It exits 1 if either table
// differs from what was written.
//
//	go run ./examples/table            # in a fresh temporary directory
//	go run ./examples/table -data dir  # in dir (a topic prices there is replaced)
//
// Segments are tiny (1 KiB) so that there are sealed segments to clean -
// compaction never touches the active one - and tombstones are kept only
// briefly (DeleteRetention) so that this clean already drops them; a real
// changelog keeps them long enough (Kafka's default: a day) for every
// consumer to see the deletion.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spoolmq/spool"
)

const (
	topic      = "prices"
	partitions = 2
	products   = 8
	rounds     = 60 // of changes, each to every product
)

func main() {
	data := flag.String("data", "", "data directory (default: a new temporary directory)")
	flag.Parse()
	if err := run(*data); err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "spool-table-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	ctx := context.Background()

	b, err := spool.Open(dir, spool.Options{})
	if err != nil {
		return err
	}
	defer func() { // b changes when the broker is reopened
		if b != nil {
			b.Close()
		}
	}()
	cfg := spool.TopicConfig{
		Partitions:      partitions,
		CleanupPolicy:   spool.CleanupCompact,
		SegmentBytes:    1 << 10,
		DeleteRetention: time.Millisecond,
	}
	err = b.CreateTopic(ctx, topic, cfg)
	if errors.Is(err, spool.ErrTopicExists) { // -data: a second run starts afresh
		if err = b.DeleteTopic(ctx, topic); err == nil {
			err = b.CreateTopic(ctx, topic, cfg)
		}
	}
	if err != nil {
		return err
	}
	fmt.Printf("broker in %s, topic %s: compacted, %d partitions, 1 KiB segments\n", dir, topic, partitions)

	want, updates, deletes, err := writeHistory(ctx, b)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d updates and %d deletes of %d keys\n", updates, deletes, products)

	table, read, err := buildTable(ctx, b)
	if err != nil {
		return err
	}
	fmt.Printf("table rebuilt from %d records (%s on disk):\n", read, size(b))
	printTable(table)
	if !maps.Equal(table, want) {
		return errors.New("the table differs from what was written")
	}

	// Compact now, rather than waiting for the background cleaner
	// (Options.CleanerBackoff) to find the topic dirty enough. It cleans
	// the sealed segments; each partition's active segment, the newest
	// records, stays as it is.
	st, err := b.Compact(ctx, topic)
	if err != nil {
		return err
	}
	fmt.Printf("compacted: read %d records of the sealed segments, kept %d, removed %d tombstone(s)\n",
		st.RecordsRead, st.RecordsKept, st.TombstonesRemoved)

	// Close and reopen: the compacted topic is what is on disk.
	err = b.Close()
	b = nil
	if err != nil {
		return err
	}
	if b, err = spool.Open(dir, spool.Options{}); err != nil {
		return err
	}
	table, read, err = buildTable(ctx, b)
	if err != nil {
		return err
	}
	fmt.Printf("reopened; table rebuilt from %d records (%s on disk):\n", read, size(b))
	printTable(table)
	if !maps.Equal(table, want) {
		return errors.New("the table rebuilt after compaction differs from what was written")
	}
	fmt.Println("same table")
	err = b.Close()
	b = nil
	return err
}

// writeHistory writes rounds of changes: each round sets a new price for
// every product, or now and then deletes it (a tombstone) - a deleted
// product comes back at its next update. It returns the table the history
// leaves and how many updates and deletes it wrote.
func writeHistory(ctx context.Context, b *spool.Broker) (table map[string]string, updates, deletes int, err error) {
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return nil, 0, 0, err
	}
	defer p.Close()
	var mu sync.Mutex // callbacks run on the producer's goroutines
	var failed error
	done := func(_ spool.RecordMetadata, err error) {
		if err != nil {
			mu.Lock()
			failed = errors.Join(failed, err)
			mu.Unlock()
		}
	}
	rng := rand.New(rand.NewPCG(1, 2)) // the same history every run
	table = map[string]string{}
	for range rounds {
		for i := range products {
			key := fmt.Sprintf("product-%d", i)
			rec := spool.Record{Topic: topic, Key: []byte(key)}
			if rng.IntN(6) == 0 {
				delete(table, key)
				deletes++
			} else {
				price := fmt.Sprintf("%d.%02d", 5+rng.IntN(95), rng.IntN(100))
				rec.Value = []byte(price)
				table[key] = price
				updates++
			}
			p.Produce(ctx, rec, done)
		}
		// One batch per partition per round.
		if err := p.Flush(ctx); err != nil {
			return nil, 0, 0, err
		}
		mu.Lock()
		err := failed
		mu.Unlock()
		if err != nil {
			return nil, 0, 0, err
		}
	}
	return table, updates, deletes, p.Close()
}

// buildTable replays the topic from the start of every partition up to its
// high watermark: a record sets its key's value, a tombstone deletes the
// key. It returns the table and the number of records read.
func buildTable(ctx context.Context, b *spool.Broker) (map[string]string, int, error) {
	c, err := b.NewConsumer(spool.ConsumerConfig{FetchMaxWait: 10 * time.Millisecond})
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	if err := c.Assign(topic); err != nil {
		return nil, 0, err
	}
	if err := c.SeekToStart(topic); err != nil {
		return nil, 0, err
	}
	table := map[string]string{}
	read := 0
	for {
		caughtUp, err := caughtUp(b, c)
		if err != nil || caughtUp {
			return table, read, err
		}
		recs, err := c.Poll(ctx)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range recs {
			if r.Value == nil {
				delete(table, string(r.Key))
			} else {
				table[string(r.Key)] = string(r.Value)
			}
		}
		read += len(recs)
	}
}

// caughtUp reports whether c has read every partition up to its high
// watermark.
func caughtUp(b *spool.Broker, c *spool.Consumer) (bool, error) {
	for i := range int32(partitions) {
		p, err := b.Partition(topic, i)
		if err != nil {
			return false, err
		}
		pos, err := c.Position(topic, i)
		if err != nil {
			return false, err
		}
		if pos < p.HighWatermark() {
			return false, nil
		}
	}
	return true, nil
}

// size is the topic's size on disk.
func size(b *spool.Broker) string {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		return "?"
	}
	var n int64
	for _, p := range d.Partitions {
		n += p.Size
	}
	return fmt.Sprintf("%d bytes", n)
}

// printTable prints the table, a key a line, sorted, then the keys it
// lacks: deleted by their latest record.
func printTable(t map[string]string) {
	var deleted []string
	for i := range products {
		key := fmt.Sprintf("product-%d", i)
		if v, ok := t[key]; ok {
			fmt.Printf("  %s  %6s\n", key, v)
		} else {
			deleted = append(deleted, key)
		}
	}
	fmt.Printf("  deleted: %s\n", strings.Join(deleted, ", "))
}
