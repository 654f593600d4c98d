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
	verdict := rrlPass
	if !tcp && s.rrl != nil {
		// Over UDP only: cairn's own loop (udp.go) serves UDP, but a
		// caller may hand this handler a UDP writer; TCP is never limited.
		verdict = s.limit(&req, true, req.remote)
	}
	var out []byte
	var rcode int
	var qtype uint16
	switch verdict {
	case rrlDrop:
		return
	case rrlSlip:
		out, rcode, qtype = s.truncated(&req, *bp)
	default:
		out, rcode, qtype = s.answer(&req, *bp)
	}
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
	// now is when the query came, read once for all it needs (serve-stale,
	// RRL, cookies); zero: ask Config.Now (see Server.now).
	now     time.Time
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
	// The first COOKIE option (RFC 7873), when hasCookie: cookieLen
	// octets, the first maxCookieLen of them in cookie (a longer one is
	// malformed anyway).
	hasCookie bool
	cookieLen int
	cookie    [maxCookieLen]byte
	// wantsRevision: the query carries the revision option
	// (RevisionOption), asking which view the answer came from.
	wantsRevision bool
	// cookieVerdict is what checking the cookie found, and cookieNow the
	// time (in seconds, as cookies count it) it was checked at (cookie.go).
	cookieVerdict cookieVerdict
	cookieNow     uint32
	remote        netip.Addr
	tcp           bool
	// wireLen is the query's length on the wire, when known (the UDP
	// loop's queries): a slipped answer is never longer (truncated).
	wireLen int
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
		ecs := false
		for _, op := range o.Option {
			switch e := op.(type) {
			case *dns.EDNS0_SUBNET:
				if ecs {
					continue // the first one is used
				}
				ecs = true
				req.ecsFamily, req.ecsSource = e.Family, e.SourceNetmask
				switch e.Family {
				case 1:
					copy(req.ecsAddr[:], e.Address.To4())
				case 2:
					copy(req.ecsAddr[:], e.Address.To16())
				}
			case *dns.EDNS0_LOCAL:
				if e.Code == RevisionOption {
					req.wantsRevision = true
				}
			case *dns.EDNS0_COOKIE:
				if !req.hasCookie { // only the first one counts (RFC 7873 §5.2)
					req.hasCookie = true
					req.cookieLen = unhex(req.cookie[:], e.Cookie)
				}
			}
		}
	}
	return req
}

// unhex decodes the hex string miekg/dns keeps a cookie option's octets
// in into dst, as far as it goes, and returns the octets' number, without
// allocating. (It is always even, lower-case hex: miekg/dns made it.)
func unhex(dst []byte, s string) int {
	n := len(s) / 2
	for i := range min(n, len(dst)) {
		dst[i] = nibble(s[2*i])<<4 | nibble(s[2*i+1])
	}
	return n
}

func nibble(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
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
