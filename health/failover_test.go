package health

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestFailoverKeepsWithdrawn: the leader withdraws an instance on its
// evidence and dies. The new leader holds no evidence, but starts from
// the committed verdicts: the instance stays withdrawn, nothing is
// committed or recorded on the way, and only the full run of successes
// re-admits it. Every node's table follows its own replica.
func TestFailoverKeepsWithdrawn(t *testing.T) {
	nodes := cluster(t, 3)
	old := storetest.Leader(t, nodes)
	ctx := t.Context()
	// The stores stamp real time here; the Nodes' clock starts there too,
	// and the leases (1h) outlive the test.
	clk := storetest.NewClock(time.Now().UTC().Round(0))
	hn := map[*storetest.Node]*Node{}
	for _, nd := range nodes {
		hn[nd] = newNode(t, nd.Store, clk, 0, nil)
	}
	tickAll := func(nds []*storetest.Node) {
		for _, nd := range nds {
			hn[nd].Tick(ctx)
		}
	}
	svc := tcpService("shop", "cart")
	if _, err := old.ApplyServices(ctx, "admin", []wire.Service{svc}); err != nil {
		t.Fatal(err)
	}
	a := register(t, old.Store, reg(svc, "a", "10.0.0.1"))
	register(t, old.Store, reg(svc, "b", "10.0.0.2"))
	register(t, old.Store, reg(svc, "c", "10.0.0.3"))
	// A second service, below its minimum healthy fraction: 3 of its 4
	// instances are refused, and health is disregarded.
	pay := tcpService("shop", "pay")
	if _, err := old.ApplyServices(ctx, "admin", []wire.Service{pay}); err != nil {
		t.Fatal(err)
	}
	var payFleet []wire.Instance
	for i := range 4 {
		payFleet = append(payFleet, register(t, old.Store, reg(pay, fmt.Sprintf("p%d", i), fmt.Sprintf("10.0.1.%d", i+1))))
	}
	var rest []*storetest.Node
	var restIDs []string
	for _, nd := range nodes {
		if nd != old {
			rest = append(rest, nd)
			restIDs = append(restIDs, nd.NodeID())
		}
	}
	tickAll(append([]*storetest.Node{old}, rest...))

	// The old leader withdraws a on a refused probe from one of a's
	// observers.
	all := []string{"n1", "n2", "n3"}
	observer := assignedTo(t, a, all, DefaultReplicas, all...)
	if r := hn[old].ProbeReport(wire.ProbeReport{Observer: observer, Results: []wire.ProbeResult{
		{Target: TargetID(a.Key(), a.Incarnation), At: clk.Now(), Hard: true, Error: "connection refused"}}}); r.Accepted != 1 {
		t.Fatalf("the leader did not take the probe result: %+v", r)
	}
	for _, p := range payFleet[:3] {
		obs := assignedTo(t, p, all, DefaultReplicas, all...)
		hn[old].ProbeReport(wire.ProbeReport{Observer: obs, Results: []wire.ProbeResult{
			{Target: TargetID(p.Key(), p.Incarnation), At: clk.Now(), Hard: true}}})
	}
	clk.Advance(2 * time.Second)
	hn[old].Tick(ctx)
	if evs := old.Events("shop", "pay", 0); evs[len(evs)-1].Kind != wire.EventHealthDisregarded {
		t.Fatalf("the old leader did not disregard health in shop/pay: %+v", evs[len(evs)-1])
	}
	withdrawn, _ := old.Instance(a.Key())
	if h := withdrawn.Health; h == nil || h.Eligible || h.Verdict != status.Unhealthy {
		t.Fatalf("the old leader committed %+v for a, want withdrawn", h)
	}
	for _, nd := range rest {
		waitFor(t, func() error {
			if got, _ := nd.Instance(a.Key()); got.Health == nil || got.Health.Eligible {
				return fmt.Errorf("%s holds health %+v for a, want the withdrawal", nd.NodeID(), got.Health)
			}
			return nil
		})
	}
	tickAll(rest)
	for _, nd := range rest {
		if e, ok := hn[nd].pub.Status(a.Key().String(), a.Incarnation); !ok || e.Flags.Has(status.Eligible) || e.Verdict != status.Unhealthy {
			t.Errorf("follower %s's table holds %+v (found %t) for a, want it withdrawn", nd.NodeID(), e, ok)
		}
		if ev, ok := hn[nd].Evidence(a.Key().String(), a.Incarnation); ok || ev != nil {
			t.Errorf("follower %s holds evidence %+v", nd.NodeID(), ev)
		}
	}
	eventsBefore := old.Events("shop", "cart", 0)
	payEventsBefore := old.Events("shop", "pay", 0)
	for _, nd := range rest {
		waitFor(t, func() error {
			if got := len(nd.Events("shop", "pay", 0)); got != len(payEventsBefore) {
				return fmt.Errorf("%s holds %d events of shop/pay, want %d", nd.NodeID(), got, len(payEventsBefore))
			}
			return nil
		})
	}

	// The leader dies.
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, nd := range rest {
		nd.Trans.Disconnect(old.Trans.LocalAddr())
	}
	leader := storetest.Leader(t, rest)
	n := hn[leader]
	if ev, ok := n.Evidence(a.Key().String(), a.Incarnation); !ok || len(ev) != 0 {
		t.Fatalf("the new leader's evidence about a: %+v, %t; want none, true", ev, ok)
	}
	for range 3 {
		clk.Advance(time.Second)
		tickAll(rest)
		if got, _ := leader.Instance(a.Key()); got.Health == nil || !got.Health.At.Equal(withdrawn.Health.At) || got.Health.Eligible {
			t.Fatalf("the new leader changed a's committed health to %+v, want the old leader's %+v", got.Health, withdrawn.Health)
		}
		if e, ok := n.pub.Status(a.Key().String(), a.Incarnation); !ok || e.Flags.Has(status.Eligible) {
			t.Fatalf("the new leader's table holds %+v for a, want it withdrawn", e)
		}
	}
	if got := nodeMetric(t, n, commits); got != 0 {
		t.Errorf("the new leader committed %v batches with no new evidence, want 0", got)
	}
	if got := nodeMetric(t, n, "cairn_health_transitions_total", "to", "eligible") + nodeMetric(t, n, "cairn_health_transitions_total", "to", "withdrawn"); got != 0 {
		t.Errorf("the new leader counted %v transitions, want 0", got)
	}
	if got := leader.Events("shop", "cart", 0); len(got) != len(eventsBefore) {
		t.Errorf("the new leader recorded %v, want no event", got[len(eventsBefore):])
	}
	if got := leader.Events("shop", "pay", 0); len(got) != len(payEventsBefore) {
		t.Errorf("the new leader recorded %v in shop/pay, want no event (health was already disregarded)", got[len(payEventsBefore):])
	}
	for _, p := range payFleet[:3] {
		e, ok := n.pub.Status(p.Key().String(), p.Incarnation)
		if !ok || !e.Flags.Has(status.Eligible) || !e.Flags.Has(status.HealthDisregarded) || e.Verdict != status.Unhealthy {
			t.Errorf("the new leader's table holds %+v (flags %v) for %s, want it served unhealthy with health disregarded", e, e.Flags, p.ID)
		}
	}
	if g := nodeMetric(t, n, "cairn_health_disregarded_services"); g != 1 {
		t.Errorf("cairn_health_disregarded_services = %v on the new leader, want 1", g)
	}

	// Re-admission takes the full run: five successes over 8s are not
	// enough, the sixth at 10s is.
	observer = assignedTo(t, a, all, DefaultReplicas, restIDs...)
	for i := 1; i <= 6; i++ {
		r := n.ProbeReport(wire.ProbeReport{Observer: observer, Results: []wire.ProbeResult{
			{Target: TargetID(a.Key(), a.Incarnation), At: clk.Now(), OK: true}}})
		if r.Accepted != 1 {
			t.Fatalf("success %d from %s not taken: %+v", i, observer, r)
		}
		clk.Advance(2 * time.Second)
		n.Tick(ctx)
		got, _ := leader.Instance(a.Key())
		if i < 6 && got.Health.Eligible {
			t.Fatalf("re-admitted after %d successes, want 6", i)
		}
		if i == 6 && (!got.Health.Eligible || got.Health.Verdict != status.Healthy) {
			t.Fatalf("after 6 successes spanning 10s: %+v, want eligible and healthy", got.Health)
		}
	}
	evs := leader.Events("shop", "cart", 0)[len(eventsBefore):]
	if len(evs) != 1 || evs[0].Kind != wire.EventEligibility || evs[0].Instance != "a" ||
		evs[0].From != "withdrawn/unhealthy" || evs[0].To != "eligible/healthy" || evs[0].Actor != "evaluator@"+leader.NodeID() {
		t.Errorf("events since the failover %+v, want only a's re-admission by the new leader", evs)
	}
	// The other survivor's table follows its replica.
	for _, nd := range rest {
		waitFor(t, func() error {
			if got, _ := nd.Instance(a.Key()); got.Health == nil || !got.Health.Eligible {
				return fmt.Errorf("%s holds %+v for a, want re-admitted", nd.NodeID(), got.Health)
			}
			return nil
		})
		hn[nd].Tick(ctx)
		if e, ok := hn[nd].pub.Status(a.Key().String(), a.Incarnation); !ok || !e.Flags.Has(status.Eligible) || !e.Flags.Has(status.SlowStart) {
			t.Errorf("%s's table holds %+v (flags %v) for a, want it back in slow start", nd.NodeID(), e, e.Flags)
		}
	}
}

