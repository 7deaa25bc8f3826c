package clustertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/clustertest"
)

// Example runs three spool processes, creates a topic replicated to all
// three that acknowledges a write once two have it, produces, kills the
// partition's leader, produces again (the client finds the new leader),
// restarts the dead node and checks, when it is back in sync, that every
// acknowledged record is there, once, at its offset.
//
// It prints nothing when all is well. Starting processes takes seconds, so
// under -short it returns at once (and prints nothing either). In a test,
// Start(t, opts) replaces Launch and Close.
func Example() {
	if testing.Short() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := clustertest.Launch(ctx, clustertest.Options{Nodes: 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	const topic = "orders"
	if err := c.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitInSync(ctx, topic); err != nil {
		fmt.Println(err)
		return
	}
	cl, err := c.Client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		fmt.Println(err)
		return
	}
	ledger := clustertest.NewLedger()
	produce := func(from, to int) error {
		for i := from; i < to; i++ {
			v := fmt.Sprintf("order-%d", i)
			ledger.Send(v)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
			if err != nil {
				return err
			}
			ledger.Ack(clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: v})
		}
		return nil
	}
	if err := produce(0, 50); err != nil {
		fmt.Println(err)
		return
	}

	leader, err := c.Leader(ctx, topic, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Node(leader).Kill(); err != nil {
		fmt.Println(err)
		return
	}
	if err := produce(50, 100); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Node(leader).Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitInSync(ctx, topic); err != nil {
		fmt.Println(err)
		return
	}

	ends, err := c.EndOffsets(ctx, topic)
	if err != nil {
		fmt.Println(err)
		return
	}
	reader, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	var read []clustertest.Record
	for int64(len(read)) < ends[0] && ctx.Err() == nil {
		reader.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			read = append(read, clustertest.Record{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		})
	}
	if rep := ledger.Check(read); !rep.OK() || rep.Acked != 100 {
		fmt.Println(rep)
	}
	// Output:
}
