package cmd

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/failover"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/ui"
	"github.com/cairn-sd/cairn/peer"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/replay"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/zones"
)

// AddrsFile is written to the data dir once the server listens: the
// addresses it actually bound (useful with port 0). A server that cannot
// write it (a full disk) logs so and runs without it.
const AddrsFile = "addrs.json"

// TableFile, in the data dir, keeps the last status table the server
// published, served (stale) after a restart until the store catches up.
const TableFile = "table.cairn"

// HistoryFile, in the data dir, keeps the history of the tables the
// server published (package history), for `cairn replay` after a
// restart.
const HistoryFile = "history.cairn"

// XDSSubscribersFile is the file in the data dir that keeps the count of
// xDS streams, so that after a restart they are admitted gradually.
const XDSSubscribersFile = "xds-subscribers.json"

// serve runs one server until ctx is done, then shuts it down in order
// (serverParts.run): not ready, lame duck, HTTP, store.
//
// Every listener is bound before the store opens (and may bootstrap a
// cluster on this raft address): a port in use fails the start with
// nothing written. So the DNS server, which listens, is made before the
// publisher it reads; and the xDS server is made before the API, whose
// tokens it authenticates with and which reports its subscribers. Those
// two read what comes after them through a ref (lateRefs), set before
// anything runs.
func serve(ctx context.Context, cfg serverConfig, logw io.Writer) error {
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: cfg.LogLevel}))
	gcPace, gcDesc := daemon.GCPacing(cfg.GCPercent, cfg.GCPercentBurst, os.Getenv)
	dir, cleanup, err := daemon.DataDir(cfg.DataDir, "cairn-dev-")
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.DataDir = dir
	nodeID, err := daemon.Identity(cfg.NodeID, cfg.DataDir)
	if err != nil {
		return err
	}
	log = log.With("node", nodeID)
	authz, err := serverACL(cfg, nodeID)
	if err != nil {
		return err
	}

	httpLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening for HTTP on %q: %w", cfg.HTTPAddr, err)
	}
	defer httpLn.Close()
	httpAddr := advertised(httpLn.Addr().String(), cfg.RaftAddr)
	reg := daemon.NewRegistry()
	sec, err := serverTLS(cfg, log, reg)
	if err != nil {
		return err
	}
	table, err := status.New(status.Config{Capacity: cfg.TableCapacity})
	if err != nil {
		return err
	}
	var late lateRefs
	ds, err := buildDNS(cfg, table, &late, log, reg)
	if err != nil {
		return err
	}
	if err := ds.Listen(); err != nil {
		return err
	}
	grpcLn, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listening for gRPC on %q: %w", cfg.GRPCAddr, err)
	}
	defer grpcLn.Close()
	var debugLn net.Listener // nil: no --debug-addr
	if cfg.DebugAddr != "" {
		if debugLn, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return fmt.Errorf("listening for --debug-addr on %q: %w", cfg.DebugAddr, err)
		}
		defer debugLn.Close()
	}

	st, err := openStore(cfg, nodeID, httpAddr, sec, log, reg)
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
	fw := health.NewForwarder(health.ForwardConfig{Store: st, Token: cfg.ProbeToken, Dial: sec.dial})
	defer fw.Close()
	pe, err := peer.New(peer.Config{Regions: cfg.Peers, Own: cfg.Region, NodeID: nodeID, Token: cfg.PeerToken, Dir: cfg.DataDir,
		StaleAfter: cfg.StaleAfter, Capacity: cfg.TableCapacity, DialOptions: sec.peerDial(), Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	var sig *failover.Signal // nil: no --failover-signal
	if cfg.FailoverSignal != "" {
		if sig, err = failover.New(failover.Config{Source: cfg.FailoverSignal, Region: cfg.Region, Logger: log, Registerer: reg}); err != nil {
			return err
		}
	}
	hn, pn, keeper, err := buildHealth(cfg, nodeID, st, table, fw, pe, sig, log, reg)
	if err != nil {
		return err
	}
	late.publish = pn
	xs, gs, err := buildXDS(cfg, table, hn, pn, fw, &late, sec, log, reg)
	if err != nil {
		return err
	}
	hist, rp, err := buildReplay(cfg, table, pn, ds, st, log, reg)
	if err != nil {
		return err
	}
	rd := &readiness{publish: pn, maxStale: cfg.MaxStale}
	a, err := api.New(api.Config{Store: st, ACL: authz, Addrs: addressPolicy(cfg, st, httpAddr), Health: hn, Publish: pn, Table: table,
		Region: cfg.Region, Zone: cfg.Zone, Peers: pe.Status, Signal: signalStatus(sig), XDSSubscribers: xs.Subscribers, XDSSummary: xs.SubscribersSummary, Replay: rp.Replay, Timeline: rp.Timeline,
		GRPCAddr: grpcLn.Addr().String(), UI: ui.Handler(), TLS: sec.files, StaleAfter: cfg.StaleAfter, Started: ds.Started(),
		Gatherer: reg, Registerer: reg, Logger: log, Ready: rd.check, Peer: sec.peerCheck, ForwardTLS: sec.peer})
	if err != nil {
		return err
	}
	defer a.Close()
	late.api = a

	p := &serverParts{cfg: cfg, log: log, nodeID: nodeID, httpAddr: httpAddr, httpLn: httpLn, grpcLn: grpcLn, debugLn: debugLn, gcPace: gcPace, gcDesc: gcDesc, sec: sec,
		st: st, hn: hn, keeper: keeper, hist: hist, peers: pe, signal: sig, ds: ds, xs: xs, gs: gs, srv: daemon.NewHTTPServer(a, log), ready: rd}
	p.writeAddrs()
	return p.run(ctx)
}

// serverACL makes the token authorizer, and refuses a probe token it
// knows the leader would refuse (acl.Authorizer.CheckProber) on a server
// that probes.
func serverACL(cfg serverConfig, nodeID string) (*acl.Authorizer, error) {
	authz, err := acl.New(acl.Config{Enabled: len(cfg.Tokens) > 0, Tokens: cfg.Tokens})
	if err != nil {
		return nil, err
	}
	if cfg.ProbeWorkers > 0 {
		if err := authz.CheckProber(cfg.ProbeToken, nodeID); err != nil {
			return nil, fmt.Errorf("--probe-token (default --token): this server (--node-id %s) sends its probe results with it, but %v", nodeID,
				strings.TrimSuffix(err.Error(), ": "+acl.ErrDenied.Error()))
		}
	}
	return authz, nil
}

// lateRefs are the parts made after what reads them (see serve). Each is
// set once, before serverParts.run starts anything, and read only after.
type lateRefs struct {
	publish *publish.Node // read by the DNS server
	api     *api.Server   // read by the xDS server: the tokens of the moment
}

// securityConfig is what TLS, when on, changes in the server's wiring.
type securityConfig struct {
	files     *certs.Files // nil: TLS off
	peer      *tls.Config  // calls to other servers: present this server's certificate, verify a server's
	dial      func(addr, token string) (*client.Client, error)
	peerCheck func(*http.Request) error // a call between servers comes from a server
	grpc      []grpc.ServerOption
	raft      *store.RaftTLS
}

// serverTLS loads --tls-* (with TLS: every listener's config reads the
// certificates of the moment; calls between servers present this
// server's certificate and verify the peer's as a server's, whatever
// address they dial), or warns of plaintext beyond loopback.
func serverTLS(cfg serverConfig, log *slog.Logger, reg prometheus.Registerer) (securityConfig, error) {
	sec := securityConfig{dial: client.New}
	if !cfg.TLS.On() {
		if !daemon.IsLoopback(cfg.HTTPAddr) || !daemon.IsLoopback(cfg.GRPCAddr) || !daemon.IsLoopback(cfg.RaftAddr) {
			log.Warn("PLAINTEXT BEYOND LOOPBACK (--insecure-plaintext): tokens, writes and raft cross the network in the clear, and anyone who reaches the raft port can join the log")
		}
		return sec, nil
	}
	f, err := cfg.TLS.Load(log, reg)
	if err != nil {
		return sec, err
	}
	peer := f.ClientConfig(certs.ServerName)
	return securityConfig{files: f, peer: peer,
		dial:      func(addr, token string) (*client.Client, error) { return client.NewTLS(addr, token, peer) },
		peerCheck: func(r *http.Request) error { return certs.PeerIsServer(r.TLS) },
		grpc: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(f.ServerConfig(certs.VerifyIfGiven))),
			// A stream keeps the credentials of its handshake: cycling
			// connections makes a revoked certificate or a retired CA
			// stop working within the hour (field notes T4).
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: time.Hour, MaxConnectionAgeGrace: time.Minute})},
		raft: &store.RaftTLS{Server: f.ServerConfig(certs.RequireServer), Client: peer},
	}, nil
}

