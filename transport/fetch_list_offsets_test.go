package transport

import (
	"context"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func listReq(topic string, replica, part int32, ts int64) *kmsg.ListOffsetsRequest {
	r := kmsg.NewPtrListOffsetsRequest()
	r.ReplicaID = replica
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = part, ts
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	return r
}

// appendAt appends one record per timestamp (Unix ms), one batch each.
func appendAt(t testing.TB, b *spool.Broker, topic string, part int32, ts ...int64) {
	t.Helper()
	p, err := b.Partition(topic, part)
	require.NoError(t, err)
	for _, ms := range ts {
		_, err := p.Append(record.Record{Value: []byte("v"), Timestamp: time.UnixMilli(ms)})
		require.NoError(t, err)
	}
}

// Earliest, latest, by time and by greatest timestamp, at every version
// that has each; special timestamps a version does not know are
// UNSUPPORTED_VERSION, as in Kafka.
func TestListOffsets(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "list-offsets"
	fetchCreate(t, b, topic, 2)
	// offsets:   0     1     2     3     4     5
	appendAt(t, b, topic, 0, 5000, 9000, 7000, 9000, 1000, 8000)
	p, _ := b.Partition(topic, 0)
	require.NoError(t, p.Log().DeleteRecordsBefore(1))
	c := fetchDial(t, addr)
	type want struct {
		ts, offset int64
		epoch      int32
		code       int16
	}
	for v := int16(1); v <= 11; v++ {
		for _, tc := range []struct {
			ts    int64
			since int16
			want  want
		}{
			{listEarliest, 1, want{-1, 1, 0, 0}},
			{listLatest, 1, want{-1, 6, 0, 0}},
			{listMaxTimestamp, 7, want{9000, 1, 0, 0}},
			{listEarliestLocal, 8, want{-1, 1, 0, 0}},
			{listLatestTiered, 9, want{-1, -1, -1, 0}},
			{listEarliestPendingUpload, 11, want{-1, -1, -1, 0}},
			{-7, 99, want{}},
			{0, 1, want{9000, 1, 0, 0}},    // the first retained record
			{6000, 1, want{9000, 1, 0, 0}}, // the first at or after, in log order
			{8500, 1, want{9000, 1, 0, 0}},
			{9001, 1, want{-1, -1, -1, 0}}, // none that recent
		} {
			resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, v, listReq(topic, -1, 0, tc.ts))
			rp := resp.Topics[0].Partitions[0]
			if v < tc.since {
				require.Equal(t, errUnsupportedVersion, rp.ErrorCode, "v%d ts %d", v, tc.ts)
				require.Equal(t, int64(-1), rp.Offset)
				continue
			}
			w := tc.want
			require.Equal(t, w.code, rp.ErrorCode, "v%d ts %d", v, tc.ts)
			require.Equal(t, w.offset, rp.Offset, "v%d ts %d", v, tc.ts)
			require.Equal(t, w.ts, rp.Timestamp, "v%d ts %d", v, tc.ts)
			if v >= 4 {
				require.Equal(t, w.epoch, rp.LeaderEpoch, "v%d ts %d", v, tc.ts)
			}
		}
		// v2+ read_committed: the last stable offset is the high watermark.
		req := listReq(topic, -1, 0, listLatest)
		req.IsolationLevel = 1
		resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, v, req)
		require.Equal(t, int64(6), resp.Topics[0].Partitions[0].Offset)
	}
	// An empty partition: earliest = latest = 0; nothing by time or max.
	for _, ts := range []int64{listEarliest, listLatest, listMaxTimestamp, 0} {
		resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, 7, listReq(topic, -1, 1, ts))
		want := int64(0)
		if ts >= 0 || ts == listMaxTimestamp {
			want = -1
		}
		require.Equal(t, want, resp.Topics[0].Partitions[0].Offset, "ts %d", ts)
	}
}

