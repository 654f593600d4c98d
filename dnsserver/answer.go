package dnsserver

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

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
	// mayWait: the query may wait for an unheld service (it has not
	// waited yet); wait is what it would wait for (see Config.Unheld).
	mayWait bool
	wait    <-chan struct{}
}

// RevisionOption is the EDNS option code (RFC 6891 §9, local use) a
// query carries, empty, to ask which view the answer came from, as
// NSID (RFC 5001) asks which server: the answer carries it back with 8
// bytes, the store revision (big-endian) of the status table answered
// from, or, on an agent, of the view of the service asked about. `cairn
// replay --revision N` shows that view. Without the option nothing is
// added.
const RevisionOption = 65430

// rcodeWait is answer's rcode for a query that waits for an unheld
// service (request.wait): nothing is sent yet.
const rcodeWait = -1

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

// answer builds the response to req in buf.
func (s *Server) answer(req *request, buf []byte) ([]byte, int, uint16) {
	q := query{tcp: req.tcp, remote: req.remote, mayWait: !req.waited}
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
	limit, badCookie := s.edns(req, &q)
	if req.hasOPT && req.version > 0 {
		// BADVERS (16): the low 4 bits in the header, the rest in OPT.
		if !m.start(buf, req, qflags, limit) {
			return s.formerr(buf, req.id, qflags)
		}
		m.flags &^= flagAA
		m.reserve = q.o.size()
		return m.finish(dns.RcodeBadVers, &q.o), dns.RcodeBadVers, q.qtype
	}
	if req.hasOPT && !badCookie {
		q.ecs(req, s)
	}
	if q.tcp {
		limit = maxMsg
	}
	if !m.start(buf, req, qflags, limit) {
		return s.formerr(buf, req.id, qflags)
	}
	m.reserve = q.o.size()
	if badCookie {
		// RFC 7873 §5.2.2: FORMERR, the question echoed, no cookie.
		m.flags &^= flagAA
		return s.finish(&m, &q, dns.RcodeFormatError)
	}
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
		age := s.now(req).Sub(last)
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
	if req.wantsRevision && q.o.present {
		q.o.hasRevision, q.o.revision = true, t.StoreRevision()
		m.reserve = q.o.size()
	}
	rcode := s.resolve(&m, &q, name, t)
	if rcode == rcodeWait {
		req.wait = q.wait
		return nil, rcodeWait, q.qtype
	}
	if q.stale {
		if rcode == dns.RcodeNameError && q.o.nede > 0 {
			q.o.edes[0].code = dns.ExtendedErrorCodeStaleNXDOMAINAnswer // same size as 3
		}
		s.m.staleAnswers.Inc()
	}
	return s.finish(&m, &q, rcode)
}

// edns sets up the answer's OPT record from the query's, when it has
// one (the size, DO, and for EDNS version 0 the answer to its cookie),
// and returns the UDP size limit. badCookie reports a malformed COOKIE
// option, which is answered FORMERR.
func (s *Server) edns(req *request, q *query) (limit int, badCookie bool) {
	limit = s.bareOPT(req, q)
	if !req.hasOPT || req.version > 0 || !req.hasCookie || s.cookies == nil {
		return limit, false
	}
	if req.cookieVerdict == cookieUnchecked {
		s.checkCookie(req, s.now(req))
	}
	if req.cookieVerdict == cookieMalformed {
		return limit, true
	}
	s.cookies.cookieOpt(req, &q.o)
	return limit, false
}

// bareOPT sets up the answer's OPT record, with no option, when the
// query has one, and returns the UDP size limit.
func (s *Server) bareOPT(req *request, q *query) int {
	if !req.hasOPT {
		return 512
	}
	q.o = opt{present: true, udpSize: s.cfg.UDPSize, do: req.do}
	return int(min(max(req.udpSize, 512), s.cfg.UDPSize))
}

// truncated is the answer response-rate limiting slips through (rrl.go):
// the question with TC set and no records, so that the client asks again
// over TCP, which is never limited; an OPT record without options when
// the query had one. Never a cookie: a server cookie would make the
// answer bigger than a query that carried only a client cookie, and a
// client cookie alone is malformed in a response (RFC 7873 §5.3); a
// client learns its server cookie from the TCP answer (docs/decisions.md,
// "A slipped answer carries no cookie"). A query answered without its
// question (NOTIMP, FORMERR) or without records anyway (BADVERS, a
// malformed cookie) gets that answer: it is no bigger. Whatever the query,
// the answer is no longer than it when its length is known (a question
// name compressed into the header unpacks longer than it came): past
// that, the header alone, TC set.
func (s *Server) truncated(req *request, buf []byte) ([]byte, int, uint16) {
	if req.opcode != dns.OpcodeQuery || req.bad || req.hasOPT && req.version > 0 {
		return s.answer(req, buf)
	}
	if req.hasOPT && req.hasCookie && s.cookies != nil {
		if req.cookieVerdict == cookieUnchecked {
			s.checkCookie(req, s.now(req))
		}
		if req.cookieVerdict == cookieMalformed {
			return s.answer(req, buf)
		}
	}
	q := query{tcp: req.tcp, remote: req.remote, name: req.name, qtype: req.qtype}
	limit := s.bareOPT(req, &q)
	var m msg
	if !m.start(buf, req, req.qflags, limit) {
		return s.formerr(buf, req.id, req.qflags)
	}
	m.flags &^= flagAA // no data: nothing to be authoritative about
	m.truncate()
	out, rcode, qtype := s.finish(&m, &q, dns.RcodeSuccess)
	if req.wireLen > 0 && len(out) > req.wireLen {
		binaryHeader(buf, req.id, flagQR|flagTC|req.qflags)
		return buf[:headerLen], dns.RcodeSuccess, qtype
	}
	return out, rcode, qtype
}

