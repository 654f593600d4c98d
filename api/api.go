// Package api serves cairn's HTTP/JSON API (SPEC §6): the write routes
// behind every CLI command, the read routes, membership, /metrics,
// /healthz, /readyz, and its own description (/v1/openapi.json, from
// docs/openapi.yaml). It authenticates and authorises every call, checks
// addresses against the address policy, forwards writes that reach a
// follower to the leader, and turns errors into status codes in one place
// (writeError).
//
// Imports: the store (writes, reads of desired state), the node's health
// and publication stages (evidence intake, the served table), the status
// table, the wire types, and the helpers for tokens, addresses and
// certificates. Never raft directly, and never the DNS or xDS servers.
//
// Threading: the Server is safe for concurrent use, one goroutine per
// request (net/http). What requests share is published whole through
// atomic pointers (the token cache, the service list) or kept behind a
// small mutex of its own (the xDS summary, the refusal audit window).
package api

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairn-sd/cairn/docs"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/publish"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// peerRoute reports whether route is a write only servers make
// (Config.Peer).
func peerRoute(route string) bool {
	switch route {
	case "join", "probe_results", "forwarded_outcomes":
		return true
	}
	return false
}

// forwardedHeader marks a request a follower forwarded, so that it is never
// forwarded twice.
const forwardedHeader = "X-Cairn-Forwarded-By"

// publishedHeader carries, on the answer to a drain or a deregistration,
// the store revision whose table the answering node had published before
// it answered. A follower that forwarded the write waits until its own
// table has it too before it answers (SPEC §2).
const publishedHeader = "X-Cairn-Published-Revision"

