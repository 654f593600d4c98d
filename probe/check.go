package probe

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Outcome is what one check found.
type Outcome struct {
	// OK is true when the check passed: a TCP connection was accepted, an
	// HTTP GET answered 2xx or 3xx, or gRPC health answered SERVING.
	OK bool
	// Hard is true when the connection was refused: nothing listens, so
	// the evaluator withdraws the target at once (SPEC §2's hard-failure
	// fast path). A timeout, a reset or a bad status is never Hard.
	Hard bool
	// Unreachable is true when no answer came at all because no
	// connection could be made: the dial timed out, or the network or host
	// was unreachable. A connection made and then not answered in time is
	// a plain failure: the target was reached. From one observer
	// that is as much a fact about the path as about the target, so the
	// evaluator counts it as a failure only while that observer still
	// reaches most of what it probes (SPEC §2: a prober cut off is
	// silence). A refusal, a reset or a bad status is never Unreachable.
	Unreachable bool
	// Code is the HTTP status, or the grpc.health.v1 serving status
	// (1 SERVING, 2 NOT_SERVING, …); 0 when no answer came.
	Code int
	// Latency is the time the check took, dial included.
	Latency time.Duration
	// Err says briefly why a check failed; empty when OK. It never holds
	// the request's path or query, nor anything the target sent beyond its
	// status.
	Err string
}

const (
	// userAgent is sent by HTTP and gRPC checks so that an operator can
	// tell probes from traffic in the target's logs.
	userAgent = "cairn-probe/1"
	// maxBody is how much of an HTTP response body a check reads (and
	// discards) before closing it: enough for the typical health page to
	// be read whole, so that the connection can be reused, and a bound on
	// what a target can make us read.
	maxBody = 4 << 10
	// maxHeaderBytes bounds an HTTP response's header.
	maxHeaderBytes = 16 << 10
)

// Check runs the check t.Kind names against t.Addr, within t.Timeout when
// that is positive and within ctx. It dials a fresh connection and closes
// it; the Prober reuses connections instead. Check does not call
// t.Validate, but an HTTP target with an invalid Path fails without being
// sent.
func Check(ctx context.Context, t Target) Outcome {
	switch t.Kind {
	case TCP:
		return CheckTCP(ctx, t)
	case HTTP:
		return CheckHTTP(ctx, t)
	case GRPC:
		return CheckGRPC(ctx, t)
	}
	return Outcome{Err: "unknown check kind " + t.Kind.String()}
}

// CheckTCP passes when a TCP connection to t.Addr is accepted. The
// connection is closed at once, without sending anything.
func CheckTCP(ctx context.Context, t Target) Outcome {
	return oneShot(ctx, t, TCP)
}

// CheckHTTP sends GET http://t.Addr/t.Path and passes on a 2xx or 3xx
// status. It never follows a redirect, keeps no cookies and sends no
// credentials (SPEC §8).
func CheckHTTP(ctx context.Context, t Target) Outcome {
	return oneShot(ctx, t, HTTP)
}

// CheckGRPC calls grpc.health.v1.Health/Check on t.Addr over plaintext
// HTTP/2 for t.Service, and passes on SERVING. A server without the health
// service (Unimplemented) fails, and so does an unknown service name
// (NotFound); neither is Hard.
func CheckGRPC(ctx context.Context, t Target) Outcome {
	return oneShot(ctx, t, GRPC)
}

func oneShot(ctx context.Context, t Target, k Kind) Outcome {
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	t.Kind = k
	c, err := newConn(t, false)
	if err != nil {
		return Outcome{Err: "setting up the check: " + errText(err)}
	}
	defer c.close()
	o, _ := runCheck(ctx, t, c)
	return o
}

// runCheck runs t's check over c, whose kind must match. It reports
// whether c is broken and should be dropped rather than reused.
func runCheck(ctx context.Context, t Target, c *conn) (o Outcome, broken bool) {
	start := time.Now()
	switch t.Kind {
	case TCP:
		o = checkTCP(ctx, t)
	case HTTP:
		o = checkHTTP(ctx, t, c)
	case GRPC:
		o, broken = checkGRPC(ctx, t, c)
	default:
		o = Outcome{Err: "unknown check kind " + t.Kind.String()}
	}
	o.Latency = time.Since(start)
	return o, broken
}

