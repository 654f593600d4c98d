package zones

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// builder collects the names of the zone outside the service tree while
// New reads the static records and adds the name servers' addresses.
type builder struct {
	z     *Zone
	nodes map[string]*node
	// lines holds the line each RRset started on, for the messages of the
	// records that conflict with it.
	lines  map[setKey]int
	file   string
	apexNS []nameServer
}

type setKey struct {
	name string
	typ  uint16
}

func newBuilder(z *Zone) *builder {
	return &builder{
		z:     z,
		nodes: map[string]*node{z.domain: {}},
		lines: map[setKey]int{},
	}
}

// readStatic parses and checks the static records cfg names.
func (b *builder) readStatic(cfg Config) error {
	var r io.Reader
	switch {
	case cfg.StaticFile != "" && cfg.Static != nil:
		return fieldError("Static", "give StaticFile or Static, not both")
	case cfg.StaticFile != "":
		f, err := os.Open(cfg.StaticFile)
		if err != nil {
			return fmt.Errorf("zones: opening static records: %w", err)
		}
		defer f.Close()
		r, b.file = f, cfg.StaticFile
	case cfg.Static != nil:
		r, b.file = cfg.Static, staticLabel
	default:
		return nil
	}

	lr := newLineReader(r)
	zp := dns.NewZoneParser(lr, b.z.domain, b.file)
	zp.SetDefaultTTL(uint32(DefaultStaticTTL / time.Second))
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if err := b.addStatic(rr, lr.recordLine()); err != nil {
			return err
		}
		lr.nextRecord()
	}
	if err := zp.Err(); err != nil {
		if _, ok := errors.AsType[*dns.ParseError](err); ok {
			return &RecordError{File: b.file, Err: err}
		}
		return fmt.Errorf("zones: reading static records %q: %w", b.file, err)
	}
	return nil
}

// addStatic checks one static record against the rules of the zone and
// adds it.
func (b *builder) addStatic(rr dns.RR, line int) error {
	h := rr.Header()
	// Messages quote the name as the file spelled it (with $ORIGIN
	// applied), not in its canonical form.
	prefix := fmt.Sprintf("%q %s: ", h.Name, typeString(h.Rrtype))
	fail := func(format string, args ...any) error {
		return &RecordError{File: b.file, Line: line, Rule: prefix + fmt.Sprintf(format, args...)}
	}
	name, ok := canonicalName(h.Name)
	if !ok {
		return fail("not a valid domain name")
	}
	h.Name = name

	if h.Class != dns.ClassINET {
		return fail("class %s is not supported; cairn serves class IN only", classString(h.Class))
	}
	if b.z.Classify(name).Kind == OutsideZone {
		return fail("the name is outside the zone %q", b.z.domain)
	}
	if b.z.underServiceTree(name) {
		return fail("names at or under %q belong to services", b.z.serviceTree())
	}
	if off, _ := dns.NextLabel(name, 0); name[:off] == "*." {
		return fail("wildcard names are not supported; list each name")
	}

	switch h.Rrtype {
	case dns.TypeSOA:
		return fail("the zone makes its own SOA from its configuration")
	case dns.TypeNS:
		if name != b.z.domain {
			return fail("an NS record below the apex would delegate %q; cairn is authoritative only and gives no referrals", name)
		}
		target, err := hostName("NS", rr.(*dns.NS).Ns)
		if err != nil {
			return fail("the name server %q is not a valid host name", rr.(*dns.NS).Ns)
		}
		if b.z.underServiceTree(target) {
			return fail("the name server %q is at or under %q, which belongs to services", target, b.z.serviceTree())
		}
		// The apex NS RRset is built by New, from Config.NS and these.
		b.apexNS = append(b.apexNS, nameServer{name: target, file: b.file, prefix: prefix, line: line})
		return nil
	case dns.TypeDNAME:
		return fail("DNAME is not supported")
	case dns.TypeCNAME:
		if name == b.z.domain {
			return fail("a CNAME at the apex is not allowed: the apex holds the SOA and NS (RFC 1034 §3.6.2)")
		}
	case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeNSEC3PARAM, dns.TypeDNSKEY,
		dns.TypeDS, dns.TypeCDS, dns.TypeCDNSKEY, dns.TypeKEY, dns.TypeSIG:
		return fail("cairn does not sign the zone, so it serves no DNSSEC records")
	}
	// The generic syntax (RFC 3597, "TYPE250 \# 0") can spell any type;
	// the query and meta types are not data (RFC 6895 §3.1).
	if t := h.Rrtype; t == 0 || t == dns.TypeOPT || t >= 128 && t <= 255 {
		return fail("a query or meta type is not zone data (RFC 6895 §3.1)")
	}

	key := setKey{name, h.Rrtype}
	nd := b.node(name)
	if nd.cname != nil {
		first := b.lines[setKey{name, dns.TypeCNAME}]
		if h.Rrtype == dns.TypeCNAME {
			if dns.IsDuplicate(nd.cname[0], rr) {
				return nil
			}
			return fail("a name holds at most one CNAME (RFC 2181 §10.1); the first is at line %d", first)
		}
		return fail("the name is an alias (CNAME at line %d) and can hold no other data (RFC 1034 §3.6.2)", first)
	}
	if h.Rrtype == dns.TypeCNAME {
		if len(nd.sets) > 0 {
			other := nd.sets[0].typ
			return fail("a CNAME cannot stand beside other data; the name has %s at line %d (RFC 1034 §3.6.2)", typeString(other), b.lines[setKey{name, other}])
		}
		nd.cname = []dns.RR{rr}
		b.lines[key] = line
		return nil
	}
	for i := range nd.sets {
		s := &nd.sets[i]
		if s.typ != h.Rrtype {
			continue
		}
		for _, have := range s.rrs {
			if dns.IsDuplicate(have, rr) {
				return nil // RFC 2181 §5: an RRset holds each record once
			}
		}
		if ttl := s.rrs[0].Header().Ttl; ttl != h.Ttl {
			return fail("TTL %d differs from TTL %d of the same RRset at line %d (RFC 2181 §5.2)", h.Ttl, ttl, b.lines[key])
		}
		s.rrs = append(s.rrs, rr)
		return nil
	}
	nd.sets = append(nd.sets, rrset{typ: h.Rrtype, rrs: []dns.RR{rr}})
	b.lines[key] = line
	return nil
}

