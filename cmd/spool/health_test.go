package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool"
)

// get fetches a URL: its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// /readyz says "not ready", naming what is missing, until the data
// directory is open and the listeners accept, and again from the start of
// a shutdown; /healthz says the process lives throughout.
func TestHealthReadiness(t *testing.T) {
	h, err := startHealth("127.0.0.1:0", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer h.close()
	base := "http://" + h.Addr().String()

	code, body := get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "[-]data")
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)

	b, err := spool.Open(t.TempDir(), spool.Options{})
	require.NoError(t, err)
	defer b.Close()
	h.opened(b, nil)
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "[+]data")
	require.Contains(t, body, "[-]listening")

	h.serving()
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ok\n", body)
	code, body = get(t, base+"/readyz?verbose")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "[+]metadata")

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "spool_partitions")

	h.shuttingDown()
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "[-]not-shutting-down")
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)

	// What /metrics serves without a broker serving: the runtime's own.
	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines")
	require.NotContains(t, body, "spool_partitions")
}

// spool serve --metrics-listen: a real client's produce shows in the
// scraped metrics, with the request latency histogram and the partition's
// offsets; the endpoints answer while it serves.
func TestServeMetrics(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	m := regexp.MustCompile(`spool: metrics on (\S+)`).FindStringSubmatch(s.log())
	require.NotNil(t, m, s.log())
	base := "http://" + m[1]
	code, _ := get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.DefaultProduceTopic("t"), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	wants := []string{
		`spool_topic_records_in_total{topic="t"} 10`,
		`spool_partition_log_end_offset{partition="0",topic="t"} 10`,
		`spool_requests_total{api="Produce"} 10`,
		`spool_request_duration_seconds_count{api="Produce"} 10`,
		`spool_request_phase_duration_seconds_bucket{api="Produce",phase="local",le="+Inf"} 10`,
		`spool_under_replicated_partitions 0`,
		`spool_active_controller 1`,
		"spool_log_flush_duration_seconds_count",
		"spool_connections ",
		"process_resident_memory_bytes",
	}
	// A request is counted once its response is written: the client may
	// read the last answer a moment before, so scrape until it shows.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := get(t, base+"/metrics")
		assert.Equal(c, http.StatusOK, code)
		for _, want := range wants {
			assert.Contains(c, body, want)
		}
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0, s.stop(t, syscall.SIGTERM))
}
