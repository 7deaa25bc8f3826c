package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// adminNode is a broker and its server on a data directory that outlives
// them, so a test can restart them.
type adminNode struct {
	b    *spool.Broker
	s    *Server
	addr string
	stop func()
}

func adminStart(t testing.TB, dir string, bopts spool.Options, opts Options) *adminNode {
	t.Helper()
	b, err := spool.Open(dir, bopts)
	require.NoError(t, err)
	s, err := NewServer(b, opts)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	var once sync.Once
	n := &adminNode{b: b, s: s, addr: l.Addr().String()}
	n.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-done, ErrServerClosed)
			require.NoError(t, b.Close())
		})
	}
	t.Cleanup(n.stop)
	return n
}

func adminDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

var adminCorrelation atomic.Int32

// adminRoundTrip sends req at version with a request header and decodes
// the answer.
func adminRoundTrip(c net.Conn, version int16, req kmsg.Request) (kmsg.Response, error) {
	req.SetVersion(version)
	corr := adminCorrelation.Add(1)
	frame := binary.BigEndian.AppendUint32(nil, 0)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 0xffff)
	if req.IsFlexible() {
		frame = append(frame, 0)
	}
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(frame); err != nil {
		return nil, err
	}
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(b)); got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	b = b[4:]
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		if len(b) == 0 || b[0] != 0 {
			return nil, fmt.Errorf("bad response header tag buffer")
		}
		b = b[1:]
	}
	return resp, resp.ReadFrom(b)
}

func adminDo[Resp kmsg.Response](t testing.TB, c net.Conn, version int16, req kmsg.Request) Resp {
	t.Helper()
	resp, err := adminRoundTrip(c, version, req)
	require.NoError(t, err, "%s v%d", kmsg.NameForKey(req.Key()), version)
	return resp.(Resp)
}

func adminClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func adminKgo[Resp kmsg.Response](t testing.TB, cl *kgo.Client, req kmsg.Request) Resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	require.NoError(t, err)
	return resp.(Resp)
}

func metadataTopic(name string) kmsg.MetadataRequestTopic {
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = &name
	return t
}

func topicByName(topics []kmsg.MetadataResponseTopic, name string) *kmsg.MetadataResponseTopic {
	for i := range topics {
		if topics[i].Topic != nil && *topics[i].Topic == name {
			return &topics[i]
		}
	}
	return nil
}

func TestAdminMetadataVersions(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{NodeID: 7, AdvertisedHost: "kafka.example", AdvertisedPort: 9092})
	ctx := context.Background()
	require.NoError(t, n.b.CreateTopic(ctx, "a", spool.TopicConfig{Partitions: 3}))
	require.NoError(t, n.b.CreateTopic(ctx, "b", spool.TopicConfig{}))
	da, err := n.b.DescribeTopic("a")
	require.NoError(t, err)
	c := adminDial(t, n.addr)

	for _, v := range []int16{0, 1, 2, 4, 7, 9, 10, 12, 13} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			req := kmsg.NewPtrMetadataRequest() // null topics: all (v1+); v0 sends an empty list
			resp := adminDo[*kmsg.MetadataResponse](t, c, v, req)
			require.Equal(t, []kmsg.MetadataResponseBroker{{NodeID: 7, Host: "kafka.example", Port: 9092}}, resp.Brokers)
			if v >= 1 {
				require.Equal(t, int32(7), resp.ControllerID)
			}
			if v >= 2 {
				require.NotNil(t, resp.ClusterID)
				require.Equal(t, n.s.ClusterID(), *resp.ClusterID)
			}
			require.Len(t, resp.Topics, 2)
			a := topicByName(resp.Topics, "a")
			require.NotNil(t, a)
			require.Zero(t, a.ErrorCode)
			require.False(t, a.IsInternal)
			require.Len(t, a.Partitions, 3)
			for i, p := range a.Partitions {
				require.Equal(t, int32(i), p.Partition)
				require.Equal(t, int32(7), p.Leader)
				require.Equal(t, []int32{7}, p.Replicas)
				require.Equal(t, []int32{7}, p.ISR)
				if v >= 7 {
					require.Equal(t, da.Partitions[i].LeaderEpoch, p.LeaderEpoch)
				}
			}
			if v >= 10 {
				require.Equal(t, [16]byte(da.ID), a.TopicID)
				require.NotEqual(t, [16]byte{}, a.TopicID)
			} else {
				require.Equal(t, [16]byte{}, a.TopicID)
			}
			if v >= 8 {
				require.Equal(t, int32(-2147483648), a.AuthorizedOperations)
			}

			// One topic by name; for v1+ an empty list means none.
			req = kmsg.NewPtrMetadataRequest()
			req.Topics = []kmsg.MetadataRequestTopic{metadataTopic("b")}
			resp = adminDo[*kmsg.MetadataResponse](t, c, v, req)
			require.Len(t, resp.Topics, 1)
			require.Equal(t, "b", *resp.Topics[0].Topic)
			if v >= 1 {
				req.Topics = []kmsg.MetadataRequestTopic{}
				resp = adminDo[*kmsg.MetadataResponse](t, c, v, req)
				require.Empty(t, resp.Topics)
			}
		})
	}
}

