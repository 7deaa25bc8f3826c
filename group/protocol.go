package group

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
)

// This file is the consumer protocol: the bytes consumers put in JoinGroup
// (their Subscription, as protocol metadata) and the leader puts in
// SyncGroup (each member's Assignment). The layout is Kafka's
// ConsumerProtocolSubscription and ConsumerProtocolAssignment, big-endian,
// non-flexible (no tagged fields):
//
//	Subscription                          Assignment
//	  int16    version                      int16    version
//	  []string topics                       []TopicPartitions assigned
//	  bytes    user data (nullable)         bytes    user data (nullable)
//	  []TopicPartitions owned   (v1+)
//	  int32    generation id    (v2+)
//	  string   rack id (nullable, v3+)
//
//	TopicPartitions: string topic, []int32 partitions
//	string: int16 length (-1 = null), bytes. bytes: int32 length (-1 = null).
//	array:  int32 count, then the elements.
//
// As Kafka does, a decoder reads a version newer than it knows with the
// newest layout it knows and ignores bytes after the last field it knows:
// later versions only ever append fields.

// Highest versions of the consumer protocol this package writes in full.
const (
	SubscriptionVersion = 3
	AssignmentVersion   = 3
)

// Subscription is a consumer's protocol metadata in JoinGroup.
type Subscription struct {
	Version int16
	// Topics are the topics the member wants to consume.
	Topics []string
	// UserData is the assignor's; nil is encoded as null.
	UserData []byte
	// OwnedPartitions are the partitions the member holds (v1+, KIP-429).
	OwnedPartitions []TopicPartition
	// GenerationID is the generation in which the member got them (v2+);
	// -1 if none.
	GenerationID int32
	// RackID is the member's rack (client.rack, v3+, KIP-881); "" is
	// encoded as null.
	RackID string
}

// Assignment is a member's assignment in SyncGroup.
type Assignment struct {
	Version int16
	// Partitions maps topics to the member's partitions of them.
	Partitions map[string][]int32
	// UserData is the assignor's; nil is encoded as null.
	UserData []byte
}

// EncodeSubscription encodes s in Kafka's layout for s.Version (fields of
// versions above 3 do not exist here). Owned partitions are grouped by
// topic, topics in name order.
func EncodeSubscription(s Subscription) []byte {
	var w writer
	w.int16(s.Version)
	w.int32(int32(len(s.Topics)))
	for _, t := range s.Topics {
		w.string(t)
	}
	w.nullableBytes(s.UserData)
	if s.Version >= 1 {
		w.topicPartitions(groupByTopic(s.OwnedPartitions))
	}
	if s.Version >= 2 {
		w.int32(s.GenerationID)
	}
	if s.Version >= 3 {
		w.nullableString(s.RackID)
	}
	return w.b
}

// DecodeSubscription decodes a Subscription. Malformed input gets an error
// wrapping ErrMalformedMetadata.
func DecodeSubscription(b []byte) (Subscription, error) {
	r := reader{b: b}
	s := Subscription{Version: r.int16(), GenerationID: -1}
	if r.err == nil && s.Version < 0 {
		r.fail("version %d", s.Version)
	}
	n := r.arrayLen(2)
	for i := 0; i < n && r.err == nil; i++ {
		s.Topics = append(s.Topics, r.string())
	}
	s.UserData = r.nullableBytes()
	if s.Version >= 1 {
		for _, tps := range r.topicPartitions() {
			for _, p := range tps.partitions {
				s.OwnedPartitions = append(s.OwnedPartitions, TopicPartition{Topic: tps.topic, Partition: p})
			}
		}
	}
	if s.Version >= 2 {
		s.GenerationID = r.int32()
	}
	if s.Version >= 3 {
		s.RackID = r.nullableString()
	}
	if r.err != nil {
		return Subscription{}, fmt.Errorf("%w: subscription: %w", ErrMalformedMetadata, r.err)
	}
	return s, nil
}

