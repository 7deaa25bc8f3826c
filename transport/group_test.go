package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/group"
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/record"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The raw tests here speak to the server over a bare connection, so that
// each request goes out at exactly the version the test names and no client
// logic stands between the test and the wire.

// groupTestOptions keep group timeouts short, and spare the tests (many of
// them commits to __consumer_offsets) an fsync per write: durability is not
// what they test.
var groupTestOptions = spool.Options{GroupMinSessionTimeout: 100 * time.Millisecond, Flush: log.None}

var groupCorrelation atomic.Int32

// groupDial opens a raw connection to the server.
func groupDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// groupDo sends req at version and decodes the answer.
func groupDo[Resp kmsg.Response](t testing.TB, c net.Conn, version int16, req kmsg.Request) Resp {
	t.Helper()
	resp, err := groupRoundTrip(c, version, req, 30*time.Second)
	require.NoError(t, err, "%s v%d", kmsg.NameForKey(req.Key()), version)
	return resp.(Resp)
}

// groupRoundTrip writes req at version with its request header and reads
// and decodes the response, waiting at most timeout. It does not fail the
// test, so goroutines may use it.
func groupRoundTrip(c net.Conn, version int16, req kmsg.Request, timeout time.Duration) (kmsg.Response, error) {
	req.SetVersion(version)
	corr := groupCorrelation.Add(1)
	frame := binary.BigEndian.AppendUint32(nil, 0) // size, set below
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 0xffff) // null client id
	if req.IsFlexible() {
		frame = append(frame, 0) // request header v2: empty tag buffer
	}
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(frame); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	var sz [4]byte
	if _, err := io.ReadFull(c, sz[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	if len(b) < 4 || int32(binary.BigEndian.Uint32(b)) != corr {
		return nil, fmt.Errorf("response to correlation id %d expected", corr)
	}
	b = b[4:]
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if resp.IsFlexible() {
		var err error
		if b, err = skipTags(b); err != nil { // response header v1
			return nil, err
		}
	}
	if err := resp.ReadFrom(b); err != nil {
		return nil, err
	}
	return resp, nil
}

func groupSubscription(topics ...string) []byte {
	return group.EncodeSubscription(group.Subscription{Topics: topics, GenerationID: -1})
}

// groupJoinReq is a consumer's JoinGroup for group g with the range protocol.
func groupJoinReq(g, memberID string, topics ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group = g
	req.MemberID = memberID
	req.SessionTimeoutMillis = 10_000
	req.RebalanceTimeoutMillis = 10_000
	req.ProtocolType = group.ConsumerProtocolType
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: groupSubscription(topics...)}}
	return req
}

// groupJoin joins g as a new member at version v, going through KIP-394's
// second join from v4, and returns the successful response.
func groupJoin(t testing.TB, c net.Conn, v int16, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	t.Helper()
	resp := groupDo[*kmsg.JoinGroupResponse](t, c, v, req)
	if v >= 4 && req.MemberID == "" && req.InstanceID == nil {
		require.Equal(t, errMemberIDRequired, resp.ErrorCode)
		require.NotEmpty(t, resp.MemberID)
		req.MemberID = resp.MemberID
		resp = groupDo[*kmsg.JoinGroupResponse](t, c, v, req)
	}
	require.Equal(t, errNone, resp.ErrorCode, "JoinGroup v%d", v)
	return resp
}

// groupSyncReq is a SyncGroup of a "range" group; the protocol type and name
// are sent from v5.
func groupSyncReq(g string, gen int32, memberID string, assignments map[string][]byte) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = g, gen, memberID
	req.ProtocolType, req.Protocol = kmsg.StringPtr(group.ConsumerProtocolType), kmsg.StringPtr("range")
	for m, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: a})
	}
	return req
}

func groupAssignment(topic string, partitions ...int32) []byte {
	return group.EncodeAssignment(group.Assignment{Partitions: map[string][]int32{topic: partitions}})
}

func groupHeartbeatReq(g string, gen int32, memberID string) *kmsg.HeartbeatRequest {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = g, gen, memberID
	return req
}

func groupCommitReq(g string, gen int32, memberID, topic string, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = g, gen, memberID
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < 100; p++ {
		o, ok := offsets[p]
		if !ok {
			continue
		}
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		rp.Metadata = kmsg.StringPtr(fmt.Sprintf("meta-%d", p))
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// groupCommitCodes lists the error codes of a commit response, partition by
// partition, as "topic/partition=code".
func groupCommitCodes(resp *kmsg.OffsetCommitResponse) []string {
	var out []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, fmt.Sprintf("%s/%d=%d", t.Topic, p.Partition, p.ErrorCode))
		}
	}
	return out
}

