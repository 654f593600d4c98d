package eval

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// want is what a rule test expects of one instance after the last step.
type want struct {
	eligible bool
	verdict  Verdict
	flags    Flags // flags that must be set (besides Eligible)
	weight   int   // checked when non-zero
}

func (w want) check(t *testing.T, r InstanceResult) {
	t.Helper()
	if r.Eligible != w.eligible || r.Verdict != w.verdict || !r.Flags.Has(w.flags) ||
		(w.weight != 0 && r.Weight != w.weight) {
		t.Errorf("%s: eligible=%v verdict=%v flags=%v weight=%d reasons=%q; want eligible=%v verdict=%v flags⊇%v weight=%d",
			r.ID, r.Eligible, r.Verdict, r.Flags, r.Weight, r.Reasons, w.eligible, w.verdict, w.flags, w.weight)
	}
	if r.Eligible != r.Flags.Has(status.Eligible) || r.Eligible != (r.Weight > 0) {
		t.Errorf("%s: eligible=%v but flags=%v weight=%d", r.ID, r.Eligible, r.Flags, r.Weight)
	}
}

// stepSpec is one evaluation in a rule table.
type stepSpec struct {
	at time.Duration
	ev []ev
	do func(m *sim) // changes the instances before the step
}

type ruleCase struct {
	name   string
	policy Policy
	n      int // fleet size; 4 if zero (so the guard and cap stay out of the way)
	steps  []stepSpec
	id     string // the instance checked; "i0" if empty
	want   want
}

func runRule(t *testing.T, tc ruleCase) *sim {
	t.Helper()
	n := tc.n
	if n == 0 {
		n = 4
	}
	m := newSim(t, tc.policy, fleet(n)...)
	for _, st := range tc.steps {
		if st.do != nil {
			st.do(m)
		}
		m.step(st.at, st.ev...)
	}
	id := tc.id
	if id == "" {
		id = "i0"
	}
	tc.want.check(t, m.inst(id))
	return m
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runRule(t, tc) })
	}
}

// probes returns probe samples for id at the given seconds with the given
// results, one per step, as steps.
func probeSteps(id string, from, every time.Duration, results ...bool) []stepSpec {
	out := make([]stepSpec, len(results))
	for i, ok := range results {
		d := from + time.Duration(i)*every
		out[i] = stepSpec{at: d, ev: []ev{probe(id, d, ok)}}
	}
	return out
}

func seq(parts ...[]stepSpec) []stepSpec { return slices.Concat(parts...) }

func one(d time.Duration, e ...ev) []stepSpec { return []stepSpec{{at: d, ev: e}} }

func lifecycle(id string, l Lifecycle) func(*sim) {
	return func(m *sim) { m.set(id, func(in *Instance) { in.Lifecycle = l }) }
}

const (
	T = true
	F = false
)

// Rule 1.
func TestRuleLifecycle(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "starting is not eligible", steps: []stepSpec{{at: 0, do: lifecycle("i0", Starting)}},
			want: want{eligible: false, verdict: status.Unknown}},
		{name: "draining is withdrawn at once", steps: seq(one(0), []stepSpec{{at: 1 * s, do: lifecycle("i0", Draining)}}),
			want: want{eligible: false, verdict: status.Unknown}},
		{name: "terminated is withdrawn", steps: seq(one(0), []stepSpec{{at: 1 * s, do: lifecycle("i0", Terminated)}}),
			want: want{eligible: false, verdict: status.Unknown}},
		{name: "healthy evidence does not make draining eligible",
			steps: seq([]stepSpec{{at: 0, do: lifecycle("i0", Draining)}}, probeSteps("i0", 1*s, 2*s, T, T, T, T, T, T, T)),
			want:  want{eligible: false, verdict: status.Healthy}},
		{name: "draining is not served through the guard", n: 2,
			steps: seq([]stepSpec{{at: 0, do: lifecycle("i0", Draining)}}, one(1*s, hard("i1", 1*s))),
			want:  want{eligible: false, verdict: status.Unknown}},
		{name: "ready after starting is eligible",
			steps: seq([]stepSpec{{at: 0, do: lifecycle("i0", Starting)}}, []stepSpec{{at: 1 * s, do: lifecycle("i0", Ready)}}),
			want:  want{eligible: true, verdict: status.Unknown}},
	})
	t.Run("the guard serves the failed ready instance but not the draining one", func(t *testing.T) {
		m := runRule(t, ruleCase{n: 2,
			steps: seq([]stepSpec{{at: 0, do: lifecycle("i0", Draining)}}, one(1*s, hard("i1", 1*s))),
			id:    "i1", want: want{eligible: true, verdict: status.Unhealthy, flags: status.HealthDisregarded}})
		if !m.res.HealthDisregarded {
			t.Errorf("HealthDisregarded = false")
		}
	})
}

// Rule 2.
func TestRuleSilence(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "new instance without evidence is unknown and eligible", steps: one(0),
			want: want{eligible: true, verdict: status.Unknown}},
		{name: "fresh success is healthy", steps: one(0, probe("i0", 0, true)),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "evidence older than freshness is unknown, still eligible",
			steps: seq(one(0, probe("i0", 0, true)), one(7*s)),
			want:  want{eligible: true, verdict: status.Unknown}},
		{name: "evidence within freshness (3 × 2s) still counts",
			steps: seq(one(0, probe("i0", 0, true)), one(6*s)),
			want:  want{eligible: true, verdict: status.Healthy}},
		{name: "an hour of silence never withdraws",
			steps: seq(probeSteps("i0", 0, 2*s, T, T), one(time.Hour)),
			want:  want{eligible: true, verdict: status.Unknown}},
		{name: "two failures then silence stay eligible",
			steps: seq(probeSteps("i0", 0, 2*s, F, F), one(time.Hour)),
			want:  want{eligible: true, verdict: status.Unknown}},
	})
}

