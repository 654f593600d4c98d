package dnsserver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// UDP is served by a loop of our own rather than by miekg/dns's server:
// each of GOMAXPROCS readers takes up to udpBatch datagrams per system
// call (recvmmsg), answers them in order on its own goroutine, and sends
// the answers with one system call (sendmmsg). The common query (one
// question of plain labels, at most an OPT record) is parsed here without
// allocating; anything else goes through miekg/dns's parser, and every
// query is answered by the same code as over TCP.
const (
	udpBatch   = 32
	udpReadBuf = 4096
)

// batchConn is what ipv4.PacketConn and ipv6.PacketConn share.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

type v6batch struct{ *ipv6.PacketConn }

func (c v6batch) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	return c.PacketConn.ReadBatch(ms, flags)
}

func (c v6batch) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	return c.PacketConn.WriteBatch(ms, flags)
}

// serveUDP runs the readers until pc is closed.
func (s *Server) serveUDP(pc net.PacketConn) error {
	bc, pktinfo := s.batchConn(pc)
	n := max(runtime.GOMAXPROCS(0), 1)
	errc := make(chan error, n)
	for range n {
		go func() { errc <- s.udpReader(bc, pktinfo) }()
	}
	var first error
	for range n {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

// batchConn wraps pc for batched reads and writes. When pc is bound to a
// wildcard address it also asks the kernel, on Linux, for each
// datagram's destination address, and reports whether it did: the
// kernel would otherwise pick each answer's source by routing, and on a
// host with several addresses a client that asked one of them would get
// its answer from another and drop it. A socket bound to one address
// needs none of this, and pays nothing for it.
func (s *Server) batchConn(pc net.PacketConn) (batchConn, bool) {
	ua, _ := pc.LocalAddr().(*net.UDPAddr)
	// The control messages are parsed and built by hand (see cmsgHdrLen),
	// in Linux's layout; elsewhere the kernel keeps choosing the source.
	pktinfo := runtime.GOOS == "linux" && ua != nil && ua.IP.IsUnspecified()
	var bc batchConn
	var err error
	if ua != nil && ua.IP.To4() == nil {
		c := ipv6.NewPacketConn(pc)
		if pktinfo {
			// A [::] socket (Go's choice for 0.0.0.0 too, when the host
			// has IPv6) also receives IPv4, as v4-mapped addresses; Linux
			// reports their destination in IPV6_PKTINFO as well, so IPv4's
			// IP_PKTINFO is not needed here.
			err = c.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
		}
		bc = v6batch{c}
	} else {
		c := ipv4.NewPacketConn(pc)
		if pktinfo {
			err = c.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
		}
		bc = c
	}
	if err != nil {
		// Serving with the kernel's choice of source still answers every
		// client of a single-address host.
		s.log.Warn("asking for DNS queries' destination addresses; answers leave from the kernel's choice of address",
			"addr", pc.LocalAddr(), "err", err)
		pktinfo = false
	}
	return bc, pktinfo
}

// udpReader is one reader's loop. With pktinfo, each query's control
// messages are read and each answer is sent with one naming its source:
// the query's destination.
func (s *Server) udpReader(bc batchConn, pktinfo bool) error {
	in := make([]ipv4.Message, udpBatch)
	out := make([]ipv4.Message, udpBatch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, udpReadBuf)}
		out[i].Buffers = [][]byte{make([]byte, int(s.cfg.UDPSize)+headerLen)}
		if pktinfo {
			// Room for one packet info message of the larger family: the
			// only control message the socket asks for. Anything cut
			// short (MSG_CTRUNC) is skipped by the parser.
			in[i].OOB = make([]byte, cmsgSpace(in6PktinfoLen))
			out[i].OOB = make([]byte, 0, cmsgSpace(in6PktinfoLen))
		}
	}
	var scratch [256]byte // the query name in presentation form
	for {
		n, err := bc.ReadBatch(in, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Anything else (a timeout, ENOMEM, an ICMP error on some
			// systems) is the read's, not the socket's: log, breathe,
			// go on, as miekg/dns's server does.
			s.log.Warn("reading DNS queries", "err", err)
			s.m.readErrors.Inc()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		k := 0
		for i := range in[:n] {
			start := time.Now()
			pkt := in[i].Buffers[0][:in[i].N]
			var remote netip.Addr
			if ua, ok := in[i].Addr.(*net.UDPAddr); ok {
				remote, _ = netip.AddrFromSlice(ua.IP)
				remote = remote.Unmap()
			}
			buf := out[k].Buffers[0][:cap(out[k].Buffers[0])]
			req, ok := parseQuery(pkt, scratch[:], remote)
			var resp []byte
			var rcode int
			var qtype uint16
			switch {
			case ok:
				resp, rcode, qtype = s.answer(&req, buf)
			case len(pkt) < headerLen || pkt[2]&0x80 != 0:
				// No header to answer, or a response: never answer.
				s.m.dropped.Inc()
				continue
			default:
				// Not the common shape: miekg/dns parses it. What it
				// cannot parse gets a header-only FORMERR (NOTIMP for
				// an opcode we do not serve), as RFC 8906 asks.
				var r dns.Msg
				if err := r.Unpack(pkt); err != nil {
					id, flags := binary.BigEndian.Uint16(pkt), binary.BigEndian.Uint16(pkt[2:])
					rcode = dns.RcodeFormatError
					if op := int(flags>>11) & 0xF; op != dns.OpcodeQuery {
						binaryHeader(buf, id, flagQR|uint16(op)<<11|dns.RcodeNotImplemented)
						rcode = dns.RcodeNotImplemented
					} else {
						binaryHeader(buf, id, flagQR|flags&flagRD|dns.RcodeFormatError)
					}
					resp = buf[:headerLen]
					break
				}
				req = requestOf(&r, in[i].Addr)
				resp, rcode, qtype = s.answer(&req, buf)
			}
			out[k].Buffers[0] = resp
			out[k].Addr = in[i].Addr
			if pktinfo {
				out[k].OOB = replySource(out[k].OOB[:cap(out[k].OOB)], in[i].OOB[:in[i].NN])
			}
			k++
			s.m.observe(qtype, rcode, time.Since(start))
		}
		for sent := 0; sent < k; {
			m, err := bc.WriteBatch(out[sent:k], 0)
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if m <= 0 {
				// The first message left could not be sent (a source
				// port 0, a refused route): skip it alone, so that one
				// bad source cannot silence the others of its batch.
				s.log.Debug("sending a DNS answer", "to", out[sent].Addr, "err", err)
				s.m.sendErrors.Inc()
				m = 1
			}
			sent += m
		}
		for i := range out[:k] {
			out[i].Buffers[0] = out[i].Buffers[0][:cap(out[i].Buffers[0])]
		}
	}
}

// Socket control messages as Linux lays them out (<linux/socket.h>): a
// header of the message's length (a size_t), level and type, then the
// data, each aligned to a word. Parsing them here rather than with
// x/net's ControlMessage keeps the loop free of allocations (its Parse
// builds a slice and a net.IP per call, its Marshal a new buffer). The
// levels and types are Linux's numbers; batchConn asks for packet info
// only there.
const (
	cmsgWord      = int(unsafe.Sizeof(uintptr(0)))
	cmsgHdrLen    = (cmsgWord + 8 + cmsgWord - 1) &^ (cmsgWord - 1)
	levelIP       = 0  // IPPROTO_IP
	levelIPv6     = 41 // IPPROTO_IPV6
	ipPktinfo     = 8  // IP_PKTINFO: struct in_pktinfo
	ipv6Pktinfo   = 50 // IPV6_PKTINFO: struct in6_pktinfo
	inPktinfoLen  = 12 // ifindex (int), spec_dst, addr (4 octets each)
	in6PktinfoLen = 20 // addr (16 octets), ifindex (int)
)

// cmsgSpace is CMSG_SPACE: the room a control message of n octets of
// data takes.
func cmsgSpace(n int) int { return cmsgHdrLen + (n+cmsgWord-1)&^(cmsgWord-1) }

// pktinfoDst returns the destination address reported by an IP_PKTINFO
// or IPV6_PKTINFO control message in oob (a v4-mapped one unmapped), or
// false if oob holds neither. It allocates nothing.
func pktinfoDst(oob []byte) (netip.Addr, bool) {
	for len(oob) >= cmsgHdrLen {
		var l uint64
		if cmsgWord == 8 {
			l = binary.NativeEndian.Uint64(oob)
		} else {
			l = uint64(binary.NativeEndian.Uint32(oob))
		}
		if l < uint64(cmsgHdrLen) || l > uint64(len(oob)) {
			return netip.Addr{}, false // truncated (MSG_CTRUNC) or garbled
		}
		level := int32(binary.NativeEndian.Uint32(oob[cmsgWord:]))
		typ := int32(binary.NativeEndian.Uint32(oob[cmsgWord+4:]))
		data := oob[cmsgHdrLen:l]
		switch {
		case level == levelIP && typ == ipPktinfo && len(data) >= inPktinfoLen:
			// ipi_addr, the header's destination; ipi_spec_dst is the
			// kernel's idea of a source, which differs for broadcasts.
			return netip.AddrFrom4([4]byte(data[8:12])), true
		case level == levelIPv6 && typ == ipv6Pktinfo && len(data) >= in6PktinfoLen:
			return netip.AddrFrom16([16]byte(data[:16])).Unmap(), true
		}
		oob = oob[min(cmsgSpace(int(l)-cmsgHdrLen), len(oob)):]
	}
	return netip.Addr{}, false
}

// replySource builds in b (at least cmsgSpace(in6PktinfoLen) long) the
// control message that makes an answer leave from the destination
// reported in the query's control messages qoob, and returns it; or
// b[:0], for the kernel's choice, when there is none or it cannot be a
// source (a multicast or broadcast group's).
//
// Only the address is set, never the interface: with an interface the
// kernel would send the answer out of the one the query came in by,
// which is wrong when routing is asymmetric, while with the address
// alone it routes as usual and only fixes the source (as miekg/dns
// does). An IPv4 source, v4-mapped traffic on a [::] socket included,
// goes in IP_PKTINFO's ipi_spec_dst, which Linux honours on IPv6 sockets
// sending to a v4-mapped address too.
func replySource(b, qoob []byte) []byte {
	dst, ok := pktinfoDst(qoob)
	if !ok || dst.IsMulticast() || dst.IsUnspecified() || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return b[:0]
	}
	b, d := pktinfoMsg(b, dst.Is4())
	if dst.Is4() {
		a := dst.As4()
		copy(d[4:], a[:]) // ipi_spec_dst
	} else {
		a := dst.As16()
		copy(d, a[:]) // ipi6_addr
	}
	return b
}

// pktinfoMsg lays out in b (which must have room for it) an empty packet
// info control message of the family, IP_PKTINFO for IPv4, and returns
// the message and its data.
func pktinfoMsg(b []byte, v4 bool) (msg, data []byte) {
	level, typ, n := levelIPv6, ipv6Pktinfo, in6PktinfoLen
	if v4 {
		level, typ, n = levelIP, ipPktinfo, inPktinfoLen
	}
	b = b[:cmsgSpace(n)]
	clear(b)
	if cmsgWord == 8 {
		binary.NativeEndian.PutUint64(b, uint64(cmsgHdrLen+n))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(cmsgHdrLen+n))
	}
	binary.NativeEndian.PutUint32(b[cmsgWord:], uint32(level))
	binary.NativeEndian.PutUint32(b[cmsgWord+4:], uint32(typ))
	return b, b[cmsgHdrLen:]
}