func groupCreateTopic(t testing.TB, b *spool.Broker, name string, partitions int32) {
	t.Helper()
	require.NoError(t, b.CreateTopic(context.Background(), name, spool.TopicConfig{Partitions: partitions}))
}

// groupAppend appends n records to every partition of topic, values
// "p<partition>-<i>".
func groupAppend(t testing.TB, b *spool.Broker, topic string, partitions int32, n int) {
	t.Helper()
	for p := range partitions {
		part, err := b.Partition(topic, p)
		require.NoError(t, err)
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i].Value = fmt.Appendf(nil, "p%d-%d", p, part.EndOffset()+int64(i))
		}
		_, err = part.Append(recs...)
		require.NoError(t, err)
	}
}

func TestGroupFindCoordinator(t *testing.T) {
	_, s, addr := testServer(t, groupTestOptions, Options{NodeID: 7})
	c := groupDial(t, addr)
	host, port := s.advertised()
	require.Equal(t, "127.0.0.1", host)

	for v := int16(0); v <= 3; v++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "g"
		resp := groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		require.Equal(t, errNone, resp.ErrorCode, "v%d", v)
		require.Equal(t, int32(7), resp.NodeID)
		require.Equal(t, host, resp.Host)
		require.Equal(t, port, resp.Port)
		if v == 0 {
			continue
		}
		req.CoordinatorType = coordinatorTransaction
		resp = groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		require.Equal(t, errNone, resp.ErrorCode, "v%d: a standalone broker coordinates every transactional id", v)
		require.Equal(t, int32(7), resp.NodeID)
		require.Equal(t, host, resp.Host)
		require.Equal(t, port, resp.Port)
		req.CoordinatorType = 9
		resp = groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		require.Equal(t, errInvalidRequest, resp.ErrorCode, "v%d", v)
	}

	for v := int16(4); v <= 6; v++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKeys = []string{"a", "b"}
		resp := groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		require.Len(t, resp.Coordinators, 2)
		for i, co := range resp.Coordinators {
			require.Equal(t, req.CoordinatorKeys[i], co.Key)
			require.Equal(t, errNone, co.ErrorCode)
			require.Equal(t, int32(7), co.NodeID)
			require.Equal(t, host, co.Host)
			require.Equal(t, port, co.Port)
		}
		req.CoordinatorType = coordinatorTransaction
		resp = groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		for _, co := range resp.Coordinators {
			require.Equal(t, errNone, co.ErrorCode, "v%d", v)
			require.Equal(t, int32(7), co.NodeID)
		}
		// Share groups: a known key type from v6 (but no share
		// coordinator), an invalid one before.
		req.CoordinatorType = coordinatorShare
		resp = groupDo[*kmsg.FindCoordinatorResponse](t, c, v, req)
		want := errInvalidRequest
		if v >= 6 {
			want = errCoordinatorNotAvailable
		}
		require.Equal(t, want, resp.Coordinators[0].ErrorCode, "v%d", v)
	}
}

