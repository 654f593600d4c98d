// Package agentcmd is the agent's command: its flags, their checks, and
// the wiring of its parts (the agent filling a status table, the DNS
// server reading it, the HTTP API). `cairn agent` (package cmd) and the
// agent's own binary, cairn-agent (cmd/cairn-agent), both run it, so
// that the two take the same flags and behave alike; it links none of
// the server (cmd/deps_test.go), which is what keeps cairn-agent lean.
// Like cmd, it holds no logic of its own.
package agentcmd

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Files in the agent's data dir.
const (
	ViewsFile = "views.cairn"
	AddrsFile = "agent-addrs.json"
)

// Command is `cairn agent`. Its --token is cairn's global flag (see
// TokenFlag).
func Command() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the client-side agent: views of the services this machine asks about, kept on disk, served over DNS",
		Flags: flags(),
		Action: func(c *cli.Context) error {
			cfg, err := configFromFlags(c)
			if err != nil {
				return cli.Exit(err, daemon.ExitUsage)
			}
			if err := run(c.Context, cfg, c.App.ErrWriter); err != nil {
				return cli.Exit(err, daemon.ExitError)
			}
			return nil
		},
	}
}

// TokenFlag is --token: cairn's global flag, which `cairn agent` reads,
// and one of cairn-agent's own.
func TokenFlag() cli.Flag {
	return &cli.StringFlag{Name: "token", EnvVars: []string{"CAIRN_TOKEN"}, Usage: "bearer token"}
}

func flags() []cli.Flag {
	return []cli.Flag{
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
		daemon.GCPercentFlag(),
		daemon.DebugAddrFlag(),
	}
}

// config is what the flags say.
type config struct {
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
	TLS                  daemon.TLSFiles
	DebugAddr            string
	GCPercent            int
}

// configFromFlags parses and checks the flags; it touches nothing.
func configFromFlags(c *cli.Context) (config, error) {
	cfg := config{Servers: c.StringSlice("server"), DNSAddr: c.String("dns-addr"), HTTPAddr: c.String("http-addr"),
		DataDir: c.String("data-dir"), Dev: c.Bool("dev"), Domain: c.String("domain"), Region: c.String("region"),
		Zone: c.String("zone"), NodeID: c.String("node-id"), Token: c.String("token"), Services: c.StringSlice("service"),
		StaleAfter: c.Duration("stale-after"), MaxStale: c.Duration("max-stale"), TableCapacity: c.Int("table-capacity"),
		TLS:       daemon.TLSFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")},
		DebugAddr: c.String("debug-addr"), GCPercent: c.Int("gc-percent")}
	if cfg.DataDir == "" && !cfg.Dev {
		return cfg, errors.New("--data-dir is required (or --dev, for a temporary one)")
	}
	for _, f := range []struct{ name, v string }{{"dns-addr", cfg.DNSAddr}, {"http-addr", cfg.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			return cfg, fmt.Errorf("--%s: %q is not HOST:PORT", f.name, f.v)
		}
	}
	if err := daemon.CheckDebugAddr(cfg.DebugAddr); err != nil {
		return cfg, err
	}
	if err := daemon.CheckGCPercent(cfg.GCPercent, 0); err != nil {
		return cfg, err
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
	if cfg.TLS.On() {
		if _, err := cfg.TLS.Load(nil, nil); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
