package group

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func sampleSubscription(version int16) Subscription {
	s := Subscription{
		Version:      version,
		Topics:       []string{"orders", "payments"},
		UserData:     []byte{1, 2, 3},
		GenerationID: -1,
	}
	if version >= 1 {
		s.OwnedPartitions = []TopicPartition{{"orders", 0}, {"orders", 4}, {"payments", 2}}
	}
	if version >= 2 {
		s.GenerationID = 7
	}
	if version >= 3 {
		s.RackID = "rack-a"
	}
	return s
}

func sampleAssignment(version int16) Assignment {
	return Assignment{
		Version:    version,
		Partitions: map[string][]int32{"orders": {0, 4}, "payments": {2}},
		UserData:   []byte("sticky"),
	}
}

func TestSubscriptionRoundTrip(t *testing.T) {
	for v := int16(0); v <= SubscriptionVersion; v++ {
		s := sampleSubscription(v)
		got, err := DecodeSubscription(EncodeSubscription(s))
		require.NoError(t, err)
		require.Equal(t, s, got, "version %d", v)
	}
	// Null and empty user data stay apart; no topics is an empty list.
	for _, ud := range [][]byte{nil, {}} {
		s := Subscription{Version: 1, UserData: ud, GenerationID: -1}
		got, err := DecodeSubscription(EncodeSubscription(s))
		require.NoError(t, err)
		require.Equal(t, ud == nil, got.UserData == nil)
		require.Empty(t, got.Topics)
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	for v := int16(0); v <= AssignmentVersion; v++ {
		a := sampleAssignment(v)
		got, err := DecodeAssignment(EncodeAssignment(a))
		require.NoError(t, err)
		require.Equal(t, a, got, "version %d", v)
	}
	got, err := DecodeAssignment(nil)
	require.NoError(t, err, "an empty assignment from the coordinator")
	require.Empty(t, got.Partitions)
}

// TestSubscriptionLayout pins the bytes of a version 3 subscription.
func TestSubscriptionLayout(t *testing.T) {
	got := EncodeSubscription(Subscription{Version: 3, Topics: []string{"t"}, OwnedPartitions: []TopicPartition{{"t", 5}}, GenerationID: 2, RackID: "r"})
	want := []byte{
		0, 3, // version
		0, 0, 0, 1, 0, 1, 't', // topics
		0xff, 0xff, 0xff, 0xff, // null user data
		0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 1, 0, 0, 0, 5, // owned
		0, 0, 0, 2, // generation
		0, 1, 'r', // rack
	}
	require.Equal(t, want, got)
}

func TestCodecAgainstKmsg(t *testing.T) {
	for v := int16(0); v <= 3; v++ {
		// Ours to kmsg.
		s := sampleSubscription(v)
		var km kmsg.ConsumerMemberMetadata
		require.NoError(t, km.ReadFrom(EncodeSubscription(s)))
		require.Equal(t, v, km.Version)
		require.Equal(t, s.Topics, km.Topics)
		require.Equal(t, s.UserData, km.UserData)
		var owned []TopicPartition
		for _, o := range km.OwnedPartitions {
			for _, p := range o.Partitions {
				owned = append(owned, TopicPartition{o.Topic, p})
			}
		}
		require.Equal(t, s.OwnedPartitions, owned)
		if v >= 2 {
			require.Equal(t, s.GenerationID, km.Generation)
		}
		if v >= 3 {
			require.Equal(t, s.RackID, *km.Rack)
		}

		// kmsg to ours.
		rack := "rack-b"
		km = kmsg.ConsumerMemberMetadata{
			Version: v, Topics: []string{"x", "y"}, UserData: []byte{9},
			OwnedPartitions: []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "y", Partitions: []int32{3, 1}}},
			Generation:      11, Rack: &rack,
		}
		got, err := DecodeSubscription(km.AppendTo(nil))
		require.NoError(t, err)
		want := Subscription{Version: v, Topics: []string{"x", "y"}, UserData: []byte{9}, GenerationID: -1}
		if v >= 1 {
			want.OwnedPartitions = []TopicPartition{{"y", 3}, {"y", 1}}
		}
		if v >= 2 {
			want.GenerationID = 11
		}
		if v >= 3 {
			want.RackID = rack
		}
		require.Equal(t, want, got)

		// Assignments both ways.
		a := sampleAssignment(v)
		var ka kmsg.ConsumerMemberAssignment
		require.NoError(t, ka.ReadFrom(EncodeAssignment(a)))
		require.Equal(t, v, ka.Version)
		require.Equal(t, a.UserData, ka.UserData)
		parts := make(map[string][]int32)
		for _, tp := range ka.Topics {
			parts[tp.Topic] = tp.Partitions
		}
		require.Equal(t, a.Partitions, parts)
		ka = kmsg.ConsumerMemberAssignment{Version: v, Topics: []kmsg.ConsumerMemberAssignmentTopic{
			{Topic: "z", Partitions: []int32{0, 2}}, {Topic: "a", Partitions: []int32{1}},
		}}
		ga, err := DecodeAssignment(ka.AppendTo(nil))
		require.NoError(t, err)
		require.Equal(t, Assignment{Version: v, Partitions: map[string][]int32{"z": {0, 2}, "a": {1}}}, ga)
	}
}

