package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

// Server is cairn's authoritative DNS server (SPEC §3).
type Server struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	subnets []Subnet // longest prefix first

	bufs  sync.Pool // *[]byte of maxMsg
	cands sync.Pool // *[]candidate

	mu      sync.Mutex
	tcp     *dns.Server
	pc      net.PacketConn
	ln      net.Listener
	udpAddr net.Addr
	tcpAddr net.Addr
	ready   chan struct{}
	started time.Time
	running atomic.Bool
}

const maxMsg = dns.MaxMsgSize

// New validates cfg and returns a Server; Run serves.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "dns"), m: newMetrics(cfg.Registerer),
		subnets: slices.Clone(cfg.Subnets), ready: make(chan struct{}), started: cfg.Now()}
	slices.SortStableFunc(s.subnets, func(a, b Subnet) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	s.bufs.New = func() any { b := make([]byte, maxMsg); return &b }
	s.cands.New = func() any { c := make([]candidate, 0, 64); return &c }
	return s, nil
}

// Ready is closed once the server listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

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
		s.log.Info("DNS listening", "udp", pc.LocalAddr(), "tcp", ln.Addr(), "zone", s.cfg.Zone.Domain())
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

// query is one query being answered.
type query struct {
	name   string // as asked, case preserved
	qtype  uint16
	tcp    bool
	stale  bool
	remote netip.Addr
	o      opt
	// ecsUsed: the client subnet came from a trusted source and places
	// the caller.
	ecsUsed bool
}

// addEDE adds an Extended DNS Error to the answer (when the query has
// EDNS: without it there is nowhere to put one) and keeps room for it:
// an EDE is decided before the records it explains are written.
func (q *query) addEDE(m *msg, code uint16, text string) {
	if q.o.present && q.o.nede < len(q.o.edes) {
		q.o.edes[q.o.nede] = ede{code, text}
		q.o.nede++
	}
	m.reserve = q.o.size()
}

// capped returns rr, or a copy with its TTL capped when the answer is
// stale (the zone's records are shared and never modified).
func (q *query) capped(rr dns.RR) dns.RR {
	if !q.stale {
		return rr
	}
	rr = dns.Copy(rr)
	rr.Header().Ttl = q.ttl(rr.Header().Ttl)
	return rr
}

// ttl caps a TTL for stale answers (RFC 8767).
func (q *query) ttl(t uint32) uint32 {
	if q.stale {
		return min(t, staleTTL)
	}
	return t
}

// ServeDNS implements dns.Handler: the TCP path (and any query the UDP
// fast path hands over).
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	req := requestOf(r, w.RemoteAddr())
	out, rcode, qtype := s.answer(&req, *bp)
	if _, err := w.Write(out); err != nil {
		s.log.Debug("writing DNS answer", "err", err)
	}
	s.m.observe(qtype, rcode, time.Since(start))
}

// request is what answering needs of a query, whether miekg/dns parsed it
// (requestOf) or the UDP fast path did (parseQuery).
type request struct {
	id      uint16
	opcode  int
	qflags  uint16 // the query's RD and CD bits
	bad     bool   // not exactly one question, records in answer or authority, two OPTs
	name    string // presentation form, case preserved
	qtype   uint16
	qclass  uint16
	rawQ    []byte // the question as it came on the wire (fast path), else nil
	hasOPT  bool
	udpSize uint16
	version uint8
	do      bool
	// ecs is the client subnet option, when ecsFamily != 0.
	ecsFamily uint16
	ecsSource uint8
	ecsAddr   [16]byte
	remote    netip.Addr
	tcp       bool
}

// requestOf takes what answering needs from a parsed query.
func requestOf(r *dns.Msg, remote net.Addr) request {
	req := request{id: r.Id, opcode: r.Opcode}
	switch a := remote.(type) {
	case *net.TCPAddr:
		req.tcp = true
		req.remote, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		req.remote, _ = netip.AddrFromSlice(a.IP)
	}
	req.remote = req.remote.Unmap()
	if r.RecursionDesired {
		req.qflags |= flagRD
	}
	if r.CheckingDisabled {
		req.qflags |= flagCD
	}
	req.bad = len(r.Question) != 1 || len(r.Answer) != 0 || len(r.Ns) != 0 || countOPT(r.Extra) > 1
	if len(r.Question) > 0 {
		q := r.Question[0]
		req.name, req.qtype, req.qclass = q.Name, q.Qtype, q.Qclass
	}
	if o := r.IsEdns0(); o != nil {
		req.hasOPT, req.udpSize, req.version, req.do = true, o.UDPSize(), o.Version(), o.Do()
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_SUBNET); ok {
				req.ecsFamily, req.ecsSource = e.Family, e.SourceNetmask
				switch e.Family {
				case 1:
					copy(req.ecsAddr[:], e.Address.To4())
				case 2:
					copy(req.ecsAddr[:], e.Address.To16())
				}
				break
			}
		}
	}
	return req
}

