package dnsserver_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

func shopServices() []svc {
	web := svc{ns: "shop", name: "web", ttl: 60 * time.Second,
		ports: []status.Port{{Name: "http", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
		insts: []inst{
			{id: "w1", addrs: []string{"10.0.0.1", "2001:db8::1"}, region: "r1", zone: "a", eligible: true, verdict: status.Healthy, lifecycle: status.Ready, weight: 100},
			{id: "w2", addrs: []string{"10.0.0.2"}, region: "r1", zone: "b", eligible: true, verdict: status.Healthy, lifecycle: status.Ready, weight: 50},
			{id: "w3", addrs: []string{"10.0.0.3"}, region: "r2", zone: "c", eligible: true, verdict: status.Unknown, lifecycle: status.Ready, weight: 7,
				ports: map[string]uint16{"http": 9090}},
			{id: "w4", addrs: []string{"10.0.0.4"}, region: "r1", zone: "a", verdict: status.Unhealthy, lifecycle: status.Ready},
			{id: "w5", addrs: []string{"10.0.0.5"}, region: "r1", zone: "a", verdict: status.Healthy, lifecycle: status.Draining},
		}}
	web.insts[3].base, web.insts[4].base = 100, 100
	// w1..w3 eligible, w4 unhealthy, w5 draining: 3 of 4 ready healthy,
	// above the guard.
	empty := svc{ns: "shop", name: "empty", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	return []svc{web, empty}
}

func own(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "r1", Zone: "a"} }

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return out
}

// TestAnswers is one golden row per rule of SPEC §3.
func TestAnswers(t *testing.T) {
	f := start(t, shopServices(), own)
	const d = ".cairn.internal."
	for _, c := range []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		aa     bool
		answer []string
		ns     []string // authority section
		extra  []string
	}{
		{"apex SOA", "cairn.internal.", dns.TypeSOA, dns.RcodeSuccess, true,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil, nil},
		{"apex NS with glue", "cairn.internal.", dns.TypeNS, dns.RcodeSuccess, true,
			[]string{"cairn.internal. 3600 IN NS ns.cairn.internal."}, nil, []string{"ns.cairn.internal. 3600 IN A 192.0.2.53"}},
		{"apex A is NODATA", "cairn.internal.", dns.TypeA, dns.RcodeSuccess, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		// Zone a has w1 eligible and w4 not: 0.5 × 1.4 < 1 spills the
		// caller into its region (w2), never to r2 (w3). Draining w5 is
		// not counted.
		{"service A: the caller's zone, spilling into its region", "web.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true,
			[]string{"web.shop.svc.cairn.internal. 60 IN A 10.0.0.1", "web.shop.svc.cairn.internal. 60 IN A 10.0.0.2"}, nil, nil},
		{"service AAAA", "web.shop.svc" + d, dns.TypeAAAA, dns.RcodeSuccess, true,
			[]string{"web.shop.svc.cairn.internal. 60 IN AAAA 2001:db8::1"}, nil, nil},
		{"service TXT is NODATA", "web.shop.svc" + d, dns.TypeTXT, dns.RcodeSuccess, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"SRV: priority = tier, weight = published, own port numbers", "_http._tcp.web.shop.svc" + d, dns.TypeSRV, dns.RcodeSuccess, true,
			[]string{
				"_http._tcp.web.shop.svc.cairn.internal. 60 IN SRV 0 100 8080 w1.web.shop.svc.cairn.internal.",
				"_http._tcp.web.shop.svc.cairn.internal. 60 IN SRV 1 50 8080 w2.web.shop.svc.cairn.internal.",
				"_http._tcp.web.shop.svc.cairn.internal. 60 IN SRV 2 7 9090 w3.web.shop.svc.cairn.internal.",
			}, nil, []string{
				"w1.web.shop.svc.cairn.internal. 60 IN A 10.0.0.1",
				"w1.web.shop.svc.cairn.internal. 60 IN AAAA 2001:db8::1",
				"w2.web.shop.svc.cairn.internal. 60 IN A 10.0.0.2",
				"w3.web.shop.svc.cairn.internal. 60 IN A 10.0.0.3",
			}},
		{"SRV of a udp port", "_dns._udp.web.shop.svc" + d, dns.TypeSRV, dns.RcodeSuccess, true, []string{
			"_dns._udp.web.shop.svc.cairn.internal. 60 IN SRV 0 100 53 w1.web.shop.svc.cairn.internal.",
			"_dns._udp.web.shop.svc.cairn.internal. 60 IN SRV 1 50 53 w2.web.shop.svc.cairn.internal.",
			"_dns._udp.web.shop.svc.cairn.internal. 60 IN SRV 2 7 53 w3.web.shop.svc.cairn.internal.",
		}, nil, nil},
		{"SRV of a port with the other protocol is NXDOMAIN", "_http._udp.web.shop.svc" + d, dns.TypeSRV, dns.RcodeNameError, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"SRV of an unknown port is NXDOMAIN", "_grpc._tcp.web.shop.svc" + d, dns.TypeSRV, dns.RcodeNameError, true, nil, nil, nil},
		{"_tcp is an empty non-terminal", "_tcp.web.shop.svc" + d, dns.TypeSRV, dns.RcodeSuccess, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"SRV name, A query: NODATA", "_http._tcp.web.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true, nil, nil, nil},
		{"instance name", "w1.web.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true,
			[]string{"w1.web.shop.svc.cairn.internal. 60 IN A 10.0.0.1"}, nil, nil},
		{"an unhealthy instance's own name still resolves", "w4.web.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true,
			[]string{"w4.web.shop.svc.cairn.internal. 60 IN A 10.0.0.4"}, nil, nil},
		{"a draining instance's own name still resolves", "w5.web.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true,
			[]string{"w5.web.shop.svc.cairn.internal. 60 IN A 10.0.0.5"}, nil, nil},
		{"instance without AAAA: NODATA", "w2.web.shop.svc" + d, dns.TypeAAAA, dns.RcodeSuccess, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"unknown instance", "w9.web.shop.svc" + d, dns.TypeA, dns.RcodeNameError, true, nil, nil, nil},
		{"a service with no instances is NODATA", "empty.shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"undefined service", "nope.shop.svc" + d, dns.TypeA, dns.RcodeNameError, true, nil,
			[]string{"cairn.internal. 5 IN SOA ns.cairn.internal. hostmaster.cairn.internal. 1 3600 600 86400 5"}, nil},
		{"namespace: empty non-terminal", "shop.svc" + d, dns.TypeA, dns.RcodeSuccess, true, nil, nil, nil},
		{"unknown namespace", "nope.svc" + d, dns.TypeA, dns.RcodeNameError, true, nil, nil, nil},
		{"the service tree", "svc" + d, dns.TypeA, dns.RcodeSuccess, true, nil, nil, nil},
		{"too deep", "x.w1.web.shop.svc" + d, dns.TypeA, dns.RcodeNameError, true, nil, nil, nil},
		{"static A", "www" + d, dns.TypeA, dns.RcodeSuccess, true, []string{"www.cairn.internal. 300 IN A 192.0.2.80"}, nil, nil},
		{"static TXT", "www" + d, dns.TypeTXT, dns.RcodeSuccess, true, []string{`www.cairn.internal. 300 IN TXT "hello"`}, nil, nil},
		{"static empty non-terminal", "b.deep" + d, dns.TypeA, dns.RcodeSuccess, true, nil, nil, nil},
		{"static NXDOMAIN", "nothing" + d, dns.TypeA, dns.RcodeNameError, true, nil, nil, nil},
		{"outside the zone: REFUSED, not authoritative", "example.com.", dns.TypeA, dns.RcodeRefused, false, nil, nil, nil},
		{"a suffix that is not the zone", "xcairn.internal.", dns.TypeA, dns.RcodeRefused, false, nil, nil, nil},
		{"the root", ".", dns.TypeNS, dns.RcodeRefused, false, nil, nil, nil},
		{"ANY is minimal (RFC 8482)", "web.shop.svc" + d, dns.TypeANY, dns.RcodeSuccess, true,
			[]string{`web.shop.svc.cairn.internal. 3600 IN HINFO "RFC8482" ""`}, nil, nil},
		{"AXFR is refused", "cairn.internal.", dns.TypeAXFR, dns.RcodeRefused, false, nil, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, net := range []string{"udp", "tcp"} {
				q := query(c.qname, c.qtype, true)
				r := f.ask(net, q)
				if r.Rcode != c.rcode {
					t.Fatalf("%s: rcode %s, want %s\n%v", net, dns.RcodeToString[r.Rcode], dns.RcodeToString[c.rcode], r)
				}
				if r.Id != q.Id || !r.Response || r.Authoritative != c.aa || r.RecursionAvailable || !r.RecursionDesired || r.Truncated {
					t.Fatalf("%s: header %+v, want id %d, QR, AA=%v, RA clear, RD copied, TC clear", net, r.MsgHdr, q.Id, c.aa)
				}
				if len(r.Question) != 1 || r.Question[0] != q.Question[0] {
					t.Fatalf("%s: question %v, want %v", net, r.Question, q.Question)
				}
				if got := rrStrings(r.Answer); !slices.Equal(got, c.answer) {
					t.Fatalf("%s: answer\n%s\nwant\n%s", net, strings.Join(got, "\n"), strings.Join(c.answer, "\n"))
				}
				if c.ns != nil {
					if got := rrStrings(r.Ns); !slices.Equal(got, c.ns) {
						t.Fatalf("%s: authority %q, want %q", net, got, c.ns)
					}
				}
				negative := len(c.answer) == 0 && (c.rcode == dns.RcodeSuccess || c.rcode == dns.RcodeNameError)
				if negative && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
					t.Fatalf("%s: a negative answer without the SOA: %v", net, r.Ns)
				}
				if c.rcode == dns.RcodeRefused && (len(r.Answer)+len(r.Ns) != 0) {
					t.Fatalf("%s: REFUSED with records (a referral?): %v", net, r)
				}
				if c.extra != nil {
					if got := rrStrings(r.Extra); !slices.Equal(got, c.extra) {
						t.Fatalf("%s: additional\n%s\nwant\n%s", net, strings.Join(got, "\n"), strings.Join(c.extra, "\n"))
					}
				}
				if o := r.IsEdns0(); o == nil || o.UDPSize() != 1232 || o.Version() != 0 {
					t.Fatalf("%s: OPT %v, want version 0 and UDP size 1232", net, o)
				}
			}
		})
	}
}

