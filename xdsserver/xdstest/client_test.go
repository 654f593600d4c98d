package xdstest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	inRotation = status.Entry{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 100, BaseWeight: 100}
	withdrawn  = status.Entry{Verdict: status.Unhealthy, Lifecycle: status.Ready, BaseWeight: 100}
)

// publish publishes service pay.shop (port grpc, 8443) with one backend
// per entry, 10.0.0.1 and up.
func publish(t *testing.T, tb *statustest.Table, entries ...status.Entry) {
	t.Helper()
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}}}
	for i, e := range entries {
		in := statustest.FromEntry(fmt.Sprintf("pay-%d", i), e, fmt.Sprintf("10.0.0.%d", i+1)).In("eu", "eu-1a")
		in.Ports = map[string]uint16{"grpc": 8443}
		pay.Instances = append(pay.Instances, in)
	}
	tb.Publish(t, pay)
}

// serve serves pub over ADS on loopback until the test ends, and
// returns the address and the authorization metadata of every stream
// opened so far.
func serve(t *testing.T, pub *status.Publisher) (string, func() [][]string) {
	t.Helper()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var auth [][]string
	gs := grpc.NewServer(grpc.StreamInterceptor(func(s any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		mu.Lock()
		auth = append(auth, md.Get("authorization"))
		mu.Unlock()
		return h(s, ss)
	}))
	srv.Register(gs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	t.Cleanup(func() { gs.Stop(); <-served; cancel(); <-done })
	return ln.Addr().String(), func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(auth)
	}
}

// recvAssignment receives one response on s, checks it carries only
// name, and returns its endpoints in rotation, decoded with d.
func recvAssignment(t *testing.T, s *xdstest.Stream, d *xdstest.Decoder[[]netip.AddrPort], name string) (*discoveryv3.DeltaDiscoveryResponse, []string) {
	t.Helper()
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.TypeUrl != resourcev3.EndpointType || len(resp.Resources) != 1 || resp.Resources[0].Name != name {
		t.Fatalf("got %s with %d resources (removed %v), want %s with %s alone", resp.TypeUrl, len(resp.Resources), resp.RemovedResources, resourcev3.EndpointType, name)
	}
	eps, err := d.Decode(resp.Resources[0])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ep := range eps {
		out = append(out, ep.String())
	}
	return resp, out
}

// TestStreamsShareConnectionAndDecodings: streams multiplexed on one
// connection each get the assignment and its changes; each version is
// decoded once for all of them; the token travels as metadata.
func TestStreamsShareConnectionAndDecodings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	publish(t, tb, inRotation, inRotation)
	addr, auth := serve(t, pub)
	cc, err := xdstest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	d := xdstest.NewDecoder(func(r *discoveryv3.Resource) ([]netip.AddrPort, error) {
		cla, err := xdstest.DecodeAssignment(r)
		if err != nil {
			return nil, err
		}
		return xdstest.InRotation(cla), nil
	})
	const streams = 3
	const name = "pay.shop:grpc"
	var ss []*xdstest.Stream
	for i := range streams {
		o := xdstest.Options{}
		if i == 0 {
			o.Token = "s3cret"
		}
		s, err := xdstest.Open(ctx, cc, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Subscribe(resourcev3.EndpointType, []string{name}, nil); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	var first []*discoveryv3.DeltaDiscoveryResponse
	for i, s := range ss {
		resp, eps := recvAssignment(t, s, d, name)
		if want := []string{"10.0.0.1:8443", "10.0.0.2:8443"}; !slices.Equal(eps, want) {
			t.Fatalf("stream %d: first assignment %v, want %v", i, eps, want)
		}
		first = append(first, resp)
		if err := s.Ack(resp); err != nil {
			t.Fatal(err)
		}
	}
	if dec, hits := d.Decodes(); dec != 1 || hits != streams-1 {
		t.Errorf("first assignment: %d decodings and %d shared, want 1 and %d", dec, hits, streams-1)
	}

	publish(t, tb, inRotation, withdrawn)
	var current string
	for i, s := range ss {
		resp, eps := recvAssignment(t, s, d, name)
		if want := []string{"10.0.0.1:8443"}; !slices.Equal(eps, want) {
			t.Fatalf("stream %d: assignment after the withdrawal %v, want %v", i, eps, want)
		}
		current = resp.Resources[0].Version
		if current == first[i].Resources[0].Version {
			t.Errorf("stream %d: the changed assignment kept version %s", i, resp.Resources[0].Version)
		}
		// The last stream refuses it: it stays on its old version.
		if i == streams-1 {
			err = s.Nack(resp, "refused by the test")
		} else {
			err = s.Ack(resp)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if dec, hits := d.Decodes(); dec != 2 || hits != 2*(streams-1) {
		t.Errorf("after the change: %d decodings and %d shared, want 2 and %d", dec, hits, 2*(streams-1))
	}

	// A reconnection holding the current version is answered with
	// nothing to send.
	s, err := xdstest.Open(ctx, cc, xdstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(resourcev3.EndpointType, []string{name}, map[string]string{name: current}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Resources) != 0 || len(r.RemovedResources) != 0 {
		t.Errorf("a reconnection holding the current version was sent %d resources and %d removals", len(r.Resources), len(r.RemovedResources))
	}

	got := auth()
	if len(got) != streams+1 {
		t.Fatalf("the server saw %d streams, want %d", len(got), streams+1)
	}
	tokens := 0
	for _, a := range got {
		if slices.Equal(a, []string{"Bearer s3cret"}) {
			tokens++
		} else if len(a) != 0 {
			t.Errorf("a stream without a token sent authorization %q", a)
		}
	}
	if tokens != 1 {
		t.Errorf("%d streams sent the token, want 1 (got %q)", tokens, got)
	}
}
