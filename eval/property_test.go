package eval

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"pgregory.net/rapid"
)

func genPolicy(t *rapid.T) Policy {
	wa := rapid.IntRange(1, 4).Draw(t, "withdraw_after")
	return Policy{
		Readiness:          rapid.SampledFrom([]Readiness{ReadinessProbe, ReadinessSelf}).Draw(t, "readiness"),
		Dependencies:       map[string]bool{"own": false, "shared": true},
		WithdrawAfter:      wa,
		AdmitAfter:         wa + rapid.IntRange(1, 3).Draw(t, "admit_extra"),
		AdmitMin:           time.Duration(rapid.IntRange(1, 20).Draw(t, "admit_min_s")) * s,
		MinHealthyFraction: rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(t, "min_healthy"),
		ShrinkCap:          rapid.SampledFrom([]float64{0.1, 0.33, 0.5, 1}).Draw(t, "shrink_cap"),
		FlapLimit:          rapid.IntRange(1, 6).Draw(t, "flap_limit"),
		QuarantineBase:     time.Duration(rapid.IntRange(1, 60).Draw(t, "quarantine_s")) * s,
	}
}

// scenarioStep is one evaluation's inputs.
type scenarioStep struct {
	now      time.Time
	ins      []Instance
	evidence map[string][]Sample
	hard     map[string]bool
}

// genStep draws the next step: time moves 1–20s; every non-silent
// instance may get a probe, a hard failure, an outcome window or a new
// report; any instance's lease may move.
func genStep(t *rapid.T, ins []Instance, silent map[string]bool, now time.Time) scenarioStep {
	now = now.Add(time.Duration(rapid.IntRange(1, 20).Draw(t, "dt_s")) * s)
	st := scenarioStep{now: now, ins: slices.Clone(ins), evidence: map[string][]Sample{}, hard: map[string]bool{}}
	states := []string{DependencyOK, DependencyDegraded, DependencyFailed}
	for i := range st.ins {
		in := &st.ins[i]
		switch rapid.IntRange(0, 3).Draw(t, "lease") {
		case 0:
			in.LeaseExpiry = now.Add(time.Duration(rapid.IntRange(-60, 60).Draw(t, "lease_s")) * s)
		case 1:
			in.LeaseExpiry = time.Time{}
		}
		if silent[in.ID] {
			continue
		}
		obs := rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "observer")
		switch rapid.IntRange(0, 5).Draw(t, "evidence") {
		case 1:
			st.evidence[in.ID] = append(st.evidence[in.ID], Sample{Class: ClassProbe, Observer: obs, At: now, OK: true})
		case 2:
			st.evidence[in.ID] = append(st.evidence[in.ID], Sample{Class: ClassProbe, Observer: obs, At: now})
		case 3:
			st.evidence[in.ID] = append(st.evidence[in.ID], Sample{Class: ClassProbe, Observer: obs, At: now, Hard: true})
			st.hard[in.ID] = true
		case 4:
			caller := rapid.SampledFrom([]string{"c1", "c2", "c3"}).Draw(t, "caller")
			st.evidence[in.ID] = append(st.evidence[in.ID], Sample{Class: ClassOutcome, Observer: caller, At: now,
				Successes: rapid.IntRange(0, 10).Draw(t, "ok"), Failures: rapid.IntRange(0, 10).Draw(t, "fail"),
				Timeouts: rapid.IntRange(0, 3).Draw(t, "timeouts")})
		case 5:
			in.Report = &Report{Ready: rapid.Bool().Draw(t, "ready"), At: now, Dependencies: map[string]string{
				"own":    rapid.SampledFrom(states).Draw(t, "own"),
				"shared": rapid.SampledFrom(states).Draw(t, "shared"),
			}}
		}
	}
	return st
}

func genFleet(t *rapid.T) ([]Instance, map[string]bool) {
	n := rapid.IntRange(1, 10).Draw(t, "n")
	ins := fleet(n)
	silent := map[string]bool{}
	for i := range ins {
		ins[i].Zone = rapid.SampledFrom([]string{"z1", "z2", "z3"}).Draw(t, "zone")
		ins[i].BaseWeight = rapid.IntRange(0, 1000).Draw(t, "weight")
		if rapid.IntRange(0, 3).Draw(t, "silent") == 0 {
			silent[ins[i].ID] = true
		}
	}
	return ins, silent
}

func cloneState(st State) State {
	out := st
	if st.Instances != nil {
		out.Instances = slices.Clone(st.Instances)
		for i := range out.Instances {
			if v := &out.Instances[i]; v.Recent != nil {
				r := *v.Recent
				r.Flaps = slices.Clone(r.Flaps)
				r.Observers = slices.Clone(r.Observers)
				v.Recent = &r
			}
		}
	}
	return out
}

