package dnsserver

import (
	"encoding/binary"
	"net/netip"

	"github.com/miekg/dns"
)

// Header flag bits (RFC 1035 §4.1.1).
const (
	flagQR = 1 << 15
	flagAA = 1 << 10
	flagTC = 1 << 9
	flagRD = 1 << 8
	flagCD = 1 << 4

	headerLen = 12
	// qnamePtr is a compression pointer to the question name, which
	// always starts right after the header.
	qnamePtr = 0xC000 | headerLen
)

// msg is a response being written straight in wire format: the header,
// the question copied from the query (its case preserved), then records.
// It holds one buffer from the server's pool; nothing else is allocated.
//
// Records are added section by section (answer, authority, additional).
// A record that does not fit in limit − reserve is not added: the caller
// decides between truncation (TC, for required data) and omission (for
// additional data). reserve keeps room for the OPT record.
type msg struct {
	buf     []byte
	off     int
	limit   int
	reserve int
	qend    int // end of the question
	an, ns  uint16
	ar      uint16
	flags   uint16
}

// start writes the header and question. The query's id and its RD and
// CD bits are echoed; opcode 0; AA set. The question is the query's own
// bytes when the fast path parsed it, else packed from its name.
func (m *msg) start(buf []byte, req *request, qflags uint16, limit int) bool {
	m.buf, m.limit, m.reserve = buf[:cap(buf)], limit, 0
	m.an, m.ns, m.ar = 0, 0, 0
	m.flags = flagQR | flagAA | qflags&(flagRD|flagCD)
	binary.BigEndian.PutUint16(m.buf[0:], req.id)
	clear(m.buf[2:headerLen])
	off := headerLen
	if req.rawQ != nil {
		if headerLen+len(req.rawQ) > limit {
			return false
		}
		off += copy(m.buf[headerLen:], req.rawQ)
	} else {
		o, err := dns.PackDomainName(req.name, m.buf[:min(len(m.buf), limit)], headerLen, nil, false)
		if err != nil || o+4 > limit {
			return false
		}
		binary.BigEndian.PutUint16(m.buf[o:], req.qtype)
		binary.BigEndian.PutUint16(m.buf[o+2:], req.qclass)
		off = o + 4
	}
	m.off = off
	m.qend = m.off
	binary.BigEndian.PutUint16(m.buf[4:], 1)
	return true
}

// room reports whether n more bytes fit.
func (m *msg) room(n int) bool { return m.off+n <= m.limit-m.reserve }

// addrRR adds an A or AAAA record owned by the name at ptr (a
// compression pointer).
func (m *msg) addrRR(ptr uint16, a netip.Addr, ttl uint32) bool {
	typ, n := dns.TypeA, 4
	if !a.Is4() {
		typ, n = dns.TypeAAAA, 16
	}
	if !m.room(12 + n) {
		return false
	}
	b := m.buf[m.off:]
	binary.BigEndian.PutUint16(b[0:], ptr)
	binary.BigEndian.PutUint16(b[2:], typ)
	binary.BigEndian.PutUint16(b[4:], dns.ClassINET)
	binary.BigEndian.PutUint32(b[6:], ttl)
	binary.BigEndian.PutUint16(b[10:], uint16(n))
	if n == 4 {
		a4 := a.As4()
		copy(b[12:], a4[:])
	} else {
		a16 := a.As16()
		copy(b[12:], a16[:])
	}
	m.off += 12 + n
	return true
}

// srvRR adds an SRV record owned by the question name whose target is
// label followed by the question's labels from suffixOff on, written out
// in full: RFC 2782 forbids compressing the target. It returns the offset
// of the target name, for the additional records to point at.
func (m *msg) srvRR(ttl uint32, prio, weight, port uint16, label string, suffixOff int) (int, bool) {
	suffix := m.buf[suffixOff : m.qend-4] // wire labels, root included
	n := 12 + 6 + 1 + len(label) + len(suffix)
	if len(label) == 0 || len(label) > 63 || !m.room(n) {
		return 0, false
	}
	b := m.buf[m.off:]
	binary.BigEndian.PutUint16(b[0:], qnamePtr)
	binary.BigEndian.PutUint16(b[2:], dns.TypeSRV)
	binary.BigEndian.PutUint16(b[4:], dns.ClassINET)
	binary.BigEndian.PutUint32(b[6:], ttl)
	binary.BigEndian.PutUint16(b[10:], uint16(n-12))
	binary.BigEndian.PutUint16(b[12:], prio)
	binary.BigEndian.PutUint16(b[14:], weight)
	binary.BigEndian.PutUint16(b[16:], port)
	b[18] = byte(len(label))
	copy(b[19:], label)
	copy(b[19+len(label):], suffix)
	target := m.off + 18
	m.off += n
	return target, true
}

