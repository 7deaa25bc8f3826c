package transport

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/share"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests run franz-go's share consumer (kgo.ShareGroup, KIP-932)
// against the server.

var shareTestOptions = spool.Options{GroupMinSessionTimeout: 100 * time.Millisecond,
	ShareLockDuration: 2 * time.Second, ShareDeliveryLimit: 3,
	GroupConsumerHeartbeatInterval: time.Second, GroupConsumerSessionTimeout: 10 * time.Second}

// shareChildEnv names the server a share consumer child process joins:
// it takes records of "jobs", prints "holding N" with the offsets it was
// given, and never acknowledges them, until it is killed.
const shareChildEnv = "SPOOL_TEST_SHARE_CHILD"

func runShareChild(addr string) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ShareGroup("q"), kgo.ConsumeTopics("jobs"), kgo.ShareMaxRecords(10), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	for {
		fs := cl.PollRecords(context.Background(), 10)
		if n := fs.NumRecords(); n > 0 {
			var offs []string
			fs.EachRecord(func(r *kgo.Record) { offs = append(offs, strconv.FormatInt(r.Offset, 10)) })
			fmt.Println("holding", strings.Join(offs, ","))
			select {} // holds them until killed
		}
	}
}

// setEarliest sets the group's share.auto.offset.reset to earliest, as a
// kgo application must for records produced before it joined.
func setEarliest(t *testing.T, cl *kgo.Client, group string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	v := "earliest"
	c.Name, c.Value, c.Op = "share.auto.offset.reset", &v, kmsg.IncrementalAlterConfigOpSet
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Equal(t, int16(0), resp.Resources[0].ErrorCode, "%v", resp.Resources[0].ErrorMessage)
}

type shareSeen struct {
	mu          sync.Mutex
	accepted    map[int64]int
	redelivered map[int64]int32
}

// runShareConsumer polls and accepts every record until ctx ends.
func runShareConsumer(t *testing.T, ctx context.Context, addr string, seen *shareSeen, wg *sync.WaitGroup, opts ...kgo.Opt) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ShareGroup("q"), kgo.ConsumeTopics("jobs"),
		kgo.ShareMaxRecords(20), kgo.FetchMaxWait(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollRecords(ctx, 20)
			var recs []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) {
				r.Ack(kgo.AckAccept)
				recs = append(recs, r)
			})
			if len(recs) == 0 {
				continue
			}
			if err := cl.FlushAcks(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("flush acks: %v", err)
				return
			}
			seen.mu.Lock()
			for _, r := range recs {
				seen.accepted[r.Offset]++
				if r.DeliveryCount() > 1 {
					seen.redelivered[r.Offset] = r.DeliveryCount()
				}
			}
			seen.mu.Unlock()
		}
	}()
}

// Eight franz-go share consumers on one partition - one of them a process
// SIGKILLed while it holds records: every record is accepted, those the
// killed one held are delivered again (its connection's session is gone,
// so at once rather than at the lock timeout), and the group's start
// offset reaches the end.
func TestShareGroupWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, shareTestOptions, Options{})
	groupCreateTopic(t, b, "jobs", 1)
	const n = 3000
	groupAppend(t, b, "jobs", 1, n)
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer admin.Close()
	setEarliest(t, admin, "q")

	// The one that dies holding records.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shareChildEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var held []int64
	for _, s := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "holding ")), ",") {
		o, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		held = append(held, o)
	}
	require.NotEmpty(t, held)

	seen := &shareSeen{accepted: map[int64]int{}, redelivered: map[int64]int32{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 7 {
		runShareConsumer(t, ctx, addr, seen, &wg)
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	require.Eventually(t, func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return len(seen.accepted) == n
	}, 60*time.Second, 20*time.Millisecond, "not every record was accepted")
	cancel()
	wg.Wait()
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, o := range held {
		require.GreaterOrEqual(t, seen.redelivered[o], int32(2), "offset %d the killed consumer held", o)
	}
	for o, k := range seen.accepted {
		require.Equal(t, 1, k, "offset %d accepted %d times", o, k)
	}
	require.Eventually(t, func() bool {
		return b.ShareGroupOffsets("q")[spool.TopicPartition{Topic: "jobs", Partition: 0}] == n
	}, 10*time.Second, 20*time.Millisecond, "the start offset reaches the end")
}

// A record franz-go always releases is archived at the delivery limit,
// and the group's start offset moves past it.
func TestShareGroupPoisonWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, shareTestOptions, Options{})
	groupCreateTopic(t, b, "jobs", 1)
	groupAppend(t, b, "jobs", 1, 10)
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer admin.Close()
	setEarliest(t, admin, "q")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ShareGroup("q"), kgo.ConsumeTopics("jobs"), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	deliveries := map[int64][]int32{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for b.ShareGroupOffsets("q")[spool.TopicPartition{Topic: "jobs", Partition: 0}] < 10 {
		require.NoError(t, ctx.Err(), "the start offset never passed the poison record: %v", deliveries)
		fs := cl.PollRecords(ctx, 100)
		fs.EachRecord(func(r *kgo.Record) {
			deliveries[r.Offset] = append(deliveries[r.Offset], r.DeliveryCount())
			if r.Offset == 3 {
				r.Ack(kgo.AckRelease)
			} else {
				r.Ack(kgo.AckAccept)
			}
		})
		require.NoError(t, cl.FlushAcks(ctx))
	}
	require.Equal(t, []int32{1, 2, 3}, deliveries[3], "delivered up to the limit, then archived")
	for o, ds := range deliveries {
		if o != 3 {
			require.Equal(t, []int32{1}, ds, "offset %d", o)
		}
	}
}

