package transport

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopicsReq asks for one topic of n partitions.
func createTopicsReq(name string, n int32) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, n, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	return req
}

// storageTopics lists the data directory's entries whose names start with
// name (a topic's partition directories and anything its creation left).
func storageTopics(t *testing.T, dir, name string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name) {
			out = append(out, e.Name())
		}
	}
	return out
}

// A creation the data directory cannot take - here a file where the first
// partition's directory must go - answers KAFKA_STORAGE_ERROR with the
// reason, to CreateTopics, to auto-creation by Metadata and to
// CreatePartitions; nothing is created, and the same requests succeed once
// the obstacle is gone, on the same running server.
func TestCreationFailureIsStorageError(t *testing.T) {
	dir := t.TempDir()
	n := adminStart(t, dir, spool.Options{}, Options{})
	cl := adminClient(t, n.addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "blocked-0"), []byte("not a partition"), 0o644))

	resp := adminKgo[*kmsg.CreateTopicsResponse](t, cl, createTopicsReq("blocked", 2))
	require.Len(t, resp.Topics, 1)
	require.Equal(t, errKafkaStorageError, resp.Topics[0].ErrorCode)
	require.NotNil(t, resp.Topics[0].ErrorMessage)
	require.Contains(t, *resp.Topics[0].ErrorMessage, "in the way")

	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{metadataTopic("blocked")}
	meta.AllowAutoTopicCreation = true
	mresp := adminKgo[*kmsg.MetadataResponse](t, cl, meta)
	require.Equal(t, errKafkaStorageError, topicByName(mresp.Topics, "blocked").ErrorCode)
	require.NotContains(t, n.b.Topics(), "blocked")
	require.Equal(t, []string{"blocked-0"}, storageTopics(t, dir, "blocked"))

	require.NoError(t, n.b.CreateTopic(context.Background(), "grow", spool.TopicConfig{}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "grow-2"), nil, 0o644))
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "grow", 3
	cp.Topics, cp.TimeoutMillis = append(cp.Topics, cpt), 5000
	cpresp := adminKgo[*kmsg.CreatePartitionsResponse](t, cl, cp)
	require.Equal(t, errKafkaStorageError, cpresp.Topics[0].ErrorCode)
	d, err := n.b.DescribeTopic("grow")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 1)
	require.Equal(t, []string{"grow-0", "grow-2"}, storageTopics(t, dir, "grow"))

	require.NoError(t, os.Remove(filepath.Join(dir, "blocked-0")))
	require.NoError(t, os.Remove(filepath.Join(dir, "grow-2")))
	resp = adminKgo[*kmsg.CreateTopicsResponse](t, cl, createTopicsReq("blocked", 2))
	require.Equal(t, errNone, resp.Topics[0].ErrorCode)
	cpresp = adminKgo[*kmsg.CreatePartitionsResponse](t, cl, cp)
	require.Equal(t, errNone, cpresp.Topics[0].ErrorCode)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "blocked", Value: []byte("x")}).FirstErr())
}

// A partition that could not be opened is offline over the wire: Metadata
// reports it without a leader and with this node as an offline replica,
// and Produce, Fetch and ListOffsets to it answer KAFKA_STORAGE_ERROR,
// while the topic's other partition serves.
func TestOfflinePartitionOverTheWire(t *testing.T) {
	dir := t.TempDir()
	b, err := spool.Open(dir, spool.Options{})
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic(context.Background(), "o", spool.TopicConfig{Partitions: 2}))
	require.NoError(t, b.Close())
	// Partition 1's directory now claims to be another topic's.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "o-1", "partition.metadata"),
		[]byte("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"), 0o644))

	n := adminStart(t, dir, spool.Options{}, Options{})
	c := adminDial(t, n.addr)
	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{metadataTopic("o")}
	mresp := adminDo[*kmsg.MetadataResponse](t, c, 12, meta)
	mt := topicByName(mresp.Topics, "o")
	require.Equal(t, errNone, mt.ErrorCode)
	require.Len(t, mt.Partitions, 2)
	require.Equal(t, errNone, mt.Partitions[0].ErrorCode)
	require.Equal(t, int32(DefaultNodeID), mt.Partitions[0].Leader)
	require.Equal(t, errLeaderNotAvailable, mt.Partitions[1].ErrorCode)
	require.Equal(t, int32(-1), mt.Partitions[1].Leader)
	require.Equal(t, []int32{DefaultNodeID}, mt.Partitions[1].OfflineReplicas)

	for part, want := range map[int32]int16{0: errNone, 1: errKafkaStorageError} {
		presp := adminDo[*kmsg.ProduceResponse](t, c, 9, prodRequest(9, -1, "o", part, negBatch(t, "v", 3)))
		require.Equal(t, want, presp.Topics[0].Partitions[0].ErrorCode, "produce to partition %d", part)

		fetch := kmsg.NewPtrFetchRequest()
		fetch.ReplicaID, fetch.MaxBytes = -1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "o"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes = part, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fresp := adminDo[*kmsg.FetchResponse](t, c, 11, fetch)
		require.Equal(t, want, fresp.Topics[0].Partitions[0].ErrorCode, "fetch from partition %d", part)

		lo := kmsg.NewPtrListOffsetsRequest()
		lo.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "o"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = part, -1
		lt.Partitions = append(lt.Partitions, lp)
		lo.Topics = append(lo.Topics, lt)
		lresp := adminDo[*kmsg.ListOffsetsResponse](t, c, 5, lo)
		require.Equal(t, want, lresp.Topics[0].Partitions[0].ErrorCode, "list offsets of partition %d", part)
	}
}
