package cmd

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/peer"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// The flags of `cairn server`, and their reading into a serverConfig.

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
	Subnets        []dnsserver.Subnet
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
	TLS        daemon.TLSFiles
	Plaintext  bool // --insecure-plaintext
	DNSRRL     dnsserver.RRLConfig
	DNSCookies dnsserver.CookieConfig
	// DNSCookieSecretFile is --dns-cookie-secret-file, re-read on SIGHUP.
	DNSCookieSecretFile string
	// DebugAddr is --debug-addr: net/http/pprof, on loopback ("": off).
	DebugAddr string
	// GCPercent is --gc-percent, the collector's GOGC; GCPercentBurst
	// is --gc-percent-burst, how far it may rise in a burst (0: fixed).
	GCPercent, GCPercentBurst int
	// RaftTimeout is raft's heartbeat and election timeout, and the
	// leader's lease.
	RaftTimeout time.Duration
	// HistoryWindow, HistoryChanges and HistoryMiB bound the history
	// of published tables (--history-*; package history).
	HistoryWindow              time.Duration
	HistoryChanges, HistoryMiB int
	// Peers are the other regions this server follows (--peer-region),
	// with PeerToken, a reader token of theirs.
	Peers     []peer.Region
	PeerToken string
	// FailoverSignal is --failover-signal: a file or an http(s) URL
	// (package failover); "": none.
	FailoverSignal string
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
			&cli.DurationFlag{Name: "raft-election-timeout", Value: store.DefaultElectionTimeout, Usage: "a follower that has not heard from the leader for this long (randomised up to twice it) stands for election, and a leader without a quorum's answer for as long steps down; a dead leader is replaced after 2 to 3 times it. Same on every server; raise it on a slow network or a starved host (false elections): 100ms to 10s"},
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
			&cli.StringSliceFlag{Name: "peer-region", Usage: "NAME=ADDR[,ADDR...]: another region's servers (gRPC addresses), whose views of this region's services are served read-only, as another region's (repeatable; needs --region)"},
			&cli.StringFlag{Name: "peer-token", EnvVars: []string{"CAIRN_PEER_TOKEN"}, Usage: "a reader token of the other regions, sent when following their views"},
			&cli.StringFlag{Name: "failover-signal", Usage: "FILE or http(s) URL the operator controls outside cairn, read twice a second: its failovers of this region (YAML: failovers: [{from: R1, to: R2, service: NS/SVC}]) apply without the store, for when the control plane is impaired (needs --region)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error (debug-4 adds raft's trace records)"},
			&cli.BoolFlag{Name: "allow-loopback-endpoints", Usage: "accept loopback instance addresses (single-host setups and tests; --dev implies it)"},
			&cli.StringFlag{Name: "zone-file", Usage: "RFC 1035 file of static records for names outside the service tree"},
			&cli.IntFlag{Name: "probe-workers", Value: probe.DefaultWorkers, Usage: "concurrent health checks on this node, and more while targets do not answer, up to what their timeouts need (0: this node does not probe)"},
			&cli.IntFlag{Name: "probe-capacity", Value: probe.DefaultCapacity, Usage: "most probe targets this node takes (its batch size)"},
			&cli.IntFlag{Name: "table-capacity", Value: status.DefaultCapacity, Usage: "status table slots: most instances this node publishes"},
			&cli.DurationFlag{Name: "history-window", Value: history.DefaultWindow, Usage: "how long this node keeps each change of what it published, for `cairn replay` (1m to 720h)"},
			&cli.IntFlag{Name: "history-changes", Value: history.DefaultChanges, Usage: "each namespace's newest changes (tables that changed it) kept for `cairn replay` however old (1 to 1000000)"},
			&cli.IntFlag{Name: "history-mib", Value: history.DefaultBytes >> 20, Usage: "most memory, in MiB, the history's steps hold over every service, shared fairly among namespaces (the one holding the most loses first); wins over --history-window and --history-changes (1 to 65536)"},
			&cli.DurationFlag{Name: "eval-interval", Value: publish.DefaultInterval, Usage: "health evaluation and status table cadence"},
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
			daemon.DebugAddrFlag(),
		}, append(daemon.GCFlags(), xdsLimitFlags()...)...),
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
		RaftTimeout:   c.Duration("raft-election-timeout"),
		AllowLoopback: c.Bool("dev") || c.Bool("allow-loopback-endpoints"),
		ProbeWorkers:  c.Int("probe-workers"), ProbeCapacity: c.Int("probe-capacity"),
		HistoryWindow: c.Duration("history-window"), HistoryChanges: c.Int("history-changes"), HistoryMiB: c.Int("history-mib"),
		TableCapacity: c.Int("table-capacity"), EvalInterval: c.Duration("eval-interval"), LoadReportInterval: c.Duration("load-report-interval"), ZoneFile: c.String("zone-file"),
		NamespaceCIDRs: map[string][]netip.Prefix{},
		TLS:            daemon.TLSFiles{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")},
		Plaintext:      c.Bool("insecure-plaintext"),
		DebugAddr:      c.String("debug-addr"),
		GCPercent:      c.Int("gc-percent"), GCPercentBurst: c.Int("gc-percent-burst"),
	}
	if err := daemon.CheckDebugAddr(cfg.DebugAddr); err != nil {
		return cfg, err
	}
	if err := daemon.CheckGCPercent(cfg.GCPercent, cfg.GCPercentBurst); err != nil {
		return cfg, err
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
	subnets := map[netip.Prefix]dnsserver.Place{} // a prefix given twice: the last wins
	for _, v := range c.StringSlice("subnet") {
		cidr, loc, ok := strings.Cut(v, "=")
		p, err := netip.ParsePrefix(cidr)
		region, zone, ok2 := strings.Cut(loc, "/")
		if !ok || !ok2 || err != nil || wire.CheckLabel("region", region) != nil || wire.CheckLabel("zone", zone) != nil {
			return cfg, fmt.Errorf("--subnet: %q is not CIDR=REGION/ZONE", v)
		}
		subnets[p.Masked()] = dnsserver.Place{Region: region, Zone: zone}
	}
	for p, place := range subnets {
		cfg.Subnets = append(cfg.Subnets, dnsserver.Subnet{Prefix: p, Place: place})
	}
	peers, err := peerRegions(c.StringSlice("peer-region"), cfg.Region)
	if err != nil {
		return cfg, err
	}
	cfg.Peers = peers
	cfg.PeerToken = c.String("peer-token")
	if cfg.FailoverSignal = c.String("failover-signal"); cfg.FailoverSignal != "" && cfg.Region == "" {
		return cfg, errors.New("--failover-signal needs --region: its failovers are of this server's region")
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
	case cfg.HistoryWindow < time.Minute || cfg.HistoryWindow > 720*time.Hour:
		return cfg, fmt.Errorf("--history-window: %s is not between 1m and 720h", cfg.HistoryWindow)
	case cfg.HistoryChanges < 1 || cfg.HistoryChanges > 1_000_000:
		return cfg, fmt.Errorf("--history-changes: %d is not between 1 and 1000000", cfg.HistoryChanges)
	case cfg.HistoryMiB < 1 || cfg.HistoryMiB > 65536:
		return cfg, fmt.Errorf("--history-mib: %d is not between 1 and 65536", cfg.HistoryMiB)
	case cfg.RaftTimeout < 100*time.Millisecond || cfg.RaftTimeout > 10*time.Second:
		return cfg, fmt.Errorf("--raft-election-timeout: %s is not between 100ms and 10s", cfg.RaftTimeout)
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
	if cfg.TLS.On() {
		if cfg.TLS.Cert == "" || cfg.TLS.Key == "" || cfg.TLS.CA == "" {
			return cfg, errors.New("--tls-cert, --tls-key and --tls-ca: give all three or none")
		}
		if _, err := cfg.TLS.Load(nil, nil); err != nil {
			return cfg, err
		}
		if cfg.Plaintext {
			return cfg, errors.New("--insecure-plaintext and --tls-cert: choose one")
		}
	} else if !cfg.Plaintext {
		for _, f := range []struct{ name, v string }{{"http-addr", cfg.HTTPAddr}, {"grpc-addr", cfg.GRPCAddr}, {"raft-addr", cfg.RaftAddr}} {
			if !daemon.IsLoopback(f.v) {
				return cfg, fmt.Errorf("--%s %s is reachable beyond this host, so TLS must be on: pass --tls-cert, --tls-key and --tls-ca (cairn tls --help), or --insecure-plaintext to send tokens and raft in the clear", f.name, f.v)
			}
		}
	}
	if len(cfg.Tokens) == 0 && !cfg.Dev && !daemon.IsLoopback(cfg.HTTPAddr) {
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
		cur, prev, err := dnsserver.ReadCookieSecrets(f)
		if err != nil {
			return fmt.Errorf("--dns-cookie-secret-file: %w", err)
		}
		cfg.DNSCookies.Secret, cfg.DNSCookies.PreviousSecret = cur, prev
		cfg.DNSCookieSecretFile = f
	}
	return nil
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

// peerRegions reads --peer-region: NAME=ADDR[,ADDR...], the addresses
// after the first split into values of their own by the flag, and a
// name given twice gathering its addresses.
func peerRegions(vals []string, own string) ([]peer.Region, error) {
	var out []peer.Region
	at := map[string]int{}
	last := -1
	for _, v := range vals {
		name, addr, ok := strings.Cut(v, "=")
		if !ok {
			if last < 0 {
				return nil, fmt.Errorf("--peer-region: %q is not NAME=ADDR[,ADDR...]", v)
			}
			name, addr = out[last].Name, v
		}
		if err := wire.CheckLabel("region", name); err != nil {
			return nil, fmt.Errorf("--peer-region: %q: %w", v, err)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--peer-region: %q: the address %q is not HOST:PORT", v, addr)
		}
		i, seen := at[name]
		if !seen {
			i = len(out)
			at[name] = i
			out = append(out, peer.Region{Name: name})
		}
		out[i].Servers = append(out[i].Servers, addr)
		last = i
	}
	if len(out) > 0 && own == "" {
		return nil, errors.New("--peer-region needs --region: a server follows other regions as a server of its own")
	}
	if _, ok := at[own]; ok {
		return nil, fmt.Errorf("--peer-region: %q is this server's own region (--region)", own)
	}
	return out, nil
}
