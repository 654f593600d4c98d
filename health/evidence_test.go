package health

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func observers(list []obs) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, o := range list {
		out[o.observer] = append(out[o.observer], o.at)
	}
	for _, ts := range out {
		slices.SortFunc(ts, time.Time.Compare)
	}
	return out
}

// TestPut: the evidence of one instance is bounded: perObserver
// observations per observer (the newest), and a fixed number of
// observers (the ones heard from most recently).
func TestPut(t *testing.T) {
	t0 := newClock().Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var list []obs
	for s := range 6 {
		list = put(list, obs{observer: "n1", at: at(s)}, 3)
	}
	if got := observers(list)["n1"]; !slices.Equal(got, []time.Time{at(2), at(3), at(4), at(5)}) {
		t.Fatalf("n1's observations %v, want its newest %d", got, perObserver)
	}
	if got := put(list, obs{observer: "n1", at: at(1)}, 3); !slices.Equal(observers(got)["n1"], observers(list)["n1"]) {
		t.Errorf("an observation older than all kept replaced one: %v", observers(got)["n1"])
	}
	if got := put(list, obs{observer: "n1", at: at(5), ok: true}, 3); len(got) != len(list) {
		t.Errorf("the same observation again was added: %d observations", len(got))
	}

	list = put(list, obs{observer: "n2", at: at(3)}, 3)
	list = put(list, obs{observer: "n3", at: at(4)}, 3)
	// Full at 3 observers: n4 replaces the one heard from least recently
	// (n2, latest at 3s), all of its observations.
	list = put(list, obs{observer: "n4", at: at(6)}, 3)
	got := observers(list)
	if _, ok := got["n2"]; ok || len(got) != 3 || len(got["n4"]) != 1 {
		t.Fatalf("observers %v, want n1, n3 and n4", got)
	}
	// An observer whose only news is older than everyone's latest is
	// not let in.
	if got := observers(put(list, obs{observer: "n5", at: at(1)}, 3)); len(got) != 3 || got["n5"] != nil {
		t.Errorf("a stale newcomer displaced an observer: %v", got)
	}
}

// TestRecordAndPrune: evidence follows the newest incarnation reported;
// pruning drops what is about gone or replaced incarnations and what is
// older than the horizon, and forgets members not heard from since.
func TestRecordAndPrune(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	n := h.n
	t0 := h.clk.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.record("shop/cart/a", 2, eval.ClassProbe, obs{observer: "n1", at: t0}) {
		t.Fatal("first observation refused")
	}
	if n.record("shop/cart/a", 1, eval.ClassProbe, obs{observer: "n1", at: t0.Add(time.Second)}) {
		t.Error("an observation about an older incarnation was taken")
	}
	if !n.record("shop/cart/a", 3, eval.ClassOutcome, obs{observer: "c1", at: t0.Add(2 * time.Second), succ: 1}) {
		t.Fatal("an observation about a newer incarnation refused")
	}
	if e := n.evidence["shop/cart/a"]; e.inc != 3 || len(e.probes) != 0 || len(e.outcomes) != 1 {
		t.Fatalf("evidence %+v, want only incarnation 3's outcome", e)
	}
	if ss := n.samples(nil, "shop/cart/a", 3, t0.Add(time.Second), nil, "", ""); len(ss) != 1 || !ss[0].Pending {
		t.Errorf("samples with a cutoff before the outcome %+v, want it pending", ss)
	}
	ss := n.samples(nil, "shop/cart/a", 3, t0.Add(2*time.Second), nil, "", "")
	if len(ss) != 1 || ss[0] != (eval.Sample{Class: eval.ClassOutcome, Observer: "c1", Incarnation: 3, At: t0.Add(2 * time.Second), Successes: 1}) {
		t.Errorf("samples %+v, want the outcome", ss)
	}
	if ss := n.samples(nil, "shop/cart/a", 2, t0.Add(time.Hour), nil, "", ""); ss != nil {
		t.Errorf("samples of a replaced incarnation %+v, want none", ss)
	}

	n.record("shop/cart/b", 1, eval.ClassProbe, obs{observer: "n1", at: t0})
	n.record("shop/cart/b", 1, eval.ClassProbe, obs{observer: "n1", at: t0.Add(time.Minute)})
	n.record("shop/cart/c", 1, eval.ClassProbe, obs{observer: "n1", at: t0})
	n.heard["n1"], n.heard["n2"] = t0.Add(time.Minute), t0
	keep := func(key string) (uint64, bool) {
		switch key {
		case "shop/cart/a":
			return 4, true // re-registered
		case "shop/cart/b":
			return 1, true
		}
		return 0, false // gone
	}
	n.mu.Unlock() // prune takes it, a slice at a time
	n.prune(keep, t0.Add(time.Second))
	n.mu.Lock()
	if _, ok := n.evidence["shop/cart/a"]; ok {
		t.Error("evidence about a replaced incarnation survived pruning")
	}
	if _, ok := n.evidence["shop/cart/c"]; ok {
		t.Error("evidence about a gone instance survived pruning")
	}
	if e := n.evidence["shop/cart/b"]; e == nil || len(e.probes) != 1 || !e.probes[0].at.Equal(t0.Add(time.Minute)) {
		t.Errorf("b's evidence after pruning %+v, want only the observation after the horizon", e)
	}
	if _, ok := n.heard["n2"]; ok || n.heard["n1"].IsZero() {
		t.Errorf("heard after pruning %v, want only n1", n.heard)
	}
}

