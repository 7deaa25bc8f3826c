package spoolprom_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/spoolprom"
)

// Export a broker's measures on your own registry and serve them.
func ExampleNewCollector() {
	dir, _ := os.MkdirTemp("", "spool-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b, err := spool.Open(dir, spool.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if _, err := b.Produce(ctx, spool.Record{Topic: "events", Value: []byte("hello")}); err != nil {
		panic(err)
	}

	reg := prometheus.NewRegistry() // never prometheus.DefaultRegisterer
	reg.MustRegister(spoolprom.NewCollector(b, spoolprom.Options{}))
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // serve it on /metrics

	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		if strings.HasPrefix(line, "spool_topic_records_in_total") || strings.HasPrefix(line, "spool_partition_log_end_offset") {
			fmt.Print(line)
		}
	}
	// Output:
	// spool_partition_log_end_offset{partition="0",topic="events"} 1
	// spool_topic_records_in_total{topic="events"} 1
}
