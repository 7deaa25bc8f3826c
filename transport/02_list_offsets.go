package transport

import (
	"github.com/spoolmq/spool/acl"
	"math"
	"sort"
	"time"

	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets v0 to v11.
//
// v0 is Kafka's legacy "offsets before" lookup (a list of segment base
// offsets, MaxNumOffsets of them), answered as Kafka 2.x did from the
// segment files' names and modification times. v1+ answer one offset per
// partition: -2 the log start offset, -1 the high watermark (v2+ at
// isolation level 1, read_committed: the last stable offset), v7+ -3 the record with the greatest timestamp (KIP-734),
// v8+ -4 the earliest local offset (= the log start: nothing is tiered),
// v9+ -5 the latest tiered offset and v11+ -6 the earliest pending upload
// (none without tiered storage: -1), and a timestamp the first record at or
// after it. v4+ carry leader epochs (KIP-320), v6+ are flexible, v10 adds
// a timeout that, as in Kafka, changes nothing here.
func init() { register(kmsg.ListOffsets, 0, 11, listOffsets) }

// The special timestamps of ListOffsets and the first version that has each
// (Kafka's ReplicaManager.timestampMinSupportedVersion).
const (
	listLatest                = -1
	listEarliest              = -2
	listMaxTimestamp          = -3
	listEarliestLocal         = -4
	listLatestTiered          = -5
	listEarliestPendingUpload = -6
)

var listOffsetsSince = map[int64]int16{
	listLatest: 1, listEarliest: 1, listMaxTimestamp: 7,
	listEarliestLocal: 8, listLatestTiered: 9, listEarliestPendingUpload: 11,
}

func listOffsets(c *conn, req *request, body *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.ListOffsetsResponse)
	type tp struct {
		topic string
		part  int32
	}
	count := map[tp]int{}
	for ti := range body.Topics {
		for _, rp := range body.Topics[ti].Partitions {
			count[tp{body.Topics[ti].Topic, rp.Partition}]++
		}
	}
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(body.Topics))
	for ti := range body.Topics {
		rt := &body.Topics[ti]
		t := &resp.Topics[ti]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(rt.Partitions))
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			out := &t.Partitions[pi]
			out.Default()
			out.Partition = rp.Partition
			if req.version == 0 {
				out.OldStyleOffsets = []int64{}
			}
			if !c.can(acl.OpDescribe, acl.ResourceTopic, rt.Topic) {
				out.ErrorCode = errTopicAuthorizationFailed
				continue
			}
			if count[tp{rt.Topic, rp.Partition}] > 1 {
				out.ErrorCode = errInvalidRequest // Kafka: a partition asked twice
				continue
			}
			if req.version >= 1 && rp.Timestamp < 0 {
				if since, ok := listOffsetsSince[rp.Timestamp]; !ok || req.version < since {
					out.ErrorCode = errUnsupportedVersion
					continue
				}
			}
			p, err := c.s.b.LeaderPartition(rt.Topic, rp.Partition, -1)
			if err != nil {
				out.ErrorCode = fetchErrorCode(err)
				continue
			}
			if req.version >= 4 {
				if out.ErrorCode = checkLeaderEpoch(p, rp.CurrentLeaderEpoch); out.ErrorCode != errNone {
					continue
				}
			}
			if req.version == 0 {
				offs, err := legacyOffsetsBefore(p, rp.Timestamp, rp.MaxNumOffsets, body.ReplicaID == -1)
				if err != nil {
					out.ErrorCode = fetchErrorCode(err)
					continue
				}
				out.OldStyleOffsets = offs
				continue
			}
			ts, off, epoch, err := offsetFor(p, rp.Timestamp, body.ReplicaID == -1, req.version >= 2 && body.IsolationLevel == 1)
			if err != nil {
				out.ErrorCode = fetchErrorCode(err)
				continue
			}
			out.Timestamp, out.Offset, out.LeaderEpoch = ts, off, epoch
		}
	}
	return resp, nil
}

// offsetFor answers one partition of ListOffsets v1+: the timestamp, offset
// and leader epoch Kafka's Partition.fetchOffsetForTimestamp gives. A
// consumer sees up to the high watermark, or at read_committed up to the
// last stable offset; a replica up to the log end. A lookup that finds
// nothing below that gets -1, -1, -1.
func offsetFor(p *partition.Partition, ts int64, consumer, readCommitted bool) (int64, int64, int32, error) {
	lastFetchable := p.EndOffset()
	switch {
	case consumer && readCommitted:
		lso, err := p.StableOffset()
		if err != nil {
			return -1, -1, -1, err // a damaged log: its transactions cannot be known
		}
		lastFetchable = lso
	case consumer:
		lastFetchable = p.HighWatermark()
	}
	switch ts {
	case listEarliest, listEarliestLocal:
		start := p.StartOffset()
		epoch := int32(-1)
		// The first cached epoch holds the log start offset, unless the
		// cache lost track of it.
		if e := p.Epochs().Entries(); len(e) > 0 && e[0].StartOffset <= start {
			epoch = e[0].Epoch
		}
		return -1, start, epoch, nil
	case listLatest:
		return -1, lastFetchable, p.LeaderEpoch(), nil
	case listLatestTiered, listEarliestPendingUpload:
		return -1, -1, -1, nil // nothing is in remote storage
	}
	var (
		off   int64
		found bool
		err   error
	)
	if ts == listMaxTimestamp {
		off, found, err = maxTimestampOffset(p)
	} else {
		off, found, err = p.OffsetForTime(record.TimeOf(ts))
	}
	if err != nil || !found || off >= lastFetchable {
		return -1, -1, -1, err
	}
	return recordTimestamp(p, off)
}