// Rule 3.
func TestRuleProbes(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "two failures do not withdraw", steps: probeSteps("i0", 0, 2*s, T, F, F),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "three consecutive failures withdraw", steps: probeSteps("i0", 0, 2*s, T, F, F, F),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "a success breaks the run", steps: probeSteps("i0", 0, 2*s, T, T, T, T, T, T, T, T, F, F, T, F, F),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "intermittent failure withdraws by score", steps: probeSteps("i0", 0, 2*s, F, F, T, F, F, T, F, F),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "the score is a rate, not the last sample",
			steps: probeSteps("i0", 0, 2*s, T, T, T, T, T, T, T, T, T, T, F),
			want:  want{eligible: true, verdict: status.Healthy}},
		{name: "a hard failure withdraws at once", steps: seq(probeSteps("i0", 0, 2*s, T, T), one(4*s, hard("i0", 4*s))),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "a failing class stays failing through silence", steps: seq(probeSteps("i0", 0, 2*s, F, F, F), one(time.Hour)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "samples already consumed are not counted twice",
			steps: []stepSpec{{at: 0, ev: []ev{probe("i0", 0, false)}}, {at: 1 * s, ev: []ev{probe("i0", 0, false)}},
				{at: 2 * s, ev: []ev{probe("i0", 0, false), probe("i0", 2*s, false)}}},
			want: want{eligible: true, verdict: status.Healthy}},
	})
}