// Topic IDs are spool's: non-zero, the same after a restart, new for a
// topic created again.
func TestAdminMetadataTopicIDsAreStable(t *testing.T) {
	dir := t.TempDir()
	n := adminStart(t, dir, spool.Options{}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{}))
	idOf := func(addr string) [16]byte {
		c := adminDial(t, addr)
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{metadataTopic("t")}
		resp := adminDo[*kmsg.MetadataResponse](t, c, 12, req)
		require.Zero(t, resp.Topics[0].ErrorCode)
		return resp.Topics[0].TopicID
	}
	id := idOf(n.addr)
	require.NotEqual(t, [16]byte{}, id)
	n.stop()

	n = adminStart(t, dir, spool.Options{}, Options{})
	require.Equal(t, id, idOf(n.addr))

	// By ID (v12+).
	c := adminDial(t, n.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{{TopicID: id}, {TopicID: [16]byte{1}}}
	resp := adminDo[*kmsg.MetadataResponse](t, c, 12, req)
	require.Len(t, resp.Topics, 2)
	require.Zero(t, resp.Topics[0].ErrorCode)
	require.Equal(t, "t", *resp.Topics[0].Topic)
	require.Equal(t, errUnknownTopicID, resp.Topics[1].ErrorCode)
	require.Nil(t, resp.Topics[1].Topic)
	require.Equal(t, [16]byte{1}, resp.Topics[1].TopicID)
	// v10 and v11 take names only.
	resp = adminDo[*kmsg.MetadataResponse](t, c, 10, req)
	require.Equal(t, errInvalidRequest, resp.Topics[0].ErrorCode)

	require.NoError(t, n.b.DeleteTopic(context.Background(), "t"))
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{}))
	require.NotEqual(t, id, idOf(n.addr))
}

func TestAdminMetadataAutoCreate(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{DefaultPartitions: 2}, Options{})
	c := adminDial(t, n.addr)
	ask := func(v int16, allow bool, name string) kmsg.MetadataResponseTopic {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{metadataTopic(name)}
		req.AllowAutoTopicCreation = allow
		resp := adminDo[*kmsg.MetadataResponse](t, c, v, req)
		require.Len(t, resp.Topics, 1)
		return resp.Topics[0]
	}
	// v4+ asks; created at once, with a leader in the same answer.
	got := ask(4, false, "nope")
	require.Equal(t, errUnknownTopicOrPartition, got.ErrorCode)
	require.NotContains(t, n.b.Topics(), "nope")
	got = ask(4, true, "made-v4")
	require.Zero(t, got.ErrorCode)
	require.Len(t, got.Partitions, 2)
	require.Zero(t, got.Partitions[0].ErrorCode)
	require.Equal(t, int32(DefaultNodeID), got.Partitions[0].Leader)
	// Before v4 a request always allows it.
	got = ask(1, false, "made-v1")
	require.Zero(t, got.ErrorCode)
	require.Contains(t, n.b.Topics(), "made-v1")
	got = ask(12, true, "made-v1") // exists: described
	require.Zero(t, got.ErrorCode)
	// Bad names, and the offsets topic, are never created.
	require.Equal(t, errInvalidTopicException, ask(9, true, "bad name").ErrorCode)
	require.Equal(t, errInvalidTopicException, ask(0, true, "").ErrorCode)
	require.Equal(t, errUnknownTopicOrPartition, ask(9, true, spool.OffsetsTopic).ErrorCode)

	// A broker with auto-creation off creates nothing.
	off := adminStart(t, t.TempDir(), spool.Options{AutoCreateTopics: spool.Disabled}, Options{})
	c = adminDial(t, off.addr)
	require.Equal(t, errUnknownTopicOrPartition, ask(4, true, "x").ErrorCode)
	require.Equal(t, errUnknownTopicOrPartition, ask(1, true, "x").ErrorCode)
	require.Empty(t, off.b.Topics())
}

func TestAdminKgoListsTopics(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "listed", spool.TopicConfig{Partitions: 2}))
	cl := adminClient(t, n.addr)
	resp := adminKgo[*kmsg.MetadataResponse](t, cl, kmsg.NewPtrMetadataRequest())
	require.Equal(t, int16(13), resp.Version)
	got := topicByName(resp.Topics, "listed")
	require.NotNil(t, got)
	require.Len(t, got.Partitions, 2)

	// Producing to a new topic auto-creates it through metadata.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl2 := adminClient(t, n.addr, kgo.AllowAutoTopicCreation())
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{metadataTopic("auto")}
	req.AllowAutoTopicCreation = true
	r, err := cl2.Request(ctx, req)
	require.NoError(t, err)
	require.Zero(t, r.(*kmsg.MetadataResponse).Topics[0].ErrorCode)
	require.Contains(t, n.b.Topics(), "auto")
}

