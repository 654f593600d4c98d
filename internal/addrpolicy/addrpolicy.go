// Package addrpolicy decides whether an address may be registered as an
// endpoint (SPEC §8): whoever may write endpoints must not be able to point
// traffic anywhere. It canonicalises addresses and refuses loopback,
// link-local (cloud metadata included), unspecified, "this network",
// multicast and the servers' own addresses, and addresses outside a
// namespace's permitted CIDRs.
//
// An IPv6 address that embeds an IPv4 address by a translation or
// tunnelling scheme (NAT64, IPv4-compatible, SIIT, 6to4) reaches that IPv4
// address, so the IPv4 rules apply to the embedded address as well; Teredo,
// whose embedded address is obfuscated, is refused outright.
//
// A leaf: it imports no cairn package. A Policy is immutable once made
// and safe for concurrent use.
package addrpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrForbidden is an address the policy refuses; the API maps it to 403.
var ErrForbidden = errors.New("addrpolicy: address forbidden")

// metadata lists cloud metadata endpoints that are not link-local.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd20:ce::254"),    // GCP metadata server over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
	netip.MustParseAddr("168.63.129.16"),   // Azure wireserver
}

var (
	// thisNetwork is 0.0.0.0/8, "this host on this network" (RFC 791,
	// RFC 1122 §3.2.1.3): never a destination, and Linux connects to
	// 0.0.0.0 as to 127.0.0.1.
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	broadcast   = netip.AddrFrom4([4]byte{255, 255, 255, 255})

	// IPv6 ranges that embed an IPv4 address.
	nat64WKP   = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052 well-known prefix
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215 local-use prefix
	v4Compat   = netip.MustParsePrefix("::/96")           // RFC 4291 §2.5.5.1, deprecated
	siit       = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 IPv4-translated
	sixToFour  = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo     = netip.MustParsePrefix("2001::/32")       // RFC 4380
)

// Config configures a Policy.
type Config struct {
	// AllowLoopback permits loopback addresses (--dev, so that a laptop
	// demo works). It never permits a loopback address embedded in an
	// IPv6 address: a translated address is never a local demo.
	AllowLoopback bool
	// Permitted maps a namespace to the CIDRs its endpoints must fall in.
	// A namespace that is not listed may use any address the other rules
	// allow.
	Permitted map[string][]netip.Prefix
	// Own returns the servers' own addresses, refused as endpoints. It is
	// called on every check, so membership changes take effect at once.
	// May be nil.
	Own func() []netip.Addr
}

// Policy checks addresses. It is immutable and safe for concurrent use.
type Policy struct{ cfg Config }

// New returns the policy for cfg.
func New(cfg Config) *Policy {
	p := Config{AllowLoopback: cfg.AllowLoopback, Own: cfg.Own, Permitted: map[string][]netip.Prefix{}}
	for ns, ps := range cfg.Permitted {
		for _, pr := range ps {
			p.Permitted[ns] = append(p.Permitted[ns], pr.Masked())
		}
	}
	return &Policy{cfg: p}
}

// Canonical parses raw and returns its canonical text: IPv4-mapped IPv6 is
// unmapped and IPv6 is compressed. A zone is refused.
func Canonical(raw string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(raw)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", raw)
	}
	if ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q carries a zone; an endpoint must be routable without one", raw)
	}
	return ip.Unmap(), nil
}

// Check canonicalises raw and applies the rules for namespace ns. An error
// wrapping ErrForbidden names the rule that refused it (and, for an IPv6
// address that embeds an IPv4 address, the embedded address); any other
// error is malformed input.
func (p *Policy) Check(ns, raw string) (netip.Addr, error) {
	ip, err := Canonical(raw)
	if err != nil {
		return netip.Addr{}, err
	}
	forbid := func(why string) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("%s is %s: %w", ip, why, ErrForbidden)
	}
	if why := p.rule(ip, false); why != "" {
		return forbid(why)
	}
	if teredo.Contains(ip) {
		return forbid("a Teredo address (2001::/32), whose embedded IPv4 client address is obfuscated and cannot be checked")
	}
	// Own is read once per check, and not at all for a loopback address
	// that --dev allows (the laptop demo runs everything on 127.0.0.1).
	var own []netip.Addr
	if p.cfg.Own != nil && !(ip.IsLoopback() && p.cfg.AllowLoopback) {
		own = p.cfg.Own()
		if isOwn(own, ip) {
			return forbid("one of the cairn servers' own addresses")
		}
	}
	for _, e := range embedded(ip) {
		why := p.rule(e.v4, true)
		if why == "" && isOwn(own, e.v4) {
			why = "one of the cairn servers' own addresses"
		}
		if why != "" {
			return netip.Addr{}, fmt.Errorf("%s embeds the IPv4 address %s (%s), which is %s: %w", ip, e.v4, e.scheme, why, ErrForbidden)
		}
	}
	if ps, ok := p.cfg.Permitted[ns]; ok {
		in := false
		for _, pr := range ps {
			in = in || pr.Contains(ip)
		}
		if !in {
			return forbid(fmt.Sprintf("outside the CIDRs permitted for namespace %q", ns))
		}
		// A translated address reaches its embedded IPv4 address: where
		// the namespace lists IPv4 ranges, that address must be in them
		// too, or a permitted NAT64 prefix would reach any IPv4 host.
		var v4 []netip.Prefix
		for _, pr := range ps {
			if pr.Addr().Is4() {
				v4 = append(v4, pr)
			}
		}
		for _, e := range embedded(ip) {
			if len(v4) > 0 && !slices.ContainsFunc(v4, func(pr netip.Prefix) bool { return pr.Contains(e.v4) }) {
				return netip.Addr{}, fmt.Errorf("%s embeds the IPv4 address %s (%s), which is outside the IPv4 CIDRs permitted for namespace %q: %w",
					ip, e.v4, e.scheme, ns, ErrForbidden)
			}
		}
	}
	return ip, nil
}