// Config configures the API.
type Config struct {
	// Store is the node's store. Required.
	Store *store.Store
	// ACL authenticates tokens. Required (use acl.Config{} for ACLs off).
	ACL *acl.Authorizer
	// Addrs checks registered addresses. Required.
	Addrs *addrpolicy.Policy
	// MaxBodyBytes limits request bodies; defaults to 1 MiB.
	MaxBodyBytes int64
	// WriteTimeout bounds one write's commit; defaults to 10s.
	WriteTimeout time.Duration
	// AuditRefusals is how many refusals a second are written to the
	// replicated audit trail; the rest are only counted and logged, so
	// that a misbehaving token cannot flood the log. Defaults to 10.
	AuditRefusals int
	// Ready reports whether the node serves: nil when it does, else why
	// not; /readyz answers 503 with that reason meanwhile. Defaults to "a
	// leader is known".
	Ready func() error
	// Peer, when set, must accept the caller of every server-to-server
	// call (join, probe results, forwarded outcomes) and of every request
	// a follower forwards, before anything else is done with it: with
	// TLS, the caller presented a server certificate of the cluster's CA.
	// nil: any caller with a token of the right scope (plaintext).
	Peer func(*http.Request) error
	// ForwardTLS, when set, is the TLS config writes are forwarded to
	// the leader with, over https: it presents this server's certificate.
	ForwardTLS *tls.Config
	// Health is the node's health evaluation: the sink of outcomes and
	// probe results, and the evidence it holds. nil: no evaluator runs
	// (those routes answer 503).
	Health *health.Node
	// Publish publishes the node's status table: the freshness of what
	// it serves, and the table a drain or a deregistration waits for
	// before it is answered. nil: no table is published (the store's
	// last contact stands for its freshness; writes return at once).
	Publish *publish.Node
	// Table is the status table this node's DNS and xDS servers answer
	// from: the endpoints view, the services list and the dashboard show
	// what it serves (verdict, eligibility, weight, tier). Required with
	// Health. nil: the views count ready instances eligible.
	Table *cstatus.Publisher
	// Region and Zone are this node's locality (--region, --zone): the
	// endpoints view's tiers are relative to it, as the DNS server's
	// answers to a caller of unknown place are.
	Region, Zone string
	// Peers reports the other regions this node follows (package peer),
	// for GET /v1/regions; nil: none.
	Peers func() []wire.PeerRegion
	// Signal reports the out-of-band failover signal (package failover),
	// for GET /v1/regions; nil: the node reads none.
	Signal func() *wire.FailoverSignal
	// XDSSubscribers tells which store revision this server's xDS
	// subscribers hold of a service's assignments; nil: no xDS server
	// (the route answers with no subscribers).
	XDSSubscribers func(ns, svc string) wire.XDSSubscribers
	// Replay replays what this node told a caller about a service at a
	// time of the past (package replay, on the node's history); nil: the
	// node keeps no history (the view route answers 404).
	Replay func(wire.ReplayQuery) (*wire.Replay, error)
	// Timeline is a service's eligible endpoints per zone over a span of
	// the node's history (package replay); nil: no history (404).
	Timeline func(ns, svc string, from, to time.Time) (*wire.ServiceHistory, error)
	// XDSSummary tells this server's xDS streams and their subscribers
	// by revision over all services, for GET /v1/status; nil: no xDS
	// server (the status has no xds).
	XDSSummary func() wire.XDSSummary
	// GRPCAddr is the address the node's xDS server listens on, for
	// GET /v1/status (grpc_addr); empty: no xDS server.
	GRPCAddr string
	// StaleAfter is the age past which this node's views and status say
	// stale, as its DNS answers do (--stale-after); defaults to 5s.
	StaleAfter time.Duration
	// Started is when a node that has never synced counts its age from:
	// the DNS server's start (dnsserver.Server.Started), so that the two
	// agree. Defaults to the time New is called.
	Started time.Time
	// TLS, when set, is the node's certificates: GET /v1/status tells
	// their state. nil: the node speaks plaintext.
	TLS *certs.Files
	// UI, when set, serves the web dashboard: GET /ui/ and below, and
	// GET /ui (its redirect). It is served without a token, as it holds
	// only static files; the pages call the API with the caller's token.
	UI http.Handler
	// Gatherer serves /metrics; nil serves no metrics.
	Gatherer prometheus.Gatherer
	// Registerer receives the API's metrics; may be nil.
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Server is the HTTP API of one node.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	// patterns are the routes registered on mux, in order: what
	// docs/openapi.yaml must describe (TestOpenAPIMatchesRoutes).
	patterns []string
	// openapi is docs/openapi.yaml as JSON, for GET /v1/openapi.json.
	openapi []byte

	auth      atomic.Pointer[authCache]
	forwarder *http.Transport

	started time.Time // by Config.Now: a node never synced is stale since then

	list   atomic.Pointer[serviceList]
	listMu sync.Mutex // one build of the list at a time

	xdsMu  sync.Mutex
	xdsAt  time.Time // when xdsSum was taken
	xdsSum wire.XDSSummary

	auditMu     sync.Mutex
	auditWindow time.Time
	auditCount  int
	auditBy     map[string]int // refusals audited per identity in the window
}

// New validates cfg and builds the API.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.ACL == nil || cfg.Addrs == nil {
		return nil, errors.New("api: Store, ACL and Addrs are required")
	}
	if (cfg.Health != nil || cfg.Publish != nil) && cfg.Table == nil {
		return nil, errors.New("api: Table is required with Health or Publish: the views show what the table serves")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 5 * time.Second
	}
	if cfg.AuditRefusals == 0 {
		cfg.AuditRefusals = 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Ready == nil {
		st := cfg.Store
		cfg.Ready = func() error {
			if id, _ := st.Leader(); id == "" {
				return errors.New("no leader known")
			}
			return nil
		}
	}
	oa, err := docs.OpenAPIJSON()
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s := &Server{cfg: cfg, openapi: oa, log: cfg.Logger.With("component", "api"), mux: http.NewServeMux(), started: cmp.Or(cfg.Started, cfg.Now()),
		// Forwarding goes straight to the leader: no proxy from the
		// environment, bounded waits.
		forwarder: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
			ResponseHeaderTimeout: cfg.WriteTimeout + 5*time.Second,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSClientConfig:       cfg.ForwardTLS.Clone(), // a Transport writes its ALPN protocols into it
			ForceAttemptHTTP2:     cfg.ForwardTLS != nil,
		}}
	s.metrics = newMetrics(cfg.Registerer)
	s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler. A path no route knows gets a JSON
