// Package replica replicates a partition across brokers the way Kafka does:
// a leader per partition, followers that copy its log, an in-sync replica
// set (ISR), a high watermark, acks=0/1/all, leader epochs and a controller
// that elects leaders.
//
// # Layers
//
// The rules are pure functions and state machines (rules.go), tested
// without goroutines or clocks, as etcd raft separates its rules from I/O:
//
//	Leader            follower progress, ISR shrink/expand, high watermark, acks=all
//	DecideTruncation  where a follower cuts its log (KIP-101, KIP-279)
//	ElectLeader       who may lead (ISR first; unclean only if allowed)
//	AssignReplicas    round-robin placement, preferred leader first
//
// and beside them the controller's (rules_controller.go, rules_reassign.go):
//
//	Reconcile, CheckAlterPartition   fencing, unfencing, a leader's ISR change
//	Reassign, CompleteReassignment,  partition reassignment (KIP-455): the new
//	CancelReassignment               replicas catch up before the old leave
//	DecideElection, ElectPreferred   elections an operator asks for (KIP-460)
//
// Drivers apply them:
//
//	+-------------------- Node (one broker) ---------------------+
//	|  ReplicaSet (topic-0)  ReplicaSet (topic-1)  ...           |
//	|   leader: Append, serve Fetch/EndOffsetForEpoch, ISR       |
//	|   follower: truncate by epoch, fetch, AppendReplica        |
//	+---------^--------------------------------------|-----------+
//	          | UpdatePartition (states)              | AlterPartition, Heartbeat
//	+---------+---------------------------------------v----------+
//	|  Controller: the only writer of leader, ISR and epochs      |
//	|  (LocalController in process; a Raft-backed one later)      |
//	+-------------------------------------------------------------+
//	Followers reach leaders through a Network of Links
//	(LocalNetwork in process; Kafka's Fetch and
//	OffsetsForLeaderEpoch over transport later).
//
// # Guarantees
//
// A record is committed once every member of the ISR has it and the ISR has
// at least MinInSyncReplicas members; the high watermark is the end of the
// committed records, never moves back on a leader, and does not move at all
// while the ISR is below the minimum (KIP-966's strict min ISR: no "last
// replica standing" commits). An acks=all produce returns success only for
// committed records. A committed record survives as long as one ISR member
// survives with its log - with the Sync flush policy, any crash of any
// number of brokers, since a replica counts only what it has fsynced.
// Leaders are elected from the ISR only, unless a topic enables unclean
// election: then a partition whose ISR is all down comes back with the most
// up-to-date live replica, and records the old ISR committed can be lost.
//
// Every batch a leader writes carries its leader epoch; each replica keeps
// the epochs' start offsets in its leader-epoch-checkpoint, and a follower
// that starts following a new leader cuts its log to where the two agree,
// asking the leader where its epochs end (OffsetsForLeaderEpoch) until
// they agree on one, never to its high watermark. Requests carry the leader
// epoch the sender believes in and are refused if it is stale (KIP-320).
// ISR changes go through the controller with the partition epoch they were
// made against and are refused if it is stale (KIP-497); a broker that
// restarted since the leader saw it fetch cannot rejoin the ISR with its
// old incarnation (KIP-903). A reassignment removes a replica only in the
// change that brings every replica it adds into the ISR, and bumps the
// leader epoch then, so that the removed replica is fenced.
package replica
