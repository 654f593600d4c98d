package cmd

import (
	"context"
	"crypto/tls"
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
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/internal/ui"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/zones"
)

// AddrsFile is written to the data dir once the server listens: the
// addresses it actually bound (useful with port 0).
const AddrsFile = "addrs.json"

// TableFile, in the data dir, keeps the last status table the server
// published, served (stale) after a restart until the store catches up.
const TableFile = "table.cairn"

// XDSSubscribersFile is the file in the data dir that keeps the count of
// xDS streams, so that after a restart they are admitted gradually.
const XDSSubscribersFile = "xds-subscribers.json"

// serverConfig is everything `cairn server` was told.
type serverConfig struct {
	Dev            bool
	DataDir        string
	NodeID         string
	HTTPAddr       string
	RaftAddr       string
	DNSAddr        string
	GRPCAddr       string
	Domain         string
	Region, Zone   string
	Join           string
	Token          string
	ProbeToken     string // sends probe results to the leader; defaults to Token
	StaleAfter     time.Duration
	MaxStale       time.Duration
	LameDuck       time.Duration
	Tokens         []acl.Token
	NamespaceCIDRs map[string][]netip.Prefix
	Subnets        map[netip.Prefix]string
	ECSTrusted     []netip.Prefix
	LogLevel       slog.Level
	AllowLoopback  bool
	ProbeWorkers   int
	ProbeCapacity  int
	TableCapacity  int
	EvalInterval   time.Duration
	// LoadReportInterval is how often xDS clients are asked for their
	// load reports (LRS).
	LoadReportInterval time.Duration
	// XDSLimits are the --xds-max-* caps on what one client may cost.
	XDSLimits  xdsserver.Limits
	ZoneFile   string
	TLS        tlsFiles
	Plaintext  bool // --insecure-plaintext
	DNSRRL     dnsserver.RRLConfig
	DNSCookies dnsserver.CookieConfig
	// DNSCookieSecretFile is --dns-cookie-secret-file, re-read on SIGHUP.
	DNSCookieSecretFile string
}

