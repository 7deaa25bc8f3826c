// Package interop tests spool's Kafka protocol server (package transport,
// run by "spool serve") with real Kafka clients, as a separate module so
// that the clients are not dependencies of spool itself.
package interop
