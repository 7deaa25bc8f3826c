package transport

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A request's phases add up to its total; the partitions of a produce wait
// side by side, so the longest wait is its remote time; a request that was
// not served is counted, not timed; keys out of range are ignored.
func TestRequestPhases(t *testing.T) {
	var m serverMetrics
	read := time.Unix(1000, 0)
	req := &request{key: kmsg.Produce.Int16(), size: 100}
	req.times.read, req.times.started = read, read.Add(time.Millisecond)
	var wg sync.WaitGroup
	for _, d := range []time.Duration{3, 7, 5} {
		wg.Go(func() { req.waited(d * time.Millisecond) })
	}
	wg.Wait()
	handled := read.Add(20 * time.Millisecond)
	m.record(req, handled, handled.Add(2*time.Millisecond), 4*time.Millisecond, false)
	m.record(&request{key: kmsg.Produce.Int16(), size: 50}, time.Time{}, time.Time{}, 0, true) // refused before serving
	m.record(&request{key: -1}, handled, handled, 0, false)
	m.record(&request{key: maxAPIKey}, handled, handled, 0, false)

	a := &m.apis[kmsg.Produce.Int16()]
	require.EqualValues(t, 2, a.requests.Load())
	require.EqualValues(t, 1, a.failed.Load())
	require.EqualValues(t, 150, a.bytes.Load())
	require.EqualValues(t, 1, a.total.Snapshot().Count, "only the served one is timed")
	require.Equal(t, time.Millisecond, a.queue.Snapshot().Sum)
	require.Equal(t, 7*time.Millisecond, a.remote.Snapshot().Sum, "the longest wait")
	require.Equal(t, 12*time.Millisecond, a.local.Snapshot().Sum, "the handler's 19ms less the wait")
	require.Equal(t, 2*time.Millisecond, a.send.Snapshot().Sum)
	require.Equal(t, 4*time.Millisecond, a.throttle.Snapshot().Sum)
	require.Equal(t, 26*time.Millisecond, a.total.Snapshot().Sum, "1+12+7+2+4")
}

// BenchmarkRecordRequest is what counting and timing one request costs the
// server, beside its clock reads.
func BenchmarkRecordRequest(b *testing.B) {
	var m serverMetrics
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := request{key: kmsg.Fetch.Int16(), size: 100}
			req.times.read, req.times.started = now, now.Add(time.Microsecond)
			m.record(&req, now.Add(50*time.Microsecond), now.Add(60*time.Microsecond), 0, false)
		}
	})
}
