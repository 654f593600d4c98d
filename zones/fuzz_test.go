package zones

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// fuzzStaticNames are the static names of the fuzzed zone, as a query
// would spell them. Escapes are there on purpose: \. must stay inside its
// label.
func fuzzStaticNames() []string {
	return []string{
		"www.cairn.internal.",
		"a.b.c.cairn.internal.",
		`a\.b.cairn.internal.`,
		`x\\.y.cairn.internal.`,
		"_sip._tcp.cairn.internal.",
		"ns.cairn.internal.",
		longName(255),
	}
}

// reference is a slow, obviously-correct Classify built on miekg/dns's
// own splitting (SplitDomainName) and wire packing (PackDomainName) and a
// regular expression for labels: a second implementation for the fuzzer
// to compare against, sharing no code with Classify.
type reference struct {
	zoneLabels []string
	static     map[string]bool // lower-case names and their ancestors in the zone
	label      *regexp.Regexp
}

func newReference(domain string, static []string) *reference {
	r := &reference{
		zoneLabels: dns.SplitDomainName(domain),
		static:     map[string]bool{},
		label:      regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`),
	}
	for _, name := range static {
		labels := dns.SplitDomainName(asciiLower(name))
		for i := 0; i < len(labels)-len(r.zoneLabels); i++ {
			r.static[strings.Join(labels[i:], ".")+"."] = true
		}
	}
	return r
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func (r *reference) isLabel(s string) bool { return r.label.MatchString(asciiLower(s)) }

func (r *reference) classify(q string) Name {
	if !dns.IsFqdn(q) {
		q += "."
	}
	labels := dns.SplitDomainName(q)
	k := len(labels) - len(r.zoneLabels)
	if k < 0 {
		return Name{Kind: OutsideZone}
	}
	for i, zl := range r.zoneLabels {
		if asciiLower(labels[k+i]) != zl {
			return Name{Kind: OutsideZone}
		}
	}
	var wire [maxNameOctets]byte
	if _, err := dns.PackDomainName(q, wire[:], 0, nil, false); err != nil {
		return Name{Kind: NotFound}
	}
	rest := labels[:k]
	switch {
	case k == 0:
		return Name{Kind: Apex}
	case asciiLower(rest[k-1]) != "svc":
		if r.static[asciiLower(q)] {
			return Name{Kind: Static}
		}
		return Name{Kind: NotFound}
	case k == 1:
		return Name{Kind: ServiceTree}
	}
	ns := rest[k-2]
	if !r.isLabel(ns) {
		return Name{Kind: NotFound}
	}
	if k == 2 {
		return Name{Kind: Namespace, Namespace: ns}
	}
	svc := rest[k-3]
	if !r.isLabel(svc) {
		return Name{Kind: NotFound}
	}
	if k == 3 {
		return Name{Kind: Service, Namespace: ns, Service: svc}
	}
	if p := asciiLower(rest[k-4]); p == "_tcp" || p == "_udp" {
		proto := rest[k-4][1:]
		if k == 4 {
			return Name{Kind: SRVProto, Namespace: ns, Service: svc, Proto: proto}
		}
		if k == 5 && strings.HasPrefix(rest[0], "_") && r.isLabel(rest[0][1:]) {
			return Name{Kind: SRV, Namespace: ns, Service: svc, Proto: proto, Port: rest[0][1:]}
		}
		return Name{Kind: NotFound}
	}
	if k == 4 && r.isLabel(rest[0]) {
		return Name{Kind: Instance, Namespace: ns, Service: svc, Instance: rest[0]}
	}
	return Name{Kind: NotFound}
}

// TestReferenceAgrees runs the reference over TestClassify's kind of
// names, so that a bug in the reference shows up without the fuzzer.
func TestReferenceAgrees(t *testing.T) {
	z, ref := fuzzZone(t)
	for _, q := range append(fuzzStaticNames(),
		"cairn.internal.", "_http._tcp.Cart.shop.svc.cairn.internal", `cart\.shop.svc.cairn.internal.`,
		"c1.cart.shop.svc.cairn.internal.", "xcairn.internal.", "b.c.cairn.internal.", "a.b.cairn.internal.",
		"", ".", "..", `\`, `\.`, "a..cairn.internal.", ".cairn.internal.", "f"+longName(255)) {
		if got, want := z.Classify(q), ref.classify(q); got != want {
			t.Errorf("Classify(%q) = %+v, reference says %+v", q, got, want)
		}
	}
}

func fuzzZone(t fataler) (*Zone, *reference) {
	var file strings.Builder
	for _, name := range fuzzStaticNames() {
		if name != "ns.cairn.internal." {
			file.WriteString(name + " TXT x\n")
		}
	}
	cfg := testConfig("")
	cfg.Static = strings.NewReader(file.String())
	return mustNew(t, cfg), newReference("cairn.internal.", fuzzStaticNames())
}

// FuzzClassify checks that Classify never panics and agrees with the
// reference on every string, and that Static agrees with it on which
// names exist. Its seeds are in testdata/fuzz/FuzzClassify.
func FuzzClassify(f *testing.F) {
	for _, q := range []string{
		"_http._tcp.cart.shop.svc.cairn.internal.",
		"Cart.Shop.SVC.cairn.internal",
		`a\.b.cairn.internal.`,
		`\099\\.svc.cairn.internal.`,
	} {
		f.Add(q)
	}
	z, ref := fuzzZone(f)
	f.Fuzz(func(t *testing.T, q string) {
		got, want := z.Classify(q), ref.classify(q)
		if got != want {
			t.Fatalf("Classify(%q) = %+v, reference says %+v", q, got, want)
		}
		_, exists := z.Static(q, dns.TypeTXT)
		if wantExists := got.Kind == Static || got.Kind == Apex; exists != wantExists {
			t.Fatalf("Static(%q) exists = %v, but Classify says %v", q, exists, got.Kind)
		}
	})
}

// FuzzParseZone feeds arbitrary static files to New: it must never
// panic, a file it rejects must be rejected with ErrInvalid and, for a
// rule (not syntax) error, a line inside the file; a file it accepts
// must give a zone whose every static name classifies as Static or Apex.
func FuzzParseZone(f *testing.F) {
	f.Add(testStatic)
	f.Add("$TTL 60\n@ NS ns2\nns2 A 192.0.2.2\n*.x A 192.0.2.1\n")
	f.Add("a CNAME b\na ( TXT\n \"x\" )\n$GENERATE 1-2 h$ A 192.0.2.$\n")
	f.Add("svc A 192.0.2.1")
	f.Fuzz(func(t *testing.T, file string) {
		cfg := testConfig("")
		cfg.Static = strings.NewReader(file)
		z, err := New(cfg)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			if re, ok := errors.AsType[*RecordError](err); ok && re.Err == nil {
				if lines := strings.Count(file, "\n") + 1; re.Line < 1 || re.Line > lines {
					t.Fatalf("error at line %d of a file of %d lines: %v", re.Line, lines, err)
				}
			}
			return
		}
		for name := range z.nodes {
			if k := z.Classify(name).Kind; k != Static && k != Apex {
				t.Fatalf("static name %q classifies as %v", name, k)
			}
		}
	})
}
