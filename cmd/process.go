package cmd

import (
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cairn-sd/cairn/nodeid"
)

// What a long-running command (server, agent) sets up alike.

// dataDir returns dir, or with none (--dev) a new temporary folder named
// after prefix, and the function that removes it when the command ends.
func dataDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// identity returns given, or the random node id kept in dir (made the
// first time).
func identity(given, dir string) (string, error) {
	if given != "" {
		return given, nil
	}
	return nodeid.LoadOrCreate(dir)
}

// newRegistry returns a metrics registry with the Go runtime's and the
// process's collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newHTTPServer returns the HTTP server of h, with the timeouts every
// cairn listener has, logging its own errors as warnings.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}