// node returns name's node, creating it and the empty non-terminals
// between it and the apex. name is canonical and in the zone.
func (b *builder) node(name string) *node {
	if nd, ok := b.nodes[name]; ok {
		return nd
	}
	nd := &node{}
	b.nodes[name] = nd
	for parent := name; ; {
		off, end := dns.NextLabel(parent, 0)
		if end {
			break
		}
		parent = parent[off:]
		if _, ok := b.nodes[parent]; ok {
			break // every node's ancestors exist already, the apex's included
		}
		b.nodes[parent] = &node{}
	}
	return nd
}

// addNameServers builds the apex NS RRset and the name servers'
// addresses: from NSAddrs, or from the static records, for every name
// server in the zone.
func (b *builder) addNameServers(servers []nameServer, addrs map[string][]netip.Addr, ttl uint32) error {
	z := b.z
	given := map[string][]netip.Addr{}
	keys := make([]string, 0, len(addrs))
	for k := range addrs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same error every time
	for _, k := range keys {
		field := "NSAddrs[" + strconv.Quote(k) + "]"
		name, err := hostName(field, k)
		if err != nil {
			return err
		}
		if _, dup := given[name]; dup {
			return fieldError(field, "%q is given twice, in different spellings", name)
		}
		if !slices.ContainsFunc(servers, func(s nameServer) bool { return s.name == name }) {
			return fieldError(field, "%q is not one of the name servers", name)
		}
		if z.Classify(name).Kind == OutsideZone {
			return fieldError(field, "%q is outside the zone; cairn is not authoritative for its addresses and serves none", name)
		}
		var list []netip.Addr
		for i, a := range addrs[k] {
			if !a.IsValid() || a.Zone() != "" {
				return fieldError(field+"["+strconv.Itoa(i)+"]", "%q is not an IPv4 or IPv6 address without a zone", a.String())
			}
			if a = a.Unmap(); !slices.Contains(list, a) {
				list = append(list, a)
			}
		}
		if len(list) == 0 {
			return fieldError(field, "lists no address")
		}
		given[name] = list
	}

	apex := b.nodes[z.domain]
	for _, s := range servers {
		z.ns = append(z.ns, &dns.NS{Hdr: dns.RR_Header{Name: z.domain, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}, Ns: s.name})
		if z.Classify(s.name).Kind == OutsideZone {
			continue
		}
		nd := b.node(s.name)
		if nd.cname != nil {
			return s.errorf("%q is an alias (CNAME at %s:%d); a name server's name must not be (RFC 2181 §10.3)", s.name, b.file, b.lines[setKey{s.name, dns.TypeCNAME}])
		}
		static := len(nd.set(dns.TypeA)) + len(nd.set(dns.TypeAAAA))
		list := given[s.name]
		switch {
		case static > 0 && len(list) > 0:
			return fieldError("NSAddrs["+strconv.Quote(s.name)+"]", "the addresses of %q are also given by A/AAAA records in the static records (%s); give them in one place", s.name, b.file)
		case static == 0 && len(list) == 0:
			return s.errorf("the name server %q is in the zone but has no address: give one in NSAddrs or as an A/AAAA record in the static records", s.name)
		}
		for _, typ := range []uint16{dns.TypeA, dns.TypeAAAA} {
			var rrs []dns.RR
			for _, a := range list {
				if rr := addrRecord(s.name, ttl, a); rr.Header().Rrtype == typ {
					rrs = append(rrs, rr)
				}
			}
			if len(rrs) > 0 {
				nd.sets = append(nd.sets, rrset{typ: typ, rrs: rrs})
			}
			z.glue = append(z.glue, nd.set(typ)...)
		}
	}
	apex.sets = append(apex.sets, rrset{typ: dns.TypeNS, rrs: z.ns})
	return nil
}

