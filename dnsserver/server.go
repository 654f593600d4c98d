package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Server is cairn's authoritative DNS server (SPEC §3).
type Server struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	subnets []Subnet // longest prefix first

	parked parking // UDP queries waiting for an unheld service

	// rrl limits UDP responses per source prefix (rrl.go), cookies makes
	// and checks server cookies (cookie.go); nil when off.
	rrl     *rrl
	cookies *cookieKeys

	bufs  sync.Pool // *[]byte of maxMsg
	cands sync.Pool // *[]candidate

	// soa is the last negative answers' SOA record in wire form, copied
	// into them until the serial or the TTL changes (see negative).
	soa atomic.Pointer[soaWire]

	mu      sync.Mutex
	tcp     *dns.Server
	pc      net.PacketConn
	ln      net.Listener
	udpAddr net.Addr
	tcpAddr net.Addr
	ready   chan struct{}
	started time.Time
	running atomic.Bool
	// realClock: Config.Now is time.Now, so the time the UDP loop reads
	// for its metrics is the query's time too (one clock read a query).
	realClock bool
}

// now is req's time: the one read when it came, or Config.Now's.
func (s *Server) now(req *request) time.Time {
	if !req.now.IsZero() {
		return req.now
	}
	return s.cfg.Now()
}

const maxMsg = dns.MaxMsgSize

// New validates cfg and returns a Server; Run serves.
func New(cfg Config) (*Server, error) {
	realClock := cfg.Now == nil
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, realClock: realClock, log: cfg.Logger.With("component", "dns"), m: newMetrics(cfg.Registerer),
		subnets: slices.Clone(cfg.Subnets), ready: make(chan struct{}), started: cfg.Now(),
		parked: parking{stop: make(chan struct{})}}
	if cfg.RRL.Mode.enabled(cfg.Addr) {
		s.rrl = newRRL(cfg.RRL, s.started)
		s.m.rrlEnabled.Set(1)
	}
	if cfg.Cookies.Mode.enabled(cfg.Addr) {
		s.cookies = newCookieKeys(cfg.Cookies)
		s.m.cookiesEnabled.Set(1)
	}
	slices.SortStableFunc(s.subnets, func(a, b Subnet) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	s.bufs.New = func() any { b := make([]byte, maxMsg); return &b }
	s.cands.New = func() any { c := make([]candidate, 0, 64); return &c }
	return s, nil
}

// Ready is closed once the server listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Started is when the server was made, by Config.Now: a node that has
// never synced is stale since then (serve-stale, see answer).
func (s *Server) Started() time.Time { return s.started }

// Addrs returns the UDP and TCP addresses the server listens on (after
// Ready).
func (s *Server) Addrs() (udp, tcp net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udpAddr, s.tcpAddr
}

// Listen binds Config.Addr over UDP and TCP (the same port; with port 0
// the UDP port picked is also used for TCP), so that a caller can learn
// the addresses (Addrs) before Run serves. Run calls it if nobody did.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pc != nil {
		return nil
	}
	pc, ln, err := listen(s.cfg.Addr)
	if err != nil {
		return err
	}
	s.pc, s.ln = pc, ln
	s.udpAddr, s.tcpAddr = pc.LocalAddr(), ln.Addr()
	return nil
}

// Run serves on the addresses Listen bound until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("dnsserver: Run called twice")
	}
	if err := s.Listen(); err != nil {
		return err
	}
	pc, ln := s.pc, s.ln
	accept := func(h dns.Header) dns.MsgAcceptAction {
		if h.Bits&flagQR != 0 {
			return dns.MsgIgnore // a response: never answer one
		}
		// Everything else is accepted and judged by ServeDNS, so that
		// NOTIMP and FORMERR are answered as RFC 8906 asks (the
		// library's own rejection copies the query's flags).
		return dns.MsgAccept
	}
	idle := func() time.Duration { return s.cfg.TCPIdleTimeout }
	s.mu.Lock()
	capped := newCapListener(ln, s.cfg.TCPMaxConns, s.m.tcpRejected.Inc, s.m.tcpFDWaits.Inc)
	s.tcp = &dns.Server{Listener: capped, Handler: s, MsgAcceptFunc: accept, IdleTimeout: idle,
		ReadTimeout: s.cfg.TCPIdleTimeout, WriteTimeout: 5 * time.Second}
	tcp := s.tcp
	s.mu.Unlock()
	errc := make(chan error, 2)
	startedc := make(chan struct{})
	tcp.NotifyStartedFunc = func() { close(startedc) }
	go func() { errc <- s.serveUDP(pc) }()
	go func() { errc <- tcp.ActivateAndServe() }()
	select {
	case <-startedc:
		close(s.ready)
		s.log.Info("DNS listening", "udp", pc.LocalAddr(), "tcp", ln.Addr(), "zone", s.cfg.Zone.Domain(),
			"rrl", s.rrl != nil, "cookies", s.cookies != nil)
	case err := <-errc:
		// One failed before both started: stop the other and give up.
		pc.Close()
		ln.Close()
		<-errc
		return fmt.Errorf("serving DNS: %w", err)
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pc.Close() // ends the UDP readers
	_ = tcp.ShutdownContext(sctx)
	s.stopParking()
	for range 2 - btoi(first != nil) {
		<-errc
	}
	if first != nil {
		return fmt.Errorf("serving DNS: %w", first)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// listen opens UDP and TCP on the same address (port 0: the same picked
// port, tried a few times).
func listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("DNS address %q: %w", addr, err)
	}
	for range 10 {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listening for DNS on udp %s: %w", addr, err)
		}
		_, p, _ := net.SplitHostPort(pc.LocalAddr().String())
		ln, err := net.Listen("tcp", net.JoinHostPort(host, p))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" {
			return nil, nil, fmt.Errorf("listening for DNS on tcp %s: %w", addr, err)
		}
	}
	return nil, nil, errors.New("listening for DNS: no port free on both UDP and TCP")
}