// parseQuery parses the common query without allocating: header, one
// question whose name is plain labels (letters, digits, '-' and '_'; no
// compression), and at most one additional record, an OPT (with an ECS
// option, or others, which are skipped). Anything else reports false.
// The name is written into scratch, which the request's name refers to
// until the next call.
func parseQuery(b []byte, scratch []byte, remote netip.Addr) (request, bool) {
	var req request
	if len(b) < headerLen+5 {
		return req, false
	}
	flags := binary.BigEndian.Uint16(b[2:])
	qd, an, ns, ar := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]),
		binary.BigEndian.Uint16(b[8:]), binary.BigEndian.Uint16(b[10:])
	if flags&flagQR != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return req, false
	}
	req.id = binary.BigEndian.Uint16(b)
	req.opcode = int(flags>>11) & 0xF
	req.qflags = flags & (flagRD | flagCD)
	req.remote = remote
	// The name.
	off, n := headerLen, 0
	for {
		if off >= len(b) {
			return req, false
		}
		l := int(b[off])
		off++
		if l == 0 {
			break
		}
		// A name is at most 255 octets on the wire, its root included:
		// the labels so far (n octets of text, one length octet each
		// standing in for the dots) plus this one must leave room for it.
		if l > 63 || off+l > len(b) || n+l+1 > 254 || n+l+1 > len(scratch) {
			return req, false
		}
		for _, c := range b[off : off+l] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return req, false
			}
		}
		n += copy(scratch[n:], b[off:off+l])
		scratch[n] = '.'
		n++
		off += l
	}
	if n == 0 {
		scratch[0] = '.'
		n = 1
	}
	if off+4 > len(b) {
		return req, false
	}
	req.qtype = binary.BigEndian.Uint16(b[off:])
	req.qclass = binary.BigEndian.Uint16(b[off+2:])
	off += 4
	req.rawQ = b[headerLen:off]
	req.name = unsafe.String(&scratch[0], n)
	if ar == 0 {
		return req, off == len(b)
	}
	// The OPT record: root name, type 41, class = payload size, TTL =
	// extended rcode, version, flags; then its options.
	if off+11 > len(b) || b[off] != 0 || binary.BigEndian.Uint16(b[off+1:]) != dns.TypeOPT {
		return req, false
	}
	req.hasOPT = true
	req.udpSize = binary.BigEndian.Uint16(b[off+3:])
	req.version = b[off+6]
	req.do = binary.BigEndian.Uint16(b[off+7:])&0x8000 != 0
	rdlen := int(binary.BigEndian.Uint16(b[off+9:]))
	off += 11
	if off+rdlen != len(b) {
		return req, false
	}
	for end := off + rdlen; off < end; {
		if off+4 > end {
			return req, false
		}
		code, l := binary.BigEndian.Uint16(b[off:]), int(binary.BigEndian.Uint16(b[off+2:]))
		off += 4
		if off+l > end {
			return req, false
		}
		switch code {
		case dns.EDNS0NSID, dns.EDNS0COOKIE, dns.EDNS0PADDING, dns.EDNS0SUBNET:
		default:
			return req, false // miekg/dns knows its form, or that it is unknown
		}
		if code == dns.EDNS0SUBNET {
			if l < 4 || req.ecsFamily != 0 {
				return req, false
			}
			fam, src := binary.BigEndian.Uint16(b[off:]), b[off+2]
			addr := b[off+4 : off+l]
			max := 4
			if fam == 2 {
				max = 16
			}
			if fam != 1 && fam != 2 || int(src) > 8*max || b[off+3] != 0 || len(addr) != (int(src)+7)/8 {
				return req, false // miekg/dns decides what that is
			}
			req.ecsFamily, req.ecsSource = fam, src
			copy(req.ecsAddr[:], addr)
		}
		off += l
	}
	return req, true
}
