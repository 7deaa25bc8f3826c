package transport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
)

// group.ConsumerGroup members talking to the server through GroupClient -
// the member side without a broker of its own - under both protocols,
// joining and leaving: no partition ever has two owners, the survivors end
// with every partition, and commits go under their identities.
func TestGroupClientMembers(t *testing.T) {
	for _, protocol := range []string{group.ProtocolClassic, group.ProtocolConsumer} {
		t.Run(protocol, func(t *testing.T) {
			b, _, addr := testServer(t, group848Options, Options{})
			groupCreateTopic(t, b, "events", 6)
			gc := NewGroupClient(addr)
			defer gc.Close()
			var mu sync.Mutex
			owner := map[group.TopicPartition]string{}
			newMember := func(name string) *group.ConsumerGroup {
				m, err := group.NewConsumerGroup(gc, group.ConsumerGroupConfig{
					Group: "gc-" + protocol, Topics: []string{"events"}, Protocol: protocol, ClientID: name,
					SessionTimeout: 5 * time.Second, HeartbeatInterval: 50 * time.Millisecond, RebalanceTimeout: 5 * time.Second,
					PartitionCount: gc.PartitionCount,
					OnAssigned: func(_ context.Context, tps []group.TopicPartition) {
						mu.Lock()
						defer mu.Unlock()
						for _, tp := range tps {
							if o, ok := owner[tp]; ok && o != name {
								t.Errorf("%v given to %s while %s owns it", tp, name, o)
							}
							owner[tp] = name
						}
					},
					OnRevoked: func(_ context.Context, tps []group.TopicPartition) {
						mu.Lock()
						defer mu.Unlock()
						for _, tp := range tps {
							if owner[tp] == name {
								delete(owner, tp)
							}
						}
					},
				})
				require.NoError(t, err)
				return m
			}
			type running struct {
				m    *group.ConsumerGroup
				stop func()
			}
			start := func(name string) running {
				m := newMember(name)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					for ctx.Err() == nil {
						if err := m.Poll(ctx); err != nil && ctx.Err() == nil {
							t.Errorf("%s: poll: %v", name, err)
							return
						}
						select {
						case <-m.Wake():
						case <-time.After(20 * time.Millisecond):
						case <-ctx.Done():
						}
					}
				}()
				return running{m, func() { cancel(); <-done }}
			}
			var live []running
			for i := range 3 {
				live = append(live, start(fmt.Sprint("m", i)))
			}
			time.Sleep(300 * time.Millisecond)
			live[0].stop()
			require.NoError(t, live[0].m.Close(context.Background()))
			live = append(live[1:], start("m3"))
			require.Eventually(t, func() bool {
				total, least, most := 0, 6, 0
				for _, r := range live {
					n := len(r.m.Assigned())
					total += n
					least, most = min(least, n), max(most, n)
				}
				return total == 6 && most-least <= 1
			}, 20*time.Second, 20*time.Millisecond)
			for _, r := range live {
				r.stop()
				offsets := map[group.TopicPartition]group.OffsetAndMetadata{}
				for _, tp := range r.m.Assigned() {
					offsets[tp] = group.OffsetAndMetadata{Offset: 7, LeaderEpoch: -1}
				}
				require.NoError(t, r.m.Commit(context.Background(), offsets))
				got, err := r.m.FetchOffsets(context.Background(), r.m.Assigned())
				require.NoError(t, err)
				for tp := range offsets {
					require.Equal(t, int64(7), got[tp].Offset)
				}
				require.NoError(t, r.m.Close(context.Background()))
			}
			mu.Lock()
			require.Empty(t, owner)
			mu.Unlock()
			// The coordinator saw them as members of the protocol.
			if protocol == group.ProtocolConsumer {
				d, err := b.Groups().ConsumerDescribe("gc-" + protocol)
				require.NoError(t, err)
				require.Equal(t, group.Empty, d.State)
			} else {
				d, err := b.Groups().Describe("gc-" + protocol)
				require.NoError(t, err)
				require.Equal(t, group.Empty, d.State)
			}
		})
	}
}