// Share sessions and acknowledgements the protocol does not allow are
// refused with Kafka's codes, and change nothing.
func TestShareFetchRefusals(t *testing.T) {
	b, _, addr := testServer(t, shareTestOptions, Options{})
	groupCreateTopic(t, b, "jobs", 1)
	groupAppend(t, b, "jobs", 1, 5)
	d, err := b.DescribeTopic("jobs")
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	setEarliest(t, cl, "q")
	ctx := context.Background()
	group, member := "q", "m1"
	fetch := func(epoch int32, acks ...kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
		t.Helper()
		req := kmsg.NewPtrShareFetchRequest()
		req.GroupID, req.MemberID, req.ShareSessionEpoch = &group, &member, epoch
		req.MaxWaitMillis, req.MaxBytes, req.MaxRecords, req.BatchSize = 100, 1<<20, 3, 3
		rt := kmsg.NewShareFetchRequestTopic()
		rt.TopicID = d.ID
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition, rp.AcknowledgementBatches = 0, acks
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp
	}
	ack := func(first, last int64, types ...int8) kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
		a := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
		a.FirstOffset, a.LastOffset, a.AcknowledgeTypes = first, last, types
		return a
	}
	require.Equal(t, errShareSessionNotFound, fetch(1).ErrorCode, "no session")
	require.Equal(t, errInvalidRequest, fetch(0, ack(0, 0, 1)).ErrorCode, "acknowledgements when a session opens")
	resp := fetch(0)
	require.Equal(t, int16(0), resp.ErrorCode)
	require.Len(t, resp.Topics, 1)
	got := resp.Topics[0].Partitions[0]
	require.Equal(t, int16(0), got.ErrorCode)
	require.Len(t, got.AcquiredRecords, 1)
	require.Equal(t, int64(0), got.AcquiredRecords[0].FirstOffset)
	require.Equal(t, int64(2), got.AcquiredRecords[0].LastOffset)
	require.Equal(t, int16(1), got.AcquiredRecords[0].DeliveryCount)
	require.NotEmpty(t, got.Records)
	require.Equal(t, int32(shareTestOptions.ShareLockDuration/time.Millisecond), resp.AcquisitionLockTimeoutMillis)
	before := b.ShareGroupOffsets(group)

	require.Equal(t, errInvalidShareSessionEpoch, fetch(5).ErrorCode, "an epoch that does not follow")

	// Acknowledgements without fetching (ShareAcknowledge), in the
	// session's next epochs.
	epoch := int32(0)
	acknowledge := func(acks ...kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) int16 {
		t.Helper()
		epoch++
		req := kmsg.NewPtrShareAcknowledgeRequest()
		req.GroupID, req.MemberID, req.ShareSessionEpoch = &group, &member, epoch
		rt := kmsg.NewShareAcknowledgeRequestTopic()
		rt.TopicID = d.ID
		rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
		for _, a := range acks {
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
				FirstOffset: a.FirstOffset, LastOffset: a.LastOffset, AcknowledgeTypes: a.AcknowledgeTypes})
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		require.Equal(t, int16(0), resp.ErrorCode)
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	for _, tc := range []struct {
		name string
		acks []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
		code int16
	}{
		{"not acquired", []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(3, 3, 1)}, errInvalidRecordState},
		{"overlapping", []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 1, 1), ack(1, 2, 1)}, errInvalidRequest},
		{"types mismatch", []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 2, 1, 1)}, errInvalidRequest},
		{"unknown type", []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 0, 9)}, errInvalidRequest},
		{"valid then not acquired", []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{ack(0, 0, 1), ack(4, 4, 1)}, errInvalidRecordState},
	} {
		code := acknowledge(tc.acks...)
		require.Equal(t, tc.code, code, "%s: %v", tc.name, kerr.ErrorForCode(code))
		require.Equal(t, before, b.ShareGroupOffsets(group), "%s changed the group", tc.name)
	}
	// Another member cannot acknowledge m1's records.
	other := "m2"
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &group, &other, 0
	_, err = req.RequestWith(ctx, cl)
	require.NoError(t, err)
	member = "m2"
	saved := epoch
	epoch = 0
	require.Equal(t, errInvalidRecordState, acknowledge(ack(0, 0, 1)), "another member's record")
	member, epoch = "m1", saved
	// Accepting what it holds moves the start.
	require.Equal(t, int16(0), acknowledge(ack(0, 2, 1)))
	require.Equal(t, int64(3), b.ShareGroupOffsets(group)[spool.TopicPartition{Topic: "jobs", Partition: 0}])
	require.Equal(t, errInvalidRecordState, acknowledge(ack(0, 0, 1)), "acknowledged already")
}