// TestPropertiesOfEvaluate drives random fleets through random evidence
// and checks, after every evaluation, the invariants of SPEC §0 and §2.
func TestPropertiesOfEvaluate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		pd := p.WithDefaults()
		ins, silent := genFleet(t)
		var (
			st State
			// The same evaluations through one Evaluator that reuses
			// its memory and recycles every State it replaced.
			ev       Evaluator
			evSt     State
			prevRes  *Result
			now      = t0
			winStart time.Time
			winBase  int
			winUsed  int // capped withdrawals, for a window opened on an empty view
			expired  = map[string]bool{}
		)
		for i := range rapid.IntRange(1, 25).Draw(t, "steps") {
			step := genStep(t, ins, silent, now)
			now, ins = step.now, step.ins
			before := cloneState(st)

			res, next := Evaluate(p, step.ins, step.evidence, st, now)

			// Determinism: equal inputs in another order give equal outputs.
			perm := rapid.Permutation(step.ins).Draw(t, "perm")
			res2, next2 := Evaluate(p, perm, maps.Clone(step.evidence), cloneState(before), now)
			if !reflect.DeepEqual(res, res2) || !reflect.DeepEqual(next, next2) {
				t.Fatalf("step %d: not deterministic:\n%+v\n%+v", i, res, res2)
			}
			if !reflect.DeepEqual(st, before) {
				t.Fatalf("step %d: Evaluate modified the previous state", i)
			}
			res3, next3 := ev.Evaluate(p, step.ins, step.evidence, evSt, now)
			if !reflect.DeepEqual(res, res3) || !reflect.DeepEqual(next, next3) {
				t.Fatalf("step %d: a reused Evaluator differs from Evaluate:\n%+v\n%+v", i, res, res3)
			}
			ev.Recycle(evSt)
			evSt = next3

			published, ready, outcomeOnly := map[string]bool{}, 0, 0
			for j, r := range res.Instances {
				if j > 0 && res.Instances[j-1].ID >= r.ID {
					t.Fatalf("results not sorted by id")
				}
				if r.Eligible != r.Flags.Has(status.Eligible) || r.Eligible != (r.Weight > 0) || r.Weight > 65535 {
					t.Fatalf("%s: eligible %v flags %v weight %d", r.ID, r.Eligible, r.Flags, r.Weight)
				}
				published[r.ID] = r.Eligible
				if r.Lifecycle == status.Ready {
					ready++
				}
				// Silence alone never withdraws; the end of the
				// registration (hard expiry) does, and a lease that
				// hard-expires and is renewed again and again flaps, and
				// may be quarantined.
				if slices.Contains(r.Reasons, "lease past its hard expiry") {
					expired[r.ID] = true
				}
				if silent[r.ID] && !r.Eligible && !slices.Contains(r.Reasons, "lease past its hard expiry") &&
					!(expired[r.ID] && r.Verdict == status.Quarantined) {
					t.Fatalf("step %d: silent %s withdrawn: %+v", i, r.ID, r)
				}
				// A hard failure withdraws within one evaluation, or says
				// why not: the shrink cap, the guard, or another prober
				// that passed.
				if step.hard[r.ID] && r.Eligible && !r.Flags.Has(status.WithdrawalDeferred) && !r.Flags.Has(status.HealthDisregarded) &&
					!hasReasonPrefix(r, "probers disagree") {
					t.Fatalf("step %d: hard failure left %s eligible without a flag: %+v", i, r.ID, r)
				}
				// Disagreeing probers keep an instance in rotation; they
				// never bring one back without the re-admission run.
				if b := before.Instance(r.ID); b != nil && b.Seen && !b.HealthEligible && r.Eligible &&
					!r.Flags.Has(status.HealthDisregarded) && hasReasonPrefix(r, "probers disagree") {
					t.Fatalf("step %d: %s came back on disagreeing probers: %+v", i, r.ID, r)
				}
				// Outcomes withdraw only with a quorum of callers in the
				// window, and never more than max_ejection_percent.
				if !r.Eligible && r.Lifecycle == status.Ready && len(r.Reasons) == 1 && strings.HasPrefix(r.Reasons[0], "outcome failing") {
					outcomeOnly++
				}
			}
			if budget := max(1, pd.MaxEjectionPercent*ready/100); outcomeOnly > budget {
				t.Fatalf("step %d: %d instances withdrawn by outcomes alone, max_ejection_percent allows %d", i, outcomeOnly, budget)
			}
			n := 0
			for _, ok := range published {
				if ok {
					n++
				}
			}
			// The guard.
			if !res.HealthDisregarded && float64(n) < pd.MinHealthyFraction*float64(ready) {
				t.Fatalf("step %d: %d of %d eligible, below %v, without HealthDisregarded", i, n, ready, pd.MinHealthyFraction)
			}
			// The shrink cap, modelled independently of the state: it
			// counts net loss (SPEC §2). A capped withdrawal (of a ready
			// instance, not past its lease's hard expiry) may not leave
			// the view below the window's floor; an instance that came
			// back makes room for one.
			if prevRes == nil || now.Sub(winStart) >= pd.ShrinkWindow {
				winStart, winBase, winUsed = now, 0, 0
				if prevRes != nil {
					for _, r := range prevRes.Instances {
						if r.Eligible && r.Lifecycle == status.Ready {
							winBase++
						}
					}
				}
			}
			if prevRes != nil {
				capped := ""
				for _, r := range prevRes.Instances {
					if r.Eligible && !published[r.ID] {
						if cur, ok := resOf(res, r.ID); ok && cur.Lifecycle == status.Ready &&
							!slices.Contains(cur.Reasons, "lease past its hard expiry") {
							capped = r.ID
							winUsed++
						}
					}
				}
				floor := winBase - max(1, int(math.Floor(pd.ShrinkCap*float64(winBase))))
				if winBase == 0 && winUsed > 1 {
					t.Fatalf("step %d: %d withdrawals in a window opened on an empty view (from %v); it allows one", i, winUsed, winStart)
				}
				if capped != "" && n < floor {
					t.Fatalf("step %d: %s withdrawn, leaving %d eligible, below the window's floor %d (base %d from %v)",
						i, capped, n, floor, winBase, winStart)
				}
			}
			st, prevRes = next, &res
		}
	})
}

