package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/spoolprom"
	"github.com/spoolmq/spool/transport"
)

// health is spool serve's HTTP endpoint for operators (--metrics-listen):
//
//	/metrics  Prometheus metrics: the broker's and its server's
//	          (package spoolprom), Go's runtime and the process's
//	/healthz  200 while the process runs (liveness)
//	/readyz   200 once the data directory is open, the Kafka listeners
//	          accept and a cluster node has caught up with the cluster's
//	          metadata; 503 before that and from the start of shutdown.
//	          ?verbose lists each check.
//
// It starts before the data directory is opened, so that /readyz can say
// "not yet" through a long recovery.
type health struct {
	logger *slog.Logger
	reg    *prometheus.Registry
	http   *http.Server
	ln     net.Listener

	mu        sync.Mutex
	b         *spool.Broker
	col       *spoolprom.Collector // the broker's, registered while it serves
	listening bool
	stopping  bool
}

// startHealth serves the endpoints on addr; "" serves nothing (a nil
// *health, whose methods do nothing).
func startHealth(addr string, logger *slog.Logger) (*health, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	h := &health{logger: logger, reg: prometheus.NewRegistry(), ln: ln}
	h.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	h.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := h.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", "err", err)
		}
	}()
	logger.Info("serving metrics and health", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	return h, nil
}

// Addr is where the endpoints are served.
func (h *health) Addr() net.Addr { return h.ln.Addr() }

// opened says the broker's data directory is open; its measures join
// /metrics, with its Kafka server's if srv is not nil.
func (h *health) opened(b *spool.Broker, srv *transport.Server) {
	if h == nil {
		return
	}
	col := spoolprom.NewCollector(b, spoolprom.Options{Server: srv})
	h.reg.MustRegister(col)
	h.mu.Lock()
	h.b, h.col = b, col
	h.mu.Unlock()
}

// serving says the Kafka listeners accept connections.
func (h *health) serving() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.listening = true
	h.mu.Unlock()
}

// shuttingDown makes /readyz fail, first thing in a shutdown, so that
// load balancers stop sending clients here while connections drain, and
// takes the broker's measures out of /metrics before it closes (the
// runtime's stay).
func (h *health) shuttingDown() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.stopping = true
	col := h.col
	h.col = nil
	h.mu.Unlock()
	if col != nil {
		h.reg.Unregister(col)
	}
}

// close stops the endpoints.
func (h *health) close() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.http.Shutdown(ctx)
}

func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	b, listening, stopping := h.b, h.listening, h.stopping
	h.mu.Unlock()
	caughtUp := false
	if b != nil {
		select {
		case <-b.Ready():
			caughtUp = true
		default:
		}
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"data", b != nil},
		{"listening", listening},
		{"metadata", caughtUp},
		{"not-shutting-down", !stopping},
	}
	ready := true
	var out strings.Builder
	for _, c := range checks {
		mark := "+"
		if !c.ok {
			mark, ready = "-", false
		}
		fmt.Fprintf(&out, "[%s]%s\n", mark, c.name)
	}
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose || !ready {
		fmt.Fprint(w, out.String())
	}
	if ready {
		fmt.Fprintln(w, "ok")
	} else {
		fmt.Fprintln(w, "not ready")
	}
}
