package cmd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/xdsserver"
)

// TestXDSUsesTheClusterTokens: with ACLs on, `cairn server` authenticates
// xDS streams with the tokens in force, those created through the API
// included, and a reader of one namespace gets none of another's
// clusters (SPEC §8).
func TestXDSUsesTheClusterTokens(t *testing.T) {
	const admin = "xds-acl-admin-0123456789abcdef"
	s := startServer(t, "--dev", "--acl-bootstrap-token", admin)
	ctx := t.Context()
	for _, def := range []string{"namespace: demo\nname: web\n", "namespace: other\nname: db\n"} {
		f := filepath.Join(t.TempDir(), "svc.yaml")
		if err := os.WriteFile(f, []byte(def+"ports: [{name: http, number: 8080, protocol: tcp}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			if code, _, errs := run(t, "--addr", s.http, "--token", admin, "apply", "-f", f); code != 0 {
				return fmt.Errorf("apply: %d %q", code, errs)
			}
			return nil
		})
	}
	const reader = "xds-acl-reader-0123456789abcdef"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.http+"/v1/acl/tokens",
		strings.NewReader(`{"scope": "reader", "namespaces": ["demo"], "secret": "`+reader+`"}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("creating a reader token: %s %s", resp.Status, b)
	}

	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	clusters := func(ctx context.Context) ([]string, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xdsserver.ClusterType, Node: &corev3.Node{Id: "acl-test"}}); err != nil && err != io.EOF {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, a := range resp.Resources {
			var c clusterv3.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				return nil, err
			}
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names, nil
	}
	auth := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	eventually(t, 30*time.Second, func() error { // UNAVAILABLE until the table holds both services
		got, err := clusters(auth(admin))
		if err != nil {
			return err
		}
		if want := []string{"db.other:http", "web.demo:http"}; !slices.Equal(got, want) {
			return fmt.Errorf("admin sees %v, want %v", got, want)
		}
		return nil
	})
	if got, err := clusters(auth(reader)); err != nil || !slices.Equal(got, []string{"web.demo:http"}) {
		t.Errorf("a reader of demo sees %v (%v), want only web.demo:http", got, err)
	}
	if _, err := clusters(ctx); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without a token: %v, want UNAUTHENTICATED", err)
	}
}

// TestEndpointsShowsSubscribers: `cairn endpoints` says how many of the
// server's xDS subscribers hold the service's assignments, and of which
// revision.
func TestEndpointsShowsSubscribers(t *testing.T) {
	s := startServer(t, "--dev")
	ctx := t.Context()
	f := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(f, []byte("namespace: demo\nname: web\nports: [{name: http, number: 8080, protocol: tcp}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if code, _, errs := run(t, "--addr", s.http, "apply", "-f", f); code != 0 {
			return fmt.Errorf("apply: %d %q", code, errs)
		}
		return nil
	})
	if code, out, _ := run(t, "--addr", s.http, "endpoints", "demo/web"); code != 0 || !strings.Contains(out, "xDS subscribers on this server: none") {
		t.Fatalf("endpoints before any subscriber: exit %d\n%s", code, out)
	}
	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	eventually(t, 30*time.Second, func() error { // UNAVAILABLE until the table is built
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		req := &discoveryv3.DiscoveryRequest{TypeUrl: xdsserver.EndpointType, ResourceNames: []string{"web.demo:http"}, Node: &corev3.Node{Id: "endpoints-test"}}
		if err := stream.Send(req); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		// A subscriber acknowledges every response until the test ends.
		go func() {
			for {
				req.ResponseNonce, req.VersionInfo = resp.Nonce, resp.VersionInfo
				if stream.Send(req) != nil {
					return
				}
				if resp, err = stream.Recv(); err != nil {
					return
				}
			}
		}()
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		code, out, errs := run(t, "--addr", s.http, "endpoints", "demo/web")
		if code != 0 {
			return fmt.Errorf("endpoints: exit %d %q", code, errs)
		}
		if !strings.Contains(out, "xDS subscribers on this server: 1, 0 behind (revision ") {
			return fmt.Errorf("endpoints says\n%s", out)
		}
		return nil
	})
}
