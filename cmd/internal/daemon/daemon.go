// Package daemon is what cairn's long-running commands (server, agent)
// set up alike: the data dir and node id, the metrics registry, the HTTP
// server's timeouts, TLS files reloaded on SIGHUP, the --debug-addr
// profiles, and the exit codes a command's error maps to. Both `cairn`
// (package cmd) and the agent's own binary (cmd/cairn-agent) import it,
// so it links nothing of the server: it holds no logic of a stage.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/nodeid"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the request failed
	ExitUsage = 2 // bad flags or arguments
)

// ExitCode maps what a command line app returned to the process exit
// code, printing the error once on stderr after prog's name.
func ExitCode(err error, stderr io.Writer, prog string) int {
	if err == nil {
		return ExitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, prog+":", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, prog+":", err)
	return ExitUsage // urfave's own parse errors
}

// DataDir returns dir, or with none (--dev) a new temporary folder named
// after prefix, and the function that removes it when the command ends.
func DataDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// Identity returns given, or the random node id kept in dir (made the
// first time).
func Identity(given, dir string) (string, error) {
	if given != "" {
		return given, nil
	}
	return nodeid.LoadOrCreate(dir)
}

// NewRegistry returns a metrics registry with the Go runtime's and the
// process's collectors. The Go collector adds the scheduler's metrics to
// its defaults: go_sched_latencies_seconds, how long runnable goroutines
// waited for a CPU, is what starves raft's heartbeats when a fan-out
// saturates the cores (docs/operating.md).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	goc := collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler))
	reg.MustRegister(goc, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// OpenFilesLimit is the process's open-files limit (RLIMIT_NOFILE, soft),
// logged at start (field notes O5: every xDS stream, API connection and
// TCP DNS connection holds a file; process_open_fds and process_max_fds
// are on /metrics). The Go runtime raises the soft limit to the hard one
// at start, so this is the hard limit the process was given. 0 if it
// cannot be read.
func OpenFilesLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}

// NewHTTPServer returns the HTTP server of h, with the timeouts every
// cairn listener has, logging its own errors as warnings.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// TLSFiles is what --tls-cert, --tls-key and --tls-ca name.
type TLSFiles struct{ Cert, Key, CA string }

// On reports whether TLS was asked for.
func (t TLSFiles) On() bool { return t != TLSFiles{} }

// Load reads and checks the files (see certs.Load); log and reg may be
// nil when only checking them.
func (t TLSFiles) Load(log *slog.Logger, reg prometheus.Registerer) (*certs.Files, error) {
	return certs.Load(certs.Config{CertFile: t.Cert, KeyFile: t.Key, CAFile: t.CA,
		CertFlag: "--tls-cert", KeyFlag: "--tls-key", CAFlag: "--tls-ca", Logger: log, Registerer: reg})
}

// ReloadOnHUP re-reads f on every SIGHUP until ctx is done (besides its
// own polling of the files, run by the caller).
func ReloadOnHUP(ctx context.Context, f *certs.Files, log *slog.Logger) error {
	return OnHUP(ctx, func() {
		if err := f.Reload(); err != nil {
			log.Error("SIGHUP: reloading certificates: still using the previous ones", "err", err)
		} else {
			log.Info("SIGHUP: certificates checked", "not_after", f.NotAfter().UTC().Format(time.RFC3339))
		}
	})
}

// OnHUP calls reload on every SIGHUP until ctx is done.
func OnHUP(ctx context.Context, reload func()) error {
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

// IsLoopback reports whether hostport listens on loopback only.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