// signalStatus is the API's Signal: nil without one.
func signalStatus(sig *failover.Signal) func() *wire.FailoverSignal {
	if sig == nil {
		return nil
	}
	return sig.Status
}

// peerDial is how this server dials other regions' xDS: over TLS,
// presenting its certificate and verifying theirs as a server's, when
// TLS is on.
func (s securityConfig) peerDial() []grpc.DialOption {
	if s.peer == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.peer))}
}

// serveHTTP serves srv on ln, over TLS when it is on.
func (s securityConfig) serveHTTP(srv *http.Server, ln net.Listener) error {
	if s.files == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = s.files.ServerConfig(certs.VerifyIfGiven)
	return srv.ServeTLS(ln, "", "")
}

// buildDNS makes the zone and the DNS server; it reads the publisher's
// sync state through late.
func buildDNS(cfg serverConfig, table *status.Publisher, late *lateRefs, log *slog.Logger, reg prometheus.Registerer) (*dnsserver.Server, error) {
	zone, err := zones.New(zones.Config{Domain: cfg.Domain, StaticFile: cfg.ZoneFile,
		NSAddrs: map[string][]netip.Addr{"ns." + cfg.Domain: {zones.NSAddr(cfg.DNSAddr, cfg.RaftAddr)}}})
	if err != nil {
		return nil, fmt.Errorf("DNS zone: %w", err)
	}
	return dnsserver.New(dnsserver.Config{Zone: zone, Table: table, Addr: cfg.DNSAddr,
		Own: dnsserver.Place{Region: cfg.Region, Zone: cfg.Zone}, Subnets: cfg.Subnets, ECSTrusted: cfg.ECSTrusted,
		StaleAfter: cfg.StaleAfter, MaxStale: cfg.MaxStale,
		LastSync: func() time.Time { return late.publish.Synced() }, Restored: func() bool { return late.publish.Restored() },
		RRL: cfg.DNSRRL, Cookies: cfg.DNSCookies, Logger: log, Registerer: reg})
}

