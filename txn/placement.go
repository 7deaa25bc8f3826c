package txn

import "math"

// StateTopic is Kafka's internal topic of transaction state: compacted, one
// record per transactional id and change (see the package documentation).
const StateTopic = "__transaction_state"

// DefaultStatePartitions is the partition count of StateTopic
// (transaction.state.log.num.partitions).
const DefaultStatePartitions = 50

// PartitionFor returns the StateTopic partition that holds a transactional
// id, and whose leader coordinates it: Kafka's
// Utils.abs(transactionalId.hashCode()) % partitions, so that an id lands
// where Kafka would put it. It returns 0 when partitions is not positive.
func PartitionFor(transactionalID string, partitions int) int32 {
	if partitions <= 0 {
		return 0
	}
	h := javaStringHash(transactionalID)
	if h == math.MinInt32 {
		return 0 // Utils.abs maps MinValue to 0
	}
	if h < 0 {
		h = -h
	}
	return h % int32(min(partitions, math.MaxInt32))
}

// javaStringHash is Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1]
// over the UTF-16 code units of s, in int32 arithmetic that wraps. (Invalid
// UTF-8 counts as U+FFFD per bad byte, as Java's decoder of the request's
// string would make it.)
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xd800+(r>>10))
			h = 31*h + int32(0xdc00+(r&0x3ff))
		} else {
			h = 31*h + int32(r)
		}
	}
	return h
}