func serverCommand() *cli.Command {
	return &cli.Command{
		Name:  "server",
		Usage: "run a server: store, probes, health evaluator, status table, DNS, xDS and API",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "dev", Usage: "single node, bootstrapped, data in a temporary folder, loopback endpoints allowed, ACLs off unless configured"},
			&cli.StringFlag{Name: "data-dir", EnvVars: []string{"CAIRN_DATA_DIR"}, Usage: "raft log, snapshots and node id (required without --dev)"},
			&cli.StringFlag{Name: "node-id", DefaultText: "a random id kept in the data dir", Usage: "raft node id"},
			&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:8480", Usage: "API, /metrics, /healthz, /readyz"},
			&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:8482", Usage: "raft transport; peers must reach it"},
			&cli.StringFlag{Name: "dns-addr", Value: "127.0.0.1:8053", Usage: "DNS (UDP and TCP)"},
			&cli.StringFlag{Name: "grpc-addr", Value: "127.0.0.1:8481", Usage: "xDS over gRPC"},
			&cli.StringFlag{Name: "domain", Value: "cairn.internal.", Usage: "DNS zone"},
			&cli.StringFlag{Name: "region", Usage: "this server's region"},
			&cli.StringFlag{Name: "zone", Usage: "this server's zone"},
			&cli.StringFlag{Name: "join", Usage: "HTTP address (HOST:PORT) of a member of the cluster to join"},
			&cli.DurationFlag{Name: "stale-after", Value: 5 * time.Second, Usage: "answers are marked stale when the store view is older"},
			&cli.DurationFlag{Name: "max-stale", Value: 24 * time.Hour, Usage: "past this, DNS answers SERVFAIL"},
			&cli.DurationFlag{Name: "lame-duck", Value: time.Second, Usage: "on SIGTERM, keep serving this long while /readyz says not ready"},
			&cli.StringFlag{Name: "acl-file", Usage: "YAML file of tokens; turns ACLs on"},
			&cli.StringFlag{Name: "acl-bootstrap-token", EnvVars: []string{"CAIRN_ACL_BOOTSTRAP_TOKEN"}, Usage: "an admin token; turns ACLs on"},
			&cli.StringFlag{Name: "probe-token", EnvVars: []string{"CAIRN_PROBE_TOKEN"}, DefaultText: "--token", Usage: "token this server sends its probe results to the leader with: a prober token whose node is this server's --node-id"},
			&cli.StringSliceFlag{Name: "namespace-cidr", Usage: "NS=CIDR: endpoints of NS must fall in CIDR (repeatable)"},
			&cli.StringSliceFlag{Name: "subnet", Usage: "CIDR=REGION/ZONE: locality of DNS clients in CIDR (repeatable)"},
			&cli.StringSliceFlag{Name: "ecs-trusted", Usage: "CIDR whose EDNS Client Subnet is trusted (repeatable)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error (debug-4 adds raft's trace records)"},
			&cli.BoolFlag{Name: "allow-loopback-endpoints", Usage: "accept loopback instance addresses (single-host setups and tests; --dev implies it)"},
			&cli.StringFlag{Name: "zone-file", Usage: "RFC 1035 file of static records for names outside the service tree"},
			&cli.IntFlag{Name: "probe-workers", Value: probe.DefaultWorkers, Usage: "concurrent health checks on this node (0: this node does not probe)"},
			&cli.IntFlag{Name: "probe-capacity", Value: probe.DefaultCapacity, Usage: "most probe targets this node takes (its batch size)"},
			&cli.IntFlag{Name: "table-capacity", Value: status.DefaultCapacity, Usage: "status table slots: most instances this node publishes"},
			&cli.DurationFlag{Name: "eval-interval", Value: health.DefaultInterval, Usage: "health evaluation and status table cadence"},
			&cli.DurationFlag{Name: "load-report-interval", Value: xdsserver.DefaultLoadReportInterval, Usage: "how often xDS clients (Envoy, gRPC) are asked for load reports over LRS, taken as caller-observed outcomes: 1s to 10s (more often costs the leader a report per subscriber per interval)"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"CAIRN_TLS_CERT"}, Usage: "this server's certificate (cairn tls cert create --server): TLS on the API and gRPC, mutual TLS on raft and between servers"},
			&cli.StringFlag{Name: "tls-key", EnvVars: []string{"CAIRN_TLS_KEY"}, Usage: "the certificate's key"},
			&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"CAIRN_TLS_CA"}, Usage: "the CA bundle peers' certificates are verified with (old and new CA during a rotation); re-read on SIGHUP and when changed, with the certificate and key"},
			&cli.BoolFlag{Name: "insecure-plaintext", Usage: "allow listeners beyond loopback without TLS: tokens and raft cross the network in the clear"},
			&cli.StringFlag{Name: "dns-rrl", Value: "auto", Usage: "DNS response-rate limiting per source prefix: auto (on unless --dns-addr is loopback), on or off"},
			&cli.IntFlag{Name: "dns-rrl-rate", DefaultText: fmt.Sprint(dnsserver.DefaultRRLRate), Usage: "UDP responses a second per source prefix (giving it turns --dns-rrl on)"},
			&cli.IntFlag{Name: "dns-rrl-slip", Value: dnsserver.DefaultRRLSlip, Usage: "every Nth limited response is sent truncated (TC: the client retries over TCP), the others dropped; 0 drops them all"},
			&cli.StringSliceFlag{Name: "dns-rrl-exempt", Usage: "CIDR never rate-limited, e.g. your resolvers (repeatable)"},
			&cli.StringFlag{Name: "dns-cookies", Value: "auto", Usage: "DNS cookies (RFC 7873; a valid one exempts from rate limiting): auto (on unless --dns-addr is loopback), on or off"},
			&cli.StringFlag{Name: "dns-cookie-secret-file", DefaultText: "a random secret per process", Usage: "file of the server-cookie secret, 32 hex digits, and optionally the previous one on a second line (share it across servers; re-read on SIGHUP, to roll it)"},
		}, xdsLimitFlags()...),
		Action: func(c *cli.Context) error {
			cfg, err := serverConfigFromFlags(c)
			if err != nil {
				return cli.Exit(err, exitUsage)
			}
			if err := serve(c.Context, cfg, c.App.ErrWriter); err != nil {
				return cli.Exit(err, exitError)
			}
			return nil
		},
	}
}