// TestOutcomeObserversBounded: an instance keeps the outcomes of at most
// MaxOutcomeObservers callers, the most recent.
func TestOutcomeObserversBounded(t *testing.T) {
	h := newHarness(t, nil, 0, func(c *Config) { c.MaxOutcomeObservers = 3 })
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.tick(0)
	for i := range 5 {
		h.clk.Advance(time.Millisecond)
		h.n.Outcomes(fmt.Sprintf("caller-%d", i), wire.OutcomeReport{Endpoints: []wire.EndpointOutcome{{Namespace: "shop", Service: "cart",
			Instance: "a", Incarnation: a.Incarnation, Success: 1}}})
	}
	ev, _ := h.n.Evidence(a.Key().String(), a.Incarnation)
	var got []string
	for _, e := range ev {
		got = append(got, e.Observer)
	}
	if want := []string{"caller-4", "caller-3", "caller-2"}; !slices.Equal(got, want) {
		t.Errorf("outcome observers %v, want the 3 most recent %v", got, want)
	}
}

// TestSeedResumesCommittedState: what a new leader rebuilds from a
// committed verdict evaluates like the state it was committed from: the
// same position, the failing classes still failing (in both classes),
// quarantine and publication kept.
func TestSeedResumesCommittedState(t *testing.T) {
	t0 := newClock().Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := eval.Policy{}.WithDefaults()
	ins := []eval.Instance{
		{ID: "a", Incarnation: 1, Lifecycle: status.Ready},
		{ID: "b", Incarnation: 1, Lifecycle: status.Ready},
		{ID: "c", Incarnation: 1, Lifecycle: status.Ready},
	}
	_, st := eval.Evaluate(p, ins, nil, eval.State{}, at(0))
	var res eval.Result
	for k := 1; k <= 3; k++ { // a quorum of two callers, three rounds
		samples := map[string][]eval.Sample{"a": {
			{Class: eval.ClassOutcome, Observer: "c1", Incarnation: 1, At: at(k), Failures: 3},
			{Class: eval.ClassOutcome, Observer: "c2", Incarnation: 1, At: at(k), Failures: 3},
		}}
		if k == 1 {
			samples["a"] = append(samples["a"], eval.Sample{Class: eval.ClassProbe, Observer: "n1", Incarnation: 1, At: at(1), Hard: true})
		}
		res, st = eval.Evaluate(p, ins, samples, st, at(k))
	}
	var r eval.InstanceResult
	for _, x := range res.Instances {
		if x.ID == "a" {
			r = x
		}
	}
	h := healthOf(r, *st.Instance("a"), at(3))
	if len(h.Failing) != 2 || h.Eligible {
		t.Fatalf("committed %+v, want withdrawn with both classes failing", h)
	}
	seeded := seed(h, wire.Instance{ID: "a", Incarnation: 1, Lifecycle: status.Ready}, at(3))
	orig := st.Instance("a")
	if seeded.Published != orig.Published || seeded.HealthEligible != orig.HealthEligible || seeded.Verdict != orig.Verdict ||
		!seeded.Seen || seeded.Incarnation != 1 {
		t.Errorf("seeded %+v, want the position of %+v", seeded, orig)
	}
	for i := range seeded.Classes {
		sc, oc := seeded.Class(eval.Class(i)), orig.Class(eval.Class(i))
		if sc.Failing != oc.Failing || sc.Hard != oc.Hard || sc.Why != oc.Why || !sc.FailingSince.Equal(oc.FailingSince) {
			t.Errorf("class %v seeded %+v, want failing as %+v", eval.Class(i), sc, oc)
		}
	}
	// From the seeded state, with no evidence, nothing changes.
	fresh := eval.State{Instances: []eval.InstanceState{seeded}}
	for _, id := range []string{"b", "c"} {
		hb := healthOf(eval.InstanceResult{ID: id, Incarnation: 1, Verdict: status.Unknown, Eligible: true}, *st.Instance(id), at(4))
		fresh.Set(seed(hb, wire.Instance{ID: id, Incarnation: 1, Lifecycle: status.Ready}, at(4)))
	}
	res2, st2 := eval.Evaluate(p, ins, nil, fresh, at(5))
	if len(res2.Transitions) != 0 || len(res2.Events) != 0 {
		t.Errorf("a seeded state evaluates to transitions %v, events %v; want none", res2.Transitions, res2.Events)
	}
	for i, x := range res2.Instances {
		if x.ID == "a" && !unchanged(h, x, st2.Instances[i]) {
			t.Errorf("a's verdict from the seeded state\n%+v\ndiffers from the committed\n%+v", healthOf(x, st2.Instances[i], at(5)), h)
		}
	}
}