// TestPropertyReadmissionSlowerThanWithdrawal: for the same evidence
// cadence, a run of successes takes strictly more samples and strictly
// more time to re-admit than a run of failures takes to withdraw.
func TestPropertyReadmissionSlowerThanWithdrawal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		p.FlapLimit = 10
		class := rapid.SampledFrom([]Class{ClassProbe, ClassOutcome}).Draw(t, "class")
		every := time.Duration(rapid.IntRange(1, 10).Draw(t, "every_s")) * s
		ins := fleet(rapid.IntRange(4, 8).Draw(t, "n"))
		p.MinHealthyFraction, p.ShrinkCap = 0.25, 1
		// The hysteresis is what is measured here; the outcome quorum
		// has properties of its own.
		p.OutcomeQuorum = 1
		sample := func(d time.Time, ok bool) map[string][]Sample {
			sm := Sample{Class: class, Observer: "n1", At: d, OK: ok, Successes: 10}
			if !ok {
				sm.Successes, sm.Failures = 0, 10
			}
			return map[string][]Sample{"i0": {sm}}
		}
		res, st := Evaluate(p, ins, nil, State{}, t0)
		now := t0
		run := func(ok bool) (int, time.Duration) {
			first := now.Add(every)
			for k := 1; k <= 100; k++ {
				now = now.Add(every)
				res, st = Evaluate(p, ins, sample(now, ok), st, now)
				if res.Instances[0].Eligible == ok {
					return k, now.Sub(first)
				}
			}
			t.Fatalf("no transition after 100 samples (ok=%v): %+v", ok, res.Instances[0])
			return 0, 0
		}
		kw, dw := run(false)
		ka, da := run(true)
		if ka <= kw || da <= dw {
			t.Fatalf("withdrawal took %d samples / %v, re-admission %d / %v", kw, dw, ka, da)
		}
	})
}

func hasReasonPrefix(r InstanceResult, prefix string) bool {
	return slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestPropertyOneCallerNeverWithdraws: whatever one caller reports, and
// however often, an instance that no other evidence speaks against stays
// in rotation (SPEC §2: local evidence stays local); its weight may only
// be lowered.
func TestPropertyOneCallerNeverWithdraws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		p.Readiness = ReadinessProbe
		ins := fleet(rapid.IntRange(1, 8).Draw(t, "n"))
		var st State
		now := t0
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(1, 20).Draw(t, "dt_s")) * s)
			ev := map[string][]Sample{}
			for _, in := range ins {
				if rapid.Bool().Draw(t, "reports") {
					ev[in.ID] = append(ev[in.ID], Sample{Class: ClassOutcome, Observer: "lonely", At: now,
						Successes: rapid.IntRange(0, 10).Draw(t, "ok"), Failures: rapid.IntRange(0, 10).Draw(t, "fail")})
				}
				if rapid.Bool().Draw(t, "probed") {
					ev[in.ID] = append(ev[in.ID], Sample{Class: ClassProbe, Observer: "n1", At: now, OK: true})
				}
			}
			var res Result
			res, st = Evaluate(p, ins, ev, st, now)
			for _, r := range res.Instances {
				if !r.Eligible {
					t.Fatalf("step %d: one caller withdrew %s: %+v", i, r.ID, r)
				}
			}
		}
	})
}

// resOf returns the result of instance id.
func resOf(res Result, id string) (InstanceResult, bool) {
	for _, r := range res.Instances {
		if r.ID == id {
			return r, true
		}
	}
	return InstanceResult{}, false
}