// Describe/Alter/DeleteShareGroupOffsets: the group's start offsets are
// read, moved and forgotten over the wire - moved and forgotten only while
// the group has no members (NON_EMPTY_GROUP).
func TestShareGroupOffsetsAdmin(t *testing.T) {
	b, _, addr := testServer(t, shareTestOptions, Options{})
	groupCreateTopic(t, b, "jobs", 2)
	groupAppend(t, b, "jobs", 2, 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	setEarliest(t, cl, "q")
	ctx := context.Background()
	// A member takes and accepts the first 4 of partition 0.
	_, err = b.Groups().ShareHeartbeat(groupShareJoin("q", "m1"))
	require.NoError(t, err)
	fetched, err := b.ShareAcquire(ctx, "q", "m1", []spool.TopicPartition{{Topic: "jobs", Partition: 0}}, spool.ShareAcquireOptions{MaxRecords: 4})
	require.NoError(t, err)
	require.Len(t, fetched, 1)
	require.NoError(t, b.ShareAcknowledge(ctx, "q", "m1", spool.TopicPartition{Topic: "jobs", Partition: 0},
		[]share.AckBatch{{First: 0, Last: 3, Types: []share.AckType{share.Accept}}}))

	describe := func() map[int32][2]int64 {
		t.Helper()
		req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		g.GroupID = "q"
		rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
		rt.Topic, rt.Partitions = "jobs", []int32{0, 1}
		g.Topics = append(g.Topics, rt)
		req.Groups = append(req.Groups, g)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		out := map[int32][2]int64{}
		for _, p := range resp.Groups[0].Topics[0].Partitions {
			require.Zero(t, p.ErrorCode)
			out[p.Partition] = [2]int64{p.StartOffset, p.Lag}
		}
		return out
	}
	require.Equal(t, map[int32][2]int64{0: {4, 6}, 1: {-1, -1}}, describe())

	alter := func(off int64) int16 {
		t.Helper()
		req := kmsg.NewPtrAlterShareGroupOffsetsRequest()
		req.GroupID = "q"
		rt := kmsg.NewAlterShareGroupOffsetsRequestTopic()
		rt.Topic = "jobs"
		rp := kmsg.NewAlterShareGroupOffsetsRequestTopicPartition()
		rp.Partition, rp.StartOffset = 0, off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp.ErrorCode
	}
	deleteOffsets := func() int16 {
		t.Helper()
		req := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
		req.GroupID = "q"
		rt := kmsg.NewDeleteShareGroupOffsetsRequestTopic()
		rt.Topic = "jobs"
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		return resp.ErrorCode
	}
	require.Equal(t, errNonEmptyGroup, alter(8), "the group has a member")
	require.Equal(t, errNonEmptyGroup, deleteOffsets())
	require.Equal(t, map[int32][2]int64{0: {4, 6}, 1: {-1, -1}}, describe(), "refused: unchanged")

	_, err = b.Groups().ShareHeartbeat(group.ShareHeartbeatRequest{Group: "q", MemberID: "m1", MemberEpoch: -1})
	require.NoError(t, err)
	require.Equal(t, errNone, alter(8))
	require.Equal(t, map[int32][2]int64{0: {8, 2}, 1: {-1, -1}}, describe())
	fetched, err = b.ShareAcquire(ctx, "q", "m2", []spool.TopicPartition{{Topic: "jobs", Partition: 0}}, spool.ShareAcquireOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(8), fetched[0].Acquired[0].Offset, "delivery resumes at the new start")
	require.NoError(t, b.ShareReleaseMember("q", "m2"))
	require.Equal(t, errNone, deleteOffsets())
	require.Equal(t, map[int32][2]int64{0: {-1, -1}, 1: {-1, -1}}, describe(), "forgotten")
}

func groupShareJoin(g, member string) group.ShareHeartbeatRequest {
	return group.ShareHeartbeatRequest{Group: g, MemberID: member, SubscribedTopicNames: []string{"jobs"}}
}
