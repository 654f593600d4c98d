package zones

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"pgregory.net/rapid"
)

func TestStatic(t *testing.T) {
	z := mustNew(t, testConfig(""))
	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		want   string // records, one a line
		exists bool
	}{
		{"records of the type", "www.cairn.internal.", dns.TypeA,
			"www.cairn.internal.\t300\tIN\tA\t192.0.2.1\nwww.cairn.internal.\t300\tIN\tA\t192.0.2.2", true},
		{"case-insensitive, no trailing dot; owner in canonical case", "WWW.cairn.Internal", dns.TypeAAAA,
			"www.cairn.internal.\t300\tIN\tAAAA\t2001:db8::1", true},
		{"no records of the type", "www.cairn.internal.", dns.TypeMX, "", true},
		{"empty non-terminal", "b.c.cairn.internal.", dns.TypeA, "", true},
		{"empty non-terminal of an SRV name", "_tcp.cairn.internal.", dns.TypeSRV, "", true},
		{"srv", "_sip._tcp.cairn.internal.", dns.TypeSRV,
			"_sip._tcp.cairn.internal.\t300\tIN\tSRV\t10 5 5060 www.cairn.internal.", true},
		{"absent", "nope.cairn.internal.", dns.TypeA, "", false},
		{"below a static name", "x.www.cairn.internal.", dns.TypeA, "", false},
		{"service tree is not static", "cart.shop.svc.cairn.internal.", dns.TypeA, "", false},
		{"outside the zone", "www.example.com.", dns.TypeA, "", false},
		{"alias answers its CNAME for any type", "alias.cairn.internal.", dns.TypeA,
			"alias.cairn.internal.\t300\tIN\tCNAME\twww.cairn.internal.", true},
		{"alias answers its CNAME for CNAME", "alias.cairn.internal.", dns.TypeCNAME,
			"alias.cairn.internal.\t300\tIN\tCNAME\twww.cairn.internal.", true},
		{"alias out of the zone, not followed", "ext.cairn.internal.", dns.TypeAAAA,
			"ext.cairn.internal.\t300\tIN\tCNAME\twww.example.com.", true},
		{"escaped dot stays in its label", `a\.b.cairn.internal.`, dns.TypeTXT,
			"a\\.b.cairn.internal.\t300\tIN\tTXT\t\"escaped dot\"", true},
		{"name written with \\065 in the file", "ABC.cairn.internal.", dns.TypeA,
			"abc.cairn.internal.\t300\tIN\tA\t192.0.2.3", true},
		{"apex static record", "cairn.internal.", dns.TypeTXT,
			"cairn.internal.\t300\tIN\tTXT\t\"v=cairn\"", true},
		{"apex NS", "cairn.internal.", dns.TypeNS,
			"cairn.internal.\t3600\tIN\tNS\tns.cairn.internal.", true},
		{"apex SOA is the caller's", "cairn.internal.", dns.TypeSOA, "", true},
		{"ANY is the caller's", "www.cairn.internal.", dns.TypeANY, "", true},
		{"name server address", "ns.cairn.internal.", dns.TypeAAAA,
			"ns.cairn.internal.\t3600\tIN\tAAAA\t2001:db8::53", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rrs, exists := z.Static(tt.qname, tt.qtype)
			if got := rrStrings(rrs); got != tt.want || exists != tt.exists {
				t.Errorf("Static(%q, %s) = %q, %v\nwant %q, %v", tt.qname, dns.TypeToString[tt.qtype], got, exists, tt.want, tt.exists)
			}
		})
	}
	if rrs, _ := z.Static("cairn.internal.", dns.TypeNS); &rrs[0] != &z.NS()[0] {
		t.Error("Static(apex, NS) is not NS()")
	}
}

func TestStaticDoesNotAllocate(t *testing.T) {
	z := mustNew(t, testConfig(""))
	for _, q := range []string{"www.cairn.internal.", "WWW.Cairn.Internal", "nope.cairn.internal."} {
		if n := testing.AllocsPerRun(100, func() { z.Static(q, dns.TypeA) }); n != 0 {
			t.Errorf("Static(%q) allocates %v times", q, n)
		}
	}
}

