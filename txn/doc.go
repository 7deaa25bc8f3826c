// Package txn implements Kafka's transaction coordinator: the state of
// every transactional id, kept in the __transaction_state topic in Kafka's
// record format.
package txn
