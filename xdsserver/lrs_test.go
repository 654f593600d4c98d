package xdsserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// placed is an instance of pay.shop at a backend, in a zone of eu.
type placed struct {
	be   backend
	zone string
}

// publishPlaced builds the next table: pay.shop (port grpc) and
// vault.bank (port grpc, no instances), one pay instance per entry, in
// rotation, in its zone.
func publishPlaced(t *testing.T, tb *statustest.Table, ins []placed) {
	t.Helper()
	port := []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: port}}
	for i, in := range ins {
		x := statustest.FromEntry(fmt.Sprintf("pay-%d", i), inRotation, in.be.addr.Addr().String()).In("eu", in.zone)
		x.Incarnation, x.Ports = 7, map[string]uint16{"grpc": in.be.addr.Port()}
		pay.Instances = append(pay.Instances, x)
	}
	tb.Publish(t, pay, statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "bank", Name: "vault", Ports: port}})
}

// collect returns a sink for Config.Outcomes and a function summing what
// reached it, per observer and instance, once want holds (or failing the
// test at the deadline).
func collect(t *testing.T) (func(context.Context, wire.OutcomeBatch) error, func(want func(map[string]wire.EndpointOutcome) bool) map[string]wire.EndpointOutcome) {
	ch := make(chan wire.OutcomeBatch, 100)
	sink := func(_ context.Context, b wire.OutcomeBatch) error { ch <- b; return nil }
	got := map[string]wire.EndpointOutcome{} // by "observer instance"
	wait := func(want func(map[string]wire.EndpointOutcome) bool) map[string]wire.EndpointOutcome {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !want(got) {
			select {
			case b := <-ch:
				if err := b.Validate(); err != nil {
					t.Fatalf("the server handed on an invalid batch: %v", err)
				}
				for _, r := range b.Reports {
					for _, e := range r.Endpoints {
						k := r.Observer + " " + e.Instance
						cur := got[k]
						e.Success += cur.Success
						e.Failure += cur.Failure
						got[k] = e
					}
				}
			case <-deadline:
				t.Fatalf("outcomes handed on: %+v; never what the test waits for", got)
			}
		}
		return got
	}
	return sink, wait
}

// TestLRSWithGRPCClient: grpc-go's own xDS client reports its loads over
// LRS to the server that sent its cluster; the calls it made to an
// instance alone in its locality come out as that instance's outcomes,
// successes and errors, attributed (ACLs off) to the anonymous caller.
func TestLRSWithGRPCClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	a := startBackend(t)
	publishPlaced(t, tb, []placed{{a, "eu-1a"}})
	sink, wait := collect(t)
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Outcomes: sink, LoadReportInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, serve(t, srv), "xds:///pay.shop")
	hc := healthpb.NewHealthClient(cc)
	for i := range 8 {
		svc := "" // the server's own health: OK
		if i%4 == 3 {
			svc = "missing" // NOT_FOUND: an error the client counts
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}, grpc.WaitForReady(true))
		if (err != nil) != (svc != "") {
			t.Fatalf("Check(%q): %v", svc, err)
		}
	}
	got := wait(func(m map[string]wire.EndpointOutcome) bool {
		e := m["xds:anonymous pay-0"]
		return e.Success+e.Failure >= 8
	})
	e := got["xds:anonymous pay-0"]
	if e.Namespace != "shop" || e.Service != "pay" || e.Incarnation != 7 || e.Success != 6 || e.Failure != 2 {
		t.Errorf("outcomes of pay-0 from xds:anonymous: %+v, want shop/pay incarnation 7, 6 successes, 2 failures", e)
	}
}

// lrsClient opens a raw LRS stream to addr with ctx's metadata.
func lrsClient(t *testing.T, ctx context.Context, addr string) grpc.BidiStreamingClient[lrsv3.LoadStatsRequest, lrsv3.LoadStatsResponse] {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func sockAddr(ap netip.AddrPort) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ap.Addr().String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ap.Port())}}}}
}

