// Node shows a Go service embedding a node of a networked spool cluster.
// Each node is what `spool serve --controller-quorum-voters ...` runs: a
// member of the controller quorum (Raft), a broker whose replicas the
// cluster's controller places and elects, and a Kafka-protocol server that
// Kafka clients and the other nodes talk to. A real deployment runs one
// node per process (per machine); this example starts three in one process,
// on loopback ports, so that it runs anywhere:
//
//	go run ./examples/node
//
// A service starts its node with transport.StartNode and uses the node's
// Broker as it would a standalone one: a topic created on any node is the
// cluster's, a Producer on node 1 writes to every partition's leader
// wherever it runs (acks=all: every in-sync replica has the record), and a
// Consumer on node 2 reads them. Then node 1 shuts down in a controlled
// way - its leaderships move first - and the others keep serving every
// record. The program exits 1 if an acknowledged record is missing.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/transport"
)

const topic = "orders"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

// freePort reserves a loopback port for a listener to come.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func run() error {
	dir, err := os.MkdirTemp("", "spool-node-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The controller quorum: every node is a voter (KRaft's combined
	// mode). In production these are the machines' addresses, the same
	// list on every node.
	var voters []string
	ctrl := map[int32]string{}
	for id := int32(1); id <= 3; id++ {
		if ctrl[id], err = freePort(); err != nil {
			return err
		}
		voters = append(voters, fmt.Sprintf("%d@%s", id, ctrl[id]))
	}
	nodes := map[int32]*transport.Node{}
	defer func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() { n.Close(context.Background()) })
		}
		wg.Wait()
	}()
	for id := int32(1); id <= 3; id++ {
		n, err := transport.StartNode(transport.NodeConfig{
			Dir:              filepath.Join(dir, fmt.Sprint("node-", id)),
			NodeID:           id,
			Listen:           "127.0.0.1:0", // Kafka clients and the other brokers
			ControllerListen: ctrl[id],      // Raft and the controller's requests
			QuorumVoters:     strings.Join(voters, ","),
			// The broker's own options, as for a standalone one.
			Broker: spool.Options{Topic: spool.TopicConfig{ReplicationFactor: 3, MinInSyncReplicas: 2}},
		})
		if err != nil {
			return err
		}
		nodes[id] = n
	}
	for id, n := range nodes {
		select {
		case <-n.Broker().Ready(): // registered and caught up with the cluster's metadata
		case <-ctx.Done():
			return fmt.Errorf("node %d did not join: %w", id, ctx.Err())
		}
		fmt.Printf("node %d: Kafka clients connect to %s\n", id, n.Addr())
	}

	b1, b2 := nodes[1].Broker(), nodes[2].Broker()
	if err := b1.CreateTopic(ctx, topic, spool.TopicConfig{Partitions: 3}); err != nil {
		return err
	}
	if err := waitLeaders(ctx, b2, 3); err != nil {
		return err
	}
	d, err := b2.DescribeTopic(topic)
	if err != nil {
		return err
	}
	for _, p := range d.Partitions {
		fmt.Printf("%s-%d: leader %d, replicas %v, in sync %v\n", topic, p.Partition, p.Leader, p.Replicas, p.ISR)
	}

	// Node 1's producer writes to every partition's leader, here or not.
	p, err := b1.NewProducer(spool.ProducerConfig{Acks: spool.AcksAll})
	if err != nil {
		return err
	}
	acked := map[string]spool.RecordMetadata{}
	for i := range 30 {
		v := fmt.Sprint("order-", i)
		md, err := b1.Produce(ctx, spool.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
		if err != nil {
			return err
		}
		acked[v] = md
	}
	p.Close()
	fmt.Printf("node 1 acknowledged %d records (acks=all)\n", len(acked))

	// Node 1 leaves: a controlled shutdown moves its leaderships first.
	if err := nodes[1].Close(ctx); err != nil {
		return err
	}
	delete(nodes, 1)
	if err := waitLeaders(ctx, b2, 3); err != nil {
		return err
	}
	fmt.Println("node 1 shut down; its partitions have new leaders")

	// Node 2's consumer reads every acknowledged record at its offset.
	c, err := b2.NewConsumer(spool.ConsumerConfig{AutoOffsetReset: spool.ResetEarliest})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Assign(topic); err != nil {
		return err
	}
	for len(acked) > 0 {
		recs, err := c.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			md, ok := acked[string(r.Value)]
			if !ok || md.Partition != r.Partition || md.Offset != r.Offset {
				return fmt.Errorf("read %s at %d/%d, acknowledged at %d/%d", r.Value, r.Partition, r.Offset, md.Partition, md.Offset)
			}
			delete(acked, string(r.Value))
		}
	}
	fmt.Println("node 2 read every acknowledged record at its offset")
	return nil
}

// waitLeaders waits until every partition of the topic has a live leader
// and two replicas in sync, as b sees the cluster.
func waitLeaders(ctx context.Context, b *spool.Broker, partitions int) error {
	for {
		d, err := b.DescribeTopic(topic)
		if err == nil && len(d.Partitions) == partitions {
			ok := true
			for _, p := range d.Partitions {
				ok = ok && p.Leader >= 0 && len(p.ISR) >= 2
			}
			if ok {
				return nil
			}
		}
		if err != nil && !errors.Is(err, spool.ErrUnknownTopic) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s's leaders: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
