// Package txn implements Kafka's transaction coordinator (KIP-98): for
// every transactional id, the producer id and epoch that fence older
// producer instances, and the open transaction with its partitions and
// timeout, kept in the compacted internal topic __transaction_state in
// Kafka's record format, so that a coordinator that takes over (or Kafka's
// own tools) reads the same state. It knows nothing of networks: the
// transport maps requests and the sentinel errors to the wire, one error
// per Kafka code; the broker supplies a Store (the topic's partitions), a
// MarkerWriter (WriteTxnMarkers to partition leaders) and producer ids.
//
// # Placement
//
// A transactional id belongs to partition PartitionFor(id, n) =
// abs(Java String.hashCode(id)) % n of __transaction_state (n = 50 by
// default); the leader of that partition is its coordinator, and the
// partition's leader epoch is the coordinator epoch every marker carries,
// so that leaders refuse the markers of a deposed coordinator. A broker
// calls Load when it becomes a partition's leader and Unload when it stops;
// ids of partitions not loaded get ErrNotCoordinator, of partitions being
// loaded ErrCoordinatorLoadInProgress.
//
// # Records
//
// One record per change of an id; compaction keeps the latest. Integers
// are big-endian; strings are int16 length + UTF-8 (version 0) or compact,
// uvarint length+1 (version 1); arrays int32 count or compact uvarint
// count+1, -1 / 0 meaning null.
//
//	key (TransactionLogKey):
//	+---------------+--------------------------+
//	| version int16 | TransactionalId string   |   version 0; other versions
//	| = 0           |                          |   are skipped on load
//	+---------------+--------------------------+
//
//	value (TransactionLogValue), null = tombstone (the id expired):
//	+---------------+-----------------+-------------------+----------------------+
//	| version int16 | ProducerId      | ProducerEpoch     | TransactionTimeoutMs |
//	| 0 or 1        | int64           | int16             | int32                |
//	+---------------+-----------------+-------------------+----------------------+
//	| TransactionStatus int8 (State)  | TransactionPartitions, nullable:         |
//	|                                 |   [ {Topic string, PartitionIds [int32]} |
//	|                                 |     (v1: + tagged fields) ]              |
//	+---------------------------------+------------------------------------------+
//	| TransactionLastUpdateTimestampMs int64 | TransactionStartTimestampMs int64 |
//	+----------------------------------------+-----------------------------------+
//	| v1 only: tagged fields: count uvarint, then per field tag uvarint,         |
//	| size uvarint, data: 0 PreviousProducerId int64, 1 NextProducerId int64,    |
//	| 2 ClientTransactionVersion int16 (defaults -1, -1, 0 are not written)      |
//	+----------------------------------------------------------------------------+
//
// Partitions are null for Empty, an empty array for Complete*. Version 1
// is written only when a tagged field is set: this package sets
// PreviousProducerId after an InitProducerId that continued the producer's
// epoch (KIP-360), so that a retry of it is recognised after a failover
// (Kafka's classic coordinator keeps the last epoch in memory only, KAFKA-20357). Values of later versions
// are read as version 1 (KIP-915).
//
// # States
//
//	Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
//	                                     |  ^
//	                                     +--+ more partitions
//	                                     |
//	                                     +--EndTxn(abort), or InitProducerId or the timeout
//	                                        fencing the epoch (PrepareEpochFence)--> PrepareAbort --markers--> CompleteAbort
//
//	Empty, CompleteCommit, CompleteAbort --InitProducerId--> Empty, epoch bumped
//	CompleteCommit, CompleteAbort --AddPartitions/AddOffsets--> Ongoing: the next transaction
//	Empty, CompleteCommit, CompleteAbort --idle for Config.IDExpiration--> Dead --> tombstone
//
// Every change is first a pending transition (the state Kafka calls
// pendingState), then a record written through the Store, then applied; a
// request for an id with a pending transition gets
// ErrConcurrentTransactions, and a failed write changes nothing. EndTxn
// answers once PrepareCommit/PrepareAbort is durable; the markers are then
// written in the background (retried until every partition has one; a
// partition that no longer exists is given up) and CompleteCommit/
// CompleteAbort written last, so a producer can begin its next transaction
// while markers are in flight, getting ErrConcurrentTransactions until they
// are done. PrepareEpochFence is never stored: InitProducerId on an Ongoing
// transaction, and Tick on one past its timeout, write PrepareAbort with the
// epoch already bumped, so the abort markers fence the old producer. After
// Load, the markers of every transaction found in Prepare* are sent again.
//
// # Errors on the wire
//
// The Coordinator returns the errors of the newest request versions; the
// transport must rewrite some for older versions, as Kafka's KafkaApis does:
//
//	ErrProducerFenced (90) -> INVALID_PRODUCER_EPOCH (47) for InitProducerId v0-3,
//	                          AddPartitionsToTxn v0-1, AddOffsetsToTxn v0-1, EndTxn v0-1
//	ErrTransactionAbortable (120), from VerifyPartitions -> INVALID_TXN_STATE (48)
//	                          for Produce v0-10 (the leader's answer to an unverified batch)
//	ErrInvalidRequest (42)  for an empty transactional id (a null one is the
//	                          idempotent InitProducerId, not this package's)
//
// ErrCoordinatorNotAvailable also covers a failed producer-id allocation and
// a closed Coordinator. The MarkerWriter reports leaders' errors wrapping
// ErrUnknownTopicOrPartition, ErrCoordinatorFenced or
// ErrInvalidProducerEpoch (see MarkerWriter).
//
// # Not here yet
//
// Transaction version 2 (KIP-890 part 2: an epoch bump per EndTxn,
// implicit AddPartitions) is not implemented: NextProducerId and
// ClientTransactionVersion are read and dropped, so clients must not be
// offered the transaction.version feature. Nor is KIP-939 (two-phase
// commit).
package txn
