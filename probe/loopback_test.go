package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// countingListener counts the connections it accepts and reports each
// one's close on closed.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
	closed   chan struct{}
}

func newCountingListener(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &countingListener{Listener: ln, closed: make(chan struct{}, 1000)}
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countingConn{Conn: c, closed: l.closed}, nil
}

type countingConn struct {
	net.Conn
	once   atomic.Bool
	closed chan<- struct{}
}

func (c *countingConn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		c.closed <- struct{}{}
	}
	return c.Conn.Close()
}

// loopbackServers is an HTTP and a gRPC health server on loopback.
type loopbackServers struct {
	httpLn, grpcLn *countingListener
	httpHits       atomic.Int64
	http, grpc     netip.AddrPort
}

func startServers(t *testing.T) *loopbackServers {
	t.Helper()
	s := &loopbackServers{httpLn: newCountingListener(t), grpcLn: newCountingListener(t)}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.httpHits.Add(1)
	}))
	hs.Listener = s.httpLn
	hs.Start()
	t.Cleanup(hs.Close)
	s.http = addrOf(t, s.httpLn.Addr())

	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(s.grpcLn)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	s.grpc = addrOf(t, s.grpcLn.Addr())
	return s
}

// waitBatch reads p's batches until pred holds for one, for at most 10 s.
func waitBatch(t *testing.T, p *Prober, what string, pred func(map[string]Result) bool) map[string]Result {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var last map[string]Result
	for {
		select {
		case b := <-p.Batches():
			last = map[string]Result{}
			for _, r := range b.Results {
				if r.TargetID != "" {
					last[r.TargetID] = r
				}
			}
			if pred(last) {
				return last
			}
		case <-deadline:
			t.Fatalf("no batch with %s within 10 s; last %+v", what, last)
		}
	}
}

func TestProberLoopback(t *testing.T) {
	srv := startServers(t)
	tcpLn := listen(t) // the kernel accepts connections into its backlog
	const interval = 300 * time.Millisecond
	mk := func(id string, k Kind, a netip.AddrPort) Target {
		return Target{ID: id, Kind: k, Addr: a, Interval: interval, Timeout: interval}
	}
	targets := []Target{
		mk("http", HTTP, srv.http),
		mk("grpc", GRPC, srv.grpc),
		mk("tcp", TCP, addrOf(t, tcpLn.Addr())),
		mk("refused", TCP, closedAddr(t)),
	}
	p, _ := newTestProber(t, Config{Capacity: 8, BatchInterval: 100 * time.Millisecond, Observer: "node-x"}, nil)
	if err := p.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)

	got := waitBatch(t, p, "every target probed and HTTP probed 5 times", func(rs map[string]Result) bool {
		return len(rs) == 4 && srv.httpHits.Load() >= 5
	})
	for id, want := range map[string]Outcome{
		"http":    {OK: true, Code: 200},
		"grpc":    {OK: true, Code: 1},
		"tcp":     {OK: true},
		"refused": {Hard: true, Err: "connection refused"},
	} {
		o := got[id].Outcome
		o.Latency = 0
		if o != want || got[id].Observer != "node-x" {
			t.Errorf("%s: %+v from %q; want %+v from node-x", id, got[id], got[id].Observer, want)
		}
	}
	// Probes of one target reuse its connection.
	if n := srv.httpLn.accepted.Load(); n != 1 {
		t.Errorf("HTTP server accepted %d connections for %d probes; want 1", n, srv.httpHits.Load())
	}
	if n := srv.grpcLn.accepted.Load(); n != 1 {
		t.Errorf("gRPC server accepted %d connections; want 1", n)
	}

	// Removing the targets closes their connections.
	if err := p.SetTargets(targets[2:]); err != nil {
		t.Fatal(err)
	}
	for _, ln := range []*countingListener{srv.httpLn, srv.grpcLn} {
		select {
		case <-ln.closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("connection to %v still open 10 s after its target was removed", ln.Addr())
		}
	}
	waitBatch(t, p, "only the TCP targets", func(rs map[string]Result) bool {
		_, h := rs["http"]
		_, g := rs["grpc"]
		return len(rs) == 2 && !h && !g
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestProberWithoutConnCache(t *testing.T) {
	srv := startServers(t)
	p, _ := newTestProber(t, Config{Capacity: 2, BatchInterval: 100 * time.Millisecond, ConnCache: -1}, nil)
	tg := Target{ID: "http", Kind: HTTP, Addr: srv.http, Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}
	if err := p.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)
	waitBatch(t, p, "3 HTTP probes", func(map[string]Result) bool { return srv.httpHits.Load() >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if a, h := srv.httpLn.accepted.Load(), srv.httpHits.Load(); a != h {
		t.Errorf("%d connections for %d probes; want one each", a, h)
	}
}

// TestProberCancelsProbes checks that Run returns promptly with a probe in
// flight: ctx cancels it.
func TestProberCancelsProbes(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	p, _ := newTestProber(t, Config{Capacity: 1}, func(ctx context.Context, _ Target) Outcome {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return Outcome{Err: "canceled"}
	})
	tg := Target{ID: "x", Kind: TCP, Addr: netip.MustParseAddrPort("127.0.0.1:9"), Interval: MinInterval, Timeout: MinInterval}
	if err := p.SetTargets([]Target{tg}); err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
