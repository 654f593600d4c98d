// Package kube_test runs cairn kube-sync against a real kube-apiserver
// and etcd (scripts/install-kube.sh builds them) and a real cairn
// server: EndpointSlices written as the EndpointSlice controller would
// write them become cairn's instances.
package kube_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	integration.RemoveBinary()
	os.Exit(code)
}

const (
	admin     = "admin-0123456789abcdefghijklmn"
	registrar = "kube-sync-0123456789abcdefghijk"
	cluster   = "test"
	// kubeSyncUser is the identity of deploy/kubernetes/kube-sync.yaml's
	// ServiceAccount, as the API server authenticates it.
	kubeSyncUser = "system:serviceaccount:cairn-system:cairn-kube-sync"
	// writeRate and writeBurst are kube-sync's --write-rate and
	// --write-burst here: the burst test checks the writes kept to them.
	writeRate  = 100
	writeBurst = 20
)

// definitions are cairn's services the Kubernetes ones sync to: no
// check (the addresses are made up), a short drain window.
const definitions = `namespace: shop
name: web
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {drain_window: 3s}
---
namespace: bulk
name: many
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {drain_window: 3s, shrink_cap: 1}
---
namespace: shop
name: api
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: probe}
check: {type: http, port: http, path: /ready, interval: 500ms, timeout: 400ms}
policy: {withdraw_after: 2, admit_after: 3, admit_min: 1s, shrink_cap: 1, min_healthy_fraction: 0.2}
`

type env struct {
	t    *testing.T
	ctx  context.Context
	kube kubernetes.Interface
	c    *integration.Cluster
	ks   *integration.KubeSync
	// reg is a client with kube-sync's registrar token.
	reg *client.Client
}