// openStore opens (and, without --join, bootstraps) the store.
func openStore(cfg serverConfig, nodeID, httpAddr string, sec securityConfig, log *slog.Logger, reg prometheus.Registerer) (*store.Store, error) {
	return store.Open(store.Config{NodeID: nodeID, RaftAddr: cfg.RaftAddr, HTTPAddr: httpAddr,
		Region: cfg.Region, Zone: cfg.Zone, DataDir: cfg.DataDir, Bootstrap: cfg.Join == "", Logger: log, Registerer: reg,
		HeartbeatTimeout: cfg.RaftTimeout, ElectionTimeout: cfg.RaftTimeout, LeaderLease: cfg.RaftTimeout,
		LeaderRevision: leaderRevision(sec.dial), RaftTLS: sec.raft})
}

// buildHealth makes the prober (unless --probe-workers is 0), the
// publisher, restored from the table kept on disk, the health node whose
// round its loop runs, and the keeper that writes the table back.
func buildHealth(cfg serverConfig, nodeID string, st *store.Store, table *status.Publisher, fw *health.Forwarder, pe *peer.Peers,
	sig *failover.Signal, log *slog.Logger, reg prometheus.Registerer) (*health.Node, *publish.Node, *tablefile.Keeper, error) {
	var prober *probe.Prober
	if cfg.ProbeWorkers > 0 {
		// Batches twice per evaluation, so that a check at the
		// evaluation's interval never has two results in one batch (a
		// batch carries each target's latest).
		var err error
		prober, err = probe.New(probe.Config{Observer: nodeID, Workers: cfg.ProbeWorkers, CoverTimeouts: true,
			Capacity: cfg.ProbeCapacity, BatchInterval: cfg.EvalInterval / 2, Logger: log, Registerer: reg})
		if err != nil {
			return nil, nil, nil, err
		}
	}
	tablePath := filepath.Join(cfg.DataDir, TableFile)
	kept, keptErr := tablefile.LoadKept(tablePath)
	switch {
	case keptErr != nil && kept != nil:
		log.Warn("serving the previous copy of the table kept on disk", "err", keptErr)
	case keptErr != nil:
		log.Warn("not serving the table kept on disk", "err", keptErr)
	}
	pc := publish.Config{Store: st, Table: table, Interval: cfg.EvalInterval, Restore: kept, Logger: log, Registerer: reg}
	// Interfaces holding a nil pointer, or peers following no region,
	// would not be nil: the publisher would pay for what is not there.
	if len(cfg.Peers) > 0 {
		pc.Peers = pe
	}
	if sig != nil {
		pc.Signal = sig
	}
	pn, err := publish.New(pc)
	if err != nil {
		return nil, nil, nil, err
	}
	hn, err := health.New(health.Config{Store: st, Publish: pn, Prober: prober, Push: fw.ProbeResults,
		Logger: log, Registerer: reg})
	if err != nil {
		return nil, nil, nil, err
	}
	keeper, err := tablefile.NewKeeper(tablefile.Config{Path: tablePath, Table: table, Synced: pn.Synced, Logger: log,
		PathGood: kept != nil && keptErr == nil})
	if err != nil {
		return nil, nil, nil, err
	}
	return hn, pn, keeper, nil
}