// A group's whole life - join, sync, heartbeat, commit, describe, leave - at
// every JoinGroup version with the matching versions of the others.
func TestGroupLifecycleEveryVersion(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 2)
	for jv := int16(0); jv <= 8; jv++ {
		t.Run(fmt.Sprintf("JoinGroup v%d", jv), func(t *testing.T) {
			c := groupDial(t, addr)
			g := fmt.Sprintf("life-%d", jv)
			sv, hv, lv, dv := min(jv, 5), min(jv, 4), min(jv, 5), min(jv, 6)

			jr := groupJoin(t, c, jv, groupJoinReq(g, "", "t"))
			me := jr.MemberID
			require.Equal(t, int32(1), jr.Generation)
			require.Equal(t, me, jr.LeaderID)
			require.Equal(t, "range", *jr.Protocol)
			if jv >= 7 {
				require.Equal(t, group.ConsumerProtocolType, *jr.ProtocolType)
			}
			require.Len(t, jr.Members, 1)
			require.Equal(t, me, jr.Members[0].MemberID)

			sr := groupSyncReq(g, 1, me, map[string][]byte{me: groupAssignment("t", 0, 1)})
			sresp := groupDo[*kmsg.SyncGroupResponse](t, c, sv, sr)
			require.Equal(t, errNone, sresp.ErrorCode)
			require.Equal(t, groupAssignment("t", 0, 1), sresp.MemberAssignment)
			if sv >= 5 {
				require.Equal(t, "consumer", *sresp.ProtocolType)
				require.Equal(t, "range", *sresp.Protocol)
			}

			hresp := groupDo[*kmsg.HeartbeatResponse](t, c, hv, groupHeartbeatReq(g, 1, me))
			require.Equal(t, errNone, hresp.ErrorCode)

			cv := min(jv+1, 10)
			if cv < 10 {
				cresp := groupDo[*kmsg.OffsetCommitResponse](t, c, cv, groupCommitReq(g, 1, me, "t", map[int32]int64{0: 5, 1: 6}))
				require.Equal(t, []string{"t/0=0", "t/1=0"}, groupCommitCodes(cresp))
				got, err := b.Groups().FetchOffsets(g, nil)
				require.NoError(t, err)
				require.Equal(t, int64(5), got[group.TopicPartition{Topic: "t", Partition: 0}].Offset)
				require.Equal(t, "meta-1", got[group.TopicPartition{Topic: "t", Partition: 1}].Metadata)
			}

			dreq := kmsg.NewPtrDescribeGroupsRequest()
			dreq.Groups = []string{g}
			dresp := groupDo[*kmsg.DescribeGroupsResponse](t, c, dv, dreq)
			require.Len(t, dresp.Groups, 1)
			dg := dresp.Groups[0]
			require.Equal(t, errNone, dg.ErrorCode)
			require.Equal(t, "Stable", dg.State)
			require.Equal(t, "consumer", dg.ProtocolType)
			require.Equal(t, "range", dg.Protocol)
			require.Len(t, dg.Members, 1)
			require.Equal(t, me, dg.Members[0].MemberID)
			require.Equal(t, "/127.0.0.1", dg.Members[0].ClientHost)
			require.Equal(t, groupAssignment("t", 0, 1), dg.Members[0].MemberAssignment)
			require.Equal(t, groupSubscription("t"), dg.Members[0].ProtocolMetadata)
			if dv >= 3 {
				require.Equal(t, int32(-2147483648), dg.AuthorizedOperations, "not requested")
			}

			lreq := kmsg.NewPtrLeaveGroupRequest()
			lreq.Group = g
			if lv < 3 {
				lreq.MemberID = me
			} else {
				lreq.Members = []kmsg.LeaveGroupRequestMember{{MemberID: me}}
			}
			lresp := groupDo[*kmsg.LeaveGroupResponse](t, c, lv, lreq)
			require.Equal(t, errNone, lresp.ErrorCode)
			if lv >= 3 {
				require.Len(t, lresp.Members, 1)
				require.Equal(t, me, lresp.Members[0].MemberID)
				require.Equal(t, errNone, lresp.Members[0].ErrorCode)
			}
			d, err := b.Groups().Describe(g)
			require.NoError(t, err)
			require.Equal(t, group.Empty, d.State)

			// The member is gone: its requests are refused.
			hresp = groupDo[*kmsg.HeartbeatResponse](t, c, hv, groupHeartbeatReq(g, 1, me))
			require.Equal(t, errUnknownMemberID, hresp.ErrorCode)
			lresp = groupDo[*kmsg.LeaveGroupResponse](t, c, lv, lreq)
			if lv < 3 {
				require.Equal(t, errUnknownMemberID, lresp.ErrorCode)
			} else {
				require.Equal(t, errNone, lresp.ErrorCode)
				require.Equal(t, errUnknownMemberID, lresp.Members[0].ErrorCode)
			}
		})
	}
}

