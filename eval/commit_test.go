package eval_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestResumeFromCommitted: what a new leader rebuilds from a
// committed verdict evaluates like the state it was committed from: the
// same position, the failing classes still failing (in both classes),
// quarantine and publication kept.
func TestResumeFromCommitted(t *testing.T) {
	var e eval.Evaluator
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
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
	h := eval.Commit(r, *st.Instance("a"), at(3))
	if len(h.Failing) != 2 || h.Eligible {
		t.Fatalf("committed %+v, want withdrawn with both classes failing", h)
	}
	seeded := eval.Resume(h, "a", status.Ready, at(3))
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
		hb := eval.Commit(eval.InstanceResult{ID: id, Incarnation: 1, Verdict: status.Unknown, Eligible: true}, *st.Instance(id), at(4))
		fresh.Set(eval.Resume(hb, id, status.Ready, at(4)))
	}
	res2, st2 := eval.Evaluate(p, ins, nil, fresh, at(5))
	if len(res2.Transitions) != 0 || len(res2.Events) != 0 {
		t.Errorf("a seeded state evaluates to transitions %v, events %v; want none", res2.Transitions, res2.Events)
	}
	for i, x := range res2.Instances {
		if x.ID == "a" && !e.Unchanged(h, x, st2.Instances[i]) {
			t.Errorf("a's verdict from the seeded state\n%+v\ndiffers from the committed\n%+v", eval.Commit(x, st2.Instances[i], at(5)), h)
		}
	}
}

// TestUnchanged: a result is unchanged from its own committed verdict,
// and from one that differs in slow start alone; every change a reader
// acts on is noticed; and it allocates nothing.
func TestUnchanged(t *testing.T) {
	var e eval.Evaluator
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := eval.InstanceResult{ID: "a", Incarnation: 3, Verdict: status.Unhealthy, Flags: 0,
		Reasons: []string{"probe failing: hard failure (connection refused)"}}
	st := eval.InstanceState{ID: "a", Incarnation: 3, FailingSince: eval.NanosOf(now.Add(-time.Minute))}
	st.SetClass(eval.ClassProbe, eval.ClassState{Failing: true, Hard: true, FailingSince: now.Add(-time.Minute)})
	committed := eval.Commit(base, st, now)
	if !e.Unchanged(committed, base, st) {
		t.Fatal("a result is not unchanged from its own verdict")
	}
	if n := testing.AllocsPerRun(100, func() { e.Unchanged(committed, base, st) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	slow := base
	slow.Reasons = append([]string{"slow start"}, base.Reasons...)
	slow.Flags |= status.SlowStart
	if !e.Unchanged(committed, slow, st) {
		t.Fatal("slow start alone counts as a change")
	}
	// What no reader acts on is not worth a commit.
	quiet := base
	quiet.Evidence = eval.EvidenceRef{Class: eval.ClassProbe, Observer: "n2", At: now.Add(time.Second)}
	why := st
	c := why.Class(eval.ClassProbe)
	c.Why = "refused again"
	why.SetClass(eval.ClassProbe, c)
	if !e.Unchanged(committed, quiet, why) {
		t.Fatal("new evidence or a new explanation alone counts as a change")
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
		if e.Unchanged(committed, r, s) {
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

// TestResumeAfterFailover: a new leader does not withdraw an instance its
// probers disagreed about (it has neither prober's result yet), and does
// not end an outcome withdrawal on its first round because the callers
// were last heard from by the old leader.
func TestResumeAfterFailover(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := eval.Policy{}.WithDefaults()
	ins := []eval.Instance{{ID: "a", Incarnation: 1, Lifecycle: status.Ready},
		{ID: "b", Incarnation: 1, Lifecycle: status.Ready}, {ID: "c", Incarnation: 1, Lifecycle: status.Ready}}
	evalAt := func(h wire.Health, now time.Time) eval.InstanceResult {
		t.Helper()
		sa := eval.Resume(h, "a", status.Ready, now)
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