func createReq(name string, partitions int32, rf int16, configs ...string) kmsg.CreateTopicsRequestTopic {
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, rf
	for i := 0; i+1 < len(configs); i += 2 {
		v := configs[i+1]
		t.Configs = append(t.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: configs[i], Value: &v})
	}
	return t
}

func TestAdminCreateTopics(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{DefaultPartitions: 3}, Options{})
	cl := adminClient(t, n.addr)

	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 5000
	req.Topics = []kmsg.CreateTopicsRequestTopic{
		createReq("configured", 2, 1, "retention.ms", "60000", "cleanup.policy", "compact,delete", "segment.bytes", "1048576",
			"compression.type", "zstd", "max.message.bytes", "2000000", "min.cleanable.dirty.ratio", "0.25",
			"min.insync.replicas", "1"),
		createReq("defaults", -1, -1),
	}
	resp := adminKgo[*kmsg.CreateTopicsResponse](t, cl, req)
	require.Equal(t, int16(7), resp.Version)
	require.Len(t, resp.Topics, 2)
	for _, rt := range resp.Topics {
		require.Zero(t, rt.ErrorCode, "%s: %v", rt.Topic, rt.ErrorMessage)
		d, err := n.b.DescribeTopic(rt.Topic)
		require.NoError(t, err)
		require.Equal(t, [16]byte(d.ID), rt.TopicID)
		require.Equal(t, int16(1), rt.ReplicationFactor)
	}
	require.Equal(t, int32(2), resp.Topics[0].NumPartitions)
	require.Equal(t, int32(3), resp.Topics[1].NumPartitions)
	configs := map[string]kmsg.CreateTopicsResponseTopicConfig{}
	for _, c := range resp.Topics[0].Configs {
		configs[c.Name] = c
	}
	require.Equal(t, "60000", *configs["retention.ms"].Value)
	require.Equal(t, int8(kmsg.ConfigSourceDynamicTopicConfig), configs["retention.ms"].Source)
	require.Equal(t, "compact,delete", *configs["cleanup.policy"].Value)
	require.Equal(t, "zstd", *configs["compression.type"].Value)
	require.Equal(t, int8(kmsg.ConfigSourceDefaultConfig), configs["delete.retention.ms"].Source)
	require.Equal(t, "86400000", *configs["delete.retention.ms"].Value)
	own, eff, err := n.b.TopicSettings("configured")
	require.NoError(t, err)
	require.Equal(t, time.Minute, own.RetentionTime)
	require.Equal(t, spool.CleanupCompactDelete, own.CleanupPolicy)
	require.Equal(t, int64(1<<20), own.SegmentBytes)
	require.Equal(t, 2000000, own.MaxMessageBytes)
	require.Equal(t, 0.25, own.MinCleanableDirtyRatio)
	require.Equal(t, int32(2), eff.Partitions)

	// Errors, one topic each, at the version the clients use.
	bad := func(v int16, want int16, topics ...kmsg.CreateTopicsRequestTopic) []kmsg.CreateTopicsResponseTopic {
		t.Helper()
		c := adminDial(t, n.addr)
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Topics = topics
		resp := adminDo[*kmsg.CreateTopicsResponse](t, c, v, req)
		require.Len(t, resp.Topics, len(topics))
		for _, rt := range resp.Topics {
			require.Equal(t, want, rt.ErrorCode, "%s", rt.Topic)
			if v >= 1 {
				require.NotNil(t, rt.ErrorMessage)
			}
			if v >= 5 {
				require.Equal(t, int32(-1), rt.NumPartitions)
			}
		}
		return resp.Topics
	}
	bad(0, errTopicAlreadyExists, createReq("configured", 1, 1))
	bad(7, errTopicAlreadyExists, createReq("defaults", 1, 1))
	bad(2, errInvalidTopicException, createReq("bad/name", 1, 1))
	require.NoError(t, n.b.CreateTopic(context.Background(), "with.dot", spool.TopicConfig{}))
	bad(7, errInvalidTopicException, createReq("with_dot", 1, 1)) // Kafka: collides
	bad(4, errInvalidReplicationFactor, createReq("rf3", 1, 3))
	bad(4, errInvalidReplicationFactor, createReq("rf0", 1, 0))
	bad(4, errInvalidPartitions, createReq("p0", 0, 1))
	bad(4, errInvalidPartitions, createReq("p-2", -2, 1))
	bad(3, errInvalidConfig, createReq("unknown", 1, 1, "no.such.config", "1"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "retention.ms", "soon"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "retention.ms", "-2"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "segment.bytes", "20"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "cleanup.policy", "sometimes"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "min.insync.replicas", "2"))
	bad(5, errInvalidConfig, createReq("badvalue", 1, 1, "compression.type", "brotli"))
	nullValue := createReq("null", 1, 1)
	nullValue.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms"}}
	bad(5, errInvalidConfig, nullValue)
	bad(7, errInvalidRequest, createReq("twice", 1, 1), createReq("twice", 1, 1))
	require.NotContains(t, n.b.Topics(), "twice")
	require.NotContains(t, n.b.Topics(), "badvalue")

	// Manual assignment: this node only, one replica per partition.
	assigned := createReq("assigned", -1, -1)
	assigned.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{
		{Partition: 1, Replicas: []int32{1}}, {Partition: 0, Replicas: []int32{1}},
	}
	c := adminDial(t, n.addr)
	req = kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{assigned}
	cresp := adminDo[*kmsg.CreateTopicsResponse](t, c, 4, req)
	require.Zero(t, cresp.Topics[0].ErrorCode)
	d, err := n.b.DescribeTopic("assigned")
	require.NoError(t, err)
	require.Len(t, d.Partitions, 2)
	for _, a := range [][]kmsg.CreateTopicsRequestTopicReplicaAssignment{
		{{Partition: 0, Replicas: []int32{2}}},
		{{Partition: 0, Replicas: []int32{1, 2}}},
		{{Partition: 1, Replicas: []int32{1}}},
		{{Partition: 0, Replicas: []int32{1}}, {Partition: 0, Replicas: []int32{1}}},
	} {
		bt := createReq("badassign", -1, -1)
		bt.ReplicaAssignment = a
		bad(4, errInvalidReplicaAssignment, bt)
	}
	both := createReq("both", 2, -1)
	both.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1}}}
	bad(4, errInvalidRequest, both)

	// ValidateOnly checks everything and creates nothing.
	req = kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	req.Topics = []kmsg.CreateTopicsRequestTopic{createReq("dry", 4, 1, "retention.ms", "1000"), createReq("dry-bad", 4, 2)}
	cresp = adminDo[*kmsg.CreateTopicsResponse](t, c, 7, req)
	require.Zero(t, cresp.Topics[0].ErrorCode)
	require.Equal(t, int32(4), cresp.Topics[0].NumPartitions)
	require.Equal(t, [16]byte{}, cresp.Topics[0].TopicID)
	require.NotEmpty(t, cresp.Topics[0].Configs)
	require.Equal(t, errInvalidReplicationFactor, cresp.Topics[1].ErrorCode)
	require.NotContains(t, n.b.Topics(), "dry")
}

