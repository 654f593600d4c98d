package xdsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Config configures a Server.
type Config struct {
	// Table is the publisher of the status table the server reads.
	// Required.
	Table *status.Publisher
	// Ready reports whether the table holds the store's state (the
	// health loop has built it from a synced store, or restored it): a
	// stream opened before that is refused with UNAVAILABLE and retries,
	// rather than being sent a partial view that a client would apply
	// (field notes X6). Nil: always ready.
	Ready func() bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer takes the server's metrics; nil registers none.
	Registerer prometheus.Registerer
	// SubscribersFile keeps the count of open streams across restarts
	// (Run writes it); at start, new streams are admitted gradually until
	// that many have come back. "": no cap after a restart (reconnecting
	// streams are capped all the same, admission.go).
	SubscribersFile string
	// Now is the clock of the admission cap and of staleness; defaults
	// to time.Now.
	Now func() time.Time
	// LastSync returns when this node's store view was last known to be
	// current, Restored whether its table was restored from disk and the
	// store has not caught up since: the DNS server's serve-stale inputs
	// (dnsserver.Config). Past StaleAfter, or restored, the server is
	// stale: it ends its streams and refuses those of clients that hold a
	// view with UNAVAILABLE, so that they move to a fresh server
	// (stale.go). A zero time counts from the server's start. nil: never
	// stale.
	LastSync func() time.Time
	Restored func() bool
	// StaleAfter defaults to 5s, the DNS server's default.
	StaleAfter time.Duration
	// AdmissionInterval is how often one stream may be sent admissions
	// (endpoints added, weights changed), coalesced in between;
	// withdrawals go at once. Defaults to DefaultAdmissionInterval;
	// negative: admissions are not coalesced.
	AdmissionInterval time.Duration
	// AdmissionRate is how many admission responses a second the server
	// sends in all; beyond it admissions wait (shed first under load)
	// while withdrawals go on. Defaults to DefaultAdmissionRate; a
	// negative rate means no limit.
	AdmissionRate float64
	// MaxAdmissionDelay bounds how long an admission is held back.
	// Defaults to DefaultMaxAdmissionDelay.
	MaxAdmissionDelay time.Duration
	// Outcomes, when set, serves the Load Reporting Service: clusters
	// name this server for load reports, and what subscribers report is
	// handed to Outcomes once a second, per caller, as outcome evidence
	// (the leader's evaluator takes it; cmd forwards it there). nil: no
	// LRS.
	Outcomes func(context.Context, wire.OutcomeBatch) error
	// LoadReportInterval is how often subscribers are asked to report
	// loads. Defaults to DefaultLoadReportInterval.
	LoadReportInterval time.Duration
	// Authorizer returns the tokens in force (they change while the
	// server runs): each stream is authenticated as it opens and sees
	// only the services its token may read. Nil, or an authorizer with
	// ACLs off: every stream sees everything.
	Authorizer func() *acl.Authorizer
	// Limits caps what one client may make the server do; zero values
	// take the defaults.
	Limits Limits
}

// Server answers xDS streams from the published status table. It does
// not use go-control-plane's caches or stream server: those rebuild a
// watch on every acknowledgement under one lock and resend a refused
// version at once, in a loop (see docs/decisions.md); it uses
// go-control-plane's protocol types and gRPC service definitions.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	cfg   Config
	log   *slog.Logger
	m     *metrics
	hub   *hub
	adm   *admission
	fresh *freshness
	// started is when the server was made: a store view never synced is
	// as old as that.
	started time.Time
	books   books   // what each stream's subscriber acknowledged
	clients clients // open streams per client, for Limits
	gate    *gate   // the admission lane's budget
	// outcomes gathers what load reports said until it is handed on;
	// serviceIDs finds the services they name.
	outcomes   outcomeSink
	serviceIDs serviceIDs
	// open counts the open streams, peak the most open at once since the
	// subscriber count was last written, most the most since the start.
	open, peak, most atomic.Int64
}

// New returns a Server; Register attaches it to a gRPC server.
func New(cfg Config) (*Server, error) {
	if cfg.Table == nil {
		return nil, errors.New("xdsserver: Config.Table is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LoadReportInterval == 0 {
		cfg.LoadReportInterval = DefaultLoadReportInterval
	}
	if cfg.AdmissionInterval == 0 {
		cfg.AdmissionInterval = DefaultAdmissionInterval
	}
	if cfg.AdmissionRate == 0 {
		cfg.AdmissionRate = DefaultAdmissionRate
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.StaleAfter < 0 {
		return nil, fmt.Errorf("xdsserver: Config.StaleAfter (%v) must be positive", cfg.StaleAfter)
	}
	if cfg.MaxAdmissionDelay == 0 {
		cfg.MaxAdmissionDelay = DefaultMaxAdmissionDelay
	}
	cfg.Limits.defaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	expected := 0
	if cfg.SubscribersFile != "" {
		if expected, err = loadSubscribers(cfg.SubscribersFile); err != nil {
			// A damaged count must not stop the server: it only shapes how
			// fast subscribers come back.
			log.Warn("no admission cap after this restart", "err", err)
			expected = 0
		}
	}
	s := &Server{cfg: cfg, log: log, m: m, hub: newHub(cfg.Table, m), gate: newGate(cfg.AdmissionRate),
		fresh: newFreshness(), started: cfg.Now()}
	s.adm = newAdmission(cfg.Now, expected, func() int { return int(s.most.Load()) })
	if expected > 0 {
		log.Info("admitting xDS subscribers gradually after a restart", "expected", expected, "per_10s", s.adm.perWindow())
	}
	s.hub.lrs = cfg.Outcomes != nil
	return s, nil
}

// DefaultStaleAfter is Config.StaleAfter's default.
const DefaultStaleAfter = 5 * time.Second

// ready refuses a stream until the table is loaded.
func (s *Server) ready() error {
	if s.cfg.Ready != nil && !s.cfg.Ready() {
		s.m.refused.WithLabelValues("not_ready").Inc()
		return grpcstatus.Error(codes.Unavailable, "xdsserver: the status table is not loaded yet; retry")
	}
	return nil
}

// admit runs the admission cap on a stream whose first request came;
// held says its client holds a view.
func (s *Server) admit(held bool) error {
	if !s.adm.admit(held) {
		s.m.refused.WithLabelValues("admission_cap").Inc()
		return grpcstatus.Error(codes.Unavailable, "xdsserver: admitting reconnecting subscribers gradually (a restart or a failover); keep the view held and retry")
	}
	return nil
}

// Register attaches the aggregated discovery service to gs.
func (s *Server) Register(gs *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s)
	if s.cfg.Outcomes != nil {
		lrsv3.RegisterLoadReportingServiceServer(gs, &lrsServer{s: s})
	}
}

// observeDelivery records an acknowledged response: the time since the
// oldest change it carried, in its lane. A response that carried no
// change (a first answer of what the client already held) has no origin.
func (s *Server) observeDelivery(origin time.Time, withdraw bool) {
	if origin.IsZero() {
		return
	}
	lane := "admission"
	if withdraw {
		lane = "withdrawal"
	}
	s.m.delivery.WithLabelValues(lane).Observe(s.cfg.Now().Sub(origin).Seconds())
}
