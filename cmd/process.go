package cmd

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/nodeid"
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

// openFilesLimit is the process's open-files limit (RLIMIT_NOFILE, soft),
// logged at start (field notes O5: every xDS stream, API connection and
// TCP DNS connection holds a file; process_open_fds and process_max_fds
// are on /metrics). The Go runtime raises the soft limit to the hard one
// at start, so this is the hard limit the process was given. 0 if it
// cannot be read.
func openFilesLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}

// newHTTPServer returns the HTTP server of h, with the timeouts every
// cairn listener has, logging its own errors as warnings.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// tlsFiles is what --tls-cert, --tls-key and --tls-ca name.
type tlsFiles struct{ Cert, Key, CA string }

// on reports whether TLS was asked for.
func (t tlsFiles) on() bool { return t != tlsFiles{} }

// load reads and checks the files (see certs.Load); log and reg may be
// nil when only checking them.
func (t tlsFiles) load(log *slog.Logger, reg prometheus.Registerer) (*certs.Files, error) {
	return certs.Load(certs.Config{CertFile: t.Cert, KeyFile: t.Key, CAFile: t.CA,
		CertFlag: "--tls-cert", KeyFlag: "--tls-key", CAFlag: "--tls-ca", Logger: log, Registerer: reg})
}

// reloadOnHUP re-reads f on every SIGHUP until ctx is done (besides its
// own polling of the files, run by the caller).
func reloadOnHUP(ctx context.Context, f *certs.Files, log *slog.Logger) error {
	return onHUP(ctx, func() {
		if err := f.Reload(); err != nil {
			log.Error("SIGHUP: reloading certificates: still using the previous ones", "err", err)
		} else {
			log.Info("SIGHUP: certificates checked", "not_after", f.NotAfter().UTC().Format(time.RFC3339))
		}
	})
}

// onHUP calls reload on every SIGHUP until ctx is done.
func onHUP(ctx context.Context, reload func()) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			reload()
		}
	}
}