func TestQuestionCasePreserved(t *testing.T) {
	f := start(t, shopServices(), own)
	q := query("WeB.ShOp.SVC.Cairn.INTERNAL.", dns.TypeA, true)
	r := f.ask("udp", q)
	if r.Question[0].Name != "WeB.ShOp.SVC.Cairn.INTERNAL." || len(r.Answer) != 2 {
		t.Fatalf("answer %v: want the question as asked and two A", r)
	}
	if r.Answer[0].Header().Name != "WeB.ShOp.SVC.Cairn.INTERNAL." {
		t.Fatalf("owner %q: the answer points at the question", r.Answer[0].Header().Name)
	}
}

func TestMalformedAndUnsupported(t *testing.T) {
	f := start(t, shopServices(), own)
	t.Run("NOTIMP clears the flags", func(t *testing.T) {
		for _, op := range []int{dns.OpcodeNotify, dns.OpcodeUpdate, dns.OpcodeStatus, 3, 15} {
			q := query("web.shop.svc.cairn.internal.", dns.TypeA, false)
			q.Opcode = op
			q.CheckingDisabled, q.AuthenticatedData = true, true
			r := f.ask("udp", q)
			if r.Rcode != dns.RcodeNotImplemented || r.Opcode != op || r.RecursionDesired || r.CheckingDisabled ||
				r.Authoritative || r.AuthenticatedData || len(r.Answer)+len(r.Ns)+len(r.Extra) != 0 {
				t.Fatalf("opcode %d: %v; want NOTIMP with the opcode and no flags", op, r)
			}
		}
	})
	t.Run("FORMERR for two questions", func(t *testing.T) {
		q := query("web.shop.svc.cairn.internal.", dns.TypeA, false)
		q.Question = append(q.Question, q.Question[0])
		r := f.ask("udp", q)
		if r.Rcode != dns.RcodeFormatError || r.Id != q.Id {
			t.Fatalf("%v; want FORMERR", r)
		}
	})
	t.Run("FORMERR for no question", func(t *testing.T) {
		q := new(dns.Msg)
		q.Id = 77
		r := f.ask("udp", q)
		if r.Rcode != dns.RcodeFormatError || r.Id != 77 {
			t.Fatalf("%v; want FORMERR", r)
		}
	})
	t.Run("BADVERS for EDNS version 1", func(t *testing.T) {
		q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
		q.IsEdns0().SetVersion(1)
		r := f.ask("udp", q)
		o := r.IsEdns0()
		if r.Rcode != dns.RcodeBadVers || o == nil || o.Version() != 0 || len(r.Answer) != 0 {
			t.Fatalf("%v; want BADVERS with an OPT of version 0", r)
		}
	})
	t.Run("unknown EDNS options are not echoed", func(t *testing.T) {
		q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
		o := q.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1, 2, 3}}, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
		r := f.ask("udp", q)
		if ro := r.IsEdns0(); ro == nil || len(ro.Option) != 0 || len(r.Answer) != 2 {
			t.Fatalf("%v; want the answer with an OPT of no options", r)
		}
	})
	t.Run("no EDNS, no OPT", func(t *testing.T) {
		r := f.ask("udp", query("web.shop.svc.cairn.internal.", dns.TypeA, false))
		if r.IsEdns0() != nil || len(r.Answer) != 2 {
			t.Fatalf("%v; want an answer without OPT", r)
		}
	})
	t.Run("CHAOS is refused", func(t *testing.T) {
		q := query("version.bind.", dns.TypeTXT, false)
		q.Question[0].Qclass = dns.ClassCHAOS
		if r := f.ask("udp", q); r.Rcode != dns.RcodeRefused {
			t.Fatalf("%v; want REFUSED", r)
		}
	})
}

