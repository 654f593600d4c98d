package cmd

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
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/zones"
)

// agentInitialSlots is the size of the agent's first status tables.
const agentInitialSlots = 256

// Files in the agent's data dir.
const (
	AgentViewsFile = "views.cairn"
	AgentAddrsFile = "agent-addrs.json"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the client-side agent: views of the services this machine asks about, kept on disk, served over DNS",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "server", Required: true, Usage: "xDS address (HOST:PORT) of a cairn server, its --grpc-addr (repeatable: tried in turn)"},
			&cli.StringFlag{Name: "dns-addr", Value: "127.0.0.1:8054", Usage: "DNS (UDP and TCP)"},
			&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:8490", Usage: "/v1/agent/status, /metrics, /healthz, /readyz"},
			&cli.StringFlag{Name: "data-dir", EnvVars: []string{"CAIRN_AGENT_DATA_DIR"}, Usage: "views kept on disk and node id (required without --dev)"},
			&cli.BoolFlag{Name: "dev", Usage: "data in a temporary folder"},
			&cli.StringFlag{Name: "domain", Value: "cairn.internal.", Usage: "DNS zone, the servers'"},
			&cli.StringFlag{Name: "region", Usage: "this node's region"},
			&cli.StringFlag{Name: "zone", Usage: "this node's zone"},
			&cli.StringFlag{Name: "node-id", DefaultText: "a random id kept in the data dir", Usage: "xDS node id"},
			&cli.StringSliceFlag{Name: "service", Usage: "NS/SVC to subscribe to from the start (repeatable); others are subscribed on their first query"},
			&cli.DurationFlag{Name: "stale-after", Value: 5 * time.Second, Usage: "answers are marked stale when the views are older (no server stream)"},
			&cli.DurationFlag{Name: "max-stale", Value: 24 * time.Hour, Usage: "past this, DNS answers SERVFAIL"},
			&cli.IntFlag{Name: "table-capacity", Value: 1 << 16, Usage: "most instances the agent holds: its status table starts small and doubles, up to this, as its views grow"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"CAIRN_TLS_CA"}, Usage: "TLS to the servers: the CA bundle their certificates are verified with (they must name the --server host)"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"CAIRN_TLS_CERT"}, Usage: "the certificate the agent presents (cairn tls cert create --client)"},
			&cli.StringFlag{Name: "tls-key", EnvVars: []string{"CAIRN_TLS_KEY"}, Usage: "the certificate's key"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := agentConfigFromFlags(c)
			if err != nil {
				return cli.Exit(err, exitUsage)
			}
			if err := runAgent(c.Context, cfg, c.App.ErrWriter); err != nil {
				return cli.Exit(err, exitError)
			}
			return nil
		},
	}
}

type agentConfig struct {
	Servers              []string
	DNSAddr, HTTPAddr    string
	DataDir              string
	Dev                  bool
	Domain, Region, Zone string
	NodeID, Token        string
	Services             []string
	StaleAfter, MaxStale time.Duration
	TableCapacity        int
	LogLevel             slog.Level
	TLS                  tlsFiles
}

