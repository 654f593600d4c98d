package dnsserver_test

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// fuzzConfig places the fixture server in r1/a, maps 10.9/16 to r2/c and
// trusts the client subnet option of loopback sources (the sinks'), so
// that the ECS code is fuzzed too; and turns cookies (the tests' secret)
// and RRL on, at a rate no input reaches: every response is accounted,
// every query answered.
func fuzzConfig(c *dnsserver.Config) {
	own(c)
	c.Subnets = []dnsserver.Subnet{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), Place: dnsserver.Place{Region: "r2", Zone: "c"}}}
	c.ECSTrusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	c.Cookies = dnsserver.CookieConfig{Mode: dnsserver.ModeOn, Secret: testSecret}
	c.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 1_000_000_000}
}

// fixtureNow is the clock of every fixture (start).
var fixtureNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// cookieSeeds are queries with COOKIE options of every kind: a client
// cookie, a valid server cookie (for 127.0.0.1 at fixtureNow, or at
// now), an invalid one, malformed lengths, two cookies, a cookie beside
// ECS and other options, and with EDNS version 1 or another opcode.
func cookieSeeds(now time.Time) [][]byte {
	valid := append(append([]byte(nil), clientCookie...),
		dnsserver.ServerCookie(testSecret, clientCookie, uint32(now.Unix()), loopback)...)
	expired := append(append([]byte(nil), clientCookie...),
		dnsserver.ServerCookie(testSecret, clientCookie, uint32(now.Add(-2*time.Hour).Unix()), loopback)...)
	const web = "web.shop.svc.cairn.internal."
	cq := func(name string, qtype uint16, cs ...[]byte) *dns.Msg {
		q := query(name, qtype, true)
		for _, c := range cs {
			withCookie(q, c)
		}
		return q
	}
	ecs := func(q *dns.Msg) *dns.Msg {
		o := q.IsEdns0()
		o.Option = append([]dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24,
			Address: net.IPv4(10, 9, 1, 0).To4()}}, o.Option...)
		o.Option = append(o.Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID}, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
		return q
	}
	v1 := cq(web, dns.TypeA, clientCookie)
	v1.IsEdns0().SetVersion(1)
	notify := cq("cairn.internal.", dns.TypeSOA, clientCookie)
	notify.Opcode = dns.OpcodeNotify
	var out [][]byte
	for _, q := range []*dns.Msg{
		cq(web, dns.TypeA, clientCookie),
		cq(web, dns.TypeA, valid),
		cq("_http._tcp.web.shop.svc.cairn.internal.", dns.TypeSRV, expired),
		cq("nope.shop.svc.cairn.internal.", dns.TypeA, append(append([]byte(nil), clientCookie...), 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0)),
		cq(web, dns.TypeA, clientCookie[:7]),
		cq(web, dns.TypeA, make([]byte, 41)),
		cq(web, dns.TypeA, valid, clientCookie[:3]),
		ecs(cq(web, dns.TypeAAAA, clientCookie)),
		v1,
		notify,
	} {
		b, err := q.Pack()
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzQuery feeds arbitrary wire messages to the handler in process, over
// UDP and over TCP (the sink's remote address says which), and checks what
// every answer must satisfy whatever the question (SPEC §3; reliability.md
// D8): no panic; a query (QR clear) gets an answer; the answer unpacks,
// echoes the ID and has QR set, RA and Z clear; over UDP it is at most
// max(512, min(the query's EDNS size, 1232)) bytes (512 without EDNS) and
// over TCP never TC; a query without OPT gets none, one with an OPT an
// answer with OPT version 0 (a header-only FORMERR or NOTIMP aside); and a
// well-formed query's question is echoed exactly, its case included.
// Its seeds are in testdata/fuzz/FuzzQuery.
func FuzzQuery(f *testing.F) {
	// The fixture takes a *testing.T: the first input's builds it, once
	// per fuzzing process. Its cleanup stops the server's sockets when
	// that input ends; the handler, called in process, needs none of them.
	var (
		once sync.Once
		srv  *dnsserver.Server
	)
	udp := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	tcp := &sink{remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	for _, b := range cookieSeeds(fixtureNow) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		once.Do(func() { srv = start(t, append(shopServices(), bigService(50)), fuzzConfig).srv })
		q := new(dns.Msg)
		if err := q.Unpack(wire); err != nil {
			return // the UDP loop answers what miekg/dns cannot unpack with a header-only FORMERR
		}
		for _, w := range []*sink{udp, tcp} {
			w.last = nil
			srv.ServeDNS(w, q)
			checkAnswer(t, q, w)
		}
	})
}

