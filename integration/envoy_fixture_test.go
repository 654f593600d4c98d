package integration

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// The Envoy tests' fixture: real Envoy processes started from the shipped
// bootstrap, the demo service of deploy/demo.yaml (the bootstrap's
// listener routes to its cluster), and HTTP upstreams on loopback that
// count what Envoy sends them.

const (
	demoNS, demoSvc = "demo", "web"
	// demoCluster is the cluster the bootstrap's listener routes to.
	demoCluster = "web.demo:http"
	// demoRegion is the bootstrap's node region; its zone is demoZone.
	demoRegion, demoZone = "local", "zone-1"
)

// needEnvoy returns the Envoy binary, or skips the test naming what is
// missing; under CI=true, where .ci/run installs Envoy, it fails.
func needEnvoy(t *testing.T) string {
	t.Helper()
	needProcesses(t)
	bin, err := EnvoyBinary()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; under CI=true a missing Envoy fails the test", err)
	}
	t.Skipf("skipped: %v", err)
	return ""
}

// startEnvoy starts an Envoy subscribed to the servers of c (all of
// them unless cfg.Servers is set), stopped when the test ends; its log
// is printed if the test failed.
func startEnvoy(t *testing.T, c *Cluster, cfg EnvoyConfig) *Envoy {
	t.Helper()
	cfg.Bin = needEnvoy(t)
	if len(cfg.Servers) == 0 {
		for _, n := range c.Nodes {
			cfg.Servers = append(cfg.Servers, n.GRPCAddr)
		}
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "envoy-"+cmp.Or(cfg.Node, "demo"))
	}
	cfg.Logf = t.Logf
	return StartEnvoy(t, cfg)
}

// upstream is an HTTP backend on loopback: "/ready" answers 200 while
// Ready (the demo service's health check), anything else answers Code
// (200 at first) with header X-Upstream: ID, and is counted.
type upstream struct {
	ID   string
	Addr string // 127.0.0.1:PORT
	Port int

	Ready atomic.Bool
	Code  atomic.Int32

	mu   sync.Mutex
	hits []time.Time // arrival of each counted request
}

// newUpstreams starts n upstreams, ids prefix-1 … prefix-n, closed when
// the test ends.
func newUpstreams(t *testing.T, prefix string, n int) []*upstream {
	t.Helper()
	var us []*upstream
	for i := range n {
		u := &upstream{ID: fmt.Sprintf("%s-%d", prefix, i+1)}
		u.Ready.Store(true)
		u.Code.Store(http.StatusOK)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u.Addr, u.Port = ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: u}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Serve(ln)
		}()
		t.Cleanup(func() { srv.Close(); <-done })
		us = append(us, u)
	}
	return us
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ready" {
		if u.Ready.Load() {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		return
	}
	u.mu.Lock()
	u.hits = append(u.hits, time.Now())
	u.mu.Unlock()
	w.Header().Set("X-Upstream", u.ID)
	w.WriteHeader(int(u.Code.Load()))
}

// Hits returns how many requests reached u, and when the last did.
func (u *upstream) Hits() (int, time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.hits) == 0 {
		return 0, time.Time{}
	}
	return len(u.hits), u.hits[len(u.hits)-1]
}

// HitsSince returns how many requests reached u at or after at.
func (u *upstream) HitsSince(at time.Time) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	i := sort.Search(len(u.hits), func(i int) bool { return !u.hits[i].Before(at) })
	return len(u.hits) - i
}

