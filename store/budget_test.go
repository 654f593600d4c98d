package store

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// budgetLog is an FSM holding prod/web with max_unavailable b and n ready
// instances i0…i(n-1); incs holds their incarnations.
func budgetLog(t *testing.T, b wire.Budget, n int) (*fsmLog, map[string]uint64) {
	t.Helper()
	l := newLog(t)
	svc := webService()
	svc.Policy.MaxUnavailable = b
	l.must(applySvc(svc))
	incs := map[string]uint64{}
	for i := range n {
		id := fmt.Sprintf("i%d", i)
		incs[id] = l.must(registerCmd(id, fmt.Sprintf("10.0.0.%d", i+1))).Instance.Incarnation
	}
	return l, incs
}

// disrupt is a drain or deregistration as Store.Drain and
// Store.Deregister write it: judged against the budget.
func disrupt(op opcode, id string, inc uint64, force bool) command {
	c := mutateCmd(op, id, inc)
	c.Actor, c.Budget, c.Evacs, c.Force = "admin", true, true, force
	return c
}

// verdictCmd commits a verdict for id: withdrawn on evidence unless
// eligible.
func verdictCmd(id string, inc uint64, v status.Verdict, eligible bool) command {
	return command{Op: opHealth, Actor: "node:n1", Health: []HealthUpdate{{Key: webKey(id),
		Health: wire.Health{Incarnation: inc, Verdict: v, Eligible: eligible, HealthEligible: eligible}}}}
}

// refused applies c, wants ErrBudget with a message holding each of
// want, and no change to the state.
func refused(t *testing.T, l *fsmLog, c command, want ...string) {
	t.Helper()
	before := withoutRev(l.f)
	r := l.apply(c)
	if !errors.Is(r.Err, ErrBudget) {
		t.Fatalf("%s of %s: %v, want ErrBudget", c.Op, c.Key.ID, r.Err)
	}
	for _, w := range want {
		if !strings.Contains(r.Err.Error(), w) {
			t.Errorf("refusal %q does not say %q", r.Err, w)
		}
	}
	if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused %s changed the state", c.Op)
	}
}

func lastEvent(l *fsmLog) wire.Event {
	ev := l.f.state().Events
	return ev[len(ev)-1]
}

// TestFSMBudgetRefusesPastTheBudget: with max_unavailable 2 of 10, two
// drains go through and the third is refused, naming the budget and what
// holds it; drains and deregistrations of instances already unavailable
// are no new disruption and go through.
func TestFSMBudgetRefusesPastTheBudget(t *testing.T) {
	l, incs := budgetLog(t, "2", 10)
	l.must(disrupt(opDrain, "i1", incs["i1"], false))
	l.must(disrupt(opDrain, "i2", incs["i2"], false))
	refused(t, l, disrupt(opDrain, "i3", incs["i3"], false),
		"drain of prod/web/i3 refused: disruption budget max_unavailable 2 of 10 instances is used by i1 (draining), i2 (draining); --force overrides")
	refused(t, l, disrupt(opDeregister, "i3", incs["i3"], false), "deregister of prod/web/i3 refused", "max_unavailable 2")

	// A retry of a drain, and the deregistration of a draining instance
	// (the normal end of a drain), are not new disruptions.
	l.must(disrupt(opDrain, "i1", incs["i1"], false))
	l.must(disrupt(opDeregister, "i1", incs["i1"], false))
	// i1 is terminated: it no longer holds the budget.
	if got := l.f.budget(l.f.services[webKey("").ServiceKey()]); got.Instances != 9 || got.InUse != 1 || got.Limit != 2 {
		t.Errorf("after i1 ended: %+v, want 1 of 2 in use over 9 instances", got)
	}
	l.must(disrupt(opDrain, "i3", incs["i3"], false))
	refused(t, l, disrupt(opDrain, "i4", incs["i4"], false), "i2 (draining), i3 (draining)")
}

// TestFSMBudgetStartingCounts: a starting instance is unavailable: it
// holds the budget, and its own drain or deregistration is no new
// disruption.
func TestFSMBudgetStartingCounts(t *testing.T) {
	l, incs := budgetLog(t, "1", 4)
	c := registerCmd("s", "10.0.1.1")
	c.Register.Lifecycle = "starting"
	s := l.must(c).Instance
	refused(t, l, disrupt(opDrain, "i0", incs["i0"], false), "used by s (starting)")
	l.must(disrupt(opDeregister, "s", s.Incarnation, false))
	l.must(disrupt(opDrain, "i0", incs["i0"], false))
}