// Rule 4.
func TestRuleHysteresis(t *testing.T) {
	down := probeSteps("i0", 0, 2*s, F, F, F) // withdrawn at 4s
	runRules(t, []ruleCase{
		{name: "five successes within 8s are not enough (admit_min 10s)", steps: seq(down, probeSteps("i0", 6*s, 2*s, T, T, T, T, T)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "six successes over 10s re-admit", steps: seq(down, probeSteps("i0", 6*s, 2*s, T, T, T, T, T, T)),
			want: want{eligible: true, verdict: status.Healthy, flags: status.SlowStart}},
		{name: "four successes over 15s are too few", steps: seq(down, probeSteps("i0", 6*s, 5*s, T, T, T, T)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "five successes over 20s re-admit", steps: seq(down, probeSteps("i0", 6*s, 5*s, T, T, T, T, T)),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "a failure restarts the run", steps: seq(down, probeSteps("i0", 6*s, 2*s, T, T, T, T, F, T, T, T, T, T)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "a hard failure needs the same run to recover",
			steps: seq(one(0, hard("i0", 0)), probeSteps("i0", 2*s, 2*s, T, T, T, T, T)),
			want:  want{eligible: false, verdict: status.Unhealthy}},
	})
}

// Rule 5.
func TestRuleSelfReports(t *testing.T) {
	deps := map[string]bool{"db": false, "cache": true}
	report := func(ready bool, d map[string]string) func(*sim) {
		return func(m *sim) {
			m.set("i0", func(in *Instance) { in.Report = &Report{Ready: ready, Dependencies: d, At: at(0)} })
		}
	}
	p := Policy{Readiness: ReadinessSelf, Dependencies: deps}
	// The weight is checked after slow start (60s).
	cases := []struct {
		name   string
		ready  bool
		deps   map[string]string
		policy Policy
		want   want
	}{
		{"ready", true, nil, p, want{eligible: true, verdict: status.Healthy, weight: 100}},
		{"not ready withdraws", false, nil, p, want{eligible: false, verdict: status.Unhealthy}},
		{"not ready withdraws for a probe service too", false, nil, Policy{}, want{eligible: false, verdict: status.Unhealthy}},
		{"failed shared dependency halves the weight", true, map[string]string{"cache": "failed"}, p,
			want{eligible: true, verdict: status.Degraded, flags: status.DependencyDegraded, weight: 50}},
		{"degraded shared dependency halves the weight", true, map[string]string{"cache": "degraded"}, p,
			want{eligible: true, verdict: status.Degraded, flags: status.DependencyDegraded, weight: 50}},
		{"failed own dependency withdraws", true, map[string]string{"db": "failed", "cache": "ok"}, p,
			want{eligible: false, verdict: status.Unhealthy}},
		{"unknown state of own dependency is failed", true, map[string]string{"db": "on fire"}, p,
			want{eligible: false, verdict: status.Unhealthy}},
		{"degraded own dependency is a degraded verdict at full weight", true, map[string]string{"db": "degraded"}, p,
			want{eligible: true, verdict: status.Degraded, weight: 100}},
		{"undeclared dependency is ignored", true, map[string]string{"queue": "failed"}, p,
			want{eligible: true, verdict: status.Healthy, weight: 100}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRule(t, ruleCase{policy: tc.policy,
				steps: []stepSpec{{at: 0, do: report(tc.ready, tc.deps)}, {at: 60 * s}}, want: tc.want})
		})
	}
	// Re-admission after a not-ready report takes admit_after (5) ready
	// evaluations spanning admit_min (10s), as a run of successes does.
	readyAgain := func(until time.Duration) []stepSpec {
		st := []stepSpec{{at: 0, do: report(false, nil)}}
		for d := 1 * s; d <= until; d += s {
			st = append(st, stepSpec{at: d})
		}
		st[1].do = func(m *sim) {
			m.set("i0", func(in *Instance) { in.Report = &Report{Ready: true, At: at(1 * s)} })
		}
		return st
	}
	runRules(t, []ruleCase{
		{name: "a ready report does not re-admit at once", policy: p, steps: readyAgain(2 * s),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "nor before admit_min", policy: p, steps: readyAgain(10 * s),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "but after admit_after evaluations over admit_min", policy: p, steps: readyAgain(11 * s),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "a not-ready report restarts the wait", policy: p,
			steps: append(readyAgain(8*s), stepSpec{at: 9 * s, do: report(false, nil)},
				stepSpec{at: 10 * s, do: func(m *sim) {
					m.set("i0", func(in *Instance) { in.Report = &Report{Ready: true, At: at(10 * s)} })
				}}, stepSpec{at: 12 * s}, stepSpec{at: 13 * s}, stepSpec{at: 14 * s}, stepSpec{at: 15 * s}, stepSpec{at: 16 * s}),
			want: want{eligible: false, verdict: status.Unhealthy}},
	})
	t.Run("a report goes stale with the lease", func(t *testing.T) {
		runRule(t, ruleCase{policy: p, steps: []stepSpec{{at: 0, do: func(m *sim) {
			report(true, nil)(m)
			m.set("i0", func(in *Instance) { in.LeaseExpiry = at(30 * s) })
		}}, {at: 31 * s}}, want: want{eligible: true, verdict: status.Unknown, flags: status.LeaseExpired}})
	})
}

// Rule 6.
func TestRuleOutcomes(t *testing.T) {
	// Two callers take turns: the quorum (2) is met once both have
	// reported failures.
	outs := func(from time.Duration, ok, failed int, n int) []stepSpec {
		var st []stepSpec
		for i := range n {
			d := from + time.Duration(i)*2*s
			e := outcome("i0", d, ok, failed)
			e.s.Observer = []string{"c1", "c2"}[i%2]
			st = append(st, stepSpec{at: d, ev: []ev{e}})
		}
		return st
	}
	// lonely is one caller's windows, every 2s.
	lonely := func(id string, from time.Duration, ok, failed int, n int) []stepSpec {
		var st []stepSpec
		for i := range n {
			d := from + time.Duration(i)*2*s
			st = append(st, stepSpec{at: d, ev: []ev{outcome(id, d, ok, failed)}})
		}
		return st
	}
	// callers has k callers report on i0 at d, the first f of them failures.
	callers := func(d time.Duration, k, f int) stepSpec {
		st := stepSpec{at: d}
		for i := range k {
			e := outcome("i0", d, 10, 0)
			if i < f {
				e = outcome("i0", d, 0, 10)
			}
			e.s.Observer = fmt.Sprintf("c%d", i)
			st.ev = append(st.ev, e)
		}
		return st
	}
	runRules(t, []ruleCase{
		{name: "80% failures of both callers three times withdraw", steps: outs(0, 2, 8, 4),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "80% failures twice do not; they lower the weight", steps: seq(one(0), outs(60*s, 2, 8, 3)),
			want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}},
		{name: "40% failures never withdraw", steps: outs(0, 6, 4, 10),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "an empty window is ignored", steps: seq(outs(0, 2, 8, 3), outs(6*s, 0, 0, 1)),
			want: want{eligible: true, verdict: status.Degraded}},
		{name: "recovery needs the admit run", steps: seq(outs(0, 0, 10, 4), outs(8*s, 10, 0, 5)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "recovery after the admit run", steps: seq(outs(0, 0, 10, 4), outs(8*s, 10, 0, 6)),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "silent callers end the withdrawal after the window", steps: seq(outs(0, 0, 10, 4), one(6*s+DefaultOutcomeWindow)),
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "silent callers end the withdrawal after the window", steps: seq(outs(0, 0, 10, 4), one(6*s+DefaultOutcomeWindow+s)),
			want: want{eligible: true, verdict: status.Unknown}},
		{name: "one caller never withdraws; it halves the weight", steps: seq(one(0), lonely("i0", 40*s, 0, 10, 12)),
			want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}},
		{name: "two failing callers of seven are below a third",
			steps: []stepSpec{{at: 0}, callers(60*s, 7, 2), callers(62*s, 7, 2), callers(64*s, 7, 2), callers(66*s, 7, 2)},
			want:  want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}},
		{name: "three failing callers of seven withdraw",
			steps: []stepSpec{callers(60*s, 7, 3), callers(62*s, 7, 3), callers(64*s, 7, 3)},
			want:  want{eligible: false, verdict: status.Unhealthy}},
		{name: "a caller's old window leaves the quorum", steps: seq(lonely("i0", 0, 0, 10, 1),
			func() []stepSpec {
				st := lonely("i0", 40*s, 0, 10, 4)
				for i := range st {
					st[i].ev[0].s.Observer = "c2"
				}
				return st
			}()),
			want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded}},
	})
	// max_ejection_percent: of ten ready instances, 10% lets outcomes
	// withdraw one; the others stay in rotation at half weight.
	both := func(ids ...string) []stepSpec {
		st := []stepSpec{{at: 0}}
		for i := range 4 {
			d := 60*s + time.Duration(i)*2*s
			step := stepSpec{at: d}
			for _, id := range ids {
				for _, c := range []string{"c1", "c2"} {
					e := outcome(id, d, 0, 10)
					e.s.Observer = c
					step.ev = append(step.ev, e)
				}
			}
			st = append(st, step)
		}
		return st
	}
	runRules(t, []ruleCase{
		{name: "max_ejection_percent withdraws the first", n: 10, steps: both("i0", "i1", "i2"), id: "i0",
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "max_ejection_percent keeps the second", n: 10, steps: both("i0", "i1", "i2"), id: "i1",
			want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}},
		{name: "max_ejection_percent 0 keeps every one", n: 10, policy: Policy{MaxEjectionPercent: -1},
			steps: both("i0", "i1", "i2"), id: "i0",
			want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}},
		{name: "max_ejection_percent does not hold back a probe withdrawal", n: 10,
			steps: seq(both("i0", "i1"), probeSteps("i1", 68*s, 2*s, F, F, F)), id: "i1",
			want: want{eligible: false, verdict: status.Unhealthy}},
	})
}

