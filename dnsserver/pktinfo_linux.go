package dnsserver

import (
	"encoding/binary"
	"net/netip"
	"unsafe"
)

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

// pktinfoRoom is the room for one packet info message of the larger
// family.
const pktinfoRoom = cmsgHdrLen + (in6PktinfoLen+cmsgWord-1)&^(cmsgWord-1)

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