func TestAdminDeleteTopics(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c", "d"} {
		require.NoError(t, n.b.CreateTopic(ctx, name, spool.TopicConfig{}))
	}
	c := adminDial(t, n.addr)

	// v0-5: by name.
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{"a", "nope"}
	resp := adminDo[*kmsg.DeleteTopicsResponse](t, c, 1, req)
	require.Len(t, resp.Topics, 2)
	require.Zero(t, resp.Topics[0].ErrorCode)
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[1].ErrorCode)
	require.NotContains(t, n.b.Topics(), "a")

	req.TopicNames = []string{"b", "b"}
	resp = adminDo[*kmsg.DeleteTopicsResponse](t, c, 5, req)
	require.Equal(t, errInvalidRequest, resp.Topics[0].ErrorCode)
	require.NotNil(t, resp.Topics[0].ErrorMessage)
	require.Contains(t, n.b.Topics(), "b")

	// v6: by name or ID.
	dc, err := n.b.DescribeTopic("c")
	require.NoError(t, err)
	name := "b"
	req = kmsg.NewPtrDeleteTopicsRequest()
	req.Topics = []kmsg.DeleteTopicsRequestTopic{
		{TopicID: dc.ID}, {Topic: &name}, {TopicID: [16]byte{9}}, {Topic: &name, TopicID: dc.ID}, {},
	}
	resp = adminDo[*kmsg.DeleteTopicsResponse](t, c, 6, req)
	require.Len(t, resp.Topics, 5)
	require.Zero(t, resp.Topics[0].ErrorCode)
	require.Equal(t, "c", *resp.Topics[0].Topic)
	require.Equal(t, [16]byte(dc.ID), resp.Topics[0].TopicID)
	require.Zero(t, resp.Topics[1].ErrorCode)
	require.NotEqual(t, [16]byte{}, resp.Topics[1].TopicID)
	require.Equal(t, errUnknownTopicID, resp.Topics[2].ErrorCode)
	require.Equal(t, errInvalidRequest, resp.Topics[3].ErrorCode)
	require.Equal(t, errInvalidRequest, resp.Topics[4].ErrorCode)
	require.Equal(t, []string{"d"}, n.b.Topics())
	cl := adminClient(t, n.addr)

	// The offsets topic stays.
	_, err = n.b.Groups().CommitOffsets(group.CommitRequest{Group: "g", Generation: -1,
		Offsets: map[group.TopicPartition]group.OffsetAndMetadata{{Topic: "d", Partition: 0}: {Offset: 1, LeaderEpoch: -1}}})
	require.NoError(t, err)
	require.Contains(t, n.b.Topics(), spool.OffsetsTopic)
	req = kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{spool.OffsetsTopic}
	resp = adminDo[*kmsg.DeleteTopicsResponse](t, c, 4, req)
	require.Equal(t, errInvalidRequest, resp.Topics[0].ErrorCode)
	require.Contains(t, n.b.Topics(), spool.OffsetsTopic)

	// kgo's current version.
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dreq.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("d")}}
	dresp := adminKgo[*kmsg.DeleteTopicsResponse](t, cl, dreq)
	require.Zero(t, dresp.Topics[0].ErrorCode)
	require.NotContains(t, n.b.Topics(), "d")
}