func TestStaticUnknownTypeIsServed(t *testing.T) {
	z := mustNew(t, testConfig("x TYPE65280 \\# 2 abcd\n"))
	if rrs, ok := z.Static("x.cairn.internal.", 65280); !ok || len(rrs) != 1 {
		t.Errorf("Static(x, TYPE65280) = %v, %v", rrs, ok)
	}
}

func TestStaticLongNames(t *testing.T) {
	z := mustNew(t, testConfig(""))
	long := strings.Repeat("a", 2000) + ".cairn.internal."
	if rrs, ok := z.Static(long, dns.TypeA); ok || rrs != nil {
		t.Errorf("Static(2000 characters) = %v, %v", rrs, ok)
	}
	if k := z.Classify(long).Kind; k != NotFound {
		t.Errorf("Classify(2000 characters) = %v", k)
	}
}

// TestLineReaderRead checks the Read the parser does not use today: one
// byte at a time, so that the line count stays exact if it ever does.
func TestLineReaderRead(t *testing.T) {
	lr := newLineReader(strings.NewReader("a\nb"))
	buf := make([]byte, 8)
	var got []byte
	for {
		n, err := lr.Read(buf)
		if n > 1 {
			t.Fatalf("Read returned %d bytes", n)
		}
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if string(got) != "a\nb" || lr.line != 2 {
		t.Errorf("read %q, line %d", got, lr.line)
	}
	if n, err := lr.Read(nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v", n, err)
	}
}

func TestStaticDuplicatesAreDropped(t *testing.T) {
	z := mustNew(t, testConfig("www 300 A 192.0.2.1\nalias CNAME www.cairn.internal.\n"))
	if rrs, _ := z.Static("www.cairn.internal.", dns.TypeA); len(rrs) != 2 {
		t.Errorf("www A = %v; want the two records, once each", rrs)
	}
}

// TestStaticNameServers covers name servers whose names or addresses
// come from the static records.
func TestStaticNameServers(t *testing.T) {
	t.Run("apex NS in the file adds a name server; its address from the file", func(t *testing.T) {
		z := mustNew(t, Config{NS: []string{"ns.example.net"}, Static: strings.NewReader(
			"@ NS ns2\n@ NS ns.example.net.\nns2 A 192.0.2.2\nns2 TXT hello\n")})
		if got, want := rrStrings(z.NS()), "cairn.internal.\t3600\tIN\tNS\tns.example.net.\ncairn.internal.\t3600\tIN\tNS\tns2.cairn.internal."; got != want {
			t.Errorf("NS() = %q, want %q", got, want)
		}
		if got, want := rrStrings(z.Glue()), "ns2.cairn.internal.\t3600\tIN\tA\t192.0.2.2"; got != want {
			t.Errorf("Glue() = %q, want %q", got, want)
		}
	})
	t.Run("no default name server when the file names one", func(t *testing.T) {
		z := mustNew(t, Config{Static: strings.NewReader("@ NS ns1.example.net.\n")})
		if got, want := rrStrings(z.NS()), "cairn.internal.\t3600\tIN\tNS\tns1.example.net."; got != want {
			t.Errorf("NS() = %q, want %q", got, want)
		}
		if got := z.SOA(0).Ns; got != "ns1.example.net." {
			t.Errorf("MName = %q", got)
		}
	})
	t.Run("name server at the apex", func(t *testing.T) {
		z := mustNew(t, Config{NS: []string{"cairn.internal"}, NSAddrs: map[string][]netip.Addr{"cairn.internal.": {netip.MustParseAddr("192.0.2.9")}}})
		if rrs, ok := z.Static("cairn.internal.", dns.TypeA); !ok || len(rrs) != 1 {
			t.Errorf("Static(apex, A) = %v, %v", rrs, ok)
		}
	})
	t.Run("name server below an empty non-terminal", func(t *testing.T) {
		z := mustNew(t, Config{NS: []string{"ns.dc1.cairn.internal"}, NSAddrs: map[string][]netip.Addr{"ns.dc1.cairn.internal.": {netip.MustParseAddr("192.0.2.9")}}})
		if got := z.Classify("dc1.cairn.internal.").Kind; got != Static {
			t.Errorf("dc1 is %v, want Static (an empty non-terminal)", got)
		}
	})
}

func TestStaticErrors(t *testing.T) {
	const (
		glue = "ns A 192.0.2.53\n"
	)
	tests := []struct {
		name string
		file string
		want string
	}{
		{"outside the zone", glue + "www.example.com. A 192.0.2.1\n",
			`zones: static records: <static>:2: "www.example.com." A: the name is outside the zone "cairn.internal."`},
		{"suffix without a label boundary", glue + "xcairn.internal. A 192.0.2.1\n",
			`zones: static records: <static>:2: "xcairn.internal." A: the name is outside the zone "cairn.internal."`},
		{"$ORIGIN elsewhere", glue + "$ORIGIN example.com.\nwww A 192.0.2.1\n",
			`zones: static records: <static>:3: "www.example.com." A: the name is outside the zone "cairn.internal."`},
		{"service tree", glue + "svc A 192.0.2.1\n",
			`zones: static records: <static>:2: "svc.cairn.internal." A: names at or under "svc.cairn.internal." belong to services`},
		{"under the service tree, any case", glue + "\n\nCart.Shop.SVC TXT hi\n",
			`zones: static records: <static>:4: "Cart.Shop.SVC.cairn.internal." TXT: names at or under "svc.cairn.internal." belong to services`},
		{"SOA", glue + "@ SOA ns hostmaster 1 2 3 4 5\n",
			`zones: static records: <static>:2: "cairn.internal." SOA: the zone makes its own SOA from its configuration`},
		{"SOA in parentheses starts on its first line", glue + "; comment\n@ IN SOA ns hostmaster (\n  1 ; serial\n  2 3 4 5 )\n",
			`zones: static records: <static>:3: "cairn.internal." SOA: the zone makes its own SOA from its configuration`},
		{"delegation", glue + "sub NS ns.example.net.\n",
			`zones: static records: <static>:2: "sub.cairn.internal." NS: an NS record below the apex would delegate "sub.cairn.internal."; cairn is authoritative only and gives no referrals`},
		{"DNAME", glue + "old DNAME example.com.\n",
			`zones: static records: <static>:2: "old.cairn.internal." DNAME: DNAME is not supported`},
		{"CNAME at the apex", glue + "@ CNAME www.example.com.\n",
			`zones: static records: <static>:2: "cairn.internal." CNAME: a CNAME at the apex is not allowed: the apex holds the SOA and NS (RFC 1034 §3.6.2)`},
		{"CNAME after other data", glue + "www A 192.0.2.1\nwww TXT x\nwww CNAME other\n",
			`zones: static records: <static>:4: "www.cairn.internal." CNAME: a CNAME cannot stand beside other data; the name has A at line 2 (RFC 1034 §3.6.2)`},
		{"other data after a CNAME", glue + "$TTL 60\nwww CNAME other\n; x\nWWW A 192.0.2.1\n",
			`zones: static records: <static>:5: "WWW.cairn.internal." A: the name is an alias (CNAME at line 3) and can hold no other data (RFC 1034 §3.6.2)`},
		{"two CNAMEs", glue + "www CNAME a\nwww CNAME b\n",
			`zones: static records: <static>:3: "www.cairn.internal." CNAME: a name holds at most one CNAME (RFC 2181 §10.1); the first is at line 2`},
		{"class CH", glue + "www CH TXT x\n",
			`zones: static records: <static>:2: "www.cairn.internal." TXT: class CH is not supported; cairn serves class IN only`},
		{"class by number", glue + "www CLASS7 TXT x\n",
			`zones: static records: <static>:2: "www.cairn.internal." TXT: class CLASS7 is not supported; cairn serves class IN only`},
		{"wildcard", glue + "*.dev A 192.0.2.1\n",
			`zones: static records: <static>:2: "*.dev.cairn.internal." A: wildcard names are not supported; list each name`},
		{"DNSSEC", glue + "@ DS 1 8 2 AABBCCDD\n",
			`zones: static records: <static>:2: "cairn.internal." DS: cairn does not sign the zone, so it serves no DNSSEC records`},
		{"OPT in generic syntax", glue + "x TYPE41 \\# 0\n",
			`zones: static records: <static>:2: "x.cairn.internal." OPT: a query or meta type is not zone data (RFC 6895 §3.1)`},
		{"TSIG in generic syntax", glue + "x TYPE250 \\# 0\n",
			`zones: static records: <static>:2: "x.cairn.internal." TSIG: a query or meta type is not zone data (RFC 6895 §3.1)`},
		{"ANY in generic syntax", glue + "x TYPE255 \\# 0\n",
			`zones: static records: <static>:2: "x.cairn.internal." ANY: a query or meta type is not zone data (RFC 6895 §3.1)`},
		{"unknown type is named by number", glue + "svc TYPE65280 \\# 0\n",
			`zones: static records: <static>:2: "svc.cairn.internal." TYPE65280: names at or under "svc.cairn.internal." belong to services`},
		{"TTL differs in an RRset", glue + "www 60 A 192.0.2.1\nwww 120 A 192.0.2.2\n",
			`zones: static records: <static>:3: "www.cairn.internal." A: TTL 120 differs from TTL 60 of the same RRset at line 2 (RFC 2181 §5.2)`},
		{"owner omitted on a continuation line", glue + "www A 192.0.2.1\n  CNAME x\n",
			`zones: static records: <static>:3: "www.cairn.internal." CNAME: a CNAME cannot stand beside other data; the name has A at line 2 (RFC 1034 §3.6.2)`},
		{"last line without newline", glue + "\n\nsvc A 192.0.2.1",
			`zones: static records: <static>:4: "svc.cairn.internal." A: names at or under "svc.cairn.internal." belong to services`},
		{"generated records start at $GENERATE", glue + "$GENERATE 1-3 h$ A 192.0.2.$\n$GENERATE 1-3 h$ CNAME www\n",
			`zones: static records: <static>:3: "h1.cairn.internal." CNAME: a CNAME cannot stand beside other data; the name has A at line 2 (RFC 1034 §3.6.2)`},
		{"name server in the service tree", glue + "@ NS ns.svc\n",
			`zones: static records: <static>:2: "cairn.internal." NS: the name server "ns.svc.cairn.internal." is at or under "svc.cairn.internal.", which belongs to services`},
		{"name server not a host name", glue + "@ NS ns_1\n",
			`zones: static records: <static>:2: "cairn.internal." NS: the name server "ns_1.cairn.internal." is not a valid host name`},
		{"name server from the file without address", glue + "\n@ NS ns2\n",
			`zones: static records: <static>:3: "cairn.internal." NS: the name server "ns2.cairn.internal." is in the zone but has no address: give one in NSAddrs or as an A/AAAA record in the static records`},
		{"name server is an alias", "ns CNAME www\n",
			`zones: NS: "ns.cairn.internal." is an alias (CNAME at <static>:1); a name server's name must not be (RFC 2181 §10.3)`},

		// Syntax errors come from miekg/dns, with the file and line.
		{"syntax error", glue + "www A 192.0.2\n",
			`zones: static records: <static>: dns: bad A A: "192.0.2" at line: 2:13`},
		{"unknown type", glue + "\nwww BOGUS x\n",
			`zones: static records: <static>: dns: not a TTL: "BOGUS" at line: 3:10`},
		{"$INCLUDE is refused", glue + "$INCLUDE /etc/passwd\n",
			`zones: static records: <static>: dns: $INCLUDE directive not allowed: "/etc/passwd" at line: 2:20`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Static: strings.NewReader(tt.file)}
			z, err := New(cfg)
			if err == nil {
				t.Fatalf("New succeeded: %v", z.NS())
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
		})
	}
}

func TestStaticErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "static.zone")
	if err := os.WriteFile(path, []byte("ns A 192.0.2.53\n\nwww A 192.0.2.1\nwww CNAME x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{StaticFile: path})
	re, ok := errors.AsType[*RecordError](err)
	if !ok || re.File != path || re.Line != 4 {
		t.Fatalf("error = %v; want a *RecordError at %s:4", err, path)
	}
	if want := "zones: static records: " + path + ":4: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %q; want the prefix %q", err, want)
	}

	if err := os.WriteFile(path, []byte("ns A 192.0.2.53\nwww A x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{StaticFile: path})
	if _, ok := errors.AsType[*dns.ParseError](err); !ok || !strings.Contains(err.Error(), path+": dns: bad A A: \"x\" at line: 2:") {
		t.Errorf("error = %v; want a *dns.ParseError naming %s, line 2", err, path)
	}
}

func TestStaticAddressesInTwoPlaces(t *testing.T) {
	_, err := New(Config{
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": {netip.MustParseAddr("192.0.2.1")}},
		Static:  strings.NewReader("ns A 192.0.2.2\n"),
	})
	want := `zones: NSAddrs["ns.cairn.internal."]: the addresses of "ns.cairn.internal." are also given by A/AAAA records in the static records (<static>); give them in one place`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}

// TestStaticRoundTrip is a property: whatever names and addresses a
// static file lists, in whatever case and order, the zone answers
// exactly those records at those names, and their ancestors exist.
func TestStaticRoundTrip(t *testing.T) {
	label := rapid.StringMatching(`[a-zA-Z][a-zA-Z0-9-]{0,4}[a-zA-Z0-9]`).Filter(func(s string) bool {
		l := strings.ToLower(s)
		return l != "svc" && l != "ns"
	})
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) string {
			return strings.Join(rapid.SliceOfN(label, 1, 3).Draw(t, "labels"), ".")
		}), 1, 12, strings.ToLower).Draw(t, "names")
		want := map[string][]string{} // canonical name → addresses
		var lines []string
		for i, name := range names {
			for j := range rapid.IntRange(1, 3).Draw(t, "records") {
				addr := netip.AddrFrom4([4]byte{198, 51, byte(i), byte(j)}).String()
				lines = append(lines, name+" 60 IN A "+addr)
				key := strings.ToLower(name) + ".cairn.internal."
				want[key] = append(want[key], addr)
			}
		}
		lines = rapid.Permutation(lines).Draw(t, "order")
		cfg := testConfig("")
		cfg.Static = strings.NewReader(strings.Join(lines, "\n") + "\n")
		z := mustNew(t, cfg)
		for name, addrs := range want {
			if k := z.Classify(name).Kind; k != Static {
				t.Fatalf("Classify(%q) = %v", name, k)
			}
			rrs, ok := z.Static(strings.ToUpper(name), dns.TypeA)
			var got []string
			for _, rr := range rrs {
				got = append(got, rr.(*dns.A).A.String())
				if rr.Header().Name != name {
					t.Fatalf("owner %q, want %q", rr.Header().Name, name)
				}
			}
			slices.Sort(got)
			slices.Sort(addrs)
			if !ok || !slices.Equal(got, addrs) {
				t.Fatalf("Static(%q, A) = %v, %v; want %v", name, got, ok, addrs)
			}
			for parent := name; parent != "cairn.internal."; {
				off, _ := dns.NextLabel(parent, 0)
				parent = parent[off:]
				if _, ok := z.Static(parent, dns.TypeA); !ok {
					t.Fatalf("ancestor %q of %q does not exist", parent, name)
				}
			}
		}
		if _, ok := z.Static("absent-name.cairn.internal.", dns.TypeA); ok {
			t.Fatal("a name never listed exists")
		}
	})
}
