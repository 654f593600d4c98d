package zones

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// Zone is cairn's zone: the apex SOA and NS, the name servers' addresses,
// the static records, and the rules that classify a query name. It is
// immutable once New returns it, and safe for concurrent use; every slice
// of records it returns is shared with every other caller and must be
// treated as read-only.
type Zone struct {
	domain  string // canonical: lower-case, fully qualified
	body    string // domain without its root dot, as Classify compares it
	wireLen int    // domain's size on the wire, root included

	soa    dns.SOA // template: SOA copies it with the serial filled in
	negTTL uint32

	ns   []dns.RR
	glue []dns.RR

	// nodes holds every name of the zone outside the service tree that
	// exists: the apex, the static names, the in-zone name servers, and
	// the empty non-terminals above them. Keys are canonical names.
	nodes map[string]*node
}

// node is one name's records, by type. An empty non-terminal has none.
type node struct {
	sets  []rrset
	cname []dns.RR // set when the name is an alias; then sets is empty
}

type rrset struct {
	typ uint16
	rrs []dns.RR
}

func (nd *node) set(typ uint16) []dns.RR {
	for _, s := range nd.sets {
		if s.typ == typ {
			return s.rrs
		}
	}
	return nil
}

// New validates cfg, reads the static records it names, and builds the
// zone. Every rule broken is reported with an error wrapping ErrInvalid:
// a *FieldError for a Config field, a *RecordError for a static record.
// Failing to open or read StaticFile is an I/O error, not ErrInvalid.
func New(cfg Config) (*Zone, error) {
	cfg.setDefaults()
	z := &Zone{}
	domain, err := hostName("Domain", cfg.Domain)
	if err != nil {
		return nil, err
	}
	z.domain, z.body, z.wireLen = domain, domain[:len(domain)-1], len(domain)+1

	var ttls [5]uint32
	for i, f := range []struct {
		name string
		d    time.Duration
		max  time.Duration
	}{
		{"NSTTL", cfg.NSTTL, MaxTTL},
		{"Refresh", cfg.Refresh, MaxTTL},
		{"Retry", cfg.Retry, MaxTTL},
		{"Expire", cfg.Expire, MaxTTL},
		{"Minimum", cfg.Minimum, MaxMinimum},
	} {
		if ttls[i], err = seconds(f.name, f.d, f.max); err != nil {
			return nil, err
		}
	}
	nsTTL, refresh, retry, expire, minimum := ttls[0], ttls[1], ttls[2], ttls[3], ttls[4]
	if retry > refresh {
		return nil, fieldError("Retry", "%v is longer than Refresh (%v): a secondary retries a failed refresh sooner than it refreshes", cfg.Retry, cfg.Refresh)
	}
	if refresh > expire {
		return nil, fieldError("Expire", "%v is shorter than Refresh (%v): a secondary would expire the zone before refreshing it", cfg.Expire, cfg.Refresh)
	}
	z.negTTL = minimum

	var servers []nameServer
	seen := map[string]bool{}
	for i, s := range cfg.NS {
		field := "NS[" + strconv.Itoa(i) + "]"
		name, err := hostName(field, s)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fieldError(field, "%q is listed twice", s)
		}
		if z.underServiceTree(name) {
			return nil, fieldError(field, "%q is at or under %q, which belongs to services", s, z.serviceTree())
		}
		seen[name] = true
		servers = append(servers, nameServer{name: name, field: field})
	}

	var mname, rname string
	if cfg.MName != "" {
		if mname, err = hostName("MName", cfg.MName); err != nil {
			return nil, err
		}
	}
	if cfg.RName == "" {
		// Through the same check as a given name: a long domain can make
		// the default too long.
		rname, err = hostName("RName", "hostmaster."+domain)
	} else {
		rname, err = mailbox(cfg.RName)
	}
	if err != nil {
		return nil, err
	}

	b := newBuilder(z)
	if err := b.readStatic(cfg); err != nil {
		return nil, err
	}
	for _, s := range b.apexNS {
		if !seen[s.name] {
			seen[s.name] = true
			servers = append(servers, s)
		}
	}
	if len(servers) == 0 {
		name, err := hostName("NS", "ns."+domain)
		if err != nil {
			return nil, err
		}
		servers = []nameServer{{name: name, field: "NS"}}
	}
	if err := b.addNameServers(servers, cfg.NSAddrs, nsTTL); err != nil {
		return nil, err
	}
	if mname == "" {
		mname = servers[0].name
	}

	z.soa = dns.SOA{
		Hdr:     dns.RR_Header{Name: domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: minimum},
		Ns:      mname,
		Mbox:    rname,
		Refresh: refresh,
		Retry:   retry,
		Expire:  expire,
		Minttl:  minimum,
	}
	z.nodes = b.nodes
	return z, nil
}

// nameServer is a name server and where it was configured, for errors.
type nameServer struct {
	name  string
	field string // the Config field, or "" when it came from the static records
	// For a static record: where it is, and how its errors start.
	file, prefix string
	line         int
}