func TestKubeSync(t *testing.T) {
	integration.NeedProcesses(t)
	k := integration.StartKubeAPI(t)
	acl := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(acl, fmt.Appendf(nil, "tokens:\n- {secret: %s, scope: admin}\n- {secret: %s, scope: registrar, namespaces: [shop, bulk]}\n",
		admin, registrar), 0o600); err != nil {
		t.Fatal(err)
	}
	// Loopback endpoints: the health test's pods are backends of the
	// test on 127.0.0.x, which cairn probes.
	c := integration.StartClusterWith(t, integration.Config{Nodes: 1, Token: admin, Args: []string{"--acl-file", acl, "--allow-loopback-endpoints"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	if _, err := c.Nodes[0].Client().Apply(ctx, []byte(definitions)); err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(c.Nodes[0].HTTPAddr, registrar)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	e := &env{t: t, ctx: ctx, kube: k.Client, c: c, reg: reg}
	for _, ns := range []string{"shop", "bulk"} {
		e.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	e.create(service("shop", "web"))
	// deploy/kubernetes: accepted by the API server; kube-sync's RBAC
	// applied, and kube-sync run as its ServiceAccount with it.
	if !t.Run("Manifests", func(t *testing.T) { checkManifests(t, k) }) {
		t.FailNow()
	}
	kubeconfig, err := k.KubeconfigFor(kubeSyncUser)
	if err != nil {
		t.Fatal(err)
	}
	e.ks = integration.StartKubeSync(t, c, registrar, kubeconfig, "--cluster", cluster,
		"--write-rate", strconv.Itoa(writeRate), "--write-burst", strconv.Itoa(writeBurst))

	t.Run("ThreeEndpointsTwoZones", e.threeEndpoints)
	t.Run("PodReplaced", e.podReplaced)
	t.Run("Terminating", e.terminating)
	t.Run("Restart", e.restart)
	t.Run("Burst500", e.burst)
	t.Run("HealthFromBothSides", e.health)
	t.Run("RegionFromNodes", e.regionFromNodes)
}

// threeEndpoints: a slice with three ready endpoints in two zones is
// three instances in DNS within 2 s, each in its zone.
func (e *env) threeEndpoints(t *testing.T) {
	start := time.Now()
	e.create(slice("shop", "web", "web-1", pod("web-a", "uid-a1", "10.1.0.1", "a"), pod("web-b", "uid-b1", "10.1.0.2", "a"),
		pod("web-c", "uid-c1", "10.1.0.3", "b")))
	integration.Eventually(t, 10*time.Second, func() error { return e.answers("web.shop", 3) })
	took := time.Since(start)
	t.Logf("three instances in DNS %s after the slice was created", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("three instances in DNS %s after the slice was created; want within 2s", took.Round(time.Millisecond))
	}
	eps := e.endpoints("shop", "web")
	for id, zone := range map[string]string{"web-a": "a", "web-b": "a", "web-c": "b"} {
		ep, ok := eps[id]
		switch {
		case !ok:
			t.Errorf("no instance %s", id)
		case ep.Zone != zone:
			t.Errorf("%s: zone %q, want %q", id, ep.Zone, zone)
		case ep.RegistrationID != "kube-sync/"+cluster+"/uid-"+id[4:]+"1":
			t.Errorf("%s: registration id %q, want kube-sync/%s/ and the pod's UID", id, ep.RegistrationID, cluster)
		case ep.Ports["http"] != 8080 || ep.Lifecycle != status.Ready:
			t.Errorf("%s: ports %v, lifecycle %s; want http 8080, ready", id, ep.Ports, ep.Lifecycle)
		case !strings.HasPrefix(ep.Source, "EndpointSlice shop/web-1@"):
			t.Errorf("%s: source %q, want the slice and its resourceVersion", id, ep.Source)
		}
	}
}

// podReplaced: a pod replaced under the same name (a new UID) is a new
// incarnation that fences the old; a late registration for the old UID
// changes nothing.
func (e *env) podReplaced(t *testing.T) {
	old := e.endpoints("shop", "web")["web-a"]
	e.update("shop", "web-1", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0] = pod("web-a", "uid-a2", "10.1.0.11", "a")
	})
	var now wire.Endpoint
	integration.Eventually(t, 10*time.Second, func() error {
		now = e.endpoints("shop", "web")["web-a"]
		if now.RegistrationID != "kube-sync/"+cluster+"/uid-a2" {
			return fmt.Errorf("web-a: registration id %q, incarnation %d", now.RegistrationID, now.Incarnation)
		}
		return nil
	})
	if now.Incarnation <= old.Incarnation || now.Addresses[0] != "10.1.0.11" {
		t.Fatalf("web-a replaced: incarnation %d (was %d), addresses %v", now.Incarnation, old.Incarnation, now.Addresses)
	}
	// What a kube-sync with a stale cache would send for the old pod.
	_, err := e.reg.Register(e.ctx, "shop", "web", wire.Registration{ID: "web-a", Addresses: []string{"10.1.0.1"},
		Ports: map[string]int{"http": 8080}, Zone: "a", LeaseTTL: wire.Duration(10 * time.Minute),
		RegistrationID: "kube-sync/" + cluster + "/uid-a1"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != wire.CodeFenced {
		t.Fatalf("a late registration of the old pod: %v, want 409 fenced", err)
	}
	if after := e.endpoints("shop", "web")["web-a"]; after.Incarnation != now.Incarnation || after.Addresses[0] != "10.1.0.11" {
		t.Errorf("after the late registration web-a is incarnation %d at %v, want %d at 10.1.0.11", after.Incarnation, after.Addresses, now.Incarnation)
	}
}

// terminating: an endpoint that turns terminating is drained at once
// (out of DNS) and gone after the drain window.
func (e *env) terminating(t *testing.T) {
	start := time.Now()
	e.update("shop", "web-1", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	})
	integration.Eventually(t, 10*time.Second, func() error {
		if ep := e.endpoints("shop", "web")["web-b"]; ep.Lifecycle != status.Draining {
			return fmt.Errorf("web-b is %s", ep.Lifecycle)
		}
		return e.answers("web.shop", 2)
	})
	drained := time.Since(start)
	t.Logf("web-b draining and out of DNS %s after it turned terminating", drained.Round(time.Millisecond))
	if drained > 2*time.Second {
		t.Errorf("web-b drained %s after it turned terminating; want at once (within 2s)", drained.Round(time.Millisecond))
	}
	integration.Eventually(t, 20*time.Second, func() error {
		if ep, ok := e.endpoints("shop", "web")["web-b"]; ok && ep.Lifecycle != status.Terminated {
			return fmt.Errorf("web-b is %s %s after it turned terminating (drain window 3s)", ep.Lifecycle, time.Since(start).Round(time.Second))
		}
		return nil
	})
}

// restart: kube-sync killed, the slices changed meanwhile, started
// again: cairn converges, and the instances it did not register are
// untouched.
func (e *env) restart(t *testing.T) {
	// Someone else's: the registrar's own (no registration id), and
	// another cluster's kube-sync's.
	mine, err := e.reg.Register(e.ctx, "shop", "web", wire.Registration{ID: "manual-1", Addresses: []string{"10.1.9.1"},
		Ports: map[string]int{"http": 8080}, Zone: "a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.reg.Register(e.ctx, "shop", "web", wire.Registration{ID: "other-1", Addresses: []string{"10.1.9.2"},
		Ports: map[string]int{"http": 8080}, Zone: "b", RegistrationID: "kube-sync/elsewhere/uid-o1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ks.Kill(); err != nil {
		t.Fatal(err)
	}
	// web-c's pod deleted, web-d's started, and a slice gone with what
	// was left of web-b.
	e.update("shop", "web-1", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = []discoveryv1.Endpoint{s.Endpoints[0]}
	})
	e.create(slice("shop", "web", "web-2", pod("web-d", "uid-d1", "10.1.0.4", "b")))
	if err := e.ks.Start(); err != nil {
		t.Fatal(err)
	}
	integration.Eventually(t, 20*time.Second, func() error {
		eps := e.endpoints("shop", "web")
		if d := eps["web-d"]; d.Lifecycle != status.Ready {
			return fmt.Errorf("web-d is %q", d.Lifecycle)
		}
		if c, ok := eps["web-c"]; ok && c.Lifecycle != status.Draining && c.Lifecycle != status.Terminated {
			return fmt.Errorf("web-c is %s", c.Lifecycle)
		}
		return e.answers("web.shop", 4) // web-a, web-d, manual-1, other-1
	})
	eps := e.endpoints("shop", "web")
	for _, was := range []wire.Registered{mine, other} {
		now := eps[was.ID]
		if now.Incarnation != was.Incarnation || now.Lifecycle != status.Ready {
			t.Errorf("%s, not kube-sync's here: incarnation %d %s, want %d ready, untouched", was.ID, now.Incarnation, now.Lifecycle, was.Incarnation)
		}
	}
}

// burst: 500 endpoints at once, then a change of all 500: reconciled
// within the write rate, every write accepted.
func (e *env) burst(t *testing.T) {
	const slices, per = 5, 100
	e.create(service("bulk", "many"))
	before := e.writes()
	start := time.Now()
	for s := range slices {
		var eps []discoveryv1.Endpoint
		for i := range per {
			n := s*per + i
			eps = append(eps, pod(fmt.Sprintf("many-%03d", n), fmt.Sprintf("uid-m%03d", n), fmt.Sprintf("10.2.%d.%d", n/200, n%200+1), string(rune('a'+s%3))))
		}
		e.create(slice("bulk", "many", fmt.Sprintf("many-%d", s), eps...))
	}
	integration.Eventually(t, 60*time.Second, func() error {
		if n := e.count("bulk", "many", func(ep wire.Endpoint) bool { return ep.Lifecycle == status.Ready }); n != slices*per {
			return fmt.Errorf("%d of %d registered", n, slices*per)
		}
		return nil
	})
	took := time.Since(start)
	floor := time.Duration(float64(slices*per-writeBurst) / writeRate * float64(time.Second))
	t.Logf("500 endpoints registered in %s (the write rate's floor: %s)", took.Round(time.Millisecond), floor)
	if took < floor {
		t.Errorf("500 registrations took %s, under the %s --write-rate %d (burst %d) allows", took, floor, writeRate, writeBurst)
	}
	// All 500 turn unready at once: 500 self-reports.
	start = time.Now()
	for s := range slices {
		e.update("bulk", fmt.Sprintf("many-%d", s), func(sl *discoveryv1.EndpointSlice) {
			for i := range sl.Endpoints {
				sl.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
			}
		})
	}
	integration.Eventually(t, 60*time.Second, func() error {
		if n := e.count("bulk", "many", func(ep wire.Endpoint) bool { return ep.Report != nil && !ep.Report.Ready }); n != slices*per {
			return fmt.Errorf("%d of %d reported not ready", n, slices*per)
		}
		return nil
	})
	t.Logf("500 not-ready self-reports in %s", time.Since(start).Round(time.Millisecond))
	after := e.writes()
	for k, n := range after {
		if d := n - before[k]; d > 0 && !strings.HasSuffix(k, `result="ok"}`) {
			t.Errorf("%s: %v writes refused or failed during the burst", k, d)
		}
	}
	if d := after[`cairn_kubesync_writes_total{op="register",result="ok"}`] - before[`cairn_kubesync_writes_total{op="register",result="ok"}`]; d != slices*per {
		t.Errorf("%v registrations for 500 endpoints, want 500", d)
	}
	if d := after[`cairn_kubesync_writes_total{op="report",result="ok"}`] - before[`cairn_kubesync_writes_total{op="report",result="ok"}`]; d != slices*per {
		t.Errorf("%v self-reports for 500 endpoints, want 500", d)
	}
}

// service is a Service selected for sync by the annotation.
func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"cairn.io/sync": "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}},
	}
}

// slice is an EndpointSlice of the Service ns/svc, as the EndpointSlice
// controller writes one.
func slice(ns, svc, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

// pod is a ready endpoint of a pod.
func pod(name, uid, addr, zone string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "", Name: name, UID: types.UID(uid)},
		Zone:       ptr.To(zone),
		NodeName:   ptr.To("node-" + zone),
	}
}