// answer builds the response to req in buf.
func (s *Server) answer(req *request, buf []byte) ([]byte, int, uint16) {
	q := query{tcp: req.tcp, remote: req.remote}
	qflags := req.qflags
	var m msg

	// Malformed or unsupported queries: FORMERR, NOTIMP, BADVERS.
	if req.opcode != dns.OpcodeQuery {
		// RFC 8906: NOTIMP, the opcode echoed, no other flag copied.
		binaryHeader(buf, req.id, flagQR|uint16(req.opcode&0xF)<<11|dns.RcodeNotImplemented)
		return buf[:headerLen], dns.RcodeNotImplemented, 0
	}
	if req.bad {
		binaryHeader(buf, req.id, flagQR|qflags&flagRD|dns.RcodeFormatError)
		return buf[:headerLen], dns.RcodeFormatError, 0
	}
	q.name, q.qtype = req.name, req.qtype
	limit := 512
	if req.hasOPT {
		q.o = opt{present: true, udpSize: s.cfg.UDPSize, do: req.do}
		limit = int(min(max(req.udpSize, 512), s.cfg.UDPSize))
		if req.version > 0 {
			// BADVERS (16): the low 4 bits in the header, the rest in OPT.
			if !m.start(buf, req, qflags, limit) {
				return s.formerr(buf, req.id, qflags)
			}
			m.flags &^= flagAA
			m.reserve = q.o.size()
			return m.finish(dns.RcodeBadVers, &q.o), dns.RcodeBadVers, q.qtype
		}
		q.ecs(req, s)
	}
	if q.tcp {
		limit = maxMsg
	}
	if !m.start(buf, req, qflags, limit) {
		return s.formerr(buf, req.id, qflags)
	}
	m.reserve = q.o.size()
	if req.qclass != dns.ClassINET && req.qclass != dns.ClassANY {
		m.flags &^= flagAA
		return s.finish(&m, &q, dns.RcodeRefused)
	}
	switch req.qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		// No zone transfer (SPEC §8).
		m.flags &^= flagAA
		return s.finish(&m, &q, dns.RcodeRefused)
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeMAILA, dns.TypeMAILB:
		m.flags &^= flagAA
		return s.finish(&m, &q, dns.RcodeFormatError)
	}

	name := s.cfg.Zone.Classify(q.name)
	if name.Kind == zones.OutsideZone {
		m.flags &^= flagAA // not authoritative; no referral either
		q.addEDE(&m, dns.ExtendedErrorCodeNotAuthoritative, "")
		return s.finish(&m, &q, dns.RcodeRefused)
	}

	// Serve-stale (RFC 8767): a view of the store older than StaleAfter
	// answers from the last table with EDE 3 (19 for NXDOMAIN); past
	// MaxStale, SERVFAIL with EDE 22.
	if s.cfg.LastSync != nil {
		last := s.cfg.LastSync()
		if last.IsZero() {
			// Never heard from a leader since it started (a restart
			// during an outage): stale since then, from its own data.
			last = s.started
		}
		age := s.cfg.Now().Sub(last)
		switch {
		case age > s.cfg.MaxStale:
			q.addEDE(&m, dns.ExtendedErrorCodeNoReachableAuthority, "store view older than max-stale")
			s.m.staleServfail.Inc()
			return s.finish(&m, &q, dns.RcodeServerFailure)
		case age > s.cfg.StaleAfter, s.cfg.Restored != nil && s.cfg.Restored():
			q.stale = true
			q.addEDE(&m, dns.ExtendedErrorCodeStaleAnswer, "") // 19 instead for NXDOMAIN, below
		}
	}
	t := s.cfg.Table.Acquire()
	if t == nil {
		q.addEDE(&m, dns.ExtendedErrorCodeNotReady, "no status table yet")
		return s.finish(&m, &q, dns.RcodeServerFailure)
	}
	defer t.Release()
	rcode := s.resolve(&m, &q, name, t)
	if q.stale {
		if rcode == dns.RcodeNameError && q.o.nede > 0 {
			q.o.edes[0].code = dns.ExtendedErrorCodeStaleNXDOMAINAnswer // same size as 3
		}
		s.m.staleAnswers.Inc()
	}
	return s.finish(&m, &q, rcode)
}

