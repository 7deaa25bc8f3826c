package group

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func consumerCoordinator(t *testing.T, counts map[string]int32, mod ...func(*Options)) (*Coordinator, *fakeClock) {
	return manual(t, append([]func(*Options){func(o *Options) {
		o.PartitionCount = topics(counts)
		o.TopicNames = func() []string {
			var out []string
			for t := range counts {
				out = append(out, t)
			}
			return out
		}
	}}, mod...)...)
}

func joinConsumer(t *testing.T, c *Coordinator, group, id string, subs ...string) ConsumerHeartbeatResponse {
	t.Helper()
	resp, err := c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: group, MemberID: id, SubscribedTopics: subs, Owned: map[string][]int32{}})
	require.NoError(t, err)
	return resp
}

// A consumer group and the classic protocol share a group id's offsets
// and take turns: while the consumer group has members classic joins are
// refused, offsets are committed under member epochs; once empty, either
// protocol may take the group.
func TestConsumerGroupBesideClassic(t *testing.T) {
	c, clock := consumerCoordinator(t, map[string]int32{"t": 2})
	a := joinConsumer(t, c, "cg", "a", "t")
	require.Equal(t, int32(1), a.MemberEpoch)
	require.Equal(t, map[string][]int32{"t": {0, 1}}, a.Assignment)
	require.Equal(t, DefaultConsumerHeartbeatInterval, a.HeartbeatInterval)

	stableOfOne(t, c, joinReq("", "t")) // another group id is classic
	jr := joinReq("", "t")
	jr.Group, jr.ProtocolType = "cg", "connect"
	_, err := c.Join(context.Background(), jr)
	require.ErrorIs(t, err, ErrInconsistentProtocol, "a classic member of another protocol type")

	require.Equal(t, []Listing{
		{Group: "cg", ProtocolType: ConsumerProtocolType, State: Stable, Type: "consumer"},
		{Group: "g", ProtocolType: ConsumerProtocolType, State: Stable, Type: "classic"},
	}, c.List())

	// Commits: the member at its epoch; an old epoch for partitions it
	// owns; not a stranger, an admin, or a partition it does not own at
	// an old epoch.
	commit := func(member string, epoch int32, p int32) error {
		_, err := c.CommitOffsets(CommitRequest{Group: "cg", MemberID: member, Generation: epoch,
			Offsets: map[TopicPartition]OffsetAndMetadata{{"t", p}: {Offset: 7}}})
		return err
	}
	require.NoError(t, commit("a", 1, 0))
	require.ErrorIs(t, commit("z", 1, 0), ErrUnknownMemberID)
	require.ErrorIs(t, commit("", -1, 0), ErrUnknownMemberID)
	require.ErrorIs(t, commit("a", 2, 0), ErrStaleMemberEpoch)
	b := joinConsumer(t, c, "cg", "b", "t")
	require.Equal(t, int32(2), b.MemberEpoch)
	resp, err := c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "cg", MemberID: "a", MemberEpoch: 1})
	require.NoError(t, err)
	require.Len(t, resp.Assignment["t"], 1, "a is told to revoke one")
	kept := resp.Assignment["t"][0]
	require.NoError(t, commit("a", 1, kept), "still a's epoch")
	resp, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "cg", MemberID: "a", MemberEpoch: 1, Owned: map[string][]int32{"t": {kept}}})
	require.NoError(t, err)
	require.Equal(t, int32(2), resp.MemberEpoch)
	require.NoError(t, commit("a", 1, kept), "an old epoch for a partition a owns")
	require.ErrorIs(t, commit("a", 1, 1-kept), ErrStaleMemberEpoch, "an old epoch for a partition a gave up")

	got, err := c.FetchOffsets("cg", nil)
	require.NoError(t, err)
	require.Equal(t, int64(7), got[TopicPartition{"t", kept}].Offset)
	require.ErrorIs(t, c.Delete("cg")["cg"], ErrNonEmptyGroup)
	require.ErrorIs(t, c.ResetOffsets("cg", map[TopicPartition]int64{{"t", 0}: 1}), ErrNonEmptyGroup)
	res, err := c.DeleteOffsets("cg", []TopicPartition{{"t", 0}})
	require.NoError(t, err)
	require.ErrorIs(t, res[TopicPartition{"t", 0}], ErrGroupSubscribedToTopic)

	d, err := c.ConsumerDescribe("cg")
	require.NoError(t, err)
	require.Equal(t, int32(2), d.Epoch)
	require.Equal(t, "uniform", d.Assignor)
	require.Len(t, d.Members, 2)
	_, err = c.ConsumerDescribe("g")
	require.ErrorIs(t, err, ErrGroupIDNotFound, "a classic group")

	// The members go silent: removed at the session timeout; the group is
	// empty, keeps its offsets, and a classic member may take it.
	clock.Advance(DefaultConsumerSessionTimeout + time.Second)
	c.Tick(clock.Now())
	d, err = c.ConsumerDescribe("cg")
	require.NoError(t, err)
	require.Equal(t, Empty, d.State)
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "cg", MemberID: "a", MemberEpoch: 2})
	require.ErrorIs(t, err, ErrUnknownMemberID)
	r, err := c.Join(context.Background(), jr)
	require.NoError(t, err)
	require.NotEmpty(t, r.MemberID)
	got, err = c.FetchOffsets("cg", nil)
	require.NoError(t, err)
	require.Equal(t, int64(7), got[TopicPartition{"t", kept}].Offset, "offsets are shared")
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "cg", MemberID: "c", SubscribedTopics: []string{"t"}, Owned: map[string][]int32{}})
	require.ErrorIs(t, err, ErrGroupIDNotFound, "the group has classic members")
}

