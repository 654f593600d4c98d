package xdsserver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
)

// adsClient is a raw state-of-the-world ADS client: it sends exactly the
// requests a test writes and hands back every response, so a test can
// check the protocol step by step. Requests on one stream are handled in
// the order sent: a response to a later request proves the server did
// not answer an earlier one in between.
type adsClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	node   *corev3.Node
}

func newADSClient(t *testing.T, ctx context.Context, addr string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &adsClient{t: t, stream: stream,
		node: &corev3.Node{Id: "raw", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}}}
}

// send sends a request of type url for names, answering the response
// given (nil: none yet), refusing it when nack is set.
func (c *adsClient) send(url string, names []string, answer *discoveryv3.DiscoveryResponse, nack bool) {
	c.t.Helper()
	req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: url, ResourceNames: names}
	if answer != nil {
		req.ResponseNonce = answer.Nonce
		req.VersionInfo = answer.VersionInfo
		if nack {
			req.VersionInfo = "" // the last version accepted: none
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "refused by the test"}
		}
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv returns the next response; it must be of type url.
func (c *adsClient) recv(url string) *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	if resp.TypeUrl != url {
		c.t.Fatalf("got a response of type %s (version %s, %d resources), want %s", resp.TypeUrl, resp.VersionInfo, len(resp.Resources), url)
	}
	return resp
}

// names returns the names of a response's resources, sorted.
func names(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch r := m.(type) {
		case *clusterv3.Cluster:
			out = append(out, r.Name)
		case *endpointv3.ClusterLoadAssignment:
			out = append(out, r.ClusterName)
		case *listenerv3.Listener:
			out = append(out, r.Name)
		default:
			t.Fatalf("unexpected resource %T", m)
		}
	}
	slices.Sort(out)
	return out
}

// endpoints returns the addresses of an assignment response's
// endpoints, sorted.
func endpoints(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.Resources {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		for _, l := range cla.Endpoints {
			for _, e := range l.LbEndpoints {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, netip.AddrPortFrom(netip.MustParseAddr(sa.Address), uint16(sa.GetPortValue())).String())
			}
		}
	}
	slices.Sort(out)
	return out
}

func fixedBackends() []backend {
	return []backend{{addr: netip.MustParseAddrPort("10.0.0.1:8443")}, {addr: netip.MustParseAddrPort("10.0.0.2:8443")}}
}

// TestNACKIsNotResent: a refused version is never sent again; the next
// response of the type carries new content.
func TestNACKIsNotResent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	bs := fixedBackends()
	publish(t, tb, bs, []cstatus.Entry{inRotation, inRotation})
	c := newADSClient(t, ctx, startXDS(t, pub))

	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	first := c.recv(resourcev3.EndpointType)
	if got := endpoints(t, first); !slices.Equal(got, []string{"10.0.0.1:8443", "10.0.0.2:8443"}) {
		t.Fatalf("first assignment %v", got)
	}
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, first, true) // NACK
	// The server handles a stream's requests in order: had the NACK been
	// answered with a resend, it would come before the listener.
	c.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	c.recv(resourcev3.ListenerType)

	// A table with the same content: nothing to send. Then new content:
	// the next assignment is it, never the refused one again.
	publish(t, tb, bs, []cstatus.Entry{inRotation, inRotation})
	publish(t, tb, bs, []cstatus.Entry{inRotation, withdrawn})
	next := c.recv(resourcev3.EndpointType)
	if next.VersionInfo == first.VersionInfo {
		t.Fatalf("the refused version %s was sent again", first.VersionInfo)
	}
	if got := endpoints(t, next); !slices.Equal(got, []string{"10.0.0.1:8443"}) {
		t.Errorf("assignment after the withdrawal %v, want only 10.0.0.1:8443", got)
	}
}

// TestSubscriptionChangesAreAnswered: a change of names is answered even
// when no content changed (field notes X2), and the first request of a
// stream is answered whatever version it claims to hold (X5).
func TestSubscriptionChangesAreAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	publish(t, tb, fixedBackends(), []cstatus.Entry{inRotation, inRotation})
	addr := startXDS(t, pub)
	c := newADSClient(t, ctx, addr)

	c.send(resourcev3.ListenerType, []string{"pay.shop"}, nil, false)
	r1 := c.recv(resourcev3.ListenerType)
	c.send(resourcev3.ListenerType, []string{"pay.shop", "pay.shop:grpc"}, r1, false)
	r2 := c.recv(resourcev3.ListenerType)
	if got := names(t, r2); !slices.Equal(got, []string{"pay.shop", "pay.shop:grpc"}) {
		t.Errorf("after subscribing to a second listener: %v", got)
	}
	c.send(resourcev3.ListenerType, []string{"pay.shop"}, r2, false)
	r3 := c.recv(resourcev3.ListenerType)
	if got := names(t, r3); !slices.Equal(got, []string{"pay.shop"}) {
		t.Errorf("after unsubscribing: %v", got)
	}
	// Subscribing again to what was sent before: answered again.
	c.send(resourcev3.ListenerType, []string{"pay.shop", "pay.shop:grpc"}, r3, false)
	r4 := c.recv(resourcev3.ListenerType)
	if r4.VersionInfo != r2.VersionInfo || !slices.Equal(names(t, r4), names(t, r2)) {
		t.Errorf("resubscription answered with version %s %v, want %s's content again", r4.VersionInfo, names(t, r4), r2.VersionInfo)
	}

	// A new stream claiming to hold the current version is answered.
	c2 := newADSClient(t, ctx, addr)
	if err := c2.stream.Send(&discoveryv3.DiscoveryRequest{Node: c2.node, TypeUrl: resourcev3.ListenerType,
		ResourceNames: []string{"pay.shop"}, VersionInfo: r1.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, c2.recv(resourcev3.ListenerType)); !slices.Equal(got, []string{"pay.shop"}) {
		t.Errorf("reconnecting stream got %v", got)
	}
}

