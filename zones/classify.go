package zones

import (
	"strconv"

	"github.com/cairn-sd/cairn/internal/dnsname"
)

// Kind is where a query name lies in the zone. Classify decides it from
// the name's text alone; whether the namespace, service, port or instance
// it names exists is the caller's question (its catalog), and each Kind's
// comment says exactly what to check to choose between an answer,
// NOERROR/NODATA and NXDOMAIN (SPEC §3). Every NODATA and NXDOMAIN carries
// SOA(serial) in the authority section, with NegativeTTL as its TTL.
type Kind uint8

const (
	// OutsideZone: the name is not the domain or under it (the root
	// included). Answer REFUSED: cairn is authoritative only.
	OutsideZone Kind = iota
	// Apex: the domain itself. It always exists. SOA is answered from
	// Zone.SOA, every other type from Zone.Static (NS always; A, AAAA, TXT…
	// when the static records or NSAddrs put some at the apex); no records
	// of the type is NODATA.
	Apex
	// ServiceTree: svc.<domain>, the empty non-terminal above every
	// namespace. It always exists, even with no service defined, so every
	// type is NODATA (see doc.go for why it is never NXDOMAIN).
	ServiceTree
	// Namespace: <ns>.svc.<domain>, an empty non-terminal. NODATA for every
	// type if the catalog has at least one service in Name.Namespace, else
	// NXDOMAIN.
	Namespace
	// Service: <svc>.<ns>.svc.<domain>. If the service is defined: A and
	// AAAA are answered from its eligible endpoints (NODATA when there are
	// none, SPEC §3, "a service with zero registered instances is a
	// first-class answer"), every other type is NODATA. An undefined
	// service is NXDOMAIN.
	Service
	// SRVProto: _<tcp|udp>.<svc>.<ns>.svc.<domain>, an empty non-terminal.
	// NODATA for every type if the service is defined and has at least one
	// port of protocol Name.Proto, else NXDOMAIN.
	SRVProto
	// SRV: _<port>._<tcp|udp>.<svc>.<ns>.svc.<domain>. If the service has a
	// port named Name.Port whose protocol is Name.Proto: SRV is answered
	// (NODATA with no eligible endpoint), every other type is NODATA.
	// Otherwise (no such service, no such port, or the port has the other
	// protocol) NXDOMAIN.
	SRV
	// Instance: <instance>.<svc>.<ns>.svc.<domain>. The name exists while
	// the instance Name.Instance is registered in that service and not
	// terminated (SPEC §3): A and AAAA from its addresses, other types
	// NODATA. Otherwise NXDOMAIN. (Whether a draining instance's name
	// still gives its addresses or NODATA is the server's policy — SPEC §2
	// says DNS stops returning it — but the name exists either way.)
	Instance
	// Static: a name outside the service tree that holds static records or
	// is an empty non-terminal above some. It exists: answer from
	// Zone.Static, NODATA when it returns no records.
	Static
	// NotFound: in the zone, but no name of the zone can have it: under
	// svc.<domain> but not of a shape above (too deep, a label that is not
	// a DNS label, a protocol other than _tcp and _udp), or outside the
	// service tree and not a static name, or not a valid name at all (an
	// empty label, a label over 63 octets, a name over 255). NXDOMAIN.
	NotFound
)

var kindNames = [...]string{
	OutsideZone: "OutsideZone",
	Apex:        "Apex",
	ServiceTree: "ServiceTree",
	Namespace:   "Namespace",
	Service:     "Service",
	SRVProto:    "SRVProto",
	SRV:         "SRV",
	Instance:    "Instance",
	Static:      "Static",
	NotFound:    "NotFound",
}

// String returns the Kind's name, as "SRVProto".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Name is what Classify found in a query name: its Kind, and the labels
// that Kind names. A field the Kind does not name is empty.
//
// The labels are substrings of the query name, in the query's case:
// Classify neither copies nor lower-cases them (the question section must
// echo the query's case, and not copying keeps Classify free of
// allocation). The catalog's names are lower-case (SPEC §1), so the caller
// compares with strings.EqualFold, or calls strings.ToLower, which returns
// its argument without allocating when it is already lower-case. The
// labels are otherwise valid SPEC §1 labels: [A-Za-z0-9-], 1–63
// characters, no leading or trailing '-'.
type Name struct {
	Kind Kind
	// Namespace is set for Namespace, Service, SRVProto, SRV and Instance.
	Namespace string
	// Service is set for Service, SRVProto, SRV and Instance.
	Service string
	// Proto is the protocol without its underscore, "tcp" or "udp" in any
	// case, for SRVProto and SRV.
	Proto string
	// Port is the port's name without its underscore, for SRV.
	Port string
	// Instance is the instance id, for Instance.
	Instance string
}

// Limits of a name on the wire (RFC 1035 §2.3.4).
const (
	maxLabelOctets = dnsname.MaxLabel
	maxNameOctets  = 255
	// maxLabels is the most labels a valid name can have besides the
	// root: 127 one-octet labels take 254 octets, the root the 255th.
	maxLabels = 127
	// maxPresentation bounds the text of a valid name: every octet of a
	// label may be written \DDD, four characters for one octet.
	maxPresentation = 4 * maxNameOctets
)

// keptLabels is how many labels below the domain Classify keeps: more
// than the deepest shape (SRV, five), a power of two for a cheap modulo.
const keptLabels = 8

// span is a label of a name: name[start:end].
type span struct{ start, end uint16 }

