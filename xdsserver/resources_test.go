package xdsserver

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// ep describes one slot of a test table.
type ep struct {
	id     string
	addrs  []string
	port   uint16 // the "grpc" port; 0: the instance has none
	region string
	zone   string
	entry  status.Entry // its state: verdict, lifecycle, flags, weights
}

// table publishes one service "pay.shop" with ports grpc and admin, and
// the given endpoints, and returns the table (released by the test's
// cleanup) and the service's id.
func table(t *testing.T, eps ...ep) (*status.Table, uint32, status.ServiceInfo) {
	t.Helper()
	tb := statustest.New(t, 16)
	pub := tb.Publisher
	svc := status.ServiceInfo{Namespace: "shop", Name: "pay", MaxEjectionPercent: 10,
		Ports: []status.Port{{Name: "admin", Number: 9000, Protocol: "tcp"}, {Name: "grpc", Number: 8443, Protocol: "tcp"}}}
	pay := statustest.Service{ServiceInfo: svc}
	for _, e := range eps {
		in := statustest.FromEntry(e.id, e.entry, e.addrs...).In(e.region, e.zone)
		in.Incarnation, in.Ports = 7, map[string]uint16{"admin": 9000}
		if e.port != 0 {
			in.Ports["grpc"] = e.port
		}
		pay.Instances = append(pay.Instances, in)
	}
	tb.Publish(t, pay)
	tab := pub.Acquire()
	t.Cleanup(tab.Release)
	return tab, 1, svc
}

var (
	healthy    = status.Entry{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 100, BaseWeight: 100}
	unknown    = status.Entry{Verdict: status.Unknown, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 100, BaseWeight: 100}
	slow       = status.Entry{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible | status.SlowStart, Weight: 10, BaseWeight: 100}
	withdrawn  = status.Entry{Verdict: status.Unhealthy, Lifecycle: status.Ready, BaseWeight: 100}
	draining   = status.Entry{Verdict: status.Healthy, Lifecycle: status.Draining, BaseWeight: 100}
	starting   = status.Entry{Verdict: status.Unknown, Lifecycle: status.Starting, BaseWeight: 100}
	disregard  = status.Entry{Verdict: status.Unhealthy, Lifecycle: status.Ready, Flags: status.Eligible | status.HealthDisregarded, Weight: 100, BaseWeight: 100}
	zeroWeight = status.Entry{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 0, BaseWeight: 100}
)

// flat lists an assignment's endpoints as "addr:port health weight
// priority region/zone".
type flatEP struct {
	addr     string
	health   corev3.HealthStatus
	weight   uint32
	priority uint32
	locality string
	flagged  bool
}

func flat(cla *endpointv3.ClusterLoadAssignment) []flatEP {
	var out []flatEP
	for _, l := range cla.Endpoints {
		for _, lb := range l.LbEndpoints {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			_, flagged := lb.GetMetadata().GetFilterMetadata()["cairn"].GetFields()["health_disregarded"]
			out = append(out, flatEP{addr: netip.AddrPortFrom(netip.MustParseAddr(sa.Address), uint16(sa.GetPortValue())).String(),
				health: lb.HealthStatus, weight: lb.LoadBalancingWeight.GetValue(), priority: l.Priority,
				locality: l.Locality.Region + "/" + l.Locality.Zone, flagged: flagged})
		}
	}
	return out
}