// TestFSMBudgetInvoluntaryCounts: a verdict that withdraws an instance on
// evidence is never refused, whatever the budget, and holds the budget;
// draining the withdrawn instance is no new disruption. A verdict that
// admits it again frees its share.
func TestFSMBudgetInvoluntaryCounts(t *testing.T) {
	l, incs := budgetLog(t, "2", 10)
	l.must(disrupt(opDrain, "i1", incs["i1"], false))
	for _, id := range []string{"i2", "i3", "i4"} { // past the budget: still committed
		l.must(verdictCmd(id, incs[id], status.Unhealthy, false))
		if got := instanceOf(t, l.f, webKey(id)); got.Health == nil || got.Health.HealthEligible {
			t.Fatalf("%s's withdrawing verdict was not committed: %+v", id, got.Health)
		}
	}
	l.must(verdictCmd("i5", incs["i5"], status.Quarantined, false))
	refused(t, l, disrupt(opDrain, "i6", incs["i6"], false),
		"max_unavailable 2 of 10 instances is used by i1 (draining), i2 (unhealthy), i3 (unhealthy), i4 (unhealthy), i5 (quarantined)")
	l.must(disrupt(opDrain, "i2", incs["i2"], false))      // unhealthy already
	l.must(disrupt(opDeregister, "i5", incs["i5"], false)) // quarantined already
	// An eligible verdict, healthy or unknown, holds nothing.
	for _, id := range []string{"i3", "i4"} {
		l.must(verdictCmd(id, incs[id], status.Healthy, true))
	}
	l.must(verdictCmd("i6", incs["i6"], status.Unknown, true))
	// i1 and i2 draining: the budget is full.
	refused(t, l, disrupt(opDrain, "i6", incs["i6"], false), "i1 (draining), i2 (draining)")
	// A verdict about an older incarnation holds nothing.
	c := registerCmd("i7", "10.0.2.7")
	c.Register.Replaces = incs["i7"]
	l.must(verdictCmd("i7", incs["i7"], status.Unhealthy, false))
	old := incs["i7"]
	incs["i7"] = l.must(c).Instance.Incarnation
	if incs["i7"] == old {
		t.Fatal("no new incarnation")
	}
	if got := l.f.budget(l.f.services[webKey("").ServiceKey()]); got.InUse != 2 {
		t.Errorf("in use %d (%+v), want 2: i7's new incarnation has no verdict", got.InUse, got.Unavailable)
	}
}

// TestFSMBudgetTerminationFreesIt: the end of a drain window and a hard
// expiry both end an instance and free its share.
func TestFSMBudgetTerminationFreesIt(t *testing.T) {
	l, incs := budgetLog(t, "1", 3)
	l.must(disrupt(opDrain, "i0", incs["i0"], false))
	refused(t, l, disrupt(opDrain, "i1", incs["i1"], false), "used by i0 (draining)")
	l.must(command{Op: opHousekeep, Terminate: []fence{{webKey("i0"), incs["i0"]}}})
	l.must(disrupt(opDrain, "i1", incs["i1"], false))
	in := instanceOf(t, l.f, webKey("i1"))
	expire := command{Op: opHousekeep, At: in.LeaseDeadline.Add(5 * in.LeaseTTL.D()),
		Expire: []leaseUpdate{{fence{webKey("i1"), incs["i1"]}, in.LeaseDeadline}}}
	if r := l.must(expire); r.Expired != 1 {
		t.Fatalf("expired %d, want 1", r.Expired)
	}
	l.must(disrupt(opDeregister, "i2", incs["i2"], false))
}

// TestFSMBudgetForce: force takes a disruption past the budget, and the
// audit trail names who did it and the budget it overrode; within the
// budget force records nothing extra.
func TestFSMBudgetForce(t *testing.T) {
	l, incs := budgetLog(t, "1", 4)
	l.must(disrupt(opDrain, "i0", incs["i0"], true))
	if e := lastEvent(l); e.Kind != wire.EventDrained {
		t.Errorf("a forced drain within the budget recorded %+v", e)
	}
	l.must(disrupt(opDeregister, "i1", incs["i1"], true))
	ev := l.f.state().Events
	over, gone := ev[len(ev)-2], ev[len(ev)-1]
	if over.Kind != wire.EventBudgetOverridden || over.Actor != "admin" || over.Instance != "i1" ||
		!strings.Contains(over.Reason, "deregister of prod/web/i1 forced past disruption budget max_unavailable 1 of 4 instances, which is used by i0 (draining)") {
		t.Errorf("override event %+v", over)
	}
	if gone.Kind != wire.EventDeregistered || gone.Instance != "i1" {
		t.Errorf("after the override: %+v, want the deregistration", gone)
	}
}