// Classify says where qname lies in the zone (see Kind) and which
// namespace, service, port, protocol or instance it names. It is the
// first step of every query and does not allocate.
//
// qname is a name in presentation format, as miekg/dns unpacks it from
// the wire: special characters escaped (\. for a dot inside a label,
// \DDD for a non-printable octet), letters, digits and '-' never escaped.
// Names are compared as text, ASCII letters case-insensitively, without
// decoding escapes: a label such as "sv\099" is not "svc", which is
// exact for names that came from the wire. A name without a trailing dot
// is taken as fully qualified ("cart.shop.svc.cairn.internal" is
// "cart.shop.svc.cairn.internal."): the wire has no relative names, and
// an API or test caller that drops the dot means the same name.
//
// Classify is safe for concurrent use.
func (z *Zone) Classify(qname string) Name {
	body := trimRoot(qname)
	zb := z.body
	if len(body) < len(zb) || !foldEqual(body[len(body)-len(zb):], zb) {
		return Name{Kind: OutsideZone}
	}
	if len(body) == len(zb) {
		return Name{Kind: Apex}
	}
	// The character before the domain must be an unescaped dot:
	// "xcairn.internal." and "x\.cairn.internal." are outside the zone.
	cut := len(body) - len(zb) - 1
	if body[cut] != '.' || escaped(body, cut) {
		return Name{Kind: OutsideZone}
	}
	prefix := body[:cut]
	var labels [keptLabels]span
	n, octets, ok := splitLabels(prefix, &labels)
	if !ok || octets+z.wireLen > maxNameOctets {
		return Name{Kind: NotFound}
	}
	// Only the last keptLabels labels are kept, and only they are read:
	// no shape has more than five.
	label := func(i int) string { s := labels[i%keptLabels]; return prefix[s.start:s.end] }

	if !foldEqual(label(n-1), serviceTreeLabel) {
		if z.lookup(qname, body) != nil {
			return Name{Kind: Static}
		}
		return Name{Kind: NotFound}
	}
	if n == 1 {
		return Name{Kind: ServiceTree}
	}
	ns := label(n - 2)
	if !dnsname.IsLabelFold(ns) {
		return Name{Kind: NotFound}
	}
	if n == 2 {
		return Name{Kind: Namespace, Namespace: ns}
	}
	svc := label(n - 3)
	if !dnsname.IsLabelFold(svc) {
		return Name{Kind: NotFound}
	}
	if n == 3 {
		return Name{Kind: Service, Namespace: ns, Service: svc}
	}
	fourth := label(n - 4)
	switch {
	case foldEqual(fourth, "_tcp") || foldEqual(fourth, "_udp"):
		proto := fourth[1:]
		switch n {
		case 4:
			return Name{Kind: SRVProto, Namespace: ns, Service: svc, Proto: proto}
		case 5:
			port := label(0)
			if len(port) > 1 && port[0] == '_' && dnsname.IsLabelFold(port[1:]) {
				return Name{Kind: SRV, Namespace: ns, Service: svc, Proto: proto, Port: port[1:]}
			}
		}
	case n == 4 && dnsname.IsLabelFold(fourth):
		return Name{Kind: Instance, Namespace: ns, Service: svc, Instance: fourth}
	}
	return Name{Kind: NotFound}
}

// serviceTreeLabel is the label under the domain that services own.
const serviceTreeLabel = "svc"

// trimRoot returns name without its trailing root dot, if it has one. An
// escaped final dot ("a\.") is part of the last label, not the root.
func trimRoot(name string) string {
	if n := len(name); n > 0 && name[n-1] == '.' && !escaped(name, n-1) {
		return name[:n-1]
	}
	return name
}

// escaped reports whether s[i] is escaped: preceded by an odd run of
// backslashes. (A run of backslashes is a sequence of "\\" pairs,
// possibly followed by the backslash that escapes s[i]: no escape inside
// a \DDD contains a backslash.)
func escaped(s string, i int) bool {
	j := i - 1
	for j >= 0 && s[j] == '\\' {
		j--
	}
	return (i-1-j)%2 == 1
}

// splitLabels cuts name, which has no root dot, into its labels, and
// keeps the last len(labels) of them: label i (counting from the left) is
// labels[i%len(labels)] for the last ones. It reports false for a name
// that would not pack into a message: an empty label, a label over 63
// octets, more than maxLabels labels, or a dangling backslash. octets is
// the labels' size on the wire (a length octet and the label's octets
// each), without the root.
func splitLabels(name string, labels *[keptLabels]span) (n, octets int, ok bool) {
	if len(name) > maxPresentation {
		return 0, 0, false
	}
	// One pass; extra counts the characters of escapes beyond the one
	// octet each stands for, so a label is i-start-extra octets.
	start, extra := 0, 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) {
			switch name[i] {
			default:
				continue
			case '\\':
				switch {
				case i+3 < len(name) && isDigit(name[i+1]) && isDigit(name[i+2]) && isDigit(name[i+3]):
					i += 3 // \DDD is one octet
					extra += 3
				case i+1 < len(name):
					i++ // \X is X
					extra++
				default:
					return 0, 0, false
				}
				continue
			case '.':
			}
		}
		// A dot, or the end of the name: the end of a label.
		size := i - start - extra
		if size == 0 || size > maxLabelOctets || n == maxLabels {
			return 0, 0, false
		}
		labels[n%keptLabels] = span{uint16(start), uint16(i)}
		n++
		octets += 1 + size
		start, extra = i+1, 0
	}
	return n, octets, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// foldEqual reports whether s equals lower, a lower-case string, when the
// ASCII letters of s are folded to lower case. Only ASCII folds: DNS
// compares names octet by octet, ASCII letters case-insensitively
// (RFC 4343), so strings.EqualFold's Unicode folding ("K" for "k") would
// be wrong.
func foldEqual(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if toLower(s[i]) != lower[i] {
			return false
		}
	}
	return true
}

func toLower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