// EncodeAssignment encodes a in Kafka's layout, topics in name order.
func EncodeAssignment(a Assignment) []byte {
	var w writer
	w.int16(a.Version)
	tps := make([]topicPartitions, 0, len(a.Partitions))
	for _, t := range slices.Sorted(maps.Keys(a.Partitions)) {
		tps = append(tps, topicPartitions{topic: t, partitions: a.Partitions[t]})
	}
	w.topicPartitions(tps)
	w.nullableBytes(a.UserData)
	return w.b
}

// DecodeAssignment decodes an Assignment. Malformed input gets an error
// wrapping ErrMalformedMetadata. Empty input is an empty assignment: it is
// what the coordinator gives a member the leader assigned nothing.
func DecodeAssignment(b []byte) (Assignment, error) {
	if len(b) == 0 {
		return Assignment{Partitions: map[string][]int32{}}, nil
	}
	r := reader{b: b}
	a := Assignment{Version: r.int16(), Partitions: map[string][]int32{}}
	if r.err == nil && a.Version < 0 {
		r.fail("version %d", a.Version)
	}
	for _, tps := range r.topicPartitions() {
		a.Partitions[tps.topic] = append(a.Partitions[tps.topic], tps.partitions...)
	}
	a.UserData = r.nullableBytes()
	if r.err != nil {
		return Assignment{}, fmt.Errorf("%w: assignment: %w", ErrMalformedMetadata, r.err)
	}
	return a, nil
}

type topicPartitions struct {
	topic      string
	partitions []int32
}

// groupByTopic groups partitions by topic, topics in name order, partitions
// in their given order.
func groupByTopic(tps []TopicPartition) []topicPartitions {
	byTopic := make(map[string][]int32)
	for _, tp := range tps {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	out := make([]topicPartitions, 0, len(byTopic))
	for _, t := range slices.Sorted(maps.Keys(byTopic)) {
		out = append(out, topicPartitions{topic: t, partitions: byTopic[t]})
	}
	return out
}

type writer struct{ b []byte }

func (w *writer) int16(v int16) { w.b = binary.BigEndian.AppendUint16(w.b, uint16(v)) }
func (w *writer) int32(v int32) { w.b = binary.BigEndian.AppendUint32(w.b, uint32(v)) }

func (w *writer) string(s string) {
	s = s[:min(len(s), math.MaxInt16)]
	w.int16(int16(len(s)))
	w.b = append(w.b, s...)
}

func (w *writer) nullableString(s string) {
	if s == "" {
		w.int16(-1)
		return
	}
	w.string(s)
}

func (w *writer) nullableBytes(b []byte) {
	if b == nil {
		w.int32(-1)
		return
	}
	w.int32(int32(len(b)))
	w.b = append(w.b, b...)
}

func (w *writer) topicPartitions(tps []topicPartitions) {
	w.int32(int32(len(tps)))
	for _, tp := range tps {
		w.string(tp.topic)
		w.int32(int32(len(tp.partitions)))
		for _, p := range tp.partitions {
			w.int32(p)
		}
	}
}

// reader decodes with bounds checks: after the first error every read
// returns a zero value and the error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail("%d bytes needed, %d left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

// arrayLen reads a non-nullable array's count; each element takes at least
// minSize bytes, which bounds a plausible count by what is left.
func (r *reader) arrayLen(minSize int) int {
	n := r.int32()
	if r.err != nil {
		return 0
	}
	if n < 0 || int64(n)*int64(minSize) > int64(len(r.b)) {
		r.fail("array of %d elements in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) string() string {
	n := r.int16()
	if r.err == nil && n < 0 {
		r.fail("null string")
	}
	return string(r.take(int(n)))
}

func (r *reader) nullableString() string {
	n := r.int16()
	if n < 0 {
		return ""
	}
	return string(r.take(int(n)))
}

func (r *reader) nullableBytes() []byte {
	n := r.int32()
	if r.err != nil || n < 0 {
		return nil
	}
	b := r.take(int(n))
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (r *reader) topicPartitions() []topicPartitions {
	n := r.arrayLen(6)
	out := make([]topicPartitions, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		t := topicPartitions{topic: r.string()}
		m := r.arrayLen(4)
		t.partitions = make([]int32, 0, m)
		for j := 0; j < m && r.err == nil; j++ {
			t.partitions = append(t.partitions, r.int32())
		}
		out = append(out, t)
	}
	return out
}
