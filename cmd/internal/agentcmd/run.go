package agentcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

// initialSlots is the size of the agent's first status tables.
const initialSlots = 256

// run wires the agent: its status table, the agent that fills it,
// the DNS server that reads it, and the HTTP API.
func run(ctx context.Context, cfg config, logw interface{ Write([]byte) (int, error) }) error {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel}))
	dir, cleanup, err := daemon.DataDir(cfg.DataDir, "cairn-agent-dev-")
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.DataDir = dir
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	if cfg.NodeID, err = daemon.Identity(cfg.NodeID, cfg.DataDir); err != nil {
		return err
	}
	log = log.With("node", cfg.NodeID)
	// The agent's heap is mostly what it holds, and it makes little
	// garbage between responses: at GOGC 25 it keeps 1.4 × that
	// resident instead of 2.2 × (docs/decisions.md, "A lean agent
	// binary").
	_, gcDesc := daemon.GCPacing(cfg.GCPercent, 0, os.Getenv)
	reg := daemon.NewRegistry()

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening for HTTP on %q: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	var debugLn net.Listener
	if cfg.DebugAddr != "" {
		if debugLn, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return fmt.Errorf("listening on --debug-addr %q: %w", cfg.DebugAddr, err)
		}
		defer debugLn.Close()
	}
	// The table grows with the views held, from initialSlots:
	// an agent holds what its machine asks for, often a few hundred
	// instances, and a table of its most (tens of thousands of slots,
	// three times) would be most of its memory.
	table, err := status.New(status.Config{Capacity: cfg.TableCapacity, Initial: min(initialSlots, cfg.TableCapacity)})
	if err != nil {
		return err
	}
	var (
		tlsf *certs.Files
		dial []grpc.DialOption
	)
	if cfg.TLS.On() {
		if tlsf, err = cfg.TLS.Load(log, reg); err != nil {
			return err
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(tlsf.ClientConfig(""))))
	}
	ag, err := agent.New(agent.Config{Servers: cfg.Servers, Services: cfg.Services, NodeID: cfg.NodeID,
		Region: cfg.Region, Zone: cfg.Zone, Token: cfg.Token, Path: filepath.Join(cfg.DataDir, ViewsFile),
		Table: table, StaleAfter: cfg.StaleAfter, Logger: log, Registerer: reg, DialOptions: dial})
	if err != nil {
		return err
	}
	// The zone's name server is the agent itself, for the machine it
	// serves: its DNS listener's address (127.0.0.1 when wildcard).
	zone, err := zones.New(zones.Config{Domain: cfg.Domain,
		NSAddrs: map[string][]netip.Addr{"ns." + cfg.Domain: {zones.NSAddr(cfg.DNSAddr)}}})
	if err != nil {
		return fmt.Errorf("DNS zone: %w", err)
	}
	ds, err := dnsserver.New(dnsserver.Config{Zone: zone, Table: table, Addr: cfg.DNSAddr,
		Own: dnsserver.Place{Region: cfg.Region, Zone: cfg.Zone}, StaleAfter: cfg.StaleAfter, MaxStale: cfg.MaxStale,
		LastSync: ag.LastSync, Restored: ag.Restored, Unheld: ag.Unheld, Revision: ag.ViewRevision, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	if err := ds.Listen(); err != nil {
		return err
	}
	srv := daemon.NewHTTPServer(ag.Handler(reg), log)
	dnsUDP, _ := ds.Addrs()
	addrs, _ := json.Marshal(map[string]string{"node_id": cfg.NodeID, "http": ln.Addr().String(), "dns": dnsUDP.String()})
	if err := durable.WriteFile(filepath.Join(cfg.DataDir, AddrsFile), addrs, 0o600); err != nil {
		return err
	}
	log.Info("cairn agent started", "http", ln.Addr().String(), "dns", dnsUDP.String(), "servers", cfg.Servers,
		"data_dir", cfg.DataDir, "restored", ag.Restored(), "gc_percent", gcDesc, "open_files_limit", daemon.OpenFilesLimit())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ag.Run(gctx) })
	if tlsf != nil {
		g.Go(func() error { return tlsf.Run(gctx) })
		g.Go(func() error { return daemon.ReloadOnHUP(gctx, tlsf, log) })
	}
	g.Go(func() error { return ds.Run(gctx) })
	if debugLn != nil {
		g.Go(func() error { return daemon.ServeDebug(gctx, debugLn) })
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}
