// Package partition is one topic partition on one broker: a durable log
// (package log) plus what a Kafka broker keeps beside it - the high
// watermark that bounds what consumers see, the leader-epoch cache, and
// fetch requests that wait for data - and the partitioners that choose a
// partition for each produced record.
//
// # Directory
//
//	<data dir>/<topic>-<partition>/
//	  ...                        the log (see package log)
//	  leader-epoch-checkpoint    Kafka's text format: version, count, "epoch startOffset" lines
//	  <offset>.snapshot          idempotent producers' state as of offset (Kafka's ProducerSnapshot v1)
//
// # High watermark
//
// On a single broker the high watermark is the log's committed offset: the
// end of what is on stable storage under the Sync flush policy, the end of
// the log under None and Interval. Fetch never returns a batch that ends at
// or past it.
//
// # Leader epochs
//
// Every batch a leader appends carries its leader epoch (the batch header's
// partitionLeaderEpoch field). The leader-epoch cache records the first
// offset written in each epoch; replicas use it to find where their logs
// diverge (Kafka's KIP-101 and KIP-279).
package partition
