package transport

import (
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/internal/measure"
	"github.com/spoolmq/spool/stats"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What the server measures of the requests it serves, per API, as Kafka's
// RequestMetrics do: how many, how many bytes, how many ended the
// connection, and the time of each phase of serving one:
//
//	frame read -> queue -> handler ------------------> response sent -> muted
//	              |        local | remote | local     | send           | throttle
//	              parse,         long-poll wait,
//	              authorization  acks=all wait
//
// Total is queue + local + remote + send + throttle.

// maxAPIKey bounds the API keys measured; keys above it are not served.
const maxAPIKey = 128

// apiMetrics are one API's counters and histograms.
type apiMetrics struct {
	requests, failed, bytes atomic.Int64
	total, queue, local     stats.Histogram
	remote, send, throttle  stats.Histogram
}

// serverMetrics are the server's measures beside ServerStats' gauges.
type serverMetrics struct {
	apis     [maxAPIKey]apiMetrics
	accepted atomic.Int64
}

// requestTimes are one request's phases, filled in as it is served.
type requestTimes struct {
	read    time.Time    // the frame was read
	started time.Time    // the handler started
	remote  atomic.Int64 // nanoseconds the handler waited on others: a long poll, followers
}

// waited records a wait on something outside the broker (a fetch's long
// poll, followers acknowledging a write) as the request's remote time. The
// partitions of a produce wait side by side: the longest wait counts.
func (r *request) waited(d time.Duration) {
	for {
		cur := r.times.remote.Load()
		if int64(d) <= cur || r.times.remote.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// record adds a served request to its API's measures. handled is when the
// handler returned, sent when the response was written; throttle how long
// the connection is muted after it.
func (m *serverMetrics) record(req *request, handled, sent time.Time, throttle time.Duration, failed bool) {
	if req.key < 0 || int(req.key) >= maxAPIKey || !measure.On() {
		return
	}
	a := &m.apis[req.key]
	a.requests.Add(1)
	a.bytes.Add(int64(req.size))
	if failed {
		a.failed.Add(1)
	}
	t := &req.times
	if t.read.IsZero() || t.started.IsZero() || handled.IsZero() {
		return // not served: counted, not timed
	}
	remote := time.Duration(t.remote.Load())
	queue := t.started.Sub(t.read)
	local := handled.Sub(t.started) - remote
	send := time.Duration(0)
	if !sent.IsZero() {
		send = sent.Sub(handled)
	}
	a.queue.Observe(queue)
	a.local.Observe(local)
	a.remote.Observe(remote)
	a.send.Observe(send)
	a.throttle.Observe(throttle)
	a.total.Observe(queue + local + remote + send + throttle)
}

// APIStats are the measures of one API's requests.
type APIStats struct {
	// Key and Name are the API's (kmsg names: "Produce", "Fetch", ...).
	Key  int16
	Name string
	// Requests counts the requests received; Failed those that ended
	// their connection (undecodable, an unsupported version, sent before
	// authenticating, a handler's error); Bytes their sizes. The timings
	// are of the requests served.
	Requests, Failed, Bytes int64
	// The time to serve each: Total, and its phases. Queue is from the
	// request read to its handler (decoding, authorization); Local the
	// handler's own work; Remote its waits on others (a fetch's long
	// poll); Send writing the response; Throttle how long a quota kept the
	// connection muted after it.
	Total, Queue, Local, Remote, Send, Throttle stats.HistogramSnapshot
}

// APIStats returns the measures of every API that has served a request,
// by key.
func (s *Server) APIStats() []APIStats {
	var out []APIStats
	for k := range s.metrics.apis {
		a := &s.metrics.apis[k]
		n := a.requests.Load()
		if n == 0 {
			continue
		}
		out = append(out, APIStats{
			Key: int16(k), Name: kmsg.NameForKey(int16(k)), Requests: n, Failed: a.failed.Load(), Bytes: a.bytes.Load(),
			Total: a.total.Snapshot(), Queue: a.queue.Snapshot(), Local: a.local.Snapshot(),
			Remote: a.remote.Snapshot(), Send: a.send.Snapshot(), Throttle: a.throttle.Snapshot(),
		})
	}
	return out
}
