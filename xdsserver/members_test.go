package xdsserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// zonedTable publishes pay.shop with one instance per (region, zone)
// given, at 10.0.0.1, 10.0.0.2, … in order.
func zonedTable(t *testing.T, tb *statustest.Table, at ...place) {
	t.Helper()
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: []status.Port{{Name: "grpc", Number: 1, Protocol: "tcp"}}}}
	for k, p := range at {
		in := statustest.Ready(fmt.Sprint("p", k+1), fmt.Sprintf("10.0.0.%d", k+1)).In(p.region, p.zone)
		in.Ports = map[string]uint16{"grpc": 80}
		pay.Instances = append(pay.Instances, in)
	}
	tb.Publish(t, pay)
}

// priorities returns each endpoint's priority in pay's assignment as a
// stream served from v sees it.
func priorities(t *testing.T, v *view) map[string]uint32 {
	t.Helper()
	var cla endpointv3.ClusterLoadAssignment
	if err := v.res[endpointIdx]["pay.shop:grpc"].body.UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint32{}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().Address] = l.Priority
		}
	}
	return out
}

// TestMadeUpLocalitiesShareRealPlaces: streams declaring localities no
// instance is in (made-up regions, made-up zones of a real region, a
// real zone in the wrong region) are served from the real places their
// tiers are those of, so a table change costs a view per real place,
// whatever the clients claim (issue 28: 500 such streams took honest
// withdrawals from 93 ms to 8 s); and each still gets the tiers of what
// it declared.
func TestMadeUpLocalitiesShareRealPlaces(t *testing.T) {
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	a, b, us := place{"eu", "eu-1a"}, place{"eu", "eu-1b"}, place{"us", "us-1a"}
	zonedTable(t, tb, a, b, us)
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	rng := rand.New(rand.NewPCG(1, 2))
	var members []*member
	for k := range 300 {
		var p place
		switch k % 4 {
		case 0:
			p = place{fmt.Sprint("r", rng.Uint64()), fmt.Sprint("z", rng.Uint64())}
		case 1:
			p = place{"eu", fmt.Sprint("z", rng.Uint64())}
		case 2:
			p = place{"us", "eu-1a"} // a real zone of another region
		case 3:
			p = []place{a, b, us, {}}[rng.IntN(4)]
		}
		mem, err := h.join(p, newSignal(), true)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, mem)
	}
	// The three real zones, the two regions without a zone, and no place.
	if n := len(h.places); n > 6 {
		t.Fatalf("300 streams made %d places, want at most the 3 zones + 2 regions + 1", n)
	}
	if n := testutil.ToFloat64(m.places); int(n) != len(h.places) {
		t.Errorf("cairn_xds_places = %v, want %d", n, len(h.places))
	}
	// Each folded stream has the tiers of what it declared: in eu with a
	// made-up zone, both eu instances in its first tier (its region),
	// us's after.
	got := priorities(t, h.view(members[1]))
	if got["10.0.0.1"] != 0 || got["10.0.0.2"] != 0 || got["10.0.0.3"] != 1 {
		t.Errorf("eu with a made-up zone: priorities %v, want eu-1a and eu-1b 0, us-1a 1", got)
	}
	// us with eu's zone: us-1a first (its region), eu after.
	got = priorities(t, h.view(members[2]))
	if got["10.0.0.3"] != 0 || got["10.0.0.1"] != 1 || got["10.0.0.2"] != 1 {
		t.Errorf("us with eu-1a's zone: priorities %v, want us-1a 0, eu 1", got)
	}
	// A stream in a zone nothing runs in yet moves to the zone's own
	// place when an instance comes there, and is woken for it.
	c := place{"eu", "eu-1c"}
	sig := newSignal()
	mem, err := h.join(c, sig, true)
	if err != nil {
		t.Fatal(err)
	}
	if mem.home.place != (place{region: "eu"}) {
		t.Fatalf("eu-1c before an instance is there: served from %+v, want eu without a zone", mem.home.place)
	}
	zonedTable(t, tb, a, b, us, c)
	h.refresh()
	if mem.home.place != c {
		t.Fatalf("eu-1c after its first instance: served from %+v, want eu-1c", mem.home.place)
	}
	select {
	case <-sig.ch:
	default:
		t.Error("a stream that moved to another place was not woken for its new view")
	}
	if got := priorities(t, h.view(mem)); got["10.0.0.4"] != 0 || got["10.0.0.1"] != 1 {
		t.Errorf("eu-1c with its own instance: priorities %v, want 10.0.0.4 0, the other eu zones 1", got)
	}
	// Everyone leaves: no place is left to build.
	for _, m := range append(members, mem) {
		h.leave(m)
	}
	if len(h.places) != 0 || len(h.members) != 0 || len(h.names[endpointIdx]) != 0 {
		t.Errorf("after every stream left: %d places, %d members, %d watched names", len(h.places), len(h.members), len(h.names[endpointIdx]))
	}
}

