package xdsserver_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
)

// draining is an instance being drained: in the assignment, DRAINING.
var draining = cstatus.Entry{Verdict: cstatus.Healthy, Lifecycle: cstatus.Draining, BaseWeight: 100}

// payCartAt publishes pay.shop (port grpc, the fixed backends with the
// entries given) and, with cart, cart.shop, from store revision rev.
func payCartAt(t *testing.T, tb *statustest.Table, rev uint64, cart bool, entries []cstatus.Entry) {
	t.Helper()
	svcs := []cstatus.ServiceInfo{{}, {Namespace: "shop", Name: "pay", Ports: []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}}}
	if cart {
		svcs = append(svcs, cstatus.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []cstatus.Port{{Name: "http", Number: 80, Protocol: "tcp"}}})
	}
	publishServicesAt(t, tb, rev, svcs, fixedBackends(), entries)
}

// startXDSMetered is startXDS with the server's metrics in reg.
func startXDSMetered(t *testing.T, pub *cstatus.Publisher, reg *prometheus.Registry) string {
	t.Helper()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Registerer: reg, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv)
}

// waitRefreshes waits until the server whose metrics reg holds has
// followed n tables.
func waitRefreshes(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "cairn_xds_table_refreshes_total" && mf.GetMetric()[0].GetCounter().GetValue() >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server has not followed %v tables within 10s", n)
		}
		time.Sleep(5 * time.Millisecond) // a poll with a deadline
	}
}

// revOf returns the store revision a wire version names.
func revOf(v string) uint64 {
	rev, _ := xdsserver.ParseVersion(v)
	return rev
}

// endpointsOf returns the addresses of a delta response's assignment
// name, and whether the response carries it.
func endpointsOf(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse, name string) ([]string, bool) {
	t.Helper()
	for _, r := range resp.Resources {
		if r.Name == name {
			return endpoints(t, &discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{r.Resource}}), true
		}
	}
	return nil, false
}

// TestDeltaResumeNeverOlder: a delta client that held an assignment
// with an instance draining (and cart's) reconnects to a server restored
// from an older table (both in rotation, no cart), naming what it holds.
// That server sends nothing older and removes nothing: its first answer
// is empty. Once its table passes the revision the client holds, it
// sends its view — the same content it had at the older revision, so
// only the revision wakes the stream — and removes cart. On one stream,
// a table older than one already sent from sends nothing, not even a
// newly subscribed name, until a newer one comes.
func TestDeltaResumeNeverOlder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newerTable := statustest.New(t, 8)
	newer := newerTable.Publisher
	payCartAt(t, newerTable, 1002, true, []cstatus.Entry{inRotation, draining})
	c := newDeltaClient(t, ctx, startXDS(t, newer))
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"}})
	r1 := c.recv(resourcev3.EndpointType)
	expect(t, "the first answer", r1, []string{"cart.shop:http", "pay.shop:grpc"}, nil)
	held := versions(r1)
	for name, v := range held {
		if revOf(v) != 1002 {
			t.Fatalf("%s sent at version %q, want revision 1002 in it", name, v)
		}
	}
	c.ack(r1, false)

	restoredTable := statustest.New(t, 8)
	restored := restoredTable.Publisher
	payCartAt(t, restoredTable, 900, false, []cstatus.Entry{inRotation, inRotation})
	reg := prometheus.NewRegistry()
	c2 := newDeltaClient(t, ctx, startXDSMetered(t, restored, reg))
	c2.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"},
		InitialResourceVersions: held})
	first := c2.recv(resourcev3.EndpointType)
	expect(t, "the first answer of a server behind", first, nil, nil)
	waitRefreshes(t, reg, 1)

	// Past the client's revision, with pay's content unchanged since 900.
	payCartAt(t, restoredTable, 1100, false, []cstatus.Entry{inRotation, inRotation})
	r2 := c2.recv(resourcev3.EndpointType)
	expect(t, "once the table passes the client's", r2, []string{"pay.shop:grpc"}, []string{"cart.shop:http"})
	if v := versions(r2)["pay.shop:grpc"]; revOf(v) != 1100 {
		t.Fatalf("pay sent at version %q, want revision 1100 in it", v)
	}
	if eps, _ := endpointsOf(t, r2, "pay.shop:grpc"); len(eps) != 2 {
		t.Fatalf("pay's assignment: %v, want both backends", eps)
	}
	c2.ack(r2, false)

	// A table older than one the stream was sent from: nothing, not even
	// the answer to a new subscription, until a newer table.
	payCartAt(t, restoredTable, 1050, true, []cstatus.Entry{inRotation, withdrawn})
	waitRefreshes(t, reg, 3)
	c2.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"cart.shop:http"}})
	payCartAt(t, restoredTable, 1200, true, []cstatus.Entry{inRotation, withdrawn})
	r3 := c2.recv(resourcev3.EndpointType)
	expect(t, "after an older table, a newer one", r3, []string{"cart.shop:http", "pay.shop:grpc"}, nil)
	for name, v := range versions(r3) {
		if revOf(v) != 1200 {
			t.Fatalf("%s sent at version %q, want revision 1200 in it (nothing from the older table)", name, v)
		}
	}
}

// TestDeltaResumeSameContent: a client holding, at a newer revision, the
// very content a server behind has is not sent it again, and the
// server's revisions never replace what the client names it by.
func TestDeltaResumeSameContent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := payHeldAt(ctx, t, 1002, []cstatus.Entry{inRotation, inRotation})
	c2, _ := payResumedAt(ctx, t, 900, []cstatus.Entry{inRotation, inRotation}, held)
	expect(t, "the same content from a server behind", c2.recv(resourcev3.EndpointType), nil, nil)
}

