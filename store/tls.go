package store

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// RaftTLS is raft's mutual TLS: the listener's config and the dialler's.
type RaftTLS struct {
	Server, Client *tls.Config
}

// handshakeTimeout bounds an accepted connection's TLS handshake: one
// that never speaks holds no goroutine longer.
const handshakeTimeout = 10 * time.Second

// tlsStream is raft's StreamLayer over TLS: every connection, both ways,
// is authenticated by the configs' certificates before raft reads a byte.
type tlsStream struct {
	net.Listener // a TLS listener
	advertise    net.Addr
	client       *tls.Config
}

func newTLSStream(bind string, advertise net.Addr, cfg *RaftTLS) (*tlsStream, error) {
	if cfg.Server == nil || cfg.Client == nil {
		return nil, errors.New("store: RaftTLS needs both a server and a client config")
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if a, ok := advertise.(*net.TCPAddr); ok && a.Port == 0 {
		advertise = &net.TCPAddr{IP: a.IP, Port: ln.Addr().(*net.TCPAddr).Port}
	}
	return &tlsStream{Listener: tls.NewListener(ln, cfg.Server), advertise: advertise, client: cfg.Client}, nil
}

// Accept returns the next connection; its handshake runs, bounded, on
// the first read or write (in raft's goroutine for it, not here).
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c.(*tls.Conn)}, nil
}

// Addr is the address peers dial.
func (s *tlsStream) Addr() net.Addr { return s.advertise }

// Dial connects to a peer and completes the handshake within timeout.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return (&tls.Dialer{NetDialer: &net.Dialer{}, Config: s.client}).DialContext(ctx, "tcp", string(addr))
}

// boundedConn completes its handshake within handshakeTimeout before
// the first read or write.
type boundedConn struct {
	*tls.Conn
	done atomic.Bool
}

func (c *boundedConn) handshake() error {
	if c.done.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		c.Close()
		return err
	}
	c.done.Store(true)
	return nil
}

func (c *boundedConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *boundedConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// nameAddr is a raft address given as HOST:PORT with a host name,
// advertised as written.
type nameAddr string

func (a nameAddr) Network() string { return "tcp" }
func (a nameAddr) String() string  { return string(a) }

// plainStream is raft's StreamLayer over plain TCP, for an address
// advertised by name (raft's own TCP transport advertises only an IP).
type plainStream struct {
	net.Listener
	advertise net.Addr
}

// Addr is the address peers dial.
func (s *plainStream) Addr() net.Addr { return s.advertise }

// Dial connects to a peer, resolving its name now.
func (s *plainStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}