// serverConfigFromFlags parses and checks the flags; it touches nothing.
func serverConfigFromFlags(c *cli.Context) (serverConfig, error) {
	cfg := serverConfig{
		Dev: c.Bool("dev"), DataDir: c.String("data-dir"), NodeID: c.String("node-id"),
		HTTPAddr: c.String("http-addr"), RaftAddr: c.String("raft-addr"), DNSAddr: c.String("dns-addr"),
		GRPCAddr: c.String("grpc-addr"), Domain: c.String("domain"), Region: c.String("region"),
		Zone: c.String("zone"), Join: c.String("join"), Token: c.String("token"), ProbeToken: c.String("probe-token"),
		StaleAfter: c.Duration("stale-after"), MaxStale: c.Duration("max-stale"), LameDuck: c.Duration("lame-duck"),
		AllowLoopback: c.Bool("dev") || c.Bool("allow-loopback-endpoints"),
		ProbeWorkers:  c.Int("probe-workers"), ProbeCapacity: c.Int("probe-capacity"),
		TableCapacity: c.Int("table-capacity"), EvalInterval: c.Duration("eval-interval"), LoadReportInterval: c.Duration("load-report-interval"), ZoneFile: c.String("zone-file"),
		NamespaceCIDRs: map[string][]netip.Prefix{}, Subnets: map[netip.Prefix]string{},
		TLS:       tlsFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")},
		Plaintext: c.Bool("insecure-plaintext"),
	}
	if cfg.DataDir == "" && !cfg.Dev {
		return cfg, errors.New("--data-dir is required (or --dev for a throw-away node)")
	}
	if cfg.NodeID != "" {
		if err := wire.CheckLabel("--node-id", cfg.NodeID); err != nil {
			return cfg, err
		}
	}
	for _, f := range []struct{ name, v string }{{"http-addr", cfg.HTTPAddr}, {"raft-addr", cfg.RaftAddr}, {"dns-addr", cfg.DNSAddr}, {"grpc-addr", cfg.GRPCAddr}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			return cfg, fmt.Errorf("--%s: %q is not HOST:PORT", f.name, f.v)
		}
	}
	if cfg.Join != "" {
		if cfg.Dev {
			return cfg, errors.New("--dev runs a single node; it cannot --join a cluster")
		}
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(cfg.Join, "http://")); err != nil {
			return cfg, fmt.Errorf("--join: %q is not HOST:PORT", cfg.Join)
		}
	}
	if !strings.HasSuffix(cfg.Domain, ".") {
		cfg.Domain += "."
	}
	for _, f := range []struct{ name, v string }{{"region", cfg.Region}, {"zone", cfg.Zone}} {
		if f.v != "" {
			if err := wire.CheckLabel("--"+f.name, f.v); err != nil {
				return cfg, err
			}
		}
	}
	if cfg.StaleAfter <= 0 || cfg.MaxStale <= cfg.StaleAfter {
		return cfg, fmt.Errorf("--stale-after (%s) must be positive and --max-stale (%s) longer", cfg.StaleAfter, cfg.MaxStale)
	}
	if f := c.String("acl-file"); f != "" {
		toks, err := acl.LoadFile(f)
		if err != nil {
			return cfg, fmt.Errorf("--acl-file: %w", err)
		}
		cfg.Tokens = toks
	}
	if t := c.String("acl-bootstrap-token"); t != "" {
		cfg.Tokens = append(cfg.Tokens, acl.Token{Secret: t, Scope: acl.Admin})
	}
	if _, err := acl.New(acl.Config{Enabled: true, Tokens: cfg.Tokens}); err != nil {
		return cfg, fmt.Errorf("--acl-file, --acl-bootstrap-token: %w", err)
	}
	if cfg.ProbeToken == "" {
		cfg.ProbeToken = cfg.Token
	}
	for _, v := range c.StringSlice("namespace-cidr") {
		ns, cidr, ok := strings.Cut(v, "=")
		p, err := netip.ParsePrefix(cidr)
		if !ok || err != nil || wire.CheckLabel("namespace", ns) != nil {
			return cfg, fmt.Errorf("--namespace-cidr: %q is not NS=CIDR", v)
		}
		cfg.NamespaceCIDRs[ns] = append(cfg.NamespaceCIDRs[ns], p)
	}
	for _, v := range c.StringSlice("subnet") {
		cidr, loc, ok := strings.Cut(v, "=")
		p, err := netip.ParsePrefix(cidr)
		region, zone, ok2 := strings.Cut(loc, "/")
		if !ok || !ok2 || err != nil || wire.CheckLabel("region", region) != nil || wire.CheckLabel("zone", zone) != nil {
			return cfg, fmt.Errorf("--subnet: %q is not CIDR=REGION/ZONE", v)
		}
		cfg.Subnets[p.Masked()] = loc
	}
	for _, v := range c.StringSlice("ecs-trusted") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return cfg, fmt.Errorf("--ecs-trusted: %q is not a CIDR", v)
		}
		cfg.ECSTrusted = append(cfg.ECSTrusted, p)
	}
	switch {
	case cfg.ProbeWorkers < 0 || cfg.ProbeWorkers > 4096:
		return cfg, fmt.Errorf("--probe-workers: %d is not between 0 and 4096", cfg.ProbeWorkers)
	case cfg.ProbeCapacity < 1 || cfg.ProbeCapacity > 1_000_000:
		return cfg, fmt.Errorf("--probe-capacity: %d is not between 1 and 1000000", cfg.ProbeCapacity)
	case cfg.TableCapacity < 1 || cfg.TableCapacity > status.MaxCapacity:
		return cfg, fmt.Errorf("--table-capacity: %d is not between 1 and %d", cfg.TableCapacity, status.MaxCapacity)
	case cfg.EvalInterval < 10*time.Millisecond || cfg.EvalInterval > time.Minute:
		return cfg, fmt.Errorf("--eval-interval: %s is not between 10ms and 1m", cfg.EvalInterval)
	case cfg.LoadReportInterval < time.Second || cfg.LoadReportInterval > xdsserver.DefaultLoadReportInterval:
		// Longer, and callers' reports rarely meet in one outcome window
		// (30 s by default): no quorum forms, and failing windows age out.
		return cfg, fmt.Errorf("--load-report-interval: %s is not between 1s and %s (a third of the default outcome window)",
			cfg.LoadReportInterval, xdsserver.DefaultLoadReportInterval)
	}
	limits, err := xdsLimits(c)
	if err != nil {
		return cfg, err
	}
	cfg.XDSLimits = limits
	if err := cfg.LogLevel.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return cfg, fmt.Errorf("--log-level: %w", err)
	}
	if err := dnsProtection(c, &cfg); err != nil {
		return cfg, err
	}
	if cfg.TLS.on() {
		if cfg.TLS.Cert == "" || cfg.TLS.Key == "" || cfg.TLS.CA == "" {
			return cfg, errors.New("--tls-cert, --tls-key and --tls-ca: give all three or none")
		}
		if _, err := cfg.TLS.load(nil, nil); err != nil {
			return cfg, err
		}
		if cfg.Plaintext {
			return cfg, errors.New("--insecure-plaintext and --tls-cert: choose one")
		}
	} else if !cfg.Plaintext {
		for _, f := range []struct{ name, v string }{{"http-addr", cfg.HTTPAddr}, {"grpc-addr", cfg.GRPCAddr}, {"raft-addr", cfg.RaftAddr}} {
			if !isLoopback(f.v) {
				return cfg, fmt.Errorf("--%s %s is reachable beyond this host, so TLS must be on: pass --tls-cert, --tls-key and --tls-ca (cairn tls --help), or --insecure-plaintext to send tokens and raft in the clear", f.name, f.v)
			}
		}
	}
	if len(cfg.Tokens) == 0 && !cfg.Dev && !isLoopback(cfg.HTTPAddr) {
		return cfg, fmt.Errorf("--http-addr %s is reachable beyond this host, so ACLs must be on: pass --acl-file or --acl-bootstrap-token (or --dev for a throw-away node)", cfg.HTTPAddr)
	}
	return cfg, nil
}