// 404, and a known path with the wrong method a JSON 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusRecorder{header: http.Header{}}
	s.mux.ServeHTTP(rec, r) // the mux's own 404 or 405, to learn which
	if rec.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", rec.header.Get("Allow"))
		s.writeError(w, r, "unknown", fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, errMethod))
		return
	}
	s.writeError(w, r, "unknown", fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, errRouteNotFound))
}

// statusRecorder keeps the status and headers of a response and drops
// its body.
type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.code = code }

// Close releases the idle connections kept for forwarding.
func (s *Server) Close() { s.forwarder.CloseIdleConnections() }

func (s *Server) routes() {
	m := routeRecorder{s}
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.cfg.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if s.cfg.UI != nil {
		m.Handle("GET /ui", s.cfg.UI)
		m.Handle("GET /ui/", s.cfg.UI)
	}
	if s.cfg.Gatherer != nil {
		m.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	m.HandleFunc("POST /v1/apply", s.write("apply", s.apply))
	m.HandleFunc("GET /v1/services", s.read("services", s.listServices))
	m.HandleFunc("GET /v1/services/{ns}/{svc}", s.consistentRead("service", s.getService))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/endpoints", s.consistentRead("endpoints", s.endpoints))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/subscribers", s.read("subscribers", s.subscribers))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/events", s.read("events", s.events))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/view", s.read("view", s.replayView))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/history", s.read("history", s.timeline))
	m.HandleFunc("GET /v1/services/{ns}/{svc}/rollout", s.read("rollout", s.rollout))
	m.HandleFunc("POST /v1/services/{ns}/{svc}/instances", s.write("register", s.register))
	m.HandleFunc("POST /v1/services/{ns}/{svc}/instances/{id}/renew", s.write("renew", s.mutate(acl.Renew)))
	m.HandleFunc("POST /v1/services/{ns}/{svc}/instances/{id}/drain", s.write("drain", s.mutate(acl.Drain)))
	m.HandleFunc("POST /v1/services/{ns}/{svc}/instances/{id}/deregister", s.write("deregister", s.mutate(acl.Deregister)))
	m.HandleFunc("POST /v1/services/{ns}/{svc}/instances/{id}/report", s.write("report", s.mutate(acl.Report)))
	// Like /readyz, the node status needs no token: followers read the
	// leader's revision from it to know when they have caught up.
	m.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		s.finish(w, r, "status", acl.Identity{}, s.status)
	})
	m.HandleFunc("POST /v1/outcomes", s.write("outcomes", s.outcomes))
	m.HandleFunc("POST /v1/internal/outcomes", s.write("forwarded_outcomes", s.forwardedOutcomes))
	m.HandleFunc("POST /v1/internal/probe-results", s.writeLimit("probe_results", maxProbeBody, s.probeResults))
	m.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		// No token, like /v1/status: the description of the API is the
		// one in the repository and holds nothing of the cluster.
		writeEncoded(w, r, http.StatusOK, encodedJSON{plain: s.openapi})
	})
	m.HandleFunc("GET /v1/evacuations", s.read("evacuations", s.listEvacuations))
	m.HandleFunc("POST /v1/evacuations", s.write("evacuate", s.evacuate))
	m.HandleFunc("GET /v1/members", s.read("members", s.members))
	m.HandleFunc("GET /v1/regions", s.read("regions", s.regions))
	m.HandleFunc("POST /v1/regions/failover", s.write("failover", s.failover))
	m.HandleFunc("POST /v1/members", s.write("join", s.join))
	m.HandleFunc("DELETE /v1/members/{id}", s.write("leave", s.leave))
	m.HandleFunc("GET /v1/acl/tokens", s.read("tokens", s.listTokens))
	m.HandleFunc("POST /v1/acl/tokens", s.write("create_token", s.createToken))
	m.HandleFunc("DELETE /v1/acl/tokens/{accessor}", s.write("delete_token", s.deleteToken))
}