func checkTCP(ctx context.Context, t Target) Outcome {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", t.Addr.String())
	if err != nil {
		return failed(err)
	}
	_ = nc.Close()
	return Outcome{OK: true}
}

func checkHTTP(ctx context.Context, t Target, c *conn) Outcome {
	u, err := requestURI(t.Path)
	if err != nil {
		return Outcome{Err: "invalid path"}
	}
	u.Scheme, u.Host = "http", t.Addr.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Outcome{Err: "invalid request"}
	}
	req.Header.Set("User-Agent", userAgent)
	// A request that dialed a connection and then got no answer reached
	// the target: its timeout is the target's, not the path's. A reused
	// connection proves nothing about the path now (a partition leaves
	// it open); the transport closes it on the timeout, so the next
	// check dials afresh and tells.
	var connected atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { connected.Store(!i.Reused) },
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		o := failed(err)
		o.Unreachable = o.Unreachable && !connected.Load()
		return o
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	o := Outcome{Code: resp.StatusCode, OK: resp.StatusCode >= 200 && resp.StatusCode < 400}
	if !o.OK {
		o.Err = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return o
}

func checkGRPC(ctx context.Context, t Target, c *conn) (Outcome, bool) {
	wasReady := c.grpc.GetState() == connectivity.Ready
	resp, err := healthpb.NewHealthClient(c.grpc).Check(ctx, &healthpb.HealthCheckRequest{Service: t.Service})
	if err == nil {
		st := resp.GetStatus()
		o := Outcome{Code: int(st), OK: st == healthpb.HealthCheckResponse_SERVING}
		if !o.OK {
			o.Err = "grpc health " + st.String()
		}
		return o, false
	}
	switch code := status.Code(err); code {
	case codes.Unavailable:
		// The RPC error does not wrap the dial error, so the dialer
		// remembers whether its last attempt was refused. A reused
		// channel may also fail on a connection that has just closed,
		// without dialing: then one TCP dial tells whether anything
		// still listens.
		if c.refused.Load() || refused(ctx, t) {
			return Outcome{Hard: true, Err: "connection refused"}, true
		}
		// No connection, and not refused: nothing answered.
		return Outcome{Unreachable: true, Err: "unavailable"}, true
	case codes.DeadlineExceeded:
		// A channel that connected during this check reached the
		// target, which did not answer in time: evidence. One that was
		// connected before proves nothing about the path now; it is
		// dropped (broken), so the next check connects afresh and tells.
		return Outcome{Unreachable: wasReady || c.grpc.GetState() != connectivity.Ready, Err: "timeout"}, true
	case codes.Canceled:
		return Outcome{Err: "canceled"}, false
	case codes.Unimplemented:
		return Outcome{Err: "grpc health service unimplemented"}, false
	case codes.NotFound:
		return Outcome{Err: "grpc health service unknown"}, false
	default:
		return Outcome{Err: "grpc " + code.String()}, false
	}
}

// refused reports whether a TCP connection to t.Addr is refused now.
func refused(ctx context.Context, t Target) bool {
	o := checkTCP(ctx, t)
	return o.Hard
}

// failed turns a dial or request error into a failed Outcome; a refused
// connection is Hard, a timeout or an unreachable network or host
// Unreachable.
func failed(err error) Outcome {
	return Outcome{Hard: errors.Is(err, syscall.ECONNREFUSED), Unreachable: unreachable(err), Err: errText(err)}
}

// unreachable reports whether err says that nothing answered: a timeout,
// or no route to the network or host.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}

// errText says briefly what err is, without the addresses and URLs that
// net and net/http put in their messages (a URL may carry a query an
// operator considers secret).
func errText(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op + ": " + innermost(op.Err)
	}
	return innermost(err)
}

// innermost returns the text of the innermost error err wraps, cut to 100
// bytes.
func innermost(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	s := err.Error()
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}
