package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// conn is what a target's checks reuse: an HTTP client (transport and its
// idle connection) or a gRPC channel. TCP targets need none: a connect
// check must dial every time.
//
// A conn is used by one check at a time (the prober never overlaps the
// probes of one target) and closed by the prober's scheduler when its
// target goes away or changes, when a check reports it broken, or when Run
// returns.
type conn struct {
	http *http.Client
	tr   *http.Transport
	grpc *grpc.ClientConn
	// refused records whether the gRPC dialer's last attempt was refused:
	// a failed RPC says only Unavailable.
	refused atomic.Bool
}

// newConn prepares, without dialing, what t's checks need. With reuse, an
// HTTP connection is kept idle for the next probe and a gRPC channel stays
// connected; without, each is closed after one check.
func newConn(t Target, reuse bool) (*conn, error) {
	c := &conn{}
	// Keep a connection through one missed probe; close it past that.
	idle := 2*t.Interval + t.Timeout
	switch t.Kind {
	case HTTP:
		c.tr = &http.Transport{
			Proxy:                  nil, // probes go straight to the target
			DialContext:            (&net.Dialer{}).DialContext,
			DisableKeepAlives:      !reuse,
			DisableCompression:     true,
			MaxIdleConns:           1,
			MaxIdleConnsPerHost:    1,
			IdleConnTimeout:        idle,
			MaxResponseHeaderBytes: maxHeaderBytes,
		}
		c.http = &http.Client{
			Transport: c.tr,
			// A 3xx is a pass in itself (SPEC §2); following it could
			// carry the probe, and whatever it sends, to another host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			// Jar is nil: a cookie set by one answer is never sent back.
		}
	case GRPC:
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				nc, err := d.DialContext(ctx, "tcp", addr)
				c.refused.Store(errors.Is(err, syscall.ECONNREFUSED))
				return nc, err
			}),
			grpc.WithNoProxy(),
			grpc.WithUserAgent(userAgent),
			grpc.WithDisableRetry(),
			grpc.WithDisableServiceConfig(),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.DefaultConfig,
				MinConnectTimeout: max(t.Timeout, time.Second),
			}),
		}
		if reuse {
			opts = append(opts, grpc.WithIdleTimeout(idle))
		}
		cc, err := grpc.NewClient("passthrough:///"+t.Addr.String(), opts...)
		if err != nil {
			return nil, err
		}
		c.grpc = cc
	}
	return c, nil
}

// close releases c's connections. It does not wait for an HTTP
// connection's goroutines, which exit once the socket is closed.
func (c *conn) close() {
	if c == nil {
		return
	}
	if c.tr != nil {
		c.tr.CloseIdleConnections()
	}
	if c.grpc != nil {
		_ = c.grpc.Close()
	}
}
