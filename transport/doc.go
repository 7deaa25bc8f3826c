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
// # Limits
//
// Kafka's broker settings bound what clients can make the server hold, with
// Kafka's semantics and defaults sized so that a flood of connections or of
// large requests does not take down a 2 GiB machine (Kafka's own defaults
// are unbounded):
//
//   - Options.MaxConnections (max.connections, 1000): at the limit the
//     acceptor stops accepting until a connection closes; new ones wait in
//     the kernel's listen backlog.
//   - Options.MaxConnectionsPerIP (max.connections.per.ip, 500): a
//     connection from an address with that many open is closed at once.
//   - Options.MaxRequestBytes (socket.request.max.bytes, 100 MiB): a larger
//     size prefix closes the connection before anything is allocated.
//   - Options.QueuedMaxRequestBytes (queued.max.request.bytes, 256 MiB): a
//     memory pool. A frame's whole size (from 1 MiB, rounded up by at most
//     an eighth) is reserved when its size prefix is read, before its body
//     is; a frame that does not fit waits, its socket unread, while smaller
//     ones that fit pass it; the bytes go back once the request is served,
//     before its response is written. Requests in memory never exceed the
//     pool (Server.Stats reports them).
//   - Options.RequestReadTimeout (30 s; no Kafka equivalent): a request
//     must arrive whole, waiting for the pool included, within this of its
//     size prefix, or the connection is closed and the memory returned. A
//     client trickling a large request (slow loris) holds neither memory
//     nor a connection for longer.
//   - Options.IdleTimeout (connections.max.idle.ms, 10 min) closes a
//     connection that sends nothing between requests.
//
// Each connection costs a goroutine and an 8 KiB read buffer; a response
// borrows a write buffer from a shared pool while it is written. Response
// bodies (an old client's down-converted fetch, for instance) are not
// counted in the pool, as in Kafka.
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
