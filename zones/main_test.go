package zones

import (
	"net/netip"
	"strings"
)

// testStatic is the static file of most tests. Line numbers matter: tests
// name them.
const testStatic = `$TTL 300
; the apex holds data beside the SOA and NS
@            TXT   "v=cairn"
@            A     192.0.2.10
www          A     192.0.2.1
www          A     192.0.2.2
WWW          AAAA  2001:db8::1
a.b.c        TXT   "deep"
alias        CNAME www
ext          CNAME www.example.com.
a\.b         TXT   "escaped dot"
\065bc       A     192.0.2.3
_sip._tcp    SRV   10 5 5060 www
`

// testConfig is a valid Config for cairn.internal. with testStatic and
// static, appended.
func testConfig(static string) Config {
	return Config{
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("2001:db8::53")}},
		Static:  strings.NewReader(testStatic + static),
	}
}

// fataler is what mustNew needs of a *testing.T, *testing.B or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t fataler, cfg Config) *Zone {
	t.Helper()
	z, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return z
}

// longName returns a name in the zone whose size on the wire is exactly
// octets (at least 20): labels of 63 octets, then one to fill.
func longName(octets int) string {
	const domain = "cairn.internal." // 16 octets on the wire
	rest := octets - 16
	var labels []string
	for rest > 64+2 {
		labels = append(labels, strings.Repeat("l", 63))
		rest -= 64
	}
	labels = append(labels, strings.Repeat("f", rest-1))
	return strings.Join(labels, ".") + "." + domain
}