// The refusals a member meets: stale generations, unknown members, bad
// session timeouts and protocols, and KIP-394's member id handshake.
func TestGroupErrors(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 1)
	c := groupDial(t, addr)

	// KIP-394: a v4+ member without an id is given one and must come back
	// with it.
	req := groupJoinReq("g", "", "t")
	resp := groupDo[*kmsg.JoinGroupResponse](t, c, 4, req)
	require.Equal(t, errMemberIDRequired, resp.ErrorCode)
	require.NotEmpty(t, resp.MemberID)
	require.Equal(t, int32(-1), resp.Generation)
	req.MemberID = resp.MemberID
	resp = groupDo[*kmsg.JoinGroupResponse](t, c, 4, req)
	require.Equal(t, errNone, resp.ErrorCode)
	require.Equal(t, req.MemberID, resp.MemberID)
	me := resp.MemberID
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 3, groupSyncReq("g", 1, me, nil)).ErrorCode)

	codes := groupCommitCodes
	// A stale generation.
	cresp := groupDo[*kmsg.OffsetCommitResponse](t, c, 8, groupCommitReq("g", 0, me, "t", map[int32]int64{0: 1}))
	require.Equal(t, []string{"t/0=22"}, codes(cresp), "ILLEGAL_GENERATION")
	require.Equal(t, errIllegalGeneration, groupDo[*kmsg.HeartbeatResponse](t, c, 4, groupHeartbeatReq("g", 2, me)).ErrorCode)
	require.Equal(t, errIllegalGeneration, groupDo[*kmsg.SyncGroupResponse](t, c, 4, groupSyncReq("g", 2, me, nil)).ErrorCode)
	// An unknown member.
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 8, groupCommitReq("g", 1, "nobody", "t", map[int32]int64{0: 1}))
	require.Equal(t, []string{"t/0=25"}, codes(cresp), "UNKNOWN_MEMBER_ID")
	require.Equal(t, errUnknownMemberID, groupDo[*kmsg.HeartbeatResponse](t, c, 0, groupHeartbeatReq("g", 1, "nobody")).ErrorCode)
	require.Equal(t, errUnknownMemberID, groupDo[*kmsg.SyncGroupResponse](t, c, 0, groupSyncReq("g", 1, "nobody", nil)).ErrorCode)
	require.Equal(t, errUnknownMemberID, groupDo[*kmsg.JoinGroupResponse](t, c, 4, groupJoinReq("g", "nobody", "t")).ErrorCode)
	// A simple commit (generation -1, no member) to a group with members.
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 2, groupCommitReq("g", -1, "", "t", map[int32]int64{0: 1}))
	require.Equal(t, []string{"t/0=25"}, codes(cresp))
	// A member of a group that does not exist: ILLEGAL_GENERATION before
	// v9, GROUP_ID_NOT_FOUND from v9.
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 8, groupCommitReq("nope", 3, "m", "t", map[int32]int64{0: 1}))
	require.Equal(t, []string{"t/0=22"}, codes(cresp))
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 9, groupCommitReq("nope", 3, "m", "t", map[int32]int64{0: 1}))
	require.Equal(t, []string{"t/0=69"}, codes(cresp))
	// Unknown topics and partitions are refused before the group is
	// consulted; the rest is committed.
	creq := groupCommitReq("simple", -1, "", "t", map[int32]int64{0: 3, 5: 4})
	creq.Topics = append(creq.Topics, groupCommitReq("", 0, "", "nosuch", map[int32]int64{0: 1}).Topics...)
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 8, creq)
	require.Equal(t, []string{"t/0=0", "t/5=3", "nosuch/0=3"}, codes(cresp))
	// Metadata too long.
	creq = groupCommitReq("simple", -1, "", "t", map[int32]int64{0: 3})
	creq.Topics[0].Partitions[0].Metadata = kmsg.StringPtr(strings.Repeat("x", group.DefaultMaxOffsetMetadataBytes+1))
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 8, creq)
	require.Equal(t, []string{"t/0=12"}, codes(cresp), "OFFSET_METADATA_TOO_LARGE")
	// No group id.
	cresp = groupDo[*kmsg.OffsetCommitResponse](t, c, 8, groupCommitReq("", -1, "", "t", map[int32]int64{0: 3}))
	require.Equal(t, []string{"t/0=24"}, codes(cresp), "INVALID_GROUP_ID")
	require.Equal(t, errInvalidGroupID, groupDo[*kmsg.JoinGroupResponse](t, c, 0, groupJoinReq("", "", "t")).ErrorCode)
	require.Equal(t, errInvalidGroupID, groupDo[*kmsg.HeartbeatResponse](t, c, 0, groupHeartbeatReq("", 1, me)).ErrorCode)

	// Session timeouts out of bounds, protocols that do not match.
	req = groupJoinReq("g2", "", "t")
	req.SessionTimeoutMillis = 10
	require.Equal(t, errInvalidSessionTimeout, groupDo[*kmsg.JoinGroupResponse](t, c, 1, req).ErrorCode)
	req = groupJoinReq("g", "", "t")
	req.ProtocolType = "connect"
	require.Equal(t, errInconsistentGroupProtocol, groupDo[*kmsg.JoinGroupResponse](t, c, 1, req).ErrorCode)
	req = groupJoinReq("g2", "", "t")
	req.Protocols = nil
	require.Equal(t, errInconsistentGroupProtocol, groupDo[*kmsg.JoinGroupResponse](t, c, 1, req).ErrorCode)
	sreq := groupSyncReq("g", 1, me, nil)
	sreq.ProtocolType = kmsg.StringPtr("connect")
	require.Equal(t, errInconsistentGroupProtocol, groupDo[*kmsg.SyncGroupResponse](t, c, 5, sreq).ErrorCode)
	sreq = groupSyncReq("g", 1, me, nil)
	sreq.Protocol = nil // mandatory from v5
	require.Equal(t, errInconsistentGroupProtocol, groupDo[*kmsg.SyncGroupResponse](t, c, 5, sreq).ErrorCode)
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 4, sreq).ErrorCode)

	// The group is untouched by all this.
	d, err := b.Groups().Describe("g")
	require.NoError(t, err)
	require.Equal(t, group.Stable, d.State)
	require.Equal(t, int32(1), d.Generation)
}

