package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/log"
)

const topicName = "bench"

// spoolSystem is the embedded spool broker: one topic of the given number of
// partitions, one Producer with the default configuration (acks all, linger
// 5 ms, batches of 16 KiB, records without keys - so the default sticky
// partitioner spreads batches over the partitions), then one Consumer with
// the default configuration assigned every partition from the start.
type spoolSystem struct {
	partitions int
}

func (s *spoolSystem) name() string {
	if s.partitions == 1 {
		return "spool"
	}
	return fmt.Sprintf("spool-%dp", s.partitions)
}

// openSpool opens a broker in dir with one topic.
// spoolSegmentBytes is --spool-segment-bytes: the topics' segment size (0:
// the default, 1 GiB).
var spoolSegmentBytes int64

func openSpool(ctx context.Context, dir string, c cell, partitions int) (*spool.Broker, error) {
	flush := log.None
	if c.sync() {
		flush = log.Sync
	}
	b, err := spool.Open(dir, spool.Options{Flush: flush})
	if err != nil {
		return nil, err
	}
	if err := b.CreateTopic(ctx, topicName, spool.TopicConfig{Partitions: int32(partitions), SegmentBytes: spoolSegmentBytes}); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// acks counts a producer's callbacks and keeps the first error.
type acks struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

func (a *acks) callback(_ spool.RecordMetadata, err error) {
	if err != nil {
		a.mu.Lock()
		if a.first == nil {
			a.first = err
		}
		a.mu.Unlock()
	}
	a.n.Add(1)
}

func (a *acks) err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.first
}

func (s *spoolSystem) run(ctx context.Context, dir string, c cell) (res result, err error) {
	b, err := openSpool(ctx, dir, c, s.partitions)
	if err != nil {
		return result{}, err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	p, err := b.NewProducer(spool.ProducerConfig{})
	if err != nil {
		return result{}, err
	}
	res.records = c.records

	// Publish: asynchronous, the callbacks counted, then Flush waits for
	// the last acknowledgement.
	src := newValueSource(c.size)
	val := make([]byte, c.size)
	var a acks
	start := time.Now()
	for i := range c.records {
		src.fill(val, i) // Produce copies the value
		p.Produce(ctx, spool.Record{Topic: topicName, Value: val}, a.callback)
	}
	if err := p.Flush(ctx); err != nil {
		p.Close()
		return result{}, err
	}
	res.publish = time.Since(start)
	if err := p.Close(); err != nil {
		return result{}, err
	}
	if err := a.err(); err != nil {
		return result{}, fmt.Errorf("produce: %w", err)
	}
	if n := a.n.Load(); n != int64(c.records) {
		return result{}, fmt.Errorf("produce: %d callbacks for %d records", n, c.records)
	}

	// Replay: every record, from the start, in order within a partition.
	cons, err := b.NewConsumer(spool.ConsumerConfig{})
	if err != nil {
		return result{}, err
	}
	defer cons.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start = time.Now()
	if err := cons.Assign(topicName); err != nil {
		return result{}, err
	}
	if err := cons.SeekToStart(topicName); err != nil {
		return result{}, err
	}
	last := make([]int64, s.partitions) // index of the last record read from each partition
	for i := range last {
		last[i] = -1
	}
	n := 0
	for n < c.records {
		recs, err := cons.Poll(pctx)
		if err != nil {
			return result{}, fmt.Errorf("poll after %d records: %w", n, err)
		}
		for _, r := range recs {
			if s.partitions == 1 {
				if err := checkValue(r.Value, n, c.size); err != nil {
					return result{}, err
				}
			} else {
				if len(r.Value) != c.size {
					return result{}, fmt.Errorf("record %d: value of %d bytes, want %d", n, len(r.Value), c.size)
				}
				idx := int64(binary.BigEndian.Uint64(r.Value))
				if idx <= last[r.Partition] {
					return result{}, fmt.Errorf("partition %d: record %d after record %d", r.Partition, idx, last[r.Partition])
				}
				last[r.Partition] = idx
			}
			n++
		}
	}
	res.replay = time.Since(start)
	if n != c.records {
		return result{}, fmt.Errorf("replay read %d records, want %d", n, c.records)
	}
	return res, nil
}
