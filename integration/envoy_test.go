package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// grpcDefaultAddr is `cairn server --grpc-addr`'s default, which the
// shipped bootstrap's cairn cluster names.
const grpcDefaultAddr = "127.0.0.1:8481"

// TestEnvoyValidates runs `envoy --mode validate` on the shipped
// bootstrap as it is, and on each change the tests make to it (TLS,
// state of the world, a token, addresses); and checks that Envoy does
// refuse a broken one, so that a pass means something. The bootstrap's
// cairn address is the binary's default --grpc-addr.
func TestEnvoyValidates(t *testing.T) {
	bin := needEnvoy(t)
	t.Parallel()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, EnvoyBootstrap)
	src, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	validate := func(path string) error {
		out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--disable-hot-restart", "--log-level", "error").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	t.Run("as shipped", func(t *testing.T) {
		if err := validate(shipped); err != nil {
			t.Fatalf("envoy --mode validate %s: %v", EnvoyBootstrap, err)
		}
		if !strings.Contains(string(src), fmt.Sprintf("{address: 127.0.0.1, port_value: %s}", grpcDefaultAddr[len("127.0.0.1:"):])) {
			t.Errorf("%s does not name cairn's default --grpc-addr %s", EnvoyBootstrap, grpcDefaultAddr)
		}
		bin, err := Binary()
		if err != nil {
			t.Fatal(err)
		}
		help, err := exec.Command(bin, "server", "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("cairn server --help: %v\n%s", err, help)
		}
		m := regexp.MustCompile(`--grpc-addr value .*\(default: "([^"]*)"\)`).FindSubmatch(help)
		if m == nil || string(m[1]) != grpcDefaultAddr {
			t.Errorf("cairn server --help: --grpc-addr default %q; the bootstrap names %s", m, grpcDefaultAddr)
		}
	})
	ca, err := NewTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsFiles := EnvoyTLS{CA: ca.CAFile, Cert: ca.ClientCert, Key: ca.ClientKey}
	for _, tc := range []struct {
		name string
		cfg  EnvoyConfig
		want []string // in the bootstrap written
	}{
		{"three servers", EnvoyConfig{Servers: []string{"127.0.0.1:1", "127.0.0.2:2", "[::1]:3"}}, nil},
		{"state of the world", EnvoyConfig{Servers: []string{"127.0.0.1:1"}, SotW: true}, nil},
		{"TLS and a token", EnvoyConfig{Servers: []string{"127.0.0.1:1"}, TLS: &tlsFiles, Token: "secret"}, nil},
		{"a region and a cluster", EnvoyConfig{Servers: []string{"127.0.0.1:1"}, Region: "r1", Cluster: "svc-01.sim:main"},
			[]string{"region: r1\n", "cluster: svc-01.sim:main\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EnvoyBootstrapFor(src, tc.cfg, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := validate(path); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("the bootstrap has no %q:\n%s", w, b)
				}
			}
		})
	}
	t.Run("broken is refused", func(t *testing.T) {
		for _, tc := range []struct{ old, new string }{
			{"set_node_on_first_message_only:", "set_node_on_first_msg_only:"},
			{"extensions.filters.http.router.v3.Router", "extensions.filters.http.router.v3.Routr"},
			{"port_value: 9901", "port_value: 99999"},
			{"stat_prefix: demo_web", "stat_prefix: \"\""},
		} {
			broken := strings.Replace(string(src), tc.old, tc.new, 1)
			if broken == string(src) {
				t.Fatalf("%s does not contain %q", EnvoyBootstrap, tc.old)
			}
			path := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := validate(path); err == nil {
				t.Errorf("%q → %q: Envoy validates it", tc.old, tc.new)
			}
		}
	})
}

// TestEnvoyRoutesInRotation starts a --dev server with the demo service
// and three upstreams in the bootstrap's zone, and a real Envoy from the
// shipped bootstrap, over delta ADS and over state of the world: Envoy
// takes the cluster and its assignment from cairn, and its listener
// sends requests to every upstream in turn.
func TestEnvoyRoutesInRotation(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	c := StartCluster(t, 1, "--dev")
	ctx := ctxT(t, 2*time.Minute)
	applyDefinition(ctx, t, c, demoDefinition(t))
	us := newUpstreams(t, "web", 3)
	registerUpstreams(ctx, t, c, us, nil, nil)

	for _, sotw := range []bool{false, true} {
		name := map[bool]string{false: "delta", true: "state of the world"}[sotw]
		t.Run(name, func(t *testing.T) {
			e := startEnvoy(t, c, EnvoyConfig{Node: "envoy-" + strings.ReplaceAll(name, " ", "-"), SotW: sotw})
			waitHosts(t, e, 30*time.Second, "the demo cluster from cairn", hostsAre("", us...))
			// Round robin over three: 30 requests reach each upstream
			// about 10 times; the weights cairn publishes during slow
			// start are equal for all three, registered together.
			by, own, err := spread(ctx, e, 30)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range us {
				if by[u.ID] < 5 {
					t.Errorf("%s answered %d of 30 requests through Envoy (all: %v; Envoy itself: %v)", u.ID, by[u.ID], by, own)
				}
			}
			if len(own) > 0 {
				t.Errorf("Envoy answered itself: %v", own)
			}
			noRejectedUpdates(ctx, t, e)
			if v, err := e.AssignmentVersion(ctx, demoCluster); err != nil || v == "" {
				t.Errorf("Envoy holds the assignment at version %q (%v); want cairn's", v, err)
			} else {
				t.Logf("assignment version %s", v)
			}
		})
	}
}