// Static members: one leaving with epoch -2 keeps its partitions until it
// comes back under a new member id, which takes them over without a
// rebalance; its instance id is not free before.
func TestConsumerGroupStaticMembers(t *testing.T) {
	c, clock := consumerCoordinator(t, map[string]int32{"t": 4})
	join := func(id, instance string) (ConsumerHeartbeatResponse, error) {
		return c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: id, InstanceID: instance,
			SubscribedTopics: []string{"t"}, Owned: map[string][]int32{}})
	}
	a, err := join("a1", "A")
	require.NoError(t, err)
	_, err = join("a2", "A")
	require.ErrorIs(t, err, ErrUnreleasedInstanceID)
	resp, err := c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "a1", InstanceID: "A", MemberEpoch: -2})
	require.NoError(t, err)
	require.Equal(t, int32(-2), resp.MemberEpoch)
	d, err := c.ConsumerDescribe("g")
	require.NoError(t, err)
	epoch := d.Epoch
	require.Len(t, d.Members, 1, "kept while away")

	clock.Advance(10 * time.Second)
	c.Tick(clock.Now())
	back, err := join("a2", "A")
	require.NoError(t, err)
	require.Equal(t, a.MemberEpoch, back.MemberEpoch)
	require.Equal(t, a.Assignment, back.Assignment, "the partitions it had")
	d, err = c.ConsumerDescribe("g")
	require.NoError(t, err)
	require.Equal(t, epoch, d.Epoch, "no rebalance")
	require.Equal(t, "a2", d.Members[0].MemberID)

	// Away past the session timeout: gone, partitions free.
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "a2", InstanceID: "A", MemberEpoch: -2})
	require.NoError(t, err)
	clock.Advance(DefaultConsumerSessionTimeout + time.Second)
	c.Tick(clock.Now())
	b := joinConsumer(t, c, "g", "b", "t")
	require.Equal(t, map[string][]int32{"t": {0, 1, 2, 3}}, b.Assignment)
}

// A regular expression subscription matches whole topic names, and picks
// up a topic created later; a bad one is refused.
func TestConsumerGroupRegexSubscription(t *testing.T) {
	counts := map[string]int32{"orders": 2, "orders-eu": 1, "payments": 1}
	c, _ := consumerCoordinator(t, counts)
	re := "orders.*"
	resp, err := c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "a", SubscribedRegex: &re, Owned: map[string][]int32{}})
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"orders": {0, 1}, "orders-eu": {0}}, resp.Assignment)

	counts["orders-us"] = 1
	resp, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "a", MemberEpoch: resp.MemberEpoch})
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"orders": {0, 1}, "orders-eu": {0}, "orders-us": {0}}, resp.Assignment)

	bad := "orders("
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "b", SubscribedRegex: &bad, Owned: map[string][]int32{}})
	require.ErrorIs(t, err, ErrInvalidRegularExpression)
	d, err := c.ConsumerDescribe("g")
	require.NoError(t, err)
	require.Len(t, d.Members, 1, "the refused join changed nothing")
	require.Equal(t, "orders.*", d.Members[0].SubscribedRegex)
}