func bigService(n int) svc {
	s := svc{ns: "shop", name: "big", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}, limit: 64}
	for i := range n {
		s.insts = append(s.insts, inst{id: fmt.Sprintf("instance-with-a-long-name-%03d", i), addrs: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)},
			eligible: true, verdict: status.Healthy, lifecycle: status.Ready})
	}
	return s
}

func TestTruncationAndTCP(t *testing.T) {
	f := start(t, []svc{bigService(50)}, nil)
	name := "_http._tcp.big.shop.svc.cairn.internal."
	r := f.ask("udp", query(name, dns.TypeSRV, false)) // 512 bytes
	if !r.Truncated || len(r.Answer) != 0 {
		t.Fatalf("UDP without EDNS: TC=%v with %d answers; want TC and none", r.Truncated, len(r.Answer))
	}
	r = f.ask("udp", query(name, dns.TypeSRV, true)) // 1232 bytes
	if !r.Truncated {
		t.Fatalf("UDP at 1232: %d answers, %d bytes, want TC", len(r.Answer), r.Len())
	}
	r = f.ask("tcp", query(name, dns.TypeSRV, true))
	if r.Truncated || len(r.Answer) != 50 || len(r.Extra) != 51 {
		t.Fatalf("TCP: TC=%v, %d answers, %d additional; want all 50 with their addresses", r.Truncated, len(r.Answer), len(r.Extra))
	}
	// A at 64 records still fits 1232 bytes with compression.
	r = f.ask("udp", query("big.shop.svc.cairn.internal.", dns.TypeA, true))
	if r.Truncated || len(r.Answer) != 50 {
		t.Fatalf("A: TC=%v with %d answers; want 50", r.Truncated, len(r.Answer))
	}
}