// payHeldAt returns the versions a delta client subscribed to pay is sent
// by a server whose table, at store revision rev, holds pay's backends
// in the states es.
func payHeldAt(ctx context.Context, t *testing.T, rev uint64, es []cstatus.Entry) map[string]string {
	t.Helper()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	payCartAt(t, tb, rev, false, es)
	c := newDeltaClient(t, ctx, startXDS(t, pub))
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	return versions(c.recv(resourcev3.EndpointType))
}

// payResumedAt starts a server whose table, at store revision rev, holds
// pay's backends in the states es, and a delta client that subscribes to
// pay naming held in initial_resource_versions; it returns the client and
// the server's table.
func payResumedAt(ctx context.Context, t *testing.T, rev uint64, es []cstatus.Entry, held map[string]string) (*deltaClient, *statustest.Table) {
	t.Helper()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	payCartAt(t, tb, rev, false, es)
	c := newDeltaClient(t, ctx, startXDS(t, pub))
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"},
		InitialResourceVersions: held})
	return c, tb
}

// TestSotWResumeNeverOlder: a state-of-the-world client (grpc-go's kind)
// that held assignments with an instance draining reconnects to a server
// restored from an older table, naming in version_info the version it
// holds: its assignments are not answered (the cluster request it sends
// next is), until the table passes the revision in that version; then
// they are, from that table. A client whose version names the very
// content the server behind has is answered at once, with its own
// version.
func TestSotWResumeNeverOlder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newerTable := statustest.New(t, 8)
	newer := newerTable.Publisher
	payCartAt(t, newerTable, 1002, false, []cstatus.Entry{inRotation, draining})
	c := newADSClient(t, ctx, startXDS(t, newer))
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	r1 := c.recv(resourcev3.EndpointType)
	if revOf(r1.VersionInfo) != 1002 {
		t.Fatalf("version_info %q, want revision 1002 in it", r1.VersionInfo)
	}

	restoredTable := statustest.New(t, 8)
	restored := restoredTable.Publisher
	payCartAt(t, restoredTable, 900, false, []cstatus.Entry{inRotation, inRotation})
	addr := startXDS(t, restored)
	c2 := newADSClient(t, ctx, addr)
	if err := c2.stream.Send(&discoveryv3.DiscoveryRequest{Node: c2.node, TypeUrl: resourcev3.EndpointType,
		ResourceNames: []string{"pay.shop:grpc"}, VersionInfo: r1.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	// Requests are answered in order: a cluster answer first means the
	// assignments were not answered.
	c2.send(resourcev3.ClusterType, nil, nil, false)
	if got := names(t, c2.recv(resourcev3.ClusterType)); !slices.Equal(got, []string{"pay.shop:grpc"}) {
		t.Fatalf("clusters: %v", got)
	}
	payCartAt(t, restoredTable, 1100, false, []cstatus.Entry{inRotation, inRotation})
	r2 := c2.recv(resourcev3.EndpointType)
	if revOf(r2.VersionInfo) != 1100 || len(endpoints(t, r2)) != 2 {
		t.Fatalf("once the table passes the client's: version %q, endpoints %v; want revision 1100, both backends", r2.VersionInfo, endpoints(t, r2))
	}

	// The same content, named at a newer revision: answered at once, as
	// the client names it.
	payCartAt(t, newerTable, 1003, false, []cstatus.Entry{inRotation, inRotation})
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, r1, false)
	same := c.recv(resourcev3.EndpointType)
	c3 := newADSClient(t, ctx, startXDSAt(t, 900))
	if err := c3.stream.Send(&discoveryv3.DiscoveryRequest{Node: c3.node, TypeUrl: resourcev3.EndpointType,
		ResourceNames: []string{"pay.shop:grpc"}, VersionInfo: same.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if r := c3.recv(resourcev3.EndpointType); r.VersionInfo != same.VersionInfo || len(endpoints(t, r)) != 2 {
		t.Fatalf("the same content from a server behind: version %q, endpoints %v; want %q, both backends", r.VersionInfo, endpoints(t, r), same.VersionInfo)
	}
}

// startXDSAt serves a table of pay with both backends in rotation, from
// store revision rev.
func startXDSAt(t *testing.T, rev uint64) string {
	t.Helper()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	payCartAt(t, tb, rev, false, []cstatus.Entry{inRotation, inRotation})
	return startXDS(t, pub)
}

// TestDeltaHoldEndsWithAnAnswer: when a server's table passes what a
// client holds and its content is then what the client holds, nothing
// is to be sent, but the server answers all the same, empty, naming the
// newer revision: the client (an agent) learns the server caught up.
func TestDeltaHoldEndsWithAnAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := payHeldAt(ctx, t, 1002, []cstatus.Entry{inRotation, draining})
	c2, restored := payResumedAt(ctx, t, 900, []cstatus.Entry{inRotation, inRotation}, held)
	if r := c2.recv(resourcev3.EndpointType); len(r.Resources)+len(r.RemovedResources) != 0 || r.SystemVersionInfo != "900" {
		t.Fatalf("first answer: %v removed %v at %q; want empty, at 900", r.Resources, r.RemovedResources, r.SystemVersionInfo)
	}
	payCartAt(t, restored, 1100, false, []cstatus.Entry{inRotation, draining})
	if r := c2.recv(resourcev3.EndpointType); len(r.Resources)+len(r.RemovedResources) != 0 || r.SystemVersionInfo != "1100" {
		t.Fatalf("once caught up: %v removed %v at %q; want empty, at 1100", r.Resources, r.RemovedResources, r.SystemVersionInfo)
	}
}