// TestRuleOutcomeReasons: the reason of an instance whose weight
// callers' outcomes lowered says whether their quorum is met. Met, the
// instance is only waiting out the run of failures that withdraws; the
// reason must not call the callers short of the quorum.
func TestRuleOutcomeReasons(t *testing.T) {
	// round has k callers report on i0 at d, the first f of them
	// failures.
	round := func(d time.Duration, k, f int) stepSpec {
		st := stepSpec{at: d}
		for i := range k {
			e := outcome("i0", d, 10, 0)
			if i < f {
				e = outcome("i0", d, 0, 10)
			}
			e.s.Observer = fmt.Sprintf("c%d", i)
			st.ev = append(st.ev, e)
		}
		return st
	}
	for _, tc := range []struct {
		name       string
		steps      []stepSpec
		has, hasnt string
	}{
		{"a quorum, twice", []stepSpec{{at: 0}, round(60*s, 2, 2), round(62*s, 2, 2)},
			"2 of 2 callers report failures, a quorum (2, and a third), not yet for long enough to withdraw", "short of the quorum"},
		{"one caller of two", []stepSpec{{at: 0}, round(60*s, 2, 1), round(62*s, 2, 1), round(64*s, 2, 1)},
			"1 of 2 callers report failures, short of the quorum (2, and a third)", "a quorum (2"},
		{"two callers of seven", []stepSpec{{at: 0}, round(60*s, 7, 2), round(62*s, 7, 2), round(64*s, 7, 2)},
			"2 of 7 callers report failures, short of the quorum (2, and a third)", "a quorum (2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := runRule(t, ruleCase{steps: tc.steps,
				want: want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}})
			reasons := strings.Join(m.inst("i0").Reasons, "; ")
			if !strings.Contains(reasons, tc.has) || strings.Contains(reasons, tc.hasnt) {
				t.Errorf("reasons %q; want %q and not %q", reasons, tc.has, tc.hasnt)
			}
		})
	}
}

// Rule 3b: probers that disagree degrade, they do not withdraw.
func TestRuleProbersDisagree(t *testing.T) {
	by := func(e ev, observer string) ev { e.s.Observer = observer; return e }
	runRules(t, []ruleCase{
		{name: "one refused, the other passed: degraded",
			steps: []stepSpec{{at: 3 * s, ev: []ev{by(probe("i0", 3*s, true), "n2")}}, {at: 4 * s, ev: []ev{hard("i0", 4*s)}}},
			want:  want{eligible: true, verdict: status.Degraded}},
		{name: "both refused: withdrawn",
			steps: []stepSpec{{at: 3 * s, ev: []ev{by(probe("i0", 3*s, true), "n2")}}, {at: 4 * s, ev: []ev{hard("i0", 4*s)}},
				{at: 5 * s, ev: []ev{by(hard("i0", 5*s), "n2")}}},
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "a pass older than one interval does not disagree",
			steps: []stepSpec{{at: 1 * s, ev: []ev{by(probe("i0", 1*s, true), "n2")}}, {at: 4 * s, ev: []ev{hard("i0", 4*s)}}},
			want:  want{eligible: false, verdict: status.Unhealthy}},
		{name: "one observer's own earlier pass does not disagree",
			steps: []stepSpec{{at: 3 * s, ev: []ev{probe("i0", 3*s, true)}}, {at: 4 * s, ev: []ev{hard("i0", 4*s)}}},
			want:  want{eligible: false, verdict: status.Unhealthy}},
		{name: "a pending pass of the other disagrees with a refusal",
			steps: []stepSpec{{at: 10 * s, ev: []ev{hard("i0", 10*s), pending(by(probe("i0", 9900*ms, true), "n2"))}}},
			want:  want{eligible: true, verdict: status.Degraded}},
		{name: "a pass behind the watermark still disagrees",
			steps: []stepSpec{{at: 10 * s, ev: []ev{hard("i0", 10*s), pending(by(probe("i0", 9900*ms, true), "n2"))}},
				{at: 11 * s, ev: []ev{by(probe("i0", 9900*ms, true), "n2")}}},
			want: want{eligible: true, verdict: status.Degraded}},
		{name: "a pending pass older than one interval does not disagree",
			steps: []stepSpec{{at: 10 * s, ev: []ev{hard("i0", 10*s), pending(by(probe("i0", 7900*ms, true), "n2"))}}},
			want:  want{eligible: false, verdict: status.Unhealthy}},
		{name: "disagreement does not bring a withdrawn instance back",
			steps: []stepSpec{{at: 10 * s, ev: []ev{hard("i0", 10*s), by(hard("i0", 10*s), "n2")}},
				{at: 13 * s, ev: []ev{probe("i0", 13*s, true)}}},
			want: want{eligible: false, verdict: status.Unhealthy}},
		{name: "consecutive failures of one, interleaved with passes of the other, do not withdraw",
			steps: []stepSpec{{at: 0, ev: []ev{probe("i0", 0, false)}}, {at: 1 * s, ev: []ev{by(probe("i0", 1*s, true), "n2")}},
				{at: 2 * s, ev: []ev{probe("i0", 2*s, false)}}, {at: 3 * s, ev: []ev{by(probe("i0", 3*s, true), "n2")}},
				{at: 4 * s, ev: []ev{probe("i0", 4*s, false)}}},
			want: want{eligible: true, verdict: status.Healthy}},
	})
}

// pending marks a sample as not yet consumable: held back for ordering,
// but already its observer's latest.
func pending(e ev) ev { e.s.Pending = true; return e }