// checkAnswer checks the answer w holds to q.
func checkAnswer(t *testing.T, q *dns.Msg, w *sink) {
	t.Helper()
	_, isTCP := w.remote.(*net.TCPAddr)
	via := "udp"
	if isTCP {
		via = "tcp"
	}
	if w.last == nil {
		if !q.Response {
			t.Fatalf("%s: no answer to %v", via, q)
		}
		return
	}
	r := new(dns.Msg)
	if err := r.Unpack(w.last); err != nil {
		t.Fatalf("%s: the answer does not unpack: %v\nquery: %v\nanswer: %x", via, err, q, w.last)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s: "+format+"\nquery: %v\nanswer: %v", append(append([]any{via}, args...), q, r)...)
	}
	if r.Id != q.Id {
		fail("ID %d; want the query's, %d", r.Id, q.Id)
	}
	if !r.Response {
		fail("QR clear")
	}
	if r.RecursionAvailable || r.Zero {
		fail("RA=%v Z=%v; want both clear (authoritative only, unknown bits not copied)", r.RecursionAvailable, r.Zero)
	}
	qopt := q.IsEdns0()
	if isTCP {
		if r.Truncated {
			fail("TC over TCP")
		}
	} else {
		limit := 512
		if qopt != nil {
			limit = max(512, min(int(qopt.UDPSize()), 1232))
		}
		if len(w.last) > limit {
			fail("%d bytes over UDP; the limit is %d", len(w.last), limit)
		}
	}
	ropt := r.IsEdns0()
	if qopt == nil && ropt != nil {
		fail("an OPT record in the answer to a query without one")
	}
	// Header-only answers: NOTIMP (unknown opcode) and FORMERR (a query
	// the server could not take apart). Everything else echoes the
	// question and, for an EDNS query, has OPT version 0.
	headerOnly := len(r.Question) == 0 && len(r.Answer) == 0 && len(r.Ns) == 0 && len(r.Extra) == 0 &&
		(r.Rcode == dns.RcodeFormatError || r.Rcode == dns.RcodeNotImplemented)
	wellFormed := q.Opcode == dns.OpcodeQuery && len(q.Question) == 1 && len(q.Answer) == 0 && len(q.Ns) == 0 && countOPTs(q.Extra) <= 1
	if wellFormed && !headerOnly {
		if len(r.Question) != 1 {
			fail("%d questions; want the query's one echoed", len(r.Question))
		}
		if got, want := r.Question[0], q.Question[0]; got != want {
			fail("question %q %d %d; want the query's, byte for byte: %q %d %d", got.Name, got.Qtype, got.Qclass, want.Name, want.Qtype, want.Qclass)
		}
		if qopt != nil && (ropt == nil || ropt.Version() != 0) {
			fail("OPT %v in the answer to an EDNS query; want version 0", ropt)
		}
	}
	if wellFormed && headerOnly && r.Rcode == dns.RcodeFormatError {
		fail("FORMERR without the question for a well-formed query")
	}
	// Cookies (on in fuzzConfig; RFC 7873): none out without one in; a
	// malformed one is FORMERR, without a cookie; a well-formed one in a
	// query answered with EDNS gets the client cookie back with a server
	// cookie of ours.
	qc, hasQC := firstCookie(t, qopt)
	rc := cookieOf(t, r)
	switch n := len(qc); {
	case !hasQC:
		if rc != nil {
			fail("COOKIE %x in the answer to a query without one", rc)
		}
	case n < 8 || n > 8 && n < 16 || n > 40:
		if rc != nil {
			fail("COOKIE %x in the answer to a malformed one, %x", rc, qc)
		}
		if wellFormed && q.Opcode == dns.OpcodeQuery && qopt.Version() == 0 && r.Rcode != dns.RcodeFormatError {
			fail("%s for a malformed COOKIE %x; want FORMERR", dns.RcodeToString[r.Rcode], qc)
		}
	default:
		if wellFormed && q.Opcode == dns.OpcodeQuery && qopt.Version() == 0 &&
			(len(rc) != 24 || !bytes.Equal(rc[:8], qc[:8]) || rc[8] != 1) {
			fail("COOKIE %x in the answer to %x; want the client cookie and a server cookie of version 1", rc, qc)
		}
	}
}

