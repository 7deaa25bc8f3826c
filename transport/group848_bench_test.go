package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkGroupRebalanceAfterLeave measures, per operation, the time from a
// member of a 10-member group on 100 partitions leaving (kgo's Close) to
// the coordinator seeing the group settled again: all 100 partitions
// assigned to the 9 left and every member at the new assignment. classic
// is Kafka's JoinGroup/SyncGroup protocol with kgo's cooperative-sticky
// balancer; consumer is KIP-848 (kgo.ServerSideBalancer, the uniform
// assignor). Both heartbeat every 500 ms, which paces both protocols.
//
//	go test ./transport -run XXX -bench GroupRebalanceAfterLeave -benchtime 5x
func BenchmarkGroupRebalanceAfterLeave(b *testing.B) {
	const members, partitions, hb = 10, 100, 500 * time.Millisecond
	for _, protocol := range []string{"classic", "consumer"} {
		b.Run(protocol, func(b *testing.B) {
			opts := spool.Options{GroupMinSessionTimeout: 100 * time.Millisecond, GroupConsumerHeartbeatInterval: hb,
				GroupConsumerSessionTimeout: 30 * time.Second}
			br, _, addr := testServer(b, opts, Options{})
			groupCreateTopic(b, br, "events", partitions)
			g := "bench-" + protocol
			start := func(i int) *kgo.Client {
				o := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup(g), kgo.ConsumeTopics("events"),
					kgo.ClientID(fmt.Sprint("m", i)), kgo.HeartbeatInterval(hb), kgo.SessionTimeout(30 * time.Second),
					kgo.FetchMaxWait(100 * time.Millisecond), kgo.DisableAutoCommit()}
				if protocol == "consumer" {
					o = append(o, kgo.ServerSideBalancer())
				}
				cl, err := kgo.NewClient(o...)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for {
						if cl.PollFetches(context.Background()).IsClientClosed() {
							return
						}
					}
				}()
				return cl
			}
			settled := func(n int) bool {
				if protocol == "classic" {
					d, err := br.Groups().Describe(g)
					if err != nil || d.State != group.Stable || len(d.Members) != n {
						return false
					}
					total := 0
					for _, m := range d.Members {
						a, err := group.DecodeAssignment(m.Assignment)
						if err != nil {
							return false
						}
						total += len(a.Partitions["events"])
					}
					return total == partitions
				}
				d, err := br.Groups().ConsumerDescribe(g)
				if err != nil || d.State != group.Stable || len(d.Members) != n {
					return false
				}
				total := 0
				for _, m := range d.Members {
					total += len(m.Assignment["events"])
				}
				return total == partitions
			}
			wait := func(n int) {
				deadline := time.Now().Add(2 * time.Minute)
				for !settled(n) {
					if time.Now().After(deadline) {
						b.Fatalf("the group never settled with %d members", n)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			clients := make([]*kgo.Client, members)
			for i := range clients {
				clients[i] = start(i)
			}
			b.Cleanup(func() {
				for _, cl := range clients {
					cl.Close()
				}
			})
			wait(members)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				k := i % members
				b.StartTimer()
				clients[k].Close()
				wait(members - 1)
				b.StopTimer()
				clients[k] = start(members + i)
				wait(members)
				b.StartTimer()
			}
		})
	}
}