func TestGroupDescribeListDelete(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 2)
	c := groupDial(t, addr)

	// An unknown group: Dead without error before v6, GROUP_ID_NOT_FOUND
	// from v6.
	for v := int16(0); v <= 6; v++ {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"nope", ""}
		req.IncludeAuthorizedOperations = true
		resp := groupDo[*kmsg.DescribeGroupsResponse](t, c, v, req)
		require.Len(t, resp.Groups, 2)
		g := resp.Groups[0]
		require.Equal(t, "nope", g.Group)
		require.Equal(t, "Dead", g.State)
		if v >= 6 {
			require.Equal(t, errGroupIDNotFound, g.ErrorCode)
			require.NotNil(t, g.ErrorMessage)
		} else {
			require.Equal(t, errNone, g.ErrorCode, "v%d", v)
		}
		if v >= 3 {
			require.Equal(t, groupOperations, g.AuthorizedOperations)
		}
		require.Equal(t, errInvalidGroupID, resp.Groups[1].ErrorCode)
	}

	// A Stable group with a static member, an Empty group with offsets only.
	jreq := groupJoinReq("busy", "", "t")
	jreq.InstanceID = kmsg.StringPtr("instance-1")
	jr := groupJoin(t, c, 5, jreq)
	me := jr.MemberID
	require.True(t, strings.HasPrefix(me, "instance-1-"))
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 3, groupSyncReq("busy", 1, me, map[string][]byte{me: groupAssignment("t", 0)})).ErrorCode)
	require.Equal(t, []string{"t/0=0"}, groupCommitCodes(groupDo[*kmsg.OffsetCommitResponse](t, c, 1, groupCommitReq("idle", -1, "", "t", map[int32]int64{0: 1}))))

	dreq := kmsg.NewPtrDescribeGroupsRequest()
	dreq.Groups = []string{"busy", "idle"}
	dresp := groupDo[*kmsg.DescribeGroupsResponse](t, c, 4, dreq)
	require.Equal(t, "Stable", dresp.Groups[0].State)
	require.Equal(t, "instance-1", *dresp.Groups[0].Members[0].InstanceID)
	require.Equal(t, "Empty", dresp.Groups[1].State)
	require.Empty(t, dresp.Groups[1].Members)

	for v := int16(0); v <= 5; v++ {
		resp := groupDo[*kmsg.ListGroupsResponse](t, c, v, kmsg.NewPtrListGroupsRequest())
		require.Equal(t, errNone, resp.ErrorCode)
		require.Len(t, resp.Groups, 2)
		require.Equal(t, "busy", resp.Groups[0].Group)
		require.Equal(t, "consumer", resp.Groups[0].ProtocolType)
		require.Equal(t, "idle", resp.Groups[1].Group)
		require.Equal(t, "", resp.Groups[1].ProtocolType)
		if v >= 4 {
			require.Equal(t, "Stable", resp.Groups[0].GroupState)
			require.Equal(t, "Empty", resp.Groups[1].GroupState)
		}
		if v >= 5 {
			require.Equal(t, "classic", resp.Groups[0].GroupType)
		}
	}
	list := func(v int16, states, types []string) []string {
		req := kmsg.NewPtrListGroupsRequest()
		req.StatesFilter, req.TypesFilter = states, types
		var out []string
		for _, g := range groupDo[*kmsg.ListGroupsResponse](t, c, v, req).Groups {
			out = append(out, g.Group)
		}
		return out
	}
	require.Equal(t, []string{"busy"}, list(4, []string{"stable"}, nil))
	require.Equal(t, []string{"idle"}, list(4, []string{"Empty", "Dead"}, nil))
	require.Empty(t, list(4, []string{"PreparingRebalance"}, nil))
	require.Equal(t, []string{"busy", "idle"}, list(5, nil, []string{"Classic"}))
	require.Empty(t, list(5, nil, []string{"consumer"}))

	// DeleteGroups: a group with members stays, unknown ones are reported,
	// an empty one goes with its offsets.
	for v := int16(0); v <= 3; v++ {
		require.Equal(t, []string{"t/0=0"}, groupCommitCodes(groupDo[*kmsg.OffsetCommitResponse](t, c, 1, groupCommitReq("idle", -1, "", "t", map[int32]int64{0: 1}))))
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = []string{"busy", "nope", "idle", "idle", ""}
		resp := groupDo[*kmsg.DeleteGroupsResponse](t, c, v, req)
		var got []string
		for _, g := range resp.Groups {
			got = append(got, fmt.Sprintf("%s=%d", g.Group, g.ErrorCode))
			if v >= 3 && g.ErrorCode != errNone && g.Group != "" {
				require.NotNil(t, g.ErrorMessage)
			}
		}
		require.Equal(t, []string{"busy=68", "nope=69", "idle=0", "=24"}, got, "v%d", v)
		_, err := b.Groups().Describe("idle")
		require.ErrorIs(t, err, group.ErrGroupIDNotFound)
		offsets, err := b.Groups().FetchOffsets("idle", nil)
		require.NoError(t, err)
		require.Empty(t, offsets)
	}
	_, err := b.Groups().Describe("busy")
	require.NoError(t, err)
}