// routeRecorder registers routes on the server's mux and records their
// patterns (Server.patterns).
type routeRecorder struct{ s *Server }

func (m routeRecorder) Handle(pattern string, h http.Handler) {
	m.s.patterns = append(m.s.patterns, pattern)
	m.s.mux.Handle(pattern, h)
}

func (m routeRecorder) HandleFunc(pattern string, h http.HandlerFunc) { m.Handle(pattern, h) }

// handler is an API handler: it gets the authenticated caller and returns
// the status and body, or an error for writeError.
type handler func(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error)

// read wraps a read route: authenticate, run, count.
func (s *Server) read(route string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := s.authenticate(r)
		if err != nil {
			s.writeError(w, r, route, err)
			return
		}
		s.finish(w, r, route, id, h)
	}
}

// consistentRead wraps a read route that takes ?consistent=true: such a
// read is answered by the leader (a follower forwards it, as it does a
// write) once it has confirmed with a quorum that it still leads
// (store.VerifyRead), so that it sees every write acknowledged before it
// was sent; 503 no_leader when that cannot be confirmed. Without it, or
// with any other value, the node answers from its own replica at once,
// as every read does.
func (s *Server) consistentRead(route string, h handler) http.HandlerFunc {
	plain := s.read(route, h)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("consistent") != "true" {
			plain(w, r)
			return
		}
		id, ok := s.leaderOnly(w, r, route, false, "a forwarded read")
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
		defer cancel()
		if err := s.cfg.Store.VerifyRead(ctx); err != nil {
			s.writeError(w, r, route, err)
			return
		}
		s.finish(w, r, route, id, h)
	}
}

// write wraps a write route: authenticate, forward to the leader when this
// node is not it, limit the body, run with a commit timeout, count.
func (s *Server) write(route string, h handler) http.HandlerFunc {
	return s.writeLimit(route, 0, h)
}

// writeLimit is write with a body limit of its own (0: MaxBodyBytes).
func (s *Server) writeLimit(route string, limit int64, h handler) http.HandlerFunc {
	if limit == 0 {
		limit = s.cfg.MaxBodyBytes
	}
	peerOnly := peerRoute(route)
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := s.leaderOnly(w, r, route, peerOnly, route)
		if !ok {
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
		defer cancel()
		s.finish(w, r.WithContext(ctx), route, id, h)
	}
}

// leaderOnly is the start of a request only the leader answers (a write,
// a consistent read): a call between servers (peerOnly, or one a
// follower forwarded) must come from a peer; a follower forwards the
// request to the leader, the answer written; the leader authenticates
// it. ok is false when the request has been answered. what names the
// request in a refusal.
func (s *Server) leaderOnly(w http.ResponseWriter, r *http.Request, route string, peerOnly bool, what string) (acl.Identity, bool) {
	if s.cfg.Peer != nil && (peerOnly || r.Header.Get(forwardedHeader) != "") {
		if err := s.cfg.Peer(r); err != nil {
			s.log.Warn("refused a server-to-server call", "route", route, "remote", r.RemoteAddr, "err", err)
			s.writeError(w, r, route, fmt.Errorf("%s is a call between servers, and %v: %w", what, err, acl.ErrDenied))
			return acl.Identity{}, false
		}
	}
	id, err := s.authenticate(r)
	if !s.cfg.Store.IsLeader() && (err == nil || errors.Is(err, acl.ErrUnknownToken)) {
		// A token this follower does not know yet (created moments ago
		// on the leader) is the leader's to judge.
		s.forward(w, r, route)
		return acl.Identity{}, false
	}
	if err != nil {
		s.writeError(w, r, route, err)
		return acl.Identity{}, false
	}
	return id, true
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, route string, id acl.Identity, h handler) {
	code, body, err := h(w, r, id)
	if err != nil {
		s.writeError(w, r, route, err)
		return
	}
	s.metrics.requests.WithLabelValues(route, fmt.Sprint(code)).Inc()
	if b, ok := body.(encodedJSON); ok {
		writeEncoded(w, r, code, b)
		return
	}
	writeJSON(w, code, body)
}

