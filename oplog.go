package spool

// Operator logs: the state changes of a partition an operator cares about,
// each logged once at info level through Options.Logger with its topic and
// partition. The log package knows nothing of topics, so it reports what it
// did (log.RecoveryInfo, log.RetentionStats, log.CleanStats) and the broker,
// which knows which partition the log is, logs it here. Role and ISR
// changes are logged by the replica package, through the logger the broker
// gives its node. Attribute keys are shared: "topic", "partition",
// "leader_epoch", "partition_epoch", "isr", "old_isr".

import (
	"github.com/spoolmq/spool/log"
	"github.com/spoolmq/spool/partition"
)

// openPartition opens a partition and logs what recovering its log did.
func (b *Broker) openPartition(dir, topic string, n int32, opts partition.Options) (*partition.Partition, error) {
	p, err := partition.Open(dir, topic, n, opts)
	if err != nil {
		return nil, err
	}
	if r := p.Recovery(); !r.Clean && r.SegmentsChecked > 0 {
		b.logger.Info("recovered a partition's log", "topic", topic, "partition", n,
			"segments_checked", r.SegmentsChecked, "bytes_checked", r.BytesChecked,
			"truncated_segment", r.TruncatedSegment, "truncated_bytes", r.TruncatedBytes,
			"segments_dropped", r.SegmentsDropped, "duration", r.Duration)
	}
	return p, nil
}

// applyRetention runs retention on a partition's log and logs what it
// deleted.
func (b *Broker) applyRetention(p *partition.Partition) error {
	st, err := p.Log().ApplyRetentionStats()
	if st.Segments > 0 {
		b.logger.Info("retention deleted segments", "topic", p.Topic(), "partition", p.ID(),
			"segments", st.Segments, "bytes", st.Bytes, "log_start_offset", st.StartOffset)
	}
	return err
}

// compactPartition compacts a partition's log and logs the run, if it cleaned.
func (b *Broker) compactPartition(p *partition.Partition, force bool) (log.CleanStats, error) {
	st, err := p.Log().Clean(force)
	if st.Cleaned {
		b.logger.Info("compacted a partition", "topic", p.Topic(), "partition", p.ID(),
			"bytes_before", st.BytesRead, "bytes_after", st.BytesWritten,
			"records_before", st.RecordsRead, "records_after", st.RecordsKept,
			"cleaned_to", st.CleanedTo, "duration", st.Duration)
	}
	return st, err
}
