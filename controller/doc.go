// Package controller is the cluster's metadata quorum, KRaft's design on
// an existing Raft engine (hashicorp/raft): the controllers replicate a log
// of metadata records, every node applies the committed log to an Image,
// and the Raft leader is the active controller, the only writer of
// metadata.
//
// # The metadata
//
// An Image holds the registered brokers (id, incarnation, broker epoch,
// endpoints, fenced, in controlled shutdown), the topics (name, id, own
// settings) with every partition's state (replicas, leader, leader epoch,
// ISR, partition epoch - replica.PartitionState), the next producer-id
// block and the cluster id. Applying an entry is deterministic: the image
// after it depends only on the image before, the entry and its Raft index
// (a broker's epoch is the index of the entry that registered it). See
// records.go for the records.
//
// # The active controller
//
// Once its Raft member leads and a Barrier has applied everything
// committed before its term, a node is the active controller (Quorum.Active).
// Its operations - RegisterBroker, BrokerHeartbeat, AlterPartition,
// CreateTopic, DeleteTopic, CreatePartitions, AlterTopicConfig,
// AllocateProducerIDs, ElectPreferredLeaders, AlterSettings (the
// cluster's ACLs and client quotas, each a document replaced whole if
// still at the version the change was made from), and an operator's
// AlterPartitionReassignments, ElectLeaders and UnregisterBroker - run
// one at a time: each reads the image, decides with the pure rules of
// package replica (Reconcile, DecideAlterPartition, ElectPreferred,
// AssignReplicas, Reassign, CancelReassignment, DecideElection) and
// commits its records as one Raft entry, returning once applied. A
// partition reassignment (KIP-455) records its adding and removing
// replicas in the partition's state; it completes in the ISR change that
// brings the last added replica in sync, or at the periodic check behind
// it. Broker
// sessions live in its memory: a broker silent for SessionTimeout is fenced
// (it leaves every ISR it can and its leaderships move, in the same entry);
// a new active controller starts every session afresh. Other nodes answer
// operations with a *NotControllerError naming the active one.
//
// # On disk
//
//	<data dir>/
//	  __cluster_metadata-0/           the Raft log, a Kafka-format log (LogStore): Raft index = offset + 1,
//	                                  term in each batch's partitionLeaderEpoch; `spool dump` reads it
//	  __cluster_metadata-snapshots/   snapshots of the Image (JSON), hashicorp/raft's FileSnapshotStore
//	    quorum-state                  Raft's current term and vote (StableStore), with a CRC
//	    quorum-state.reserve          64 KiB kept free for quorum-state on a full disk
//
// # The wire
//
// Raft runs over hashicorp/raft's network transport on the controller
// listener, each connection opened with a hello (RaftMagic, the cluster
// id, the node id, the voter list) so that nodes of another cluster,
// another voter list or a duplicated node id never form a quorum. The
// controller's requests arrive through package transport, which serves
// the same listener.
package controller