// dnsProtection reads the --dns-rrl* and --dns-cookie* flags. A rate
// given turns rate limiting on, even on loopback, unless --dns-rrl says
// otherwise.
func dnsProtection(c *cli.Context, cfg *serverConfig) error {
	var err error
	if cfg.DNSRRL.Mode, err = dnsserver.ParseMode(c.String("dns-rrl")); err != nil {
		return fmt.Errorf("--dns-rrl: %q is not auto, on or off", c.String("dns-rrl"))
	}
	if cfg.DNSCookies.Mode, err = dnsserver.ParseMode(c.String("dns-cookies")); err != nil {
		return fmt.Errorf("--dns-cookies: %q is not auto, on or off", c.String("dns-cookies"))
	}
	if c.IsSet("dns-rrl-rate") {
		if r := c.Int("dns-rrl-rate"); r < 1 || r > 1_000_000_000 {
			return fmt.Errorf("--dns-rrl-rate: %d is not between 1 and 1000000000", r)
		}
		cfg.DNSRRL.Rate = c.Int("dns-rrl-rate")
		if !c.IsSet("dns-rrl") {
			cfg.DNSRRL.Mode = dnsserver.ModeOn
		}
	}
	switch slip := c.Int("dns-rrl-slip"); {
	case slip < 0 || slip > 100:
		return fmt.Errorf("--dns-rrl-slip: %d is not between 0 and 100", slip)
	case slip == 0:
		cfg.DNSRRL.Slip = dnsserver.NoSlip
	default:
		cfg.DNSRRL.Slip = slip
	}
	for _, v := range c.StringSlice("dns-rrl-exempt") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("--dns-rrl-exempt: %q is not a CIDR", v)
		}
		cfg.DNSRRL.Exempt = append(cfg.DNSRRL.Exempt, p.Masked())
	}
	if f := c.String("dns-cookie-secret-file"); f != "" {
		cur, prev, err := readCookieSecrets(f)
		if err != nil {
			return err
		}
		cfg.DNSCookies.Secret, cfg.DNSCookies.PreviousSecret = cur, prev
		cfg.DNSCookieSecretFile = f
	}
	return nil
}