// The group size cap, a server-made member id (v0) and the wrong
// coordinator.
func TestConsumerGroupLimits(t *testing.T) {
	c, _ := consumerCoordinator(t, map[string]int32{"t": 1}, func(o *Options) { o.MaxGroupSize = 1 })
	resp := joinConsumer(t, c, "g", "", "t")
	require.NotEmpty(t, resp.MemberID, "the coordinator chose an id")
	_, err := c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "g", MemberID: "b", SubscribedTopics: []string{"t"}, Owned: map[string][]int32{}})
	require.ErrorIs(t, err, ErrGroupMaxSizeReached)
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "", MemberID: "b"})
	require.ErrorIs(t, err, ErrInvalidGroupID)
	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "nope", MemberID: "b", MemberEpoch: 3})
	require.ErrorIs(t, err, ErrUnknownMemberID)
	require.Len(t, c.List(), 1, "the refusals created no group")
}

// Share groups: every member gets every partition of its subscription;
// epochs move with the group; a stale epoch is fenced; leaving and
// timing out are reported so that records are released; a share group
// and the other protocols do not mix.
func TestShareGroupMembership(t *testing.T) {
	var gone []string
	c, clock := consumerCoordinator(t, map[string]int32{"t": 2, "u": 1}, func(o *Options) {
		o.ShareMemberGone = func(g, m string) { gone = append(gone, g+"/"+m) }
	})
	join := func(id string, subs ...string) ShareHeartbeatResponse {
		t.Helper()
		resp, err := c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: id, SubscribedTopicNames: subs})
		require.NoError(t, err)
		return resp
	}
	a := join("a", "t")
	require.Equal(t, map[string][]int32{"t": {0, 1}}, a.Assignment)
	b := join("b", "t", "u")
	require.Equal(t, map[string][]int32{"t": {0, 1}, "u": {0}}, b.Assignment, "every member gets every partition")
	resp, err := c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "a", MemberEpoch: a.MemberEpoch})
	require.NoError(t, err)
	require.Nil(t, resp.Assignment, "unchanged")
	_, err = c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "a", MemberEpoch: a.MemberEpoch + 5})
	require.ErrorIs(t, err, ErrFencedMemberEpoch)
	_, err = c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "z", MemberEpoch: 3})
	require.ErrorIs(t, err, ErrUnknownMemberID)
	_, err = c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "c"})
	require.ErrorIs(t, err, ErrInvalidHeartbeat, "a join without a subscription")
	// A subscription change re-sends the assignment at a new epoch.
	resp, err = c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "a", MemberEpoch: a.MemberEpoch, SubscribedTopicNames: []string{"u"}})
	require.NoError(t, err)
	require.Equal(t, map[string][]int32{"u": {0}}, resp.Assignment)
	require.Greater(t, resp.MemberEpoch, a.MemberEpoch)

	_, err = c.ConsumerHeartbeat(ConsumerHeartbeatRequest{Group: "s", MemberID: "x", SubscribedTopics: []string{"t"}, Owned: map[string][]int32{}})
	require.ErrorIs(t, err, ErrGroupIDNotFound, "a share group is not a consumer group")
	jr := joinReq("", "t")
	jr.Group = "s"
	_, err = c.Join(context.Background(), jr)
	require.ErrorIs(t, err, ErrInconsistentProtocol)
	require.ErrorIs(t, c.Delete("s")["s"], ErrNonEmptyGroup)
	require.Contains(t, c.List(), Listing{Group: "s", ProtocolType: "share", State: Stable, Type: "share"})

	_, err = c.ShareHeartbeat(ShareHeartbeatRequest{Group: "s", MemberID: "b", MemberEpoch: -1})
	require.NoError(t, err)
	require.Equal(t, []string{"s/b"}, gone)
	clock.Advance(DefaultConsumerSessionTimeout + time.Second)
	c.Tick(clock.Now())
	require.Equal(t, []string{"s/b", "s/a"}, gone)
	d, err := c.ShareDescribe("s")
	require.NoError(t, err)
	require.Equal(t, Empty, d.State)
	_, err = c.ShareDescribe("cg")
	require.ErrorIs(t, err, ErrGroupIDNotFound)
}