// demoDefinition is deploy/demo.yaml with extra policy lines (each
// "key: value", indented under policy), for a test that needs other
// thresholds on the service the bootstrap routes to.
func demoDefinition(t *testing.T, policy ...string) string {
	t.Helper()
	b, err := os.ReadFile("../deploy/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := string(b)
	if len(policy) > 0 {
		if !strings.Contains(def, "\npolicy:\n") {
			t.Fatal("deploy/demo.yaml has no policy section")
		}
		def = strings.Replace(def, "\npolicy:\n", "\npolicy:\n  "+strings.Join(policy, "\n  ")+"\n", 1)
	}
	return def
}

// registerUpstreams registers each upstream as an instance of demo/web
// in region "local" and the zone zones gives it (zone-1 if zones is
// nil), on an hour's lease, with edit (may be nil) applied.
func registerUpstreams(ctx context.Context, t *testing.T, c *Cluster, us []*upstream, zones func(i int) string, edit func(*wire.Registration)) {
	t.Helper()
	for i, u := range us {
		zone := demoZone
		if zones != nil {
			zone = zones(i)
		}
		// A lease that outlasts the test: the demo's 30 s would expire
		// (nothing renews it here) and count as evidence of its own.
		reg := wire.Registration{ID: u.ID, Addresses: []string{"127.0.0.1"}, Ports: map[string]int{"http": u.Port},
			Region: demoRegion, Zone: zone, LeaseTTL: wire.Duration(time.Hour)}
		if edit != nil {
			edit(&reg)
		}
		onAnyNode(t, c, "register "+u.ID, func(n *Node) error {
			_, err := n.Client().Register(ctx, demoNS, demoSvc, reg)
			return err
		})
	}
}

// get sends one request through e, and returns the status and which
// upstream answered ("" if Envoy answered itself).
func get(ctx context.Context, e *Envoy) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Listener+"/", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := e.HTTP().Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Upstream"), nil
}

// spread sends n requests through e, one after another, and returns how
// many each upstream answered, and the statuses Envoy answered itself.
func spread(ctx context.Context, e *Envoy, n int) (map[string]int, map[int]int, error) {
	by, own := map[string]int{}, map[int]int{}
	for range n {
		code, who, err := get(ctx, e)
		if err != nil {
			return by, own, err
		}
		if who == "" {
			own[code]++
			continue
		}
		by[who]++
	}
	return by, own, nil
}

// waitHosts polls e until the hosts it holds for the demo cluster pass
// want.
func waitHosts(t *testing.T, e *Envoy, timeout time.Duration, what string, want func([]EnvoyHost) error) []EnvoyHost {
	t.Helper()
	var hosts []EnvoyHost
	err := Poll(timeout, 50*time.Millisecond, func() error {
		var err error
		if hosts, err = e.Hosts(context.Background(), demoCluster); err != nil {
			return err
		}
		return want(hosts)
	})
	if err != nil {
		t.Fatalf("%s: Envoy (%s) holds %s: %v", what, e.name, hostLines(hosts), err)
	}
	return hosts
}

// hostsAre passes when Envoy holds exactly the upstreams us, each with
// health status health.
func hostsAre(health string, us ...*upstream) func([]EnvoyHost) error {
	return func(hs []EnvoyHost) error {
		want := map[string]bool{}
		for _, u := range us {
			want[u.Addr] = true
		}
		if len(hs) != len(want) {
			return fmt.Errorf("%d hosts, want %d", len(hs), len(want))
		}
		for _, h := range hs {
			if !want[h.Addr] {
				return fmt.Errorf("host %s is not one of the %d wanted", h.Addr, len(want))
			}
			if health != "" && h.Health != health {
				return fmt.Errorf("host %s is %s, want %s", h.Addr, h.Health, health)
			}
		}
		return nil
	}
}

func hostLines(hs []EnvoyHost) string {
	if len(hs) == 0 {
		return "no hosts"
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "\n  %s %s%v weight %d priority %d %s/%s rq %d", h.Addr, h.Health, h.Flags, h.Weight, h.Priority, h.Region, h.Zone, h.Requests)
	}
	return b.String()
}

// noRejectedUpdates fails the test if Envoy refused an update of the
// clusters or of the demo cluster's assignment. Envoy keeps both stats
// from the start, so a missing one is a wrong name, not a pass.
func noRejectedUpdates(ctx context.Context, t *testing.T, e *Envoy) {
	t.Helper()
	for _, stat := range []string{"cluster_manager.cds.update_rejected", "cluster." + strings.ReplaceAll(demoCluster, ":", "_") + ".update_rejected"} {
		if v, ok, err := e.Stat(ctx, stat); err != nil || !ok || v != 0 {
			t.Errorf("%s: %s = %d (present %v, %v); want 0", e.name, stat, v, ok, err)
		}
	}
}