// readCookieSecrets reads --dns-cookie-secret-file (see
// dnsserver.ParseCookieSecrets); the error names the flag and the file.
func readCookieSecrets(path string) (cur, prev []byte, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--dns-cookie-secret-file: %w", err)
	}
	cur, prev, err = dnsserver.ParseCookieSecrets(b)
	if err != nil {
		return nil, nil, fmt.Errorf("--dns-cookie-secret-file %s: %w", path, err)
	}
	return cur, prev, nil
}

// isLoopback reports whether hostport listens on loopback only.
func isLoopback(hostport string) bool {
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

// advertised returns the address peers reach a listener bound to bound
// on: bound itself, or, for a wildcard host, the raft address's host
// (which must be concrete) with bound's port.
func advertised(bound, raftAddr string) string {
	ap, err := netip.ParseAddrPort(bound)
	if err != nil || !ap.Addr().IsUnspecified() {
		return bound
	}
	host, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return bound
	}
	return net.JoinHostPort(host, fmt.Sprint(ap.Port()))
}

// serve runs one server until ctx is done, then shuts it down in order:
// not ready, lame duck, HTTP, store.
func serve(ctx context.Context, cfg serverConfig, logw interface{ Write([]byte) (int, error) }) error {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel}))
	dir, cleanup, err := dataDir(cfg.DataDir, "cairn-dev-")
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.DataDir = dir
	nodeID, err := identity(cfg.NodeID, cfg.DataDir)
	if err != nil {
		return err
	}
	log = log.With("node", nodeID)
	authz, err := acl.New(acl.Config{Enabled: len(cfg.Tokens) > 0, Tokens: cfg.Tokens})
	if err != nil {
		return err
	}
	if cfg.ProbeWorkers > 0 {
		if err := checkProbeToken(authz, cfg.ProbeToken, nodeID); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening for HTTP on %q: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	httpAddr := advertised(ln.Addr().String(), cfg.RaftAddr)

	reg := newRegistry()
	// With TLS: every listener's config reads the certificates of the
	// moment; calls between servers present this server's certificate and
	// verify the peer's as a server's, whatever address they dial.
	var (
		tlsf      *certs.Files
		peerTLS   *tls.Config // calls to other servers
		newClient = client.New
		peerCheck func(*http.Request) error
		grpcCreds []grpc.ServerOption
		raftTLS   *store.RaftTLS
		serveHTTP = func(srv *http.Server) error { return srv.Serve(ln) }
	)
	if cfg.TLS.on() {
		tlsf, err = cfg.TLS.load(log, reg)
		if err != nil {
			return err
		}
		peerTLS = tlsf.ClientConfig(certs.ServerName)
		newClient = func(addr, token string) (*client.Client, error) { return client.NewTLS(addr, token, peerTLS) }
		peerCheck = func(r *http.Request) error { return certs.PeerIsServer(r.TLS) }
		grpcCreds = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsf.ServerConfig(certs.VerifyIfGiven))),
			// A stream keeps the credentials of its handshake: cycling
			// connections makes a revoked certificate or a retired CA
			// stop working within the hour (field notes T4).
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: time.Hour, MaxConnectionAgeGrace: time.Minute})}
		raftTLS = &store.RaftTLS{Server: tlsf.ServerConfig(certs.RequireServer), Client: peerTLS}
		serveHTTP = func(srv *http.Server) error {
			srv.TLSConfig = tlsf.ServerConfig(certs.VerifyIfGiven)
			return srv.ServeTLS(ln, "", "")
		}
	} else if !isLoopback(cfg.HTTPAddr) || !isLoopback(cfg.GRPCAddr) || !isLoopback(cfg.RaftAddr) {
		log.Warn("PLAINTEXT BEYOND LOOPBACK (--insecure-plaintext): tokens, writes and raft cross the network in the clear, and anyone who reaches the raft port can join the log")
	}

	// Every listener is bound before the store opens (and may bootstrap
	// a cluster on this raft address): a port in use fails the start
	// with nothing written.
	var (
		st *store.Store // the DNS server's LastSync reads them once it runs, after both are made
		hn *health.Node
		a  *api.Server // the xDS server's streams read its tokens once they come, after it is made
		// lrsPush hands the leader what xDS subscribers report, once the
		// store it finds the leader in is open.
		lrsPush = &leaderPush{token: cfg.ProbeToken, newClient: newClient}
	)
	defer lrsPush.close()
	table, err := status.New(status.Config{Capacity: cfg.TableCapacity})
	if err != nil {
		return err
	}
	zone, err := zones.New(zones.Config{Domain: cfg.Domain, StaticFile: cfg.ZoneFile,
		NSAddrs: map[string][]netip.Addr{"ns." + cfg.Domain: {nsAddr(cfg.DNSAddr, cfg.RaftAddr)}}})
	if err != nil {
		return fmt.Errorf("DNS zone: %w", err)
	}
	var subnets []dnsserver.Subnet
	for p, loc := range cfg.Subnets {
		region, zn, _ := strings.Cut(loc, "/")
		subnets = append(subnets, dnsserver.Subnet{Prefix: p, Place: dnsserver.Place{Region: region, Zone: zn}})
	}
	ds, err := dnsserver.New(dnsserver.Config{Zone: zone, Table: table, Addr: cfg.DNSAddr,
		Own: dnsserver.Place{Region: cfg.Region, Zone: cfg.Zone}, Subnets: subnets, ECSTrusted: cfg.ECSTrusted,
		StaleAfter: cfg.StaleAfter, MaxStale: cfg.MaxStale, LastSync: func() time.Time { return hn.Synced() }, Restored: func() bool { return hn.Restored() },
		RRL: cfg.DNSRRL, Cookies: cfg.DNSCookies, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}

	if err := ds.Listen(); err != nil {
		return err
	}
	xs, err := xdsserver.New(xdsserver.Config{Table: table, Logger: log, Registerer: reg,
		SubscribersFile: filepath.Join(cfg.DataDir, XDSSubscribersFile), LoadReportInterval: cfg.LoadReportInterval,
		// A table built from a synced store, or the one kept on disk: never
		// a partial view, which a client would apply.
		Ready: func() bool { return hn.Serving(0) == nil },
		// The DNS server's serve-stale rule: past it, the streams end so
		// that subscribers move to a fresh server.
		StaleAfter: cfg.StaleAfter, LastSync: func() time.Time { return hn.Synced() }, Restored: func() bool { return hn.Restored() },
		Authorizer: func() *acl.Authorizer { return a.Authorizer() }, Limits: cfg.XDSLimits,
		Outcomes: func(ctx context.Context, b wire.OutcomeBatch) error { return lrsPush.outcomes(ctx, hn, b) }})
	if err != nil {
		return err
	}
	grpcLn, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listening for gRPC on %q: %w", cfg.GRPCAddr, err)
	}
	defer grpcLn.Close()
	gs := grpc.NewServer(append(grpcCreds, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		// Subscribers keep idle streams alive with pings; the default
		// policy (one ping per 5 minutes, none without a stream) closes
		// connections whose clients ping more often (field notes X11).
		MinTime: 10 * time.Second, PermitWithoutStream: true,
	}))...)
	xs.Register(gs)
	st, err = store.Open(store.Config{NodeID: nodeID, RaftAddr: cfg.RaftAddr, HTTPAddr: httpAddr,
		Region: cfg.Region, Zone: cfg.Zone, DataDir: cfg.DataDir, Bootstrap: cfg.Join == "", Logger: log, Registerer: reg,
		LeaderRevision: leaderRevision(newClient), RaftTLS: raftTLS})
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing store", "err", err)
		}
	}()

	if !authz.Enabled() {
		log.Warn("ACLS ARE OFF: every caller is an admin. Pass --acl-file or --acl-bootstrap-token to turn them on.")
	}
	pol := addrpolicy.New(addrpolicy.Config{AllowLoopback: cfg.AllowLoopback, Permitted: cfg.NamespaceCIDRs,
		Own: func() []netip.Addr { return ownAddrs(st, httpAddr) }})

	var prober *probe.Prober
	if cfg.ProbeWorkers > 0 {
		// Batches twice per evaluation, so that a check at the
		// evaluation's interval never has two results in one batch (a
		// batch carries each target's latest).
		prober, err = probe.New(probe.Config{Observer: nodeID, Workers: cfg.ProbeWorkers, Capacity: cfg.ProbeCapacity,
			BatchInterval: cfg.EvalInterval / 2, Logger: log, Registerer: reg})
		if err != nil {
			return err
		}
	}
	push := &leaderPush{st: st, token: cfg.ProbeToken, newClient: newClient}
	lrsPush.st = st
	defer push.close()
	tablePath := filepath.Join(cfg.DataDir, TableFile)
	kept, keptErr := tablefile.LoadKept(tablePath)
	switch {
	case keptErr != nil && kept != nil:
		log.Warn("serving the previous copy of the table kept on disk", "err", keptErr)
	case keptErr != nil:
		log.Warn("not serving the table kept on disk", "err", keptErr)
	}
	hn, err = health.New(health.Config{Store: st, Table: table, Prober: prober, Push: push.send,
		Interval: cfg.EvalInterval, Restore: kept, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	keeper, err := tablefile.NewKeeper(tablefile.Config{Path: tablePath, Table: table, Synced: hn.Synced, Logger: log,
		PathGood: kept != nil && keptErr == nil})
	if err != nil {
		return err
	}

	var stopping atomic.Bool
	a, err = api.New(api.Config{Store: st, ACL: authz, Addrs: pol, Health: hn, Table: table, Region: cfg.Region, Zone: cfg.Zone, XDSSubscribers: xs.Subscribers, XDSSummary: xs.SubscribersSummary, GRPCAddr: grpcLn.Addr().String(), UI: ui.Handler(), TLS: tlsf, StaleAfter: cfg.StaleAfter, Started: ds.Started(), Gatherer: reg, Registerer: reg, Logger: log,
		// Ready means serving: DNS and xDS have a table to answer from
		// (SPEC §6), fresh or kept on disk, until a SIGTERM's lame duck.
		Ready: func() error {
			if stopping.Load() {
				return errors.New("shutting down")
			}
			return hn.Serving(cfg.MaxStale)
		}, Peer: peerCheck, ForwardTLS: peerTLS})
	if err != nil {
		return err
	}
	defer a.Close()
	srv := newHTTPServer(a, log)

	dnsUDP, _ := ds.Addrs()
	addrs, _ := json.Marshal(map[string]string{"node_id": nodeID, "http": httpAddr, "raft": st.RaftAddr(), "dns": dnsUDP.String(),
		"grpc": grpcLn.Addr().String()})
	if err := durable.WriteFile(filepath.Join(cfg.DataDir, AddrsFile), addrs, 0o600); err != nil {
		return err
	}
	log.Info("cairn server started", "http", httpAddr, "raft", st.RaftAddr(), "dns", dnsUDP.String(), "grpc", grpcLn.Addr().String(),
		"data_dir", cfg.DataDir, "dev", cfg.Dev, "open_files_limit", openFilesLimit())

	// The store's loop has a context of its own: it keeps checkpointing
	// renewals and following leadership until HTTP has drained.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return st.Run(runCtx) })
	g.Go(func() error { return hn.Run(runCtx) })
	g.Go(func() error { return keeper.Run(runCtx) })
	g.Go(func() error { return ds.Run(runCtx) })
	g.Go(func() error { return xs.Run(runCtx) })
	g.Go(func() error {
		if err := gs.Serve(grpcLn); err != nil {
			return fmt.Errorf("serving gRPC: %w", err)
		}
		return nil
	})
	if tlsf != nil {
		g.Go(func() error { return tlsf.Run(runCtx) })
		g.Go(func() error { return reloadOnHUP(runCtx, tlsf, log) })
	}
	if f := cfg.DNSCookieSecretFile; f != "" {
		g.Go(func() error {
			return onHUP(runCtx, func() {
				cur, prev, err := readCookieSecrets(f)
				if err == nil {
					err = ds.SetCookieSecrets(cur, prev)
				}
				if err != nil {
					log.Error("SIGHUP: reloading the DNS cookie secrets: still using the previous ones", "err", err)
					return
				}
				log.Info("SIGHUP: DNS cookie secrets reloaded", "file", f, "previous", prev != nil)
			})
		})
	}
	g.Go(func() error {
		if err := serveHTTP(srv); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		// Shutdown, in order: not ready; lame duck; hand leadership over
		// with renewals replicated (writes arriving from here on are
		// forwarded to the new leader); drain HTTP; stop the store's loop
		// (the deferred Close then stops raft).
		<-gctx.Done()
		defer stopRun()
		stopping.Store(true)
		log.Info("shutting down", "lame_duck_s", cfg.LameDuck.Seconds())
		t := time.NewTimer(cfg.LameDuck)
		<-t.C
		hctx, hcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer hcancel()
		if err := st.Handoff(hctx); err != nil {
			log.Warn("handing leadership over", "err", err)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("HTTP connections still open at shutdown", "err", err)
		}
		// xDS streams never end by themselves: close them, and let their
		// clients reconnect to another server.
		gs.Stop()
		return nil
	})
	if cfg.Join != "" {
		g.Go(func() error {
			cl, err := newClient(cfg.Join, cfg.Token)
			if err != nil {
				return fmt.Errorf("--join: %w", err)
			}
			m := wire.Member{NodeID: nodeID, RaftAddr: st.RaftAddr(), HTTPAddr: httpAddr, Region: cfg.Region, Zone: cfg.Zone}
			err = cl.JoinRetry(gctx, m, func(err error) { log.Info("joining: retrying", "via", cfg.Join, "err", err) })
			if err != nil {
				if gctx.Err() != nil {
					return nil
				}
				return err
			}
			log.Info("joined the cluster", "via", cfg.Join)
			return nil
		})
	}
	return g.Wait()
}

// nsAddr is the address of the zone's name server, ns.<domain>: the DNS
// listener's host, or the raft host for a wildcard listener.
func nsAddr(dnsAddr, raftAddr string) netip.Addr {
	for _, hp := range []string{dnsAddr, raftAddr} {
		host, _, _ := net.SplitHostPort(hp)
		if host == "localhost" {
			return netip.MustParseAddr("127.0.0.1")
		}
		if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
			return a.Unmap()
		}
	}
	return netip.MustParseAddr("127.0.0.1")
}

