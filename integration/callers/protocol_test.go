package callers

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/integration"
)

type healthID struct {
	healthpb.UnimplementedHealthServer
	id string
}

func (h healthID) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(InstanceMetadata, h.id)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveHealth serves Health/Check on addr ("127.0.0.1:0" for any port)
// and returns the address and a stop func.
func serveHealth(t *testing.T, addr, id string) (string, func()) {
	t.Helper()
	var ln net.Listener
	if err := integration.Poll(2*time.Second, 20*time.Millisecond, func() (err error) {
		ln, err = net.Listen("tcp", addr) // the port may take a moment to be free again
		return err
	}); err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, healthID{id: id})
	go func() { _ = gs.Serve(ln) }()
	return ln.Addr().String(), gs.Stop
}

// TestGRPCChannelRecovers: after an instance refused connections for a
// while, its channel calls it again within about a second of its return
// (grpc-go's default backoff would wait several seconds, failing every
// call meanwhile).
func TestGRPCChannelRecovers(t *testing.T) {
	addr, stop := serveHealth(t, "127.0.0.1:0", "i-0")
	s, err := newSender(GRPC, nil, nil, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := s.send(ctx, addr)
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	stop()
	// Refused for 6 s at the callers' rate: grpc-go's default backoff
	// would have grown past 4 s by then.
	refused := time.Now()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for range tk.C {
		if time.Since(refused) > 6*time.Second {
			break
		}
		_ = call()
	}
	_, stop = serveHealth(t, addr, "i-0")
	defer stop()
	back := time.Now()
	if err := integration.Poll(2500*time.Millisecond, 50*time.Millisecond, call); err != nil {
		t.Fatalf("still failing %v after the instance came back: %v", time.Since(back), err)
	}
	t.Logf("called again %v after the instance came back", time.Since(back).Round(time.Millisecond))
}

// TestGRPCChannelsRetained: the channel of an address that left the
// answer is closed once its last request is done; the others are kept.
func TestGRPCChannelsRetained(t *testing.T) {
	s, err := newSender(GRPC, nil, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	a, err := s.conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.conn("127.0.0.2:1")
	if err != nil {
		t.Fatal(err)
	}
	s.release(b)
	s.retain([]string{"127.0.0.2:1"})
	if a.cc.GetState() == connectivity.Shutdown {
		t.Fatal("closed while a request used it")
	}
	s.release(a)
	if a.cc.GetState() != connectivity.Shutdown {
		t.Error("the channel of an address no longer in the answer was not closed")
	}
	if b.cc.GetState() == connectivity.Shutdown || len(s.conns) != 1 {
		t.Error("the channel of an address in the answer was closed")
	}
}

// TestSourceFor: a request leaves from the address SourceFor picks for
// its destination, over HTTP, TCP and gRPC, and from the sender's
// default source where it picks none (the zero Addr).
func TestSourceFor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("binds 127.0.0.0/8 addresses other than 127.0.0.1: Linux's loopback holds them all")
	}
	picked := netip.MustParseAddr("127.0.0.7")
	def := net.ParseIP("127.0.0.9")
	// One listener per protocol, each noting the peer of what it
	// accepts.
	var mu sync.Mutex
	var peers []string
	note := func(a net.Addr) {
		mu.Lock()
		defer mu.Unlock()
		host, _, _ := net.SplitHostPort(a.String())
		peers = append(peers, host)
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(peers) == 0 {
			return ""
		}
		return peers[len(peers)-1]
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	httpLn := listen()
	go func() {
		_ = http.Serve(httpLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ap, _ := netip.ParseAddrPort(r.RemoteAddr)
			note(net.TCPAddrFromAddrPort(ap))
			w.Header().Set(InstanceHeader, "h")
		}))
	}()
	tcpLn := listen()
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			note(c.RemoteAddr())
			_, _ = c.Write([]byte("t\n"))
			c.Close()
		}
	}()
	grpcLn := listen()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, healthID{id: "g"})
	go func() { _ = gs.Serve(&noteListener{Listener: grpcLn, note: note}) }()
	t.Cleanup(gs.Stop)

	for _, tc := range []struct {
		proto Protocol
		addr  string
	}{{HTTP, httpLn.Addr().String()}, {TCP, tcpLn.Addr().String()}, {GRPC, grpcLn.Addr().String()}} {
		for _, pick := range []bool{true, false} {
			s, err := newSender(tc.proto, def, func(dst netip.Addr) netip.Addr {
				if pick && dst == netip.MustParseAddr("127.0.0.1") {
					return picked
				}
				return netip.Addr{}
			}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = s.send(ctx, tc.addr)
			cancel()
			s.close()
			if err != nil {
				t.Fatalf("%s: %v", tc.proto, err)
			}
			want := def.String()
			if pick {
				want = picked.String()
			}
			if got := last(); got != want {
				t.Errorf("%s, SourceFor picking %v: the request came from %s; want %s", tc.proto, pick, got, want)
			}
		}
	}
}

// noteListener notes the peer of every connection it accepts.
type noteListener struct {
	net.Listener
	note func(net.Addr)
}

func (l *noteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.note(c.RemoteAddr())
	}
	return c, err
}
