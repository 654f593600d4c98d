package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/failover"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/internal/gcpace"
	"github.com/cairn-sd/cairn/peer"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// serverParts is a server made and listening (serve), ready to run.
type serverParts struct {
	cfg            serverConfig
	log            *slog.Logger
	nodeID         string
	httpAddr       string // advertised
	httpLn, grpcLn net.Listener
	debugLn        net.Listener   // nil: no --debug-addr
	gcPace         *gcpace.Config // nil: GOGC fixed (daemon.GCPacing)
	gcDesc         string         // the GOGC in force, for the log
	sec            securityConfig
	st             *store.Store
	hn             *health.Node
	keeper         *tablefile.Keeper
	hist           *history.History
	peers          *peer.Peers
	signal         *failover.Signal // nil: no --failover-signal
	ds             *dnsserver.Server
	xs             *xdsserver.Server
	gs             *grpc.Server
	srv            *http.Server
	ready          *readiness
}

// readiness is the API's Ready: ready means serving, DNS and xDS having
// a table to answer from (SPEC §6), fresh or kept on disk, until a
// SIGTERM's lame duck.
type readiness struct {
	stopping atomic.Bool
	publish  *publish.Node
	maxStale time.Duration
}

func (r *readiness) check() error {
	if r.stopping.Load() {
		return errors.New("shutting down")
	}
	return r.publish.Serving(r.maxStale)
}

// writeAddrs writes AddrsFile, the addresses the server bound, and logs
// the start. A server whose data disk is full must still start, and serve
// DNS from the table it kept (docs/decisions.md, "A full data disk"): a
// failed write is logged, and the file of an earlier run, whose ports may
// be others, removed.
func (p *serverParts) writeAddrs() {
	dnsUDP, _ := p.ds.Addrs()
	addrs, _ := json.Marshal(map[string]string{"node_id": p.nodeID, "http": p.httpAddr, "raft": p.st.RaftAddr(), "dns": dnsUDP.String(),
		"grpc": p.grpcLn.Addr().String()})
	path := filepath.Join(p.cfg.DataDir, AddrsFile)
	if err := durable.WriteFile(path, addrs, 0o600); err != nil {
		if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			err = errors.Join(err, rmErr)
		}
		p.log.Error("writing the addresses the server bound; serving without the file", "file", path, "err", err)
	}
	p.log.Info("cairn server started", "http", p.httpAddr, "raft", p.st.RaftAddr(), "dns", dnsUDP.String(), "grpc", p.grpcLn.Addr().String(),
		"data_dir", p.cfg.DataDir, "dev", p.cfg.Dev, "gc_percent", p.gcDesc, "open_files_limit", daemon.OpenFilesLimit())
}

// run runs every part under one errgroup until ctx is done or one
// fails, then shuts down in order (shutdown).
func (p *serverParts) run(ctx context.Context) error {
	// The store's loop has a context of its own: it keeps checkpointing
	// renewals and following leadership until HTTP has drained.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.st.Run(runCtx) })
	g.Go(func() error { return p.hn.Run(runCtx) })
	g.Go(func() error { return p.keeper.Run(runCtx) })
	g.Go(func() error { return p.hist.Run(runCtx) })
	g.Go(func() error { return p.peers.Run(runCtx) })
	if p.signal != nil {
		g.Go(func() error { return p.signal.Run(runCtx) })
	}
	g.Go(func() error { return p.ds.Run(runCtx) })
	g.Go(func() error { return p.xs.Run(runCtx) })
	g.Go(func() error {
		if err := p.gs.Serve(p.grpcLn); err != nil {
			return fmt.Errorf("serving gRPC: %w", err)
		}
		return nil
	})
	if tlsf := p.sec.files; tlsf != nil {
		g.Go(func() error { return tlsf.Run(runCtx) })
		g.Go(func() error { return daemon.ReloadOnHUP(runCtx, tlsf, p.log) })
	}
	if gp := p.gcPace; gp != nil {
		g.Go(func() error { return gcpace.Run(runCtx, *gp) })
	}
	if p.debugLn != nil {
		g.Go(func() error { return daemon.ServeDebug(gctx, p.debugLn) })
	}
	if f := p.cfg.DNSCookieSecretFile; f != "" {
		g.Go(func() error { return daemon.OnHUP(runCtx, func() { p.reloadCookieSecrets(f) }) })
	}
	g.Go(func() error {
		if err := p.sec.serveHTTP(p.srv, p.httpLn); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		defer stopRun()
		p.shutdown()
		return nil
	})
	if p.cfg.Join != "" {
		g.Go(func() error { return p.join(gctx) })
	}
	return g.Wait()
}

// shutdown, in order: not ready; lame duck; hand leadership over with
// renewals replicated (writes arriving from here on are forwarded to the
// new leader); drain HTTP; stop the xDS streams. The caller then stops
// the store's loop, and serve's deferred Close stops raft.
func (p *serverParts) shutdown() {
	p.ready.stopping.Store(true)
	p.log.Info("shutting down", "lame_duck_s", p.cfg.LameDuck.Seconds())
	t := time.NewTimer(p.cfg.LameDuck)
	<-t.C
	hctx, hcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer hcancel()
	if err := p.st.Handoff(hctx); err != nil {
		p.log.Warn("handing leadership over", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(sctx); err != nil {
		p.log.Warn("HTTP connections still open at shutdown", "err", err)
	}
	// xDS streams never end by themselves: close them, and let their
	// clients reconnect to another server.
	p.gs.Stop()
}

// reloadCookieSecrets re-reads --dns-cookie-secret-file, on SIGHUP.
func (p *serverParts) reloadCookieSecrets(f string) {
	prev, err := p.ds.LoadCookieSecrets(f)
	if err != nil {
		p.log.Error("SIGHUP: reloading the DNS cookie secrets: still using the previous ones", "err", fmt.Errorf("--dns-cookie-secret-file: %w", err))
		return
	}
	p.log.Info("SIGHUP: DNS cookie secrets reloaded", "file", f, "previous", prev)
}

// join asks --join's server to add this one to the cluster, retrying
// until it does or ctx is done.
func (p *serverParts) join(ctx context.Context) error {
	cl, err := p.sec.dial(p.cfg.Join, p.cfg.Token)
	if err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	m := wire.Member{NodeID: p.nodeID, RaftAddr: p.st.RaftAddr(), HTTPAddr: p.httpAddr, Region: p.cfg.Region, Zone: p.cfg.Zone}
	err = cl.JoinRetry(ctx, m, func(err error) { p.log.Info("joining: retrying", "via", p.cfg.Join, "err", err) })
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p.log.Info("joined the cluster", "via", p.cfg.Join)
	return nil
}
