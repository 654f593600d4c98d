package dnsserver_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// udpClient is a UDP socket bound to a loopback address of its own and
// connected to the server: what it reads is the server's.
type udpClient struct {
	t *testing.T
	c *net.UDPConn
}

func dialFrom(t *testing.T, src, server string) *udpClient {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, raddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpClient{t, c}
}

func (u *udpClient) send(q *dns.Msg) {
	u.t.Helper()
	b, err := q.Pack()
	if err != nil {
		u.t.Fatal(err)
	}
	if _, err := u.c.Write(b); err != nil {
		u.t.Fatal(err)
	}
}

// read returns the next n answers, failing if they do not all come
// within 5s.
func (u *udpClient) read(n int) []*dns.Msg {
	u.t.Helper()
	var out []*dns.Msg
	buf := make([]byte, 65535)
	_ = u.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(out) < n {
		k, err := u.c.Read(buf)
		if err != nil {
			u.t.Fatalf("%d of %d answers came: %v", len(out), n, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:k]); err != nil {
			u.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// full and slipped count the answers in full (records, no TC) and the
// truncated ones (TC, the question, no records); anything else fails.
func sortAnswers(t *testing.T, rs []*dns.Msg) (full, slipped int) {
	t.Helper()
	for _, r := range rs {
		switch {
		case r.Rcode == dns.RcodeSuccess && !r.Truncated && len(r.Answer) > 0:
			full++
		case r.Rcode == dns.RcodeSuccess && r.Truncated && len(r.Answer)+len(r.Ns) == 0 && len(r.Question) == 1 && !r.Authoritative:
			slipped++
		default:
			t.Fatalf("neither answered nor slipped: %v", r)
		}
	}
	return full, slipped
}

// waitCounters waits until the limiter has counted n responses, slipped
// or dropped (it counts as it decides, before sending), and returns both.
func waitCounters(t *testing.T, f *fixture, n float64) (slipped, dropped float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		slipped, dropped = counterValue(t, f, "cairn_dns_rrl_slipped_total"), counterValue(t, f, "cairn_dns_rrl_dropped_total")
		if slipped+dropped >= n || time.Now().After(deadline) {
			return slipped, dropped
		}
		time.Sleep(10 * time.Millisecond) // polling a counter: no signal to wait on
	}
}

// TestRRL floods the server from one source and checks, with the clock
// standing still: the flood gets its burst in full, then every second
// limited response truncated and the others dropped; another source (a
// /32 of its own) is answered in full meanwhile; TCP from the flooding
// source is answered; a query with a valid server cookie from it is not
// limited, one with a cookie that does not verify is.
func TestRRL(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		cookies(c)
		c.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 10, Burst: 10, Slip: 2, IPv4Prefix: 32}
	})
	flood := dialFrom(t, "127.0.0.1", f.addr)
	other := dialFrom(t, "127.0.0.2", f.addr)
	if gauge(t, f, "cairn_dns_rrl_enabled") != 1 {
		t.Fatal("cairn_dns_rrl_enabled is not 1")
	}

	t.Run("a flood is answered at the rate, limited answers slipped one in two", func(t *testing.T) {
		for i := range 40 {
			q := query(name, dns.TypeA, true)
			q.Id = uint16(1 + i)
			flood.send(q)
		}
		for i := range 10 {
			q := query(name, dns.TypeA, true)
			q.Id = uint16(101 + i)
			other.send(q)
		}
		// 10 answered (the burst), 30 limited: 15 slipped, 15 dropped.
		full, slipped := sortAnswers(t, flood.read(25))
		if full != 10 || slipped != 15 {
			t.Errorf("the flood got %d answers and %d truncated; want 10 and 15", full, slipped)
		}
		if s, d := waitCounters(t, f, 30); s != 15 || d != 15 {
			t.Errorf("counted %v slipped and %v dropped; want 15 and 15", s, d)
		}
		if full, slipped := sortAnswers(t, other.read(10)); full != 10 || slipped != 0 {
			t.Errorf("the other source got %d answers and %d truncated; want all 10 answered", full, slipped)
		}
	})

	t.Run("TCP from the flooding source is answered", func(t *testing.T) {
		for range 20 {
			r := f.ask("tcp", query(name, dns.TypeA, true))
			if r.Rcode != dns.RcodeSuccess || r.Truncated || len(r.Answer) == 0 {
				t.Fatalf("over TCP: %v", r)
			}
		}
	})

	t.Run("a valid server cookie is not limited", func(t *testing.T) {
		// Learnt over TCP: made for 127.0.0.1 all the same.
		full := cookieOf(t, f.ask("tcp", withCookie(query(name, dns.TypeA, true), clientCookie)))
		if len(full) != 24 {
			t.Fatalf("cookie %x over TCP", full)
		}
		for i := range 20 {
			q := withCookie(query(name, dns.TypeA, true), full)
			q.Id = uint16(201 + i)
			flood.send(q)
		}
		rs := flood.read(20)
		if n, slipped := sortAnswers(t, rs); n != 20 || slipped != 0 {
			t.Errorf("with a valid cookie: %d answered, %d truncated; want all 20 answered", n, slipped)
		}
		if s, d := waitCounters(t, f, 30); s != 15 || d != 15 {
			t.Errorf("counted %v slipped and %v dropped; want still 15 and 15", s, d)
		}
	})

	t.Run("a cookie that does not verify is limited; the truncated answer carries no cookie", func(t *testing.T) {
		bad := append(append([]byte(nil), clientCookie...), make([]byte, 16)...)
		bad[8] = 1
		for i := range 4 {
			q := withCookie(query(name, dns.TypeA, true), bad)
			q.Id = uint16(301 + i)
			flood.send(q)
		}
		// Limited responses 31 to 34: 32 and 34 slip.
		rs := flood.read(2)
		if n, slipped := sortAnswers(t, rs); n != 0 || slipped != 2 {
			t.Errorf("%d answered, %d truncated; want 2 truncated", n, slipped)
		}
		for _, r := range rs {
			if got := cookieOf(t, r); got != nil {
				t.Errorf("the truncated answer carries a cookie %x; want none", got)
			}
		}
		if s, d := waitCounters(t, f, 34); s != 17 || d != 17 {
			t.Errorf("counted %v slipped and %v dropped; want 17 and 17", s, d)
		}
	})

	t.Run("a second later, the rate's worth is answered again", func(t *testing.T) {
		f.advance(time.Second)
		for i := range 10 {
			q := query(name, dns.TypeA, true)
			q.Id = uint16(401 + i)
			flood.send(q)
		}
		if full, slipped := sortAnswers(t, flood.read(10)); full != 10 || slipped != 0 {
			t.Errorf("%d answered, %d truncated; want all 10 answered", full, slipped)
		}
	})
}

