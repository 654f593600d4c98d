package addrpolicy_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-sd/cairn/internal/addrpolicy"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) func() []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return func() []netip.Addr { return out }
}

// outcome of a check: allowed (with its canonical form), forbidden by a
// rule, or malformed input.
type outcome int

const (
	allowed outcome = iota
	forbidden
	malformed
)

func TestCheck(t *testing.T) {
	prod := addrpolicy.New(addrpolicy.Config{
		Permitted: map[string][]netip.Prefix{
			"pci":  prefixes("10.50.0.0/16", "2001:db8:50::/48"),
			"edge": prefixes("192.0.2.77/24"), // not masked: New masks it
		},
		Own: addrs("10.255.0.1", "2001:db8:ff::1", "127.0.0.1"),
	})
	dev := addrpolicy.New(addrpolicy.Config{AllowLoopback: true, Own: addrs("10.255.0.1", "127.0.0.1")})
	bare := addrpolicy.New(addrpolicy.Config{}) // no Own, no namespaces

	for _, tc := range []struct {
		name   string
		p      *addrpolicy.Policy
		ns     string
		raw    string
		want   outcome
		canon  string // the canonical address when allowed
		reason string // words of the refusal, separated by "|": it must contain each
	}{
		// Ordinary addresses, and their canonical forms.
		{"ipv4", prod, "shop", "10.0.0.1", allowed, "10.0.0.1", ""},
		{"public ipv4", prod, "shop", "8.8.8.8", allowed, "8.8.8.8", ""},
		{"ipv6", prod, "shop", "2001:db8::1", allowed, "2001:db8::1", ""},
		{"ipv4-mapped ipv6 is unmapped", prod, "shop", "::ffff:10.0.0.1", allowed, "10.0.0.1", ""},
		{"upper-case ipv6 is lowered", prod, "shop", "2001:DB8::1", allowed, "2001:db8::1", ""},
		{"long ipv6 is compressed", prod, "shop", "2001:0db8:0000:0000:0000:0000:0000:0001", allowed, "2001:db8::1", ""},
		{"ula", prod, "shop", "fd12:3456::1", allowed, "fd12:3456::1", ""},
		{"cgnat", prod, "shop", "100.64.0.1", allowed, "100.64.0.1", ""},

		// Malformed input: not forbidden, invalid.
		{"empty", prod, "shop", "", malformed, "", "not an IP"},
		{"garbage", prod, "shop", "db.example.com", malformed, "", "not an IP"},
		{"short ipv4", prod, "shop", "10.0.0", malformed, "", "not an IP"},
		{"octet out of range", prod, "shop", "10.0.0.256", malformed, "", "not an IP"},
		{"leading zero", prod, "shop", "010.0.0.1", malformed, "", "not an IP"},
		{"with port", prod, "shop", "10.0.0.1:80", malformed, "", "not an IP"},
		{"cidr", prod, "shop", "10.0.0.0/8", malformed, "", "not an IP"},
		{"bracketed", prod, "shop", "[2001:db8::1]", malformed, "", "not an IP"},
		{"zone", prod, "shop", "fe80::1%eth0", malformed, "", "zone"},
		{"zone on a global address", prod, "shop", "2001:db8::1%1", malformed, "", "zone"},

		// Unspecified.
		{"0.0.0.0", prod, "shop", "0.0.0.0", forbidden, "", "unspecified"},
		{"::", prod, "shop", "::", forbidden, "", "unspecified"},
		{"mapped 0.0.0.0", prod, "shop", "::ffff:0.0.0.0", forbidden, "", "unspecified"},
		{"0.0.0.0 in dev", dev, "shop", "0.0.0.0", forbidden, "", "unspecified"},

		// Loopback: refused unless --dev.
		{"127.0.0.1", prod, "shop", "127.0.0.1", forbidden, "", "loopback"},
		{"127/8", bare, "shop", "127.255.0.9", forbidden, "", "loopback"},
		{"::1", prod, "shop", "::1", forbidden, "", "loopback"},
		{"mapped loopback", bare, "shop", "::ffff:127.0.0.1", forbidden, "", "loopback"},
		{"127.0.0.1 in dev", dev, "shop", "127.0.0.1", allowed, "127.0.0.1", ""},
		{"::1 in dev", dev, "shop", "::1", allowed, "::1", ""},
		{"mapped loopback in dev", dev, "shop", "::ffff:127.0.0.2", allowed, "127.0.0.2", ""},

		// Link-local, cloud metadata included; refused in dev too.
		{"metadata", prod, "shop", "169.254.169.254", forbidden, "", "link-local"},
		{"link-local ipv4", bare, "shop", "169.254.1.1", forbidden, "", "link-local"},
		{"link-local ipv6", prod, "shop", "fe80::1", forbidden, "", "link-local"},
		{"link-local ipv6 upper", prod, "shop", "FE80::ABCD", forbidden, "", "link-local"},
		{"mapped metadata", prod, "shop", "::ffff:169.254.169.254", forbidden, "", "link-local"},
		{"metadata in dev", dev, "shop", "169.254.169.254", forbidden, "", "link-local"},
		{"fe80 in dev", dev, "shop", "fe80::1", forbidden, "", "link-local"},

		// Multicast and broadcast.
		{"224.0.0.1", prod, "shop", "224.0.0.1", forbidden, "", "multicast"},
		{"239/8", bare, "shop", "239.255.255.250", forbidden, "", "multicast"},
		{"ff02::1", prod, "shop", "ff02::1", forbidden, "", "multicast"},
		{"interface-local", prod, "shop", "ff01::1", forbidden, "", "multicast"},
		{"global ipv6 multicast", prod, "shop", "ff0e::1", forbidden, "", "multicast"},
		{"multicast in dev", dev, "shop", "224.0.0.251", forbidden, "", "multicast"},
		{"broadcast", prod, "shop", "255.255.255.255", forbidden, "", "broadcast"},

		// Cloud metadata outside link-local.
		{"aws imds ipv6", prod, "shop", "fd00:ec2::254", forbidden, "", "metadata"},
		{"alibaba", bare, "shop", "100.100.100.200", forbidden, "", "metadata"},
		{"alibaba neighbour", bare, "shop", "100.100.100.201", allowed, "100.100.100.201", ""},

		// The servers' own addresses.
		{"own ipv4", prod, "shop", "10.255.0.1", forbidden, "", "own addresses"},
		{"own ipv4 mapped", prod, "shop", "::ffff:10.255.0.1", forbidden, "", "own addresses"},
		{"own ipv6 spelt long", prod, "shop", "2001:0DB8:00FF::0001", forbidden, "", "own addresses"},
		{"own neighbour", prod, "shop", "10.255.0.2", allowed, "10.255.0.2", ""},
		{"own in dev", dev, "shop", "10.255.0.1", forbidden, "", "own addresses"},
		// With --dev, loopback is allowed even when it is a server's own
		// address (the laptop demo runs everything on 127.0.0.1).
		{"own loopback in dev", dev, "shop", "127.0.0.1", allowed, "127.0.0.1", ""},
		{"own loopback outside dev", prod, "shop", "127.0.0.1", forbidden, "", "loopback"},
		{"no own addresses", bare, "shop", "10.255.0.1", allowed, "10.255.0.1", ""},

		{"gcp metadata ipv6", prod, "shop", "fd20:ce::254", forbidden, "", "metadata"},
		{"gcp metadata ipv6 in dev", dev, "shop", "fd20:ce::254", forbidden, "", "metadata"},
		{"gcp metadata neighbour", prod, "shop", "fd20:ce::255", allowed, "fd20:ce::255", ""},
		{"azure wireserver", prod, "shop", "168.63.129.16", forbidden, "", "metadata"},
		{"azure wireserver mapped", bare, "shop", "::ffff:168.63.129.16", forbidden, "", "metadata"},
		{"azure wireserver in dev", dev, "shop", "168.63.129.16", forbidden, "", "metadata"},
		{"azure neighbour", prod, "shop", "168.63.129.17", allowed, "168.63.129.17", ""},

		// 0.0.0.0/8, "this network": refused in dev too.
		{"this network", prod, "shop", "0.1.2.3", forbidden, "", "0.0.0.0/8"},
		{"this network top", bare, "shop", "0.255.255.255", forbidden, "", "0.0.0.0/8"},
		{"this network mapped", prod, "shop", "::ffff:0.0.0.1", forbidden, "", "0.0.0.0/8"},
		{"this network in dev", dev, "shop", "0.0.0.1", forbidden, "", "0.0.0.0/8"},
		{"1.0.0.1 is not this network", prod, "shop", "1.0.0.1", allowed, "1.0.0.1", ""},

		// NAT64 well-known prefix 64:ff9b::/96: the IPv4 address is the
		// last 32 bits, and every IPv4 rule applies to it.
		{"nat64 metadata", prod, "shop", "64:ff9b::a9fe:a9fe", forbidden, "", "64:ff9b::a9fe:a9fe|169.254.169.254|NAT64|link-local"},
		{"nat64 metadata spelt dotted", bare, "shop", "64:ff9b::169.254.169.254", forbidden, "", "169.254.169.254|link-local"},
		{"nat64 loopback", prod, "shop", "64:ff9b::7f00:1", forbidden, "", "64:ff9b::7f00:1|127.0.0.1|NAT64|loopback"},
		{"nat64 loopback in dev", dev, "shop", "64:ff9b::7f00:1", forbidden, "", "127.0.0.1|loopback|even with --dev"},
		{"nat64 unspecified", prod, "shop", "64:ff9b::", forbidden, "", "0.0.0.0|unspecified"},
		{"nat64 this network", prod, "shop", "64:ff9b::1", forbidden, "", "0.0.0.1|0.0.0.0/8"},
		{"nat64 multicast", prod, "shop", "64:ff9b::e000:1", forbidden, "", "224.0.0.1|multicast"},
		{"nat64 broadcast", prod, "shop", "64:ff9b::ffff:ffff", forbidden, "", "255.255.255.255|broadcast"},
		{"nat64 alibaba metadata", prod, "shop", "64:ff9b::6464:64c8", forbidden, "", "100.100.100.200|metadata"},
		{"nat64 azure wireserver", prod, "shop", "64:ff9b::a83f:8110", forbidden, "", "168.63.129.16|metadata"},
		{"nat64 own address", prod, "shop", "64:ff9b::aff:1", forbidden, "", "10.255.0.1|own addresses"},
		{"nat64 own address in dev", dev, "shop", "64:ff9b::aff:1", forbidden, "", "10.255.0.1|own addresses"},
		{"nat64 public", prod, "shop", "64:ff9b::808:808", allowed, "64:ff9b::808:808", ""},
		{"nat64 public spelt dotted", bare, "shop", "64:ff9b::8.8.8.8", allowed, "64:ff9b::808:808", ""},
		{"nat64 own neighbour", prod, "shop", "64:ff9b::aff:2", allowed, "64:ff9b::aff:2", ""},
		{"nat64 public in dev", dev, "shop", "64:ff9b::808:808", allowed, "64:ff9b::808:808", ""},

		// NAT64 local-use prefix 64:ff9b:1::/48: every RFC 6052 layout
		// that fits in it is read.
		{"nat64 local /96 metadata", prod, "shop", "64:ff9b:1::a9fe:a9fe", forbidden, "", "169.254.169.254|local-use|link-local"},
		{"nat64 local /96 loopback in dev", dev, "shop", "64:ff9b:1::7f00:1", forbidden, "", "127.0.0.1|loopback"},
		{"nat64 local /96 subnet metadata", bare, "shop", "64:ff9b:1:1234:5:6789:a9fe:a9fe", forbidden, "", "169.254.169.254|link-local"},
		{"nat64 local /48 metadata", prod, "shop", "64:ff9b:1:a9fe:a9:fe00::", forbidden, "", "169.254.169.254|link-local"},
		{"nat64 local /56 loopback", prod, "shop", "64:ff9b:1:7f:0:1::", forbidden, "", "127.0.0.1|loopback"},
		{"nat64 local /64 loopback in dev", dev, "shop", "64:ff9b:1:0:7f:0:100:0", forbidden, "", "127.0.0.1|loopback"},
		{"nat64 local /48 suffix set", bare, "shop", "64:ff9b:1:a9fe:a9:fe00:0:1", forbidden, "", "169.254.169.254|link-local"},
		{"nat64 local /96 public", prod, "shop", "64:ff9b:1::808:808", allowed, "64:ff9b:1::808:808", ""},
		{"nat64 local /48 public", prod, "shop", "64:ff9b:1:808:8:800::", allowed, "64:ff9b:1:808:8:800::", ""},
		{"nat64 local /96 private", prod, "shop", "64:ff9b:1::a00:1", allowed, "64:ff9b:1::a00:1", ""},
		{"outside nat64 local", prod, "shop", "64:ff9b:2::a9fe:a9fe", allowed, "64:ff9b:2::a9fe:a9fe", ""},

		// IPv4-compatible ::/96 (deprecated), other than :: and ::1.
		{"compat metadata", prod, "shop", "::a9fe:a9fe", forbidden, "", "::a9fe:a9fe|169.254.169.254|IPv4-compatible|link-local"},
		{"compat metadata spelt dotted", bare, "shop", "::169.254.169.254", forbidden, "", "169.254.169.254|link-local"},
		{"compat loopback", prod, "shop", "::7f00:1", forbidden, "", "127.0.0.1|IPv4-compatible|loopback"},
		{"compat loopback in dev", dev, "shop", "::7f00:1", forbidden, "", "127.0.0.1|loopback|even with --dev"},
		{"compat this network", prod, "shop", "::2", forbidden, "", "0.0.0.2|0.0.0.0/8"},
		{"compat own address", prod, "shop", "::aff:1", forbidden, "", "10.255.0.1|own addresses"},
		{"compat public", prod, "shop", "::808:808", allowed, "::808:808", ""},

		// SIIT IPv4-translated ::ffff:0:0:0/96.
		{"siit loopback", prod, "shop", "::ffff:0:7f00:1", forbidden, "", "::ffff:0:7f00:1|127.0.0.1|SIIT|loopback"},
		{"siit loopback in dev", dev, "shop", "::ffff:0:7f00:1", forbidden, "", "127.0.0.1|loopback"},
		{"siit metadata", bare, "shop", "::ffff:0:a9fe:a9fe", forbidden, "", "169.254.169.254|link-local"},
		{"siit azure wireserver", prod, "shop", "::ffff:0:a83f:8110", forbidden, "", "168.63.129.16|metadata"},
		{"siit unspecified", prod, "shop", "::ffff:0:0:0", forbidden, "", "0.0.0.0|unspecified"},
		{"siit public", prod, "shop", "::ffff:0:808:808", allowed, "::ffff:0:808:808", ""},

		// 6to4 2002::/16: the IPv4 address is bits 16–47.
		{"6to4 metadata", prod, "shop", "2002:a9fe:a9fe::1", forbidden, "", "2002:a9fe:a9fe::1|169.254.169.254|6to4|link-local"},
		{"6to4 loopback in dev", dev, "shop", "2002:7f00:1::1", forbidden, "", "127.0.0.1|loopback|even with --dev"},
		{"6to4 multicast", prod, "shop", "2002:e000:1::", forbidden, "", "224.0.0.1|multicast"},
		{"6to4 own address", prod, "shop", "2002:aff:1:9::1", forbidden, "", "10.255.0.1|own addresses"},
		{"6to4 unspecified", bare, "shop", "2002::1", forbidden, "", "0.0.0.0|unspecified"},
		{"6to4 public", prod, "shop", "2002:0808:0808::1", allowed, "2002:808:808::1", ""},
		{"6to4 public in dev", dev, "shop", "2002:808:808:1::1", allowed, "2002:808:808:1::1", ""},

		// Teredo 2001::/32 is refused outright: its client address is
		// obfuscated.
		{"teredo", prod, "shop", "2001:0:4136:e378:8000:63bf:3fff:fdd2", forbidden, "", "2001:0:4136:e378:8000:63bf:3fff:fdd2|Teredo|obfuscated"},
		{"teredo in dev", dev, "shop", "2001::1", forbidden, "", "Teredo"},
		{"documentation prefix is not teredo", bare, "shop", "2001:db8::1", allowed, "2001:db8::1", ""},
		{"google dns is not teredo", prod, "shop", "2001:4860:4860::8888", allowed, "2001:4860:4860::8888", ""},

		// A namespace's permitted CIDRs.
		{"inside pci v4", prod, "pci", "10.50.1.2", allowed, "10.50.1.2", ""},
		{"inside pci v6", prod, "pci", "2001:db8:50:1::9", allowed, "2001:db8:50:1::9", ""},
		{"inside pci mapped", prod, "pci", "::ffff:10.50.0.9", allowed, "10.50.0.9", ""},
		{"outside pci", prod, "pci", "10.51.0.1", forbidden, "", `"pci"`},
		{"outside pci v6", prod, "pci", "2001:db8:51::1", forbidden, "", `"pci"`},
		{"edge masked prefix", prod, "edge", "192.0.2.1", allowed, "192.0.2.1", ""},
		{"outside edge", prod, "edge", "192.0.3.1", forbidden, "", `"edge"`},
		{"other namespace unrestricted", prod, "shop", "10.51.0.1", allowed, "10.51.0.1", ""},
		// The other rules apply inside a permitted CIDR too.
		{"pci own address", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"pci": prefixes("10.0.0.0/8")}, Own: addrs("10.0.0.5")}), "pci", "10.0.0.5", forbidden, "", "own addresses"},
		{"pci loopback", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"pci": prefixes("127.0.0.0/8")}}), "pci", "127.0.0.1", forbidden, "", "loopback"},
		// Inside a namespace's CIDRs, an embedded IPv4 address is judged
		// too; outside them, a translated address is refused as any other.
		{"nat64 permitted", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"nat": prefixes("64:ff9b::/96")}}), "nat", "64:ff9b::808:808", allowed, "64:ff9b::808:808", ""},
		{"nat64 permitted, embedded ipv4 inside the v4 ranges", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"nat": prefixes("64:ff9b::/96", "10.1.0.0/16")}}), "nat", "64:ff9b::a01:203", allowed, "64:ff9b::a01:203", ""},
		{"nat64 permitted, embedded ipv4 outside the v4 ranges", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"nat": prefixes("64:ff9b::/96", "10.1.0.0/16")}}), "nat", "64:ff9b::a63:1", forbidden, "", "10.99.0.1|outside the IPv4 CIDRs"},
		{"nat64 permitted metadata", addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"nat": prefixes("64:ff9b::/96")}}), "nat", "64:ff9b::a9fe:a9fe", forbidden, "", "169.254.169.254|link-local"},
		{"nat64 outside pci", prod, "pci", "64:ff9b::a32:1", forbidden, "", `"pci"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip, err := tc.p.Check(tc.ns, tc.raw)
			switch tc.want {
			case allowed:
				if err != nil {
					t.Fatalf("Check(%q, %q): %v; want allowed", tc.ns, tc.raw, err)
				}
				if ip.String() != tc.canon {
					t.Errorf("Check(%q, %q) = %s, want %s", tc.ns, tc.raw, ip, tc.canon)
				}
				return
			case forbidden:
				if !errors.Is(err, addrpolicy.ErrForbidden) {
					t.Fatalf("Check(%q, %q) = %v, %v; want ErrForbidden", tc.ns, tc.raw, ip, err)
				}
			case malformed:
				if err == nil || errors.Is(err, addrpolicy.ErrForbidden) {
					t.Fatalf("Check(%q, %q) = %v, %v; want a malformed-input error", tc.ns, tc.raw, ip, err)
				}
			}
			if ip.IsValid() {
				t.Errorf("a refused check returned the address %s", ip)
			}
			for _, word := range strings.Split(tc.reason, "|") {
				if !strings.Contains(err.Error(), word) {
					t.Errorf("error %q does not say %q", err, word)
				}
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"10.0.0.1", "10.0.0.1"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"::FFFF:A00:1", "10.0.0.1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},
		{"2001:db8:0:0:0:0:0:0", "2001:db8::"},
		{"0:0:0:0:0:0:0:1", "::1"},
	} {
		got, err := addrpolicy.Canonical(tc.raw)
		if err != nil || got.String() != tc.want {
			t.Errorf("Canonical(%q) = %v, %v; want %s", tc.raw, got, err, tc.want)
		}
	}
	for _, raw := range []string{"", "x", "fe80::1%eth0", "1.2.3", "::ffff:1.2.3.4%eth0"} {
		if got, err := addrpolicy.Canonical(raw); err == nil {
			t.Errorf("Canonical(%q) = %v; want an error", raw, got)
		}
	}
}

// TestOwnIsReadOnEveryCheck: a membership change takes effect at once.
func TestOwnIsReadOnEveryCheck(t *testing.T) {
	var mu sync.Mutex
	own := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	calls := 0
	p := addrpolicy.New(addrpolicy.Config{Own: func() []netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return slices.Clone(own)
	}})
	if _, err := p.Check("shop", "10.0.0.2"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	own = append(own, netip.MustParseAddr("10.0.0.2"))
	mu.Unlock()
	if _, err := p.Check("shop", "10.0.0.2"); !errors.Is(err, addrpolicy.ErrForbidden) {
		t.Errorf("after 10.0.0.2 joined: %v; want ErrForbidden", err)
	}
	if calls != 2 {
		t.Errorf("Own called %d times for 2 checks", calls)
	}
}

// TestNewCopiesConfig: changing the Config after New changes nothing.
func TestNewCopiesConfig(t *testing.T) {
	cfg := addrpolicy.Config{Permitted: map[string][]netip.Prefix{"pci": prefixes("10.50.0.0/16")}}
	p := addrpolicy.New(cfg)
	cfg.Permitted["pci"][0] = netip.MustParsePrefix("0.0.0.0/0")
	cfg.Permitted["shop"] = prefixes("10.1.0.0/16")
	cfg.AllowLoopback = true
	if _, err := p.Check("pci", "10.51.0.1"); !errors.Is(err, addrpolicy.ErrForbidden) {
		t.Errorf("pci after the config changed: %v", err)
	}
	if _, err := p.Check("shop", "10.2.0.1"); err != nil {
		t.Errorf("shop after the config changed: %v", err)
	}
	if _, err := p.Check("shop", "127.0.0.1"); !errors.Is(err, addrpolicy.ErrForbidden) {
		t.Errorf("loopback after the config changed: %v", err)
	}
}

// TestCheckConcurrent: a Policy is safe for concurrent use (run with -race).
func TestCheckConcurrent(t *testing.T) {
	p := addrpolicy.New(addrpolicy.Config{Permitted: map[string][]netip.Prefix{"pci": prefixes("10.50.0.0/16")}, Own: addrs("10.0.0.1")})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if _, err := p.Check("pci", "10.50.0.9"); err != nil {
					t.Errorf("goroutine %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
