package zones_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/cairn-sd/cairn/zones"
	"github.com/miekg/dns"
)

// A server builds the zone once and asks it, per query, where the name
// lies; the catalog decides the rest.
func Example() {
	zone, err := zones.New(zones.Config{
		Domain:  "cairn.internal.",
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("192.0.2.53")}},
		Static:  strings.NewReader("www A 192.0.2.80\n"),
	})
	if err != nil {
		panic(err)
	}
	for _, q := range []string{
		"_HTTP._tcp.cart.shop.svc.cairn.internal.",
		"cart.shop.svc.cairn.internal.",
		"www.cairn.internal.",
		"nope.cairn.internal.",
		"example.com.",
	} {
		n := zone.Classify(q)
		switch n.Kind {
		case zones.SRV:
			// The catalog's names are lower-case; ToLower allocates only
			// when the query was not.
			fmt.Printf("%s: SRV of port %s/%s of %s/%s\n", q, strings.ToLower(n.Port), n.Proto, n.Namespace, n.Service)
		case zones.Service:
			fmt.Printf("%s: A/AAAA of %s/%s\n", q, n.Namespace, n.Service)
		case zones.Static:
			rrs, _ := zone.Static(q, dns.TypeA)
			fmt.Printf("%s: %d static record(s)\n", q, len(rrs))
		case zones.NotFound:
			fmt.Printf("%s: NXDOMAIN, SOA TTL %d\n", q, zone.SOA(1).Hdr.Ttl)
		case zones.OutsideZone:
			fmt.Printf("%s: REFUSED\n", q)
		}
	}
	// Output:
	// _HTTP._tcp.cart.shop.svc.cairn.internal.: SRV of port http/tcp of shop/cart
	// cart.shop.svc.cairn.internal.: A/AAAA of shop/cart
	// www.cairn.internal.: 1 static record(s)
	// nope.cairn.internal.: NXDOMAIN, SOA TTL 5
	// example.com.: REFUSED
}
