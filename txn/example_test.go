package txn_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/txn"
)

// memLog is a Store keeping records in memory; a broker appends them to its
// __transaction_state partitions instead.
type memLog struct {
	mu   sync.Mutex
	recs map[int32][]record.Record
}

func (s *memLog) Append(_ context.Context, partition, _ int32, recs []record.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.recs[partition] = append(s.recs[partition], r.Clone())
	}
	return nil
}

// leaders is a MarkerWriter that reports the markers on a channel; a broker
// sends WriteTxnMarkers to the partitions' leaders instead.
type leaders chan string

func (l leaders) WriteMarkers(_ context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32, tps []txn.TopicPartition) []error {
	l <- fmt.Sprintf("producer %d epoch %d commit %v to %v", pid, epoch, commit, tps)
	return make([]error, len(tps))
}

// A transactional producer's calls, as the transport makes them: find the
// id's partition, initialise, add partitions, commit.
func Example() {
	ctx := context.Background()
	var pids atomic.Int64
	markers := make(leaders, 1)
	c, err := txn.NewCoordinator(txn.Config{
		Store:         &memLog{recs: map[int32][]record.Record{}},
		Markers:       markers,
		NewProducerID: func(context.Context) (int64, error) { return pids.Add(1), nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// This broker leads the id's __transaction_state partition (an empty
	// one: nothing to replay) at leader epoch 0.
	p := txn.PartitionFor("orders-app", txn.DefaultStatePartitions)
	if err := c.Load(ctx, p, 0, func(func(*record.Record, error) bool) {}); err != nil {
		fmt.Println(err)
		return
	}

	pid, epoch, err := c.InitProducerID(ctx, "orders-app", time.Minute, -1, -1)
	fmt.Println("producer", pid, "epoch", epoch, err)
	_, err = c.AddPartitions(ctx, "orders-app", pid, epoch, []txn.TopicPartition{{Topic: "orders", Partition: 0}})
	fmt.Println("added:", err)
	fmt.Println("commit:", c.EndTxn(ctx, "orders-app", pid, epoch, true))
	// The markers follow in the background.
	fmt.Println("markers:", <-markers)
	// Output:
	// producer 1 epoch 0 <nil>
	// added: <nil>
	// commit: <nil>
	// markers: producer 1 epoch 0 commit true to [orders-0]
}