func TestAdminCreatePartitions(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{Partitions: 2}))
	c := adminDial(t, n.addr)
	grow := func(v int16, count int32, validateOnly bool, assignment ...[]int32) kmsg.CreatePartitionsResponseTopic {
		t.Helper()
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.ValidateOnly = validateOnly
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "t", count
		for _, a := range assignment {
			rt.Assignment = append(rt.Assignment, kmsg.CreatePartitionsRequestTopicAssignment{Replicas: a})
		}
		req.Topics = []kmsg.CreatePartitionsRequestTopic{rt}
		resp := adminDo[*kmsg.CreatePartitionsResponse](t, c, v, req)
		require.Len(t, resp.Topics, 1)
		return resp.Topics[0]
	}
	parts := func() int {
		d, err := n.b.DescribeTopic("t")
		require.NoError(t, err)
		return len(d.Partitions)
	}
	require.Zero(t, grow(0, 3, false).ErrorCode)
	require.Equal(t, 3, parts())
	require.Zero(t, grow(3, 5, true).ErrorCode)
	require.Equal(t, 3, parts())
	require.Zero(t, grow(2, 5, false, []int32{1}, []int32{1}).ErrorCode)
	require.Equal(t, 5, parts())
	require.Equal(t, errInvalidPartitions, grow(1, 5, false).ErrorCode)
	require.Equal(t, errInvalidPartitions, grow(3, 2, false).ErrorCode)
	require.Equal(t, errInvalidReplicaAssignment, grow(3, 7, false, []int32{1}).ErrorCode)
	require.Equal(t, errInvalidReplicaAssignment, grow(3, 6, false, []int32{2}).ErrorCode)
	require.Equal(t, 5, parts())

	req := kmsg.NewPtrCreatePartitionsRequest()
	req.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "nope", Count: 3}, {Topic: "t", Count: 9}, {Topic: "t", Count: 9}}
	resp := adminDo[*kmsg.CreatePartitionsResponse](t, c, 3, req)
	require.Equal(t, errUnknownTopicOrPartition, resp.Topics[0].ErrorCode)
	require.Equal(t, errInvalidRequest, resp.Topics[1].ErrorCode)
	require.Equal(t, errInvalidRequest, resp.Topics[2].ErrorCode)
	require.Equal(t, 5, parts())
}

// describeTopic returns a topic's settings by name, at version v.
func describeTopicConfigs(t testing.TB, c net.Conn, v int16, topic string, synonyms bool) map[string]kmsg.DescribeConfigsResponseResourceConfig {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: topic}}
	req.IncludeSynonyms = synonyms
	req.IncludeDocumentation = true
	resp := adminDo[*kmsg.DescribeConfigsResponse](t, c, v, req)
	require.Len(t, resp.Resources, 1)
	require.Zero(t, resp.Resources[0].ErrorCode, "%v", resp.Resources[0].ErrorMessage)
	out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, e := range resp.Resources[0].Configs {
		out[e.Name] = e
	}
	return out
}