// groupJoinAsync joins on its own connection, for joins that wait for others.
func groupJoinAsync(t testing.TB, addr string, v int16, req *kmsg.JoinGroupRequest) (net.Conn, <-chan *kmsg.JoinGroupResponse) {
	c := groupDial(t, addr)
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := groupRoundTrip(c, v, req, 20*time.Second)
		if err != nil {
			ch <- nil // the connection closed, or no answer
			return
		}
		ch <- resp.(*kmsg.JoinGroupResponse)
	}()
	return c, ch
}

func groupAwaitJoin(t testing.TB, ch <-chan *kmsg.JoinGroupResponse) *kmsg.JoinGroupResponse {
	t.Helper()
	select {
	case resp := <-ch:
		require.NotNil(t, resp, "join failed")
		return resp
	case <-time.After(20 * time.Second):
		t.Fatal("join did not complete")
		return nil
	}
}

// A second member makes the group rebalance: the first learns it from its
// heartbeat and rejoins; the leader assigns nothing to the follower, which
// gets an encoded empty assignment in a consumer group and empty bytes in
// any other.
func TestGroupRebalanceAndEmptyAssignment(t *testing.T) {
	_, _, addr := testServer(t, groupTestOptions, Options{})
	for _, protocolType := range []string{"consumer", "connect"} {
		t.Run(protocolType, func(t *testing.T) {
			g := "g-" + protocolType
			a := groupDial(t, addr)
			areq := groupJoinReq(g, "", "t")
			areq.ProtocolType = protocolType
			ar := groupJoin(t, a, 3, areq)
			require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, a, 3, groupSyncReq(g, 1, ar.MemberID, nil)).ErrorCode)

			breq := groupJoinReq(g, "", "t")
			breq.ProtocolType = protocolType
			bconn, bch := groupJoinAsync(t, addr, 3, breq)
			require.Eventually(t, func() bool {
				return groupDo[*kmsg.HeartbeatResponse](t, a, 3, groupHeartbeatReq(g, 1, ar.MemberID)).ErrorCode == errRebalanceInProgress
			}, 10*time.Second, 20*time.Millisecond)
			areq.MemberID = ar.MemberID
			ar = groupJoin(t, a, 3, areq)
			br := groupAwaitJoin(t, bch)
			require.Equal(t, int32(2), ar.Generation)
			require.Equal(t, int32(2), br.Generation)
			require.Equal(t, ar.MemberID, ar.LeaderID, "the old leader stays leader")
			require.Equal(t, ar.MemberID, br.LeaderID)
			require.Len(t, ar.Members, 2)
			require.Empty(t, br.Members, "only the leader learns the members")

			// The follower syncs first and waits for the leader.
			done := make(chan kmsg.Response, 1)
			bsync := groupSyncReq(g, 2, br.MemberID, nil)
			bsync.ProtocolType = &protocolType
			go func() {
				resp, _ := groupRoundTrip(bconn, 5, bsync, 10*time.Second)
				done <- resp
			}()
			time.Sleep(50 * time.Millisecond)
			async := groupSyncReq(g, 2, ar.MemberID, map[string][]byte{ar.MemberID: groupAssignment("t", 0)})
			async.ProtocolType = &protocolType
			sresp := groupDo[*kmsg.SyncGroupResponse](t, a, 5, async)
			require.Equal(t, errNone, sresp.ErrorCode)
			require.Equal(t, groupAssignment("t", 0), sresp.MemberAssignment)
			resp := <-done
			require.NotNil(t, resp)
			bresp := resp.(*kmsg.SyncGroupResponse)
			require.Equal(t, errNone, bresp.ErrorCode)
			require.Equal(t, protocolType, *bresp.ProtocolType)
			if protocolType == "consumer" {
				require.Equal(t, emptyConsumerAssignment, bresp.MemberAssignment)
				a, err := group.DecodeAssignment(bresp.MemberAssignment)
				require.NoError(t, err)
				require.Empty(t, a.Partitions)
			} else {
				require.Empty(t, bresp.MemberAssignment)
			}
		})
	}
}

