package dnsserver

import (
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

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

// evacuatedText is EDE 0's text on an answer that holds endpoints of an
// evacuated zone because nothing else could carry it (SPEC §6).
const evacuatedText = "evacuated-zone: nothing outside the evacuated zone can carry this answer"

// peerStaleText is EDE 3's text on an answer that is stale because it
// holds another region's endpoints from a view older than stale-after,
// while the node's own view is fresh.
const peerStaleText = "another region's view, older than stale-after"

// noteDisregarded marks an answer whose selection served endpoints under
// the guard, or from an evacuated zone: EDE 0; or another region's from
// a stale view of it: EDE 3, and its TTLs capped. All decided before its
// records are written.
func (s *Server) noteDisregarded(m *msg, q *query, sel selection) {
	if sel.disregarded {
		q.addEDE(m, dns.ExtendedErrorCodeOther, disregardedText)
		s.m.disregarded.Inc()
	}
	if sel.evacuated {
		q.addEDE(m, dns.ExtendedErrorCodeOther, evacuatedText)
	}
	if sel.stale {
		notePeerStale(m, q)
	}
}

// notePeerStale makes an answer that holds another region's endpoints
// from a stale view of it a stale answer (status.PeerStale): EDE 3 and
// TTLs capped, as an answer from a stale table is; one EDE 3 when both.
func notePeerStale(m *msg, q *query) {
	if !q.stale {
		q.stale = true
		q.addEDE(m, dns.ExtendedErrorCodeStaleAnswer, peerStaleText)
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
			if q.tcp && m.an > 0 {
				// Over TCP there is nowhere else to ask: the records
				// that fit, a weighted random sample of the best tiers
				// (sel.chosen's order), without TC (docs/decisions.md,
				// "An SRV answer too big for TCP").
				break
			}
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
	if e.Flags.Has(status.PeerStale) {
		notePeerStale(m, q)
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
