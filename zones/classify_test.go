package zones

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestClassify(t *testing.T) {
	z := mustNew(t, testConfig(longName(255)+" A 192.0.2.99\n"))
	l63, l64 := strings.Repeat("x", 63), strings.Repeat("x", 64)
	tests := []struct {
		name  string
		qname string
		want  Name
	}{
		// The apex and what is not in the zone.
		{"apex", "cairn.internal.", Name{Kind: Apex}},
		{"apex mixed case", "CAIRN.Internal.", Name{Kind: Apex}},
		{"apex without trailing dot", "cairn.internal", Name{Kind: Apex}},
		{"root", ".", Name{Kind: OutsideZone}},
		{"empty string is the root", "", Name{Kind: OutsideZone}},
		{"parent of the domain", "internal.", Name{Kind: OutsideZone}},
		{"other domain", "example.com.", Name{Kind: OutsideZone}},
		{"shares a suffix without a label boundary", "xcairn.internal.", Name{Kind: OutsideZone}},
		{"shares a suffix, service shape", "cart.shop.svc.xcairn.internal.", Name{Kind: OutsideZone}},
		{"domain as a prefix", "cairn.internal.com.", Name{Kind: OutsideZone}},
		{"escaped dot before the domain", `x\.cairn.internal.`, Name{Kind: OutsideZone}},
		{"escaped dot inside the domain", `svc.cairn\.internal.`, Name{Kind: OutsideZone}},
		{"escaped letter of the domain is not decoded", `\099airn.internal.`, Name{Kind: OutsideZone}},
		{"escaped backslash, then a real dot", `x\\.cairn.internal.`, Name{Kind: NotFound}},
		{"two trailing dots", "cairn.internal..", Name{Kind: OutsideZone}},
		{"dangling backslash", `x.cairn.internal\`, Name{Kind: OutsideZone}},
		{"escaped trailing dot", `cairn.internal\.`, Name{Kind: OutsideZone}},

		// The service tree.
		{"service tree", "svc.cairn.internal.", Name{Kind: ServiceTree}},
		{"service tree mixed case", "SvC.cairn.internal", Name{Kind: ServiceTree}},
		{"namespace", "shop.svc.cairn.internal.", Name{Kind: Namespace, Namespace: "shop"}},
		{"service", "cart.shop.svc.cairn.internal.", Name{Kind: Service, Namespace: "shop", Service: "cart"}},
		{"service keeps the query's case", "Cart.SHOP.Svc.Cairn.Internal.", Name{Kind: Service, Namespace: "SHOP", Service: "Cart"}},
		{"service without trailing dot", "cart.shop.svc.cairn.internal", Name{Kind: Service, Namespace: "shop", Service: "cart"}},
		{"srv proto tcp", "_tcp.cart.shop.svc.cairn.internal.", Name{Kind: SRVProto, Namespace: "shop", Service: "cart", Proto: "tcp"}},
		{"srv proto udp upper", "_UDP.cart.shop.svc.cairn.internal.", Name{Kind: SRVProto, Namespace: "shop", Service: "cart", Proto: "UDP"}},
		{"srv", "_http._tcp.cart.shop.svc.cairn.internal.", Name{Kind: SRV, Namespace: "shop", Service: "cart", Proto: "tcp", Port: "http"}},
		{"srv mixed case", "_gRPC-2._Udp.cart.shop.svc.cairn.internal.", Name{Kind: SRV, Namespace: "shop", Service: "cart", Proto: "Udp", Port: "gRPC-2"}},
		{"instance", "c1.cart.shop.svc.cairn.internal.", Name{Kind: Instance, Namespace: "shop", Service: "cart", Instance: "c1"}},
		{"instance digits and hyphens", "0-a-9.cart.shop.svc.cairn.internal.", Name{Kind: Instance, Namespace: "shop", Service: "cart", Instance: "0-a-9"}},
		{"63-character labels", l63 + "." + l63 + "." + l63 + ".svc.cairn.internal.", Name{Kind: Instance, Namespace: l63, Service: l63, Instance: l63}},

		// Under the service tree, but of no shape.
		{"below an instance", "x.c1.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"below an srv name", "x._http._tcp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"below an srv name, underscored", "_x._http._tcp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"other protocol", "_sctp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"port with other protocol", "_http._sctp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"port without protocol", "_http.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"port without underscore", "http._tcp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"bare underscore port", "_._tcp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"port with leading hyphen", "_-x._tcp.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"tcp without underscore", "tcp.cart.shop.svc.cairn.internal.", Name{Kind: Instance, Namespace: "shop", Service: "cart", Instance: "tcp"}},
		{"namespace with leading hyphen", "-shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"namespace with trailing hyphen", "shop-.svc.cairn.internal.", Name{Kind: NotFound}},
		{"namespace with underscore", "sh_op.svc.cairn.internal.", Name{Kind: NotFound}},
		{"namespace of 64 characters", l64 + ".svc.cairn.internal.", Name{Kind: NotFound}},
		{"service with a non-ASCII octet", `caf\195\169.shop.svc.cairn.internal.`, Name{Kind: NotFound}},
		{"instance with underscore", "c_1.cart.shop.svc.cairn.internal.", Name{Kind: NotFound}},
		{"escaped dot is not a separator", `cart\.shop.svc.cairn.internal.`, Name{Kind: NotFound}},
		{"escaped dot in the instance", `c1\.cart.shop.svc.cairn.internal.`, Name{Kind: NotFound}},
		{"escaped dot after svc", `svc\.cairn.internal.`, Name{Kind: OutsideZone}},
		{"escaped letter is not decoded", `\099art.shop.svc.cairn.internal.`, Name{Kind: NotFound}},
		{"svc as a deeper label only", "svc.shop.cairn.internal.", Name{Kind: NotFound}},

		// Static names and the rest of the zone.
		{"static", "www.cairn.internal.", Name{Kind: Static}},
		{"static mixed case, no dot", "WwW.Cairn.Internal", Name{Kind: Static}},
		{"static empty non-terminal", "b.c.cairn.internal.", Name{Kind: Static}},
		{"static empty non-terminal, top", "c.cairn.internal.", Name{Kind: Static}},
		{"static deepest", "a.b.c.cairn.internal.", Name{Kind: Static}},
		{"static alias", "alias.cairn.internal.", Name{Kind: Static}},
		{"static with escaped dot", `a\.b.cairn.internal.`, Name{Kind: Static}},
		{"escaped-dot label is not two labels", "a.b.cairn.internal.", Name{Kind: NotFound}},
		{"static written with an escape in the file", "abc.cairn.internal.", Name{Kind: Static}},
		{"static underscored", "_sip._tcp.cairn.internal.", Name{Kind: Static}},
		{"static underscored ENT", "_tcp.cairn.internal.", Name{Kind: Static}},
		{"name server", "ns.cairn.internal.", Name{Kind: Static}},
		{"absent", "nope.cairn.internal.", Name{Kind: NotFound}},
		{"below a static name", "x.www.cairn.internal.", Name{Kind: NotFound}},

		// Malformed and oversized names in the zone.
		{"empty label", "a..cairn.internal.", Name{Kind: NotFound}},
		{"leading dot", ".cairn.internal.", Name{Kind: NotFound}},
		{"two leading dots", "..cairn.internal.", Name{Kind: NotFound}},
		{"label of 64 octets", l64 + ".cairn.internal.", Name{Kind: NotFound}},
		{"label of 64 octets by escapes", `\120` + l63 + ".cairn.internal.", Name{Kind: NotFound}},
		{"name of 255 octets", longName(255), Name{Kind: Static}},
		{"name of 255 octets, upper case", strings.ToUpper(longName(255)), Name{Kind: Static}},
		{"name of 256 octets", "f" + longName(255), Name{Kind: NotFound}},
		{"too many labels", strings.Repeat("a.", 128) + "svc.cairn.internal.", Name{Kind: NotFound}},
		{"dangling backslash in a label", `x\`, Name{Kind: OutsideZone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := z.Classify(tt.qname); got != tt.want {
				t.Errorf("Classify(%q) = %+v, want %+v", tt.qname, got, tt.want)
			}
		})
	}
}

// TestClassifyLabelsAreSubstrings checks the promise that lets the caller
// keep using the labels without copies: they point into qname.
func TestClassifyLabelsAreSubstrings(t *testing.T) {
	z := mustNew(t, testConfig(""))
	q := "_Http._TCP.Cart.Shop.svc.cairn.internal."
	n := z.Classify(q)
	for _, s := range []string{n.Port, n.Proto, n.Service, n.Namespace} {
		if !strings.Contains(q, s) || s == "" {
			t.Errorf("label %q is not a substring of %q", s, q)
		}
	}
	if strings.ToLower(n.Service) != "cart" {
		t.Errorf("Service = %q", n.Service)
	}
}

// TestClassifyOtherDomain checks that the zone's own domain, not the
// default, decides, and that a Domain given in upper case without a dot
// is canonicalised.
func TestClassifyOtherDomain(t *testing.T) {
	z := mustNew(t, Config{Domain: "SD.Example.COM", NS: []string{"ns1.example.net"}})
	if got := z.Domain(); got != "sd.example.com." {
		t.Fatalf("Domain() = %q", got)
	}
	for q, want := range map[string]Kind{
		"cart.shop.svc.sd.example.com.":    Service,
		"cart.shop.svc.cairn.internal.":    OutsideZone,
		"sd.example.com":                   Apex,
		"svc.SD.example.com.":              ServiceTree,
		"example.com.":                     OutsideZone,
		"ns1.example.net.":                 OutsideZone,
		"www.sd.example.com.":              NotFound,
		"c1.cart.shop.svc.sd.example.com.": Instance,
	} {
		if got := z.Classify(q).Kind; got != want {
			t.Errorf("Classify(%q).Kind = %v, want %v", q, got, want)
		}
	}
}

// TestClassifyRoundTrip is a property: any name built from valid labels,
// in any case, classifies to its shape with its labels intact.
func TestClassifyRoundTrip(t *testing.T) {
	z := mustNew(t, testConfig(""))
	label := rapid.StringMatching(`[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?`)
	// A port's label is "_" and its name: a name of 63 characters makes
	// a label of 64, which no DNS name holds (NotFound, as TestClassify
	// has it); the property is about names that can be asked.
	portLabel := rapid.StringMatching(`[a-zA-Z0-9]([a-zA-Z0-9-]{0,60}[a-zA-Z0-9])?`)
	rapid.Check(t, func(t *rapid.T) {
		ns, svc, inst, port := label.Draw(t, "ns"), label.Draw(t, "svc"), label.Draw(t, "instance"), portLabel.Draw(t, "port")
		proto := rapid.SampledFrom([]string{"tcp", "udp", "TCP", "Udp"}).Draw(t, "proto")
		domain := rapid.SampledFrom([]string{"svc.cairn.internal.", "SVC.Cairn.Internal", "svc.cairn.internal"}).Draw(t, "domain")
		cases := map[string]Name{
			ns + "." + domain:                                               {Kind: Namespace, Namespace: ns},
			svc + "." + ns + "." + domain:                                   {Kind: Service, Namespace: ns, Service: svc},
			inst + "." + svc + "." + ns + "." + domain:                      {Kind: Instance, Namespace: ns, Service: svc, Instance: inst},
			"_" + proto + "." + svc + "." + ns + "." + domain:               {Kind: SRVProto, Namespace: ns, Service: svc, Proto: proto},
			"_" + port + "._" + proto + "." + svc + "." + ns + "." + domain: {Kind: SRV, Namespace: ns, Service: svc, Proto: proto, Port: port},
		}
		for q, want := range cases {
			if len(q) > 250 { // over the name limit: NotFound, covered by TestClassify
				continue
			}
			if got := z.Classify(q); got != want {
				t.Fatalf("Classify(%q) = %+v, want %+v", q, got, want)
			}
		}
	})
}

func TestKindString(t *testing.T) {
	for k := OutsideZone; k <= NotFound; k++ {
		if s := k.String(); s == "" || strings.HasPrefix(s, "Kind(") {
			t.Errorf("Kind %d has no name", k)
		}
	}
	if s := Kind(200).String(); s != "Kind(200)" {
		t.Errorf("Kind(200).String() = %q", s)
	}
}

// classifyCases are the names the allocation test and the benchmark use:
// the hot path (every query) for each shape.
func classifyCases() []struct{ name, qname string } {
	return []struct{ name, qname string }{
		{"service", "checkout.payments.svc.cairn.internal."},
		{"service/mixed-case", "Checkout.Payments.SVC.Cairn.Internal."},
		{"srv", "_grpc._tcp.checkout.payments.svc.cairn.internal."},
		{"instance", "checkout-7f9c4-x2x8p.checkout.payments.svc.cairn.internal."},
		{"apex", "cairn.internal."},
		{"static", "www.cairn.internal."},
		{"static/mixed-case-no-dot", "WWW.Cairn.Internal"},
		{"notfound", "nope.cairn.internal."},
		{"outside", "www.example.com."},
	}
}

func TestClassifyDoesNotAllocate(t *testing.T) {
	z := mustNew(t, testConfig(""))
	for _, c := range classifyCases() {
		if n := testing.AllocsPerRun(100, func() { z.Classify(c.qname) }); n != 0 {
			t.Errorf("Classify(%q) allocates %v times", c.qname, n)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	z := mustNew(b, testConfig(""))
	for _, c := range classifyCases() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				z.Classify(c.qname)
			}
		})
	}
}

func BenchmarkStatic(b *testing.B) {
	z := mustNew(b, testConfig(""))
	for _, q := range []string{"www.cairn.internal.", "WWW.Cairn.Internal."} {
		b.Run(q, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				z.Static(q, 1)
			}
		})
	}
}