func TestAdminDescribeConfigs(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{Topic: spool.TopicConfig{SegmentBytes: 64 << 20}}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{RetentionTime: 2 * time.Hour}))
	c := adminDial(t, n.addr)
	for _, v := range []int16{0, 1, 3, 4} {
		got := describeTopicConfigs(t, c, v, "t", true)
		require.Len(t, got, len(topicKeys))
		rms, seg, del := got["retention.ms"], got["segment.bytes"], got["delete.retention.ms"]
		require.Equal(t, "7200000", *rms.Value)
		require.Equal(t, "67108864", *seg.Value)
		require.Equal(t, "86400000", *del.Value)
		require.Equal(t, kmsg.ConfigTypeUnknown == rms.ConfigType, v < 3)
		if v == 0 {
			require.False(t, rms.IsDefault)
			require.True(t, del.IsDefault)
			continue
		}
		require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, rms.Source)
		require.Equal(t, kmsg.ConfigSourceStaticBrokerConfig, seg.Source)
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, del.Source)
		require.Len(t, rms.ConfigSynonyms, 2)
		require.Equal(t, "log.retention.ms", rms.ConfigSynonyms[1].Name)
		require.Equal(t, "604800000", *rms.ConfigSynonyms[1].Value)
		require.Equal(t, "log.segment.bytes", seg.ConfigSynonyms[0].Name)
		require.False(t, rms.ReadOnly)
		if v >= 3 {
			require.Equal(t, kmsg.ConfigTypeLong, rms.ConfigType)
			require.Equal(t, kmsg.ConfigTypeList, got["cleanup.policy"].ConfigType)
			require.NotEmpty(t, *rms.Documentation)
		}
	}
	got := describeTopicConfigs(t, c, 4, "t", false)
	require.Empty(t, got["retention.ms"].ConfigSynonyms)
	require.Equal(t, kafkaLongMax, *got["max.compaction.lag.ms"].Value)
	require.Equal(t, "producer", *got["compression.type"].Value)
	require.Equal(t, "-1", *got["retention.bytes"].Value)
	require.Equal(t, "0.5", *got["min.cleanable.dirty.ratio"].Value)

	// Named settings only; unknown names are left out. Broker resources:
	// this node's id or "" (the cluster-wide defaults: none); errors per
	// resource.
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Resources = []kmsg.DescribeConfigsRequestResource{
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "t", ConfigNames: []string{"retention.ms", "no.such"}},
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "nope"},
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "bad name"},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "1"},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: ""},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "2"},
		{ResourceType: kmsg.ConfigResourceTypeBrokerLogger, ResourceName: "1"},
	}
	resp := adminDo[*kmsg.DescribeConfigsResponse](t, c, 4, req)
	require.Len(t, resp.Resources, 7)
	require.Len(t, resp.Resources[0].Configs, 1)
	require.Equal(t, "retention.ms", resp.Resources[0].Configs[0].Name)
	require.Equal(t, errUnknownTopicOrPartition, resp.Resources[1].ErrorCode)
	require.Equal(t, errInvalidTopicException, resp.Resources[2].ErrorCode)
	require.Zero(t, resp.Resources[3].ErrorCode)
	broker := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, e := range resp.Resources[3].Configs {
		broker[e.Name] = e
		require.True(t, e.ReadOnly, e.Name)
	}
	require.Equal(t, "1", *broker["num.partitions"].Value)
	require.Equal(t, "true", *broker["auto.create.topics.enable"].Value)
	require.Equal(t, "604800000", *broker["log.retention.ms"].Value)
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, broker["log.retention.ms"].Source)
	require.Equal(t, "67108864", *broker["log.segment.bytes"].Value)
	require.Equal(t, kmsg.ConfigSourceStaticBrokerConfig, broker["log.segment.bytes"].Source)
	require.Equal(t, "1", *broker["node.id"].Value)
	require.Zero(t, resp.Resources[4].ErrorCode)
	require.Empty(t, resp.Resources[4].Configs)
	require.Equal(t, errInvalidRequest, resp.Resources[5].ErrorCode)
	require.Equal(t, errInvalidRequest, resp.Resources[6].ErrorCode)

	// Through kgo, which sends broker resources to that broker.
	cl := adminClient(t, n.addr)
	req.Resources = req.Resources[:5]
	resp = adminKgo[*kmsg.DescribeConfigsResponse](t, cl, req)
	require.Len(t, resp.Resources, 5)
	for _, r := range resp.Resources {
		if r.ResourceType == kmsg.ConfigResourceTypeBroker {
			require.Zero(t, r.ErrorCode)
		}
	}
}

func alterReq(topic string, configs ...string) kmsg.AlterConfigsRequestResource {
	r := kmsg.NewAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	for i := 0; i+1 < len(configs); i += 2 {
		v := configs[i+1]
		r.Configs = append(r.Configs, kmsg.AlterConfigsRequestResourceConfig{Name: configs[i], Value: &v})
	}
	return r
}

