package xdsserver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/agentview"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
)

// testClock is a clock the test moves, safe for the server's goroutines.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// deltaStreams opens raw delta ADS streams on one connection to addr,
// whose header and trailer a test reads.
type deltaStreams struct {
	t   *testing.T
	ctx context.Context
	cc  *grpc.ClientConn
}

func newDeltaStreams(t *testing.T, ctx context.Context, addr string) *deltaStreams {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &deltaStreams{t: t, ctx: ctx, cc: cc}
}

type deltaStream = grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// open opens a stream subscribing to pay.shop:grpc's assignment, naming
// held as what the client holds, and returns it with its first response
// or the error that ended it.
func (d *deltaStreams) open(held map[string]string) (deltaStream, *discoveryv3.DeltaDiscoveryResponse, error) {
	d.t.Helper()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(d.cc).DeltaAggregatedResources(d.ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	err = s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "stale-test"}, TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"pay.shop:grpc"}, InitialResourceVersions: held})
	if err != nil && !errors.Is(err, io.EOF) { // a refusal: Recv says why
		d.t.Fatalf("send: %v", err)
	}
	resp, err := s.Recv()
	return s, resp, err
}

// staleAge reads agentview.StaleAgeKey from metadata values.
func staleAge(t *testing.T, vals []string) time.Duration {
	t.Helper()
	age, ok := agentview.ParseStaleAge(vals)
	if !ok {
		t.Fatalf("%s: %v; want one count of milliseconds", agentview.StaleAgeKey, vals)
	}
	return age
}

// wantStale checks err is UNAVAILABLE saying the server is stale.
func wantStale(t *testing.T, what string, err error) {
	t.Helper()
	if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(grpcstatus.Convert(err).Message(), "stale") {
		t.Fatalf("%s: %v; want UNAVAILABLE saying the server is stale", what, err)
	}
}

// TestStaleServerLetsSubscribersGo: past StaleAfter without a sync, the
// server ends its open streams with UNAVAILABLE (the view's age in the
// trailer) and refuses a client that holds a view, of either protocol;
// a client that holds nothing is served the stale view, told so in the
// header. Fresh again, the stream served stale ends (its client comes
// back to a fresh stream) and clients that hold a view are admitted.
func TestStaleServerLetsSubscribersGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	c := &testClock{t: time.Unix(1_000_000, 0)}
	var mu sync.Mutex
	synced := c.now()
	resync := func() { mu.Lock(); defer mu.Unlock(); synced = c.now() }
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Now: c.now, StaleAfter: 5 * time.Second,
		LastSync: func() time.Time { mu.Lock(); defer mu.Unlock(); return synced },
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	ds := newDeltaStreams(t, ctx, addr)

	s, resp, err := ds.open(nil)
	if err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	held := versions(resp)

	// No sync for 6 s: stale. The open stream ends.
	c.add(6 * time.Second)
	for {
		if _, err = s.Recv(); err != nil {
			break
		}
	}
	wantStale(t, "the open stream once stale", err)
	if age := staleAge(t, s.Trailer().Get(agentview.StaleAgeKey)); age != 6*time.Second {
		t.Errorf("trailer age %v; want 6s", age)
	}

	// A client that holds a view is refused, delta or state of the world.
	_, _, err = ds.open(held)
	wantStale(t, "a delta client holding a view, stale", err)
	sotw := newADSClient(t, ctx, addr)
	if err := sotw.stream.Send(&discoveryv3.DiscoveryRequest{Node: sotw.node, TypeUrl: resourcev3.EndpointType,
		ResourceNames: []string{"pay.shop:grpc"}, VersionInfo: "v1"}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = sotw.stream.Recv()
	wantStale(t, "a state-of-the-world client holding a view, stale", err)

	// A client that holds nothing is served, and told the view is stale.
	bare, resp, err := ds.open(nil)
	if err != nil || len(resp.Resources) != 1 {
		t.Fatalf("a client holding nothing, stale: %v, %v; want the stale view", resp, err)
	}
	hdr, err := bare.Header()
	if err != nil {
		t.Fatal(err)
	}
	if age := staleAge(t, hdr.Get(agentview.StaleAgeKey)); age < 6*time.Second {
		t.Errorf("header age %v; want at least 6s", age)
	}

	// Fresh again: the stream served stale ends, and a client that holds
	// a view is admitted.
	resync()
	for {
		if _, err = bare.Recv(); err != nil {
			break
		}
	}
	if grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(grpcstatus.Convert(err).Message(), "fresh again") {
		t.Fatalf("the stream served stale, fresh again: %v; want UNAVAILABLE, fresh again", err)
	}
	var fresh deltaStream
	for {
		// The server sees the sync within its check interval.
		fresh, resp, err = ds.open(held)
		if grpcstatus.Code(err) != codes.Unavailable {
			break
		}
	}
	if err != nil {
		t.Fatalf("a client holding a view, fresh again: %v", err)
	}
	if len(resp.Resources) != 0 {
		t.Errorf("a client holding the current view, fresh again: sent %d resources, want none", len(resp.Resources))
	}
	if hdr, err := fresh.Header(); err != nil || len(hdr.Get(agentview.StaleAgeKey)) != 0 {
		t.Errorf("a fresh stream's header %v (%v); want no %s", hdr, err, agentview.StaleAgeKey)
	}
}

