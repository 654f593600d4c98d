package dnsserver_test

import (
	"net"
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
		q, err := query(c2.name, c2.qtype, true).Pack()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		ask := func() {
			if _, err := c.Write(q); err != nil {
				t.Fatal(err)
			}
			if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
		ask() // warm the view
		if n := testing.AllocsPerRun(500, ask); n > c2.max {
			t.Errorf("%s %s: %v allocations per query through the socket, want at most %v", c2.name, dns.TypeToString[c2.qtype], n, c2.max)
		}
	}
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
}
