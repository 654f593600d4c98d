package agent

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the agent's HTTP API: GET /v1/agent/status (each
// view's revision, age and staleness, SPEC §5), /readyz (200 once the
// agent serves: it holds views, from a server or from disk, or has
// heard from a server), /healthz, and /metrics from gatherer.
func (a *Agent) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status(a.staleAfter()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !a.ready() {
			http.Error(w, "no view yet: no server has answered and none is kept on disk", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

// ready reports whether the agent serves: it holds views, or a server
// answered (an agent asked for nothing yet is ready once connected).
func (a *Agent) ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.views) > 0 || a.connected
}

func (a *Agent) staleAfter() time.Duration { return a.cfg.StaleAfter }