// TestLRSAttribution: per-endpoint stats are attributed by address, a
// locality's totals only to a locality's one endpoint in rotation;
// stats of several endpoints' locality, of an unknown address, of a
// cluster cairn does not serve or of a namespace the token may not read
// are not taken. With ACLs on the observer is the token's identity.
func TestLRSAttribution(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	be := func(last byte) backend {
		return backend{addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, last}), 8443)}
	}
	publishPlaced(t, tb, []placed{{be(1), "eu-1a"}, {be(2), "eu-1b"}, {be(3), "eu-1b"}})
	a, err := acl.New(acl.Config{Enabled: true, Tokens: []acl.Token{{Secret: shopReader, Scope: acl.Reader, Namespaces: []string{"shop"}}}})
	if err != nil {
		t.Fatal(err)
	}
	sink, wait := collect(t)
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Outcomes: sink, Authorizer: func() *acl.Authorizer { return a },
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	stream := lrsClient(t, withToken(ctx, shopReader), serve(t, srv))
	loc := func(zone string) *corev3.Locality { return &corev3.Locality{Region: "eu", Zone: zone} }
	if err := stream.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "envoy-1"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.SendAllClusters || !resp.ReportEndpointGranularity || resp.LoadReportingInterval.AsDuration() != xdsserver.DefaultLoadReportInterval {
		t.Errorf("LRS response %v, want every cluster, per endpoint, every %v", resp, xdsserver.DefaultLoadReportInterval)
	}
	err = stream.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{
		{ClusterName: "pay.shop:grpc", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{
			// One endpoint alone in its locality: its totals are its own.
			{Locality: loc("eu-1a"), TotalSuccessfulRequests: 10, TotalErrorRequests: 1},
			// Two endpoints: totals cannot be told apart.
			{Locality: loc("eu-1b"), TotalSuccessfulRequests: 5, TotalErrorRequests: 5},
			// Per endpoint: by address; one cairn does not know.
			{Locality: loc("eu-1b"), UpstreamEndpointStats: []*endpointv3.UpstreamEndpointStats{
				{Address: sockAddr(be(3).addr), TotalSuccessfulRequests: 4, TotalErrorRequests: 2},
				{Address: sockAddr(netip.MustParseAddrPort("10.9.9.9:8443")), TotalSuccessfulRequests: 1},
			}},
		}},
		{ClusterName: "vault.bank:grpc", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: loc("eu-1a"), TotalSuccessfulRequests: 3}}},
		{ClusterName: "nobody.shop:grpc", UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: loc("eu-1a"), TotalSuccessfulRequests: 3}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	obs := "xds:reader:" + acl.AccessorOf(acl.DigestOf(shopReader))
	got := wait(func(m map[string]wire.EndpointOutcome) bool { return len(m) >= 2 })
	want := map[string]wire.EndpointOutcome{
		obs + " pay-0": {Namespace: "shop", Service: "pay", Instance: "pay-0", Incarnation: 7, Success: 10, Failure: 1},
		obs + " pay-2": {Namespace: "shop", Service: "pay", Instance: "pay-2", Incarnation: 7, Success: 4, Failure: 2},
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	if len(got) != len(want) {
		t.Fatalf("outcomes for %v, want for pay-0 and pay-2 only", keys)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v (outcomes for %v)", k, got[k], w, keys)
		}
	}
}

// TestLRSAnonymous: with ACLs off a node id is whatever the client says,
// so every stream reports as one caller, xds:anonymous, whatever node ids
// its clients claim: two streams' counts about one endpoint are summed
// under it, never handed on as two voices for the outcome quorum.
func TestLRSAnonymous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	be := backend{addr: netip.MustParseAddrPort("10.0.0.1:8443")}
	publishPlaced(t, tb, []placed{{be, "eu-1a"}})
	sink, wait := collect(t)
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Outcomes: sink, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	for i, node := range []string{"envoy-1", "envoy-2"} {
		stream := lrsClient(t, ctx, addr)
		if err := stream.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: node}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		err := stream.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{ClusterName: "pay.shop:grpc",
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"},
				UpstreamEndpointStats: []*endpointv3.UpstreamEndpointStats{{Address: sockAddr(be.addr),
					TotalSuccessfulRequests: uint64(1 + i), TotalErrorRequests: 5}}}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := wait(func(m map[string]wire.EndpointOutcome) bool {
		e := m["xds:anonymous pay-0"]
		return e.Success+e.Failure >= 13
	})
	if len(got) != 1 {
		t.Errorf("outcomes handed on under %d callers: %+v; want one, xds:anonymous", len(got), got)
	}
	if e := got["xds:anonymous pay-0"]; e.Success != 3 || e.Failure != 10 {
		t.Errorf("xds:anonymous's outcomes of pay-0: %+v, want both streams' summed: 3 successes, 10 failures", e)
	}
}
