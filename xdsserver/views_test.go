package xdsserver

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPlaceGainsItsZone: a subscriber's zone has no id until an instance
// is there, and tiers compare ids; when the zone gets one, every
// assignment the place holds is built again for its new tiers, not only
// those of the services that changed.
func TestPlaceGainsItsZone(t *testing.T) {
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	port := []status.Port{{Name: "grpc", Number: 1, Protocol: "tcp"}}
	in := func(id, addr, zone string) statustest.Instance {
		x := statustest.Ready(id, addr).In("eu", zone)
		x.Ports = map[string]uint16{"grpc": 80}
		return x
	}
	build := func(cartZone string) {
		t.Helper()
		tb.Publish(t, statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: port},
			Instances: []statustest.Instance{in("p1", "10.0.0.1", ""), in("p2", "10.0.0.2", "eu-1c")}},
			statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "cart", Ports: port},
				Instances: []statustest.Instance{in("c1", "10.0.0.3", cartZone)}})
	}
	// pay: p1 in region eu without a zone, p2 in eu-1c. The caller is in
	// eu-1b, where nothing runs yet (no id): p1, whose zone is as unknown
	// as the caller's, is in its first tier, p2 in the next.
	build("eu-1a")
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	caller := place{region: "eu", zone: "eu-1b"}
	mem, err := h.join(caller, newSignal(), true)
	if err != nil {
		t.Fatal(err)
	}
	v := h.view(mem)
	if got := priorities(t, v); got["10.0.0.1"] != 0 || got["10.0.0.2"] != 1 {
		t.Fatalf("before eu-1b has an id: pay's priorities %v, want p1 0, p2 1", got)
	}
	// Only cart changes: its instance moves to eu-1b, which gets an id.
	// pay is unchanged, but the caller's tiers are not: p1 and p2 are now
	// both in its region, not its zone.
	build("eu-1b")
	h.refresh()
	if got := priorities(t, h.view(mem)); got["10.0.0.1"] != 0 || got["10.0.0.2"] != 0 {
		t.Errorf("after eu-1b has an id: pay's priorities %v, want both 0 (one tier: the region)", got)
	}
}

// TestIdleHubBuildsNothing: with no stream, a new table costs the hub
// nothing (a server without xDS subscribers spends its core on DNS); the
// first stream then gets the current table's resources.
func TestIdleHubBuildsNothing(t *testing.T) {
	tb := statustest.New(t, 4)
	pub := tb.Publisher
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: []status.Port{{Name: "grpc", Number: 1, Protocol: "tcp"}}}}
	publish := func() {
		t.Helper()
		tb.Publish(t, pay)
	}
	publish()
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	h.refresh()
	if h.clusters != nil || len(h.common) != 0 {
		t.Fatalf("a hub without streams built %d clusters for %d services", len(h.clusters), len(h.common))
	}
	publish()
	sig := newSignal()
	mem, err := h.join(place{}, sig, false)
	if err != nil {
		t.Fatal(err)
	}
	v := h.view(mem)
	if _, ok := v.res[clusterIdx]["pay.shop:grpc"]; !ok || v.table != 2 {
		t.Fatalf("first stream's view: table %d, clusters %v; want table 2 with pay.shop:grpc", v.table, v.res[clusterIdx])
	}
	h.leave(mem)
	publish()
	h.refresh()
	if h.clusters != nil {
		t.Error("the hub kept building after its last stream left")
	}
}

// TestIdleHubDoesNotSpin: following tables without a stream, the hub's
// loop wakes once per table, not in a loop (it did once: an idle hub that
// did not record the table it had seen was woken for it again at once,
// and took a server's core from DNS).
func TestIdleHubDoesNotSpin(t *testing.T) {
	pub, err := status.New(status.Config{Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()
	defer func() { cancel(); <-done }()
	for range 3 {
		if _, err := pub.Build(func(b *status.Builder) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Each of the 3 tables is followed once: poll until the third is,
	// with a deadline, then check nothing more happened.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.refreshes) < 1 || h.tableSeen() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the hub followed table %d after 10 s, want 3", h.tableSeen())
		}
		time.Sleep(time.Millisecond) // a poll with a deadline
	}
	if n := testutil.ToFloat64(m.refreshes); n > 3 {
		t.Errorf("the hub refreshed %v times for 3 tables", n)
	}
}