func (s *Server) formerr(buf []byte, id, qflags uint16) ([]byte, int, uint16) {
	binaryHeader(buf, id, flagQR|qflags&flagRD|dns.RcodeFormatError)
	return buf[:headerLen], dns.RcodeFormatError, 0
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
		if !d.HasNamespace(status.NameKey(kb[:], name.Namespace)) {
			return s.nxdomain(m, q, t)
		}
		return s.nodata(m, q, t)
	case zones.Instance:
		slot, ok := d.SlotOf(status.NameKey(kb[:], name.Instance, name.Service, name.Namespace))
		if !ok {
			return s.unheld(m, q, t, d, name)
		}
		return s.instance(m, q, t, d, slot)
	}
	id, ok := d.ServiceID(status.NameKey(kb[:], name.Service, name.Namespace))
	if !ok {
		return s.unheld(m, q, t, d, name)
	}
	svc := d.Services[id]
	if q.o.hasRevision && s.cfg.Revision != nil {
		if rev, ok := s.cfg.Revision(svc.Namespace, svc.Name); ok {
			q.o.revision = rev
		}
	}
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
// The record is packed once per serial and TTL, not once per answer: a
// record a query made would be garbage the collector has to chase on the
// one core the queries are answered on.
func (s *Server) negative(m *msg, q *query, t *status.Table, rcode int) int {
	sn, ttl := serial(t), q.ttl(s.cfg.Zone.NegativeTTL())
	soa := s.soa.Load()
	if soa == nil || soa.serial != sn || soa.ttl != ttl {
		soa = s.packSOA(sn, ttl)
		s.soa.Store(soa)
	}
	if !m.raw(soa.b) {
		// A negative answer without its SOA cannot be cached for the
		// negative TTL (RFC 2308): truncated, so that the resolver asks
		// over TCP, rather than silently short.
		m.truncate()
		return rcode
	}
	m.ns++
	return rcode
}

// soaWire is the zone's SOA record packed (uncompressed, so it can go
// anywhere in a message) for one serial and TTL.
type soaWire struct {
	serial, ttl uint32
	b           []byte
}

func (s *Server) packSOA(serial, ttl uint32) *soaWire {
	rr := s.cfg.Zone.SOA(serial)
	rr.Hdr.Ttl = ttl
	// Two names of at most 255 octets and 20 of fields, after the
	// header: 1 KiB holds any SOA.
	b := make([]byte, 1024)
	n, err := dns.PackRR(rr, b, 0, nil, false)
	if err != nil {
		// Not for names the zone accepted; were it to happen, negative
		// answers go truncated rather than without their SOA.
		s.log.Error("packing the zone's SOA record", "err", err)
		n = 0
	}
	return &soaWire{serial: serial, ttl: ttl, b: b[:n:n]}
}

func (s *Server) nodata(m *msg, q *query, t *status.Table) int {
	return s.negative(m, q, t, dns.RcodeSuccess)
}

func (s *Server) nxdomain(m *msg, q *query, t *status.Table) int {
	return s.negative(m, q, t, dns.RcodeNameError)
}

// unheld answers a name under a service the table has not found: NXDOMAIN,
// unless the table holds only some services (Config.Unheld) and this one
// may yet come: the query then waits for it (rcodeWait), or, having
// waited, is SERVFAIL with EDE 14 (Not Ready) — never a denial the
// resolver would cache for a name that exists.
func (s *Server) unheld(m *msg, q *query, t *status.Table, d *status.Directory, name zones.Name) int {
	if s.cfg.Unheld != nil {
		var kb [2*63 + 1]byte
		if _, held := d.ServiceID(status.NameKey(kb[:], name.Service, name.Namespace)); !held {
			if ch := s.cfg.Unheld(strings.ToLower(name.Namespace), strings.ToLower(name.Service)); ch != nil {
				if q.mayWait {
					q.wait = ch
					return rcodeWait
				}
				q.addEDE(m, dns.ExtendedErrorCodeNotReady, "view not held yet")
				return dns.RcodeServerFailure
			}
		}
	}
	return s.nxdomain(m, q, t)
}