// TestNeverDisregard: min_healthy_fraction 0 switches the guard off: with
// 3 of 4 instances failing, they leave at the shrink cap's rate and
// health is never disregarded.
func TestNeverDisregard(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	zero := 0.0
	svc.Policy.MinHealthyFraction = &zero
	h.apply(svc)
	fleet := h.fleet(svc, "d", 4)
	h.tick(0)
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(2 * time.Second)
	withdrawn, deferred := 0, 0
	for _, in := range fleet[:3] {
		e := h.entry(in)
		switch {
		case !e.Flags.Has(status.Eligible):
			withdrawn++
		case e.Flags.Has(status.WithdrawalDeferred):
			deferred++
		}
		if e.Flags.Has(status.HealthDisregarded) {
			t.Errorf("%s: flags %v, want health never disregarded", in.ID, e.Flags)
		}
	}
	if withdrawn != 1 || deferred != 2 {
		t.Fatalf("%d withdrawn, %d deferred; want 1 and 2 (the first window allows one)", withdrawn, deferred)
	}
	if got := h.instance(fleet[1]).Health; got == nil || !status.Flags(got.Flags).Has(status.WithdrawalDeferred) {
		t.Errorf("committed %+v, want withdrawal_deferred recorded", got)
	}
	if evs := events(h.st.Store, svc.Key(), wire.EventHealthDisregarded, ""); len(evs) != 0 {
		t.Errorf("health_disregarded events %+v, want none", evs)
	}
	// Each new window takes one more.
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(10 * time.Second)
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(10 * time.Second)
	for _, in := range fleet[:3] {
		h.wantEntry(in, status.Unhealthy, false)
	}
	h.wantEntry(fleet[3], status.Unknown, true)
}