// buildReplay makes the history of the tables this node publishes, and
// the replayer that answers from it with the DNS and xDS servers' code.
func buildReplay(cfg serverConfig, table *status.Publisher, pn *publish.Node, ds *dnsserver.Server, st *store.Store,
	log *slog.Logger, reg prometheus.Registerer) (*history.History, *replay.Replayer, error) {
	hist, err := history.New(history.Config{Table: table, Window: cfg.HistoryWindow, Changes: cfg.HistoryChanges,
		Bytes: cfg.HistoryMiB << 20, Path: filepath.Join(cfg.DataDir, HistoryFile), Synced: pn.Synced, Restored: pn.Restored, StaleAfter: cfg.StaleAfter, MaxStale: cfg.MaxStale,
		Logger: log, Registerer: reg})
	if err != nil {
		return nil, nil, err
	}
	rp, err := replay.New(replay.Config{History: hist, DNS: ds, Region: cfg.Region, Zone: cfg.Zone,
		Events: func(ns, svc string) []wire.Event { return st.Events(ns, svc, 0) }})
	return hist, rp, err
}

// buildXDS makes the xDS server and the gRPC server it is registered
// on; it authenticates with the API's tokens through late.
func buildXDS(cfg serverConfig, table *status.Publisher, hn *health.Node, pn *publish.Node, fw *health.Forwarder, late *lateRefs, sec securityConfig,
	log *slog.Logger, reg prometheus.Registerer) (*xdsserver.Server, *grpc.Server, error) {
	xs, err := xdsserver.New(xdsserver.Config{Table: table, Logger: log, Registerer: reg,
		SubscribersFile: filepath.Join(cfg.DataDir, XDSSubscribersFile), LoadReportInterval: cfg.LoadReportInterval,
		// A table built from a synced store, or the one kept on disk: never
		// a partial view, which a client would apply.
		Ready: func() bool { return pn.Serving(0) == nil },
		// The DNS server's serve-stale rule: past it, the streams end so
		// that subscribers move to a fresh server.
		StaleAfter: cfg.StaleAfter, LastSync: pn.Synced, Restored: pn.Restored,
		Authorizer: func() *acl.Authorizer { return late.api.Authorizer() }, Limits: cfg.XDSLimits,
		Outcomes: fw.Outcomes(hn)})
	if err != nil {
		return nil, nil, err
	}
	gs := grpc.NewServer(append(sec.grpc, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		// Subscribers keep idle streams alive with pings; the default
		// policy (one ping per 5 minutes, none without a stream) closes
		// connections whose clients ping more often (field notes X11).
		MinTime: 10 * time.Second, PermitWithoutStream: true,
	}))...)
	xs.Register(gs)
	return xs, gs, nil
}

// addressPolicy is the rule registered addresses are checked against:
// never a server's own address.
func addressPolicy(cfg serverConfig, st *store.Store, httpAddr string) *addrpolicy.Policy {
	return addrpolicy.New(addrpolicy.Config{AllowLoopback: cfg.AllowLoopback, Permitted: cfg.NamespaceCIDRs,
		Own: func() []netip.Addr { return ownAddrs(st, httpAddr) }})
}

// leaderRevision reads the leader's revision from its /v1/status.
func leaderRevision(dial func(addr, token string) (*client.Client, error)) func(ctx context.Context, httpAddr string) (uint64, error) {
	return func(ctx context.Context, httpAddr string) (uint64, error) {
		cl, err := dial(httpAddr, "")
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
