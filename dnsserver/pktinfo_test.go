//go:build linux

package dnsserver

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

// On a wildcard socket each answer leaves from the address its query was
// sent to. The queries come from connected sockets, which drop datagrams
// from any other source, as resolvers do: without the fix the one to
// 127.0.0.2 is answered from 127.0.0.1 and times out. Linux routes all
// of 127.0.0.0/8 to lo, so 127.0.0.2 needs no setup.
func TestAnswerLeavesFromQueriedAddress(t *testing.T) {
	t.Run("0.0.0.0", func(t *testing.T) {
		// Go listens on a dual-stack [::] socket for this when the host
		// has IPv6, so IPv4 arrives v4-mapped; otherwise on an IPv4 one.
		port := runServer(t, "0.0.0.0:0")
		askFrom(t, "127.0.0.1", port)
		askFrom(t, "127.0.0.2", port)
	})
	t.Run("[::]", func(t *testing.T) {
		// Without ::1 it skips, saying so, except under CI=true, where it
		// fails: .ci/run gives lo its IPv6 address.
		if pc, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("no IPv6 loopback: %v; under CI=true a missing ::1 fails the test", err)
			}
			t.Skipf("no IPv6 loopback: %v", err)
		} else {
			pc.Close()
		}
		port := runServer(t, "[::]:0")
		askFrom(t, "::1", port)
		askFrom(t, "127.0.0.2", port) // v4-mapped on the same socket
	})
	t.Run("an IPv4 socket", func(t *testing.T) {
		// What Go opens for 0.0.0.0 on a host without IPv6: IP_PKTINFO
		// rather than IPV6_PKTINFO, both ways.
		pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		s := newBareServer(t, "0.0.0.0:0")
		done := make(chan error, 1)
		go func() { done <- s.serveUDP(pc) }()
		t.Cleanup(func() {
			pc.Close()
			if err := <-done; err != nil {
				t.Errorf("serveUDP: %v", err)
			}
		})
		port := pc.LocalAddr().(*net.UDPAddr).Port
		askFrom(t, "127.0.0.1", port)
		askFrom(t, "127.0.0.2", port)
	})
}

// The control messages are read and written without allocating, and
// what is not a unicast destination is not made a source.
func TestReplySource(t *testing.T) {
	out := make([]byte, cmsgSpace(in6PktinfoLen))
	for _, c := range []struct {
		dst, want string // want "": the kernel's choice
		wantLen   int
	}{
		{"127.0.0.2", "127.0.0.2", cmsgSpace(inPktinfoLen)},
		{"2001:db8::1", "2001:db8::1", cmsgSpace(in6PktinfoLen)},
		{"::1", "::1", cmsgSpace(in6PktinfoLen)},
		// IPv4 on a [::] socket: answered with IPv4's message.
		{"::ffff:127.0.0.2", "127.0.0.2", cmsgSpace(inPktinfoLen)},
		{"224.0.0.251", "", 0},
		{"255.255.255.255", "", 0},
		{"ff02::fb", "", 0},
	} {
		q := kernelPktinfo(netip.MustParseAddr(c.dst))
		r := replySource(out, q)
		got := sentSource(r)
		if want, _ := netip.ParseAddr(c.want); got != want || len(r) != c.wantLen {
			t.Errorf("a query to %s: the answer's source is %v in %d octets, want %v in %d", c.dst, got, len(r), want, c.wantLen)
		}
		if n := testing.AllocsPerRun(100, func() { replySource(out, q) }); n != 0 {
			t.Errorf("a query to %s: %v allocations per answer", c.dst, n)
		}
	}
	// Cut or garbled control messages name no source.
	q := kernelPktinfo(netip.MustParseAddr("127.0.0.2"))
	for _, q := range [][]byte{nil, make([]byte, cmsgHdrLen), q[:cmsgHdrLen+4], q[1:]} {
		if r := replySource(out, q); len(r) != 0 {
			t.Errorf("control messages %x: a source was set", q)
		}
	}
}

// sentSource is the source address an answer's control message asks
// for: IP_PKTINFO's ipi_spec_dst or IPV6_PKTINFO's ipi6_addr.
func sentSource(b []byte) netip.Addr {
	if len(b) < cmsgHdrLen {
		return netip.Addr{}
	}
	level := binary.NativeEndian.Uint32(b[cmsgWord:])
	typ := binary.NativeEndian.Uint32(b[cmsgWord+4:])
	switch d := b[cmsgHdrLen:]; {
	case level == levelIP && typ == ipPktinfo && len(d) >= inPktinfoLen:
		return netip.AddrFrom4([4]byte(d[4:8]))
	case level == levelIPv6 && typ == ipv6Pktinfo && len(d) >= in6PktinfoLen:
		return netip.AddrFrom16([16]byte(d[:16]))
	}
	return netip.Addr{}
}

// kernelPktinfo is the control message Linux reports a query to dst with
// (as an IPv6 socket does when dst is v4-mapped), on interface 1.
func kernelPktinfo(dst netip.Addr) []byte {
	b, d := pktinfoMsg(make([]byte, cmsgSpace(in6PktinfoLen)), dst.Is4())
	if dst.Is4() {
		binary.NativeEndian.PutUint32(d, 1)
		copy(d[4:], []byte{192, 0, 2, 99}) // ipi_spec_dst: not the destination
		a := dst.As4()
		copy(d[8:], a[:])
	} else {
		a := dst.As16()
		copy(d, a[:])
		binary.NativeEndian.PutUint32(d[16:], 1)
	}
	return b
}

// askFrom queries the server at host:port from a socket connected to it,
// and fails unless the answer comes back from there.
func askFrom(t *testing.T, host string, port int) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(host), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion("www.cairn.internal.", dns.TypeA)
	b, _ := q.Pack()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1232)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("asking %s: %v (an answer from another address is dropped)", host, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if r.Id != q.Id || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("asking %s: %v", host, r)
	}
}

// runServer runs a server on addr until the test ends and returns its
// UDP port.
func runServer(t *testing.T, addr string) int {
	t.Helper()
	s := newBareServer(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the DNS server did not start")
	}
	u, _ := s.Addrs()
	return u.(*net.UDPAddr).Port
}

// newBareServer is a server of one static record over an empty table.
func newBareServer(t *testing.T, addr string) *Server {
	t.Helper()
	z, err := zones.New(zones.Config{
		Domain:  "cairn.internal.",
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("192.0.2.53")}},
		Static:  strings.NewReader("www 300 A 192.0.2.80\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := status.New(status.Config{Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Build(func(*status.Builder) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Zone: z, Table: pub, Addr: addr, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