// checkProbeToken refuses to start a server whose probe token its own
// ACL knows as one the leader would refuse: a prober token of another node
// or of none, or a token of another scope. A token this server does not
// know (one stored in the cluster, or only in the leader's ACL file) is
// the leader's to judge.
func checkProbeToken(authz *acl.Authorizer, token, nodeID string) error {
	if !authz.Enabled() || token == "" {
		return nil
	}
	id, err := authz.Authenticate(token)
	if err != nil {
		return nil
	}
	if _, err := id.ProbeObserver(nodeID); err != nil {
		return fmt.Errorf("--probe-token (default --token): this server (--node-id %s) sends its probe results with it, but %v", nodeID,
			strings.TrimSuffix(err.Error(), ": "+acl.ErrDenied.Error()))
	}
	return nil
}

// leaderPush sends this node's probe results to the current leader.
type leaderPush struct {
	st        *store.Store
	token     string
	newClient func(addr, token string) (*client.Client, error)
	addr      string
	cl        *client.Client
}

// send is health.Config.Push; the health loop calls it from one
// goroutine.
func (p *leaderPush) send(ctx context.Context, r wire.ProbeReport) (wire.ProbeReply, error) {
	cl, err := p.leader()
	if err != nil {
		return wire.ProbeReply{}, err
	}
	return cl.ProbeResults(ctx, r)
}

