//go:build !linux

package dnsserver

import (
	"fmt"
	"net"
	"net/netip"
)

// Elsewhere than Linux the readers take one datagram per call, through
// the standard library, and the kernel picks each answer's source.

// udpPeer is a datagram's sender.
type udpPeer struct{ ap netip.AddrPort }

func (p *udpPeer) addr() netip.Addr { return p.ap.Addr().Unmap() }
func (p *udpPeer) String() string   { return p.ap.String() }

type stdUDP struct{ c *net.UDPConn }

func (s *Server) newUDPIO(pc net.PacketConn) (func() udpIO, bool, error) {
	c, ok := pc.(*net.UDPConn)
	if !ok {
		return nil, false, fmt.Errorf("a %T is not a UDP socket", pc)
	}
	return func() udpIO { return stdUDP{c} }, false, nil
}

func (u stdUDP) readBatch(ms []udpMsg) (int, error) {
	m := &ms[0]
	n, oobn, _, ap, err := u.c.ReadMsgUDPAddrPort(m.buf[:cap(m.buf)], m.oob[:cap(m.oob)])
	if err != nil {
		return 0, err
	}
	m.buf, m.oob, m.peer.ap = m.buf[:n], m.oob[:oobn], ap
	return 1, nil
}

func (u stdUDP) writeBatch(ms []udpMsg) (int, error) {
	for i := range ms {
		if _, _, err := u.c.WriteMsgUDPAddrPort(ms[i].buf, nil, ms[i].peer.ap); err != nil {
			return i, err
		}
	}
	return len(ms), nil
}

// pktinfoRoom: none is asked for.
const pktinfoRoom = 0

// replySource: the kernel chooses (see udp.go's pktinfo on Linux).
func replySource(b, _ []byte) []byte { return b[:0] }