func TestDecodeMalformed(t *testing.T) {
	// Every strict prefix of a valid encoding is malformed.
	for v := int16(0); v <= 3; v++ {
		b := EncodeSubscription(sampleSubscription(v))
		for n := range len(b) {
			_, err := DecodeSubscription(b[:n])
			require.ErrorIs(t, err, ErrMalformedMetadata, "version %d, %d of %d bytes", v, n, len(b))
		}
		b = EncodeAssignment(sampleAssignment(v))
		for n := 1; n < len(b); n++ {
			_, err := DecodeAssignment(b[:n])
			require.ErrorIs(t, err, ErrMalformedMetadata, "version %d, %d of %d bytes", v, n, len(b))
		}
	}
	be := binary.BigEndian
	for name, b := range map[string][]byte{
		"negative version": {0xff, 0xfe, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"null topic":       {0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"negative count":   be.AppendUint32([]byte{0, 0}, 0xfffffff0),
		"huge count":       be.AppendUint32([]byte{0, 0}, 0x7fffffff),
		"huge user data":   append([]byte{0, 0, 0, 0, 0, 0}, 0x7f, 0xff, 0xff, 0xff),
	} {
		_, err := DecodeSubscription(b)
		require.ErrorIs(t, err, ErrMalformedMetadata, name)
		_, err = DecodeAssignment(b)
		require.ErrorIs(t, err, ErrMalformedMetadata, name)
	}
}

// Newer versions parse with the newest layout known, trailing bytes
// ignored, as Kafka's deserializers do.
func TestDecodeNewerVersion(t *testing.T) {
	s := sampleSubscription(3)
	b := EncodeSubscription(s)
	b[1] = 9
	b = append(b, 0xde, 0xad)
	got, err := DecodeSubscription(b)
	require.NoError(t, err)
	s.Version = 9
	require.Equal(t, s, got)

	a := sampleAssignment(3)
	b = EncodeAssignment(a)
	b[1] = 4
	got2, err := DecodeAssignment(append(b, 1, 2, 3))
	require.NoError(t, err)
	a.Version = 4
	require.Equal(t, a, got2)
}

func FuzzDecodeSubscription(f *testing.F) {
	for v := int16(0); v <= 3; v++ {
		f.Add(EncodeSubscription(sampleSubscription(v)))
		km := kmsg.NewConsumerMemberMetadata()
		km.Version = v
		km.Topics = []string{"a"}
		f.Add(km.AppendTo(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSubscription(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedMetadata)
			return
		}
		// What decodes re-encodes to something that decodes the same
		// (owned partitions come back grouped by topic).
		again, err := DecodeSubscription(EncodeSubscription(s))
		require.NoError(t, err)
		slices.SortStableFunc(s.OwnedPartitions, func(a, b TopicPartition) int { return strings.Compare(a.Topic, b.Topic) })
		require.Equal(t, s, again)
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	for v := int16(0); v <= 3; v++ {
		f.Add(EncodeAssignment(sampleAssignment(v)))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 1, 'x', 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAssignment(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedMetadata)
			return
		}
		if len(b) == 0 {
			return
		}
		again, err := DecodeAssignment(EncodeAssignment(a))
		require.NoError(t, err)
		require.Equal(t, a, again)
	})
}
