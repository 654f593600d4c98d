package dnsserver_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// sink is a dns.ResponseWriter that keeps the last answer: the one
// stand-in in these tests, for measuring the handler alone (the network
// tests use real sockets).
type sink struct {
	remote net.Addr
	last   []byte
}

func (s *sink) LocalAddr() net.Addr         { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (s *sink) RemoteAddr() net.Addr        { return s.remote }
func (s *sink) WriteMsg(m *dns.Msg) error   { b, err := m.Pack(); s.last = b; return err }
func (s *sink) Write(b []byte) (int, error) { s.last = append(s.last[:0], b...); return len(b), nil }
func (s *sink) Close() error                { return nil }
func (s *sink) TsigStatus() error           { return nil }
func (s *sink) TsigTimersOnly(bool)         {}
func (s *sink) Hijack()                     {}

func handlerCase(tb testing.TB, name string, qtype uint16) (*dnsserver.Server, *sink, *dns.Msg) {
	f := start(tb, shopServices(), own)
	return f.srv, &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}, query(name, qtype, true)
}

// protected turns on RRL, at a rate no test reaches (every response is
// accounted, none limited, as in the benchmark), and cookies.
func protected(c *dnsserver.Config) {
	cookies(c)
	c.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 100_000_000}
}

// cookieCases are queries with a client cookie (a server cookie is made)
// and with a valid server cookie (it is checked and echoed), made by a
// server of the fixture's secret at its clock.
func cookieCases(f *fixture) []struct {
	what   string
	cookie []byte
} {
	full := append(append([]byte(nil), clientCookie...), f.serverCookie(testSecret, clientCookie)...)
	return []struct {
		what   string
		cookie []byte
	}{{"client cookie", clientCookie}, {"valid server cookie", full}}
}

// The hot path allocates nothing of its own: the library's request
// unpacking is before ServeDNS, and the answer is written into a pooled
// buffer.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, c := range []struct {
		name  string
		qtype uint16
		max   float64
	}{
		{"web.shop.svc.cairn.internal.", dns.TypeA, 0},
		{"_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV, 0},
		{"w1.web.shop.svc.cairn.internal.", dns.TypeA, 0},
		{"nope.shop.svc.cairn.internal.", dns.TypeA, 0}, // the SOA record is made once per serial
	} {
		srv, w, q := handlerCase(t, c.name, c.qtype)
		srv.ServeDNS(w, q) // warm the pools and the view
		if n := testing.AllocsPerRun(200, func() { srv.ServeDNS(w, q) }); n > c.max {
			t.Errorf("%s %s: %v allocations per query, want at most %v", c.name, dns.TypeToString[c.qtype], n, c.max)
		}
	}
	// With RRL and cookies on: a cookie read from miekg/dns's form,
	// checked, answered; the response accounted.
	f := start(t, shopServices(), protected)
	w := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	for _, c := range cookieCases(f) {
		q := withCookie(query("web.shop.svc.cairn.internal.", dns.TypeA, true), c.cookie)
		f.srv.ServeDNS(w, q)
		if n := testing.AllocsPerRun(200, func() { f.srv.ServeDNS(w, q) }); n > 0 {
			t.Errorf("RRL and cookies on, %s: %v allocations per query, want none", c.what, n)
		}
		if r := new(dns.Msg); r.Unpack(w.last) != nil || len(cookieOf(t, r)) != 24 || len(r.Answer) == 0 {
			t.Errorf("RRL and cookies on, %s: the answer is not whole: %x", c.what, w.last)
		}
	}
}

// A query through the real UDP socket path (the batched read, the
// sender's address, the answer, the batched send) costs the server no
// allocation either. The client is a connected socket reusing its
// buffers, so the process's count is the server's.
func TestUDPLoopAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	f := start(t, shopServices(), own)
	c, err := net.Dial("udp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, c2 := range []struct {
		name  string
		qtype uint16
		max   float64
	}{
		{"web.shop.svc.cairn.internal.", dns.TypeA, 0},
		{"_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV, 0},
		{"nope.shop.svc.cairn.internal.", dns.TypeA, 0},
	} {
		q := query(c2.name, c2.qtype, true)
		if n := socketAllocs(t, c, q); n > c2.max {
			t.Errorf("%s %s: %v allocations per query through the socket, want at most %v", c2.name, dns.TypeToString[c2.qtype], n, c2.max)
		}
	}
	// With RRL and cookies on, on the fast path: the cookie parsed,
	// checked (one SipHash) and answered (a fresh one made, or the valid
	// one echoed), the response accounted (one hash, one bucket).
	f = start(t, shopServices(), protected)
	c, err = net.Dial("udp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := cookieCases(f)
	cases = append(cases, struct {
		what   string
		cookie []byte
	}{"no cookie", nil})
	for _, cc := range cases {
		q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
		if cc.cookie != nil {
			withCookie(q, cc.cookie)
		}
		if n := socketAllocs(t, c, q); n > 0 {
			t.Errorf("RRL and cookies on, %s: %v allocations per query through the socket, want none", cc.what, n)
		}
	}
	if n := counterValue(t, f, "cairn_dns_rrl_slipped_total") + counterValue(t, f, "cairn_dns_rrl_dropped_total"); n != 0 {
		t.Errorf("%v responses limited at 100,000,000/s", n)
	}
	if n := counterValue(t, f, "cairn_dns_cookies_total"); n < 1000 {
		t.Errorf("%v cookies counted; the queries did not reach the cookie code", n)
	}
}

// socketAllocs is the allocations per query q asked over c and answered
// (the first asked before counting, to warm the view), failing unless
// the answer is whole: NOERROR or NXDOMAIN with records, no TC.
func socketAllocs(t *testing.T, c net.Conn, q *dns.Msg) float64 {
	t.Helper()
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var n int
	ask := func() {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if n, err = c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	ask()
	allocs := testing.AllocsPerRun(500, ask)
	var r dns.Msg
	if err := r.Unpack(buf[:n]); err != nil || r.Truncated || r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError || len(r.Answer)+len(r.Ns) == 0 {
		t.Fatalf("%v: answered %v (%v)", q.Question, &r, err)
	}
	return allocs
}

// BenchmarkServeDNS is the handler alone, per query type (the real
// throughput, sockets included, is make bench-dns).
func BenchmarkServeDNS(b *testing.B) {
	for _, c := range []struct {
		name  string
		qtype uint16
	}{
		{"web.shop.svc.cairn.internal.", dns.TypeA},
		{"_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV},
		{"nope.shop.svc.cairn.internal.", dns.TypeA},
	} {
		b.Run(dns.TypeToString[c.qtype]+"/"+c.name[:4], func(b *testing.B) {
			srv, w, q := handlerCase(b, c.name, c.qtype)
			b.ReportAllocs()
			for b.Loop() {
				srv.ServeDNS(w, q)
			}
		})
	}
	// The cost of RRL (accounting every response, none limited) and of
	// cookies (one made per query, as for dnsperf -E 10:<client cookie>,
	// or one checked and echoed), beside A/web above.
	f := start(b, shopServices(), protected)
	w := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	for _, c := range cookieCases(f) {
		b.Run("A/web/rrl+"+strings.ReplaceAll(c.what, " ", "-"), func(b *testing.B) {
			q := withCookie(query("web.shop.svc.cairn.internal.", dns.TypeA, true), c.cookie)
			b.ReportAllocs()
			for b.Loop() {
				f.srv.ServeDNS(w, q)
			}
		})
	}
}
