// Package addrpolicy decides whether an address may be registered as an
// endpoint (SPEC §8): whoever may write endpoints must not be able to point
// traffic anywhere. It canonicalises addresses and refuses loopback,
// link-local (cloud metadata included), unspecified, multicast and the
// servers' own addresses, and addresses outside a namespace's permitted
// CIDRs.
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
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
}

// Config configures a Policy.
type Config struct {
	// AllowLoopback permits loopback addresses (--dev, so that a laptop
	// demo works).
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
// wrapping ErrForbidden names the rule that refused it; any other error is
// malformed input.
func (p *Policy) Check(ns, raw string) (netip.Addr, error) {
	ip, err := Canonical(raw)
	if err != nil {
		return netip.Addr{}, err
	}
	forbid := func(why string) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("%s is %s: %w", ip, why, ErrForbidden)
	}
	switch {
	case ip.IsUnspecified():
		return forbid("unspecified")
	case ip.IsLoopback() && !p.cfg.AllowLoopback:
		return forbid("loopback (allowed only with --dev)")
	case ip.IsLinkLocalUnicast():
		return forbid("link-local, where cloud metadata services live")
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsLinkLocalMulticast():
		return forbid("multicast")
	case ip == netip.IPv4Unspecified() || ip.Is4() && ip.As4() == [4]byte{255, 255, 255, 255}:
		return forbid("broadcast")
	case slices.Contains(metadata, ip):
		return forbid("a cloud metadata address")
	}
	if p.cfg.Own != nil && !(ip.IsLoopback() && p.cfg.AllowLoopback) {
		if slices.Contains(p.cfg.Own(), ip) {
			return forbid("one of the cairn servers' own addresses")
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
	}
	return ip, nil
}
