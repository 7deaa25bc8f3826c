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

// ExampleWorkload isolates a partition's leader from the other nodes -
// its clients still reach it - under idempotent acks=all producers and a
// consumer group, heals the network, waits until the cluster has
// recovered, and checks the run: nothing acknowledged lost, nothing read
// that was never sent, the group's commits never back, the replicas
// byte-identical. (It is compiled, not run: it takes a minute.)
func ExampleWorkload() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := clustertest.Launch(ctx, clustertest.Options{Nodes: 3, LinkProxies: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	const topic = "payments"
	if err := c.CreateTopic(ctx, topic, 3, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitInSync(ctx, topic); err != nil {
		fmt.Println(err)
		return
	}
	w, err := clustertest.StartWorkload(ctx, c, clustertest.WorkloadOptions{Topic: topic})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()

	fault := &clustertest.Isolate{Targets: []clustertest.Target{clustertest.LeaderTarget(topic, 0)}}
	if err := fault.Start(ctx, c); err != nil {
		fmt.Println(err)
		return
	}
	time.Sleep(5 * time.Second) // longer than the session timeout: the others elect a new leader
	if err := fault.Heal(ctx, c); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitInSync(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := w.AwaitProgress(ctx); err != nil {
		fmt.Println(err)
		return
	}

	rep, err := w.Verify(ctx) // kills the nodes to compare their files
	if err != nil {
		fmt.Println(err)
		return
	}
	if !rep.OK() {
		fmt.Println(fault, rep)
	}
}