// TestSRVTooBigForTCP: a service with more endpoints than one TCP
// message holds (1,500 SRV records of ~80 bytes each pass 64 KiB) gets,
// over TCP, the records that fit without TC, none twice, every one of
// them eligible; over UDP TC and no records, as for any answer that does
// not fit.
func TestSRVTooBigForTCP(t *testing.T) {
	const n = 1500
	f := start(t, []svc{bigService(n)}, nil)
	name := "_http._tcp.big.shop.svc.cairn.internal."
	if r := f.ask("udp", query(name, dns.TypeSRV, true)); !r.Truncated || len(r.Answer) != 0 {
		t.Fatalf("UDP: TC=%v with %d answers; want TC and none", r.Truncated, len(r.Answer))
	}
	r := f.ask("tcp", query(name, dns.TypeSRV, true))
	if r.Rcode != dns.RcodeSuccess || r.Truncated || len(r.Answer) < n/3 || len(r.Answer) >= n {
		t.Fatalf("TCP: %s, TC=%v, %d answers; want NOERROR, no TC, the records that fit of %d", dns.RcodeToString[r.Rcode], r.Truncated, len(r.Answer), n)
	}
	if r.Compress = true; r.Len() > dns.MaxMsgSize {
		t.Fatalf("TCP answer: %d bytes compressed; want at most %d", r.Len(), dns.MaxMsgSize)
	}
	seen := map[string]bool{}
	for _, rr := range r.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok || !strings.HasPrefix(srv.Target, "instance-with-a-long-name-") || seen[srv.Target] {
			t.Fatalf("answer record %v: want an SRV of a distinct instance", rr)
		}
		seen[srv.Target] = true
	}
}