func (s *Server) authenticate(r *http.Request) (acl.Identity, error) {
	tok, err := bearer(r)
	if err != nil {
		return acl.Identity{}, err
	}
	return s.Authorizer().Authenticate(tok)
}

// forward proxies a write to the leader's API. The leader authenticates
// and authorises it again; a request already forwarded once is refused
// rather than bounced between nodes that disagree about the leader.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, route string) {
	lid, addr := s.cfg.Store.Leader()
	if r.Header.Get(forwardedHeader) != "" || lid == "" || addr == "" || lid == s.cfg.Store.NodeID() {
		s.writeError(w, r, route, fmt.Errorf("this node cannot take writes and knows no leader to forward to: %w", store.ErrNoLeader))
		return
	}
	target := &url.URL{Scheme: "http", Host: addr}
	if s.cfg.ForwardTLS != nil {
		target.Scheme = "https"
	}
	p := &httputil.ReverseProxy{
		Transport: s.forwarder,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(forwardedHeader, s.cfg.Store.NodeID())
		},
		ModifyResponse: func(resp *http.Response) error {
			v := resp.Header.Get(publishedHeader)
			if v == "" || resp.StatusCode >= 300 {
				return nil
			}
			rev, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("the leader's %s %q: %w", publishedHeader, v, err)
			}
			return s.waitPublished(r.Context(), rev)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeError(w, r, route, fmt.Errorf("forwarding to leader %s at %s: %v: %w", lid, addr, err, store.ErrNoLeader))
		},
	}
	s.metrics.forwarded.Inc()
	p.ServeHTTP(w, r)
}

// deny answers 403 for an authenticated caller writing out of scope (key
// names an instance, or a service when key.ID is empty), logs it (never
// the token) and records it in the audit trail, rate-limited.
func (s *Server) deny(r *http.Request, id acl.Identity, what string, key wire.InstanceKey) error {
	target := key.String()
	if key.ID == "" {
		target = key.ServiceKey().String()
	}
	s.log.Warn("refused", "identity", id.Name, "action", what, "target", target)
	s.auditRefusal(r, id, key, fmt.Sprintf("%s token may not %s %s", id.Scope, what, target))
	return fmt.Errorf("%s token may not %s %s: %w", id.Scope, what, target, acl.ErrDenied)
}

// auditRefusal records a refusal of id's request about key in the audit
// trail, rate-limited (allowAudit).
func (s *Server) auditRefusal(r *http.Request, id acl.Identity, key wire.InstanceKey, reason string) {
	if !s.allowAudit(id.Name) {
		s.metrics.unaudited.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
	defer cancel()
	err := s.cfg.Store.Audit(ctx, wire.Event{Kind: wire.EventRefused, Namespace: key.Namespace,
		Service: key.Service, Instance: key.ID, Actor: id.Name, Reason: reason})
	if err != nil {
		s.log.Warn("recording refusal in the audit trail", "err", err)
		s.metrics.unaudited.Inc()
	}
}

// allowAudit rations refusals written to the audit trail: at most
// AuditRefusals a second in all, and one a second per identity, so that
// one token cannot crowd out the others' refusals.
func (s *Server) allowAudit(who string) bool {
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	now := s.cfg.Now()
	if now.Sub(s.auditWindow) >= time.Second {
		s.auditWindow, s.auditCount = now, 0
		s.auditBy = map[string]int{}
	}
	if s.auditCount >= s.cfg.AuditRefusals || s.auditBy[who] >= 1 {
		return false
	}
	s.auditCount++
	s.auditBy[who]++
	return true
}