// rr packs any record (uncompressed).
func (m *msg) rr(r dns.RR) bool {
	off, err := dns.PackRR(r, m.buf[:m.limit-m.reserve], m.off, nil, false)
	if err != nil {
		return false
	}
	m.off = off
	return true
}

// raw appends a record already packed (uncompressed).
func (m *msg) raw(b []byte) bool {
	if len(b) == 0 || m.off+len(b) > m.limit-m.reserve {
		return false
	}
	m.off += copy(m.buf[m.off:], b)
	return true
}

// truncate drops every record and sets TC.
func (m *msg) truncate() {
	m.off = m.qend
	m.an, m.ns, m.ar = 0, 0, 0
	m.flags |= flagTC
}

// opt is the OPT record of a response (RFC 6891).
type opt struct {
	present bool
	udpSize uint16
	do      bool
	// edes are the Extended DNS Errors (RFC 8914), nede of them.
	edes [3]ede
	nede int
	// ecs echoes a used client subnet (RFC 7871), when ecsFamily != 0.
	ecsFamily uint16
	ecsSource uint8
	ecsScope  uint8
	ecsAddr   netip.Addr
	// cookie is the COOKIE option (RFC 7873), when hasCookie: the
	// client cookie, then the server cookie (cookie.go).
	hasCookie bool
	cookie    [clientCookieLen + serverCookieLen]byte
	// revision answers the revision option (RevisionOption), when
	// hasRevision.
	hasRevision bool
	revision    uint64
}

// ede is one Extended DNS Error.
type ede struct {
	code uint16
	text string
}

func (o *opt) size() int {
	if !o.present {
		return 0
	}
	n := 11
	for _, e := range o.edes[:o.nede] {
		n += 4 + 2 + len(e.text)
	}
	if o.ecsFamily != 0 {
		n += 4 + 4 + (int(o.ecsSource)+7)/8
	}
	if o.hasCookie {
		n += 4 + len(o.cookie)
	}
	if o.hasRevision {
		n += 4 + 8
	}
	return n
}

// finish writes the OPT record (if any) and the header's counts and
// flags, and returns the message.
func (m *msg) finish(rcode int, o *opt) []byte {
	if o.present {
		b := m.buf[m.off:]
		b[0] = 0 // root
		binary.BigEndian.PutUint16(b[1:], dns.TypeOPT)
		binary.BigEndian.PutUint16(b[3:], o.udpSize)
		ttl := uint32(uint8(rcode>>4))<<24 | uint32(0)<<16
		if o.do {
			ttl |= 1 << 15
		}
		binary.BigEndian.PutUint32(b[5:], ttl)
		p := 11
		for _, e := range o.edes[:o.nede] {
			binary.BigEndian.PutUint16(b[p:], dns.EDNS0EDE)
			binary.BigEndian.PutUint16(b[p+2:], uint16(2+len(e.text)))
			binary.BigEndian.PutUint16(b[p+4:], e.code)
			copy(b[p+6:], e.text)
			p += 6 + len(e.text)
		}
		if o.ecsFamily != 0 {
			n := (int(o.ecsSource) + 7) / 8
			binary.BigEndian.PutUint16(b[p:], dns.EDNS0SUBNET)
			binary.BigEndian.PutUint16(b[p+2:], uint16(4+n))
			binary.BigEndian.PutUint16(b[p+4:], o.ecsFamily)
			b[p+6], b[p+7] = o.ecsSource, o.ecsScope
			a := o.ecsAddr.AsSlice()
			copy(b[p+8:p+8+n], a)
			p += 8 + n
		}
		if o.hasCookie {
			binary.BigEndian.PutUint16(b[p:], dns.EDNS0COOKIE)
			binary.BigEndian.PutUint16(b[p+2:], uint16(len(o.cookie)))
			p += 4 + copy(b[p+4:], o.cookie[:])
		}
		if o.hasRevision {
			binary.BigEndian.PutUint16(b[p:], RevisionOption)
			binary.BigEndian.PutUint16(b[p+2:], 8)
			binary.BigEndian.PutUint64(b[p+4:], o.revision)
			p += 12
		}
		binary.BigEndian.PutUint16(b[9:], uint16(p-11))
		m.off += p
		m.ar++
	}
	binary.BigEndian.PutUint16(m.buf[2:], m.flags|uint16(rcode&0xF))
	binary.BigEndian.PutUint16(m.buf[6:], m.an)
	binary.BigEndian.PutUint16(m.buf[8:], m.ns)
	binary.BigEndian.PutUint16(m.buf[10:], m.ar)
	return m.buf[:m.off]
}

func binaryHeader(buf []byte, id, flags uint16) {
	clear(buf[:headerLen])
	buf[0], buf[1] = byte(id>>8), byte(id)
	buf[2], buf[3] = byte(flags>>8), byte(flags)
}
