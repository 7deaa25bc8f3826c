package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/spoolmq/spool/clustertest"
)

// TestIsolatedCoordinatorStopsAnswering: a group's coordinator cut off
// from the rest of the cluster is fenced and its offsets partition led
// elsewhere, where commits go on. Clients still reach it; it must not
// answer them with the committed offsets it last knew, which go back in
// time (found by the randomized run, seed 3441348104: "committed offset
// 1959 from node 2 after 2494 was seen"). It stops coordinating once it
// has not heard from the controller for most of a session timeout: before
// the controller can fence it.
func TestIsolatedCoordinatorStopsAnswering(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips a three-process test")
	}
	c := clustertest.Start(t, clustertest.Options{LinkProxies: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, group = "leased", "lease-group"
	require.NoError(t, c.CreateTopic(ctx, topic, 1, 3, nil))
	require.NoError(t, c.WaitInSync(ctx, topic))

	// OffsetCommit and OffsetFetch name topics by name up to v9 and v9.
	old := kgo.MaxVersions(kversion.V3_7_0())
	cl, err := c.Client(old)
	require.NoError(t, err)
	defer cl.Close()
	commit := func(ctx context.Context, off int64) error {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	require.NoError(t, clustertest.Eventually(ctx, "a first commit", func(ctx context.Context) error { return commit(ctx, 10) }))
	offs, coord, err := c.CommittedOffsets(ctx, group, topic)
	require.NoError(t, err)
	require.EqualValues(t, 10, offs[0])

	// Cut the coordinator off; the others fence it and the group moves.
	require.NoError(t, c.Isolate(coord))
	require.NoError(t, clustertest.Eventually(ctx, fmt.Sprintf("the group coordinated away from node %d", coord), func(ctx context.Context) error {
		for _, n := range c.Nodes() {
			if n.ID() == coord {
				continue
			}
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
			resp, err := n.Request(ctx, req)
			if err != nil {
				return err
			}
			r := resp.(*kmsg.FindCoordinatorResponse)
			if len(r.Coordinators) != 1 || r.Coordinators[0].ErrorCode != 0 || r.Coordinators[0].NodeID == coord {
				return fmt.Errorf("node %d: %+v", n.ID(), r.Coordinators)
			}
		}
		return nil
	}))
	// Commits go on at the new coordinator (through the client, which
	// finds it among the nodes it reaches).
	require.NoError(t, clustertest.Eventually(ctx, "a commit at the new coordinator", func(ctx context.Context) error { return commit(ctx, 20) }))

	// The isolated node, asked directly, refuses: NOT_COORDINATOR, never
	// offset 10.
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	g := kmsg.NewOffsetFetchRequestGroup() // v8+: groups batched
	g.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = topic, []int32{0}
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	resp, err := cl.Broker(int(coord)).Request(ctx, req) // to that node, not to the coordinator kgo would find
	require.NoError(t, err, "clients still reach the isolated node")
	r := resp.(*kmsg.OffsetFetchResponse)
	code := r.ErrorCode
	if code == 0 && len(r.Groups) > 0 {
		code = r.Groups[0].ErrorCode
	}
	require.True(t, errors.Is(kerr.ErrorForCode(code), kerr.NotCoordinator), "the isolated node answered %+v", r)

	require.NoError(t, c.HealNetwork())
	require.NoError(t, c.WaitBrokers(ctx))
	require.NoError(t, clustertest.Eventually(ctx, "the commit seen after healing", func(ctx context.Context) error {
		offs, _, err := c.CommittedOffsets(ctx, group, topic)
		if err != nil {
			return err
		}
		if offs[0] != 20 {
			return fmt.Errorf("committed %d", offs[0])
		}
		return nil
	}))
}