// TestWatchCostsTheChange: a stream's subscriptions are recorded as
// changes, so that one adding a name to thousands pays for the one name,
// not the thousands (a stream adding one at a time otherwise costs the
// hub's lock the square of its names); and leaving forgets every name.
func TestWatchCostsTheChange(t *testing.T) {
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	zonedTable(t, tb, place{"eu", "eu-1a"})
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	one, _ := h.join(place{}, newSignal(), true)
	two, _ := h.join(place{}, newSignal(), true)
	h.watch(one, endpointIdx, false, []string{"pay.shop:grpc", "x", "y"}, nil)
	h.watch(two, endpointIdx, false, []string{"pay.shop:grpc", "*"}, nil)
	h.watch(one, endpointIdx, false, []string{"z"}, []string{"x", "z", "never"}) // delta: unsubscribed after subscribed
	if got := len(one.names[endpointIdx]); got != 2 {
		t.Errorf("one watches %d names, want 2 (pay, y)", got)
	}
	if got := len(h.names[endpointIdx]["pay.shop:grpc"]); got != 2 {
		t.Errorf("pay is watched by %d streams, want 2", got)
	}
	if _, ok := h.names[endpointIdx]["*"]; ok {
		t.Error(`"*" was recorded as a name`)
	}
	h.leave(one)
	if _, ok := h.names[endpointIdx]["y"]; ok || len(h.names[endpointIdx]["pay.shop:grpc"]) != 1 {
		t.Errorf("after one left: watched %v", h.names[endpointIdx])
	}
	h.leave(two)
}

// TestRenumberedLocalitiesRehome: a table's locality ids are its own (the
// writer reclaims and sorts them), so two tables whose (region, zone) ids
// are equal as numbers can name different zones: the hub compares names.
// Here eu-1a's last instance goes and eu-1c's first comes in one table,
// and eu-1c takes eu-1b's id (eu-1b eu-1a's); a stream in eu-1c, served from "eu" while
// nothing ran there, moves to eu-1c and prefers its instance.
func TestRenumberedLocalitiesRehome(t *testing.T) {
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	zonedTable(t, tb, place{"eu", "eu-1a"}, place{"eu", "eu-1b"}) // eu=1, eu-1a=2, eu-1b=3 (sorted)
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	mem, err := h.join(place{"eu", "eu-1c"}, newSignal(), true)
	if err != nil {
		t.Fatal(err)
	}
	if mem.home.place != (place{region: "eu"}) {
		t.Fatalf("eu-1c with nothing there: served from %+v, want eu", mem.home.place)
	}
	zonedTable(t, tb, place{"eu", "eu-1c"}, place{"eu", "eu-1b"}) // eu=1, eu-1b=2, eu-1c=3
	h.refresh()
	if got := priorities(t, h.view(mem)); got["10.0.0.1"] != 0 || got["10.0.0.2"] != 1 {
		t.Errorf("eu-1c after its first instance: priorities %v, want 10.0.0.1 (eu-1c) 0, 10.0.0.2 (eu-1b) 1; served from %+v", got, mem.home.place)
	}
	h.leave(mem)
}

// TestWatcherIndexes: a name's watchers are a slice each member knows
// its index in; through watches, unwatches and leaves in any order, each
// index is right, and nothing is left when everyone has left.
func TestWatcherIndexes(t *testing.T) {
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	zonedTable(t, tb, place{"eu", "eu-1a"})
	m, _ := newMetrics(nil)
	h := newHub(pub, m)
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "c", "d", "e"}
	check := func() {
		t.Helper()
		for name, ms := range h.names[endpointIdx] {
			for k, w := range ms {
				if got, ok := w.names[endpointIdx][name]; !ok || got != k {
					t.Fatalf("%s's watcher %d thinks it is at %d (%v)", name, k, got, ok)
				}
			}
		}
	}
	var members []*member
	for range 40 {
		mem, _ := h.join(place{}, newSignal(), true)
		members = append(members, mem)
	}
	for range 2000 {
		mem := members[rng.IntN(len(members))]
		add, remove := []string{names[rng.IntN(5)], names[rng.IntN(5)]}, []string{names[rng.IntN(5)]}
		h.watch(mem, endpointIdx, false, add, remove)
		check()
	}
	rng.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
	for _, mem := range members {
		h.leave(mem)
		check()
	}
	if len(h.names[endpointIdx]) != 0 {
		t.Errorf("watched after everyone left: %v", h.names[endpointIdx])
	}
}

// TestPeerAddress: the per-address cap names an IPv4 client by its
// address (mapped or not) and an IPv6 one by its /64, never by its port.
func TestPeerAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5000":          "192.0.2.7",
		"[::ffff:192.0.2.7]:5001": "192.0.2.7",
		"[2001:db8:1:2::9]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:80": "2001:db8:1:2::/64",
	} {
		ap := netip.MustParseAddrPort(addr)
		ctx := grpcpeer.NewContext(context.Background(), &grpcpeer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
		if got := peerAddress(ctx); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}
