package transport

import (
	"github.com/spoolmq/spool"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeLogDirs v0-5 (KIP-113): the broker's data directory is its one
// log directory, with the replicas it holds - each with its size and offset
// lag (spool.ReplicaLog) and never a future replica, for spool moves no
// replica between directories. A request with null topics describes every
// replica; otherwise only the partitions named that this broker holds (the
// others are left out, as Kafka does). v4 adds the file system's total and
// usable bytes, v5 whether the directory is cordoned, which it never is.
// A broker that cannot describe its directory (it is closing) answers
// KAFKA_STORAGE_ERROR for it, Kafka's answer for an offline directory.
func init() { register(kmsg.DescribeLogDirs, 0, 5, describeLogDirs) }

func describeLogDirs(c *conn, req *request, body *kmsg.DescribeLogDirsRequest) (kmsg.Response, error) {
	resp := body.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	rd := kmsg.NewDescribeLogDirsResponseDir()
	ld, err := c.s.b.DescribeLogDir()
	if err != nil {
		rd.ErrorCode, rd.Dir = errKafkaStorageError, c.s.b.Dir()
		resp.Dirs = append(resp.Dirs, rd)
		return resp, nil
	}
	rd.Dir, rd.TotalBytes, rd.UsableBytes = ld.Path, ld.TotalBytes, ld.UsableBytes
	var wanted map[string]map[int32]bool
	if body.Topics != nil {
		wanted = map[string]map[int32]bool{}
		for _, t := range body.Topics {
			if wanted[t.Topic] == nil {
				wanted[t.Topic] = map[int32]bool{}
			}
			for _, p := range t.Partitions {
				wanted[t.Topic][p] = true
			}
		}
	}
	var cur *kmsg.DescribeLogDirsResponseDirTopic
	for _, r := range ld.Replicas { // sorted by topic, then partition
		if wanted != nil && !wanted[r.Topic][r.Partition] {
			continue
		}
		if cur == nil || cur.Topic != r.Topic {
			rd.Topics = append(rd.Topics, kmsg.NewDescribeLogDirsResponseDirTopic())
			cur = &rd.Topics[len(rd.Topics)-1]
			cur.Topic = r.Topic
		}
		cur.Partitions = append(cur.Partitions, logDirPartition(r))
	}
	resp.Dirs = append(resp.Dirs, rd)
	return resp, nil
}

func logDirPartition(r spool.ReplicaLog) kmsg.DescribeLogDirsResponseDirTopicPartition {
	p := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
	p.Partition, p.Size, p.OffsetLag = r.Partition, r.Size, r.OffsetLag
	return p
}
