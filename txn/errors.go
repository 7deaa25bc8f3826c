package txn

import "errors"

// Errors returned by the Coordinator. Each one stands for exactly one Kafka
// error code (named in its comment), so that the transport layer can map
// them one to one; they are returned wrapped with context, so test them with
// errors.Is. Some codes must be rewritten for old request versions; the
// package documentation lists those rewrites.
var (
	// ErrConcurrentTransactions (CONCURRENT_TRANSACTIONS, 51): another
	// change of the transactional id is being written, or its previous
	// transaction is still being completed; the client retries.
	ErrConcurrentTransactions = errors.New("txn: concurrent transactions")
	// ErrProducerFenced (PRODUCER_FENCED, 90): the request's producer epoch
	// is not the transactional id's current one: a newer producer instance
	// has taken the id over, and this one is a zombie.
	ErrProducerFenced = errors.New("txn: producer fenced")
	// ErrInvalidProducerEpoch (INVALID_PRODUCER_EPOCH, 47): what
	// ErrProducerFenced becomes for request versions before KIP-588, and
	// what a partition leader answers a transaction marker whose producer
	// epoch is older than the partition's (a MarkerWriter reports it so; the
	// Coordinator then stops sending that transaction's markers).
	ErrInvalidProducerEpoch = errors.New("txn: invalid producer epoch")
	// ErrInvalidTxnState (INVALID_TXN_STATE, 48): the request does not fit
	// the transaction's state (EndTxn with no transaction, or asking for
	// the other outcome than the one already decided).
	ErrInvalidTxnState = errors.New("txn: invalid transaction state")
	// ErrInvalidProducerIDMapping (INVALID_PRODUCER_ID_MAPPING, 49): the
	// transactional id is unknown, or its producer id is not the
	// request's.
	ErrInvalidProducerIDMapping = errors.New("txn: invalid producer id mapping")
	// ErrInvalidTransactionTimeout (INVALID_TRANSACTION_TIMEOUT, 50): the
	// transaction timeout is not positive or exceeds Config.MaxTimeout.
	ErrInvalidTransactionTimeout = errors.New("txn: invalid transaction timeout")
	// ErrNotCoordinator (NOT_COORDINATOR, 16): this coordinator has not
	// loaded the __transaction_state partition of the transactional id (it
	// is not, or no longer, that partition's leader).
	ErrNotCoordinator = errors.New("txn: not the transaction coordinator")
	// ErrCoordinatorLoadInProgress (COORDINATOR_LOAD_IN_PROGRESS, 14): the
	// partition of the transactional id is being loaded; retry.
	ErrCoordinatorLoadInProgress = errors.New("txn: coordinator load in progress")
	// ErrCoordinatorNotAvailable (COORDINATOR_NOT_AVAILABLE, 15): the
	// transaction log could not be written (or a producer id could not be
	// allocated), or the Coordinator is closed; nothing changed.
	ErrCoordinatorNotAvailable = errors.New("txn: coordinator not available")
	// ErrTransactionalIDNotFound (TRANSACTIONAL_ID_NOT_FOUND, 105):
	// DescribeTransactions of an id this coordinator does not know.
	ErrTransactionalIDNotFound = errors.New("txn: transactional id not found")
	// ErrOperationNotAttempted (OPERATION_NOT_ATTEMPTED, 55): the partition
	// was not added because another partition of the same request was
	// refused (AddPartitionsToTxn is all or nothing).
	ErrOperationNotAttempted = errors.New("txn: operation not attempted")
	// ErrUnknownTopicOrPartition (UNKNOWN_TOPIC_OR_PARTITION, 3): a
	// partition added to a transaction does not exist. A MarkerWriter
	// reports it for a partition that has gone; the Coordinator then stops
	// sending it markers, as Kafka does.
	ErrUnknownTopicOrPartition = errors.New("txn: unknown topic or partition")
	// ErrTransactionAbortable (TRANSACTION_ABORTABLE, 120): VerifyPartitions
	// found the partition outside the producer's ongoing transaction
	// (KIP-890). A partition leader answers a transactional produce with
	// INVALID_TXN_STATE (Produce v10 and older) or TRANSACTION_ABORTABLE
	// (v11 and newer).
	ErrTransactionAbortable = errors.New("txn: transaction abortable")
	// ErrCoordinatorFenced (TRANSACTION_COORDINATOR_FENCED, 52): what a
	// partition leader answers a marker carrying an older coordinator epoch
	// than it has seen; a MarkerWriter reports it so, and the Coordinator
	// stops sending that transaction's markers (a newer coordinator owns
	// it).
	ErrCoordinatorFenced = errors.New("txn: transaction coordinator fenced")
	// ErrInvalidRequest (INVALID_REQUEST, 42): an empty transactional id.
	// (A null one is the idempotent producer's InitProducerId, which is not
	// the transaction coordinator's business.)
	ErrInvalidRequest = errors.New("txn: invalid request")
	// ErrInvalidRegularExpression (INVALID_REGULAR_EXPRESSION, 128):
	// ListTransactions with a transactional-id pattern that does not
	// compile.
	ErrInvalidRegularExpression = errors.New("txn: invalid regular expression")
)

// Errors of the __transaction_state record codec (DecodeKey, DecodeValue).
var (
	// ErrMalformedRecord means bytes of a __transaction_state key or value
	// could not be decoded: truncated, trailing bytes, a negative length, a
	// null where Kafka allows none, or an unknown transaction state.
	ErrMalformedRecord = errors.New("txn: malformed __transaction_state record")
	// ErrUnknownKeyVersion means a well-framed key of a version this package
	// does not know (a record kind of a newer Kafka); loading skips such
	// records, as Kafka does.
	ErrUnknownKeyVersion = errors.New("txn: unknown __transaction_state key version")
)
