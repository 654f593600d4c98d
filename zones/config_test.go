package zones

import (
	"errors"
	"io/fs"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestNewDefaults(t *testing.T) {
	z := mustNew(t, Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("192.0.2.53")}}})
	if got := z.Domain(); got != "cairn.internal." {
		t.Errorf("Domain() = %q", got)
	}
	if got := z.NegativeTTL(); got != 5 {
		t.Errorf("NegativeTTL() = %d, want 5", got)
	}
	soa := z.SOA(42)
	want := "cairn.internal.\t5\tIN\tSOA\tns.cairn.internal. hostmaster.cairn.internal. 42 3600 600 86400 5"
	if soa.String() != want {
		t.Errorf("SOA(42) = %q\nwant        %q", soa.String(), want)
	}
	if got := rrStrings(z.NS()); got != "cairn.internal.\t3600\tIN\tNS\tns.cairn.internal." {
		t.Errorf("NS() = %q", got)
	}
	if got := rrStrings(z.Glue()); got != "ns.cairn.internal.\t3600\tIN\tA\t192.0.2.53" {
		t.Errorf("Glue() = %q", got)
	}
	// SOA returns a fresh record each time.
	soa.Serial = 7
	if z.SOA(42).Serial != 42 {
		t.Error("changing a returned SOA changed the zone's")
	}
}

func TestNewCustom(t *testing.T) {
	z := mustNew(t, Config{
		Domain: "Discovery.Example.",
		NS:     []string{"ns1.example.net", "NS2.Discovery.Example."},
		NSAddrs: map[string][]netip.Addr{"ns2.discovery.example": {
			netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("::ffff:192.0.2.2"), netip.MustParseAddr("192.0.2.2"),
		}},
		NSTTL:   2 * time.Hour,
		RName:   "dns.admin@Example.com",
		Refresh: 2 * time.Hour, Retry: time.Hour, Expire: 7 * 24 * time.Hour,
		Minimum: 30 * time.Second,
	})
	want := "discovery.example.\t30\tIN\tSOA\tns1.example.net. dns\\.admin.example.com. 1 7200 3600 604800 30"
	if got := z.SOA(1).String(); got != want {
		t.Errorf("SOA = %q\nwant  %q", got, want)
	}
	if got, want := rrStrings(z.NS()), "discovery.example.\t7200\tIN\tNS\tns1.example.net.\n"+
		"discovery.example.\t7200\tIN\tNS\tns2.discovery.example."; got != want {
		t.Errorf("NS() = %q\nwant   %q", got, want)
	}
	// The mapped IPv4 address is the same as the plain one: one A record.
	if got, want := rrStrings(z.Glue()), "ns2.discovery.example.\t7200\tIN\tA\t192.0.2.2\n"+
		"ns2.discovery.example.\t7200\tIN\tAAAA\t2001:db8::2"; got != want {
		t.Errorf("Glue() = %q\nwant     %q", got, want)
	}
	if rrs, ok := z.Static("NS2.discovery.example.", dns.TypeAAAA); !ok || len(rrs) != 1 {
		t.Errorf("Static(ns2, AAAA) = %v, %v", rrs, ok)
	}
	if got := z.Classify("ns1.example.net.").Kind; got != OutsideZone {
		t.Errorf("out-of-zone name server classified %v", got)
	}
	z = mustNew(t, Config{NS: []string{"ns.example.net."}, MName: "Primary.Example.NET", RName: "root.example.net"})
	if got, want := z.SOA(1).Ns+" "+z.SOA(1).Mbox, "primary.example.net. root.example.net."; got != want {
		t.Errorf("MName RName = %q, want %q", got, want)
	}
	if len(z.Glue()) != 0 {
		t.Errorf("Glue() = %v for an out-of-zone name server", z.Glue())
	}
}

