package transport

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// These tests run franz-go's KIP-848 consumer (kgo.ServerSideBalancer)
// against the server: ConsumerGroupHeartbeat joins, reconciles and leaves,
// offsets are committed under member epochs.

// group848Options: the coordinator tells members to heartbeat every 100 ms,
// so that partitions move in a fraction of a second.
var group848Options = spool.Options{GroupMinSessionTimeout: 100 * time.Millisecond,
	GroupConsumerHeartbeatInterval: 100 * time.Millisecond, GroupConsumerSessionTimeout: 10 * time.Second}

// owners tracks which client owns each partition, as kgo's callbacks say,
// and records any moment two own one.
type owners848 struct {
	mu       sync.Mutex
	owner    map[int32]string
	doubled  []string
	assigned int
}

func (o *owners848) opts(id string) []kgo.Opt {
	drop := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, p := range ps["events"] {
			if o.owner[p] == id {
				delete(o.owner, p)
			}
		}
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, p := range ps["events"] {
				if other, ok := o.owner[p]; ok && other != id {
					o.doubled = append(o.doubled, fmt.Sprintf("partition %d given to %s while %s owns it", p, id, other))
				}
				o.owner[p] = id
				o.assigned++
			}
		}),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
	}
}

// Members join and leave a KIP-848 group while records are produced: no
// partition is ever owned by two members, every record is consumed
// (at-least-once) and, once the group settles, every partition is owned
// by one member.
func TestConsumerGroup848WithFranzGo(t *testing.T) {
	const partitions = 8
	b, _, addr := testServer(t, group848Options, Options{})
	groupCreateTopic(t, b, "events", partitions)
	const g = "kip848"
	own := &owners848{owner: map[int32]string{}}

	var mu sync.Mutex
	seen := map[string]bool{}
	// A consumer that records what it polled, marks it for commit and
	// allows rebalances between polls.
	run := func(id string) (stop func()) {
		cl, err := kgo.NewClient(append([]kgo.Opt{
			kgo.SeedBrokers(addr), kgo.ConsumerGroup(g), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(id),
			kgo.ServerSideBalancer(), kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.MetadataMinAge(100 * time.Millisecond), kgo.AutoCommitMarks(),
			kgo.AutoCommitInterval(100 * time.Millisecond), kgo.BlockRebalanceOnPoll(),
		}, own.opts(id)...)...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = true
					mu.Unlock()
				})
				cl.MarkCommitRecords(fs.Records()...)
				cl.AllowRebalance()
			}
		}()
		return func() {
			cancel()
			<-done
			cl.Close() // commits what was marked, then leaves
		}
	}

	// A producer appends in the background all along.
	prodCtx, stopProd := context.WithCancel(context.Background())
	var produced int64
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for prodCtx.Err() == nil {
			groupAppend(t, b, "events", partitions, 5)
			produced += partitions * 5
			time.Sleep(20 * time.Millisecond)
		}
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	live := map[string]func(){}
	next := 0
	for range 3 {
		id := fmt.Sprint("c", next)
		next++
		live[id] = run(id)
	}
	for range 8 {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		if len(live) > 1 && rng.IntN(2) == 0 {
			ids := slices.Sorted(maps.Keys(live))
			id := ids[rng.IntN(len(ids))]
			live[id]()
			delete(live, id)
		} else {
			id := fmt.Sprint("c", next)
			next++
			live[id] = run(id)
		}
	}
	stopProd()
	<-prodDone

	// Settle: every partition owned once, by the live members, and every
	// record consumed.
	require.Eventually(t, func() bool {
		d, err := b.Groups().ConsumerDescribe(g)
		if err != nil || d.State != group.Stable || len(d.Members) != len(live) {
			return false
		}
		n := 0
		for _, m := range d.Members {
			n += len(m.Assignment["events"])
		}
		return n == partitions
	}, 30*time.Second, 50*time.Millisecond, "the group never settled")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(seen)) == produced
	}, 30*time.Second, 50*time.Millisecond, "records were lost")
	// Everything committed by the members as they go.
	require.Eventually(t, func() bool {
		got, err := b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
		for p := range int32(partitions) {
			part, err := b.Partition("events", p)
			require.NoError(t, err)
			if got[group.TopicPartition{Topic: "events", Partition: p}].Offset != part.EndOffset() {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "offsets not committed")
	for _, stop := range live {
		stop()
	}
	own.mu.Lock()
	require.Empty(t, own.doubled)
	require.Greater(t, own.assigned, partitions, "partitions moved")
	own.mu.Unlock()

	// The group is empty after the last member left.
	d, err := b.Groups().ConsumerDescribe(g)
	require.NoError(t, err)
	require.Equal(t, group.Empty, d.State)
}

// Heartbeats and commits the protocol does not allow are refused with
// Kafka's codes and change nothing; ConsumerGroupDescribe and ListGroups
// show the group.
func TestConsumerGroup848Refusals(t *testing.T) {
	b, _, addr := testServer(t, group848Options, Options{})
	groupCreateTopic(t, b, "events", 2)
	d, err := b.DescribeTopic("events")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx := context.Background()

	hb := func(mod func(*kmsg.ConsumerGroupHeartbeatRequest)) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.RebalanceTimeoutMillis = "g", "m1", 10000
		req.SubscribedTopicNames = []string{"events"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		mod(req)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp
	}
	joined := hb(func(*kmsg.ConsumerGroupHeartbeatRequest) {})
	require.Equal(t, int16(0), joined.ErrorCode)
	require.Equal(t, int32(1), joined.MemberEpoch)
	require.Equal(t, int32(100), joined.HeartbeatIntervalMillis)
	require.NotNil(t, joined.Assignment)
	require.Len(t, joined.Assignment.Topics, 1)
	require.Equal(t, d.ID, spool.TopicID(joined.Assignment.Topics[0].TopicID))
	require.Equal(t, []int32{0, 1}, joined.Assignment.Topics[0].Partitions)

	owned := []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: d.ID, Partitions: []int32{0, 1}}}
	bad := "events("
	for name, tc := range map[string]struct {
		mod  func(*kmsg.ConsumerGroupHeartbeatRequest)
		code int16
	}{
		"future epoch": {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch, r.Topics = 7, owned }, kerr.FencedMemberEpoch.Code},
		"join owning":  {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID, r.Topics = "m2", owned }, kerr.InvalidRequest.Code},
		"no member id": {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest.Code},
		"unknown assignor": {func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			a := "sticky"
			r.MemberID, r.ServerAssignor = "m2", &a
		}, kerr.UnsupportedAssignor.Code},
		"bad regex": {func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.MemberID, r.SubscribedTopicNames, r.SubscribedTopicRegex = "m2", nil, &bad
		}, kerr.InvalidRegularExpression.Code},
		"unknown member": {func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID, r.MemberEpoch = "zz", 1 }, kerr.UnknownMemberID.Code},
	} {
		resp := hb(tc.mod)
		require.Equal(t, tc.code, resp.ErrorCode, "%s: %v", name, kerr.ErrorForCode(resp.ErrorCode))
		desc, err := b.Groups().ConsumerDescribe("g")
		require.NoError(t, err)
		require.Equal(t, int32(1), desc.Epoch, "%s changed the group", name)
		require.Len(t, desc.Members, 1, name)
	}

	// Commits: the member's epoch is accepted; another is
	// STALE_MEMBER_EPOCH at v9, ILLEGAL_GENERATION before.
	commit := func(version int16, epoch int32) int16 {
		t.Helper()
		vs := kversion.Stable()
		vs.SetMaxKeyVersion(kmsg.OffsetCommit.Int16(), version)
		vcl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(vs))
		require.NoError(t, err)
		defer vcl.Close()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = "g", "m1", epoch
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "events"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, 3
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, vcl)
		require.NoError(t, err)
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	require.Equal(t, int16(0), commit(9, 1))
	require.Equal(t, kerr.StaleMemberEpoch.Code, commit(9, 2))
	require.Equal(t, kerr.IllegalGeneration.Code, commit(8, 2))

	// Described and listed as a consumer group.
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"g", "nope"}
	dresp, err := dreq.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, dresp.Groups, 2)
	got := dresp.Groups[0]
	require.Equal(t, int16(0), got.ErrorCode)
	require.Equal(t, "Stable", got.State)
	require.Equal(t, "uniform", got.AssignorName)
	require.Len(t, got.Members, 1)
	require.Equal(t, "m1", got.Members[0].MemberID)
	require.Equal(t, []string{"events"}, got.Members[0].SubscribedTopics)
	require.Equal(t, "events", got.Members[0].Assignment.TopicPartitions[0].Topic)
	require.Equal(t, []int32{0, 1}, got.Members[0].Assignment.TopicPartitions[0].Partitions)
	require.Equal(t, kerr.GroupIDNotFound.Code, dresp.Groups[1].ErrorCode)

	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.TypesFilter = []string{"consumer"}
	lresp, err := lreq.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, lresp.Groups, 1)
	require.Equal(t, "consumer", lresp.Groups[0].GroupType)

	// The member leaves: the group is empty.
	left := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch, r.Topics = -1, nil })
	require.Equal(t, int16(0), left.ErrorCode)
	require.Equal(t, int32(-1), left.MemberEpoch)
	desc, err := b.Groups().ConsumerDescribe("g")
	require.NoError(t, err)
	require.Equal(t, group.Empty, desc.State)
}