// outcomes is xdsserver.Config.Outcomes: the leader's evaluator takes
// what subscribers reported over LRS; a follower forwards it there. The
// xDS server calls it from one goroutine.
func (p *leaderPush) outcomes(ctx context.Context, hn *health.Node, b wire.OutcomeBatch) error {
	if hn.Leading() {
		for _, r := range b.Reports {
			hn.Outcomes(r.Observer, r.OutcomeReport)
		}
		return nil
	}
	cl, err := p.leader()
	if err != nil {
		return err
	}
	_, err = cl.ForwardOutcomes(ctx, b)
	return err
}

// leader returns a client of the leader's API.
func (p *leaderPush) leader() (*client.Client, error) {
	_, addr := p.st.Leader()
	if addr == "" {
		return nil, store.ErrNoLeader
	}
	if addr != p.addr || p.cl == nil {
		p.close()
		cl, err := p.newClient(addr, p.token)
		if err != nil {
			return nil, err
		}
		cl.RetryFor = -1 // the next batch comes soon enough
		p.cl, p.addr = cl, addr
	}
	return p.cl, nil
}

func (p *leaderPush) close() {
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// leaderRevision reads the leader's revision from its /v1/status.
func leaderRevision(newClient func(addr, token string) (*client.Client, error)) func(ctx context.Context, httpAddr string) (uint64, error) {
	return func(ctx context.Context, httpAddr string) (uint64, error) {
		cl, err := newClient(httpAddr, "")
		if err != nil {
			return 0, err
		}
		defer cl.Close()
		cl.RetryFor = -1 // asked again on the store's next tick
		st, err := cl.Status(ctx)
		return st.Revision, err
	}
}

// ownAddrs returns the servers' own addresses: every member's raft and HTTP
// host, and this node's listener.
func ownAddrs(st *store.Store, httpAddr string) []netip.Addr {
	var out []netip.Addr
	add := func(hostport string) {
		if ap, err := netip.ParseAddrPort(hostport); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	add(httpAddr)
	add(st.RaftAddr())
	ms, _ := st.Members() // on error, the listener addresses still count
	for _, m := range ms {
		add(m.RaftAddr)
		add(m.HTTPAddr)
	}
	return out
}
