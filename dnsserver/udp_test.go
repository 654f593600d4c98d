package dnsserver

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzParseQuery: whenever the UDP fast path takes a query, miekg/dns
// parses it too, and both see the same request.
func FuzzParseQuery(f *testing.F) {
	for _, q := range []func() *dns.Msg{
		func() *dns.Msg { m := new(dns.Msg); m.SetQuestion("web.shop.svc.cairn.internal.", dns.TypeA); return m },
		func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion("_HTTP._tcp.Web.shop.svc.cairn.internal.", dns.TypeSRV)
			m.SetEdns0(1232, true)
			return m
		},
		func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion("x.cairn.internal.", dns.TypeAAAA)
			m.SetEdns0(4096, false)
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0).To4()},
				&dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1}})
			return m
		},
		func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(".", dns.TypeNS)
			m.Opcode = dns.OpcodeNotify
			return m
		},
		// COOKIE options: a client cookie; a client and server cookie
		// beside ECS (after it, then before it); a malformed one; two,
		// of which the first counts.
		func() *dns.Msg { return cookieQuery("0123456789abcdef") },
		func() *dns.Msg {
			m := cookieQuery("0123456789abcdef010000005cf79f111f8130c3eee29480")
			o := m.IsEdns0()
			o.Option = append([]dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 16, Address: net.IPv4(10, 9, 0, 0).To4()}}, o.Option...)
			return m
		},
		func() *dns.Msg {
			m := cookieQuery("0123456789abcdef0102")
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 2, SourceNetmask: 56, Address: net.ParseIP("2001:db8::")})
			return m
		},
		func() *dns.Msg { return cookieQuery("01234567") },
		func() *dns.Msg { return cookieQuery("0123456789abcdef", "ab") },
	} {
		b, err := q().Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	remote := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, b []byte) {
		var scratch [256]byte
		got, ok := parseQuery(b, scratch[:], remote)
		if !ok {
			return
		}
		var m dns.Msg
		if err := m.Unpack(b); err != nil {
			t.Fatalf("the fast path took a query miekg/dns cannot parse: %v", err)
		}
		want := requestOf(&m, remote, false)
		got.rawQ, want.rawQ = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path %+v\nmiekg/dns %+v", got, want)
		}
	})
}

// cookieQuery is an A query with COOKIE options of the octets in hex cs.
func cookieQuery(cs ...string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("web.shop.svc.cairn.internal.", dns.TypeA)
	m.SetEdns0(1232, false)
	o := m.IsEdns0()
	for _, c := range cs {
		o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: c})
	}
	return m
}

// Queries with cookies take the fast path, which reads the first COOKIE
// option as miekg/dns's path does (FuzzParseQuery checks them alike).
func TestParseQueryCookies(t *testing.T) {
	for _, c := range []struct {
		cs   []string
		want string
	}{
		{[]string{"0123456789abcdef"}, "0123456789abcdef"},
		{[]string{"0123456789abcdef010000005cf79f111f8130c3eee29480"}, "0123456789abcdef010000005cf79f111f8130c3eee29480"},
		{[]string{"01"}, "01"},
		{[]string{"0123456789abcdef", "ff"}, "0123456789abcdef"},
	} {
		b, _ := cookieQuery(c.cs...).Pack()
		var scratch [256]byte
		req, ok := parseQuery(b, scratch[:], netip.Addr{})
		if !ok || !req.hasCookie || fmt.Sprintf("%x", req.cookie[:req.cookieLen]) != c.want {
			t.Errorf("%v: fast path %v, cookie %x; want %s", c.cs, ok, req.cookie[:req.cookieLen], c.want)
		}
	}
	// A cookie longer than kept is still measured: malformed.
	b, _ := cookieQuery(strings.Repeat("ab", 60)).Pack()
	var scratch [256]byte
	req, ok := parseQuery(b, scratch[:], netip.Addr{})
	var m dns.Msg
	_ = m.Unpack(b)
	if want := requestOf(&m, netip.Addr{}, false); !ok || req.cookieLen != 60 || want.cookieLen != 60 || req.cookie != want.cookie {
		t.Errorf("a 60-octet cookie: fast path %v, length %d (miekg/dns's path %d)", ok, req.cookieLen, want.cookieLen)
	}
}

// The common queries take the fast path, and allocate nothing there.
func TestParseQueryTakesCommonQueries(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV)
	m.SetEdns0(1232, false)
	b, _ := m.Pack()
	var scratch [256]byte
	if _, ok := parseQuery(b, scratch[:], netip.Addr{}); !ok {
		t.Fatal("a plain SRV query with EDNS did not take the fast path")
	}
	if n := testing.AllocsPerRun(100, func() { parseQuery(b, scratch[:], netip.Addr{}) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

// A name longer than 255 octets is not the fast path's: miekg/dns
// refuses it.
func TestParseQueryNameLimit(t *testing.T) {
	for _, octets := range []int{255, 256, 257} {
		// Labels of 63 octets, then one that makes the total.
		var b []byte
		b = append(b, make([]byte, headerLen)...)
		b[5] = 1           // qdcount
		left := octets - 1 // the root
		for left > 0 {
			l := min(63, left-1)
			b = append(b, byte(l))
			for range l {
				b = append(b, 'a')
			}
			left -= l + 1
		}
		b = append(b, 0, 0, 1, 0, 1)
		var scratch [256]byte
		_, ok := parseQuery(b, scratch[:], netip.Addr{})
		var m dns.Msg
		err := m.Unpack(b)
		if ok != (octets <= 255) || (err == nil) != (octets <= 255) {
			t.Errorf("%d octets: fast path %v, miekg/dns %v; want both to take only <= 255", octets, ok, err)
		}
	}
}
