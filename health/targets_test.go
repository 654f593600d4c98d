package health

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestTargets: every node probes the targets rendezvous hashing assigns
// to it over the live members, two observers per target; instances
// without a check, draining or without an address are not probed. When
// the leader stops hearing from a member, it takes that member's
// targets over.
func TestTargets(t *testing.T) {
	nodes := cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	ctx := t.Context()
	clk := newClock()
	hn := map[string]*Node{}
	for _, nd := range nodes {
		p, err := probe.New(probe.Config{Observer: nd.NodeID(), Registerer: prometheus.NewRegistry(), Logger: storetest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		hn[nd.NodeID()] = newNode(t, nd.Store, clk, 0, func(c *Config) { c.Prober = p })
	}
	web := tcpService("shop", "web")
	web.Ports = append(web.Ports, wire.Port{Name: "admin", Number: 9000})
	web.Check = &wire.Check{Type: "http", Port: "admin", Path: "/healthz?deep=1", Interval: wire.Duration(time.Second),
		Timeout: wire.Duration(500 * time.Millisecond)}
	cart := tcpService("shop", "cart")
	quiet := selfService("shop", "quiet") // no check
	// A check path the store takes and the prober refuses. Regression:
	// its targets made SetTargets refuse the whole set, so the node
	// probed nothing at all.
	bad := tcpService("shop", "bad")
	bad.Check = &wire.Check{Type: "http", Path: "//x"}
	if _, err := leader.ApplyServices(ctx, "admin", []wire.Service{web, cart, quiet, bad}); err != nil {
		t.Fatal(err)
	}
	want := map[string]probe.Target{} // every target, by id
	for i, id := range []string{"w0", "w1", "w2", "w3"} {
		r := reg(web, id, fmt.Sprintf("10.0.0.%d", i+1))
		if i == 1 {
			r.Addresses = []string{"2001:db8::1", "10.0.9.9"} // the first address is probed
			r.Ports = map[string]int{"main": 8080, "admin": 9001}
		}
		if i == 2 {
			r.Lifecycle = "starting" // probed: probes decide when it is ready
		}
		in := register(t, leader.Store, r)
		port := uint16(9000)
		if i == 1 {
			port = 9001
		}
		want[TargetID(in.Key(), in.Incarnation)] = probe.Target{ID: TargetID(in.Key(), in.Incarnation), Kind: probe.HTTP,
			Addr: netip.AddrPortFrom(netip.MustParseAddr(in.Addresses[0]), port), Path: "/healthz?deep=1",
			Interval: time.Second, Timeout: 500 * time.Millisecond}
	}
	for i, id := range []string{"c0", "c1"} {
		in := register(t, leader.Store, reg(cart, id, fmt.Sprintf("10.0.1.%d", i+1)))
		if i == 1 {
			if _, err := leader.Drain(ctx, "admin", in.Key(), in.Incarnation); err != nil {
				t.Fatal(err)
			}
			continue // draining: not probed
		}
		want[TargetID(in.Key(), in.Incarnation)] = probe.Target{ID: TargetID(in.Key(), in.Incarnation), Kind: probe.TCP,
			Addr: netip.AddrPortFrom(netip.MustParseAddr(in.Addresses[0]), 8080), Interval: 2 * time.Second, Timeout: time.Second}
	}
	register(t, leader.Store, reg(quiet, "q0", "10.0.2.1"))
	register(t, leader.Store, reg(bad, "b0", "10.0.3.1"))
	rev := leader.Revision()
	for _, nd := range nodes {
		waitFor(t, func() error {
			if nd.Revision() < rev {
				return fmt.Errorf("%s at revision %d, want %d", nd.NodeID(), nd.Revision(), rev)
			}
			return nil
		})
		hn[nd.NodeID()].Tick(ctx)
	}

	all := []string{"n1", "n2", "n3"}
	observers := map[string][]string{}
	for _, nd := range nodes {
		n := hn[nd.NodeID()]
		for _, tg := range n.targets {
			w, ok := want[tg.ID]
			if !ok {
				t.Errorf("%s probes %s, which is not a target", nd.NodeID(), tg.ID)
				continue
			}
			if tg != w {
				t.Errorf("%s's target\n%+v\nwant\n%+v", nd.NodeID(), tg, w)
			}
			observers[tg.ID] = append(observers[tg.ID], nd.NodeID())
		}
		if got := nodeMetric(t, n, "cairn_health_probe_targets"); got != float64(len(n.targets)) {
			t.Errorf("%s: cairn_health_probe_targets = %v, want %d", nd.NodeID(), got, len(n.targets))
		}
	}
	if len(observers) == 0 {
		t.Fatal("no node probes anything")
	}
	for id := range want {
		got := observers[id]
		slices.Sort(got)
		assigned := probe.Assign(id, all, DefaultReplicas)
		slices.Sort(assigned)
		if !slices.Equal(got, assigned) {
			t.Errorf("%s is probed by %v, want the 2 it is assigned to, %v", id, got, assigned)
		}
	}

	// The leader hears only from one other member: after LiveTimeout the
	// two of them probe everything.
	n := hn[leader.NodeID()]
	var other string
	for _, id := range all {
		if id != leader.NodeID() {
			other = id
			break
		}
	}
	clk.Advance(DefaultLiveTimeout + time.Second)
	n.ProbeReport(wire.ProbeReport{Observer: other})
	n.Tick(ctx)
	if len(n.targets) != len(want) {
		t.Errorf("the leader probes %d targets with 2 live members, want all %d", len(n.targets), len(want))
	}
}