// Rule 7.
func TestRuleLease(t *testing.T) {
	lease := func(expiry time.Duration) func(*sim) {
		return func(m *sim) {
			m.set("i0", func(in *Instance) { in.LeaseExpiry, in.LeaseDeadline = at(expiry), at(expiry) })
		}
	}
	withLease := func(expiry time.Duration, rest ...stepSpec) []stepSpec {
		return append([]stepSpec{{at: 0, do: lease(expiry)}}, rest...)
	}
	none := Policy{Readiness: ReadinessNone}
	runRules(t, []ruleCase{
		{name: "live lease", steps: withLease(30 * s),
			want: want{eligible: true, verdict: status.Unknown}},
		{name: "expired lease alone is silence", steps: withLease(30*s, stepSpec{at: 30 * s}),
			want: want{eligible: true, verdict: status.Unknown, flags: status.LeaseExpired}},
		{name: "one probe failure alone does not withdraw", steps: withLease(300*s, stepSpec{at: 31 * s, ev: []ev{probe("i0", 31*s, false)}}),
			want: want{eligible: true, verdict: status.Healthy}},
		{name: "expired lease corroborated by a probe failure withdraws",
			steps: withLease(30*s, stepSpec{at: 31 * s, ev: []ev{probe("i0", 31*s, false)}}),
			want:  want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "one caller's outcomes do not corroborate",
			steps: withLease(30*s, stepSpec{at: 31 * s, ev: []ev{outcome("i0", 31*s, 1, 9)}}),
			want:  want{eligible: true, verdict: status.Degraded, flags: status.LeaseExpired | status.OutcomeDegraded}},
		{name: "expired lease corroborated by a quorum of callers withdraws",
			steps: withLease(30*s, stepSpec{at: 31 * s, ev: []ev{outcome("i0", 31*s, 1, 9), func() ev {
				e := outcome("i0", 31*s, 1, 9)
				e.s.Observer = "c2"
				return e
			}()}}),
			want: want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "a stale failure does not corroborate",
			steps: withLease(30*s, stepSpec{at: 20 * s, ev: []ev{probe("i0", 20*s, false)}}, stepSpec{at: 31 * s}),
			want:  want{eligible: true, verdict: status.Unknown, flags: status.LeaseExpired}},
		{name: "a probe service hard-expires too", steps: withLease(30*s, stepSpec{at: 150 * s}),
			want: want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "passing probes do not hold off the hard expiry",
			steps: withLease(30*s, probeSteps("i0", 140*s, 2*s, T, T, T, T, T, T)...),
			want:  want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "a self-report service hard-expires too", policy: Policy{Readiness: ReadinessSelf},
			steps: withLease(30*s, stepSpec{at: 150 * s, do: func(m *sim) {
				m.set("i0", func(in *Instance) { in.Report = &Report{Ready: true, At: at(0)} })
			}}),
			want: want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "readiness none: before hard expiry (deadline + 4×TTL)", policy: none, steps: withLease(30*s, stepSpec{at: 149 * s}),
			want: want{eligible: true, verdict: status.Unknown, flags: status.LeaseExpired}},
		{name: "readiness none: at hard expiry", policy: none, steps: withLease(30*s, stepSpec{at: 150 * s}),
			want: want{eligible: false, verdict: status.Unhealthy, flags: status.LeaseExpired}},
		{name: "readiness none: renewed lease comes back", policy: none,
			steps: withLease(30*s, stepSpec{at: 150 * s}, stepSpec{at: 151 * s, do: lease(200 * s)}),
			want:  want{eligible: true, verdict: status.Unknown}},
	})
}

// flapCycle withdraws i0 with a hard failure at from and re-admits it
// with six successes over 10s; it returns the steps and the end.
func flapCycle(from time.Duration) ([]stepSpec, time.Duration) {
	st := one(from, hard("i0", from))
	st = append(st, probeSteps("i0", from+2*s, 2*s, T, T, T, T, T, T)...)
	return st, from + 12*s
}

// Rule 8.
func TestRuleFlapQuarantine(t *testing.T) {
	p := Policy{ShrinkCap: 1}
	steps := one(0)
	end := time.Duration(0)
	for range 2 {
		var c []stepSpec
		c, end = flapCycle(end + 2*s)
		steps = append(steps, c...)
	}
	// Four transitions so far (two withdrawals, two admissions): not yet.
	m := runRule(t, ruleCase{name: "four transitions", policy: p, steps: steps, want: want{eligible: true, verdict: status.Healthy}})
	// The fifth quarantines.
	end += 2 * s
	m.step(end, hard("i0", end))
	want{eligible: false, verdict: status.Quarantined}.check(t, m.inst("i0"))
	if len(m.res.Events) != 1 || m.res.Events[0].Kind != EventQuarantined || m.res.Events[0].ID != "i0" {
		t.Errorf("events = %+v; want one EventQuarantined for i0", m.res.Events)
	}
	q := end
	// Healthy evidence does not shorten the quarantine (1m).
	for d := q + 2*s; d < q+time.Minute; d += 2 * s {
		m.step(d, probe("i0", d, true))
		want{eligible: false, verdict: status.Quarantined}.check(t, m.inst("i0"))
	}
	m.step(q+time.Minute, probe("i0", q+time.Minute, true))
	want{eligible: true, verdict: status.Healthy, flags: status.SlowStart}.check(t, m.inst("i0"))

	// A second bout of flapping doubles the quarantine: 2m.
	end = q + time.Minute
	for range 2 {
		var c []stepSpec
		c, end = flapCycle(end + 2*s)
		for _, st := range c {
			m.step(st.at, st.ev...)
		}
	}
	// That was four more transitions plus the re-admission at q+1m: five.
	q2 := m.st.Instance("i0").QuarantineUntil.Time()
	if got := m.inst("i0").Verdict; got != status.Quarantined {
		t.Fatalf("second bout: verdict %v; want quarantined", got)
	}
	if d := q2.Sub(at(end)); d != 2*time.Minute {
		t.Errorf("second quarantine lasts %v; want 2m", d)
	}
	if lvl := m.st.Instance("i0").QuarantineLevel; lvl != 2 {
		t.Errorf("level %d; want 2", lvl)
	}

	t.Run("capped at QuarantineMax", func(t *testing.T) {
		st := InstanceState{ID: "i0", Incarnation: 1, Seen: true, Lifecycle: Ready, HealthEligible: true, Published: true, QuarantineLevel: 9,
			Recent: &Recent{Flaps: []time.Time{at(0), at(1 * s), at(2 * s), at(3 * s)}}}
		prev := State{Instances: []InstanceState{st}}
		res, next := Evaluate(Policy{ShrinkCap: 1}, fleet(4), map[string][]Sample{"i0": {hard("i0", 4*s).s}}, prev, at(4*s))
		if got := next.Instance("i0").QuarantineUntil.Time().Sub(at(4 * s)); got != 30*time.Minute {
			t.Errorf("quarantine %v; want 30m", got)
		}
		if res.Instances[0].Verdict != status.Quarantined {
			t.Errorf("verdict %v", res.Instances[0].Verdict)
		}
	})
	t.Run("a new incarnation starts fresh", func(t *testing.T) {
		m.set("i0", func(in *Instance) { in.Incarnation = 2 })
		m.step(end + 2*s)
		want{eligible: true, verdict: status.Unknown}.check(t, m.inst("i0"))
	})
}

