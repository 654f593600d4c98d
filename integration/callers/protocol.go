package callers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// Protocol is how a caller speaks to an instance it was given.
type Protocol string

// The protocols of the fleet's instances.
const (
	// HTTP: GET / answers 200, body and header X-Cairn-Instance the
	// instance id.
	HTTP Protocol = "http"
	// GRPC: grpc.health.v1 Health/Check, the instance id in the response
	// header metadata x-cairn-instance.
	GRPC Protocol = "grpc"
	// TCP: the instance writes its id and a newline, then closes.
	TCP Protocol = "tcp"
)

// Header and metadata key naming the instance that answered.
const (
	InstanceHeader   = "X-Cairn-Instance"
	InstanceMetadata = "x-cairn-instance"
	// CallerService is the service a caller's Health/Check names, so
	// that an instance tells a caller's request from a probe's (which
	// names the check's service, "" by default).
	CallerService = "caller"
)

// maxLine bounds what a TCP caller reads of an instance's line.
const maxLine = 256

// sender sends one request to an address in a protocol, from an optional
// source address: a legacy client, a new connection per request (HTTP
// and TCP), one channel per address of the current answer (gRPC: a
// channel keeps its connection, and reconnects after a refusal with a
// backoff of at most grpcMaxBackoff, so that an instance that recovers
// is called again within a second; the channel of an address that left
// the answer is closed once its requests are done).
type sender struct {
	proto  Protocol
	dialer *net.Dialer
	// sourceFor, if set, picks the local address per destination
	// (Config.SourceFor).
	sourceFor func(netip.Addr) netip.Addr
	http      *http.Client
	timeout   time.Duration

	mu    sync.Mutex
	conns map[string]*channel
}

// channel is a gRPC channel to one address and the requests using it.
type channel struct {
	cc    *grpc.ClientConn
	users int
	gone  bool // left the answer: closed when its last user is done
}

// grpcMaxBackoff bounds the wait of a gRPC channel between connection
// attempts (grpc-go's default grows to 120 s, failing every call at once
// meanwhile: an instance back after a fault would be reported failing
// long after it recovered).
const grpcMaxBackoff = time.Second

func newSender(proto Protocol, source net.IP, sourceFor func(netip.Addr) netip.Addr, timeout time.Duration) (*sender, error) {
	d := &net.Dialer{}
	if source != nil {
		d.LocalAddr = &net.TCPAddr{IP: source}
	}
	s := &sender{proto: proto, dialer: d, sourceFor: sourceFor, timeout: timeout, conns: map[string]*channel{}}
	switch proto {
	case HTTP:
		s.http = &http.Client{Transport: &http.Transport{DialContext: s.dial, DisableKeepAlives: true}}
	case GRPC, TCP:
	default:
		return nil, fmt.Errorf("callers: protocol must be http, grpc or tcp, got %q", proto)
	}
	return s, nil
}

// send sends one request to addr and returns the instance that answered.
func (s *sender) send(ctx context.Context, addr string) (string, error) {
	switch s.proto {
	case HTTP:
		return s.sendHTTP(ctx, "http://"+addr+"/")
	case GRPC:
		ch, err := s.conn(addr)
		if err != nil {
			return "", err
		}
		defer s.release(ch)
		return checkHealth(ctx, ch.cc)
	default:
		return s.sendTCP(ctx, addr)
	}
}

func (s *sender) sendHTTP(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	return doHTTP(s.http, req)
}

// doHTTP sends req and returns the instance the answer names; a status
// other than 200 is a failure (of the instance that named itself, if
// one did).
func doHTTP(c *http.Client, req *http.Request) (string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	who := resp.Header.Get(InstanceHeader)
	if resp.StatusCode != http.StatusOK {
		return who, statusError(resp.StatusCode)
	}
	return who, err
}

// statusError is an HTTP answer other than 200.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("status %d", int(e)) }

// dial connects to addr ("host:port"), from the address sourceFor
// picks for it if any, else as the dialer does.
func (s *sender) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialFrom(ctx, s.dialer, s.sourceFor, network, addr)
}

// dialFrom dials addr with d, or from the local address sourceFor picks
// for addr's host when it picks one.
func dialFrom(ctx context.Context, d *net.Dialer, sourceFor func(netip.Addr) netip.Addr, network, addr string) (net.Conn, error) {
	if sourceFor != nil {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			if src := sourceFor(ap.Addr().Unmap()); src.IsValid() {
				return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}).DialContext(ctx, network, addr)
			}
		}
	}
	return d.DialContext(ctx, network, addr)
}

func (s *sender) sendTCP(ctx context.Context, addr string) (string, error) {
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxLine)).ReadString('\n')
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(line)
	if id == "" {
		return "", errors.New("empty line")
	}
	return id, nil
}

// conn returns the gRPC channel to addr, made on first use, for one
// request: release it after.
func (s *sender) conn(addr string) (*channel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.conns[addr]; ch != nil {
		ch.users++
		return ch, nil
	}
	timeout := s.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 100*time.Millisecond, grpcMaxBackoff
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: timeout}),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return s.dial(ctx, "tcp", a)
		}))
	if err != nil {
		return nil, err
	}
	ch := &channel{cc: cc, users: 1}
	s.conns[addr] = ch
	return ch, nil
}

// release ends a request's use of ch.
func (s *sender) release(ch *channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.users--
	if ch.gone && ch.users == 0 {
		ch.cc.Close()
	}
}

// retain keeps the channels of addrs (the current answer) and closes the
// others once their requests are done.
func (s *sender) retain(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, ch := range s.conns {
		if slices.Contains(addrs, a) {
			continue
		}
		delete(s.conns, a)
		ch.gone = true
		if ch.users == 0 {
			ch.cc.Close()
		}
	}
}

func (s *sender) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.conns {
		ch.cc.Close()
	}
	clear(s.conns)
	if s.http != nil {
		s.http.CloseIdleConnections()
	}
}

// checkHealth calls Health/Check on cc and returns the instance its
// header names. A status other than SERVING is a failure.
func checkHealth(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) (string, error) {
	var md metadata.MD
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: CallerService}, append(opts, grpc.Header(&md))...)
	who := ""
	if v := md.Get(InstanceMetadata); len(v) > 0 {
		who = v[0]
	}
	if err != nil {
		return who, err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return who, fmt.Errorf("health status %s", resp.GetStatus())
	}
	return who, nil
}