func TestPipelinedTCP(t *testing.T) {
	f := start(t, shopServices(), own)
	conn, err := dns.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	names := []string{"web.shop.svc.cairn.internal.", "w2.web.shop.svc.cairn.internal.", "nope.shop.svc.cairn.internal."}
	var ids []uint16
	for _, n := range names {
		q := query(n, dns.TypeA, false)
		ids = append(ids, q.Id)
		if err := conn.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range names {
		r, err := conn.ReadMsg()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if r.Id != ids[i] || r.Question[0].Name != names[i] {
			t.Fatalf("answer %d is %d %v; want %d for %s, in order", i, r.Id, r.Question, ids[i], names[i])
		}
	}
}

func TestServeStale(t *testing.T) {
	f := start(t, shopServices(), own)
	q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
	if r := f.ask("udp", q); len(ede(r)) != 0 || r.Answer[0].Header().Ttl != 60 {
		t.Fatalf("fresh: %v; want no EDE and the service's TTL", r)
	}
	f.age(10 * time.Second)
	r := f.ask("udp", q)
	if e := ede(r); len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeStaleAnswer || r.Rcode != dns.RcodeSuccess ||
		len(r.Answer) != 2 || r.Answer[0].Header().Ttl != 30 {
		t.Fatalf("stale: %v; want the answer with EDE 3 and TTL 30", r)
	}
	r = f.ask("udp", query("nope.shop.svc.cairn.internal.", dns.TypeA, true))
	if e := ede(r); r.Rcode != dns.RcodeNameError || len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeStaleNXDOMAINAnswer ||
		r.Ns[0].Header().Ttl > 30 {
		t.Fatalf("stale NXDOMAIN: %v; want EDE 19", r)
	}
	// Glue is capped too.
	r = f.ask("udp", query("cairn.internal.", dns.TypeNS, true))
	if len(r.Extra) < 2 || r.Answer[0].Header().Ttl != 30 || r.Extra[0].Header().Ttl != 30 {
		t.Fatalf("stale NS: %v; want NS and glue at TTL 30", r)
	}
	f.age(25 * time.Hour)
	r = f.ask("udp", q)
	if e := ede(r); r.Rcode != dns.RcodeServerFailure || len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeNoReachableAuthority || len(r.Answer) != 0 {
		t.Fatalf("past max-stale: %v; want SERVFAIL with EDE 22", r)
	}
	if r.Authoritative {
		t.Errorf("past max-stale: SERVFAIL with AA set; want it clear")
	}
}

// TestRestoredIsStale: while the table is the one kept on disk and the
// store has not caught up, every answer is stale, however recent the
// table (SPEC §7).
func TestRestoredIsStale(t *testing.T) {
	var restored atomic.Bool
	restored.Store(true)
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		own(c)
		c.Restored = restored.Load
	})
	q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
	if r := f.ask("udp", q); len(ede(r)) != 1 || ede(r)[0].InfoCode != dns.ExtendedErrorCodeStaleAnswer || len(r.Answer) != 2 {
		t.Fatalf("restored: %v; want the answer with EDE 3", r)
	}
	restored.Store(false)
	if r := f.ask("udp", q); len(ede(r)) != 0 {
		t.Fatalf("caught up: %v; want no EDE", r)
	}
}

