// Package spool is Kafka's log design as an embeddable Go library: topics
// split into partitions, each partition a durable, segmented, append-only
// log with O(1) appends and offset lookups through sparse memory-mapped
// indexes, retention by time and size, and Kafka's on-disk format, so Kafka
// knowledge and tools apply.
//
// # Layers
//
// Each layer is one package; imports only point down the list.
//
//	cmd/spool, examples/   programs: the spool tool, runnable examples
//	transport              the Kafka wire protocol: serve a Broker to Kafka clients (planned)
//	spool (this package)   Broker: topics, producers, consumers, background jobs (planned)
//	group                  consumer groups and committed offsets (planned)
//	replica                replication: ISR, high watermark, leader epochs (planned)
//	partition              a log plus high watermark and fetch waiters (planned)
//	log                    one partition's directory of segments: append, read, recover, retain
//	segment                one .log file and its two indexes
//	index                  the mmap'd sparse offset and time indexes
//	record                 Kafka RecordBatch v2: batches, records, codecs
//
// Today the storage core - record, index, segment and log - is complete:
// a Go program can open a log.Log in a directory, append records and batches,
// and read them back after any crash. See the README for the durability
// guarantees and measured performance, and examples/quickstart for a tour.
package spool
