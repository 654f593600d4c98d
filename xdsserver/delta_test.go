package xdsserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// deltaClient is the protocol tests' incremental ADS client: no delta
// client exists in grpc-go (it speaks state of the world only) or
// go-control-plane, and Envoy cannot run here, so the tests speak the
// protocol themselves, one message at a time, through xdstest's client
// (the one the bench's load generator uses), failing the test on error.
type deltaClient struct {
	t *testing.T
	s *xdstest.Stream
}

func newDeltaClient(t *testing.T, ctx context.Context, addr string) *deltaClient {
	t.Helper()
	cc, err := xdstest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := xdstest.Open(ctx, cc, xdstest.Options{Node: &corev3.Node{Id: "delta", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, s: s}
}

func (c *deltaClient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// ack acknowledges resp (or, with nack, refuses it).
func (c *deltaClient) ack(resp *discoveryv3.DeltaDiscoveryResponse, nack bool) {
	c.t.Helper()
	var err error
	if nack {
		err = c.s.Nack(resp, "refused by the test")
	} else {
		err = c.s.Ack(resp)
	}
	if err != nil {
		c.t.Fatalf("ack: %v", err)
	}
}

// recv returns the next response; it must be of type url.
func (c *deltaClient) recv(url string) *discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	resp, err := c.s.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	if resp.TypeUrl != url {
		c.t.Fatalf("got a response of type %s (%d resources, removed %v), want %s", resp.TypeUrl, len(resp.Resources), resp.RemovedResources, url)
	}
	return resp
}

// got lists a delta response's resource names and removed names.
func got(resp *discoveryv3.DeltaDiscoveryResponse) (names, removed []string) {
	for _, r := range resp.Resources {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	removed = slices.Sorted(slices.Values(resp.RemovedResources))
	return names, removed
}

// versions returns the versions a delta response sent, by name.
func versions(resp *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.Resources {
		out[r.Name] = r.Version
	}
	return out
}

func expect(t *testing.T, what string, resp *discoveryv3.DeltaDiscoveryResponse, wantNames, wantRemoved []string) {
	t.Helper()
	n, r := got(resp)
	if !slices.Equal(n, wantNames) || !slices.Equal(r, wantRemoved) {
		t.Fatalf("%s: resources %v removed %v, want %v and %v", what, n, r, wantNames, wantRemoved)
	}
}

// twoServices publishes pay.shop (port grpc) and, with cart, cart.shop
// (port http), each with the backends given.
func twoServices(t *testing.T, tb *statustest.Table, cart bool, entries []cstatus.Entry) {
	t.Helper()
	ports := []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	svcs := []cstatus.ServiceInfo{{}, {Namespace: "shop", Name: "pay", Ports: ports}}
	if cart {
		svcs = append(svcs, cstatus.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []cstatus.Port{{Name: "http", Number: 80, Protocol: "tcp"}}})
	}
	publishServices(t, tb, svcs, fixedBackends(), entries)
}

func TestDeltaSubscriptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	c := newDeltaClient(t, ctx, startXDS(t, pub))

	// A name that exists and one that does not: the second is reported
	// removed at once, so the client need not wait out its timer.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"}})
	r1 := c.recv(resourcev3.EndpointType)
	expect(t, "first subscription", r1, []string{"pay.shop:grpc"}, []string{"cart.shop:http"})
	c.ack(r1, false)

	// The missing name is sent when it appears; pay's assignment, which
	// did not change, is not.
	twoServices(t, tb, true, []cstatus.Entry{inRotation, inRotation})
	expect(t, "cart appears", c.recv(resourcev3.EndpointType), []string{"cart.shop:http"}, nil)

	// A withdrawal changes pay's assignment only.
	twoServices(t, tb, true, []cstatus.Entry{inRotation, withdrawn})
	r3 := c.recv(resourcev3.EndpointType)
	expect(t, "withdrawal", r3, []string{"pay.shop:grpc"}, nil)
	c.ack(r3, false)

	// Unsubscribing needs no answer; subscribing again to a resource the
	// client held is answered with it, unchanged as it is.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesUnsubscribe: []string{"pay.shop:grpc"}})
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	r4 := c.recv(resourcev3.EndpointType)
	expect(t, "resubscription", r4, []string{"pay.shop:grpc"}, nil)
	if versions(r4)["pay.shop:grpc"] != versions(r3)["pay.shop:grpc"] {
		t.Errorf("resubscription sent version %s, want the unchanged %s", versions(r4)["pay.shop:grpc"], versions(r3)["pay.shop:grpc"])
	}

	// A service that goes away is removed from a client holding it.
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn})
	expect(t, "cart gone", c.recv(resourcev3.EndpointType), nil, []string{"cart.shop:http"})
}

func TestDeltaWildcardClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	c := newDeltaClient(t, ctx, startXDS(t, pub))

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType}) // legacy wildcard
	r1 := c.recv(resourcev3.ClusterType)
	expect(t, "wildcard", r1, []string{"pay.shop:grpc"}, nil)
	c.ack(r1, false)
	twoServices(t, tb, true, []cstatus.Entry{inRotation, inRotation})
	r2 := c.recv(resourcev3.ClusterType)
	expect(t, "a service added", r2, []string{"cart.shop:http"}, nil)
	c.ack(r2, false)
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	expect(t, "a service removed", c.recv(resourcev3.ClusterType), nil, []string{"cart.shop:http"})
}

// TestDeltaReconnect: a client reconnecting with initial_resource_versions
// gets only what changed while it was away, and the removal of what went.
func TestDeltaReconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, true, []cstatus.Entry{inRotation, inRotation})
	addr := startXDS(t, pub)

	sctx, stop := context.WithCancel(ctx)
	c := newDeltaClient(t, sctx, addr)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	held := versions(c.recv(resourcev3.ClusterType)) // the clusters' versions (assignments share their names)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"}})
	c.recv(resourcev3.EndpointType)
	stop()

	// Away: pay's assignment changes, cart goes.
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn})

	c2 := newDeltaClient(t, ctx, addr)
	c2.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"pay.shop:grpc": held["pay.shop:grpc"], "cart.shop:http": held["cart.shop:http"]}})
	// pay's cluster did not change: not sent; cart's is gone: removed.
	expect(t, "clusters on reconnection", c2.recv(resourcev3.ClusterType), nil, []string{"cart.shop:http"})
	c2.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"},
		InitialResourceVersions: map[string]string{"pay.shop:grpc": "an old version", "cart.shop:http": "another"}})
	expect(t, "assignments on reconnection", c2.recv(resourcev3.EndpointType), []string{"pay.shop:grpc"}, []string{"cart.shop:http"})

	// A reconnection holding every current version is answered, empty:
	// an Envoy waits for that answer to finish starting.
	c3 := newDeltaClient(t, ctx, addr)
	c3.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"},
		InitialResourceVersions: map[string]string{"pay.shop:grpc": held["pay.shop:grpc"]}})
	expect(t, "nothing changed", c3.recv(resourcev3.ClusterType), nil, nil)
}

// TestDeltaNACK: a refused version is not sent again; the next change is.
func TestDeltaNACK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, true, []cstatus.Entry{inRotation, inRotation})
	c := newDeltaClient(t, ctx, startXDS(t, pub))

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	r1 := c.recv(resourcev3.EndpointType)
	c.ack(r1, false)
	twoServices(t, tb, true, []cstatus.Entry{inRotation, withdrawn})
	r2 := c.recv(resourcev3.EndpointType)
	c.ack(r2, true) // refused: the client stays on r1
	// Another name subscribed to: answered with it alone, not with the
	// refused version of pay's.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"cart.shop:http"}})
	expect(t, "a subscription after the refusal", c.recv(resourcev3.EndpointType), []string{"cart.shop:http"}, nil)
	// New content: sent.
	twoServices(t, tb, true, []cstatus.Entry{withdrawn, inRotation})
	r3 := c.recv(resourcev3.EndpointType)
	if versions(r3)["pay.shop:grpc"] == versions(r2)["pay.shop:grpc"] {
		t.Fatal("the refused version was sent again")
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := r3.Resources[0].Resource.UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	if n := len(cla.Endpoints[0].LbEndpoints); n != 1 {
		t.Errorf("%d endpoints after the second change, want 1", n)
	}
}

// TestDeltaRequestDoesNotSwallowTableChange: a request answered from a
// newer table than the stream last sent from must not make the stream
// skip that table's changes to its other types (serveLoop's rule, shared
// with state of the world). The race between the request and the table
// change is run many times, so that both orders occur; with the rule
// broken it fails within a few dozen rounds.
func TestDeltaRequestDoesNotSwallowTableChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	// Admissions not coalesced: every round's change is answered at once.
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, AdmissionInterval: -1, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	c := newDeltaClient(t, ctx, serve(t, srv))
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	c.ack(c.recv(resourcev3.EndpointType), false)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{"pay.shop"}})
	c.ack(c.recv(resourcev3.ListenerType), false)
	for i := range 200 {
		second := []cstatus.Entry{withdrawn, inRotation}[i%2]
		// A name that does not exist: answered at once, removed. Sent
		// before the table is published, on odd rounds, and after it, on
		// even ones, so that both reach the stream's loop in either order.
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{fmt.Sprintf("nobody-%d", i)}}
		if i%2 == 1 {
			c.send(req)
		}
		twoServices(t, tb, false, []cstatus.Entry{inRotation, second})
		if i%2 == 0 {
			c.send(req)
		}
		seen := map[string]bool{}
		for len(seen) < 2 {
			resp, err := c.s.Recv()
			if err != nil {
				t.Fatalf("round %d: %v (responses so far: %v)", i, err, seen)
			}
			seen[resp.TypeUrl] = true
			c.ack(resp, false)
		}
		if !seen[resourcev3.EndpointType] || !seen[resourcev3.ListenerType] {
			t.Fatalf("round %d: responses %v, want the assignment's change and the listener request's answer", i, seen)
		}
	}
}