// Rule 9.
func TestRuleSlowStart(t *testing.T) {
	cases := []struct {
		base       int
		at         time.Duration
		slowStart  bool
		depFactor  bool
		wantWeight int
	}{
		{base: 100, at: 0, wantWeight: 10, slowStart: true},
		{base: 100, at: 15 * s, wantWeight: 55, slowStart: true},
		{base: 100, at: 30 * s, wantWeight: 100},
		{base: 100, at: time.Hour, wantWeight: 100},
		{base: 0, at: 0, wantWeight: 10, slowStart: true}, // default base 100
		{base: 1, at: 0, wantWeight: 1, slowStart: true},
		{base: 4, at: 0, wantWeight: 1, slowStart: true},
		{base: 65535, at: 0, wantWeight: 6554, slowStart: true},
		{base: 100, at: 0, wantWeight: 5, slowStart: true, depFactor: true},
		{base: 1, at: 0, wantWeight: 1, slowStart: true, depFactor: true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("base %d at %v dep %v", tc.base, tc.at, tc.depFactor), func(t *testing.T) {
			ins := fleet(1)
			ins[0].BaseWeight = tc.base
			if tc.depFactor {
				ins[0].Report = &Report{Ready: true, Dependencies: map[string]string{"c": "failed"}, At: t0}
			}
			m := newSim(t, Policy{Dependencies: map[string]bool{"c": true}}, ins...)
			m.step(0)
			if tc.at != 0 {
				m.step(tc.at)
			}
			r := m.inst("i0")
			if r.Weight != tc.wantWeight || r.Flags.Has(status.SlowStart) != tc.slowStart {
				t.Errorf("base %d at %v: weight %d flags %v; want %d slow_start=%v", tc.base, tc.at, r.Weight, r.Flags, tc.wantWeight, tc.slowStart)
			}
		})
	}
	t.Run("re-admission starts slow start again", func(t *testing.T) {
		m := runRule(t, ruleCase{steps: seq(one(0), one(60*s, hard("i0", 60*s)), probeSteps("i0", 62*s, 2*s, T, T, T, T, T, T)),
			want: want{eligible: true, verdict: status.Healthy, flags: status.SlowStart, weight: 10}})
		m.step(72*s + 15*s)
		want{eligible: true, verdict: status.Unknown, weight: 55}.check(t, m.inst("i0"))
	})
}

// Rule 10.
func TestRuleShrinkCap(t *testing.T) {
	// Nine instances; the window opening at 10s has Base 9, so the cap
	// is ⌊0.33 × 9⌋ = 2 per window. Hard failures go first, then the
	// oldest failure, then the id. (MinHealthyFraction 0.3 keeps the
	// guard out: 4 of 9 stay healthy.)
	m := newSim(t, Policy{MinHealthyFraction: 0.3}, fleet(9)...)
	deferred := want{eligible: true, verdict: status.Unhealthy, flags: status.WithdrawalDeferred}
	gone := want{eligible: false, verdict: status.Unhealthy}
	m.step(0)
	m.step(10*s, hard("i2", 10*s), hard("i0", 10*s),
		probe("i3", 7*s, false), probe("i3", 8*s, false), probe("i3", 10*s, false))
	gone.check(t, m.inst("i0"))
	gone.check(t, m.inst("i2"))
	deferred.check(t, m.inst("i3"))
	want{eligible: true, verdict: status.Unknown}.check(t, m.inst("i4"))
	m.step(12*s, probe("i1", 11*s, false), probe("i1", 11*s+s/2, false), probe("i1", 12*s, false))
	m.step(14*s, hard("i5", 14*s))
	m.step(19 * s) // same window: all three wait
	for _, id := range []string{"i1", "i3", "i5"} {
		deferred.check(t, m.inst(id))
	}
	if m.res.HealthDisregarded {
		t.Fatalf("4 of 9 healthy with fraction 0.3: guard fired")
	}
	m.step(20 * s) // new window, Base 7: ⌊2.31⌋ = 2: the hard one, then the oldest failure
	gone.check(t, m.inst("i5"))
	gone.check(t, m.inst("i3"))
	deferred.check(t, m.inst("i1"))
	m.step(30 * s) // Base 5: ⌊1.65⌋ = 1
	gone.check(t, m.inst("i1"))

	t.Run("always at least one", func(t *testing.T) {
		m := newSim(t, Policy{}, fleet(2)...)
		m.step(0)
		m.step(10*s, hard("i0", 10*s))
		want{eligible: false, verdict: status.Unhealthy}.check(t, m.inst("i0"))
	})
	t.Run("net loss: an instance that joins makes room", func(t *testing.T) {
		// Six published at 10s: the floor is 6 − ⌊0.33 × 6⌋ = 5.
		m := newSim(t, Policy{MinHealthyFraction: 0.3}, fleet(6)...)
		m.step(0)
		m.step(10*s, hard("i0", 10*s))
		want{eligible: false, verdict: status.Unhealthy}.check(t, m.inst("i0"))
		m.step(11*s, hard("i1", 11*s))
		want{eligible: true, verdict: status.Unhealthy, flags: status.WithdrawalDeferred}.check(t, m.inst("i1"))
		// A seventh instance registers: the view is back at 6, so i1 may
		// go, leaving 5, the floor.
		m.ins = append(m.ins, fleet(7)[6])
		m.step(12 * s)
		want{eligible: false, verdict: status.Unhealthy}.check(t, m.inst("i1"))
		m.step(13*s, hard("i2", 13*s))
		want{eligible: true, verdict: status.Unhealthy, flags: status.WithdrawalDeferred}.check(t, m.inst("i2"))
	})
	t.Run("hard expiry is not capped", func(t *testing.T) {
		// Three of six expire in one window whose floor is 5: the
		// cap would let one go.
		m := newSim(t, Policy{LeaseTTL: 10 * s, HardExpiry: 20 * s, MinHealthyFraction: 0.3}, fleet(6)...)
		for _, id := range []string{"i0", "i1", "i2"} {
			m.set(id, func(in *Instance) { in.LeaseExpiry, in.LeaseDeadline = at(5*s), at(5*s) })
		}
		m.step(0)
		m.step(10 * s)
		m.step(16 * s) // past 5s + (20s − 10s): all three, in one window
		for _, id := range []string{"i0", "i1", "i2"} {
			if r := m.inst(id); r.Eligible || r.Flags.Has(status.WithdrawalDeferred) {
				t.Errorf("%s past its hard expiry: %+v; want withdrawn, not deferred", id, r)
			}
		}
	})
	t.Run("drain is not capped", func(t *testing.T) {
		m := newSim(t, Policy{}, fleet(4)...)
		m.step(0)
		for _, id := range []string{"i0", "i1", "i2"} {
			m.set(id, func(in *Instance) { in.Lifecycle = Draining })
		}
		m.step(10 * s)
		for _, id := range []string{"i0", "i1", "i2"} {
			want{eligible: false, verdict: status.Unknown}.check(t, m.inst(id))
		}
	})
	t.Run("leaving the guard shrinks at the cap", func(t *testing.T) {
		m := newSim(t, Policy{}, fleet(6)...)
		m.step(0)
		// 4 of 6 fail: 2 < 3, the guard serves all six.
		m.step(10*s, hard("i0", 10*s), hard("i1", 10*s), hard("i2", 10*s), hard("i3", 10*s))
		if !m.res.HealthDisregarded {
			t.Fatal("guard did not fire")
		}
		// i3 recovers: 3 of 6, guard off; the window (Base 6) allows 1.
		for d := 12 * s; d <= 22*s; d += 2 * s {
			m.step(d, probe("i3", d, true))
		}
		if m.res.HealthDisregarded {
			t.Fatal("guard still on")
		}
		n := 0
		for _, r := range m.res.Instances {
			if r.Eligible {
				n++
			}
		}
		if n != 5 {
			t.Errorf("%d eligible after leaving the guard; want 5 (one withdrawal per window)", n)
		}
	})
}

