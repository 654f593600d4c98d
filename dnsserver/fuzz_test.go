package dnsserver_test

import (
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
// that the ECS code is fuzzed too.
func fuzzConfig(c *dnsserver.Config) {
	own(c)
	c.Subnets = []dnsserver.Subnet{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), Place: dnsserver.Place{Region: "r2", Zone: "c"}}}
	c.ECSTrusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
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
// sent; and the server still answers the well-formed query, after them,
// within 5s (no panic, no reader stopped by a hostile batch). The input's
// first byte splits the rest into 1 to 8 datagrams. Its seeds are the
// f.Add calls (a query, a query glued to a runt, a response, runts).
func FuzzUDPLoop(f *testing.F) {
	valid, _ := query("web.shop.svc.cairn.internal.", dns.TypeA, true).Pack()
	f.Add(append([]byte{1}, valid...))
	f.Add(append([]byte{3}, append(append(valid[:7:7], valid...), 0xff, 0xff)...))
	f.Add([]byte{2, 0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}) // a response: dropped
	f.Add([]byte{8, 1, 2, 3})                                        // runts
	// One server for every input, over its real sockets, stopped when
	// the fuzzing ends.
	addr := start(f, append(shopServices(), bigService(50)), fuzzConfig).addr
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
		ids := map[uint16]bool{}
		for i := range k {
			d := rest[i*len(rest)/k : (i+1)*len(rest)/k]
			if len(d) >= 2 {
				ids[uint16(d[0])<<8|uint16(d[1])] = true
			}
			_, _ = c.Write(d) // an empty datagram is sent too
		}
		probe := query("liveness.shop.svc.cairn.internal.", dns.TypeA, false)
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
				return
			}
			if !ids[r.Id] {
				t.Fatalf("an answer with ID %d, sent none: %v", r.Id, r)
			}
		}
	})
}