// A rolling upgrade with franz-go: a classic group of cooperative-sticky
// members is joined by ServerSideBalancer members while records flow, then
// the classic members leave; no partition is held by two members at any
// point, every record is consumed and everything is committed.
func TestConsumerGroupUpgradeWithFranzGo(t *testing.T) {
	const partitions = 6
	b, _, addr := testServer(t, group848Options, Options{})
	groupCreateTopic(t, b, "events", partitions)
	const g = "upgrade"
	own := &owners848{owner: map[int32]string{}}
	var mu sync.Mutex
	seen := map[string]bool{}
	run := func(id string, kip848 bool) (stop func()) {
		opts := []kgo.Opt{
			kgo.SeedBrokers(addr), kgo.ConsumerGroup(g), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID(id),
			kgo.FetchMaxWait(100 * time.Millisecond), kgo.MetadataMinAge(100 * time.Millisecond), kgo.AutoCommitMarks(),
			kgo.AutoCommitInterval(100 * time.Millisecond), kgo.BlockRebalanceOnPoll(),
			kgo.HeartbeatInterval(100 * time.Millisecond), kgo.SessionTimeout(10 * time.Second),
		}
		if kip848 {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		cl, err := kgo.NewClient(append(opts, own.opts(id)...)...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = true
					mu.Unlock()
				})
				cl.MarkCommitRecords(fs.Records()...)
				cl.AllowRebalance()
			}
		}()
		return func() {
			cancel()
			<-done
			_ = cl.CommitMarkedOffsets(context.Background())
			cl.Close()
		}
	}
	var produced int64
	produce := func(n int) {
		groupAppend(t, b, "events", partitions, n)
		produced += int64(partitions * n)
	}
	classic := []func(){run("classic-0", false), run("classic-1", false)}
	produce(50)
	require.Eventually(t, func() bool {
		d, err := b.Groups().Describe(g)
		return err == nil && d.State == group.Stable && len(d.Members) == 2
	}, 20*time.Second, 20*time.Millisecond, "the classic group formed")
	newer := []func(){run("new-0", true)}
	produce(50)
	require.Eventually(t, func() bool {
		d, err := b.Groups().ConsumerDescribe(g)
		return err == nil && len(d.Members) == 3
	}, 20*time.Second, 20*time.Millisecond, "converted with three members")
	// Both kinds hold partitions, two each.
	require.Eventually(t, func() bool {
		d, err := b.Groups().ConsumerDescribe(g)
		if err != nil || d.State != group.Stable {
			return false
		}
		classic := 0
		for _, m := range d.Members {
			if len(m.Assignment["events"]) != 2 {
				return false
			}
			if m.Classic {
				classic++
			}
		}
		return classic == 2
	}, 20*time.Second, 20*time.Millisecond, "the mixed group never balanced")
	classic[0]()
	newer = append(newer, run("new-1", true))
	produce(50)
	classic[1]()
	produce(50)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(seen)) == produced
	}, 30*time.Second, 50*time.Millisecond, "records were lost")
	require.Eventually(t, func() bool {
		got, err := b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
		for p := range int32(partitions) {
			part, err := b.Partition("events", p)
			require.NoError(t, err)
			if got[group.TopicPartition{Topic: "events", Partition: p}].Offset != part.EndOffset() {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "offsets not committed")
	for _, stop := range newer {
		stop()
	}
	own.mu.Lock()
	defer own.mu.Unlock()
	require.Empty(t, own.doubled)
}