// Rule 11.
func TestRuleGuard(t *testing.T) {
	ins := fleet(5)
	for i, z := range []string{"z1", "z1", "z2", "z2", "z2"} {
		ins[i].Zone = z
	}
	ins[4].Lifecycle = Draining
	m := newSim(t, Policy{ShrinkCap: 1}, ins...)
	m.step(0)
	m.step(10*s, hard("i0", 10*s), hard("i1", 10*s))
	// 2 of 4 ready healthy: the service is at the fraction, z1 below it.
	if m.res.HealthDisregarded {
		t.Errorf("2 of 4 healthy: HealthDisregarded")
	}
	wantZones := []ZoneResult{{Zone: "z1", Ready: 2, Healthy: 0, BelowGuard: true}, {Zone: "z2", Ready: 2, Healthy: 2}}
	if !slices.Equal(m.res.Zones, wantZones) {
		t.Errorf("zones %+v; want %+v", m.res.Zones, wantZones)
	}
	want{eligible: false, verdict: status.Unhealthy}.check(t, m.inst("i0"))

	m.step(20*s, hard("i2", 20*s))
	if !m.res.HealthDisregarded {
		t.Fatalf("1 of 4 healthy: health not disregarded")
	}
	if len(m.res.Events) != 1 || m.res.Events[0].Kind != EventHealthDisregarded {
		t.Errorf("events %+v; want EventHealthDisregarded", m.res.Events)
	}
	for _, id := range []string{"i0", "i1", "i2"} {
		want{eligible: true, verdict: status.Unhealthy, flags: status.HealthDisregarded}.check(t, m.inst(id))
	}
	if r := m.inst("i3"); !r.Eligible || r.Flags.Has(status.HealthDisregarded) {
		t.Errorf("healthy i3: %+v; want eligible without health_disregarded", r)
	}
	want{eligible: false, verdict: status.Unknown}.check(t, m.inst("i4"))
	var toEligible []string
	for _, tr := range m.res.Transitions {
		if tr.To.Eligible && !tr.From.Eligible {
			toEligible = append(toEligible, tr.ID)
			if !strings.HasPrefix(tr.Reason, "health disregarded") {
				t.Errorf("transition reason %q; want health disregarded", tr.Reason)
			}
		}
	}
	if !slices.Equal(toEligible, []string{"i0", "i1"}) {
		t.Errorf("transitions to eligible %v; want [i0 i1]", toEligible)
	}

}

// TestGuardRestoredEvent checks the event when the guard lifts.
func TestGuardRestoredEvent(t *testing.T) {
	m := newSim(t, Policy{ShrinkCap: 1}, fleet(2)...)
	m.step(0)
	m.step(1*s, hard("i0", 1*s), hard("i1", 1*s))
	if !m.res.HealthDisregarded || len(m.res.Events) != 1 || m.res.Events[0].Kind != EventHealthDisregarded {
		t.Fatalf("disregarded=%v events=%+v", m.res.HealthDisregarded, m.res.Events)
	}
	var kinds []EventKind
	for d := 3 * s; d <= 13*s; d += 2 * s {
		m.step(d, probe("i0", d, true))
		for _, e := range m.res.Events {
			kinds = append(kinds, e.Kind)
		}
	}
	if !slices.Equal(kinds, []EventKind{EventHealthRestored}) || m.res.HealthDisregarded {
		t.Errorf("events %v disregarded=%v; want [restored] and false", kinds, m.res.HealthDisregarded)
	}
}

