package transport

import (
	"fmt"
	"testing"

	"github.com/spoolmq/spool/group"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Committed offsets over the wire: OffsetCommit, OffsetFetch and
// OffsetDelete at every version.

// OffsetCommit and OffsetFetch at every version, simple commits (generation
// -1) included.
func TestGroupOffsetsEveryVersion(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 3)
	groupCreateTopic(t, b, "u", 1)
	td, err := b.DescribeTopic("t")
	require.NoError(t, err)
	tid := [16]byte(td.ID)
	c := groupDo[*kmsg.OffsetCommitResponse]
	f := groupDo[*kmsg.OffsetFetchResponse]
	conn := groupDial(t, addr)

	for v := int16(0); v <= 10; v++ {
		g := fmt.Sprintf("c%d", v)
		req := groupCommitReq(g, -1, "", "t", map[int32]int64{0: 100 + int64(v), 2: 200 + int64(v)})
		req.Topics[0].Partitions[0].LeaderEpoch = 4
		if v >= 10 {
			req.Topics[0].Topic, req.Topics[0].TopicID = "", tid
		}
		resp := c(t, conn, v, req)
		require.Len(t, resp.Topics, 1)
		if v >= 10 {
			require.Equal(t, tid, resp.Topics[0].TopicID)
		} else {
			require.Equal(t, "t", resp.Topics[0].Topic)
		}
		for _, p := range resp.Topics[0].Partitions {
			require.Equal(t, errNone, p.ErrorCode, "v%d", v)
		}
		got, err := b.Groups().FetchOffsets(g, nil)
		require.NoError(t, err)
		require.Len(t, got, 2, "v%d", v)
		o := got[group.TopicPartition{Topic: "t", Partition: 0}]
		require.Equal(t, 100+int64(v), o.Offset)
		require.Equal(t, "meta-0", o.Metadata)
		if v >= 6 {
			require.Equal(t, int32(4), o.LeaderEpoch)
		} else {
			require.Equal(t, int32(-1), o.LeaderEpoch)
		}
	}
	// An unknown topic id (v10).
	req := groupCommitReq("c10", -1, "", "", map[int32]int64{0: 1})
	req.Topics[0].TopicID = [16]byte{1, 2, 3}
	resp := c(t, conn, 10, req)
	require.Equal(t, errUnknownTopicID, resp.Topics[0].Partitions[0].ErrorCode)

	// Fetch each group at its version: partition 1 has no commit.
	for v := int16(0); v <= 10; v++ {
		g := fmt.Sprintf("c%d", v)
		req := kmsg.NewPtrOffsetFetchRequest()
		if v < 8 {
			req.Group = g
			req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0, 1, 2}}}
		} else {
			rt := kmsg.OffsetFetchRequestGroupTopic{Topic: "t", Partitions: []int32{0, 1, 2}}
			if v >= 10 {
				rt.Topic, rt.TopicID = "", tid
			}
			req.Groups = []kmsg.OffsetFetchRequestGroup{
				{Group: g, Topics: []kmsg.OffsetFetchRequestGroupTopic{rt}},
				{Group: "unknown-group", Topics: []kmsg.OffsetFetchRequestGroupTopic{rt}},
			}
			req.RequireStable = true
		}
		resp := f(t, conn, v, req)
		type row struct {
			off   int64
			epoch int32
			meta  string
			code  int16
		}
		var rows, unknown []row
		if v < 8 {
			require.Equal(t, errNone, resp.ErrorCode)
			require.Len(t, resp.Topics, 1)
			require.Equal(t, "t", resp.Topics[0].Topic)
			for _, p := range resp.Topics[0].Partitions {
				rows = append(rows, row{p.Offset, p.LeaderEpoch, *p.Metadata, p.ErrorCode})
			}
		} else {
			require.Len(t, resp.Groups, 2)
			require.Equal(t, g, resp.Groups[0].Group)
			for i, rg := range resp.Groups {
				require.Equal(t, errNone, rg.ErrorCode)
				require.Len(t, rg.Topics, 1)
				if v >= 10 {
					require.Equal(t, tid, rg.Topics[0].TopicID)
				} else {
					require.Equal(t, "t", rg.Topics[0].Topic)
				}
				for _, p := range rg.Topics[0].Partitions {
					r := row{p.Offset, p.LeaderEpoch, *p.Metadata, p.ErrorCode}
					if i == 0 {
						rows = append(rows, r)
					} else {
						unknown = append(unknown, r)
					}
				}
			}
			require.Equal(t, []row{{-1, -1, "", 0}, {-1, -1, "", 0}, {-1, -1, "", 0}}, unknown)
		}
		epoch := int32(-1) // committed from v6, returned from v5
		if v >= 6 {
			epoch = 4
		}
		require.Equal(t, []row{
			{100 + int64(v), epoch, "meta-0", 0},
			{-1, -1, "", 0},
			{200 + int64(v), -1, "meta-2", 0},
		}, rows, "v%d", v)
	}

	// Null topics: everything the group committed (v2+), sorted.
	commit := groupCommitReq("all", -1, "", "u", map[int32]int64{0: 7})
	commit.Topics = append(commit.Topics, groupCommitReq("", 0, "", "t", map[int32]int64{2: 9, 1: 8}).Topics...)
	require.Equal(t, []string{"u/0=0", "t/1=0", "t/2=0"}, groupCommitCodes(c(t, conn, 5, commit)))
	for v := int16(2); v <= 10; v++ {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "all"
		req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "all"}}
		resp := f(t, conn, v, req)
		var got []string
		topics := resp.Topics
		if v >= 8 {
			require.Len(t, resp.Groups, 1)
			for _, rt := range resp.Groups[0].Topics {
				name := rt.Topic
				if v >= 10 {
					name = map[[16]byte]string{tid: "t"}[rt.TopicID]
					if name == "" {
						name = "u"
					}
				}
				for _, p := range rt.Partitions {
					got = append(got, fmt.Sprintf("%s/%d@%d", name, p.Partition, p.Offset))
				}
			}
		} else {
			for _, rt := range topics {
				for _, p := range rt.Partitions {
					got = append(got, fmt.Sprintf("%s/%d@%d", rt.Topic, p.Partition, p.Offset))
				}
			}
		}
		require.Equal(t, []string{"t/1@8", "t/2@9", "u/0@7"}, got, "v%d", v)
	}

	// An empty list, not null, asks for nothing.
	for _, v := range []int16{2, 7, 8} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group, req.Topics = "all", []kmsg.OffsetFetchRequestTopic{}
		req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "all", Topics: []kmsg.OffsetFetchRequestGroupTopic{}}}
		resp := f(t, conn, v, req)
		require.Empty(t, resp.Topics, "v%d", v)
		if v >= 8 {
			require.Empty(t, resp.Groups[0].Topics)
		}
	}

	// Fetching by an unknown topic id (v10).
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "all", Topics: []kmsg.OffsetFetchRequestGroupTopic{{TopicID: [16]byte{9}, Partitions: []int32{0}}}}}
	fresp := f(t, conn, 10, freq)
	require.Equal(t, errUnknownTopicID, fresp.Groups[0].Topics[0].Partitions[0].ErrorCode)

	// No group id: the error is per partition before v2, top-level from v2,
	// per group from v8.
	for _, v := range []int16{0, 1, 2, 7, 8} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
		req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}}}
		resp := f(t, conn, v, req)
		switch {
		case v < 2:
			require.Equal(t, errInvalidGroupID, resp.Topics[0].Partitions[0].ErrorCode)
		case v < 8:
			require.Equal(t, errInvalidGroupID, resp.ErrorCode)
		default:
			require.Equal(t, errInvalidGroupID, resp.Groups[0].ErrorCode)
		}
	}
}

