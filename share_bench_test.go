package spool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkShareGroup measures a share group's throughput on one
// partition of 100-byte records - records delivered and acknowledged per
// second - with 1, 4 and 16 consumers acknowledging each record on its own
// (each = an acknowledgement, so a state write, per record) or each poll's
// records at once (batch), against a classic group's single consumer that
// commits its offsets after each poll (classic-1). Share consumers take at
// most 500 records a poll (the default), fewer when there are so many that
// they would not all get a share of the 2000 records a partition may have
// in flight (125 each for 16). The broker keeps its
// default durability (log.Sync): an acknowledgement or commit is on disk
// when it returns. One op is one record.
//
//	go test -run XXX -bench ShareGroup -count 5
func BenchmarkShareGroup(b *testing.B) {
	setup := func(b *testing.B) *Broker {
		br := openBroker(b, b.TempDir(), Options{OffsetsTopicPartitions: 1})
		ctx := context.Background()
		if err := br.CreateTopic(ctx, "jobs", TopicConfig{Partitions: 1}); err != nil {
			b.Fatal(err)
		}
		p, _ := br.NewProducer(ProducerConfig{})
		value := make([]byte, 100)
		for range b.N {
			p.Produce(ctx, Record{Topic: "jobs", Value: value}, nil)
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		return br
	}
	b.Run("classic-1", func(b *testing.B) {
		br := setup(b)
		defer br.Close()
		c, err := br.NewConsumer(ConsumerConfig{Group: "g", Topics: []string{"jobs"}, AutoOffsetReset: ResetEarliest,
			AutoCommit: Disabled, FetchMaxWait: 10 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		b.ResetTimer()
		for n := 0; n < b.N; {
			recs, err := c.Poll(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(recs)
			if err := c.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	for _, consumers := range []int{1, 4, 16} {
		for _, mode := range []string{"each", "batch"} {
			b.Run(fmt.Sprintf("share-%d-%s", consumers, mode), func(b *testing.B) {
				br := setup(b)
				defer br.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var acked atomic.Int64
				var wg sync.WaitGroup
				cs := make([]*ShareConsumer, consumers)
				for i := range cs {
					c, err := br.NewShareConsumer(ShareConsumerConfig{Group: "g", Topics: []string{"jobs"}, FetchMaxWait: 10 * time.Millisecond, MaxRecords: min(DefaultShareMaxRecords, 2000/consumers)})
					if err != nil {
						b.Fatal(err)
					}
					cs[i] = c
				}
				b.ResetTimer()
				for _, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for acked.Load() < int64(b.N) {
							recs, err := c.Poll(ctx)
							if err != nil {
								return
							}
							if mode == "batch" {
								if err := c.Ack(ctx, recs...); err != nil {
									b.Error(err)
									return
								}
							} else {
								for _, r := range recs {
									if err := c.Ack(ctx, r); err != nil {
										b.Error(err)
										return
									}
								}
							}
							acked.Add(int64(len(recs)))
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				for _, c := range cs {
					c.Close()
				}
			})
		}
	}
}