func (e *env) create(o any) {
	e.t.Helper()
	var err error
	switch o := o.(type) {
	case *corev1.Namespace:
		_, err = e.kube.CoreV1().Namespaces().Create(e.ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = e.kube.CoreV1().Services(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{})
	case *discoveryv1.EndpointSlice:
		_, err = e.kube.DiscoveryV1().EndpointSlices(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("cannot create a %T", o)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// update changes the slice ns/name with f.
func (e *env) update(ns, name string, f func(*discoveryv1.EndpointSlice)) {
	e.t.Helper()
	s, err := e.kube.DiscoveryV1().EndpointSlices(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(s)
	if _, err := e.kube.DiscoveryV1().EndpointSlices(ns).Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// endpoints returns cairn's instances of ns/svc by id (a consistent
// read).
func (e *env) endpoints(ns, svc string) map[string]wire.Endpoint {
	e.t.Helper()
	eps, err := e.c.Nodes[0].Client().Endpoints(e.ctx, ns, svc, client.Consistent())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]wire.Endpoint{}
	for _, ep := range eps {
		out[ep.InstanceID] = ep
	}
	return out
}

func (e *env) count(ns, svc string, ok func(wire.Endpoint) bool) int {
	n := 0
	for _, ep := range e.endpoints(ns, svc) {
		if ok(ep) {
			n++
		}
	}
	return n
}

// answers checks that the server's DNS answers name (SVC.NS) with n A
// records.
func (e *env) answers(name string, n int) error {
	q := new(dns.Msg)
	q.SetQuestion(name+".svc.cairn.internal.", dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, e.c.Nodes[0].DNSAddr)
	if err != nil {
		return err
	}
	if len(r.Answer) != n {
		return fmt.Errorf("%s: %d A records (%s), want %d", name, len(r.Answer), dns.RcodeToString[r.Rcode], n)
	}
	return nil
}

// writes scrapes kube-sync's cairn_kubesync_writes_total series.
func (e *env) writes() map[string]float64 {
	e.t.Helper()
	resp, err := http.Get("http://" + e.ks.HTTPAddr + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cairn_kubesync_writes_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			e.t.Fatal(err)
		}
		out[line[:i]] = v
	}
	return out
}
