package dnsserver

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// capListener bounds the TCP connections open at once. Past the cap a
// new connection is accepted and closed at once: the client sees the
// connection end and retries, while the server's descriptors stay bounded
// however many connect. When Accept fails for lack of file descriptors
// (EMFILE, ENFILE) it backs off, 5 ms doubling to 1 s, instead of
// spinning: the library's serve loop retries a temporary error at once.
type capListener struct {
	net.Listener
	slots    chan struct{} // one token per open connection
	rejected func()        // counts a connection closed for the cap
	fdWaits  func()        // counts a back-off for lack of descriptors
}

func newCapListener(ln net.Listener, max int, rejected, fdWaits func()) *capListener {
	return &capListener{Listener: ln, slots: make(chan struct{}, max), rejected: rejected, fdWaits: fdWaits}
}

func (l *capListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.fdWaits()
			time.Sleep(backoff) // out of descriptors: give the open ones time to close
			continue
		}
		backoff = 0
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: c, slots: l.slots}, nil
		default:
			// Counted before the close, so that whoever sees the
			// connection closed sees it counted.
			l.rejected()
			_ = c.Close()
		}
	}
}

// capConn gives its slot back when it is closed, once.
type capConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