// TestFSMBudgetZeroAndDefault: max_unavailable 0 refuses every voluntary
// disruption of an available instance (force still overrides, and an
// instance already unavailable still goes); the default lets one of four
// go, and the only instance of a service.
func TestFSMBudgetZeroAndDefault(t *testing.T) {
	for _, zero := range []wire.Budget{"0", "0%"} {
		l, incs := budgetLog(t, zero, 3)
		refused(t, l, disrupt(opDrain, "i0", incs["i0"], false), "max_unavailable "+string(zero), "allows no voluntary disruption")
		l.must(verdictCmd("i1", incs["i1"], status.Unhealthy, false))
		l.must(disrupt(opDrain, "i1", incs["i1"], false))
		l.must(disrupt(opDrain, "i0", incs["i0"], true))
	}
	l, incs := budgetLog(t, "", 4)
	l.must(disrupt(opDrain, "i0", incs["i0"], false))
	refused(t, l, disrupt(opDrain, "i1", incs["i1"], false), "max_unavailable 25% (the default) = 1 of 4 instances is used by i0 (draining)")

	l, incs = budgetLog(t, "", 1)
	l.must(disrupt(opDrain, "i0", incs["i0"], false))
}

// TestFSMBudgetOldEntriesReplayAsApplied: entries written before budgets
// (no Budget flag) are not judged, so a replica replaying an old log
// reaches the state the old version reached.
func TestFSMBudgetOldEntriesReplayAsApplied(t *testing.T) {
	l, incs := budgetLog(t, "1", 3)
	for _, id := range []string{"i0", "i1", "i2"} {
		l.must(mutateCmd(opDrain, id, incs[id]))
	}
	if got := l.f.budget(l.f.services[webKey("").ServiceKey()]); got.InUse != 3 {
		t.Errorf("in use %d, want 3", got.InUse)
	}
}

// TestFSMBudgetSurvivesSnapshot: a restored replica judges as the
// original does (the policy and the verdicts travel in the snapshot).
func TestFSMBudgetSurvivesSnapshot(t *testing.T) {
	l, incs := budgetLog(t, "2", 5)
	l.must(disrupt(opDrain, "i0", incs["i0"], false))
	l.must(verdictCmd("i1", incs["i1"], status.Unhealthy, false))
	restored := newFSM()
	roundTrip(t, l.f, restored)
	key := webKey("").ServiceKey()
	if a, b := l.f.budget(l.f.services[key]), restored.budget(restored.services[key]); !reflect.DeepEqual(a, b) {
		t.Errorf("restored budget %+v, want %+v", b, a)
	}
	l.f = restored
	refused(t, l, disrupt(opDrain, "i2", incs["i2"], false), "i0 (draining), i1 (unhealthy)")
}

// judged is an evacuation as Store.Evacuate writes it: judged against
// the disruption budgets of the services in its scope.
func judged(req wire.EvacuateRequest) command {
	c := evacCmd(req)
	c.Budget = true
	return c
}