func TestNewErrors(t *testing.T) {
	addr := func(s ...string) []netip.Addr {
		var a []netip.Addr
		for _, x := range s {
			a = append(a, netip.MustParseAddr(x))
		}
		return a
	}
	glue := map[string][]netip.Addr{"ns.cairn.internal.": addr("192.0.2.53")}
	out := []string{"ns.example.net."}
	// longDomain is valid, 254 octets on the wire: too long for "ns." in front.
	longDomain := strings.Repeat(strings.Repeat("d", 62)+".", 3) + strings.Repeat("d", 63) + "."
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty label in domain", Config{Domain: "foo..bar", NS: out},
			`zones: Domain: "foo..bar" is not a valid domain name: it has an empty label`},
		{"root domain", Config{Domain: ".", NS: out},
			`zones: Domain: "." is the root; a host name has at least one label`},
		{"domain with underscore", Config{Domain: "my_zone.internal", NS: out},
			`zones: Domain: "my_zone.internal" is not a valid host name: label "my_zone" may hold only letters, digits and '-', and may not start or end with '-'`},
		{"domain with leading hyphen", Config{Domain: "-x.internal", NS: out},
			`zones: Domain: "-x.internal" is not a valid host name: label "-x" may hold only letters, digits and '-', and may not start or end with '-'`},
		{"domain with escape", Config{Domain: `a\.b.internal`, NS: out},
			`zones: Domain: "a\\.b.internal" is not a valid host name: label "a\\" may hold only letters, digits and '-', and may not start or end with '-'`},
		{"domain label too long", Config{Domain: strings.Repeat("a", 64) + ".internal", NS: out},
			`zones: Domain: "` + strings.Repeat("a", 64) + `.internal" is not a valid domain name: label "` + strings.Repeat("a", 64) + `" is longer than 63 characters`},
		{"domain too long", Config{Domain: strings.Repeat(strings.Repeat("a", 63)+".", 4), NS: out},
			`zones: Domain: "` + strings.Repeat(strings.Repeat("a", 63)+".", 4) + `" is not a valid domain name: it is longer than 255 octets`},

		{"default RName too long", Config{Domain: longDomain, NS: out},
			`zones: RName: "hostmaster.` + longDomain + `" is not a valid domain name: it is longer than 255 octets`},
		{"default NS too long", Config{Domain: longDomain, RName: "me@example.com"},
			`zones: NS: "ns.` + longDomain + `" is not a valid domain name: it is longer than 255 octets`},
		{"MName checked before the static file is read", Config{MName: "a..b", Static: strings.NewReader("www A x\n")},
			`zones: MName: "a..b" is not a valid domain name: it has an empty label`},
		{"in-zone name server without address (the defaults)", Config{},
			`zones: NS: the name server "ns.cairn.internal." is in the zone but has no address: give one in NSAddrs or as an A/AAAA record in the static records`},
		{"listed in-zone name server without address", Config{NS: []string{"ns.example.net", "ns1.cairn.internal"}},
			`zones: NS[1]: the name server "ns1.cairn.internal." is in the zone but has no address: give one in NSAddrs or as an A/AAAA record in the static records`},
		{"empty NS name", Config{NS: []string{""}},
			`zones: NS[0]: is empty`},
		{"invalid NS name", Config{NS: []string{"ns..example.net"}},
			`zones: NS[0]: "ns..example.net" is not a valid domain name: it has an empty label`},
		{"NS listed twice", Config{NS: []string{"ns.example.net", "NS.example.net."}},
			`zones: NS[1]: "NS.example.net." is listed twice`},
		{"NS in the service tree", Config{NS: []string{"ns.svc.cairn.internal"}},
			`zones: NS[0]: "ns.svc.cairn.internal" is at or under "svc.cairn.internal.", which belongs to services`},
		{"NSAddrs for an unknown name", Config{NS: out, NSAddrs: map[string][]netip.Addr{"ns9.cairn.internal": addr("192.0.2.1")}},
			`zones: NSAddrs["ns9.cairn.internal"]: "ns9.cairn.internal." is not one of the name servers`},
		{"NSAddrs outside the zone", Config{NS: out, NSAddrs: map[string][]netip.Addr{"ns.example.net": addr("192.0.2.1")}},
			`zones: NSAddrs["ns.example.net"]: "ns.example.net." is outside the zone; cairn is not authoritative for its addresses and serves none`},
		{"NSAddrs invalid key", Config{NSAddrs: map[string][]netip.Addr{"ns cairn": addr("192.0.2.1")}},
			`zones: NSAddrs["ns cairn"]: "ns cairn" is not a valid host name: label "ns cairn" may hold only letters, digits and '-', and may not start or end with '-'`},
		{"NSAddrs key twice", Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": addr("192.0.2.1"), "NS.cairn.internal.": addr("192.0.2.2")}},
			`zones: NSAddrs["ns.cairn.internal"]: "ns.cairn.internal." is given twice, in different spellings`},
		{"NSAddrs empty list", Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": nil}},
			`zones: NSAddrs["ns.cairn.internal"]: lists no address`},
		{"NSAddrs zero address", Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": {{}}}},
			`zones: NSAddrs["ns.cairn.internal"][0]: "invalid IP" is not an IPv4 or IPv6 address without a zone`},
		{"NSAddrs address with zone", Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": addr("192.0.2.1", "fe80::1%eth0")}},
			`zones: NSAddrs["ns.cairn.internal"][1]: "fe80::1%eth0" is not an IPv4 or IPv6 address without a zone`},

		{"invalid MName", Config{NSAddrs: glue, MName: "a..b"},
			`zones: MName: "a..b" is not a valid domain name: it has an empty label`},
		{"invalid RName", Config{NSAddrs: glue, RName: "a..b"},
			`zones: RName: "a..b" is not a valid domain name or mailbox`},
		{"RName address without local part", Config{NSAddrs: glue, RName: "@example.com"},
			`zones: RName: "@example.com" is not a valid mailbox: its local part must be non-empty, without spaces or any of \"();@`},
		{"RName address with bad host", Config{NSAddrs: glue, RName: "me@example..com"},
			`zones: RName: "me@example..com" is not a valid mailbox: "example..com" is not a valid host name`},
		{"RName label too long", Config{NSAddrs: glue, RName: strings.Repeat("a", 64) + ".example.com"},
			`zones: RName: "` + strings.Repeat("a", 64) + `.example.com" is not a valid domain name or mailbox`},

		{"negative NSTTL", Config{NSAddrs: glue, NSTTL: -time.Second},
			`zones: NSTTL: -1s is less than 1s`},
		{"fractional refresh", Config{NSAddrs: glue, Refresh: 1500 * time.Millisecond},
			`zones: Refresh: 1.5s is not a whole number of seconds (DNS counts TTLs and timers in seconds)`},
		{"sub-second retry", Config{NSAddrs: glue, Retry: time.Millisecond},
			`zones: Retry: 1ms is less than 1s`},
		{"expire over 2^31-1 s", Config{NSAddrs: glue, Expire: 1 << 31 * time.Second},
			`zones: Expire: 596523h14m8s exceeds the maximum of 596523h14m7s`},
		{"minimum over a day", Config{NSAddrs: glue, Minimum: 25 * time.Hour},
			`zones: Minimum: 25h0m0s exceeds the maximum of 24h0m0s`},
		{"retry longer than refresh", Config{NSAddrs: glue, Refresh: time.Minute},
			`zones: Retry: 10m0s is longer than Refresh (1m0s): a secondary retries a failed refresh sooner than it refreshes`},
		{"expire shorter than refresh", Config{NSAddrs: glue, Expire: 30 * time.Minute},
			`zones: Expire: 30m0s is shorter than Refresh (1h0m0s): a secondary would expire the zone before refreshing it`},

		{"static file and reader", Config{NSAddrs: glue, StaticFile: "x.zone", Static: strings.NewReader("")},
			`zones: Static: give StaticFile or Static, not both`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New succeeded: %v", z.SOA(0))
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
			if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field == "" {
				t.Errorf("error is not a *FieldError: %#v", err)
			}
		})
	}
}

func TestNewStaticFile(t *testing.T) {
	t.Run("missing file is an I/O error", func(t *testing.T) {
		_, err := New(Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": {netip.MustParseAddr("192.0.2.1")}},
			StaticFile: t.TempDir() + "/absent.zone"})
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
			t.Errorf("error = %v; want fs.ErrNotExist and not ErrInvalid", err)
		}
	})
	t.Run("a directory is a read error", func(t *testing.T) {
		dir := t.TempDir()
		_, err := New(Config{NSAddrs: map[string][]netip.Addr{"ns.cairn.internal": {netip.MustParseAddr("192.0.2.1")}},
			StaticFile: dir})
		if err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "zones: reading static records") {
			t.Errorf("error = %v; want a read error", err)
		}
	})
}

// rrStrings joins records' presentation, one a line.
func rrStrings(rrs []dns.RR) string {
	s := make([]string, len(rrs))
	for i, rr := range rrs {
		s[i] = rr.String()
	}
	return strings.Join(s, "\n")
}
