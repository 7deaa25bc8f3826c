package replicatest_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spoolmq/spool/record"
	"github.com/spoolmq/spool/replica"
	"github.com/spoolmq/spool/replica/replicatest"
)

// Crash a partition's leader in a three-broker cluster: a follower takes
// over and acks=all writes go on; the old leader comes back as a follower.
func Example() {
	dir, _ := os.MkdirTemp("", "replicatest-")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := replicatest.New(replicatest.Options{Dir: dir, MinInSyncReplicas: 2})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, replica.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 3}); err != nil {
		panic(err)
	}
	all := replica.AppendOptions{Acks: replica.AcksAll, Timeout: 5 * time.Second}
	value := []record.Record{{Value: []byte("v")}}
	c.Produce(ctx, "t", 0, value, all)

	st, _ := c.Leader("t", 0)
	c.Crash(st.Leader, false)
	off, err := c.Produce(ctx, "t", 0, value, all) // retries until a new leader takes it
	st2, _ := c.Leader("t", 0)
	fmt.Println("written at", off, err, "- new leader:", st2.Leader != st.Leader, "epoch", st2.LeaderEpoch)

	c.Restart(st.Leader)
	fmt.Println("converged:", c.WaitConverged(ctx, "t", 0))
	// Output:
	// written at 1 <nil> - new leader: true epoch 1
	// converged: <nil>
}
