package xdsserver_test

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// waitSubscribers polls srv.Subscribers until it says want: a stream's
// acknowledgement is handled on its own goroutine.
func waitSubscribers(t *testing.T, srv *xdsserver.Server, ns, svc string, want wire.XDSSubscribers) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got wire.XDSSubscribers
	for time.Now().Before(deadline) {
		if got = srv.Subscribers(ns, svc); reflect.DeepEqual(got, want) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("subscribers of %s/%s: %+v, want %+v", ns, svc, got, want)
}

func revs(rs ...wire.XDSRevision) wire.XDSSubscribers {
	out := wire.XDSSubscribers{Revisions: append([]wire.XDSRevision{}, rs...)}
	for _, r := range rs {
		out.Subscribers += r.Subscribers
		out.Behind += r.Behind
	}
	return out
}

// TestSubscribersByRevision: the server tells, per service, how many
// subscribers hold the assignments of which store revision, and how many
// are behind (issue 11 item 9): a subscriber that names a service counts
// from then on, at revision 0 until it acknowledges; it moves when it
// acknowledges a newer one, stays behind when it refuses, and is gone
// when it unsubscribes or its stream ends. Over both protocols.
func TestSubscribersByRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	bs := fixedBackends()
	publish(t, tb, bs, []cstatus.Entry{inRotation, inRotation}) // store revision 1001
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)

	waitSubscribers(t, srv, "shop", "pay", revs())
	dctx, closeDelta := context.WithCancel(ctx)
	d := newDeltaClient(t, dctx, addr)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
	d.ack(d.recv(resourcev3.EndpointType), false)
	sctx, closeSotW := context.WithCancel(ctx)
	s := newADSClient(t, sctx, addr)
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	first := s.recv(resourcev3.EndpointType)
	// Answered, so its subscription is recorded; not acknowledged yet:
	// behind, holding nothing.
	want0 := revs(wire.XDSRevision{Revision: 1001, Subscribers: 1}, wire.XDSRevision{Revision: 0, Subscribers: 1, Behind: 1})
	waitSubscribers(t, srv, "shop", "pay", want0)
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, first, false)
	waitSubscribers(t, srv, "shop", "pay", revs(wire.XDSRevision{Revision: 1001, Subscribers: 2}))
	waitSubscribers(t, srv, "bank", "vault", revs())

	// A withdrawal (revision 1002): the delta subscriber acknowledges it,
	// the state-of-the-world one has not yet, then refuses it.
	publish(t, tb, bs, []cstatus.Entry{inRotation, withdrawn})
	d.ack(d.recv(resourcev3.EndpointType), false)
	next := s.recv(resourcev3.EndpointType)
	want := revs(wire.XDSRevision{Revision: 1002, Subscribers: 1}, wire.XDSRevision{Revision: 1001, Subscribers: 1, Behind: 1})
	waitSubscribers(t, srv, "shop", "pay", want)
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, next, true)
	// The stream handles requests in order: once this is answered, the
	// refusal has been.
	s.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	s.recv(resourcev3.ListenerType)
	if got := srv.Subscribers("shop", "pay"); !reflect.DeepEqual(got, want) {
		t.Errorf("after a refusal: %+v, want %+v", got, want)
	}

	// The delta stream unsubscribes; the other one ends.
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesUnsubscribe: []string{"pay.shop:grpc"}})
	waitSubscribers(t, srv, "shop", "pay", revs(wire.XDSRevision{Revision: 1001, Subscribers: 1, Behind: 1}))
	closeSotW()
	waitSubscribers(t, srv, "shop", "pay", revs())
	closeDelta()
}

// waitSummary polls srv.SubscribersSummary until it says want.
func waitSummary(t *testing.T, srv *xdsserver.Server, want wire.XDSSummary) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got wire.XDSSummary
	for time.Now().Before(deadline) {
		if got = srv.SubscribersSummary(); reflect.DeepEqual(got, want) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("subscribers summary: %+v, want %+v", got, want)
}

// TestSubscribersSummary: over every service, the server tells its open
// streams and their subscribers by revision (issue 14 item 7): a
// subscriber of two services counts once; one that named assignments
// but acknowledged none is behind at revision 0; a stream asking only
// for listeners counts as a stream alone.
func TestSubscribersSummary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	ports := []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	publishServices(t, tb, []cstatus.ServiceInfo{{}, {Namespace: "shop", Name: "pay", Ports: ports}, {Namespace: "bank", Name: "vault", Ports: ports}},
		fixedBackends(), []cstatus.Entry{inRotation, inRotation}) // store revision 1001
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	none := wire.XDSSummary{XDSSubscribers: revs()}
	waitSummary(t, srv, none)

	// Both services' assignments, acknowledged: one subscriber.
	d := newDeltaClient(t, ctx, addr)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "vault.bank:grpc"}})
	d.ack(d.recv(resourcev3.EndpointType), false)
	waitSubscribers(t, srv, "bank", "vault", revs(wire.XDSRevision{Revision: 1001, Subscribers: 1}))
	waitSubscribers(t, srv, "shop", "pay", revs(wire.XDSRevision{Revision: 1001, Subscribers: 1}))
	waitSummary(t, srv, wire.XDSSummary{Streams: 1, XDSSubscribers: revs(wire.XDSRevision{Revision: 1001, Subscribers: 1})})

	// A listener only: a stream, no subscriber.
	lctx, closeL := context.WithCancel(ctx)
	l := newADSClient(t, lctx, addr)
	l.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	l.recv(resourcev3.ListenerType)
	waitSummary(t, srv, wire.XDSSummary{Streams: 2, XDSSubscribers: revs(wire.XDSRevision{Revision: 1001, Subscribers: 1})})

	// Named, answered, not acknowledged: behind at revision 0.
	sctx, closeS := context.WithCancel(ctx)
	s := newADSClient(t, sctx, addr)
	s.send(resourcev3.EndpointType, []string{"vault.bank:grpc"}, nil, false)
	s.recv(resourcev3.EndpointType)
	waitSummary(t, srv, wire.XDSSummary{Streams: 3, XDSSubscribers: revs(
		wire.XDSRevision{Revision: 1001, Subscribers: 1}, wire.XDSRevision{Revision: 0, Subscribers: 1, Behind: 1})})

	closeS()
	closeL()
	waitSummary(t, srv, wire.XDSSummary{Streams: 1, XDSSubscribers: revs(wire.XDSRevision{Revision: 1001, Subscribers: 1})})
}