// rule returns why the class of ip is refused, or "" when it is not.
// translated says ip is an IPv4 address embedded in an IPv6 one, whose
// loopback --dev does not allow.
func (p *Policy) rule(ip netip.Addr, translated bool) string {
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		if translated {
			return "loopback (refused even with --dev: a translated address is never a local demo)"
		}
		if !p.cfg.AllowLoopback {
			return "loopback (allowed only with --dev)"
		}
	case ip.IsLinkLocalUnicast():
		return "link-local, where cloud metadata services live"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsLinkLocalMulticast():
		return "multicast"
	case thisNetwork.Contains(ip):
		return `in 0.0.0.0/8 ("this network", RFC 791 and RFC 1122), which hosts treat as themselves`
	case ip == broadcast:
		return "broadcast"
	case slices.Contains(metadata, ip):
		return "a cloud metadata address"
	}
	return ""
}

func isOwn(own []netip.Addr, ip netip.Addr) bool {
	return slices.ContainsFunc(own, func(a netip.Addr) bool { return a.Unmap() == ip })
}

// embedding is an IPv4 address embedded in an IPv6 one, and the scheme
// that embeds it.
type embedding struct {
	v4     netip.Addr
	scheme string
}

// embedded returns the IPv4 addresses ip embeds: none for an address of no
// embedding scheme, one for most schemes, and, for the NAT64 local-use
// prefix, whose layout is the operator's choice, a reading for each layout
// RFC 6052 §2.2 allows inside a /48.
func embedded(ip netip.Addr) []embedding {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	last32 := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case nat64WKP.Contains(ip):
		return []embedding{{last32, "NAT64, 64:ff9b::/96"}}
	case nat64Local.Contains(ip):
		// The prefix's layout is the operator's choice, so every RFC 6052
		// layout that fits in it is read: a /48, /56, /64 and /96 prefix
		// (bits 64–71, byte 8, are skipped). The positions one layout
		// leaves unused are zero, so they read as 0.0.0.0/8 in another
		// layout; refusing that would refuse nearly every address in the
		// prefix, so a 0.0.0.0/8 reading is ignored here (this one rule
		// goes unchecked for this prefix: 0.0.0.0/8 is no valid
		// destination, RFC 1122 §3.2.1.3, for a translator to send to).
		const scheme = "NAT64 local-use, 64:ff9b:1::/48"
		var out []embedding
		for _, r := range [][4]byte{
			{b[6], b[7], b[9], b[10]},    // /48
			{b[7], b[9], b[10], b[11]},   // /56
			{b[9], b[10], b[11], b[12]},  // /64
			{b[12], b[13], b[14], b[15]}, // /96
		} {
			v4 := netip.AddrFrom4(r)
			if !thisNetwork.Contains(v4) && !slices.ContainsFunc(out, func(e embedding) bool { return e.v4 == v4 }) {
				out = append(out, embedding{v4, scheme})
			}
		}
		return out
	case v4Compat.Contains(ip):
		// :: and ::1 are IPv6's own unspecified and loopback addresses,
		// which the IPv6 rules have judged.
		if ip.IsUnspecified() || ip.IsLoopback() {
			return nil
		}
		return []embedding{{last32, "IPv4-compatible, ::/96"}}
	case siit.Contains(ip):
		return []embedding{{last32, "SIIT IPv4-translated, ::ffff:0:0:0/96"}}
	case sixToFour.Contains(ip):
		return []embedding{{netip.AddrFrom4([4]byte(b[2:6])), "6to4, 2002::/16"}}
	}
	return nil
}
