package xdsserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// startCapped serves pay.shop with the limits given (and ACLs when a
// is set), returning the address and the metrics.
func startCapped(t *testing.T, l xdsserver.Limits, a *acl.Authorizer) (string, *prometheus.Registry) {
	t.Helper()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	reg := prometheus.NewRegistry()
	cfg := xdsserver.Config{Table: pub, Registerer: reg, Limits: l, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if a != nil {
		cfg.Authorizer = func() *acl.Authorizer { return a }
	}
	srv, err := xdsserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv), reg
}

// refusedFor checks that err is RESOURCE_EXHAUSTED naming flag, and that
// the refusal was counted under reason.
func refusedFor(t *testing.T, err error, reg *prometheus.Registry, reason, flag string, count float64) {
	t.Helper()
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), flag) {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming %s", err, flag)
	}
	if got := refusals(t, reg, reason); got != count {
		t.Errorf("cairn_xds_streams_refused_total{reason=%q} = %v, want %v", reason, got, count)
	}
}

func refusals(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cairn_xds_streams_refused_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// junk returns n made-up assignment names.
func junk(from, n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = fmt.Sprintf("junk%d.shop:grpc", from+k)
	}
	return out
}

// TestNamesPerStreamCap: a stream that would watch more names than the
// cap, all types together, ends with RESOURCE_EXHAUSTED naming the
// flag; one at the cap is served. Both protocols.
func TestNamesPerStreamCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, reg := startCapped(t, xdsserver.Limits{MaxNames: 5}, nil)

	d := newDeltaClient(t, ctx, addr)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "x"}})
	d.recv(resourcev3.ClusterType)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: append([]string{"pay.shop:grpc"}, junk(0, 2)...)})
	d.recv(resourcev3.EndpointType) // 5 names: at the cap
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: junk(2, 1)})
	_, err := d.s.Recv()
	refusedFor(t, err, reg, "names_per_stream", "--xds-max-names-per-stream", 1)

	s := newADSClient(t, ctx, addr)
	s.send(resourcev3.EndpointType, junk(0, 5), nil, false)
	r := s.recv(resourcev3.EndpointType)
	s.send(resourcev3.EndpointType, junk(0, 6), r, false)
	_, err = s.stream.Recv()
	refusedFor(t, err, reg, "names_per_stream", "--xds-max-names-per-stream", 2)
}

// TestTypesPerStreamCap: asking for more resource types than the cap,
// served or not, ends the stream.
func TestTypesPerStreamCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, reg := startCapped(t, xdsserver.Limits{MaxTypes: 2}, nil)
	s := newADSClient(t, ctx, addr)
	s.send(resourcev3.ClusterType, nil, nil, false)
	s.recv(resourcev3.ClusterType)
	s.send("type.googleapis.com/made.up.Type", nil, nil, false) // not served, never answered, but counted
	s.send(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil, false)
	_, err := s.stream.Recv()
	refusedFor(t, err, reg, "types_per_stream", "--xds-max-types-per-stream", 1)
}

// open opens a delta stream and waits for its first answer: it is then
// counted as open by the server. It returns the first error instead.
func open(ctx context.Context, cc *xdstest.Stream) error {
	if err := cc.Subscribe(resourcev3.EndpointType, []string{"pay.shop:grpc"}, nil); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream first (refused it): gRPC
			// gives its status to Recv, not to Send.
			_, err = cc.Recv()
		}
		return err
	}
	_, err := cc.Recv()
	return err
}

// TestStreamsPerAddressCap: with ACLs off, one address holds at most
// the cap of streams open; a stream that ends frees its place.
func TestStreamsPerAddressCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, reg := startCapped(t, xdsserver.Limits{MaxStreamsPerAddress: 2}, nil)
	cc, err := xdstest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var cancels []context.CancelFunc
	for range 2 {
		sctx, stop := context.WithCancel(ctx)
		cancels = append(cancels, stop)
		s, err := xdstest.Open(sctx, cc, xdstest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := open(sctx, s); err != nil {
			t.Fatalf("a stream under the cap: %v", err)
		}
	}
	s, err := xdstest.Open(ctx, cc, xdstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	refusedFor(t, open(ctx, s), reg, "streams_per_address", "--xds-max-streams-per-address", 1)

	// One ends: a new stream is admitted once the server has counted the
	// end (a poll with a deadline).
	cancels[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := xdstest.Open(ctx, cc, xdstest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err = open(ctx, s); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after another ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a poll with a deadline
	}
	cancels[1]()
}

// TestStreamsPerTokenCap: with ACLs on, the cap counts a token's
// streams, wherever they come from; another token has its own.
func TestStreamsPerTokenCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := acl.New(acl.Config{Enabled: true, Tokens: []acl.Token{
		{Secret: shopReader, Scope: acl.Reader, Namespaces: []string{"shop"}},
		{Secret: adminToken, Scope: acl.Admin},
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr, reg := startCapped(t, xdsserver.Limits{MaxStreamsPerToken: 1, MaxStreamsPerAddress: 1}, a)
	cc, err := xdstest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	first, _ := xdstest.Open(ctx, cc, xdstest.Options{Token: shopReader})
	if err := open(ctx, first); err != nil {
		t.Fatalf("the reader's first stream: %v", err)
	}
	second, _ := xdstest.Open(ctx, cc, xdstest.Options{Token: shopReader})
	refusedFor(t, open(ctx, second), reg, "streams_per_token", "--xds-max-streams-per-token", 1)
	// The address cap (1) does not apply with ACLs on: the admin's
	// stream, from the same address, is admitted.
	admin, _ := xdstest.Open(ctx, cc, xdstest.Options{Token: adminToken})
	if err := open(ctx, admin); err != nil {
		t.Fatalf("another token's stream: %v", err)
	}
	if got := testutil.CollectAndCount(reg, "cairn_xds_streams_refused_total"); got < 4 {
		t.Errorf("%d refusal reasons exported, want every cap's from the start", got)
	}
}