// KIP-345: a static member that restarts takes its old place without a
// rebalance; its old member id is fenced. LeaveGroup v3+ removes static
// members by instance id, reporting per member.
func TestGroupStaticMembers(t *testing.T) {
	b, _, addr := testServer(t, groupTestOptions, Options{})
	groupCreateTopic(t, b, "t", 2)
	c := groupDial(t, addr)
	req := groupJoinReq("s", "", "t")
	req.InstanceID = kmsg.StringPtr("a")
	first := groupJoin(t, c, 5, req)
	require.Equal(t, first.MemberID, first.LeaderID)
	require.Len(t, first.Members, 1)
	require.Equal(t, "a", *first.Members[0].InstanceID)
	sreq := groupSyncReq("s", 1, first.MemberID, map[string][]byte{first.MemberID: groupAssignment("t", 0, 1)})
	sreq.InstanceID = kmsg.StringPtr("a")
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, c, 5, sreq).ErrorCode)

	// The restart: same instance id, no member id.
	req = groupJoinReq("s", "", "t")
	req.InstanceID = kmsg.StringPtr("a")
	again := groupJoin(t, c, 8, req)
	require.NotEqual(t, first.MemberID, again.MemberID)
	require.Equal(t, int32(1), again.Generation, "no rebalance")
	require.Equal(t, first.MemberID, again.LeaderID, "the old leader id, as before JoinGroup v9")
	require.Empty(t, again.Members)
	sreq = groupSyncReq("s", 1, again.MemberID, nil)
	sreq.InstanceID = kmsg.StringPtr("a")
	sresp := groupDo[*kmsg.SyncGroupResponse](t, c, 5, sreq)
	require.Equal(t, errNone, sresp.ErrorCode)
	require.Equal(t, groupAssignment("t", 0, 1), sresp.MemberAssignment, "the old assignment")

	// The zombie is fenced.
	hreq := groupHeartbeatReq("s", 1, first.MemberID)
	hreq.InstanceID = kmsg.StringPtr("a")
	require.Equal(t, errFencedInstanceID, groupDo[*kmsg.HeartbeatResponse](t, c, 3, hreq).ErrorCode)
	creq := groupCommitReq("s", 1, first.MemberID, "t", map[int32]int64{0: 1})
	creq.InstanceID = kmsg.StringPtr("a")
	require.Equal(t, []string{"t/0=82"}, groupCommitCodes(groupDo[*kmsg.OffsetCommitResponse](t, c, 7, creq)))

	// Batch leave by instance id, one unknown.
	lreq := kmsg.NewPtrLeaveGroupRequest()
	lreq.Group = "s"
	lreq.Members = []kmsg.LeaveGroupRequestMember{
		{InstanceID: kmsg.StringPtr("a"), Reason: kmsg.StringPtr("test")},
		{InstanceID: kmsg.StringPtr("zzz")},
	}
	lresp := groupDo[*kmsg.LeaveGroupResponse](t, c, 5, lreq)
	require.Equal(t, errNone, lresp.ErrorCode)
	require.Len(t, lresp.Members, 2)
	require.Equal(t, "a", *lresp.Members[0].InstanceID)
	require.Equal(t, errNone, lresp.Members[0].ErrorCode)
	require.Equal(t, "zzz", *lresp.Members[1].InstanceID)
	require.Equal(t, errUnknownMemberID, lresp.Members[1].ErrorCode)
	d, err := b.Groups().Describe("s")
	require.NoError(t, err)
	require.Equal(t, group.Empty, d.State)
}

