package xdsserver_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
)

const (
	shopReader = "shop-reader-secret-0123456789"
	payToken   = "pay-instance-secret-0123456789"
	adminToken = "admin-secret-0123456789abcdef"
)

// startAuthXDS serves a table of two services in two namespaces, pay.shop
// (two instances) and vault.bank (none), with ACLs on.
func startAuthXDS(t *testing.T) string {
	t.Helper()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	grpcPort := []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	publishServices(t, tb, []cstatus.ServiceInfo{{}, {Namespace: "shop", Name: "pay", Ports: grpcPort},
		{Namespace: "bank", Name: "vault", Ports: grpcPort}}, fixedBackends(), []cstatus.Entry{inRotation, inRotation})
	a, err := acl.New(acl.Config{Enabled: true, Tokens: []acl.Token{
		{Secret: shopReader, Scope: acl.Reader, Namespaces: []string{"shop"}},
		{Secret: payToken, Scope: acl.Instance, Namespace: "shop", Service: "pay", Instance: "pay-0"},
		{Secret: adminToken, Scope: acl.Admin},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Authorizer: func() *acl.Authorizer { return a }})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv)
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// TestSubscriptionsAreAuthorised: a stream sees only the services its
// token may read (SPEC §8): under the wildcard, the others are left out;
// named, they are answered as names that do not exist. Over both
// protocols.
func TestSubscriptionsAreAuthorised(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := startAuthXDS(t)
	all := []string{"pay.shop:grpc", "vault.bank:grpc"}

	for _, tc := range []struct {
		token string
		want  []string
	}{
		{adminToken, all},
		{shopReader, []string{"pay.shop:grpc"}},
		{payToken, []string{"pay.shop:grpc"}},
	} {
		c := newADSClient(t, withToken(ctx, tc.token), addr)
		c.send(resourcev3.ClusterType, nil, nil, false) // wildcard
		if got := names(t, c.recv(resourcev3.ClusterType)); !slices.Equal(got, tc.want) {
			t.Errorf("state of the world, %s: clusters %v, want %v", tc.token[:4], got, tc.want)
		}
		c.send(resourcev3.EndpointType, all, nil, false)
		if got := names(t, c.recv(resourcev3.EndpointType)); !slices.Equal(got, tc.want) {
			t.Errorf("state of the world, %s: assignments %v, want %v", tc.token[:4], got, tc.want)
		}
	}

	d := newDeltaClient(t, withToken(ctx, shopReader), addr)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"*"}})
	expect(t, "delta wildcard clusters", d.recv(resourcev3.ClusterType), []string{"pay.shop:grpc"}, nil)
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: all})
	expect(t, "delta assignments", d.recv(resourcev3.EndpointType), []string{"pay.shop:grpc"}, []string{"vault.bank:grpc"})
	d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNamesSubscribe: []string{"vault.bank", "pay.shop"}})
	expect(t, "delta listeners", d.recv(resourcev3.ListenerType), []string{"pay.shop"}, []string{"vault.bank"})
}

// TestUnauthenticatedStreamsAreRefused: with ACLs on, a stream without a
// token, with a malformed one or an unknown one is refused with
// UNAUTHENTICATED, before any response.
func TestUnauthenticatedStreamsAreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := startAuthXDS(t)
	for name, c := range map[string]context.Context{
		"no token":      ctx,
		"unknown token": withToken(ctx, "not-a-token-0123456789"),
		"not bearer":    metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+adminToken),
	} {
		cl := newADSClient(t, c, addr)
		// The refusal may come before the request is sent.
		_ = cl.stream.Send(&discoveryv3.DiscoveryRequest{Node: cl.node, TypeUrl: resourcev3.ClusterType})
		resp, err := cl.stream.Recv()
		if grpcstatus.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: got %v, %v; want UNAUTHENTICATED", name, resp, err)
		}
	}
}
