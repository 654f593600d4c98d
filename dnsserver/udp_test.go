package dnsserver

import (
	"net"
	"net/netip"
	"reflect"
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
