package spool

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
)

// LogDir describes a broker's data directory as Kafka's DescribeLogDirs
// does: one log directory (log.dirs) holding the broker's replicas.
type LogDir struct {
	// Path is the data directory's absolute path.
	Path string
	// TotalBytes is the size of the file system the directory is on, and
	// UsableBytes what an unprivileged process may still write there
	// (statfs's blocks and available blocks, as Kafka's total and usable
	// space); -1 where the platform does not say.
	TotalBytes, UsableBytes int64
	// Replicas are the partitions whose logs the directory holds - every
	// partition of a standalone broker, this broker's replicas in a
	// cluster - sorted by topic and partition. A partition that could not
	// be opened (Offline in DescribeTopic) is left out: its size is not
	// known. The cluster's metadata log is not a replica: Kafka leaves it
	// out too.
	Replicas []ReplicaLog
}

// ReplicaLog is one partition's log in a LogDir.
type ReplicaLog struct {
	Topic     string
	Partition int32
	// Size is the bytes of the log's segments.
	Size int64
	// OffsetLag is how far the replica's log end is behind the partition's
	// high watermark (replica.ReplicaSet.OffsetLag): 0 on a leader and on
	// a standalone broker; on a follower catching up, the records it has
	// yet to copy below the high watermark its leader last reported.
	OffsetLag int64
}

// DescribeLogDir describes the broker's data directory and the replicas
// it holds (DescribeLogDirs).
func (b *Broker) DescribeLogDir() (LogDir, error) {
	if b.closed.Load() {
		return LogDir{}, ErrClosed
	}
	path, err := filepath.Abs(b.dir)
	if err != nil {
		return LogDir{}, fmt.Errorf("spool: data directory %s: %w", b.dir, err)
	}
	d := LogDir{Path: path}
	d.TotalBytes, d.UsableBytes = diskSpace(path)
	for _, st := range b.stores() {
		d.Replicas = append(d.Replicas, st.replicaLogs()...)
	}
	slices.SortFunc(d.Replicas, func(x, y ReplicaLog) int {
		return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
	})
	return d, nil
}

// replicaLogs: every open partition of the broker's own topics. One
// broker is every partition's leader, so no lag.
func (s soloStore) replicaLogs() []ReplicaLog {
	var out []ReplicaLog
	for _, t := range s.b.snapshot() {
		for _, p := range t.online() {
			out = append(out, ReplicaLog{Topic: t.name, Partition: p.ID(), Size: p.Log().Size()})
		}
	}
	return out
}

// replicaLogs: this broker's replicas, each with its lag as its replica
// set reports it.
func (s clusterStore) replicaLogs() []ReplicaLog {
	b := s.b
	b.rmu.Lock()
	tps := make([]TopicPartition, 0, len(b.replicas))
	for tp := range b.replicas {
		tps = append(tps, tp)
	}
	b.rmu.Unlock()
	var out []ReplicaLog
	for _, tp := range tps {
		p, err := s.partition(tp.Topic, tp.Partition)
		if err != nil {
			continue // removed meanwhile
		}
		rl := ReplicaLog{Topic: tp.Topic, Partition: tp.Partition, Size: p.Log().Size()}
		if b.node != nil {
			if rs, ok := b.node.ReplicaSet(tp.Topic, tp.Partition); ok {
				rl.OffsetLag = rs.OffsetLag()
			}
		}
		out = append(out, rl)
	}
	return out
}