func (s nameServer) errorf(format string, args ...any) error {
	if s.field != "" {
		return fieldError(s.field, format, args...)
	}
	return &RecordError{File: s.file, Line: s.line, Rule: s.prefix + fmt.Sprintf(format, args...)}
}

// Domain returns the zone's apex, lower-case and fully qualified
// ("cairn.internal.").
func (z *Zone) Domain() string { return z.domain }

// NegativeTTL returns the TTL of a negative answer in seconds: the SOA's
// MINIMUM, which is also the SOA record's TTL (RFC 2308 §3).
func (z *Zone) NegativeTTL() uint32 { return z.negTTL }

// SOA returns the zone's SOA record with the given serial, for an SOA
// answer and for the authority section of every NODATA and NXDOMAIN. The
// serial is the store's revision (SPEC §3), which the caller reduces to
// 32 bits; serials compare in RFC 1982 arithmetic, so wrapping is
// harmless as long as it moves forward by less than 2^31 between two
// looks. The record is new: the caller may keep or change it.
func (z *Zone) SOA(serial uint32) *dns.SOA {
	soa := z.soa
	soa.Serial = serial
	return &soa
}

// NS returns the apex NS records, in the order of Config.NS followed by
// those the static records added. Shared: read-only.
func (z *Zone) NS() []dns.RR { return z.ns }

// Glue returns the A and AAAA records of the in-zone name servers, in NS
// order, for the additional section of an NS answer (RFC 1034 §4.3.2).
// Shared: read-only. The same records are answered by Static at the name
// servers' names.
func (z *Zone) Glue() []dns.RR { return z.glue }

// Static returns the records of type qtype that the zone holds at qname
// outside the service tree: the static records, the apex NS, and the
// in-zone name servers' addresses. exists is true when qname is such a
// name, or an empty non-terminal above one, and the caller then answers
// NODATA if rrs is empty; false means the zone holds nothing there (a
// service-tree name, or NXDOMAIN for a name Classify calls NotFound).
//
// qname is matched as Classify matches it: ASCII case-insensitively, a
// missing trailing dot allowed, without decoding escapes. The records'
// owner names are the zone's canonical lower-case names, not the
// query's case.
//
// rrs is shared with every other caller: treat it, and the records in
// it, as read-only; copy a record (dns.Copy) before changing it.
//
// At a name that holds a CNAME, Static returns the CNAME whatever qtype
// is, and does not follow it, even to a name in the zone: a target under
// svc.<domain> can only be answered from the catalog, so following
// aliases is the server's job (RFC 1034 §4.3.2 step 3a), done with
// Classify and Static on the target. qtype is matched exactly: ANY (RFC
// 8482) and SOA (Zone.SOA) are the caller's to answer.
func (z *Zone) Static(qname string, qtype uint16) (rrs []dns.RR, exists bool) {
	nd := z.lookup(qname, trimRoot(qname))
	if nd == nil {
		return nil, false
	}
	if nd.cname != nil {
		return nd.cname, true
	}
	return nd.set(qtype), true
}

// lookup finds qname's node. body is qname without its root dot. It
// does not allocate: the case-folded key is built on the stack, and Go
// looks a map up by string(bytes) without copying.
func (z *Zone) lookup(qname, body string) *node {
	if len(qname) == len(body)+1 && !hasUpper(qname) {
		return z.nodes[qname]
	}
	var buf [maxPresentation + 1]byte
	if len(body) >= len(buf) {
		return nil
	}
	for i := 0; i < len(body); i++ {
		buf[i] = toLower(body[i])
	}
	buf[len(body)] = '.'
	return z.nodes[string(buf[:len(body)+1])]
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// underServiceTree reports whether name ends in the label svc directly
// above the domain, whatever its other labels.
func (z *Zone) underServiceTree(name string) bool {
	tree := z.serviceTree()
	cut := len(name) - len(tree) - 1
	return name == tree || cut > 0 && name[cut+1:] == tree && name[cut] == '.' && !escaped(name, cut)
}

// serviceTree returns svc.<domain>.
func (z *Zone) serviceTree() string { return serviceTreeLabel + "." + z.domain }

// canonicalName returns name in the form miekg/dns unpacks it from the
// wire — escapes normalised, \DDD decoded where the octet is printable —
// with ASCII letters lower-cased, and whether name is a valid domain name
// at all. A static name in that form compares equal, as text, to every
// spelling of it a query can carry.
func canonicalName(name string) (string, bool) {
	var buf [maxNameOctets]byte
	n, err := dns.PackDomainName(dns.Fqdn(name), buf[:], 0, nil, false)
	if err != nil {
		return "", false
	}
	s, _, err := dns.UnpackDomainName(buf[:n], 0)
	if err != nil {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		b[i] = toLower(c)
	}
	return string(b), true
}

// addrRecord makes the A or AAAA record of a name server's address.
func addrRecord(name string, ttl uint32, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}