// TestFSMBudgetEvacuations: an evacuation is a voluntary disruption. One
// that would take a service past its budget is refused, naming the
// budget and what holds it; forced, it is audited; in force, its
// instances hold the budget against drains; renewing it is no new
// disruption, and an entry written before evacuations were judged
// replays as it was applied.
func TestFSMBudgetEvacuations(t *testing.T) {
	l := zonedLog(t, time.Minute) // a1 a2, b1 b2, c1 c2
	svc := webService()
	svc.Policy.MaxUnavailable = "2"
	sb := wire.Duration(time.Minute)
	svc.Policy.ShiftBack = &sb
	l.must(applySvc(svc))
	inc := func(id string) uint64 { return instanceOf(t, l.f, webKey(id)).Incarnation }
	l.must(disrupt(opDrain, "b1", inc("b1"), false))

	before := withoutRev(l.f)
	r := l.apply(judged(wire.EvacuateRequest{Zone: "a"}))
	if !errors.Is(r.Err, ErrBudget) {
		t.Fatalf("evacuate a: %v, want ErrBudget", r.Err)
	}
	for _, want := range []string{"evacuating zone a refused", "prod/web: its 2 available instance(s) in the zone would make 3 unavailable",
		"max_unavailable 2 of 6 instances, already used by b1 (draining)", "--force"} {
		if !strings.Contains(r.Err.Error(), want) {
			t.Errorf("refusal %q does not say %q", r.Err, want)
		}
	}
	if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
		t.Fatal("a refused evacuation changed the state")
	}
	// An entry from before evacuations were judged replays as applied.
	old := zonedLog(t, time.Minute)
	one := svc
	one.Policy.MaxUnavailable = "1"
	old.must(applySvc(one))
	old.must(evacCmd(wire.EvacuateRequest{Zone: "a"}))
	// So does a drain judged before evacuations held budgets: a1 and a2
	// do not count against b1's.
	drain := disrupt(opDrain, "b1", instanceOf(t, old.f, webKey("b1")).Incarnation, false)
	drain.Evacs = false
	old.must(drain)

	req := wire.EvacuateRequest{Zone: "a", Force: true}
	if e := l.must(judged(req)).Evacuation; !e.Forced {
		t.Fatalf("forced evacuation not marked: %+v", e)
	}
	if ev := lastEvent(l); ev.Kind != wire.EventEvacuated || !strings.Contains(ev.Reason, "forced past the disruption budget: prod/web") {
		t.Fatalf("audit %+v", ev)
	}
	// In force, a1 and a2 hold the budget: c1's drain is refused; a1's
	// is no new disruption.
	refused(t, l, disrupt(opDrain, "c1", inc("c1"), false), "a1 (evacuated), a2 (evacuated), b1 (draining)")
	l.must(disrupt(opDrain, "a1", inc("a1"), false))
	req.Force = false
	if e := l.must(judged(req)).Evacuation; !e.Forced { // renewed
		t.Fatalf("a renewal forgot the evacuation was forced: %+v", e)
	}
	// Returning, the zone holds no budget of its own.
	req.Undo = true
	l.must(judged(req))
	b := l.f.budget(l.f.services[wire.ServiceKey{Namespace: "prod", Name: "web"}])
	if got := b.Holders(); got != "a1 (draining), b1 (draining)" {
		t.Fatalf("holders after the undo: %s", got)
	}
}

// A region's failover moves its callers to another region, not its
// instances out of the service: the whole region is in its scope and
// shifted, no local capacity check or budget refuses it (the API checks
// the other region's capacity), and while it holds, drains in the
// region are judged as if it did not.
func TestFSMFailover(t *testing.T) {
	l := zonedLog(t, time.Minute) // a1 a2, b1 b2, c1 c2, all in r1
	svc := webService()
	svc.Policy.MaxUnavailable = "2"
	l.must(applySvc(svc))
	inc := func(id string) uint64 { return instanceOf(t, l.f, webKey(id)).Incarnation }
	req := wire.EvacuateRequest{Region: "r1", To: "r2", Capacity: "capacity: region r2 can carry 1 service(s)"}
	e := l.must(judged(req)).Evacuation
	if e.To != "r2" || e.Forced || e.Capacity == "" {
		t.Fatalf("failover %+v", e)
	}
	for _, z := range []string{"a", "b", "c"} {
		if !e.Covers("prod", "web", "r1", z) {
			t.Errorf("the failover of r1 does not cover zone %s", z)
		}
	}
	if e.Covers("prod", "web", "r2", "a") {
		t.Error("the failover of r1 covers r2's zone a")
	}
	if ev := lastEvent(l); ev.Kind != wire.EventEvacuated || !strings.Contains(ev.Reason, "region r1 (failover to r2)") ||
		!strings.Contains(ev.Reason, "can carry") {
		t.Fatalf("audit %+v", ev)
	}
	l.must(disrupt(opDrain, "a1", inc("a1"), false))
	l.must(disrupt(opDrain, "b1", inc("b1"), false))
	refused(t, l, disrupt(opDrain, "c1", inc("c1"), false), "a1 (draining), b1 (draining)")
	// A second failover of the scope renews it, to the region it names.
	req.To = "r3"
	if e := l.must(judged(req)).Evacuation; e.To != "r3" || e.ID != l.f.evacuationList()[0].ID {
		t.Fatalf("renewed failover %+v", e)
	}
	// Its fields are checked.
	for _, bad := range []wire.EvacuateRequest{{Region: "r1", To: "r1"}, {To: "r2"}, {Region: "r1", Zone: "a", To: "r2"}} {
		if err := l.apply(judged(bad)).Err; !errors.Is(err, wire.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
}
