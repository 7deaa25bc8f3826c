// Package group implements Kafka's groups on both sides.
//
// The coordinator (Coordinator) runs the three group protocols of Kafka 4:
// the classic protocol as Kafka's broker-side GroupCoordinator runs it
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
// OffsetDelete, DescribeGroups, ListGroups, DeleteGroups), KIP-848's
// consumer protocol (ConsumerHeartbeat, ConsumerDescribe: the coordinator
// assigns, members reconcile revoke-first; consumer.go), and the
// membership of KIP-932's share groups (ShareHeartbeat, ShareDescribe;
// the records themselves are shared out by package share).
//
// The member side (ConsumerGroup) joins a group through a Client - Local
// for a Coordinator in this process, transport.GroupClient over the Kafka
// protocol - under either protocol, and reconciles its owner to what the
// group gives it. With it come the consumer protocol's Subscription and
// Assignment codec and the range, roundrobin and cooperative-sticky
// assignors. The package knows nothing of networks: the transport package
// maps requests and the sentinel errors to the wire, one error per Kafka
// code.
//
// # The protocol
//
// Members of a group agree on who consumes what in generations. A member
// joins (Join) naming the protocols it supports with their metadata; for
// consumers, assignor names with an encoded Subscription. When every known
// member has joined, the coordinator bumps the generation, chooses a
// protocol every member supports, and elects a leader, whose Join response
// lists the members with their metadata. The leader computes the assignment
// (an Assignor) and sends it in its Sync; every member's Sync returns its
// share. Members then heartbeat within their session timeout; a heartbeat
// answered with ErrRebalanceInProgress tells them to join again, which is
// how a new generation starts when a member comes, goes, dies or changes
// its subscription.
//
// # States
//
// Each group is a state machine:
//
//	                 join
//	+-------+ -------------------> +--------------------+
//	| Empty |                      | PreparingRebalance | <----------+
//	+-------+ <------------------- +--------------------+            |
//	    |     no member left when           |                        |
//	    |     the rebalance completes       | every member joined,   |
//	    |                                   | or rebalance timeout   |
//	    |                                   v                        |
//	    |                        +---------------------+             |
//	    |                        | CompletingRebalance | ----------->|
//	    |                        +---------------------+  (1)        |
//	    |                                   |                        |
//	    |                                   | the leader's Sync      |
//	    |                                   v                        |
//	    |                             +--------+                     |
//	    |                             | Stable | ------------------->+
//	    |                             +--------+  (1), or the leader
//	    | DeleteGroups, or no                     joins
//	    | offsets left after expiry
//	    v                   (1) a member joins with new metadata,
//	+------+                    leaves or its session expires, or a
//	| Dead |                    member does not Sync in time
//	+------+
//
// Empty: no members; committed offsets may remain. Join starts a rebalance
// (after InitialRebalanceDelay, which lets a group's first members gather).
//
// PreparingRebalance: members rejoin. Heartbeats answer
// ErrRebalanceInProgress; Sync too. The rebalance completes when every known
// member has rejoined, or when the rebalance timeout (the largest of the
// members', KIP-62) passes: dynamic members that did not rejoin are removed,
// static ones (KIP-345) stay until their session expires. The generation
// is bumped; a leader that did not rejoin is replaced.
//
// CompletingRebalance: the members have their generation and wait in Sync
// for the leader's assignment. Commits answer ErrRebalanceInProgress.
// Members that do not Sync within the rebalance timeout are removed.
//
// Stable: the assignment is out; members heartbeat and commit. A member that
// leaves or whose session expires, a leader that rejoins, or a member that
// rejoins with different metadata starts a new rebalance. A static member
// that restarts (joins with its group instance id and no member id) takes
// its old place and assignment without a rebalance, and its old member id is
// fenced (ErrFencedInstanceID).
//
// Dead: the group was deleted; requests find no group.
//
// # Determinism
//
// The decisions are made by a per-group state machine that is fed requests
// and ticks, each with its time, and does no I/O and no waiting. Coordinator
// is a thin layer on top: it locks the group, feeds it, and parks the
// callers of Join and Sync on channels until the group decides their answer.
// Timeouts are applied by Tick(now); the Coordinator calls it from its own
// goroutine unless Options.ManualTick is set, in which case tests drive time
// with a fake clock and no sleeps.
//
// # Committed offsets
//
// CommitOffsets checks the committer against the group (a member of the
// current generation, or, with generation -1, anyone while the group is
// Empty), persists the offsets through the OffsetStore and only then makes
// them visible. LoadOffsets restores them at startup; ExpireOffsets applies
// offsets.retention.minutes.
//
// # Not implemented
//
// Group membership is not persisted, under any protocol: after a restart
// members get ErrUnknownMemberID and rejoin, as after a coordinator
// failover (Kafka keeps KIP-848 epochs and assignments in
// __consumer_offsets; spool's members rejoin from nothing, which costs a
// reassignment, and a member that has not noticed yet may still process
// a partition its successor took - at-least-once, not exclusive, across a
// coordinator restart). Nor are per-partition retention of OffsetCommit
// v1, or JoinGroup v9's SkipAssignment (a restarted static leader is told
// the old leader id instead, as before v9). A group with members moves
// from the classic protocol to KIP-848 online (mixed.go); one left with
// classic members only is not converted back, but serves them.
package group