// TestDeliveryLanes: an acknowledged withdrawal is timed in the
// withdrawal lane, an acknowledged re-admission in the admission lane,
// and the first answer of a subscription in neither, over delta and
// state of the world alike.
func TestDeliveryLanes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	reg := prometheus.NewRegistry()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Registerer: reg, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	count := func(lane string) uint64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "cairn_xds_delivery_seconds" {
				continue
			}
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "lane" && l.GetValue() == lane {
						return m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		return 0
	}
	d := newDeltaClient(t, ctx, addr)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	d.ack(d.recv(resourcev3.EndpointType), false)
	s := newADSClient(t, ctx, addr)
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	first := s.recv(resourcev3.EndpointType)
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, first, false)
	// Barriers: a later request's answer proves the acknowledgements were
	// handled (requests are handled in order).
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{"pay.shop"}})
	d.ack(d.recv(resourcev3.ListenerType), false)
	s.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	sl := s.recv(resourcev3.ListenerType)
	s.send(resourcev3.ListenerType, []string{"pay.shop"}, sl, false)
	if w, a := count("withdrawal"), count("admission"); w != 0 || a != 0 {
		t.Fatalf("after first answers only: withdrawal %d, admission %d deliveries timed; want none", w, a)
	}

	// Each change is acknowledged, and the acknowledgement seen handled
	// (a barrier), before the next: a state-of-the-world response that is
	// superseded before its acknowledgement is timed with its successor,
	// in the withdrawal lane if either withdrew.
	barrier := 0
	acked := func() {
		t.Helper()
		barrier++
		name := fmt.Sprintf("barrier-%d", barrier)
		d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{name}})
		d.recv(resourcev3.ListenerType)
		s.send(resourcev3.ListenerType, []string{"pay.shop", name}, sl, false)
		sl = s.recv(resourcev3.ListenerType)
	}
	for _, e := range []cstatus.Entry{withdrawn, inRotation} {
		twoServices(t, tb, false, []cstatus.Entry{inRotation, e})
		d.ack(d.recv(resourcev3.EndpointType), false)
		r := s.recv(resourcev3.EndpointType)
		s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, r, false)
		acked()
	}
	if w, a := count("withdrawal"), count("admission"); w != 2 || a != 2 {
		t.Errorf("deliveries timed: withdrawal %d, admission %d; want 2 and 2 (one of each per protocol)", w, a)
	}
}

// TestNodeNamedLate: a stream whose first request names no node has the
// place of no locality; a node named later does not move it, and the
// stream goes on answering. (Found by FuzzDeltaStream while the hub kept
// streams by place: the stream's place moved under its registration, it
// answered nothing more, and its first place was never left.)
func TestNodeNamedLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	c := newADSClient(t, ctx, startXDS(t, pub))
	c.node = nil
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	c.recv(resourcev3.EndpointType)
	c.node = &corev3.Node{Id: "late", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}}
	c.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	if n := names(t, c.recv(resourcev3.ListenerType)); !slices.Equal(n, []string{"pay.shop"}) {
		t.Fatalf("listeners %v, want pay.shop", n)
	}
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn})
	c.recv(resourcev3.EndpointType)
}

// TestDeltaNackedRemovalIsSentAgain: a response removing cart's
// assignment is refused (the client keeps cart). A later table change
// (pay's) or request makes a pass: it sends cart's removal again, though
// cart did not change since (a pass looks at what changed, and at what
// was refused), or the client would keep a deleted service's endpoints
// for as long as the stream lives.
func TestDeltaNackedRemovalIsSentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, true, []cstatus.Entry{inRotation, inRotation})
	c := newDeltaClient(t, ctx, startXDS(t, pub))
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"pay.shop:grpc", "cart.shop:http"}})
	c.ack(c.recv(resourcev3.EndpointType), false)

	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation}) // cart deleted
	r2 := c.recv(resourcev3.EndpointType)
	expect(t, "cart gone", r2, nil, []string{"cart.shop:http"})
	c.ack(r2, true) // refused: the client still holds cart

	// The next pass (a request, so that it surely comes after the
	// refusal): the old code looked at every name and removed cart again.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"nobody"}})
	r3 := c.recv(resourcev3.EndpointType)
	_, removed := got(r3)
	c.ack(r3, false)
	// And a table change (pay's).
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn})
	r4 := c.recv(resourcev3.EndpointType)
	_, removed4 := got(r4)
	if !slices.Contains(removed, "cart.shop:http") && !slices.Contains(removed4, "cart.shop:http") {
		t.Fatalf("cart's refused removal never sent again")
	}
}