// TestClustersBeforeAssignmentsBeforeListeners: when a new service
// appears, a stream subscribed to all three types gets its cluster, then
// its assignment, then its listeners (make-before-break).
func TestClustersBeforeAssignmentsBeforeListeners(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	publish(t, tb, nil, nil) // pay.shop without instances
	c := newADSClient(t, ctx, startXDS(t, pub))

	c.send(resourcev3.ListenerType, nil, nil, false) // legacy wildcard
	l := c.recv(resourcev3.ListenerType)
	c.send(resourcev3.ListenerType, nil, l, false)
	c.send(resourcev3.ClusterType, []string{"*"}, nil, false)
	cl := c.recv(resourcev3.ClusterType)
	if got := names(t, cl); !slices.Equal(got, []string{"pay.shop:grpc"}) {
		t.Fatalf("clusters %v", got)
	}
	c.send(resourcev3.ClusterType, []string{"*"}, cl, false)
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	e := c.recv(resourcev3.EndpointType)
	if got := endpoints(t, e); len(got) != 0 {
		t.Fatalf("an assignment without instances has endpoints %v", got)
	}
	c.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, e, false)

	// Instances arrive, and the service gains a port: every type changes.
	publishPorts(t, tb, []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}, {Name: "admin", Number: 9000, Protocol: "tcp"}},
		fixedBackends(), []cstatus.Entry{inRotation, inRotation})
	if got := names(t, c.recv(resourcev3.ClusterType)); !slices.Equal(got, []string{"pay.shop:admin", "pay.shop:grpc"}) {
		t.Errorf("clusters %v", got)
	}
	if got := endpoints(t, c.recv(resourcev3.EndpointType)); !slices.Equal(got, []string{"10.0.0.1:8443", "10.0.0.2:8443"}) {
		t.Errorf("assignment %v", got)
	}
	if got := names(t, c.recv(resourcev3.ListenerType)); !slices.Equal(got, []string{"pay.shop", "pay.shop:admin", "pay.shop:grpc"}) {
		t.Errorf("listeners %v", got)
	}
}

// TestNotReadyIsUnavailable: until the table holds the store's state, a
// stream is refused with UNAVAILABLE, which clients retry.
func TestNotReadyIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Ready: func() bool { return false }, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	c := newADSClient(t, ctx, addr)
	// The server may refuse the stream before the request is sent: Send
	// then reports io.EOF, and the refusal comes from Recv.
	if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resourcev3.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("send: %v", err)
	}
	_, err = c.stream.Recv()
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("stream before the table is ready: %v, want UNAVAILABLE", err)
	}
}

// TestUnservedTypeIsIgnored: a request for a type cairn does not serve
// gets no answer, and the stream goes on.
func TestUnservedTypeIsIgnored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	publish(t, tb, fixedBackends(), []cstatus.Entry{inRotation, inRotation})
	c := newADSClient(t, ctx, startXDS(t, pub))
	c.send(resourcev3.SecretType, []string{"x"}, nil, false)
	c.send(resourcev3.ClusterType, nil, nil, false)
	if got := names(t, c.recv(resourcev3.ClusterType)); !slices.Equal(got, []string{"pay.shop:grpc"}) {
		t.Errorf("clusters %v", got)
	}
}

// TestAdmissionAfterRestart: a server that had 1,000 subscribers before
// its restart admits 50 streams (5%, and the floor) in its first ten
// seconds; the next is refused with UNAVAILABLE, and admitted in the
// next ten seconds.
func TestAdmissionAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	publish(t, tb, fixedBackends(), []cstatus.Entry{inRotation, inRotation})
	path := filepath.Join(t.TempDir(), "xds-subscribers.json")
	if err := os.WriteFile(path, []byte(`{"subscribers": 1000, "at": "2026-12-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, SubscribersFile: path,
		Now:    func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	open := func() error {
		c := newADSClient(t, ctx, addr)
		// A refused stream may end before the request is sent (io.EOF);
		// Recv then reports why.
		if err := c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resourcev3.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err := c.stream.Recv()
		return err
	}
	for i := range 50 {
		if err := open(); err != nil {
			t.Fatalf("stream %d of the first 50: %v", i+1, err)
		}
	}
	if err := open(); grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("stream 51 in the first 10 s: %v, want UNAVAILABLE", err)
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	if err := open(); err != nil {
		t.Fatalf("a stream in the next 10 s: %v", err)
	}
}
