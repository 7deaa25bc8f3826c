// Package spool is Kafka's design as an embeddable Go library: topics split
// into partitions, each partition a durable, segmented, append-only log with
// O(1) appends and offset lookups through sparse memory-mapped indexes,
// retention by time and size, log compaction, consumer groups, replication
// between brokers, and Kafka's on-disk format and wire protocol, so Kafka
// knowledge, clients and tools apply.
//
// A Broker (Open) is the embedded instance: create topics, write with a
// Producer, read with a Consumer (alone or in a consumer group). Brokers
// opened with Options.Cluster set to one LocalCluster replicate their
// topics' partitions between them: leaders, followers, in-sync replica sets,
// acks=all and failover. Package transport serves a Broker to Kafka clients
// over the network, and transport.StartNode makes it a node of a cluster
// of processes: a member of the Raft-backed controller quorum (package
// controller) whose replicas follow their leaders over the Kafka protocol.
//
// # Layers
//
// Each layer is one package; imports only point down the list.
//
//	cmd/spool, examples/   programs: the spool tool (serve, produce, consume, ...), runnable examples
//	transport              the Kafka wire protocol: serve a Broker to Kafka clients
//	clustertest            real spool serve clusters for tests: kill, stop, pause, restart, check
//	spool (this package)   Broker: topics, producers, consumers, background jobs, clusters
//	controller             the cluster's metadata quorum on hashicorp/raft: image, active controller
//	group                  consumer groups: membership, rebalances, assignors, committed offsets
//	replica                replication: ReplicaSet, ISR, high watermark, acks, leader epochs, controller
//	partition              a log plus high watermark, leader-epoch cache, idempotent producers, fetch waits
//	log                    one partition's directory of segments: append, read, recover, retain, compact
//	segment                one .log file and its two indexes
//	index                  the mmap'd sparse offset and time indexes
//	record                 Kafka RecordBatch v2: batches, records, codecs
//
// See the README for the durability guarantees - alone and replicated -
// and measured performance, and examples/ for runnable tours.
package spool
