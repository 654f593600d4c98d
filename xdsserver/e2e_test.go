package xdsserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds" // grpc-go's xDS resolver and balancers: the real client

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// backend is a real gRPC server on loopback that answers health checks.
type backend struct {
	addr netip.AddrPort
}

func startBackend(t *testing.T) backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return backend{addr: netip.MustParseAddrPort(ln.Addr().String())}
}

// publish builds the next table: service pay.shop (port grpc) with one
// instance per backend, each with the entry given.
func publish(t *testing.T, tb *statustest.Table, backends []backend, entries []status.Entry) {
	t.Helper()
	publishPorts(t, tb, []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}, backends, entries)
}

// publishPorts is publish with the service's ports given; every instance
// listens on each at its backend's port.
func publishPorts(t *testing.T, tb *statustest.Table, ports []status.Port, backends []backend, entries []status.Entry) {
	t.Helper()
	publishServices(t, tb, []status.ServiceInfo{{}, {Namespace: "shop", Name: "pay", MaxEjectionPercent: 10, Ports: ports}}, backends, entries)
}

// publishServices builds the next table with the services given (index
// 0 the empty one), one instance of service 1 per backend, with the
// entries given, listening on each of the service's ports at its
// backend's port, in zone eu-1a of eu.
func publishServices(t testing.TB, tb *statustest.Table, svcs []status.ServiceInfo, backends []backend, entries []status.Entry) {
	t.Helper()
	// The Nth table is built from store revision 1000+N.
	next := uint64(1)
	if cur := tb.Publisher.Acquire(); cur != nil {
		next = cur.Version() + 1
		cur.Release()
	}
	publishServicesAt(t, tb, 1000+next, svcs, backends, entries)
}

// publishServicesAt is publishServices with the table's store revision
// given.
func publishServicesAt(t testing.TB, tb *statustest.Table, rev uint64, svcs []status.ServiceInfo, backends []backend, entries []status.Entry) {
	t.Helper()
	services := make([]statustest.Service, len(svcs)-1)
	for i, svc := range svcs[1:] {
		services[i].ServiceInfo = svc
	}
	for i, be := range backends {
		in := statustest.FromEntry(fmt.Sprintf("pay-%d", i), entries[i], be.addr.Addr().String()).In("eu", "eu-1a")
		in.Ports = map[string]uint16{}
		for _, p := range svcs[1].Ports {
			in.Ports[p.Name] = be.addr.Port()
		}
		services[0].Instances = append(services[0].Instances, in)
	}
	tb.PublishAt(t, rev, services...)
}

var (
	inRotation = status.Entry{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 100, BaseWeight: 100}
	withdrawn  = status.Entry{Verdict: status.Unhealthy, Lifecycle: status.Ready, BaseWeight: 100}
)

// startXDS serves pub's tables over ADS on loopback and returns the
// address.
func startXDS(t *testing.T, pub *status.Publisher) string {
	t.Helper()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv)
}

// serve serves srv on a loopback port, and runs it (following the
// published tables), until the test ends.
func serve(t *testing.T, srv *xdsserver.Server) string {
	t.Helper()
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// dial returns a grpc-go client of target resolved through cairn's xDS
// server at addr, with its own xDS client (so, its own ADS stream).
func dial(t *testing.T, addr, target string) *grpc.ClientConn {
	t.Helper()
	// The bootstrap `cairn xds-bootstrap` prints.
	bootstrap, err := xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: addr, NodeID: "test-client", Region: "eu", Zone: "eu-1a"})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// reached calls Check n times and returns the backends that answered.
func reached(t *testing.T, ctx context.Context, cc *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	hc := healthpb.NewHealthClient(cc)
	for range n {
		var p peer.Peer
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		out[p.Addr.String()]++
	}
	return out
}

// until polls reached until want holds or the deadline passes.
func until(t *testing.T, ctx context.Context, cc *grpc.ClientConn, what string, want func(map[string]int) bool) {
	t.Helper()
	var last map[string]int
	for ctx.Err() == nil {
		if last = reached(t, ctx, cc, 20); want(last) {
			return
		}
	}
	t.Fatalf("%s: never held; last 20 calls reached %v", what, last)
}

// TestGRPCClient: grpc-go's own xDS client, given a bootstrap naming
// cairn's server, resolves xds:///pay.shop and xds:///pay.shop:grpc
// through the listener, cluster and assignment cairn serves, balances
// over the instances in rotation, stops calling one as soon as it is
// withdrawn, and calls it again once it is back.
func TestGRPCClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	a, b := startBackend(t), startBackend(t)
	backends := []backend{a, b}
	publish(t, tb, backends, []status.Entry{inRotation, inRotation})
	addr := startXDS(t, pub)

	for _, target := range []string{"xds:///pay.shop", "xds:///pay.shop:grpc"} {
		cc := dial(t, addr, target)
		both := func(r map[string]int) bool { return r[a.addr.String()] > 0 && r[b.addr.String()] > 0 }
		until(t, ctx, cc, target+": both instances called", both)

		publish(t, tb, backends, []status.Entry{inRotation, withdrawn})
		until(t, ctx, cc, target+": b withdrawn", func(r map[string]int) bool { return r[b.addr.String()] == 0 })

		publish(t, tb, backends, []status.Entry{inRotation, inRotation})
		until(t, ctx, cc, target+": b back", both)
	}
}
