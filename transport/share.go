package transport

import (
	"context"
	"errors"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/share"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Share groups over the Kafka protocol (KIP-932): ShareGroupHeartbeat
// and ShareGroupDescribe at the group coordinator; ShareFetch and
// ShareAcknowledge at the partitions' leader (a standalone node is both);
// DescribeShareGroupOffsets, AlterShareGroupOffsets and
// DeleteShareGroupOffsets; the group config share.auto.offset.reset
// (IncrementalAlterConfigs on resource type GROUP).
//
// A share session (KIP-932's, like a fetch session) is keyed by (group,
// member) and belongs to its connection: epoch 0 opens it with the
// partitions named, each later request carries the next epoch and adds or
// forgets partitions, -1 closes it. A session's fetches acquire from all
// its partitions. When a session closes - epoch -1, or its connection
// goes - the records its member holds are released at once, rather than
// when their locks expire.

// Share error codes (Kafka's Errors.java).
const (
	errInvalidRecordState        int16 = 121
	errShareSessionNotFound      int16 = 122
	errInvalidShareSessionEpoch  int16 = 123
	errShareSessionLimitReached  int16 = 133
	maxShareSessionsPerConn            = 1000
	shareAutoOffsetReset               = "share.auto.offset.reset"
	defaultShareFetchMaxRecords  int32 = 500
	shareAcknowledgeFinalEpoch   int32 = -1
	shareAcknowledgeInitialEpoch int32 = 0
)

type shareSessionKey struct{ group, member string }

// shareSession is a share session's epoch and partitions, in the order
// they were added.
type shareSession struct {
	epoch int32
	parts []spool.TopicPartition
}

// shareErrorCode maps share's errors, then the rest.
func shareErrorCode(err error) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, share.ErrInvalidRecordState):
		return errInvalidRecordState
	case errors.Is(err, share.ErrInvalidRequest):
		return errInvalidRequest
	}
	return errorCode(err)
}

// releaseShares ends the connection's share sessions: their members'
// records go back to the groups. Called when the connection closes.
func (c *conn) releaseShares() {
	for k := range c.shares {
		if err := c.s.b.ShareReleaseMember(k.group, k.member); err != nil {
			c.s.logger.Warn("releasing a share session's records", "group", k.group, "member", k.member, "err", err)
		}
	}
	c.shares = nil
}

// shareSessionFor validates a request's session epoch against the
// connection's sessions and applies it: 0 opens a session (replacing one
// of the same member), -1 closes it (after the request is served; closing
// is reported), else the epoch must follow the session's.
func (c *conn) shareSessionFor(k shareSessionKey, epoch int32) (*shareSession, int16) {
	s := c.shares[k]
	switch {
	case epoch == 0:
		if s == nil && len(c.shares) >= maxShareSessionsPerConn {
			return nil, errShareSessionLimitReached
		}
		s = &shareSession{}
		if c.shares == nil {
			c.shares = map[shareSessionKey]*shareSession{}
		}
		c.shares[k] = s
		return s, errNone
	case s == nil:
		return nil, errShareSessionNotFound
	case epoch == -1:
		return s, errNone
	case epoch != s.epoch+1:
		return nil, errInvalidShareSessionEpoch
	}
	s.epoch = epoch
	return s, errNone
}

// closeShareSession ends a session on epoch -1: its member's records are
// released.
func (c *conn) closeShareSession(k shareSessionKey) {
	delete(c.shares, k)
	if err := c.s.b.ShareReleaseMember(k.group, k.member); err != nil {
		c.s.logger.Warn("releasing a share session's records", "group", k.group, "member", k.member, "err", err)
	}
}

// ackBatches converts a partition's acknowledgement batches.
func ackBatches[T any](in []T, get func(T) (int64, int64, []int8)) []share.AckBatch {
	out := make([]share.AckBatch, 0, len(in))
	for _, b := range in {
		first, last, types := get(b)
		ab := share.AckBatch{First: first, Last: last, Types: make([]share.AckType, len(types))}
		for i, t := range types {
			ab.Types[i] = share.AckType(t)
		}
		out = append(out, ab)
	}
	return out
}

// acquiredRanges turns acquired records into AcquiredRecords ranges: runs
// of consecutive offsets with one delivery count.
func acquiredRanges(ds []share.Delivery) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
	var out []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, d := range ds {
		if n := len(out); n > 0 && out[n-1].LastOffset == d.Offset-1 && int(out[n-1].DeliveryCount) == d.DeliveryCount {
			out[n-1].LastOffset = d.Offset
			continue
		}
		r := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
		r.FirstOffset, r.LastOffset, r.DeliveryCount = d.Offset, d.Offset, int16(d.DeliveryCount)
		out = append(out, r)
	}
	return out
}

// startAtLatest is the group's share.auto.offset.reset.
func (c *conn) startAtLatest(group string) bool {
	return c.s.b.ShareGroupConfig(group).AutoOffsetReset != "earliest"
}

// shareWaitContext is the context a ShareFetch waits under: ended when
// the server stops too.
func (c *conn) shareWaitContext() (context.Context, func()) { return c.groupWaitContext() }