// recordTimestamp returns the timestamp of the record at off and the
// leader epoch of its batch, as Kafka reports a timestamp lookup.
func recordTimestamp(p *partition.Partition, off int64) (int64, int64, int32, error) {
	buf, err := p.Log().Read(off, 1)
	if err != nil {
		return -1, -1, -1, err
	}
	b, _, err := record.ParseBatch(buf)
	if err != nil {
		return -1, -1, -1, err
	}
	epoch := b.PartitionLeaderEpoch()
	if epoch < 0 {
		epoch = -1
	}
	var it record.Iterator
	it.Reset(b)
	for it.Next() {
		if r := it.Record(); r.Offset == off {
			ts := int64(-1)
			if !r.Timestamp.IsZero() {
				ts = r.Timestamp.UnixMilli()
			}
			return ts, off, epoch, nil
		}
	}
	if err := it.Err(); err != nil {
		return -1, -1, -1, err
	}
	return -1, -1, -1, nil // compacted away between the two reads
}

// maxTimestampOffset finds the first record (in log order) that has the
// greatest timestamp in the committed log, as Kafka's MAX_TIMESTAMP
// lookup (KIP-734). The log answers "first record at or after t"
// (OffsetForTime), so the greatest timestamp is the largest t that finds
// one: guessed from the last batch (usually right: the test is two lookups),
// then galloped and bisected.
func maxTimestampOffset(p *partition.Partition) (int64, bool, error) {
	find := func(t int64) (int64, bool, error) { return p.OffsetForTime(record.TimeOf(t)) }
	lo := int64(0)
	off, found, err := find(lo)
	if err != nil || !found {
		return -1, false, err
	}
	if hw := p.HighWatermark(); hw > p.StartOffset() {
		if buf, err := p.Log().Read(hw-1, 1); err == nil {
			if b, _, err := record.ParseBatch(buf); err == nil && b.MaxTimestamp() > lo {
				o, ok, err := find(b.MaxTimestamp())
				if err != nil {
					return -1, false, err
				}
				if ok {
					lo, off = b.MaxTimestamp(), o
				}
			}
		}
	}
	// lo finds a record (at off); look for an hi that does not.
	hi := int64(-1)
	for step := int64(1); hi < 0; step *= 2 {
		t := lo + step
		if t < lo || step > math.MaxInt64/2 {
			t = math.MaxInt64
		}
		o, ok, err := find(t)
		if err != nil {
			return -1, false, err
		}
		if !ok {
			hi = t
			break
		}
		lo, off = t, o
		if t == math.MaxInt64 {
			return off, true, nil
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		o, ok, err := find(mid)
		if err != nil {
			return -1, false, err
		}
		if ok {
			lo, off = mid, o
		} else {
			hi = mid
		}
	}
	return off, true, nil
}

// legacyOffsetsBefore answers ListOffsets v0 as Kafka's
// Log.legacyFetchOffsetsBefore did: the partition's segments as (base
// offset, file modification time) pairs, plus (log end offset, now) when
// the last segment holds data; -1 starts from the newest pair, -2 from the
// oldest, a time from the newest pair not newer than it; then up to
// maxNumOffsets offsets from there towards the oldest, in descending order.
// A consumer is shown nothing above the high watermark (which takes the
// place of the higher offsets).
func legacyOffsetsBefore(p *partition.Partition, ts int64, maxNumOffsets int32, consumer bool) ([]int64, error) {
	type point struct{ offset, mtime int64 }
	start := p.StartOffset()
	var points []point
	var lastSize int64
	for _, seg := range p.Log().Segments() {
		points = append(points, point{max(seg.BaseOffset, start), seg.ModTime.UnixMilli()})
		lastSize = seg.Size
	}
	sort.SliceStable(points, func(i, j int) bool { return points[i].offset < points[j].offset })
	if len(points) == 0 {
		return []int64{}, nil
	}
	if lastSize > 0 {
		points = append(points, point{p.EndOffset(), time.Now().UnixMilli()})
	}
	i := len(points) - 1
	switch ts {
	case listLatest:
	case listEarliest:
		i = 0
	default:
		for i >= 0 && points[i].mtime > ts {
			i--
		}
	}
	n := min(int(max(maxNumOffsets, 0)), i+1)
	out := make([]int64, 0, n+1)
	for j := 0; j < n; j++ {
		out = append(out, points[i-j].offset)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] > out[b] })
	if consumer {
		hw := p.HighWatermark()
		k := 0
		for k < len(out) && out[k] > hw {
			k++
		}
		if k > 0 {
			out = append([]int64{hw}, out[k:]...)
		}
	}
	return out, nil
}