// TestRRLSlipModes: with Slip 1 every limited answer is truncated; with
// NoSlip every one is dropped. A query without EDNS gets a truncated
// answer without OPT.
func TestRRLSlipModes(t *testing.T) {
	for _, c := range []struct {
		slip          int
		slipped, drop float64
	}{{1, 5, 0}, {dnsserver.NoSlip, 0, 5}} {
		t.Run(fmt.Sprint("slip ", c.slip), func(t *testing.T) {
			f := start(t, shopServices(), func(cfg *dnsserver.Config) {
				own(cfg)
				cfg.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 1, Burst: 1, Slip: c.slip}
			})
			u := dialFrom(t, "127.0.0.1", f.addr)
			for i := range 6 {
				q := query("_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV, false)
				q.Id = uint16(i + 1)
				u.send(q)
			}
			if s, d := waitCounters(t, f, 5); s != c.slipped || d != c.drop {
				t.Fatalf("counted %v slipped and %v dropped; want %v and %v", s, d, c.slipped, c.drop)
			}
			rs := u.read(1 + int(c.slipped))
			full, slipped := sortAnswers(t, rs)
			if full != 1 || float64(slipped) != c.slipped {
				t.Errorf("%d answered, %d truncated; want 1 and %v", full, slipped, c.slipped)
			}
			for _, r := range rs {
				if r.IsEdns0() != nil {
					t.Errorf("OPT in an answer to a query without: %v", r)
				}
			}
		})
	}
}

