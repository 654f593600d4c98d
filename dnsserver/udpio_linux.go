package dnsserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux the readers call recvmmsg and sendmmsg themselves, through the
// socket's syscall.RawConn (so the runtime's poller still parks them),
// rather than through x/net's ReadBatch and WriteBatch: those turn each
// datagram's sender into a new *net.UDPAddr, which at 10,000 queries a
// second was four fifths of what the server allocated, and so most of
// what made the collector run on the one core queries are answered on.
// Here the sender stays in the kernel's form, in an array made once per
// reader: read from it, and handed back for the answer.

// udpPeer is a datagram's sender as the kernel wrote it: a sockaddr_in or
// sockaddr_in6, whichever the socket's family is.
type udpPeer struct {
	sa unix.RawSockaddrInet6 // room for either family
	n  uint32                // its length
}

// addr returns the sender's address, unmapped, without allocating.
func (p *udpPeer) addr() netip.Addr {
	switch p.sa.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&p.sa))
		return netip.AddrFrom4(sa.Addr)
	case unix.AF_INET6:
		return netip.AddrFrom16(p.sa.Addr).Unmap()
	}
	return netip.Addr{}
}

// String is the sender in the usual host:port form, for logs.
func (p *udpPeer) String() string {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.sa.Port))[:])
	return netip.AddrPortFrom(p.addr(), port).String()
}

// mmsghdr is struct mmsghdr: a message header and, after a call, the
// length the kernel received or sent.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [unsafe.Sizeof(uintptr(0)) - 4]byte
}

// mmsgConn is one reader's batched I/O on a shared socket: its headers
// and vectors, made once, point into the reader's messages at each call.
type mmsgConn struct {
	rc      syscall.RawConn
	hdrs    []mmsghdr
	iovs    []unix.Iovec
	n       int   // the last call's result
	errno   error // and its error
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

// newUDPIO returns batched I/O on pc for readers of at most udpBatch
// messages. When pc is bound to a wildcard address it also asks the
// kernel for each datagram's destination address, and reports whether it
// did: the kernel would otherwise pick each answer's source by routing,
// and on a host with several addresses a client that asked one of them
// would get its answer from another and drop it. A socket bound to one
// address needs none of this, and pays nothing for it.
func (s *Server) newUDPIO(pc net.PacketConn) (func() udpIO, bool, error) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return nil, false, fmt.Errorf("a %T has no file descriptor to read in batches", pc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false, err
	}
	ua, _ := pc.LocalAddr().(*net.UDPAddr)
	pktinfo := ua != nil && ua.IP.IsUnspecified()
	if pktinfo {
		var serr error
		err := rc.Control(func(fd uintptr) {
			sa, err := unix.Getsockname(int(fd))
			if err != nil {
				serr = err
				return
			}
			if _, v6 := sa.(*unix.SockaddrInet6); v6 {
				// A [::] socket (Go's choice for 0.0.0.0 too, when the
				// host has IPv6) also receives IPv4, as v4-mapped
				// addresses; Linux reports their destination in
				// IPV6_PKTINFO as well, so IPv4's IP_PKTINFO is not
				// needed here.
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
			}
		})
		if err = errors.Join(err, serr); err != nil {
			// Serving with the kernel's choice of source still answers
			// every client of a single-address host.
			s.log.Warn("asking for DNS queries' destination addresses; answers leave from the kernel's choice of address",
				"addr", pc.LocalAddr(), "err", err)
			pktinfo = false
		}
	}
	return func() udpIO {
		c := &mmsgConn{rc: rc, hdrs: make([]mmsghdr, udpBatch), iovs: make([]unix.Iovec, udpBatch)}
		c.readFn, c.writeFn = c.recv, c.send
		return c
	}, pktinfo, nil
}

// point makes the i-th header describe m, for a read (the buffer's and
// control room's full capacity, the sender's full room) or a write.
func (c *mmsgConn) point(i int, m *udpMsg, read bool) {
	h, iov := &c.hdrs[i].hdr, &c.iovs[i]
	b, oob := m.buf, m.oob
	if read {
		b, oob = b[:cap(b)], oob[:cap(oob)]
		m.peer.n = unix.SizeofSockaddrInet6
	}
	*iov = unix.Iovec{}
	if len(b) > 0 {
		iov.Base = &b[0]
	}
	iov.SetLen(len(b))
	*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&m.peer.sa)), Namelen: m.peer.n, Iov: iov}
	h.SetIovlen(1)
	if len(oob) > 0 {
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
	c.hdrs[i].len = 0
}

func (c *mmsgConn) readBatch(ms []udpMsg) (int, error) {
	n, err := c.call(ms, true)
	for i := range ms[:n] {
		h := &c.hdrs[i]
		ms[i].buf = ms[i].buf[:h.len]
		ms[i].oob = ms[i].oob[:h.hdr.Controllen]
		ms[i].peer.n = h.hdr.Namelen
	}
	return n, err
}

func (c *mmsgConn) writeBatch(ms []udpMsg) (int, error) { return c.call(ms, false) }

// call points the headers at ms and makes one recvmmsg (read) or
// sendmmsg through the RawConn, which parks the goroutine until the
// socket is ready.
func (c *mmsgConn) call(ms []udpMsg, read bool) (int, error) {
	for i := range ms {
		c.point(i, &ms[i], read)
	}
	c.n = len(ms)
	var err error
	name := "sendmmsg"
	if read {
		name, err = "recvmmsg", c.rc.Read(c.readFn)
	} else {
		err = c.rc.Write(c.writeFn)
	}
	if err != nil {
		return 0, err
	}
	if c.errno != nil {
		return 0, os.NewSyscallError(name, c.errno)
	}
	return c.n, nil
}

// recv and send are the RawConn's callbacks, made once (as method
// values) so that a call allocates no closure: the count in c.n, in and
// out. They report false, to be called again when the socket is ready,
// only on EAGAIN.
func (c *mmsgConn) recv(fd uintptr) bool { return c.mmsg(unix.SYS_RECVMMSG, fd) }
func (c *mmsgConn) send(fd uintptr) bool { return c.mmsg(unix.SYS_SENDMMSG, fd) }

func (c *mmsgConn) mmsg(trap, fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&c.hdrs[0])), uintptr(c.n), 0, 0, 0)
		switch e {
		case 0:
			c.n, c.errno = int(r), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			c.n, c.errno = 0, e
		}
		return true
	}
}
