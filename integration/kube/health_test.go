package kube_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// regionFromNodes: kube-sync restarted with --region-from-nodes
// registers a pod in its node's region, leaves the pods on nodes it
// does not know where they were (no incarnation churns), and moves a
// node's pods when its region label changes.
func (e *env) regionFromNodes(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-west", Labels: map[string]string{corev1.LabelTopologyRegion: "west"}}}
	if _, err := e.kube.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.endpoints("shop", "web")
	if err := e.ks.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.ks.Start("--region-from-nodes"); err != nil {
		t.Fatal(err)
	}
	e.create(slice("shop", "web", "web-3", pod("web-w", "uid-w1", "10.1.0.5", "west"))) // on node-west
	var w wire.Endpoint
	integration.Eventually(t, 20*time.Second, func() error {
		if w = e.endpoints("shop", "web")["web-w"]; w.Region != "west" {
			return fmt.Errorf("web-w: %s in region %q", w.Lifecycle, w.Region)
		}
		return nil
	})
	for id, was := range before {
		if now := e.endpoints("shop", "web")[id]; was.Lifecycle == status.Ready && now.Incarnation != was.Incarnation {
			t.Errorf("%s (on a node kube-sync does not know) went from incarnation %d to %d", id, was.Incarnation, now.Incarnation)
		}
	}
	n, err := e.kube.CoreV1().Nodes().Get(e.ctx, "node-west", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[corev1.LabelTopologyRegion] = "east"
	if _, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	integration.Eventually(t, 20*time.Second, func() error {
		if now := e.endpoints("shop", "web")["web-w"]; now.Region != "east" || now.Incarnation == w.Incarnation {
			return fmt.Errorf("web-w: incarnation %d in region %q after its node moved to east", now.Incarnation, now.Region)
		}
		return nil
	})
}

// health: an instance kube-sync registered keeps cairn's own evidence.
// A pod Kubernetes calls ready whose probe fails is withdrawn by cairn,
// on the probe; one whose probe passes but that Kubernetes calls not
// ready is withdrawn too, on the self-report kube-sync made of it. The
// audit trail says which.
func (e *env) health(t *testing.T) {
	// Five pods on addresses of this host, one port: a backend each,
	// whose /ready the test turns.
	addrs := hostAddrs(t, 5)
	var port int
	backends := map[string]*backend{}
	var eps []discoveryv1.Endpoint
	for i := range 5 {
		id := fmt.Sprintf("api-%d", i)
		b := startBackend(t, addrs[i], port)
		port = b.port
		backends[id] = b
		eps = append(eps, pod(id, "uid-api-"+strconv.Itoa(i), b.ip, "a"))
	}
	e.create(service("shop", "api"))
	sl := slice("shop", "api", "api-1", eps...)
	sl.Ports[0].Port = ptr.To(int32(port))
	e.create(sl)
	healthy := func(id string) func(wire.Endpoint) bool {
		return func(ep wire.Endpoint) bool { return ep.InstanceID == id && ep.Eligible && ep.Verdict == status.Healthy }
	}
	integration.Eventually(t, 20*time.Second, func() error {
		eps := e.endpoints("shop", "api")
		for id := range backends {
			if !healthy(id)(eps[id]) {
				return fmt.Errorf("%s: %s %s %v", id, eps[id].Lifecycle, eps[id].Verdict, eps[id].Reasons)
			}
		}
		return nil
	})
	// api-0: its probe fails, Kubernetes still says ready.
	backends["api-0"].ready.Store(false)
	// api-1: Kubernetes says not ready, its probe still passes.
	e.update("shop", "api-1", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
	})
	integration.Eventually(t, 20*time.Second, func() error {
		eps := e.endpoints("shop", "api")
		for _, id := range []string{"api-0", "api-1"} {
			if ep := eps[id]; ep.Eligible || ep.Lifecycle != status.Ready {
				return fmt.Errorf("%s: %s, eligible %v, %s %v", id, ep.Lifecycle, ep.Eligible, ep.Verdict, ep.Reasons)
			}
		}
		return nil
	})
	evs, err := e.c.Nodes[0].Client().Events(e.ctx, "shop", "api", 200)
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, ev := range evs {
		if ev.Kind == wire.EventEligibility && strings.HasPrefix(ev.To, "withdrawn") {
			why[ev.Instance] = ev.Reason
		}
	}
	if !strings.HasPrefix(why["api-0"], "probe failing") {
		t.Errorf("api-0 (Kubernetes: ready; probe: failing) withdrawn for %q, want the probe", why["api-0"])
	}
	if !strings.HasPrefix(why["api-1"], "self-report: not ready") {
		t.Errorf("api-1 (Kubernetes: not ready; probe: passing) withdrawn for %q, want the self-report", why["api-1"])
	}
	if eps := e.endpoints("shop", "api"); !healthy("api-2")(eps["api-2"]) {
		t.Errorf("api-2, ready on both sides, is %s %v", eps["api-2"].Verdict, eps["api-2"].Reasons)
	}
}

// hostAddrs gives this host n addresses that are not loopback (which an
// EndpointSlice may not hold) on lo, removed when the test ends:
// 10.253.P.1-n, P from the process id. Root only.
func hostAddrs(t *testing.T, n int) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		integration.Missing(t, "pods on addresses of this host", "adding addresses to lo needs root")
	}
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	var out []string
	for i := range n {
		a := fmt.Sprintf("10.253.%d.%d/32", os.Getpid()%250, i+1)
		if err := run("addr", "add", a, "dev", "lo"); err != nil {
			integration.Missing(t, "pods on addresses of this host", err.Error())
		}
		t.Cleanup(func() { run("addr", "del", a, "dev", "lo") })
		out = append(out, strings.TrimSuffix(a, "/32"))
	}
	return out
}

// backend is a pod's HTTP server: /ready answers 200 while ready.
type backend struct {
	ip    string
	port  int
	ready atomic.Bool
}

// startBackend listens on ip:port (0: any) until the test ends.
func startBackend(t *testing.T, ip string, port int) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ip: ip, port: ln.Addr().(*net.TCPAddr).Port}
	b.ready.Store(true)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !b.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}
