// Queue shows a work queue on an embedded broker: a share group
// (spool.ShareConsumer, Kafka's KIP-932 "queues for Kafka") whose workers
// all take jobs from one partition, acknowledging each job they finish.
//
//	go run ./examples/queue
//
// Things go wrong on the way, as they do:
//
//   - two workers crash mid-batch: they stop without acknowledging the
//     jobs they took, or closing; those jobs go to the other workers
//     once their locks expire;
//   - one job is poison: every worker that tries it fails and releases
//     it; after three deliveries it is archived and copied to the dead
//     letter topic "jobs.dead", and the queue flows past it;
//   - halfway through, the whole process "restarts": the broker is closed
//     under the workers and reopened, and new workers carry on; jobs
//     acknowledged before are not delivered again, jobs in flight are.
//
// At the end every job but the poison one has been acknowledged exactly
// once, and the poison one is in the dead letter topic. The program
// checks it and exits 1 otherwise.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/share"
)

const (
	jobs   = 2000
	poison = 777
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

// tally is what the workers did, across restarts.
type tally struct {
	mu          sync.Mutex
	acked       map[int]int // job -> successful acknowledgements
	redelivered atomic.Int64
	refused     atomic.Int64 // acknowledgements refused: the lock had moved on
}

func run() error {
	dir, err := os.MkdirTemp("", "spool-queue-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := spool.Options{ShareLockDuration: 300 * time.Millisecond, ShareDeliveryLimit: 3}
	b, err := spool.Open(dir, opts)
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, t := range []string{"jobs", "jobs.dead"} {
		if err := b.CreateTopic(ctx, t, spool.TopicConfig{Partitions: 1}); err != nil {
			return err
		}
	}
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return err
	}
	for i := range jobs {
		p.Produce(ctx, spool.Record{Topic: "jobs", Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := p.Close(); err != nil {
		return err
	}

	t := &tally{acked: map[int]int{}}
	// First life: six workers, two of which crash.
	stop := startWorkers(b, t, 6, map[int]bool{1: true, 4: true})
	waitFor(t, jobs/2)
	stop()
	// The process dies: the broker goes away under its workers.
	if err := b.Close(); err != nil {
		return err
	}
	fmt.Printf("restart after %d jobs acknowledged\n", t.done())

	b, err = spool.Open(dir, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	stop = startWorkers(b, t, 6, nil)
	if !waitFor(t, jobs-1) {
		stop()
		return fmt.Errorf("only %d of %d jobs acknowledged", t.done(), jobs-1)
	}
	stop()

	// Check: each job acknowledged once, the poison one never and
	// dead-lettered.
	for i := range jobs {
		n := t.acked[i]
		switch {
		case i == poison && n != 0:
			return fmt.Errorf("the poison job was acknowledged")
		case i != poison && n != 1:
			return fmt.Errorf("job %d acknowledged %d times", i, n)
		}
	}
	dead, err := deadLetters(ctx, b)
	if err != nil {
		return err
	}
	if len(dead) != 1 || string(dead[0].Value) != strconv.Itoa(poison) {
		return fmt.Errorf("dead letters: %v", dead)
	}
	fmt.Printf("%d jobs acknowledged exactly once; %d deliveries after a crash or restart; %d late acknowledgements refused\n",
		t.done(), t.redelivered.Load(), t.refused.Load())
	for _, h := range dead[0].Headers {
		if h.Key == "spool.dlq.delivery.count" {
			fmt.Printf("job %s dead-lettered after %s deliveries\n", dead[0].Value, h.Value)
		}
	}
	return nil
}

func (t *tally) done() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.acked)
}

func waitFor(t *tally, n int) bool {
	deadline := time.Now().Add(time.Minute)
	for t.done() < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// startWorkers runs n workers; those named in crash die after their
// tenth batch, holding it. stop ends the others (closing them).
func startWorkers(b *spool.Broker, t *tally, n int, crash map[int]bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range n {
		c, err := b.NewShareConsumer(spool.ShareConsumerConfig{
			Group: "workers", Topics: []string{"jobs"}, MaxRecords: 20,
			FetchMaxWait: 50 * time.Millisecond, DeadLetterTopic: "jobs.dead",
		})
		if err != nil {
			panic(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			crashed := false
			defer func() {
				if !crashed {
					c.Close() // hands back what it holds, at once
				}
			}()
			for batch := 1; ctx.Err() == nil; batch++ {
				recs, err := c.Poll(ctx)
				if err != nil {
					return // stopped, or the broker went away
				}
				if crash[w] && batch == 10 {
					crashed = true
					return // dies holding recs: no Ack, no Close
				}
				var good []spool.ShareRecord
				for _, r := range recs {
					if r.DeliveryCount > 1 {
						t.redelivered.Add(1)
					}
					job, _ := strconv.Atoi(string(r.Value))
					if job == poison {
						// Processing fails: hand it back.
						_ = c.Release(ctx, r)
						continue
					}
					good = append(good, r)
				}
				err = c.Ack(ctx, good...)
				switch {
				case errors.Is(err, share.ErrInvalidRecordState):
					// A lock expired while we worked: nothing of this
					// partition's batch was acknowledged; another
					// worker has those jobs now.
					t.refused.Add(1)
					continue
				case err != nil:
					return // the broker went away
				}
				t.mu.Lock()
				for _, r := range good {
					job, _ := strconv.Atoi(string(r.Value))
					t.acked[job]++
				}
				t.mu.Unlock()
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// deadLetters reads the dead letter topic.
func deadLetters(ctx context.Context, b *spool.Broker) ([]spool.Record, error) {
	c, err := b.NewConsumer(spool.ConsumerConfig{AutoOffsetReset: spool.ResetEarliest, FetchMaxWait: 50 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Assign("jobs.dead"); err != nil {
		return nil, err
	}
	var out []spool.Record
	for range 5 {
		recs, err := c.Poll(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}