func TestHealthDisregarded(t *testing.T) {
	s := svc{ns: "shop", name: "pay", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}, insts: ready("p1", "p2", "p3", "p4")}
	for i := 1; i < 4; i++ {
		s.insts[i].eligible, s.insts[i].verdict = false, status.Unhealthy
	}
	f := start(t, []svc{s}, nil)
	r := f.ask("udp", query("pay.shop.svc.cairn.internal.", dns.TypeA, true))
	e := ede(r)
	if len(r.Answer) != 4 || len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeOther || !strings.HasPrefix(e[0].ExtraText, "health-disregarded") {
		t.Fatalf("%v; want all 4 ready instances with EDE 0 health-disregarded", r)
	}
	// Without EDNS the answer is the same, without the EDE.
	if r := f.ask("udp", query("pay.shop.svc.cairn.internal.", dns.TypeA, false)); len(r.Answer) != 4 {
		t.Fatalf("%v; want 4 answers", r)
	}
	// Two healthy of four is the fraction: health is not disregarded.
	s.insts[1].eligible, s.insts[1].verdict = true, status.Healthy
	f.publish([]svc{s})
	r = f.ask("udp", query("pay.shop.svc.cairn.internal.", dns.TypeA, true))
	if len(r.Answer) != 2 || len(ede(r)) != 0 {
		t.Fatalf("%v; want the 2 eligible without EDE", r)
	}
}

// A hundred pipelined queries on one connection are all answered, in
// order; an idle connection is closed after the idle timeout.
func TestTCPPipelineAndIdle(t *testing.T) {
	f := start(t, shopServices(), func(c *dnsserver.Config) { own(c); c.TCPIdleTimeout = 300 * time.Millisecond })
	conn, err := dns.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ids []uint16
	for i := range 100 {
		q := query(fmt.Sprintf("w%d.web.shop.svc.cairn.internal.", i%5+1), dns.TypeA, false)
		ids = append(ids, q.Id)
		if err := conn.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range ids {
		r, err := conn.ReadMsg()
		if err != nil || r.Id != ids[i] {
			t.Fatalf("answer %d: %v %v; want id %d", i, r, err, ids[i])
		}
	}
	// Idle now: the server closes the connection (read gets EOF well
	// before our own 5 s deadline).
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.ReadMsg(); err == nil {
		t.Fatal("an idle connection got a message")
	} else if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		t.Fatalf("the idle connection was still open after 5 s: %v", err)
	}
	t.Logf("idle connection closed after %v", time.Since(start).Round(10*time.Millisecond))
}

