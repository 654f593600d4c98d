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

// udpMsg is one datagram of a reader's batch: read into, or answered
// from. Its slices keep their capacity from call to call.
type udpMsg struct {
	buf  []byte  // the datagram: after a read, as long as what came
	oob  []byte  // control messages, read or to send
	peer udpPeer // the sender, and so the answer's destination
}

// udpIO is batched datagram I/O on one socket for one reader (udpio_*.go).
// readBatch fills ms[:n] with what came, at least one; writeBatch sends
// ms in order and returns how many left, stopping at the first it could
// not send.
type udpIO interface {
	readBatch(ms []udpMsg) (n int, err error)
	writeBatch(ms []udpMsg) (n int, err error)
}

// serveUDP runs the readers until pc is closed.
func (s *Server) serveUDP(pc net.PacketConn) error {
	newIO, pktinfo, err := s.newUDPIO(pc)
	if err != nil {
		return err
	}
	n := max(runtime.GOMAXPROCS(0), 1)
	errc := make(chan error, n)
	for range n {
		go func() { errc <- s.udpReader(newIO(), newIO, pktinfo) }()
	}
	var first error
	for range n {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

// udpReader is one reader's loop. With pktinfo, each query's control
// messages are read and each answer is sent with one naming its source:
// the query's destination.
func (s *Server) udpReader(io udpIO, newIO func() udpIO, pktinfo bool) error {
	in := make([]udpMsg, udpBatch)
	out := make([]udpMsg, udpBatch)
	for i := range in {
		in[i].buf = make([]byte, udpReadBuf)
		out[i].buf = make([]byte, int(s.cfg.UDPSize)+headerLen)
		if pktinfo {
			// Room for one packet info message of the larger family: the
			// only control message the socket asks for. Anything cut
			// short (MSG_CTRUNC) is skipped by the parser.
			in[i].oob = make([]byte, pktinfoRoom)
			out[i].oob = make([]byte, 0, pktinfoRoom)
		}
	}
	var scratch [256]byte // the query name in presentation form
	for {
		n, err := io.readBatch(in)
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
			pkt := in[i].buf
			remote := in[i].peer.addr()
			buf := out[k].buf[:cap(out[k].buf)]
			req, ok := parseQuery(pkt, scratch[:], remote)
			var resp []byte
			var rcode int
			var qtype uint16
			if !ok {
				if len(pkt) < headerLen || pkt[2]&0x80 != 0 {
					// No header to answer, or a response: never answer.
					s.m.dropped.Inc()
					continue
				}
				// Not the common shape: miekg/dns parses it. What it
				// cannot parse gets a header-only FORMERR (NOTIMP for
				// an opcode we do not serve), as RFC 8906 asks.
				var r dns.Msg
				if err := r.Unpack(pkt); err != nil {
					resp, rcode = unparseable(pkt, buf)
				} else {
					req, ok = requestOf(&r, remote, false), true
				}
			}
			if s.realClock {
				req.now = start
			}
			req.wireLen = len(pkt)
			verdict := rrlPass
			if s.rrl != nil {
				verdict = s.limit(&req, ok, remote)
			}
			switch {
			case verdict == rrlDrop:
				continue
			case !ok:
				// Its header-only answer, slipped or not: nothing smaller.
			case verdict == rrlSlip:
				resp, rcode, qtype = s.truncated(&req, buf)
			default:
				resp, rcode, qtype = s.answer(&req, buf)
			}
			var oob []byte
			if pktinfo {
				oob = replySource(out[k].oob[:cap(out[k].oob)], in[i].oob)
			}
			if rcode == rcodeWait {
				if s.parkUDP(newIO, pkt, in[i].peer, oob, req.wait) {
					continue // answered when it has waited
				}
				req.waited = true
				resp, rcode, qtype = s.answer(&req, buf)
			}
			out[k].buf = resp
			out[k].peer = in[i].peer
			out[k].oob = oob
			k++
			s.m.observe(qtype, rcode, time.Since(start))
		}
		for sent := 0; sent < k; {
			m, err := io.writeBatch(out[sent:k])
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if m <= 0 {
				// The first message left could not be sent (a source
				// port 0, a refused route): skip it alone, so that one
				// bad source cannot silence the others of its batch.
				s.log.Debug("sending a DNS answer", "to", &out[sent].peer, "err", err)
				s.m.sendErrors.Inc()
				m = 1
			}
			sent += m
		}
	}
}

// unparseable writes into buf the header-only answer to a query pkt
// miekg/dns cannot parse: FORMERR, or NOTIMP for an opcode other than
// QUERY (echoed, and no other flag: RFC 8906).
func unparseable(pkt, buf []byte) ([]byte, int) {
	id, flags := binary.BigEndian.Uint16(pkt), binary.BigEndian.Uint16(pkt[2:])
	if op := int(flags>>11) & 0xF; op != dns.OpcodeQuery {
		binaryHeader(buf, id, flagQR|uint16(op)<<11|dns.RcodeNotImplemented)
		return buf[:headerLen], dns.RcodeNotImplemented
	}
	binaryHeader(buf, id, flagQR|flags&flagRD|dns.RcodeFormatError)
	return buf[:headerLen], dns.RcodeFormatError
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
		case RevisionOption:
			req.wantsRevision = true
		default:
			return req, false // miekg/dns knows its form, or that it is unknown
		}
		if code == dns.EDNS0COOKIE && !req.hasCookie {
			req.hasCookie, req.cookieLen = true, l
			copy(req.cookie[:], b[off:off+l])
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