func (s *Server) formerr(buf []byte, id, qflags uint16) ([]byte, int, uint16) {
	binaryHeader(buf, id, flagQR|qflags&flagRD|dns.RcodeFormatError)
	return buf[:headerLen], dns.RcodeFormatError, 0
}

func binaryHeader(buf []byte, id, flags uint16) {
	clear(buf[:headerLen])
	buf[0], buf[1] = byte(id>>8), byte(id)
	buf[2], buf[3] = byte(flags>>8), byte(flags)
}

func countOPT(rrs []dns.RR) int {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// finish completes the message with the OPT record (and its EDEs); an
// answer that leaves no room for it is truncated.
func (s *Server) finish(m *msg, q *query, rcode int) ([]byte, int, uint16) {
	if rcode == dns.RcodeServerFailure {
		// This server could not answer with authority: a resolver must
		// not take a SERVFAIL for an authoritative statement.
		m.flags &^= flagAA
	}
	m.reserve = 0
	if m.off+q.o.size() > m.limit {
		m.truncate()
	}
	return m.finish(rcode, &q.o), rcode, q.qtype
}

// ecs reads the EDNS Client Subnet option (RFC 7871). It is echoed in
// every answer, its address masked to the source prefix; only a trusted
// source's is used to place the caller (q.ecsUsed), and then the scope is
// the source prefix length — the answer holds for that block, whatever
// subnet it fell in — else 0: the answer does not depend on it.
func (q *query) ecs(req *request, s *Server) {
	var a netip.Addr
	switch req.ecsFamily {
	case 1:
		a = netip.AddrFrom4([4]byte(req.ecsAddr[:4]))
	case 2:
		a = netip.AddrFrom16(req.ecsAddr)
	default:
		return
	}
	if int(req.ecsSource) > a.BitLen() {
		return
	}
	p, err := a.Prefix(int(req.ecsSource))
	if err != nil {
		return
	}
	q.o.ecsFamily, q.o.ecsSource, q.o.ecsAddr = req.ecsFamily, req.ecsSource, p.Addr()
	if !q.remote.IsValid() {
		return
	}
	for _, tp := range s.cfg.ECSTrusted {
		if tp.Contains(q.remote) {
			q.ecsUsed = true
			q.o.ecsScope = req.ecsSource
			return
		}
	}
}

// locality places the caller: its trusted client subnet, else its source
// address, in the configured subnets; else this server's own place.
func (s *Server) locality(q *query, t *status.Table) Locality {
	place := s.cfg.Own
	matched := false
	if q.ecsUsed {
		a := q.o.ecsAddr.Unmap()
		for _, sn := range s.subnets {
			if sn.Prefix.Contains(a) {
				place, matched = sn.Place, true
				break
			}
		}
	}
	if !matched && q.remote.IsValid() {
		for _, sn := range s.subnets {
			if sn.Prefix.Contains(q.remote) {
				place = sn.Place
				break
			}
		}
	}
	l := t.Localities()
	r, _ := l.ID(place.Region)
	z, _ := l.ID(place.Zone)
	return Locality{Region: uint16(r), Zone: uint16(z)}
}

// resolve answers a name in the zone; it returns the rcode.
func (s *Server) resolve(m *msg, q *query, name zones.Name, t *status.Table) int {
	z := s.cfg.Zone
	switch name.Kind {
	case zones.Apex:
		switch q.qtype {
		case dns.TypeSOA:
			return s.records(m, q, t, []dns.RR{z.SOA(serial(t))}, nil)
		case dns.TypeNS:
			return s.records(m, q, t, z.NS(), z.Glue())
		case dns.TypeANY:
			return s.any(m, q)
		}
		rrs, _ := z.Static(q.name, q.qtype)
		return s.records(m, q, t, rrs, nil)
	case zones.ServiceTree:
		return s.nodata(m, q, t)
	case zones.Static:
		if q.qtype == dns.TypeANY {
			return s.any(m, q)
		}
		rrs, _ := z.Static(q.name, q.qtype)
		if len(rrs) == 0 {
			return s.nodata(m, q, t)
		}
		return s.records(m, q, t, rrs, nil)
	case zones.NotFound:
		return s.nxdomain(m, q, t)
	}

	// The directory's writer indexed it by name (status.Directory.Index):
	// a lookup here is one map access, whatever the number of instances.
	d := t.Directory()
	var kb [300]byte
	switch name.Kind {
	case zones.Namespace:
		if !d.HasNamespace(key(kb[:], name.Namespace)) {
			return s.nxdomain(m, q, t)
		}
		return s.nodata(m, q, t)
	case zones.Instance:
		slot, ok := d.SlotOf(key(kb[:], name.Instance, name.Service, name.Namespace))
		if !ok {
			return s.nxdomain(m, q, t)
		}
		return s.instance(m, q, t, d, slot)
	}
	id, ok := d.ServiceID(key(kb[:], name.Service, name.Namespace))
	if !ok {
		return s.nxdomain(m, q, t)
	}
	svc := d.Services[id]
	switch name.Kind {
	case zones.Service:
		switch q.qtype {
		case dns.TypeA, dns.TypeAAAA:
			return s.addrs(m, q, t, d, id, svc)
		case dns.TypeANY:
			return s.any(m, q)
		}
		return s.nodata(m, q, t)
	case zones.SRVProto:
		for _, p := range svc.Ports {
			if strings.EqualFold(p.Protocol, name.Proto) {
				return s.nodata(m, q, t)
			}
		}
		return s.nxdomain(m, q, t)
	case zones.SRV:
		for _, p := range svc.Ports {
			if strings.EqualFold(p.Name, name.Port) && strings.EqualFold(p.Protocol, name.Proto) {
				switch q.qtype {
				case dns.TypeSRV:
					return s.srv(m, q, t, d, id, svc, p, name)
				case dns.TypeANY:
					return s.any(m, q)
				}
				return s.nodata(m, q, t)
			}
		}
		return s.nxdomain(m, q, t)
	}
	return s.nxdomain(m, q, t)
}

// serial is the SOA serial: the store revision the table was built from.
// It only grows; RFC 1982 arithmetic covers the 32-bit wrap.
func serial(t *status.Table) uint32 { return uint32(t.StoreRevision()) }

// records answers with rrs (TC when they do not fit) and extra in the
// additional section (left out when it does not fit).
func (s *Server) records(m *msg, q *query, t *status.Table, rrs, extra []dns.RR) int {
	if len(rrs) == 0 {
		return s.nodata(m, q, t)
	}
	for _, rr := range rrs {
		if !m.rr(q.capped(rr)) {
			m.truncate()
			return dns.RcodeSuccess
		}
		m.an++
	}
	for _, rr := range extra {
		if !m.rr(q.capped(rr)) {
			break
		}
		m.ar++
	}
	return dns.RcodeSuccess
}

// any answers ANY minimally (RFC 8482): one synthesised HINFO.
func (s *Server) any(m *msg, q *query) int {
	h := &dns.HINFO{Hdr: dns.RR_Header{Name: q.name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: q.ttl(3600)},
		Cpu: "RFC8482"}
	if !m.rr(h) {
		m.truncate()
		return dns.RcodeSuccess
	}
	m.an++
	return dns.RcodeSuccess
}

// negative adds the SOA for a negative answer, its TTL the negative TTL.
func (s *Server) negative(m *msg, q *query, t *status.Table, rcode int) int {
	soa := s.cfg.Zone.SOA(serial(t))
	soa.Hdr.Ttl = q.ttl(s.cfg.Zone.NegativeTTL())
	if !m.rr(soa) {
		// A negative answer without its SOA cannot be cached for the
		// negative TTL (RFC 2308): truncated, so that the resolver asks
		// over TCP, rather than silently short.
		m.truncate()
		return rcode
	}
	m.ns++
	return rcode
}

func (s *Server) nodata(m *msg, q *query, t *status.Table) int {
	return s.negative(m, q, t, dns.RcodeSuccess)
}

func (s *Server) nxdomain(m *msg, q *query, t *status.Table) int {
	return s.negative(m, q, t, dns.RcodeNameError)
}

// family reports whether a is of the family qtype asks for.
func family(qtype uint16, a netip.Addr) bool {
	if qtype == dns.TypeA {
		return a.Is4()
	}
	return a.Is6() && !a.Is4In6()
}

func dnsTTL(svc status.ServiceInfo) uint32 {
	return uint32(max(svc.DNSTTL/time.Second, 0))
}

// addrs answers A or AAAA at a service name: the chosen eligible
// endpoints' addresses of the asked family, at most ARecordLimit.
func (s *Server) addrs(m *msg, q *query, t *status.Table, d *status.Directory, id uint32, svc status.ServiceInfo) int {
	members := t.Members(id)
	has := func(slot uint32) bool {
		in := d.Instance(int(slot))
		if in == nil {
			return false
		}
		for _, a := range in.Addrs {
			if family(q.qtype, a) {
				return true
			}
		}
		return false
	}
	cp := s.cands.Get().(*[]candidate)
	defer s.cands.Put(cp)
	limit := svc.ARecordLimit
	if limit <= 0 {
		limit = defaultARecordLimit
	}
	sel := selectA(t, members, s.locality(q, t), svc.MinHealthyFraction, limit, has, s.cfg.Rand, *cp)
	*cp = sel.chosen[:0]
	if len(sel.chosen) == 0 {
		return s.nodata(m, q, t)
	}
	s.noteDisregarded(m, q, sel)
	ttl := q.ttl(dnsTTL(svc))
	n := 0
	for _, c := range sel.chosen {
		for _, a := range d.Instance(int(c.slot)).Addrs {
			if n == limit || !family(q.qtype, a) {
				continue
			}
			if !m.addrRR(qnamePtr, a, ttl) {
				m.truncate()
				return dns.RcodeSuccess
			}
			m.an++
			n++
		}
	}
	return dns.RcodeSuccess
}

// disregardedText is EDE 0's text on an answer served under the guard.
const disregardedText = "health-disregarded: fewer healthy endpoints than the service's minimum healthy fraction"

// noteDisregarded marks an answer whose selection served endpoints under
// the guard: EDE 0, decided before its records are written.
func (s *Server) noteDisregarded(m *msg, q *query, sel selection) {
	if sel.disregarded {
		q.addEDE(m, dns.ExtendedErrorCodeOther, disregardedText)
		s.m.disregarded.Inc()
	}
}

// srv answers SRV at _port._proto.<svc>: every eligible endpoint,
// priority = topology tier, weight = published weight (at least 1),
// target = the instance name, its addresses in the additional section.
func (s *Server) srv(m *msg, q *query, t *status.Table, d *status.Directory, id uint32, svc status.ServiceInfo, p status.Port, name zones.Name) int {
	members := t.Members(id)
	has := func(slot uint32) bool {
		in := d.Instance(int(slot))
		if in == nil {
			return false
		}
		_, ok := in.Port(p.Name)
		return ok || p.Number != 0
	}
	cp := s.cands.Get().(*[]candidate)
	defer s.cands.Put(cp)
	sel := selectSRV(t, members, s.locality(q, t), svc.MinHealthyFraction, has, s.cfg.Rand, *cp)
	*cp = sel.chosen[:0]
	if len(sel.chosen) == 0 {
		return s.nodata(m, q, t)
	}
	s.noteDisregarded(m, q, sel)
	// The targets share the question's suffix after "_port._proto.".
	suffix := headerLen + 1 + 1 + len(name.Port) + 1 + 1 + len(name.Proto)
	ttl := q.ttl(dnsTTL(svc))
	var targets [64]int
	nt := 0
	for _, c := range sel.chosen {
		in := d.Instance(int(c.slot))
		port, ok := in.Port(p.Name)
		if !ok {
			port = p.Number
		}
		off, ok := m.srvRR(ttl, uint16(c.tier), max(c.weight, 1), port, in.ID, suffix)
		if !ok {
			m.truncate()
			return dns.RcodeSuccess
		}
		m.an++
		if nt < len(targets) {
			targets[nt] = off
			nt++
		}
	}
	// Additional: the targets' addresses while they fit (RFC 2181 §9:
	// leaving them out is not truncation).
	for i, c := range sel.chosen[:nt] {
		if targets[i] > 0x3FFF {
			break // beyond a compression pointer's reach
		}
		ptr := uint16(0xC000 | targets[i])
		full := false
		for _, a := range d.Instance(int(c.slot)).Addrs {
			if !m.addrRR(ptr, a, ttl) {
				full = true
				break
			}
			m.ar++
		}
		if full {
			break
		}
	}
	return dns.RcodeSuccess
}

// instance answers at an instance name: its addresses while it is
// registered and not terminated, whatever its health (the name is the
// instance's own, not a load-balancing answer).
func (s *Server) instance(m *msg, q *query, t *status.Table, d *status.Directory, slot uint32) int {
	e := t.Entry(int(slot))
	in := d.Instance(int(slot))
	if in == nil || e.Lifecycle == status.Terminated || e.Incarnation != in.Incarnation {
		return s.nxdomain(m, q, t)
	}
	if q.qtype == dns.TypeANY {
		return s.any(m, q)
	}
	if q.qtype != dns.TypeA && q.qtype != dns.TypeAAAA {
		return s.nodata(m, q, t)
	}
	svc, _ := d.Service(e.Service)
	ttl := q.ttl(dnsTTL(svc))
	for _, a := range in.Addrs {
		if !family(q.qtype, a) {
			continue
		}
		if !m.addrRR(qnamePtr, a, ttl) {
			m.truncate()
			return dns.RcodeSuccess
		}
		m.an++
	}
	if m.an == 0 {
		return s.nodata(m, q, t)
	}
	return dns.RcodeSuccess
}