// A join parked in a rebalance does not hold up Shutdown: the server ends
// it and closes the connection.
func TestGroupShutdownWithParkedJoin(t *testing.T) {
	_, s, addr := testServer(t, groupTestOptions, Options{})
	a := groupDial(t, addr)
	ar := groupJoin(t, a, 3, groupJoinReq("g", "", "t"))
	require.Equal(t, errNone, groupDo[*kmsg.SyncGroupResponse](t, a, 3, groupSyncReq("g", 1, ar.MemberID, nil)).ErrorCode)
	// b waits for a, which will not rejoin within the test.
	_, bch := groupJoinAsync(t, addr, 3, groupJoinReq("g", "", "t"))
	require.Eventually(t, func() bool {
		return groupDo[*kmsg.HeartbeatResponse](t, a, 3, groupHeartbeatReq("g", 1, ar.MemberID)).ErrorCode == errRebalanceInProgress
	}, 10*time.Second, 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, s.Shutdown(ctx))
	require.Less(t, time.Since(start), 2*time.Second)
	select {
	case resp := <-bch:
		require.Nil(t, resp, "the parked join is not answered: its connection closes")
	case <-time.After(5 * time.Second):
		t.Fatal("the parked join's connection stayed open")
	}
}

// FuzzGroupRequests feeds arbitrary bytes to the JoinGroup, SyncGroup and
// OffsetCommit handlers: whatever decodes must be answered (or the
// connection closed) without a panic.
func FuzzGroupRequests(f *testing.F) {
	seed := func(key kmsg.Key, v int16, req kmsg.Request) {
		req.SetVersion(v)
		f.Add(uint8(key), uint8(v), req.AppendTo(nil))
	}
	for v := int16(0); v <= 8; v++ {
		seed(kmsg.JoinGroup, v, groupJoinReq("g", "", "t"))
	}
	for v := int16(0); v <= 5; v++ {
		seed(kmsg.SyncGroup, v, groupSyncReq("g", 1, "m", map[string][]byte{"m": groupAssignment("t", 0)}))
	}
	for v := int16(0); v <= 10; v++ {
		seed(kmsg.OffsetCommit, v, groupCommitReq("g", -1, "", "t", map[int32]int64{0: 1, 1: -5}))
	}
	f.Add(uint8(kmsg.JoinGroup), uint8(4), []byte{})
	f.Add(uint8(kmsg.OffsetCommit), uint8(2), []byte{0xff, 0xff, 0xff, 0xff})

	b, err := spool.Open(f.TempDir(), groupTestOptions)
	require.NoError(f, err)
	f.Cleanup(func() { b.Close() })
	s, err := NewServer(b, Options{})
	require.NoError(f, err)
	require.NoError(f, b.CreateTopic(context.Background(), "t", spool.TopicConfig{Partitions: 2}))
	keys := []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.OffsetCommit}

	f.Fuzz(func(t *testing.T, k, v uint8, body []byte) {
		key := keys[int(k)%len(keys)]
		h := handlers[key.Int16()]
		version := h.min + int16(v)%(h.max-h.min+1)
		req := kmsg.RequestForKey(key.Int16())
		req.SetVersion(version)
		if req.ReadFrom(body) != nil {
			return // the connection closes on a body that does not decode
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		c := &conn{s: s, ctx: ctx, cancel: cancel, remote: "127.0.0.1:9"}
		resp, err := h.serve(c, &request{key: key.Int16(), version: version, clientID: "fuzz", body: req})
		if err == nil {
			require.NotNil(t, resp)
			resp.size(false)
		}
	})
}
