package replica_test

import (
	"fmt"

	"github.com/spoolmq/spool/replica"
)

// A follower whose last epochs the new leader never saw (KIP-279): it asks
// where its latest epoch, 5, ends; the leader knows nothing of 5 and
// answers with its epoch 3, ending at 8. The follower has no epoch 3 either,
// so it cuts back to the end of its own epoch 2 and asks again.
func ExampleDecideTruncation() {
	// The follower's epochs: 0 from offset 0, 2 from 10, 5 from 20; its log
	// ends at 30.
	follower := func(epoch int32) (int32, int64) {
		switch {
		case epoch >= 5:
			return 5, 30
		case epoch >= 2:
			return 2, 20
		default:
			return 0, 10
		}
	}
	d := replica.DecideTruncation(follower, 0, 30, 3, 8)
	fmt.Printf("cut to %d, done %v, ask again for epoch %d\n", d.Offset, d.Done, d.NextEpoch)
	// The leader's epoch 0 ends at 8; the follower's ends at 10.
	d = replica.DecideTruncation(follower, 0, d.Offset, 0, 8)
	fmt.Printf("cut to %d, done %v\n", d.Offset, d.Done)
	// Output:
	// cut to 20, done false, ask again for epoch 2
	// cut to 8, done true
}

// Leaders come from the ISR, preferred replica first; with the whole ISR
// down, only an unclean election picks someone, and then the most
// up-to-date live replica.
func ExampleElectLeader() {
	replicas := []int32{1, 2, 3}
	alive := func(id int32) bool { return id != 1 }
	ends := func(id int32) (int32, int64, bool) { return 4, map[int32]int64{2: 90, 3: 95}[id], true }

	l, _ := replica.ElectLeader(replicas, []int32{1, 3}, alive, false, ends)
	fmt.Println("ISR {1,3}, 1 down:", l)
	l, _ = replica.ElectLeader(replicas, []int32{1}, alive, false, ends)
	fmt.Println("ISR {1}, 1 down, clean:", l)
	l, clean := replica.ElectLeader(replicas, []int32{1}, alive, true, ends)
	fmt.Println("ISR {1}, 1 down, unclean:", l, "clean:", clean)
	// Output:
	// ISR {1,3}, 1 down: 3
	// ISR {1}, 1 down, clean: -1
	// ISR {1}, 1 down, unclean: 3 clean: false
}