func TestPolicyDefaultsAndValidate(t *testing.T) {
	p := Policy{}.WithDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if p.Freshness != 6*s || p.HardExpiry != 150*s || p.WithdrawAfter != 3 || p.AdmitAfter != 5 {
		t.Errorf("defaults %+v", p)
	}
	for _, bad := range []Policy{
		{WithdrawAfter: 5, AdmitAfter: 5},
		{MinHealthyFraction: 1.5},
		{ShrinkCap: -1},
		{FailureThreshold: 1},
		{QuarantineBase: time.Hour},
		{Readiness: 7},
	} {
		if err := bad.WithDefaults().Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
}

func TestDiscardsUnattributable(t *testing.T) {
	m := newSim(t, Policy{}, fleet(4)...)
	bad := Sample{Class: ClassProbe, Incarnation: 7, At: at(0)}
	m.res, m.st = Evaluate(m.p, m.ins, map[string][]Sample{
		"i0":    {bad, bad, bad},
		"ghost": {{Class: ClassProbe, At: at(0)}},
		"i1":    {{Class: ClassProbe, At: at(5 * s)}}, // from the future
	}, m.st, at(0))
	if m.res.Discarded != 5 {
		t.Errorf("discarded %d; want 5", m.res.Discarded)
	}
	want{eligible: true, verdict: status.Unknown}.check(t, m.inst("i0"))
}

// TestNegativeMeansNone: a service definition's min_healthy_fraction: 0,
// admit_min: 0 and slow_start: 0 reach the evaluator as negative values
// (zero means "the default" here) and switch the rule off.
func TestNegativeMeansNone(t *testing.T) {
	t.Run("min_healthy_fraction", func(t *testing.T) {
		m := newSim(t, Policy{MinHealthyFraction: -1, ShrinkCap: 1}, fleet(4)...)
		m.step(0)
		m.step(10*s, hard("i0", 10*s), hard("i1", 10*s), hard("i2", 10*s), hard("i3", 10*s))
		if m.res.HealthDisregarded {
			t.Fatal("health disregarded with the guard off")
		}
		want{eligible: false, verdict: status.Unhealthy}.check(t, m.inst("i0"))
	})
	t.Run("admit_min", func(t *testing.T) {
		runRule(t, ruleCase{policy: Policy{AdmitMin: -1},
			steps: seq(probeSteps("i0", 0, 2*s, F, F, F), probeSteps("i0", 6*s, 100*time.Millisecond, T, T, T, T, T)),
			want:  want{eligible: true, verdict: status.Healthy}})
	})
	t.Run("slow_start", func(t *testing.T) {
		m := newSim(t, Policy{SlowStart: -1}, fleet(1)...)
		m.step(0)
		if r := m.inst("i0"); r.Weight != 100 || r.Flags.Has(status.SlowStart) {
			t.Fatalf("new instance with slow start off: weight %d flags %v; want 100 without slow_start", r.Weight, r.Flags)
		}
	})
	if err := (Policy{MinHealthyFraction: -1, AdmitMin: -1, SlowStart: -1}).WithDefaults().Validate(); err != nil {
		t.Fatalf("negative (none) values refused: %v", err)
	}
}

// TestOutcomeDegradationEvidence: an instance its callers' failures
// degrade names their outcome as its evidence (and in its transition's
// audit record), even when a passing probe spoke last; a probe
// withdrawal's trigger stays the evidence whatever callers say.
func TestOutcomeDegradationEvidence(t *testing.T) {
	failing := func(id string, d time.Duration, observer string) ev {
		e := outcome(id, d, 0, 10)
		e.s.Observer = observer
		return e
	}
	m := newSim(t, Policy{ShrinkCap: 1}, fleet(6)...)
	m.step(0, probe("i0", 0, true))
	// Past slow start, two callers fail i0 (a quorum, not yet long
	// enough to withdraw); a passing probe comes after them.
	m.step(60*s, failing("i0", 59900*ms, "c1"), failing("i0", 59900*ms, "c2"), probe("i0", 60*s, true))
	r := m.inst("i0")
	want{eligible: true, verdict: status.Degraded, flags: status.OutcomeDegraded, weight: 50}.check(t, r)
	if r.Evidence.Class != ClassOutcome {
		t.Errorf("degraded by callers, evidence %+v; want the outcome class", r.Evidence)
	}
	found := false
	for _, tr := range m.res.Transitions {
		if tr.ID == "i0" {
			found = true
			if tr.Evidence.Class != ClassOutcome {
				t.Errorf("transition %v: evidence %+v; want the outcome class", tr, tr.Evidence)
			}
		}
	}
	if !found {
		t.Errorf("no transition of i0 in %v", m.res.Transitions)
	}

	// A refused probe withdraws i1 while callers fail it too: the
	// probe's trigger stays the evidence.
	m.step(62*s, failing("i1", 61900*ms, "c1"), failing("i1", 61900*ms, "c2"), hard("i1", 61800*ms))
	r = m.inst("i1")
	want{eligible: false, verdict: status.Unhealthy}.check(t, r)
	if r.Evidence.Class != ClassProbe {
		t.Errorf("withdrawn by a refused probe, evidence %+v; want the probe class", r.Evidence)
	}

	// Callers fail i2 for three rounds; in the third a refused probe
	// comes just before their reports: both classes withdraw at once,
	// and the probe's trigger, the earlier, is the evidence.
	m.step(64*s, failing("i2", 63900*ms, "c1"), failing("i2", 63900*ms, "c2"))
	m.step(66*s, failing("i2", 65900*ms, "c1"), failing("i2", 65900*ms, "c2"))
	m.step(68*s, failing("i2", 67900*ms, "c1"), failing("i2", 67900*ms, "c2"), hard("i2", 67800*ms))
	r = m.inst("i2")
	want{eligible: false, verdict: status.Unhealthy}.check(t, r)
	if r.Evidence.Class != ClassProbe || len(r.Reasons) < 2 {
		t.Errorf("withdrawn by both classes, reasons %q, evidence %+v; want both reasons and the probe's (earlier) trigger", r.Reasons, r.Evidence)
	}
}