// The greatest timestamp is found wherever it is, not only in the last
// batch.
func TestListOffsetsMaxTimestampSearch(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	fetchCreate(t, b, "max-ts", 1)
	appendAt(t, b, "max-ts", 0, 10, 1<<40+12345, 20, 1<<40+12345, 30)
	c := fetchDial(t, addr)
	resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, 7, listReq("max-ts", -1, 0, listMaxTimestamp))
	require.Equal(t, int64(1), resp.Topics[0].Partitions[0].Offset)
	require.Equal(t, int64(1<<40+12345), resp.Topics[0].Partitions[0].Timestamp)
}

func TestListOffsetsErrors(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	fetchCreate(t, b, "lo-errors", 1)
	c := fetchDial(t, addr)
	for v := int16(0); v <= 11; v++ {
		resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, v, listReq("missing", -1, 0, listLatest))
		require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[0].ErrorCode)
		resp = fetchDo[*kmsg.ListOffsetsResponse](t, c, v, listReq("lo-errors", -1, 3, listLatest))
		require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].Partitions[0].ErrorCode)

		req := listReq("lo-errors", -1, 0, listLatest)
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, req.Topics[0].Partitions[0])
		resp = fetchDo[*kmsg.ListOffsetsResponse](t, c, v, req)
		for _, rp := range resp.Topics[0].Partitions {
			require.Equal(t, errInvalidRequest, rp.ErrorCode)
		}

		req = listReq("lo-errors", -1, 0, listLatest)
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = 2
		resp = fetchDo[*kmsg.ListOffsetsResponse](t, c, v, req)
		if v >= 4 {
			require.Equal(t, errUnknownLeaderEpoch, resp.Topics[0].Partitions[0].ErrorCode)
		} else {
			require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		}
	}
}

// v0: Kafka's legacy list of segment offsets, newest first.
func TestListOffsetsV0(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "list-v0"
	require.NoError(t, b.CreateTopic(context.Background(), topic, spool.TopicConfig{Partitions: 1, SegmentBytes: 4096}))
	fetchAppend(t, b, topic, 0, 40, 5, 100)
	p, _ := b.Partition(topic, 0)
	require.Greater(t, p.Log().NumSegments(), 3)
	c := fetchDial(t, addr)
	list := func(ts int64, maxNum int32) []int64 {
		req := listReq(topic, -1, 0, ts)
		req.Topics[0].Partitions[0].MaxNumOffsets = maxNum
		resp := fetchDo[*kmsg.ListOffsetsResponse](t, c, 0, req)
		require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
		return resp.Topics[0].Partitions[0].OldStyleOffsets
	}
	require.Equal(t, []int64{200}, list(listLatest, 1))
	require.Equal(t, []int64{0}, list(listEarliest, 1))
	require.Equal(t, []int64{0}, list(listEarliest, 10))
	all := list(listLatest, 1000)
	require.Equal(t, p.Log().NumSegments()+1, len(all), "%v", all)
	require.Equal(t, int64(200), all[0])
	require.Equal(t, int64(0), all[len(all)-1])
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i], all[i-1])
	}
	require.Equal(t, all[:3], list(listLatest, 3))
	require.Equal(t, all, list(time.Now().Add(time.Hour).UnixMilli(), 1000))
	require.Empty(t, list(1, 10)) // before every segment was written
	require.Empty(t, list(listLatest, 0))
}

// kgo's offset resets use ListOffsets: start at a time, at the end.
func TestListOffsetsWithFranzGo(t *testing.T) {
	b, _, addr := testServer(t, fetchOpts, Options{})
	const topic = "kgo-list"
	fetchCreate(t, b, topic, 1)
	appendAt(t, b, topic, 0, 1000, 2000, 3000, 4000)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AfterMilli(2500)}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var offs []int64
	for len(offs) < 2 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) { offs = append(offs, r.Offset) })
	}
	require.Equal(t, []int64{2, 3}, offs)
}