func TestAssignmentHealthAndWeights(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
		ep{id: "b", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: unknown},
		ep{id: "c", addrs: []string{"10.0.0.3"}, port: 8443, region: "eu", zone: "eu-1a", entry: slow},
		ep{id: "d", addrs: []string{"10.0.0.4"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "e", addrs: []string{"10.0.0.5"}, port: 8443, region: "eu", zone: "eu-1a", entry: draining},
		ep{id: "f", addrs: []string{"10.0.0.6"}, port: 8443, region: "eu", zone: "eu-1a", entry: starting},
		ep{id: "g", addrs: []string{"10.0.0.7"}, port: 8443, region: "eu", zone: "eu-1a", entry: zeroWeight},
		ep{id: "h", addrs: []string{"10.0.0.8"}, port: 0, region: "eu", zone: "eu-1a", entry: healthy},
	)
	cla, dropped := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	if dropped != 0 {
		t.Errorf("dropped %d", dropped)
	}
	want := []flatEP{
		{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1a", false},
		{"10.0.0.2:8443", corev3.HealthStatus_UNKNOWN, 100, 0, "eu/eu-1a", false},
		{"10.0.0.3:8443", corev3.HealthStatus_HEALTHY, 10, 0, "eu/eu-1a", false}, // slow start: the published weight
		// d withdrawn: left out, never UNHEALTHY
		{"10.0.0.5:8443", corev3.HealthStatus_DRAINING, 100, 0, "eu/eu-1a", false},
		// f starting: not in rotation
		{"10.0.0.7:8443", corev3.HealthStatus_HEALTHY, 1, 0, "eu/eu-1a", false}, // never a weight of 0
		// h has no grpc port: not in this cluster
	}
	if got := flat(cla); !equal(got, want) {
		t.Errorf("assignment:\n got %v\nwant %v", got, want)
	}
	if cla.ClusterName != "pay.shop:grpc" {
		t.Errorf("cluster name %q", cla.ClusterName)
	}
	if got := cla.Endpoints[0].LoadBalancingWeight.GetValue(); got != 100+100+10+1 {
		t.Errorf("locality weight %d, want the sum of its endpoints' in rotation (211; draining e takes no load)", got)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
}

func TestAssignmentTiersArePriorities(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "us1", addrs: []string{"10.0.2.1"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
		ep{id: "eu1b", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "eu1a", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
	)
	for _, tc := range []struct {
		name string
		loc  status.Locality
		want []flatEP
	}{
		{"caller in eu-1a", tab.LocalityOf("eu", "eu-1a"), []flatEP{
			{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1a", false},
			{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 100, 1, "eu/eu-1b", false},
			{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 100, 2, "us/us-1a", false},
		}},
		{"caller in us-1a: no endpoint in its region but its own, the rest one priority", tab.LocalityOf("us", "us-1a"), []flatEP{
			{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "us/us-1a", false},
			{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 1, "eu/eu-1a", false},
			{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 100, 1, "eu/eu-1b", false},
		}},
		{"caller in a place the table does not hold: one priority", status.Locality{}, []flatEP{
			{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1a", false},
			{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1b", false},
			{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "us/us-1a", false},
		}},
	} {
		cla, _ := buildAssignment(tab, id, svc, "grpc", tc.loc)
		if got := flat(cla); !equal(got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, tc.want)
		}
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: assignment does not validate: %v", tc.name, err)
		}
	}
}

func TestAssignmentGuardAndDuplicates(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a", addrs: []string{"10.0.0.1", "2001:db8::1"}, port: 8443, entry: disregard},
		ep{id: "b", addrs: []string{"2001:db8::1"}, port: 8443, entry: healthy}, // a's second address
		ep{id: "c", addrs: []string{"10.0.0.3"}, port: 8443, entry: disregard},
	)
	// The evaluator flags disregarded endpoints only with a fraction set;
	// here the caller's tiers (one) are below it too: 1 healthy of 3.
	svc.MinHealthyFraction = 0.5
	cla, dropped := buildAssignment(tab, id, svc, "grpc", status.Locality{})
	if dropped != 1 {
		t.Errorf("dropped %d, want 1 (b shares a's address)", dropped)
	}
	want := []flatEP{
		{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "/", true},
		{"10.0.0.3:8443", corev3.HealthStatus_HEALTHY, 100, 0, "/", true},
	}
	if got := flat(cla); !equal(got, want) {
		t.Errorf("assignment:\n got %v\nwant %v", got, want)
	}
	if add := cla.Endpoints[0].LbEndpoints[0].GetEndpoint().AdditionalAddresses; len(add) != 1 ||
		add[0].Address.GetSocketAddress().Address != "2001:db8::1" {
		t.Errorf("additional addresses %v, want [2001:db8::1]", add)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
}

func TestAssignmentWithoutEndpoints(t *testing.T) {
	tab, id, svc := table(t, ep{id: "a", addrs: []string{"10.0.0.1"}, port: 8443, entry: withdrawn})
	cla, _ := buildAssignment(tab, id, svc, "grpc", status.Locality{})
	if cla == nil || cla.ClusterName != "pay.shop:grpc" || len(cla.Endpoints) != 0 {
		t.Fatalf("assignment %v, want one named pay.shop:grpc without endpoints (Envoy warms the cluster until it comes)", cla)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
}

func TestClusterAndListeners(t *testing.T) {
	_, _, svc := table(t)
	c := buildCluster(svc, "grpc", false)
	if c.Name != "pay.shop:grpc" || c.GetEdsClusterConfig().ServiceName != "pay.shop:grpc" ||
		c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil || c.OutlierDetection.MaxEjectionPercent.GetValue() != 10 {
		t.Errorf("cluster %v", c)
	}
	if err := c.ValidateAll(); err != nil {
		t.Errorf("cluster does not validate: %v", err)
	}
	// Envoy's panic mode off, stated: 0%, not left to Envoy's default of
	// 50%, under which Envoy routes to DRAINING hosts once fewer than half
	// of a priority's hosts are healthy.
	if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.Value != 0 {
		t.Errorf("cluster's healthy_panic_threshold %v, want 0%%", p)
	}
	if p, ok := defaultPort(svc); !ok || p.Name != "grpc" {
		t.Errorf("default port %v, want grpc", p)
	}
	l, err := buildListener(ServiceHost(svc), ClusterName(svc, "grpc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ValidateAll(); err != nil {
		t.Errorf("listener does not validate: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := l.ApiListener.ApiListener.UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Errorf("connection manager does not validate: %v", err)
	}
	rc := hcm.GetRouteConfig()
	if l.Name != "pay.shop" || rc == nil || rc.VirtualHosts[0].Routes[0].GetRoute().GetCluster() != "pay.shop:grpc" {
		t.Errorf("listener %s routes by %v", l.Name, rc)
	}
	if f := hcm.HttpFilters; len(f) != 1 || f[0].GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" {
		t.Errorf("HTTP filters %v, want the router alone", f)
	}
}

func TestDefaultPort(t *testing.T) {
	for _, tc := range []struct {
		ports []status.Port
		want  string
	}{
		{[]status.Port{{Name: "http", Protocol: "tcp"}, {Name: "grpc", Protocol: "tcp"}}, "grpc"},
		{[]status.Port{{Name: "dns", Protocol: "udp"}, {Name: "http", Protocol: "tcp"}}, "http"},
		{[]status.Port{{Name: "dns", Protocol: "udp"}}, "dns"},
	} {
		if p, _ := defaultPort(status.ServiceInfo{Ports: tc.ports}); p.Name != tc.want {
			t.Errorf("defaultPort(%v) = %s, want %s", tc.ports, p.Name, tc.want)
		}
	}
	if _, ok := defaultPort(status.ServiceInfo{}); ok {
		t.Error("a service without ports has a default port")
	}
}

// TestVersionIsContent: equal content, equal digest, whoever built it;
// any change, a new one.
func TestVersionIsContent(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
		ep{id: "b", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy})
	v := func(m proto.Message) string {
		s, err := Digest(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, _ := buildAssignment(tab, id, svc, "grpc", status.Locality{})
	b, _ := buildAssignment(tab, id, svc, "grpc", status.Locality{})
	if v(a) != v(b) {
		t.Error("the same assignment built twice has two versions")
	}
	c, _ := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1b"))
	if v(a) == v(c) {
		t.Error("assignments with other priorities share a version")
	}
}

func equal(a, b []flatEP) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBootstrapNeedsServerAndNode(t *testing.T) {
	if _, err := Bootstrap(BootstrapConfig{NodeID: "n"}); err == nil {
		t.Error("a bootstrap without a server")
	}
	if _, err := Bootstrap(BootstrapConfig{Server: "127.0.0.1:8481"}); err == nil {
		t.Error("a bootstrap without a node id")
	}
	if _, err := Bootstrap(BootstrapConfig{Server: "127.0.0.1", NodeID: "n"}); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("a bootstrap with a server without a port: %v", err)
	}
}

// TestVersionFormat: a wire version is the revision, then the digest;
// what servers before this format sent (a bare digest), or anything
// else a client names, is all digest at revision 0, which holds nothing
// back.
func TestVersionFormat(t *testing.T) {
	if v := FormatVersion(1234, "9f86d081"); v != "1234-9f86d081" {
		t.Fatalf("FormatVersion: %q", v)
	}
	for _, c := range []struct {
		in     string
		rev    uint64
		digest string
	}{
		{"1234-9f86d081", 1234, "9f86d081"},
		{"0-9f86d081", 0, "9f86d081"},
		{"9f86d081884c7d659a2feaa0c55ad015", 0, "9f86d081884c7d659a2feaa0c55ad015"}, // before this format
		{"an old version", 0, "an old version"},
		{"x1-9f86", 0, "x1-9f86"},
		{"-9f86", 0, "-9f86"},
		{"", 0, ""},
	} {
		if rev, d := ParseVersion(c.in); rev != c.rev || d != c.digest {
			t.Errorf("ParseVersion(%q) = %d, %q; want %d, %q", c.in, rev, d, c.rev, c.digest)
		}
	}
	for _, c := range []struct {
		what   string
		held   string
		rev    uint64
		digest string
		exists bool
		hold   bool
	}{
		{"held newer, other content", "120-aa", 100, "bb", true, true},
		{"held newer, none here", "120-aa", 100, "", false, true},
		{"held newer, the same content", "120-aa", 100, "aa", true, false},
		{"held at the table's revision", "100-aa", 100, "bb", true, false},
		{"held older", "90-aa", 100, "bb", true, false},
		{"held in the old format", "aa", 100, "bb", true, false},
	} {
		if hold, rev := holds(c.held, c.rev, c.digest, c.exists); hold != c.hold || hold && rev != 120 {
			t.Errorf("%s: holds = %v, %d; want %v", c.what, hold, rev, c.hold)
		}
	}
}

// TestAssignmentSpillsByTier: a caller whose zone is below the
// overprovisioning threshold spills into the next tier by SPEC §3's rule.
// Withdrawn endpoints are left out of the assignment, so a client would
// see its zone fully healthy and never spill: cairn merges the tiers the
// caller uses into priority 0 and scales the weights by each tier's share
// of the load.
func TestAssignmentSpillsByTier(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "a3", addrs: []string{"10.0.0.3"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "a4", addrs: []string{"10.0.0.4"}, port: 8443, region: "eu", zone: "eu-1a", entry: draining},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b2", addrs: []string{"10.0.1.2"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b3", addrs: []string{"10.0.1.3"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "u1", addrs: []string{"10.0.2.1"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
		ep{id: "u2", addrs: []string{"10.0.2.2"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
	)
	svc.MinHealthyFraction = 0.5
	cla, _ := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	// eu-1a: 1 of 3 ready healthy (draining does not count): 1.4 × 1/3 ≈
	// 0.467 of the load, 489,335 of the merged priority's 2^20; eu-1b the
	// rest, 0.533, 186,414 each; us, not needed, keeps its own priority
	// for failover.
	want := []flatEP{
		{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 489335, 0, "eu/eu-1a", false},
		{"10.0.0.4:8443", corev3.HealthStatus_DRAINING, 100, 0, "eu/eu-1a", false},
		{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 186414, 0, "eu/eu-1b", false},
		{"10.0.1.2:8443", corev3.HealthStatus_HEALTHY, 186414, 0, "eu/eu-1b", false},
		{"10.0.1.3:8443", corev3.HealthStatus_HEALTHY, 186414, 0, "eu/eu-1b", false},
		{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 100, 1, "us/us-1a", false},
		{"10.0.2.2:8443", corev3.HealthStatus_HEALTHY, 100, 1, "us/us-1a", false},
	}
	if got := flat(cla); !equal(got, want) {
		t.Errorf("assignment:\n got %v\nwant %v", got, want)
	}
	// grpc-go splits priority 0 between eu-1a and eu-1b by their
	// locality weights: 0.467:0.533, a4 draining counting for nothing.
	var lw []uint32
	for _, l := range cla.Endpoints {
		lw = append(lw, l.LoadBalancingWeight.GetValue())
	}
	if len(lw) != 3 || lw[0] != 489335 || lw[1] != 3*186414 || lw[2] != 200 {
		t.Errorf("locality weights %v, want [489335 559242 200]", lw)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
	// A caller in eu-1b has its zone healthy: no spill, tiers as
	// priorities, published weights.
	cla, _ = buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1b"))
	want = []flatEP{
		{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1b", false},
		{"10.0.1.2:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1b", false},
		{"10.0.1.3:8443", corev3.HealthStatus_HEALTHY, 100, 0, "eu/eu-1b", false},
		{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 100, 1, "eu/eu-1a", false},
		{"10.0.0.4:8443", corev3.HealthStatus_DRAINING, 100, 1, "eu/eu-1a", false},
		{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 100, 2, "us/us-1a", false},
		{"10.0.2.2:8443", corev3.HealthStatus_HEALTHY, 100, 2, "us/us-1a", false},
	}
	if got := flat(cla); !equal(got, want) {
		t.Errorf("caller in eu-1b:\n got %v\nwant %v", got, want)
	}
}

// TestAssignmentCallerGuard: when the tiers a caller uses together have
// fewer healthy endpoints than min_healthy_fraction of their ready ones,
// health is disregarded for that caller (SPEC §2): every ready endpoint
// of those tiers is published HEALTHY, those not healthy flagged, the
// load shared by the tiers' numbers of endpoints, in one priority.
func TestAssignmentCallerGuard(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: disregard},
		ep{id: "a3", addrs: []string{"10.0.0.3"}, port: 8443, region: "eu", zone: "eu-1a", entry: starting},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b2", addrs: []string{"10.0.1.2"}, port: 8443, region: "eu", zone: "eu-1b", entry: withdrawn},
		ep{id: "u1", addrs: []string{"10.0.2.1"}, port: 8443, region: "us", zone: "us-1a", entry: withdrawn},
	)
	svc.MinHealthyFraction = 0.5
	cla, _ := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	// Every tier used (eu-1a 0 of 2, eu-1b 1 of 2, us 0 of 1), 1 healthy
	// of 5 ready < 0.5: all five, a fifth of the load each (2^20 / 5);
	// a3, starting, never.
	want := []flatEP{
		{"10.0.0.1:8443", corev3.HealthStatus_HEALTHY, 209715, 0, "eu/eu-1a", true},
		{"10.0.0.2:8443", corev3.HealthStatus_HEALTHY, 209715, 0, "eu/eu-1a", true},
		{"10.0.1.1:8443", corev3.HealthStatus_HEALTHY, 209715, 0, "eu/eu-1b", false},
		{"10.0.1.2:8443", corev3.HealthStatus_HEALTHY, 209715, 0, "eu/eu-1b", true},
		{"10.0.2.1:8443", corev3.HealthStatus_HEALTHY, 209715, 0, "us/us-1a", true},
	}
	if got := flat(cla); !equal(got, want) {
		t.Errorf("assignment:\n got %v\nwant %v", got, want)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
	// The evaluator's guard alone publishes nothing: in a tier the
	// caller uses whose tiers keep enough healthy endpoints, an endpoint
	// in rotation only through it gets no traffic, as from DNS.
	tab, id, svc = table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: disregard},
		ep{id: "a3", addrs: []string{"10.0.0.3"}, port: 8443, region: "eu", zone: "eu-1a", entry: disregard},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b2", addrs: []string{"10.0.1.2"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b3", addrs: []string{"10.0.1.3"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
	)
	svc.MinHealthyFraction = 0.5
	cla, _ = buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	var addrs []string
	for _, e := range flat(cla) {
		addrs = append(addrs, e.addr)
		if e.flagged {
			t.Errorf("%s flagged disregarded; the caller's tiers have 4 of 6 healthy", e.addr)
		}
	}
	if want := []string{"10.0.0.1:8443", "10.0.1.1:8443", "10.0.1.2:8443", "10.0.1.3:8443"}; !slices.Equal(addrs, want) {
		t.Errorf("guarded by the evaluator only: %v; want %v", addrs, want)
	}
}

// TestAssignmentDrainingTierBetween: a tier between those a caller uses
// that holds only draining endpoints is not used, and must not split the
// used ones into two priorities (a client would then keep all the load
// on the first).
func TestAssignmentDrainingTierBetween(t *testing.T) {
	tab, id, svc := table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: healthy},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "a3", addrs: []string{"10.0.0.3"}, port: 8443, region: "eu", zone: "eu-1a", entry: withdrawn},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: draining},
		ep{id: "u1", addrs: []string{"10.0.2.1"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
		ep{id: "u2", addrs: []string{"10.0.2.2"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
	)
	svc.MinHealthyFraction = 0.5
	cla, _ := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	got := map[string]uint32{}
	for _, e := range flat(cla) {
		got[e.addr] = e.priority
	}
	want := map[string]uint32{"10.0.0.1:8443": 0, "10.0.2.1:8443": 0, "10.0.2.2:8443": 0, "10.0.1.1:8443": 1}
	if !maps.Equal(got, want) {
		t.Errorf("priorities %v, want %v (the used tiers, eu-1a and us, at 0; draining eu-1b after)", got, want)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
	// A caller whose own zone holds only draining endpoints gets the tier
	// it uses at priority 0 all the same.
	cla, _ = buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1b"))
	for _, e := range flat(cla) {
		if p := map[bool]uint32{true: 1, false: 0}[e.addr == "10.0.1.1:8443"]; e.priority != p {
			t.Errorf("caller in eu-1b: %s at priority %d, want %d", e.addr, e.priority, p)
		}
	}
}

// TestAssignmentDrainingLocality: a locality of draining endpoints only
// weighs 1, never 0 (a client refuses the whole assignment for a 0).
func TestAssignmentDrainingLocality(t *testing.T) {
	tab, id, svc := table(t, ep{id: "a", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: draining})
	cla, _ := buildAssignment(tab, id, svc, "grpc", status.Locality{})
	if len(cla.Endpoints) != 1 || cla.Endpoints[0].LoadBalancingWeight.GetValue() != 1 {
		t.Fatalf("assignment %v, want one locality of weight 1", cla)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Errorf("assignment does not validate: %v", err)
	}
}
