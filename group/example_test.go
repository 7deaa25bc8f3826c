package group_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spoolmq/spool/group"
)

// A consumer group of one member: it joins, leads (computing the assignment
// with the range assignor), syncs, then commits and fetches an offset.
func ExampleCoordinator() {
	c := group.NewCoordinator(group.Options{})
	defer c.Close()
	ctx := context.Background()
	assignor := group.Range()

	subscription := group.EncodeSubscription(group.Subscription{
		Version: group.SubscriptionVersion, Topics: []string{"orders"}, GenerationID: -1,
	})
	join, err := c.Join(ctx, group.JoinRequest{
		Group:          "billing",
		ClientID:       "billing-1",
		ProtocolType:   group.ConsumerProtocolType,
		Protocols:      []group.Protocol{{Name: assignor.Name(), Metadata: subscription}},
		SessionTimeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}

	// The leader gets the members and their subscriptions.
	var members []group.AssignMember
	for _, m := range join.Members {
		am, err := group.AssignMemberOf(m)
		if err != nil {
			panic(err)
		}
		members = append(members, am)
	}
	assignments := make(map[string][]byte)
	for id, parts := range assignor.Assign(members, map[string]int32{"orders": 3}) {
		assignments[id] = group.EncodeAssignment(group.Assignment{Version: group.AssignmentVersion, Partitions: parts})
	}
	sync, err := c.Sync(ctx, group.SyncRequest{
		Group: "billing", Generation: join.Generation, MemberID: join.MemberID, Assignments: assignments,
	})
	if err != nil {
		panic(err)
	}
	mine, _ := group.DecodeAssignment(sync.Assignment)
	fmt.Println("generation", join.Generation, "leader", join.LeaderID == join.MemberID, "orders", mine.Partitions["orders"])

	tp := group.TopicPartition{Topic: "orders", Partition: 0}
	_, err = c.CommitOffsets(group.CommitRequest{
		Group: "billing", MemberID: join.MemberID, Generation: join.Generation,
		Offsets: map[group.TopicPartition]group.OffsetAndMetadata{tp: {Offset: 42, LeaderEpoch: -1}},
	})
	if err != nil {
		panic(err)
	}
	offsets, _ := c.FetchOffsets("billing", nil)
	fmt.Println("committed", offsets[tp].Offset)
	d, _ := c.Describe("billing")
	fmt.Println(d.State)
	// Output:
	// generation 1 leader true orders [0 1 2]
	// committed 42
	// Stable
}

// Kafka's RangeAssignor example: two consumers, two topics of three
// partitions.
func ExampleRange() {
	assignment := group.Range().Assign([]group.AssignMember{
		{ID: "C0", Topics: []string{"t0", "t1"}},
		{ID: "C1", Topics: []string{"t0", "t1"}},
	}, map[string]int32{"t0": 3, "t1": 3})
	fmt.Println("C0", assignment["C0"])
	fmt.Println("C1", assignment["C1"])
	// Output:
	// C0 map[t0:[0 1] t1:[0 1]]
	// C1 map[t0:[2] t1:[2]]
}

// A second member joins a member that owns all three partitions: in the
// first rebalance the partition that moves is only taken away; once its
// owner has revoked it and rejoined, the second rebalance hands it over.
func ExampleCooperativeSticky() {
	a := group.CooperativeSticky()
	partitions := map[string]int32{"t": 3}
	owned := []group.TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}}
	first := a.Assign([]group.AssignMember{
		{ID: "A", Topics: []string{"t"}, Owned: owned, Generation: 1},
		{ID: "B", Topics: []string{"t"}, Generation: -1},
	}, partitions)
	fmt.Println("generation 2:", "A", first["A"], "B", first["B"])
	second := a.Assign([]group.AssignMember{
		{ID: "A", Topics: []string{"t"}, Owned: owned[:2], Generation: 2},
		{ID: "B", Topics: []string{"t"}, Generation: 2},
	}, partitions)
	fmt.Println("generation 3:", "A", second["A"], "B", second["B"])
	// Output:
	// generation 2: A map[t:[0 1]] B map[]
	// generation 3: A map[t:[0 1]] B map[t:[2]]
}

// Encoding a subscription as JoinGroup metadata and reading it back.
func ExampleEncodeSubscription() {
	b := group.EncodeSubscription(group.Subscription{
		Version:         group.SubscriptionVersion,
		Topics:          []string{"orders"},
		OwnedPartitions: []group.TopicPartition{{Topic: "orders", Partition: 1}},
		GenerationID:    4,
	})
	s, err := group.DecodeSubscription(b)
	fmt.Println(s.Topics, s.OwnedPartitions, s.GenerationID, err)
	// Output:
	// [orders] [orders-1] 4 <nil>
}

// A member of a KIP-848 consumer group on a coordinator in this process:
// the first Poll joins and takes the partitions the coordinator assigns
// (OnAssigned runs inside Poll); commits go under the member's epoch;
// Close gives the partitions up (OnRevoked) and leaves. Over the network,
// transport.GroupClient stands where group.Local does.
func ExampleConsumerGroup() {
	coord := group.NewCoordinator(group.Options{
		PartitionCount: func(topic string) int32 { return 3 }, // the coordinator assigns: it knows the topics
	})
	defer coord.Close()

	m, err := group.NewConsumerGroup(group.Local(coord), group.ConsumerGroupConfig{
		Group: "billing", Topics: []string{"orders"}, Protocol: group.ProtocolConsumer,
		OnAssigned: func(_ context.Context, tps []group.TopicPartition) { fmt.Println("assigned", tps) },
		OnRevoked:  func(_ context.Context, tps []group.TopicPartition) { fmt.Println("revoked", tps) },
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := m.Poll(ctx); err != nil { // joins; call it again whenever m.Wake() is closed
		panic(err)
	}
	_, epoch := m.Identity()
	fmt.Println("member epoch", epoch)
	if err := m.Commit(ctx, map[group.TopicPartition]group.OffsetAndMetadata{{Topic: "orders", Partition: 0}: {Offset: 10}}); err != nil {
		panic(err)
	}
	if err := m.Close(ctx); err != nil {
		panic(err)
	}
	// Output:
	// assigned [orders-0 orders-1 orders-2]
	// member epoch 1
	// revoked [orders-0 orders-1 orders-2]
}
