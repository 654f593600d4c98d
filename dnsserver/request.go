package dnsserver

import (
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status"
)

// ServeDNS implements dns.Handler: the TCP path. (The UDP reader in
// udp.go calls requestOf and answer itself, without a ResponseWriter.)
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	var remote netip.Addr
	var tcp bool
	switch a := w.RemoteAddr().(type) {
	case *net.TCPAddr:
		remote, tcp = a.AddrPort().Addr(), true
	case *net.UDPAddr:
		remote = a.AddrPort().Addr()
	}
	req := requestOf(r, remote.Unmap(), tcp)
	out, rcode, qtype := s.answer(&req, *bp)
	if rcode == rcodeWait {
		// A connection's own goroutine: it may wait here.
		s.waitUnheld(req.wait, s.parked.stop)
		req.waited = true
		out, rcode, qtype = s.answer(&req, *bp)
	}
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
	// waited: the query has waited for an unheld service, and is
	// answered from the table as it is. wait is set by answer when it
	// returns rcodeWait: what the query waits for.
	waited bool
	wait   <-chan struct{}
}

// requestOf takes what answering needs from a query parsed by miekg/dns,
// sent from remote (unmapped) over TCP or UDP.
func requestOf(r *dns.Msg, remote netip.Addr, tcp bool) request {
	req := request{id: r.Id, opcode: r.Opcode, remote: remote, tcp: tcp}
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

func countOPT(rrs []dns.RR) int {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
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
func (s *Server) locality(q *query, t *status.Table) status.Locality {
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
	return t.LocalityOf(place.Region, place.Zone)
}
