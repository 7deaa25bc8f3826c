package interop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool/clustertest"
)

// TestKadmOperations: kadm's partition reassignment, listing, leader
// election and (through kmsg, kadm has none) broker unregistration against
// a cluster of spool serve processes - three voters and a broker-only
// node 4 - with the answers kadm expects.
func TestKadmOperations(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{Nodes: 4, Voters: 3, Binary: spoolBin})
	ctx := testContext(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { errs[i] = c.Node(int32(i + 1)).Start(ctx) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, c.WaitBrokers(ctx))
	cl, err := c.Client(kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(15*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopic(ctx, 1, 3, nil, "kadm-moves")
	require.NoError(t, err)
	require.NoError(t, c.WaitInSync(ctx, "kadm-moves"))
	for i := range 50 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "kadm-moves", Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	ps, err := c.Partitions(ctx, "kadm-moves")
	require.NoError(t, err)
	leader := ps[0].Leader
	followers := slices.DeleteFunc(slices.Clone(ps[0].Replicas), func(r int32) bool { return r == leader })

	// Node 4 joins, and stops: a reassignment to it stays listed until
	// cancelled.
	require.NoError(t, c.Node(4).Start(ctx))
	require.NoError(t, c.WaitBrokers(ctx))
	code, err := c.Node(4).Stop(ctx)
	require.NoError(t, err)
	require.Zero(t, code)
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("kadm-moves", 0, []int32{4, followers[0], leader})
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"kadm-moves": {0: {}}})
	require.NoError(t, err)
	require.Equal(t, []kadm.ListPartitionReassignmentsResponse{{Topic: "kadm-moves", Partition: 0,
		Replicas: []int32{4, followers[0], leader, followers[1]}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{followers[1]}}}, listed.Sorted())
	req = nil
	req.CancelAssign("kadm-moves", 0)
	resp, err = adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	resp, err = adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.ErrorIs(t, resp.Error(), kerr.NoReassignmentInProgress)
	listed, err = adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"kadm-moves": {0: {}}})
	require.NoError(t, err)
	require.Empty(t, listed.Sorted())

	// Node 4 back: the move completes; the leader stays (it is kept), and
	// a preferred election hands it to node 4.
	require.NoError(t, c.Node(4).Start(ctx))
	require.NoError(t, c.WaitBrokers(ctx))
	target := []int32{4, followers[0], leader}
	req = nil
	req.Assign("kadm-moves", 0, target)
	resp, err = adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	require.NoError(t, c.WaitReassigned(ctx, "kadm-moves", 0, target))
	elected, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"kadm-moves": {0: {}}})
	require.NoError(t, err)
	require.NoError(t, elected["kadm-moves"][0].Err, "%s", elected["kadm-moves"][0].ErrMessage)
	require.NoError(t, clustertest.Eventually(ctx, "node 4 leads", func(ctx context.Context) error {
		l, err := c.Leader(ctx, "kadm-moves", 0)
		if err == nil && l != 4 {
			err = fmt.Errorf("node %d leads", l)
		}
		return err
	}))
	elected, err = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"kadm-moves": {0: {}}})
	require.NoError(t, err)
	require.ErrorIs(t, elected["kadm-moves"][0].Err, kerr.ElectionNotNeeded)
	elected, err = adm.ElectLeaders(ctx, kadm.ElectLiveReplica, kadm.TopicsSet{"kadm-moves": {0: {}}})
	require.NoError(t, err)
	require.ErrorIs(t, elected["kadm-moves"][0].Err, kerr.ElectionNotNeeded)

	// The records are all there, read from the new leader.
	rcl, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"kadm-moves": {0: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer rcl.Close()
	var got []string
	for len(got) < 50 {
		fs := rcl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		require.Equal(t, fmt.Sprintf("v%d", i), v)
	}

	// Unregistration, with kmsg: refused while node 4 holds a replica.
	ur := kmsg.NewPtrUnregisterBrokerRequest()
	ur.BrokerID = 4
	uresp, err := ur.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidRequest.Code, uresp.ErrorCode)
	require.Contains(t, *uresp.ErrorMessage, "holds replicas")
	ur.BrokerID = 42
	uresp, err = ur.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Equal(t, kerr.BrokerIDNotRegistered.Code, uresp.ErrorCode)
}