// TestRRLSlipNoBigger floods the server from one source with queries of
// every shape and checks each slipped answer on the wire: TC set, no
// records, no COOKIE option, and no longer than its query, with or
// without EDNS, cookies, client subnet or options the fast parser leaves
// to miekg/dns, and for a question name compressed into the header
// (which unpacks longer than it came: that one gets the header alone).
func TestRRLSlipNoBigger(t *testing.T) {
	const name = "_http._tcp.web.shop.svc.cairn.internal."
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		cookies(c)
		c.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 1, Burst: 1, Slip: 1, IPv4Prefix: 32}
	})
	u := dialFrom(t, "127.0.0.1", f.addr)
	// The burst: one answer in full; the clock stands still, so every
	// later answer to this source is limited, and slipped.
	u.send(query(name, dns.TypeSRV, true))
	if full, _ := sortAnswers(t, u.read(1)); full != 1 {
		t.Fatal("the burst's answer was not answered in full")
	}
	pack := func(q *dns.Msg) []byte {
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withOpt := func(o dns.EDNS0) *dns.Msg {
		q := query(name, dns.TypeSRV, true)
		q.IsEdns0().Option = append(q.IsEdns0().Option, o)
		return q
	}
	bad := append(append([]byte(nil), clientCookie...), make([]byte, 16)...)
	bad[8] = 1
	do := query(name, dns.TypeSRV, true)
	do.IsEdns0().SetDo()
	cases := []struct {
		what  string
		query []byte
	}{
		{"no EDNS", pack(query(name, dns.TypeSRV, false))},
		{"EDNS, no option", pack(query(name, dns.TypeSRV, true))},
		{"EDNS with DO", pack(do)},
		{"a client cookie", pack(withCookie(query(name, dns.TypeSRV, true), clientCookie))},
		{"a server cookie that does not verify", pack(withCookie(query(name, dns.TypeSRV, true), bad))},
		{"a client cookie, miekg/dns's path", pack(withCookie(withOpt(&dns.EDNS0_LOCAL{Code: 65001}), clientCookie))},
		{"a client subnet", pack(withOpt(&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24,
			Address: net.IPv4(192, 0, 2, 0).To4()}))},
		{"a name in upper case", pack(query("_HTTP._TCP.WEB.shop.svc.cairn.internal.", dns.TypeSRV, false))},
		// The question's name is a pointer to offset 5 of the header:
		// QDCOUNT's low octet (1) is a label's length, ANCOUNT's high
		// octet that label, its low octet the root: "\000.", three
		// octets on the wire where the query has two.
		{"a question name compressed into the header",
			[]byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x05, 0, byte(dns.TypeA), 0, byte(dns.ClassINET)}},
	}
	buf := make([]byte, 65535)
	for i, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			c.query[0], c.query[1] = 0x50, byte(i) // an id of its own
			if _, err := u.c.Write(c.query); err != nil {
				t.Fatal(err)
			}
			_ = u.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := u.c.Read(buf)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			wire := buf[:n]
			r := new(dns.Msg)
			if err := r.Unpack(wire); err != nil {
				t.Fatalf("the answer does not parse: %v", err)
			}
			if r.Id != uint16(0x50)<<8|uint16(i) {
				t.Fatalf("an answer to another query: id %#x", r.Id)
			}
			if len(wire) > len(c.query) {
				t.Errorf("the answer is %d octets, the query %d: %v", len(wire), len(c.query), r)
			}
			if !r.Truncated || r.Rcode != dns.RcodeSuccess || len(r.Answer)+len(r.Ns) != 0 || r.Authoritative {
				t.Errorf("not a slipped answer: %v", r)
			}
			if got := cookieOf(t, r); got != nil {
				t.Errorf("the answer carries a cookie %x", got)
			}
			if o := r.IsEdns0(); o != nil && len(o.Option) != 0 {
				t.Errorf("the answer's OPT record has options: %v", o)
			}
		})
	}
	if s, _ := waitCounters(t, f, float64(len(cases))); s != float64(len(cases)) {
		t.Errorf("counted %v slipped; want %d", s, len(cases))
	}
}