func TestAdminAlterConfigs(t *testing.T) {
	dir := t.TempDir()
	n := adminStart(t, dir, spool.Options{}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{SegmentBytes: 1 << 20}))
	c := adminDial(t, n.addr)
	alter := func(v int16, validateOnly bool, rs ...kmsg.AlterConfigsRequestResource) []kmsg.AlterConfigsResponseResource {
		t.Helper()
		req := kmsg.NewPtrAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		req.Resources = rs
		resp := adminDo[*kmsg.AlterConfigsResponse](t, c, v, req)
		require.Len(t, resp.Resources, len(rs))
		return resp.Resources
	}

	// Validating changes nothing.
	res := alter(0, true, alterReq("t", "retention.ms", "3600000"))
	require.Zero(t, res[0].ErrorCode)
	require.Equal(t, "604800000", *describeTopicConfigs(t, c, 4, "t", false)["retention.ms"].Value)

	// The whole set is replaced: segment.bytes goes back to its default.
	res = alter(2, false, alterReq("t", "retention.ms", "3600000", "cleanup.policy", "compact"))
	require.Zero(t, res[0].ErrorCode, "%v", res[0].ErrorMessage)
	got := describeTopicConfigs(t, c, 4, "t", false)
	require.Equal(t, "3600000", *got["retention.ms"].Value)
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got["retention.ms"].Source)
	require.Equal(t, "compact", *got["cleanup.policy"].Value)
	require.Equal(t, "1073741824", *got["segment.bytes"].Value)
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, got["segment.bytes"].Source)
	own, _, err := n.b.TopicSettings("t")
	require.NoError(t, err)
	require.Equal(t, spool.TopicConfig{RetentionTime: time.Hour, CleanupPolicy: spool.CleanupCompact}, own)

	// Errors, per resource; a bad one changes nothing.
	broker := kmsg.NewAlterConfigsRequestResource()
	broker.ResourceType, broker.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
	broker.Configs = []kmsg.AlterConfigsRequestResourceConfig{{Name: "num.partitions", Value: kmsg.StringPtr("3")}}
	emptyBroker := kmsg.NewAlterConfigsRequestResource()
	emptyBroker.ResourceType = kmsg.ConfigResourceTypeBroker
	res = alter(1, false,
		alterReq("t", "retention.ms", "x"),
		alterReq("nope", "retention.ms", "1"),
		broker, emptyBroker,
	)
	require.Equal(t, errInvalidConfig, res[0].ErrorCode)
	require.Equal(t, errUnknownTopicOrPartition, res[1].ErrorCode)
	require.Equal(t, errInvalidRequest, res[2].ErrorCode)
	require.NotNil(t, res[2].ErrorMessage)
	require.Zero(t, res[3].ErrorCode)
	res = alter(1, false, alterReq("t", "unknown.config", "1"))
	require.Equal(t, errInvalidConfig, res[0].ErrorCode)
	res = alter(1, false, alterReq("t", "retention.ms", "1"), alterReq("t", "retention.ms", "2"))
	require.Equal(t, errInvalidRequest, res[0].ErrorCode)
	require.Equal(t, errInvalidRequest, res[1].ErrorCode)
	require.Equal(t, "3600000", *describeTopicConfigs(t, c, 4, "t", false)["retention.ms"].Value)

	// Kept across a restart.
	n.stop()
	n = adminStart(t, dir, spool.Options{}, Options{})
	c = adminDial(t, n.addr)
	got = describeTopicConfigs(t, c, 4, "t", false)
	require.Equal(t, "3600000", *got["retention.ms"].Value)
	require.Equal(t, "compact", *got["cleanup.policy"].Value)
}

func incrementalReq(topic string, ops ...any) kmsg.IncrementalAlterConfigsRequestResource {
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	for i := 0; i+2 < len(ops); i += 3 {
		e := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		e.Name, e.Op = ops[i].(string), ops[i+1].(kmsg.IncrementalAlterConfigOp)
		if v, ok := ops[i+2].(string); ok {
			e.Value = &v
		}
		r.Configs = append(r.Configs, e)
	}
	return r
}

func TestAdminIncrementalAlterConfigs(t *testing.T) {
	dir := t.TempDir()
	n := adminStart(t, dir, spool.Options{}, Options{})
	require.NoError(t, n.b.CreateTopic(context.Background(), "t", spool.TopicConfig{SegmentBytes: 1 << 20}))
	cl := adminClient(t, n.addr)
	alter := func(validateOnly bool, rs ...kmsg.IncrementalAlterConfigsRequestResource) []kmsg.IncrementalAlterConfigsResponseResource {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		req.Resources = rs
		resp := adminKgo[*kmsg.IncrementalAlterConfigsResponse](t, cl, req)
		require.Len(t, resp.Resources, len(rs))
		return resp.Resources
	}
	const (
		set      = kmsg.IncrementalAlterConfigOpSet
		del      = kmsg.IncrementalAlterConfigOpDelete
		appendOp = kmsg.IncrementalAlterConfigOpAppend
		subtract = kmsg.IncrementalAlterConfigOpSubtract
	)
	c := adminDial(t, n.addr)

	res := alter(false, incrementalReq("t", "retention.ms", set, "120000", "cleanup.policy", appendOp, "compact"))
	require.Zero(t, res[0].ErrorCode, "%v", res[0].ErrorMessage)
	got := describeTopicConfigs(t, c, 4, "t", false)
	require.Equal(t, "120000", *got["retention.ms"].Value)
	require.Equal(t, "compact,delete", *got["cleanup.policy"].Value)
	require.Equal(t, "1048576", *got["segment.bytes"].Value) // kept
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got["segment.bytes"].Source)

	res = alter(false, incrementalReq("t", "segment.bytes", del, nil, "cleanup.policy", subtract, "delete"))
	require.Zero(t, res[0].ErrorCode, "%v", res[0].ErrorMessage)
	got = describeTopicConfigs(t, c, 4, "t", false)
	require.Equal(t, "1073741824", *got["segment.bytes"].Value)
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, got["segment.bytes"].Source)
	require.Equal(t, "compact", *got["cleanup.policy"].Value)

	// Validate only.
	res = alter(true, incrementalReq("t", "retention.ms", set, "1"))
	require.Zero(t, res[0].ErrorCode)
	require.Equal(t, "120000", *describeTopicConfigs(t, c, 4, "t", false)["retention.ms"].Value)

	// Errors: each resource whole.
	for _, tc := range []struct {
		r    kmsg.IncrementalAlterConfigsRequestResource
		code int16
	}{
		{incrementalReq("t", "retention.ms", set, "1", "cleanup.policy", subtract, "compact"), errInvalidConfig}, // empty policy
		{incrementalReq("t", "retention.ms", appendOp, "1"), errInvalidConfig},                                   // not a list
		{incrementalReq("t", "no.such", set, "1"), errInvalidConfig},
		{incrementalReq("t", "retention.ms", set, nil), errInvalidRequest},
		{incrementalReq("t", "retention.ms", set, "1", "retention.ms", del, nil), errInvalidRequest},
		{incrementalReq("t", "retention.ms", kmsg.IncrementalAlterConfigOp(9), "1"), errInvalidRequest},
		{incrementalReq("t", "cleanup.policy", appendOp, "sometimes"), errInvalidConfig},
		{incrementalReq("nope", "retention.ms", set, "1"), errUnknownTopicOrPartition},
	} {
		res := alter(false, tc.r)
		require.Equal(t, tc.code, res[0].ErrorCode, "%+v", tc.r.Configs)
	}
	require.Equal(t, "120000", *describeTopicConfigs(t, c, 4, "t", false)["retention.ms"].Value)

	broker := kmsg.NewIncrementalAlterConfigsRequestResource()
	broker.ResourceType, broker.ResourceName = kmsg.ConfigResourceTypeBroker, strconv.Itoa(DefaultNodeID)
	broker.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "log.retention.ms", Op: set, Value: kmsg.StringPtr("1")}}
	res = alter(false, broker)
	require.Equal(t, errInvalidRequest, res[0].ErrorCode)

	// v0 (non-flexible) too, then a restart.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{incrementalReq("t", "retention.ms", set, "90000")}
	resp := adminDo[*kmsg.IncrementalAlterConfigsResponse](t, c, 0, req)
	require.Zero(t, resp.Resources[0].ErrorCode)
	n.stop()
	n = adminStart(t, dir, spool.Options{}, Options{})
	c = adminDial(t, n.addr)
	got = describeTopicConfigs(t, c, 1, "t", true)
	require.Equal(t, "90000", *got["retention.ms"].Value)
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got["retention.ms"].Source)
	require.Equal(t, "compact", *got["cleanup.policy"].Value)
}

