// Package share keeps the delivery state of KIP-932 share groups ("queues
// for Kafka"): consumers of a share group take records of the same
// partitions one at a time, each acknowledging the records it was given,
// rather than owning partitions as a consumer group's members do.
//
// A Partition is one share-partition - a group's state for one topic
// partition. Each record is delivered to one consumer at a time under a
// lock:
//
//	               acquire (count+1)
//	Available ------------------------> Acquired
//	    ^                                 |  |  |
//	    |  release, lock expiry,          |  |  | accept
//	    |  consumer gone (count < limit)  |  |  v
//	    +---------------------------------+  |  Acknowledged (final)
//	                                         |
//	       reject, or released at the limit  v
//	                                      Archived (final)
//
// The partition's start offset moves past the done prefix; at most
// MaxInFlight records lie between it and the end of what was acquired.
// The package does no I/O: the broker reads the log, persists each
// change's Snapshot before it answers, and restores it after a crash -
// an acknowledged record is never delivered again, an acquired one is
// delivered again.
package share