// firstCookie returns the octets of o's first COOKIE option, if any.
func firstCookie(t *testing.T, o *dns.OPT) ([]byte, bool) {
	if o == nil {
		return nil, false
	}
	for _, op := range o.Option {
		if c, ok := op.(*dns.EDNS0_COOKIE); ok {
			b, err := hex.DecodeString(c.Cookie)
			if err != nil {
				t.Fatal(err)
			}
			return b, true
		}
	}
	return nil, false
}

func countOPTs(rrs []dns.RR) int {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// FuzzUDPLoop sends batches of arbitrary datagrams through the real UDP
// socket path (cairn's own recvmmsg/sendmmsg loop, and its fallback to
// miekg/dns), then a well-formed query, and checks: every datagram that
// comes back unpacks as a response (QR set) with the ID of one that was
// sent, and a slipped one (TC, AA clear) is no longer than the query;
// and the server still answers the well-formed query, after them,
// within 5s, in full (no panic, no reader stopped by a hostile batch).
// The input's first byte splits the rest into 1 to 8 datagrams. Its seeds
// are the f.Add calls (a query, a query glued to a runt, a response,
// runts, queries with cookies).
//
// The server limits responses as it would in production, but at 1,000 a
// second with a burst of 100 from each address, on the real clock, so
// that inputs reach the limiter's slip and drop; the well-formed query
// carries a valid server cookie, which is never limited.
func FuzzUDPLoop(f *testing.F) {
	valid, _ := query("web.shop.svc.cairn.internal.", dns.TypeA, true).Pack()
	f.Add(append([]byte{1}, valid...))
	f.Add(append([]byte{3}, append(append(valid[:7:7], valid...), 0xff, 0xff)...))
	f.Add([]byte{2, 0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}) // a response: dropped
	f.Add([]byte{8, 1, 2, 3})                                        // runts
	seeds := cookieSeeds(time.Now())
	for i, b := range seeds {
		f.Add(append([]byte{byte(i)}, b...))
	}
	f.Add(append([]byte{2}, append(append([]byte(nil), seeds[1]...), seeds[4]...)...))
	// One server for every input, over its real sockets, stopped when
	// the fuzzing ends.
	addr := start(f, append(shopServices(), bigService(50)), func(c *dnsserver.Config) {
		fuzzConfig(c)
		c.Now, c.LastSync = time.Now, nil
		c.RRL = dnsserver.RRLConfig{Mode: dnsserver.ModeOn, Rate: 1000, Burst: 100, IPv4Prefix: 32}
	}).addr
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		k, rest := int(in[0]%8)+1, in[1:]
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ids := map[uint16]int{} // an ID sent: its longest datagram
		for i := range k {
			d := rest[i*len(rest)/k : (i+1)*len(rest)/k]
			if len(d) >= 2 {
				id := uint16(d[0])<<8 | uint16(d[1])
				ids[id] = max(ids[id], len(d))
			}
			_, _ = c.Write(d) // an empty datagram is sent too
		}
		probe := withCookie(query("liveness.shop.svc.cairn.internal.", dns.TypeA, true), append(append([]byte(nil), clientCookie...),
			dnsserver.ServerCookie(testSecret, clientCookie, uint32(time.Now().Unix()), loopback)...))
		probe.Id = 0xcafe
		pw, _ := probe.Pack()
		if _, err := c.Write(pw); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 65535)
		for {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("no answer to a well-formed query after the batch %x: %v", in, err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				if n < 12 {
					t.Fatalf("a %d-byte answer", n)
				}
				// A header-only FORMERR of a query miekg/dns cannot parse
				// unpacks; anything else must too.
				t.Fatalf("an answer that does not unpack: %v: %x", err, buf[:n])
			}
			if !r.Response {
				t.Fatalf("an answer without QR: %v", r)
			}
			if r.Id == probe.Id && len(r.Question) == 1 && r.Question[0].Name == probe.Question[0].Name {
				if r.Truncated {
					t.Fatalf("the well-formed query, with a valid cookie, was limited: %v", r)
				}
				return
			}
			longest, sent := ids[r.Id]
			if !sent {
				t.Fatalf("an answer with ID %d, sent none: %v", r.Id, r)
			}
			if r.Truncated && !r.Authoritative && r.Rcode == dns.RcodeSuccess && n > longest {
				// Slipped (an answer truncated for its size keeps AA).
				t.Fatalf("a slipped answer of %d octets to a query of at most %d: %v", n, longest, r)
			}
		}
	})
}
