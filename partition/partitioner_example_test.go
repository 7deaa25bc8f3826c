package partition_test

import (
	"fmt"

	"github.com/spoolmq/spool/partition"
)

// A producer asks the partitioner for each record's partition. Keyed records
// land where the Java client and franz-go would put them, so every client
// agrees on which partition holds a key. Only ManualPartitioner follows a
// record's requested partition.
func ExampleDefaultPartitioner() {
	const partitions = 6
	orders := partition.DefaultPartitioner().ForTopic("orders")
	for _, customer := range []string{"alice", "bob", "carol", "alice"} {
		p := orders.Partition([]byte(customer), -1, partitions)
		fmt.Printf("%-5s -> partition %d\n", customer, p)
	}
	manual := partition.ManualPartitioner().ForTopic("orders")
	fmt.Println("bob, partition 5 requested ->", manual.Partition([]byte("bob"), 5, partitions))
	// Output:
	// alice -> partition 3
	// bob   -> partition 0
	// carol -> partition 2
	// alice -> partition 3
	// bob, partition 5 requested -> 5
}
