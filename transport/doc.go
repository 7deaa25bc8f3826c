// Package transport serves a spool.Broker over the Kafka wire protocol, so
// that Kafka clients and tools - franz-go, sarama, kafka-go, librdkafka and
// kcat, kafkajs and kafka-python are tested (module interop); the Java
// client is not, for want of it on the test machines - produce to it,
// consume from it, run consumer groups and administer topics unchanged. It is the only package
// that speaks the protocol: request and response bodies are franz-go's kmsg
// types; this package frames them, negotiates versions and maps spool's
// errors to Kafka's error codes.
//
// # Framing
//
//	request:  int32 size | int16 api_key | int16 api_version | int32 correlation_id |
//	          int16-length client_id | tagged fields (flexible versions) | body
//	response: int32 size | int32 correlation_id | tagged fields (flexible, but
//	          never for ApiVersions) | body
//
// A connection is served by one goroutine, one request at a time, so
// responses go out in request order, as Kafka does. A produce request with
// acks=0 gets no response. A frame larger than Options.MaxRequestBytes (or,
// before SASL authentication, MaxPreAuthBytes), an unknown API key, a
// version outside the advertised range (other than ApiVersions, which
// answers UNSUPPORTED_VERSION in a v0-shaped body as KIP-511 asks) or a
// body that does not decode closes the connection. A panic in a handler
// closes only its connection.
//
// # APIs
//
// Each API lives in a file named after its key (00_produce.go, 01_fetch.go,
// ...) that registers the version range it implements; ApiVersions
// advertises exactly those, every one from version 0.
//
// # Old message formats
//
// Produce v0-v2 and Fetch v0-v3 carry message format v0 and v1 - message
// sets, Kafka before 0.11 - while the log holds RecordBatch v2 only. An old
// producer's message set (compressed wrappers included) becomes one
// uncompressed batch before it is validated and appended; an old
// consumer's fetch is read as batches and down-converted in memory to
// magic 0 (Fetch v0-v1) or 1 (v2-v3), whole messages only and at least one,
// without headers (the format has none) and, in v0, without timestamps.
// Those versions are served for clients pinned to old protocol versions;
// they do not use the zero-copy path.
package transport
