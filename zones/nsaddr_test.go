package zones_test

import (
	"net/netip"
	"testing"

	"github.com/cairn-sd/cairn/zones"
)

// TestNSAddr: the name server's address is the first concrete listener
// host; wildcards and malformed addresses are passed over.
func TestNSAddr(t *testing.T) {
	for _, c := range []struct {
		listeners []string
		want      string
	}{
		{[]string{"192.0.2.53:53", "192.0.2.1:8482"}, "192.0.2.53"},
		{[]string{"0.0.0.0:53", "192.0.2.1:8482"}, "192.0.2.1"},
		{[]string{"[::]:53", "[2001:db8::1]:8482"}, "2001:db8::1"},
		{[]string{"[::ffff:192.0.2.7]:53"}, "192.0.2.7"},
		{[]string{"localhost:53", "192.0.2.1:8482"}, "127.0.0.1"},
		{[]string{"0.0.0.0:53", ""}, "127.0.0.1"},
		{[]string{"not an address", "0.0.0.0:8482"}, "127.0.0.1"},
		{nil, "127.0.0.1"},
	} {
		if got := zones.NSAddr(c.listeners...); got != netip.MustParseAddr(c.want) {
			t.Errorf("NSAddr(%q) = %s, want %s", c.listeners, got, c.want)
		}
	}
}
