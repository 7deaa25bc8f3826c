// Exactlyonce shows consume-transform-produce with exactly-once results on
// an embedded broker: a worker reads "payments" as a member of a consumer
// group (read_committed, no auto-commit), writes one enriched record per
// payment to "payments-enriched", and commits the group's offsets inside
// the same transaction (Producer.SendOffsetsToTransaction), so that output
// and input positions move together or not at all.
//
//	go run ./examples/exactlyonce
//
// Halfway through, the first worker stops in the middle of a transaction,
// as a crashed process would. A second worker with the same transactional
// id takes over: making its producer fences the first one and aborts the
// open transaction, and its consumer resumes at the offsets committed by
// the last committed transaction. The program then reads the output
// read_committed and checks that every payment is there exactly once, while
// a read_uncommitted reader also sees the aborted records. It exits 1 if
// any payment is missing or doubled.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spoolmq/spool"
)

const (
	input    = "payments"
	output   = "payments-enriched"
	groupID  = "enrichers"
	txnID    = "enricher"
	payments = 300
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "spool-exactlyonce-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := spool.Open(dir, spool.Options{GroupInitialRebalanceDelay: time.Millisecond})
	if err != nil {
		return err
	}
	defer b.Close()
	ctx := context.Background()
	for _, t := range []string{input, output} {
		if err := b.CreateTopic(ctx, t, spool.TopicConfig{Partitions: 3}); err != nil {
			return err
		}
	}
	// The input: small batches, so that each poll takes a few.
	in, err := b.NewProducer(spool.ProducerConfig{BatchBytes: 512})
	if err != nil {
		return err
	}
	for i := range payments {
		acct := fmt.Sprintf("acct-%d", i%7)
		in.Produce(ctx, spool.Record{Topic: input, Key: []byte(acct), Value: []byte(fmt.Sprintf("payment-%d", i))}, nil)
	}
	if err := in.Close(); err != nil {
		return err
	}

	// The first worker commits a few transactions, then stops in the
	// middle of one.
	first, err := newWorker(b)
	if err != nil {
		return err
	}
	for range 3 {
		if _, err := first.step(ctx, true); err != nil {
			return err
		}
	}
	if _, err := first.step(ctx, false); err != nil {
		return err
	}
	first.consumer.Close() // it leaves the group; its transaction stays open
	fmt.Println("worker 1 stopped in the middle of a transaction")

	// The second takes over: its producer fences the first and aborts the
	// open transaction; its consumer resumes where the last commit left.
	second, err := newWorker(b)
	if err != nil {
		return err
	}
	defer second.close()
	if err := first.producer.CommitTransaction(ctx); !errors.Is(err, spool.ErrProducerFenced) {
		return fmt.Errorf("worker 1's late commit: want ErrProducerFenced, got %v", err)
	}
	fmt.Println("worker 1's late commit is refused: producer fenced")
	first.producer.Close()
	for done := 0; done < payments; {
		n, err := second.step(ctx, true)
		if err != nil {
			return err
		}
		if n == 0 {
			var at int64
			for _, o := range second.consumer.Positions() {
				at += o
			}
			if at == payments {
				break
			}
		}
		done += n
	}

	committed, err := readAll(b, spool.ReadCommitted)
	if err != nil {
		return err
	}
	all, err := readAll(b, spool.ReadUncommitted)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, v := range committed {
		count[v]++
	}
	for i := range payments {
		want := fmt.Sprintf("payment-%d enriched", i)
		if count[want] != 1 {
			return fmt.Errorf("%q is in the committed output %d times", want, count[want])
		}
	}
	if len(committed) != payments {
		return fmt.Errorf("the committed output has %d records for %d payments", len(committed), payments)
	}
	fmt.Printf("read_committed:   %d records, every payment exactly once\n", len(committed))
	fmt.Printf("read_uncommitted: %d records (%d from the aborted transaction)\n", len(all), len(all)-len(committed))
	return nil
}

// worker is one consume-transform-produce instance.
type worker struct {
	consumer *spool.Consumer
	producer *spool.Producer
}

func newWorker(b *spool.Broker) (*worker, error) {
	// Making the producer registers the transactional id, fencing any
	// earlier instance and aborting its open transaction.
	p, err := b.NewProducer(spool.ProducerConfig{TransactionalID: txnID, TransactionTimeout: 30 * time.Second, Linger: time.Millisecond})
	if err != nil {
		return nil, err
	}
	c, err := b.NewConsumer(spool.ConsumerConfig{
		Group: groupID, Topics: []string{input},
		AutoCommit: spool.Disabled, IsolationLevel: spool.ReadCommitted, AutoOffsetReset: spool.ResetEarliest,
		MaxPartitionFetchBytes: 512, FetchMaxWait: 50 * time.Millisecond,
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return &worker{consumer: c, producer: p}, nil
}

// step polls once and, if there were records, copies them enriched to the
// output in a transaction with the group's new positions - committed if
// commit is set, left open otherwise. It returns how many records it read.
func (w *worker) step(ctx context.Context, commit bool) (int, error) {
	recs, err := w.consumer.Poll(ctx)
	if err != nil || len(recs) == 0 {
		return 0, err
	}
	if err := w.producer.BeginTransaction(); err != nil {
		return 0, err
	}
	for _, r := range recs {
		w.producer.Produce(ctx, spool.Record{Topic: output, Key: r.Key, Value: append(r.Value, " enriched"...)}, nil)
	}
	if err := w.producer.SendOffsetsToTransaction(ctx, w.consumer.Positions(), w.consumer.GroupMetadata()); err != nil {
		return 0, errors.Join(err, w.producer.AbortTransaction(ctx))
	}
	if !commit {
		return len(recs), w.producer.Flush(ctx)
	}
	return len(recs), w.producer.CommitTransaction(ctx)
}

func (w *worker) close() {
	w.consumer.Close()
	w.producer.Close()
}

// readAll reads the whole output at an isolation level.
func readAll(b *spool.Broker, level spool.IsolationLevel) ([]string, error) {
	c, err := b.NewConsumer(spool.ConsumerConfig{IsolationLevel: level, AutoOffsetReset: spool.ResetEarliest, FetchMaxWait: 20 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Assign(output); err != nil {
		return nil, err
	}
	var out []string
	for empty := 0; empty < 2; {
		recs, err := c.Poll(context.Background())
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			empty++
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	return out, nil
}
