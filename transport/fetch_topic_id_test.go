package transport

import (
	"context"
	"testing"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchByTopicID: Fetch v13-v15 name topics by id (KIP-516). A known
// id gets the topic's records with the id in the response; an unknown one
// UNKNOWN_TOPIC_ID for each of its partitions; the records come through
// the same zero-copy envelope as by name.
func TestFetchByTopicID(t *testing.T) {
	b, addr, _ := startProduceServer(t, t.TempDir(), spool.Options{})
	prodCreateTopic(t, b, "byid", 1)
	for i := range 3 {
		_, err := b.Produce(context.Background(), spool.Record{Topic: "byid", Value: []byte{byte('a' + i)}})
		require.NoError(t, err)
	}
	d, err := b.DescribeTopic("byid")
	require.NoError(t, err)
	c := prodDial(t, addr)
	for _, v := range []int16{12, 13, 14, 15} {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(v)
		req.ReplicaID, req.ReplicaState.ID, req.MaxBytes, req.SessionEpoch = -1, -1, 1<<20, -1
		known := kmsg.NewFetchRequestTopic()
		known.Topic, known.TopicID = "byid", [16]byte(d.ID)
		known.Partitions = []kmsg.FetchRequestTopicPartition{{Partition: 0, FetchOffset: 0, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, LogStartOffset: -1, PartitionMaxBytes: 1 << 20}}
		req.Topics = append(req.Topics, known)
		if v >= 13 {
			unknown := kmsg.NewFetchRequestTopic()
			unknown.TopicID = [16]byte{1, 2, 3}
			unknown.Partitions = []kmsg.FetchRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1, LogStartOffset: -1, PartitionMaxBytes: 1 << 20}}
			req.Topics = append(req.Topics, unknown)
		}
		resp := prodCall[*kmsg.FetchResponse](t, c, int32(v), req)
		require.Len(t, resp.Topics, len(req.Topics), "v%d", v)
		got := resp.Topics[0]
		if v >= 13 {
			require.Equal(t, [16]byte(d.ID), got.TopicID, "v%d", v)
			require.Equal(t, errUnknownTopicID, resp.Topics[1].Partitions[0].ErrorCode, "v%d", v)
			require.Empty(t, resp.Topics[1].Partitions[0].RecordBatches)
		} else {
			require.Equal(t, "byid", got.Topic)
		}
		p := got.Partitions[0]
		require.Zero(t, p.ErrorCode, "v%d", v)
		require.Equal(t, int64(3), p.HighWatermark, "v%d", v)
		require.NotEmpty(t, p.RecordBatches, "v%d", v)
	}
}