// agentConfigFromFlags parses and checks the flags; it touches nothing.
func agentConfigFromFlags(c *cli.Context) (agentConfig, error) {
	cfg := agentConfig{Servers: c.StringSlice("server"), DNSAddr: c.String("dns-addr"), HTTPAddr: c.String("http-addr"),
		DataDir: c.String("data-dir"), Dev: c.Bool("dev"), Domain: c.String("domain"), Region: c.String("region"),
		Zone: c.String("zone"), NodeID: c.String("node-id"), Token: c.String("token"), Services: c.StringSlice("service"),
		StaleAfter: c.Duration("stale-after"), MaxStale: c.Duration("max-stale"), TableCapacity: c.Int("table-capacity"),
		TLS: tlsFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}}
	if cfg.DataDir == "" && !cfg.Dev {
		return cfg, errors.New("--data-dir is required (or --dev, for a temporary one)")
	}
	for _, f := range []struct{ name, v string }{{"dns-addr", cfg.DNSAddr}, {"http-addr", cfg.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			return cfg, fmt.Errorf("--%s: %q is not HOST:PORT", f.name, f.v)
		}
	}
	for _, s := range cfg.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return cfg, fmt.Errorf("--server: %q is not HOST:PORT", s)
		}
	}
	for _, s := range cfg.Services {
		ns, svc, ok := strings.Cut(s, "/")
		if !ok {
			return cfg, fmt.Errorf("--service: %q is not NAMESPACE/SERVICE", s)
		}
		for _, l := range []string{ns, svc} {
			if err := wire.CheckLabel("--service", l); err != nil {
				return cfg, err
			}
		}
	}
	for _, f := range []struct{ name, v string }{{"region", cfg.Region}, {"zone", cfg.Zone}} {
		if f.v != "" {
			if err := wire.CheckLabel("--"+f.name, f.v); err != nil {
				return cfg, err
			}
		}
	}
	if cfg.StaleAfter <= 0 || cfg.MaxStale <= cfg.StaleAfter {
		return cfg, fmt.Errorf("--stale-after (%s) must be positive and below --max-stale (%s)", cfg.StaleAfter, cfg.MaxStale)
	}
	if cfg.TableCapacity < 1 || cfg.TableCapacity > status.MaxCapacity {
		return cfg, fmt.Errorf("--table-capacity: %d is out of range [1, %d]", cfg.TableCapacity, status.MaxCapacity)
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return cfg, fmt.Errorf("--log-level: %w", err)
	}
	if cfg.TLS.on() {
		if _, err := cfg.TLS.load(nil, nil); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// runAgent wires the agent: its status table, the agent that fills it,
// the DNS server that reads it, and the HTTP API.
func runAgent(ctx context.Context, cfg agentConfig, logw interface{ Write([]byte) (int, error) }) error {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel}))
	dir, cleanup, err := dataDir(cfg.DataDir, "cairn-agent-dev-")
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.DataDir = dir
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	if cfg.NodeID, err = identity(cfg.NodeID, cfg.DataDir); err != nil {
		return err
	}
	log = log.With("node", cfg.NodeID)
	reg := newRegistry()

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening for HTTP on %q: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	// The table grows with the views held, from agentInitialSlots:
	// an agent holds what its machine asks for, often a few hundred
	// instances, and a table of its most (tens of thousands of slots,
	// three times) would be most of its memory.
	table, err := status.New(status.Config{Capacity: cfg.TableCapacity, Initial: min(agentInitialSlots, cfg.TableCapacity)})
	if err != nil {
		return err
	}
	var (
		tlsf *certs.Files
		dial []grpc.DialOption
	)
	if cfg.TLS.on() {
		if tlsf, err = cfg.TLS.load(log, reg); err != nil {
			return err
		}
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(tlsf.ClientConfig(""))))
	}
	ag, err := agent.New(agent.Config{Servers: cfg.Servers, Services: cfg.Services, NodeID: cfg.NodeID,
		Region: cfg.Region, Zone: cfg.Zone, Token: cfg.Token, Path: filepath.Join(cfg.DataDir, AgentViewsFile),
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
		LastSync: ag.LastSync, Restored: ag.Restored, Unheld: ag.Unheld, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	if err := ds.Listen(); err != nil {
		return err
	}
	srv := newHTTPServer(ag.Handler(reg), log)
	dnsUDP, _ := ds.Addrs()
	addrs, _ := json.Marshal(map[string]string{"node_id": cfg.NodeID, "http": ln.Addr().String(), "dns": dnsUDP.String()})
	if err := durable.WriteFile(filepath.Join(cfg.DataDir, AgentAddrsFile), addrs, 0o600); err != nil {
		return err
	}
	log.Info("cairn agent started", "http", ln.Addr().String(), "dns", dnsUDP.String(), "servers", cfg.Servers,
		"data_dir", cfg.DataDir, "restored", ag.Restored(), "open_files_limit", openFilesLimit())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ag.Run(gctx) })
	if tlsf != nil {
		g.Go(func() error { return tlsf.Run(gctx) })
		g.Go(func() error { return reloadOnHUP(gctx, tlsf, log) })
	}
	g.Go(func() error { return ds.Run(gctx) })
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