// unchanged agrees with building the verdict and comparing it, and
// allocates nothing.
func TestUnchangedAgreesWithHealthOf(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := eval.InstanceResult{ID: "a", Incarnation: 3, Verdict: status.Unhealthy, Flags: 0,
		Reasons: []string{"probe failing: hard failure (connection refused)"}}
	st := eval.InstanceState{ID: "a", Incarnation: 3, FailingSince: eval.NanosOf(now.Add(-time.Minute))}
	st.SetClass(eval.ClassProbe, eval.ClassState{Failing: true, Hard: true, FailingSince: now.Add(-time.Minute)})
	committed := healthOf(base, st, now)
	if !unchanged(committed, base, st) {
		t.Fatal("a result is not unchanged from its own verdict")
	}
	if n := testing.AllocsPerRun(100, func() { unchanged(committed, base, st) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	slow := base
	slow.Reasons = append([]string{"slow start"}, base.Reasons...)
	slow.Flags |= status.SlowStart
	if !unchanged(committed, slow, st) {
		t.Fatal("slow start alone counts as a change")
	}
	for name, change := range map[string]func(*eval.InstanceResult, *eval.InstanceState){
		"verdict":        func(r *eval.InstanceResult, _ *eval.InstanceState) { r.Verdict = status.Healthy },
		"eligible":       func(r *eval.InstanceResult, _ *eval.InstanceState) { r.Eligible = true },
		"reason":         func(r *eval.InstanceResult, _ *eval.InstanceState) { r.Reasons = []string{"other"} },
		"extra reason":   func(r *eval.InstanceResult, _ *eval.InstanceState) { r.Reasons = append(r.Reasons, "x") },
		"flags":          func(r *eval.InstanceResult, _ *eval.InstanceState) { r.Flags |= status.LeaseExpired },
		"failing class":  func(_ *eval.InstanceResult, s *eval.InstanceState) { failOutcome(s) },
		"no longer hard": func(_ *eval.InstanceResult, s *eval.InstanceState) { notHard(s) },
		"quarantine":     func(_ *eval.InstanceResult, s *eval.InstanceState) { s.QuarantineLevel = 1 },
	} {
		r, s := base, st
		r.Reasons = slices.Clone(base.Reasons)
		change(&r, &s)
		if unchanged(committed, r, s) {
			t.Errorf("%s: a change went unnoticed", name)
		}
	}
}

// failOutcome and notHard change a state's class through a new copy of
// it: the state they were copied from shares the old.
func failOutcome(s *eval.InstanceState) {
	s.SetClass(eval.ClassOutcome, eval.ClassState{Failing: true})
}

func notHard(s *eval.InstanceState) {
	c := s.Class(eval.ClassProbe)
	c.Hard = false
	s.SetClass(eval.ClassProbe, c)
}

// TestSeedAfterFailover: a new leader does not withdraw an instance its
// probers disagreed about (it has neither prober's result yet), and does
// not end an outcome withdrawal on its first round because the callers
// were last heard from by the old leader.
func TestSeedAfterFailover(t *testing.T) {
	t0 := newClock().Now()
	p := eval.Policy{}.WithDefaults()
	in := wire.Instance{ID: "a", Incarnation: 1, Lifecycle: status.Ready}
	ins := []eval.Instance{{ID: "a", Incarnation: 1, Lifecycle: status.Ready},
		{ID: "b", Incarnation: 1, Lifecycle: status.Ready}, {ID: "c", Incarnation: 1, Lifecycle: status.Ready}}
	evalAt := func(h wire.Health, now time.Time) eval.InstanceResult {
		t.Helper()
		sa := seed(h, in, now)
		st := eval.State{Instances: []eval.InstanceState{sa}}
		res, _ := eval.Evaluate(p, ins, nil, st, now)
		return res.Instances[0]
	}
	disagreed := wire.Health{Incarnation: 1, Verdict: status.Degraded, Eligible: true, HealthEligible: true,
		Failing: []wire.FailingClass{{Class: "probe", Since: t0, Hard: true, Why: "hard failure (connection refused)"}}}
	if r := evalAt(disagreed, t0.Add(2*time.Second)); !r.Eligible {
		t.Errorf("an instance kept in rotation by disagreeing probers was withdrawn after a failover: %+v", r)
	}
	ejected := wire.Health{Incarnation: 1, Verdict: status.Unhealthy, Eligible: false, HealthEligible: false,
		Failing: []wire.FailingClass{{Class: "outcome", Since: t0, Why: "a quorum of callers report failures"}}}
	if r := evalAt(ejected, t0.Add(10*time.Minute)); r.Eligible {
		t.Errorf("an outcome withdrawal ended on the new leader's first round: %+v", r)
	}
}