func typeString(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

func classString(c uint16) string {
	if s, ok := dns.ClassToString[c]; ok {
		return s
	}
	return "CLASS" + strconv.Itoa(int(c))
}

// lineReader counts the lines the zone parser reads, so that an error
// about a record that parsed can say where it is: the parser reports
// lines only for syntax errors. The parser reads one byte at a time
// through ReadByte, and a record ends at its newline, which it consumes
// before returning the record; so between two records, the reader knows
// where the next one starts: at its first byte that is not blank, not in
// a comment and not in a directive ($TTL, $ORIGIN). Records that a
// $GENERATE directive makes start at its line.
type lineReader struct {
	r    *bufio.Reader
	line int // of the next byte

	seeking   bool // the current record's first byte has not been read
	skipping  bool // in a comment or a directive, to the end of the line
	start     int  // line of the current record's first byte
	directive int  // line of the last directive read while seeking
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReader(r), line: 1, seeking: true}
}

// ReadByte is what the parser reads with: it uses an io.ByteReader as
// it is, without a buffer of its own that would read ahead.
func (l *lineReader) ReadByte() (byte, error) {
	c, err := l.r.ReadByte()
	if err != nil {
		return c, err
	}
	if l.seeking {
		l.seek(c)
	}
	if c == '\n' {
		l.line++
	}
	return c, nil
}

// Read reads one byte, so that line counts stay exact should the parser
// ever read through Read.
func (l *lineReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c, err := l.ReadByte()
	if err != nil {
		return 0, err
	}
	p[0] = c
	return 1, nil
}

func (l *lineReader) seek(c byte) {
	switch {
	case l.skipping:
		l.skipping = c != '\n'
	case c == ' ' || c == '\t' || c == '\r' || c == '\n':
	case c == ';':
		l.skipping = true
	case c == '$':
		l.skipping = true
		l.directive = l.line
	default:
		l.seeking = false
		l.start = l.line
	}
}

// recordLine is the line the record the parser just returned starts on.
func (l *lineReader) recordLine() int {
	if l.seeking {
		return l.directive // made by $GENERATE: no byte of its own
	}
	return l.start
}

// nextRecord starts looking for the next record's first byte.
func (l *lineReader) nextRecord() {
	l.seeking, l.skipping = true, false
}
