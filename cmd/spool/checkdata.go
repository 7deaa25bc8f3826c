package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/partition"
	"github.com/spoolmq/spool/segment"
)

// What check verifies beyond the logs: what spool serve reads when it
// opens a data directory. Each check calls the function the open path
// calls (spool.CheckDataDir for the registry and the partitions' metadata,
// partition.OpenEpochCache, partition.ReadHighWatermark,
// partition.VerifyProducerSnapshot, spool.ReadClusterID), so that the
// two agree on what is damaged; what the open path refuses is an error
// here, what it repairs by itself a warning or info.

// partitionRole is a partition directory and what opens it.
type partitionRole struct {
	dir       string
	topic     string
	partition int32
	// known says that the directory was found in a data directory, so
	// topic, partition and replicated are known; a partition directory
	// checked on its own is only known by its name.
	known      bool
	replicated bool
}

// checkDataDir verifies a data directory: what spool.CheckDataDir checks
// (the topic registry, the partitions' partition.metadata, the layout),
// meta.properties, then each partition directory the broker opens. It
// returns false if the directory cannot be read at all.
func (c *checker) checkDataDir(root string) bool {
	dc, err := spool.CheckDataDir(root, spool.Options{})
	if err != nil {
		return false
	}
	for _, f := range dc.Findings {
		sev := map[spool.FindingLevel]severity{spool.FindingInfo: info, spool.FindingWarning: warning, spool.FindingRefusal: corrupt}[f.Level]
		c.report(sev, f.Path, -1, "%s", f.Message)
	}
	meta := filepath.Join(root, spool.MetaPropertiesFile)
	cid, err := spool.ReadClusterID(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		c.report(corrupt, meta, -1, "%v: spool serve refuses to start; add the line \"cluster.id=ID\" with the cluster's id, "+
			"or delete the file to have spool serve write one with a new id", err)
	default:
		c.report(info, meta, -1, "cluster id %s", cid)
	}
	if len(dc.Partitions) == 0 {
		c.report(warning, root, -1, "no partition directories (directories holding %s segment files) found", segment.LogSuffix)
	}
	for _, p := range dc.Partitions {
		c.checkPartitionDir(partitionRole{dir: p.Dir, topic: p.Topic, partition: p.Partition, known: true, replicated: p.Replicated})
	}
	c.checkProducerIDs(root)
	return true
}

// checkProducerIDs verifies the data directory's producer id reservation,
// which spool serve refuses to start without when the file is there but
// damaged: a guess could hand out an id again. It runs after the logs are
// checked, to say which ids they hold.
func (c *checker) checkProducerIDs(root string) {
	path := filepath.Join(root, spool.ProducerIDsFile)
	next, err := spool.ReadProducerIDs(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		seen := "no batch in the logs checked has a producer id"
		if c.maxPID >= 0 {
			seen = fmt.Sprintf("the highest producer id in the logs checked is %d", c.maxPID)
		}
		c.report(corrupt, path, -1, "%v: spool serve refuses to start; %s", err, seen)
	default:
		c.report(info, path, -1, "next producer id block at %d", next)
	}
}

// checkPartitionDir verifies a partition directory: its log, then the
// partition's own files.
func (c *checker) checkPartitionDir(r partitionRole) {
	s, ok := c.checkPartition(r.dir)
	if !ok {
		return
	}
	c.checkEpochs(r, s)
	c.checkHighWatermark(r, s)
	c.checkProducerSnapshots(r.dir, s)
}

// checkEpochs verifies the leader-epoch cache as partition.Open reads it:
// a damaged file is rebuilt from the batches' leader epochs, one that
// cannot be read refuses the open, and a partition a standalone broker
// opens (at leader epoch 0) may not hold a newer epoch.
func (c *checker) checkEpochs(r partitionRole, s logSummary) {
	path := filepath.Join(r.dir, partition.EpochFile)
	cache, err := partition.OpenEpochCache(nil, r.dir)
	var entries []partition.EpochEntry
	from := path
	switch {
	case errors.Is(err, partition.ErrBadEpochFile):
		c.report(warning, path, -1, "%v: the next open rebuilds it from the batches' leader epochs", err)
		entries = s.epochs
		from = r.dir
	case err != nil:
		c.report(corrupt, path, -1, "cannot read: %v: the partition refuses to open; make the file readable, or delete it to have it rebuilt from the log", err)
		return
	default:
		entries = cache.Entries()
	}
	if !r.known || r.replicated {
		return
	}
	if err := partition.VerifyEpochs(entries, s.end, 0); err != nil {
		c.report(corrupt, from, -1, "%v: spool serve refuses to open the partition: a later leader (a cluster's) wrote this log, "+
			"and a standalone broker, which leads at epoch 0, cannot take it over", err)
	}
}

// checkHighWatermark verifies a replica's replication-offset-checkpoint,
// which a replicated partition reads when it opens: a damaged one is
// ignored (the replica starts from its log start offset), never refused.
func (c *checker) checkHighWatermark(r partitionRole, s logSummary) {
	path := filepath.Join(r.dir, partition.HighWatermarkFile)
	if !r.known {
		// Only a replica reads the file; on its own, a directory is known
		// by its name only, and the file tells whether it is a replica.
		if _, err := os.Stat(path); err != nil {
			return
		}
		tn, n, ok := splitPartitionDir(filepath.Base(r.dir))
		if !ok {
			return
		}
		r.topic, r.partition = tn, n
	} else if !r.replicated {
		return
	}
	hw, err := partition.ReadHighWatermark(r.dir, r.topic, r.partition)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		c.report(warning, path, -1, "%v: ignored; the replica starts with its log start offset as its high watermark until its leader says more", err)
	case hw > s.end:
		c.report(info, path, -1, "high watermark %d is past the end of the log (next offset %d): the replica starts from the end", hw, s.end)
	default:
		c.report(info, path, -1, "high watermark %d", hw)
	}
}

// checkProducerSnapshots verifies the idempotent producers' snapshots as
// the partition loads them: a damaged one, or one outside the log, is
// deleted and the state rebuilt from the log, so neither is an error.
func (c *checker) checkProducerSnapshots(dir string, s logSummary) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // reported by checkPartition
	}
	for _, e := range entries {
		off, suffix, ok := segment.ParseFileName(e.Name())
		if !ok || suffix != partition.SnapshotSuffix || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if off > s.end || off < s.start {
			c.report(info, path, -1, "describes offset %d, outside the log (%d to %d): the next open deletes it", off, s.start, s.end)
			continue
		}
		data, err := os.ReadFile(path)
		if err == nil {
			err = partition.VerifyProducerSnapshot(data)
		}
		if err != nil {
			c.report(warning, path, -1, "%v: the broker deletes it and rebuilds the idempotent producers' state from an older snapshot and the log", err)
		}
	}
}

// splitPartitionDir splits a partition directory's name, <topic>-<n>.
func splitPartitionDir(name string) (string, int32, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], int32(n), true
}