// Retention altered through the protocol applies to the running log.
func TestAdminAlteredRetentionApplies(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{})
	ctx := context.Background()
	require.NoError(t, n.b.CreateTopic(ctx, "t", spool.TopicConfig{SegmentBytes: 1024}))
	old := time.Now().Add(-time.Hour)
	for i := 0; i < 100; i++ {
		_, err := n.b.Produce(ctx, spool.Record{Topic: "t", Timestamp: old, Value: make([]byte, 100)})
		require.NoError(t, err)
	}
	p, err := n.b.Partition("t", 0)
	require.NoError(t, err)
	deleted, err := p.Log().ApplyRetention()
	require.NoError(t, err)
	require.Zero(t, deleted)

	cl := adminClient(t, n.addr)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{
		incrementalReq("t", "retention.ms", kmsg.IncrementalAlterConfigOpSet, "60000"),
	}
	resp := adminKgo[*kmsg.IncrementalAlterConfigsResponse](t, cl, req)
	require.Zero(t, resp.Resources[0].ErrorCode)
	deleted, err = p.Log().ApplyRetention()
	require.NoError(t, err)
	require.Greater(t, deleted, 0)
}

func TestAdminDescribeCluster(t *testing.T) {
	n := adminStart(t, t.TempDir(), spool.Options{}, Options{NodeID: 3, AdvertisedHost: "h", AdvertisedPort: 1234})
	c := adminDial(t, n.addr)
	for _, v := range []int16{0, 1, 2} {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.IncludeFencedBrokers = true
		resp := adminDo[*kmsg.DescribeClusterResponse](t, c, v, req)
		require.Zero(t, resp.ErrorCode)
		require.Equal(t, n.s.ClusterID(), resp.ClusterID)
		require.Equal(t, int32(3), resp.ControllerID)
		require.Equal(t, []kmsg.DescribeClusterResponseBroker{{NodeID: 3, Host: "h", Port: 1234}}, resp.Brokers)
		if v >= 1 {
			require.Equal(t, int8(1), resp.EndpointType)
		}
	}
	req := kmsg.NewPtrDescribeClusterRequest()
	req.EndpointType = 2
	resp := adminDo[*kmsg.DescribeClusterResponse](t, c, 1, req)
	require.Equal(t, errMismatchedEndpointType, resp.ErrorCode)
	req.EndpointType = 5
	resp = adminDo[*kmsg.DescribeClusterResponse](t, c, 1, req)
	require.Equal(t, errUnsupportedEndpointType, resp.ErrorCode)

	cl := adminClient(t, n.addr, kgo.SeedBrokers(n.addr))
	resp = adminKgo[*kmsg.DescribeClusterResponse](t, cl, kmsg.NewPtrDescribeClusterRequest())
	require.Equal(t, int16(2), resp.Version)
	require.Equal(t, int32(3), resp.ControllerID)
}