// TestFailoverCap: a server's subscribers move to another at once (it
// died, or let them go): those that hold a view are admitted at most the
// floor of 50 per 10 s, the rest refused with UNAVAILABLE, and admitted
// in the next 10 s; a new client, holding nothing, is not held back.
func TestFailoverCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	c := &testClock{t: time.Unix(1_000_000, 0)}
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Now: c.now, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	ds := newDeltaStreams(t, ctx, addr)
	_, resp, err := ds.open(nil)
	if err != nil {
		t.Fatal(err)
	}
	held := versions(resp)

	admitted, refused := 0, 0
	for range 60 {
		_, _, err := ds.open(held)
		switch {
		case err == nil:
			admitted++
		case grpcstatus.Code(err) == codes.Unavailable && strings.Contains(grpcstatus.Convert(err).Message(), "gradually"):
			refused++
		default:
			t.Fatalf("a reconnecting stream: %v", err)
		}
	}
	if admitted != 50 || refused != 10 {
		t.Errorf("60 reconnections at once: %d admitted, %d refused; want 50 and 10", admitted, refused)
	}
	if _, _, err := ds.open(nil); err != nil {
		t.Errorf("a new client while reconnections are capped: %v; want it admitted", err)
	}
	c.add(10 * time.Second)
	for i := range refused {
		if _, _, err := ds.open(held); err != nil {
			t.Errorf("refused reconnection %d, 10 s later: %v; want it admitted", i+1, err)
		}
	}
}

// counter returns the value of family name's series with label value
// reason, 0 if it has none.
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestGRPCClientKeepsItsViewFromAStaleServer: grpc-go's own xDS client,
// its stream ended by a server turned stale, reconnects naming the
// versions it holds (so it is refused, not served the stale view again)
// and keeps calling both instances from the view it holds.
func TestGRPCClientKeepsItsViewFromAStaleServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	a, b := startBackend(t), startBackend(t)
	publish(t, tb, []backend{a, b}, []cstatus.Entry{inRotation, inRotation})
	var mu sync.Mutex
	stale := false
	reg := prometheus.NewRegistry()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Registerer: reg, StaleAfter: time.Second,
		LastSync: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			if stale {
				return time.Now().Add(-time.Minute)
			}
			return time.Now()
		},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, serve(t, srv), "xds:///pay.shop")
	both := func(r map[string]int) bool { return r[a.addr.String()] > 0 && r[b.addr.String()] > 0 }
	until(t, ctx, cc, "both instances called", both)

	mu.Lock()
	stale = true
	mu.Unlock()
	for counter(t, reg, "cairn_xds_streams_let_go_total", "stale") < 1 || counter(t, reg, "cairn_xds_streams_refused_total", "stale") < 1 {
		if ctx.Err() != nil {
			t.Fatalf("the stream was never ended and the client's reconnection never refused: let go %v, refused %v",
				counter(t, reg, "cairn_xds_streams_let_go_total", "stale"), counter(t, reg, "cairn_xds_streams_refused_total", "stale"))
		}
		time.Sleep(10 * time.Millisecond) // polling a counter, bounded by ctx
	}
	if r := reached(t, ctx, cc, 40); !both(r) {
		t.Errorf("grpc-go, its server stale: calls reached %v; want both instances, from the view it holds", r)
	}
}
