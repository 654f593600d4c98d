package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
)

// testServer serves the API of an in-memory single node with ACLs off and
// loopback endpoints allowed, and returns its URL.
func testServer(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	n := storetest.Single(t, store.Config{Registerer: reg})
	authz, err := acl.New(acl.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Store: n.Store, ACL: authz, Addrs: addrpolicy.New(addrpolicy.Config{AllowLoopback: true}),
		Registerer: reg, Gatherer: reg, Logger: storetest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return srv.URL
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"cairn"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLI(t *testing.T) {
	url := testServer(t)
	def := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(def, []byte("namespace: shop\nname: cart\nports: [{name: http, number: 8080, protocol: tcp}]\n---\nnamespace: shop\nname: web\nports: [{name: http, number: 80}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "--addr", url, "apply", "-f", def); code != 0 || !strings.Contains(out, "applied shop/cart") || !strings.Contains(out, "applied shop/web") {
		t.Fatalf("apply: %d %q %q", code, out, errs)
	}
	reg := []string{"--addr", url, "register", "--instance", "i-1", "--address", "10.0.0.1", "--port", "http=8080", "--zone", "z1", "shop/cart"}
	code, out, errs := run(t, reg...)
	if code != 0 || !strings.Contains(out, "incarnation: 1\n") || !strings.Contains(out, "lease_deadline: ") {
		t.Fatalf("register: %d %q %q", code, out, errs)
	}
	t.Run("identical retry returns the same incarnation as json", func(t *testing.T) {
		code, out, errs := run(t, append([]string{"--output", "json"}, reg...)...)
		var got struct{ Incarnation uint64 }
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Incarnation != 1 {
			t.Fatalf("retry: %d %q %q", code, out, errs)
		}
	})
	t.Run("changing a live registration needs --replaces", func(t *testing.T) { // in shop/web: shop/cart keeps one instance
		first := []string{"--addr", url, "register", "--instance", "i-2", "--address", "10.0.0.2", "--port", "http=80", "shop/web"}
		code, out, errs := run(t, first...)
		if code != 0 || !strings.Contains(out, "incarnation: 2\n") {
			t.Fatalf("register i-2: %d %q %q", code, out, errs)
		}
		moved := []string{"--addr", url, "register", "--instance", "i-2", "--address", "10.0.0.3", "--port", "http=80"}
		code, out, errs = run(t, append(moved, "shop/web")...)
		if code != exitError || !strings.Contains(errs, "409 fenced") || !strings.Contains(errs, "--replaces 2") || out != "" {
			t.Fatalf("re-register without --replaces: exit %d, stdout %q, stderr %q; want exit %d, 409 naming --replaces 2", code, out, errs, exitError)
		}
		code, out, errs = run(t, append(moved, "--replaces", "2", "shop/web")...)
		if code != 0 || !strings.Contains(out, "incarnation: 3\n") {
			t.Fatalf("re-register with --replaces 2: %d %q %q", code, out, errs)
		}
		// The late retry of the first registration is refused.
		if code, _, errs := run(t, first...); code != exitError || !strings.Contains(errs, "--replaces 3") {
			t.Fatalf("late retry of the first registration: exit %d, stderr %q", code, errs)
		}
	})
	t.Run("endpoints json has the documented fields", func(t *testing.T) {
		code, out, errs := run(t, "--addr", url, "-o", "json", "endpoints", "shop/cart")
		var got []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 {
			t.Fatalf("endpoints: %d %q %q", code, out, errs)
		}
		for _, f := range []string{"instance_id", "incarnation", "addresses", "zone", "lifecycle", "verdict", "eligible", "weight"} {
			if _, ok := got[0][f]; !ok {
				t.Errorf("endpoints json lacks %q: %v", f, got[0])
			}
		}
	})
	t.Run("endpoints --consistent reads through the leader", func(t *testing.T) {
		code, out, errs := run(t, "--addr", url, "-o", "json", "endpoints", "--consistent", "shop/cart")
		var got []struct {
			InstanceID  string `json:"instance_id"`
			Incarnation uint64
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0].InstanceID != "i-1" || got[0].Incarnation != 1 {
			t.Fatalf("endpoints --consistent: %d %q %q", code, out, errs)
		}
		code, out, errs = run(t, "--addr", url, "endpoints", "--consistent", "shop/cart")
		if code != 0 || !strings.Contains(out, "i-1") || !strings.Contains(out, "disruption budget: ") {
			t.Fatalf("endpoints --consistent: %d %q %q; want i-1 and the budget line", code, out, errs)
		}
	})
	t.Run("members json has the documented fields", func(t *testing.T) {
		code, out, errs := run(t, "--addr", url, "-o", "json", "members")
		var got []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 {
			t.Fatalf("members: %d %q %q", code, out, errs)
		}
		for _, f := range []string{"node_id", "raft_addr", "http_addr", "leader"} {
			if _, ok := got[0][f]; !ok {
				t.Errorf("members json lacks %q: %v", f, got[0])
			}
		}
	})
	t.Run("stale incarnation exits 1 with the server's error", func(t *testing.T) {
		code, _, errs := run(t, "--addr", url, "drain", "--instance", "i-1", "--incarnation", "7", "shop/cart")
		if code != exitError || !strings.Contains(errs, "409 fenced") {
			t.Fatalf("drain: %d %q", code, errs)
		}
	})
	t.Run("report, drain and events", func(t *testing.T) {
		if code, _, errs := run(t, "--addr", url, "report", "--instance", "i-1", "--incarnation", "1", "--ready=false", "shop/cart"); code != 0 {
			t.Fatalf("report: %d %q", code, errs)
		}
		if code, out, errs := run(t, "--addr", url, "drain", "--instance", "i-1", "--incarnation", "1", "shop/cart"); code != 0 || !strings.Contains(out, "lifecycle: draining") {
			t.Fatalf("drain: %d %q %q", code, out, errs)
		}
		code, out, errs := run(t, "--addr", url, "events", "shop/cart")
		if code != 0 || !strings.Contains(out, "ready -> draining") || !strings.Contains(out, "ready=false") {
			t.Fatalf("events: %d %q %q", code, out, errs)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no NS/SVC", []string{"endpoints"}, "want exactly one NS/SVC"},
		{"NS/SVC malformed", []string{"endpoints", "shop"}, `"shop" is not NS/SVC`},
		{"port not NAME=NUM", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http", "shop/cart"}, `--port: "http" is not NAME=VALUE`},
		{"port not a number", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=x", "shop/cart"}, "not a number"},
		// Explicit values out of range are refused, never taken for the
		// default (issue 8, item 9).
		{"weight 0", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=8080", "--weight", "0", "shop/cart"}, "--weight: 0 is out of range 1-65535"},
		{"weight negative", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=8080", "--weight", "-1", "shop/cart"}, "--weight: -1 is out of range 1-65535"},
		{"weight too large", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=8080", "--weight", "65536", "shop/cart"}, "--weight: 65536 is out of range 1-65535"},
		{"lease-ttl 0", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=8080", "--lease-ttl", "0s", "shop/cart"}, "--lease-ttl: 0s is out of range 5s-24h0m0s"},
		{"replaces 0", []string{"register", "--instance", "i", "--address", "10.0.0.1", "--port", "http=8080", "--replaces", "0", "shop/cart"}, "--replaces: 0 is not an incarnation"},
		{"unknown output", []string{"--output", "yaml", "services"}, "--output"},
		{"missing required flag", []string{"renew", "--instance", "i", "shop/cart"}, "incarnation"},
		{"server without data dir", []string{"server"}, "--data-dir is required"},
		{"server bad subnet", []string{"server", "--dev", "--subnet", "10.0.0.0/8=eu"}, "--subnet"},
	} {
		t.Run("usage: "+tc.name, func(t *testing.T) {
			code, _, errs := run(t, append([]string{"--addr", url}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errs, exitUsage, tc.want)
			}
		})
	}
}

func TestXDSBootstrap(t *testing.T) {
	code, out, errs := run(t, "xds-bootstrap", "--xds-addr", "10.0.0.1:8481", "--node-id", "n1", "--region", "eu", "--zone", "eu-1a")
	if code != 0 {
		t.Fatalf("xds-bootstrap: %d %q", code, errs)
	}
	var b struct {
		Servers []struct {
			URI      string   `json:"server_uri"`
			Features []string `json:"server_features"`
		} `json:"xds_servers"`
		Node struct {
			ID       string            `json:"id"`
			Locality map[string]string `json:"locality"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(b.Servers) != 1 || b.Servers[0].URI != "10.0.0.1:8481" || b.Node.ID != "n1" || b.Node.Locality["zone"] != "eu-1a" {
		t.Errorf("bootstrap %+v", b)
	}
}

// TestXDSBootstrapTLS: with a CA (its own flag, or the CLI's
// --ca-file), the bootstrap's channel credentials are grpc-go's "tls",
// naming the files.
func TestXDSBootstrapTLS(t *testing.T) {
	for _, args := range [][]string{
		{"xds-bootstrap", "--xds-addr", "10.0.0.1:8481", "--node-id", "n1", "--tls-ca", "/etc/cairn/ca.pem", "--tls-cert", "/etc/cairn/c.pem", "--tls-key", "/etc/cairn/k.pem"},
		{"--ca-file", "/etc/cairn/ca.pem", "--client-cert", "/etc/cairn/c.pem", "--client-key", "/etc/cairn/k.pem", "xds-bootstrap", "--xds-addr", "10.0.0.1:8481", "--node-id", "n1"},
	} {
		code, out, errs := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: %d %q", args, code, errs)
		}
		var b struct {
			Servers []struct {
				Creds []struct {
					Type   string            `json:"type"`
					Config map[string]string `json:"config"`
				} `json:"channel_creds"`
			} `json:"xds_servers"`
		}
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		want := map[string]string{"ca_certificate_file": "/etc/cairn/ca.pem", "certificate_file": "/etc/cairn/c.pem", "private_key_file": "/etc/cairn/k.pem"}
		if len(b.Servers) != 1 || len(b.Servers[0].Creds) != 1 || b.Servers[0].Creds[0].Type != "tls" || !maps.Equal(b.Servers[0].Creds[0].Config, want) {
			t.Errorf("%v: bootstrap %s", args, out)
		}
	}
	if code, _, errs := run(t, "xds-bootstrap", "--xds-addr", "10.0.0.1:8481", "--node-id", "n1", "--tls-cert", "c.pem"); code != exitUsage || !strings.Contains(errs, "needs its key and the CA file") {
		t.Errorf("a certificate alone: %d %q", code, errs)
	}
}

func TestXDSBootstrapRefusesABadAddress(t *testing.T) {
	code, out, errs := run(t, "xds-bootstrap", "--xds-addr", "10.0.0.1", "--node-id", "n1")
	if code != exitUsage || out != "" || !strings.Contains(errs, "--xds-addr") || !strings.Contains(errs, "HOST:PORT") {
		t.Errorf("xds-bootstrap --xds-addr 10.0.0.1: exit %d, out %q, err %q; want a usage error naming --xds-addr and HOST:PORT", code, out, errs)
	}
}
