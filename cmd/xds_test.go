package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
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
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, Node: &corev3.Node{Id: "acl-test"}}); err != nil && err != io.EOF {
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
		req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"web.demo:http"}, Node: &corev3.Node{Id: "endpoints-test"}}
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

// bootstrapServer is the server_uri of the one xDS server a bootstrap
// names.
func bootstrapServer(t *testing.T, out string) string {
	t.Helper()
	var b struct {
		Servers []struct {
			URI string `json:"server_uri"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || len(b.Servers) != 1 {
		t.Fatalf("stdout is not a bootstrap naming one server (%v):\n%s", err, out)
	}
	return b.Servers[0].URI
}

// TestXDSBootstrapAsksTheServer: without --xds-addr, `cairn xds-bootstrap`
// points its client at the gRPC address the server at --addr serves (a
// port of its own here, not the default 8481), says so on stderr and
// keeps stdout a bootstrap; --xds-addr still wins; a server that cannot
// be reached is an error naming --addr and suggesting --xds-addr, with
// nothing on stdout (issue 26 item 6).
func TestXDSBootstrapAsksTheServer(t *testing.T) {
	s := startServer(t, "--dev")
	if strings.HasSuffix(s.grpc, ":8481") {
		t.Fatalf("the server's gRPC address %s is the default port: the test cannot tell asked from defaulted", s.grpc)
	}
	code, out, errs := run(t, "--addr", s.http, "xds-bootstrap", "--node-id", "n1")
	if code != 0 {
		t.Fatalf("xds-bootstrap: exit %d, stderr %q", code, errs)
	}
	if got := bootstrapServer(t, out); got != s.grpc {
		t.Errorf("bootstrap names %s; want the server's gRPC address %s", got, s.grpc)
	}
	if !strings.Contains(errs, s.grpc) || !strings.Contains(errs, "--addr "+s.http) {
		t.Errorf("stderr %q; want it to name %s and where it came from (--addr %s)", errs, s.grpc, s.http)
	}

	code, out, errs = run(t, "--addr", s.http, "xds-bootstrap", "--node-id", "n1", "--xds-addr", "10.0.0.1:9000")
	if got := bootstrapServer(t, out); code != 0 || got != "10.0.0.1:9000" || !strings.Contains(errs, "--xds-addr") {
		t.Errorf("with --xds-addr: exit %d, bootstrap names %s, stderr %q; want 10.0.0.1:9000, from --xds-addr", code, got, errs)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	code, out, errs = run(t, "--addr", gone, "xds-bootstrap", "--node-id", "n1")
	if code != exitError || out != "" || !strings.Contains(errs, "--addr "+gone) || !strings.Contains(errs, "--xds-addr") {
		t.Errorf("no server at --addr: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, an error naming --addr %s and --xds-addr",
			code, out, errs, exitError, gone)
	}
}

// TestXDSBootstrapWildcardGRPCAddr: a server listening for gRPC on every
// interface reports 0.0.0.0:PORT (or [::]:PORT); the bootstrap names the
// host the CLI reached it at, with that port. The server here answers
// GET /v1/status alone, as such a server would: a real one would have to
// listen beyond loopback.
func TestXDSBootstrapWildcardGRPCAddr(t *testing.T) {
	for _, grpcAddr := range []string{"0.0.0.0:9481", "[::]:9481"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/status" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, `{"node_id": "n1", "grpc_addr": %q}`, grpcAddr)
		}))
		code, out, errs := run(t, "--addr", srv.URL, "xds-bootstrap", "--node-id", "n1")
		srv.Close()
		if got := bootstrapServer(t, out); code != 0 || got != "127.0.0.1:9481" || !strings.Contains(errs, grpcAddr) {
			t.Errorf("server reporting %s: exit %d, bootstrap names %s, stderr %q; want 127.0.0.1:9481 and a word about %s",
				grpcAddr, code, got, errs, grpcAddr)
		}
	}
}

// TestEndpointsTable: `cairn endpoints` shows each endpoint's tier and
// the evaluator's verdict beside what the table serves, and names the
// status table its rows were read from.
func TestEndpointsTable(t *testing.T) {
	s := startServer(t, "--dev", "--region", "r1", "--zone", "z1")
	f := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(f, []byte("namespace: demo\nname: web\nports: [{name: http, number: 8080, protocol: tcp}]\ncapability: {readiness: none}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if code, _, errs := run(t, "--addr", s.http, "apply", "-f", f); code != 0 {
			return fmt.Errorf("apply: %d %q", code, errs)
		}
		return nil
	})
	if code, out, errs := run(t, "--addr", s.http, "register", "--instance", "i-1", "--address", "127.0.0.1", "--port", "http=8080",
		"--region", "r1", "--zone", "z2", "demo/web"); code != 0 {
		t.Fatalf("register: %d %q %q", code, out, errs)
	}
	eventually(t, 30*time.Second, func() error {
		code, out, errs := run(t, "--addr", s.http, "endpoints", "demo/web")
		if code != 0 {
			return fmt.Errorf("endpoints: exit %d %q", code, errs)
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 3 || !strings.Contains(lines[0], "WEIGHT  TIER  EVALUATOR") ||
			!strings.Contains(out, "served by this server's DNS and xDS: status table version ") {
			return fmt.Errorf("endpoints says\n%s", out)
		}
		// i-1 is in r1/z2, the server in r1/z1: tier 1, eligible
		// (unknown, in rotation) by the evaluator's verdict too.
		if f := strings.Fields(lines[1]); len(f) < 11 || f[0] != "i-1" || f[6] != "true" || f[8] != "1" || f[9] != "unknown," || f[10] != "eligible" {
			return fmt.Errorf("row %q; want i-1 eligible, tier 1, evaluator unknown, eligible", lines[1])
		}
		return nil
	})
}
