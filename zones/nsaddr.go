package zones

import (
	"net"
	"net/netip"
)

// NSAddr is the address to give the zone's own name server (its NSAddrs
// entry) from the addresses (HOST:PORT) its server listens on, in order
// of preference: the first whose host is a concrete IP address; a
// wildcard host (0.0.0.0, ::) or a malformed address is passed over;
// "localhost" is 127.0.0.1. With none, 127.0.0.1. A server gives its DNS
// listener and then its raft address, which peers reach it on and is
// never a wildcard; the agent gives its DNS listener alone.
func NSAddr(listeners ...string) netip.Addr {
	for _, hp := range listeners {
		host, _, _ := net.SplitHostPort(hp)
		if host == "localhost" {
			return netip.MustParseAddr("127.0.0.1")
		}
		if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
			return a.Unmap()
		}
	}
	return netip.MustParseAddr("127.0.0.1")
}