// What miekg/dns cannot parse over UDP (a bad ECS option) still gets an
// answer: a header-only FORMERR, as over TCP.
func TestUnparseableQueryGetsFORMERR(t *testing.T) {
	f := start(t, shopServices(), own)
	q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	// Append an ECS option of family 3 by hand (miekg/dns would not pack
	// it): option 8, length 4, family 3, source 0, scope 0.
	b = append(b, 0, 8, 0, 4, 0, 3, 0, 0)
	b[len(b)-9] = 8 // the OPT's rdlength, low byte (it had no options)
	conn, err := net.Dial("udp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var r dns.Msg
	if err := r.Unpack(buf[:n]); err != nil || r.Rcode != dns.RcodeFormatError || r.Id != q.Id || !r.Response {
		t.Fatalf("answer %v (%v); want a FORMERR with the query's id", r, err)
	}
}

// TestNegativeSOAThatDoesNotFitTruncates: in a zone whose names are so
// long that a negative answer's SOA does not fit 512 bytes, the UDP
// answer is truncated (TC) rather than sent without its SOA, and TCP has
// the whole answer.
func TestNegativeSOAThatDoesNotFitTruncates(t *testing.T) {
	label := strings.Repeat("x", 60)
	domain := label + "." + label + "." + label + ".internal."
	z, err := zones.New(zones.Config{Domain: domain,
		NSAddrs: map[string][]netip.Addr{"ns." + domain: {netip.MustParseAddr("192.0.2.53")}}})
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, shopServices(), func(c *dnsserver.Config) { own(c); c.Zone = z })
	q := query("nope."+domain, dns.TypeA, false) // no EDNS: 512 bytes
	r := f.ask("udp", q)
	if r.Rcode != dns.RcodeNameError || !r.Truncated || len(r.Ns) != 0 {
		t.Fatalf("UDP: %v; want NXDOMAIN, TC, no records", r)
	}
	r = f.ask("tcp", q)
	if r.Rcode != dns.RcodeNameError || r.Truncated || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("TCP: %v; want NXDOMAIN with the SOA", r)
	}
}

// TestTCPConnectionCap: with the cap of open TCP connections reached, a
// new connection is closed at once (and counted), the open ones keep
// being served, and a slot freed by a client closing is taken again.
func TestTCPConnectionCap(t *testing.T) {
	f := start(t, shopServices(), func(c *dnsserver.Config) { own(c); c.TCPMaxConns = 3 })
	q := query("web.shop.svc.cairn.internal.", dns.TypeA, true)
	dial := func() *dns.Conn {
		t.Helper()
		c, err := dns.DialTimeout("tcp", f.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	exchange := func(c *dns.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.WriteMsg(q); err != nil {
			return err
		}
		r, err := c.ReadMsg()
		if err == nil && r.Rcode != dns.RcodeSuccess {
			err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
		}
		return err
	}
	var open []*dns.Conn
	for i := range 3 {
		c := dial()
		if err := exchange(c); err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		open = append(open, c)
	}
	if err := exchange(dial()); err == nil {
		t.Fatal("a fourth connection past the cap of 3 was served")
	}
	if got := counterValue(t, f, "cairn_dns_tcp_rejected_total"); got < 1 {
		t.Errorf("cairn_dns_tcp_rejected_total = %v, want at least 1", got)
	}
	for i, c := range open {
		if err := exchange(c); err != nil {
			t.Errorf("open connection %d after the rejection: %v", i+1, err)
		}
	}
	// One client leaves: its slot comes back once the server has closed
	// its side.
	_ = open[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := exchange(dial())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served 10s after one of three closed: %v", err)
		}
	}
}

// counterValue returns the sum of a counter's series in f's registry.
func counterValue(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