func TestGroupOffsetDelete(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 2)
	groupCreateTopic(t, b, "u", 1)
	c := groupDial(t, addr)

	del := func(g string, topics map[string][]int32) *kmsg.OffsetDeleteResponse {
		req := kmsg.NewPtrOffsetDeleteRequest()
		req.Group = g
		for _, name := range []string{"t", "u", "nosuch"} {
			ps, ok := topics[name]
			if !ok {
				continue
			}
			rt := kmsg.OffsetDeleteRequestTopic{Topic: name}
			for _, p := range ps {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: p})
			}
			req.Topics = append(req.Topics, rt)
		}
		return groupDo[*kmsg.OffsetDeleteResponse](t, c, 0, req)
	}
	codes := func(resp *kmsg.OffsetDeleteResponse) []string {
		var out []string
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				out = append(out, fmt.Sprintf("%s/%d=%d", t.Topic, p.Partition, p.ErrorCode))
			}
		}
		return out
	}

	require.Equal(t, errGroupIDNotFound, del("nope", map[string][]int32{"t": {0}}).ErrorCode)
	require.Equal(t, errInvalidGroupID, del("", map[string][]int32{"t": {0}}).ErrorCode)

	// A consumer group subscribed to t, with offsets for t and u.
	jr := groupJoin(t, c, 3, groupJoinReq("g", "", "t"))
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 3, groupSyncReq("g", 1, jr.MemberID, nil)).ErrorCode)
	creq := groupCommitReq("g", 1, jr.MemberID, "t", map[int32]int64{0: 1, 1: 2})
	creq.Topics = append(creq.Topics, groupCommitReq("", 0, "", "u", map[int32]int64{0: 3}).Topics...)
	require.Equal(t, []string{"t/0=0", "t/1=0", "u/0=0"}, groupCommitCodes(groupDo[*kmsg.OffsetCommitResponse](t, c, 5, creq)))

	resp := del("g", map[string][]int32{"t": {0}, "u": {0}, "nosuch": {0}})
	require.Equal(t, errNone, resp.ErrorCode)
	require.Equal(t, []string{"t/0=86", "u/0=0", "nosuch/0=3"}, codes(resp))
	got, err := b.Groups().FetchOffsets("g", nil)
	require.NoError(t, err)
	require.Len(t, got, 2, "t's offsets stay, u's went")
	require.NotContains(t, got, group.TopicPartition{Topic: "u", Partition: 0})

	// Once the group is empty, everything may go.
	lreq := kmsg.NewPtrLeaveGroupRequest()
	lreq.Group, lreq.MemberID = "g", jr.MemberID
	require.Equal(t, errNone, groupDo[*kmsg.LeaveGroupResponse](t, c, 0, lreq).ErrorCode)
	resp = del("g", map[string][]int32{"t": {0, 1}})
	require.Equal(t, []string{"t/0=0", "t/1=0"}, codes(resp))
	got, err = b.Groups().FetchOffsets("g", nil)
	require.NoError(t, err)
	require.Empty(t, got)

	// A group with members that is not a consumer group: NON_EMPTY_GROUP.
	jreq := groupJoinReq("connect", "", "t")
	jreq.ProtocolType = "connect"
	jr = groupJoin(t, c, 3, jreq)
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 3, groupSyncReq("connect", 1, jr.MemberID, nil)).ErrorCode)
	require.Equal(t, errNonEmptyGroup, del("connect", map[string][]int32{"t": {0}}).ErrorCode)
}