// TestDeposedLeaderZeroesItsGauges: the leader-only gauges (services with
// health disregarded, probes set aside, live members) read 0 on a node
// that is not leading, a deposed leader included: a gauge left at 1 on
// the old leader would keep the alert on max(cairn_health_disregarded_services)
// firing after the service recovered (deploy/prometheus/cairn-alerts.yaml).
func TestDeposedLeaderZeroesItsGauges(t *testing.T) {
	nodes := cluster(t, 3)
	old := storetest.Leader(t, nodes)
	ctx := t.Context()
	clk := storetest.NewClock(time.Now().UTC().Round(0))
	n := newNode(t, old.Store, clk, 0, nil)
	pay := tcpService("shop", "pay")
	if _, err := old.ApplyServices(ctx, "admin", []wire.Service{pay}); err != nil {
		t.Fatal(err)
	}
	var fleet []wire.Instance
	for i := range 4 {
		fleet = append(fleet, register(t, old.Store, reg(pay, fmt.Sprintf("p%d", i), fmt.Sprintf("10.0.1.%d", i+1))))
	}
	n.Tick(ctx)
	all := []string{"n1", "n2", "n3"}
	for _, p := range fleet[:3] {
		obs := assignedTo(t, p, all, DefaultReplicas, all...)
		n.ProbeReport(wire.ProbeReport{Observer: obs, Results: []wire.ProbeResult{
			{Target: TargetID(p.Key(), p.Incarnation), At: clk.Now(), Hard: true}}})
	}
	clk.Advance(2 * time.Second)
	n.Tick(ctx)
	if g := nodeMetric(t, n, "cairn_health_disregarded_services"); g != 1 {
		t.Fatalf("cairn_health_disregarded_services = %v on the leader, want 1", g)
	}
	// Cut the leader off: the others elect a new one, and it steps down.
	old.Trans.DisconnectAll()
	for _, nd := range nodes {
		if nd != old {
			nd.Trans.Disconnect(old.Trans.LocalAddr())
		}
	}
	waitFor(t, func() error {
		if old.IsLeader() {
			return fmt.Errorf("%s still leads", old.NodeID())
		}
		return nil
	})
	clk.Advance(time.Second)
	n.Tick(ctx)
	for _, g := range []string{"cairn_health_disregarded_services", "cairn_health_probes_set_aside", "cairn_health_live_members"} {
		if v := nodeMetric(t, n, g); v != 0 {
			t.Errorf("%s = %v on the deposed leader, want 0", g, v)
		}
	}
}
