package dnsserver

import "net/netip"

// ServerCookie is the 16-octet server cookie a server with secret makes
// for client (8 octets) at ts (seconds) for ip: for the tests of package
// dnsserver_test, which check the cookies on the wire.
func ServerCookie(secret, client []byte, ts uint32, ip netip.Addr) []byte {
	k := newCookieKeys(CookieConfig{Secret: secret})
	out := make([]byte, serverCookieLen)
	k.mint(out, client, ts, ip)
	return out
}
