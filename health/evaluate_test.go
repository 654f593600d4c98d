package health

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

const commits = "cairn_health_commits_total"

// wantHealth checks the committed verdict of in.
func (h *harness) wantHealth(in wire.Instance, verdict string, eligible bool) wire.Health {
	h.t.Helper()
	got := h.instance(in).Health
	if got == nil {
		h.t.Fatalf("%s has no committed health, want %s eligible=%t", in.ID, verdict, eligible)
	}
	if got.Incarnation != in.Incarnation || got.Verdict.String() != verdict || got.Eligible != eligible {
		h.t.Fatalf("%s: committed %+v, want incarnation %d, %s, eligible=%t", in.ID, *got, in.Incarnation, verdict, eligible)
	}
	return *got
}

// wantEntry checks in's entry in the current table.
func (h *harness) wantEntry(in wire.Instance, verdict status.Verdict, eligible bool) status.Entry {
	h.t.Helper()
	e := h.entry(in)
	if e.Verdict != verdict || e.Flags.Has(status.Eligible) != eligible || (e.Weight > 0) != eligible {
		h.t.Fatalf("%s: table entry %+v (flags %v), want %v, eligible=%t", in.ID, e, e.Flags, verdict, eligible)
	}
	return e
}

// TestWithdrawAndReadmit follows one instance through docs/health.md §5's
// first timeline: a refused connection withdraws it at once, and only
// admit_after successes spanning admit_min re-admit it, at a rising
// weight that takes no commit.
func TestWithdrawAndReadmit(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 3)
	a := fleet[0]
	key := svc.Key()
	t0 := h.clk.Now()

	h.tick(0)
	for _, in := range fleet {
		got := h.wantHealth(in, "unknown", true)
		if !got.EligibleSince.Equal(t0) || !got.At.Equal(t0) {
			t.Errorf("%s: first verdict eligible since %v at %v, want both %v", in.ID, got.EligibleSince, got.At, t0)
		}
		h.wantEntry(in, status.Unknown, true)
	}
	if got := h.metric(commits); got != 1 {
		t.Fatalf("%v commits after the first round, want 1 (every first verdict in one batch)", got)
	}
	if got := h.metric("cairn_health_transitions_total", "to", "eligible"); got != 3 {
		t.Errorf("transitions{to=eligible} = %v after the first round, want 3", got)
	}

	// t=0: the probe is refused.
	failedAt := h.clk.Now()
	h.probe("n1", a, false, true)
	h.tick(2 * time.Second)
	got := h.wantHealth(a, "unhealthy", false)
	wantFailing := []wire.FailingClass{{Class: "probe", Since: failedAt, Hard: true, Why: "hard failure (connection refused)"}}
	if !slices.Equal(got.Failing, wantFailing) || got.HealthEligible ||
		got.Evidence == nil || *got.Evidence != (wire.Evidence{Class: "probe", Observer: "n1", At: failedAt}) ||
		len(got.Reasons) == 0 || got.Reasons[0] != "probe failing: hard failure (connection refused)" {
		t.Errorf("withdrawn health %+v (evidence %+v), want the probe class failing hard since %v on n1's evidence", got, got.Evidence, failedAt)
	}
	h.wantEntry(a, status.Unhealthy, false)
	evs := events(h.st.Store, key, wire.EventEligibility, a.ID)
	last := evs[len(evs)-1]
	if last.From != "eligible/unknown" || last.To != "withdrawn/unhealthy" || last.Incarnation != a.Incarnation ||
		last.Reason != "probe failing: hard failure (connection refused)" || last.Actor != "evaluator@n1" ||
		last.Evidence == nil || *last.Evidence != *got.Evidence || !last.At.Equal(h.clk.Now()) {
		t.Errorf("audit event %+v (evidence %+v), want eligible/unknown -> withdrawn/unhealthy by evaluator@n1 with the probe as evidence", last, last.Evidence)
	}
	if got := h.metric(commits); got != 2 {
		t.Errorf("%v commits, want 2", got)
	}
	if got := h.metric("cairn_health_transitions_total", "to", "withdrawn"); got != 1 {
		t.Errorf("transitions{to=withdrawn} = %v, want 1", got)
	}

	// Successes every 2s: the 5th spans only 8s, the 6th re-admits.
	for i := 1; i <= 6; i++ {
		h.probe("n1", a, true, false)
		h.tick(2 * time.Second)
		if i < 6 {
			h.wantHealth(a, "unhealthy", false)
			h.wantEntry(a, status.Unhealthy, false)
			if got := h.metric(commits); got != 2 {
				t.Fatalf("success %d: %v commits, want still 2 (nothing a reader acts on changed)", i, got)
			}
		}
	}
	readmitted := h.clk.Now()
	got = h.wantHealth(a, "healthy", true)
	if !got.EligibleSince.Equal(readmitted) || len(got.Failing) != 0 || got.Flags&status.SlowStart != 0 {
		t.Errorf("re-admitted health %+v, want eligible since %v, nothing failing, no slow-start flag committed", got, readmitted)
	}
	e := h.wantEntry(a, status.Healthy, true)
	if e.Weight != 10 || !e.Flags.Has(status.SlowStart) || e.BaseWeight != 100 {
		t.Errorf("re-admitted entry %+v (flags %v), want weight 10 of 100 in slow start", e, e.Flags)
	}
	evs = events(h.st.Store, key, wire.EventEligibility, a.ID)
	if last := evs[len(evs)-1]; last.From != "withdrawn/unhealthy" || last.To != "eligible/healthy" {
		t.Errorf("audit event %+v, want withdrawn/unhealthy -> eligible/healthy", last)
	}
	if got := h.metric(commits); got != 3 {
		t.Errorf("%v commits after re-admission, want 3", got)
	}

	// Slow start: the weight rises at every rebuild, with no commit, and
	// nothing else moves the store either.
	rev := h.st.Revision()
	prev := e.Weight
	for age := 3 * time.Second; age <= 33*time.Second; age += 3 * time.Second {
		h.probe("n1", a, true, false)
		h.tick(3 * time.Second)
		e := h.wantEntry(a, status.Healthy, true)
		if age < 30*time.Second {
			if e.Weight <= prev || !e.Flags.Has(status.SlowStart) {
				t.Fatalf("%v after re-admission: weight %d (was %d), flags %v; want rising, in slow start", age, e.Weight, prev, e.Flags)
			}
		} else if e.Weight != 100 || e.Flags.Has(status.SlowStart) {
			t.Fatalf("%v after re-admission: weight %d, flags %v; want the full 100, slow start over", age, e.Weight, e.Flags)
		}
		prev = e.Weight
	}
	if got := h.metric(commits); got != 3 {
		t.Errorf("%v commits after slow start, want still 3", got)
	}
	if got := h.st.Revision(); got != rev {
		t.Errorf("store revision moved from %d to %d while nothing changed", rev, got)
	}
	if got := h.metric("cairn_health_evaluations_total"); got != 19 {
		t.Errorf("%v evaluations, want one per round (19)", got)
	}
}

// TestDrainLeavesAtOnce: a drained instance leaves the next table, with
// no shrink cap, and leaves the table altogether once the store
// terminates it.
func TestDrainLeavesAtOnce(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "2" // not a test of budgets: two of three drain
	h.apply(svc)
	fleet := h.fleet(svc, "a", 3)
	h.tick(0)
	for _, in := range fleet[:2] {
		if _, err := h.st.Drain(h.t.Context(), "admin", in.Key(), in.Incarnation); err != nil {
			t.Fatal(err)
		}
	}
	h.tick(time.Second)
	for _, in := range fleet[:2] {
		e := h.wantEntry(in, status.Unknown, false)
		if e.Lifecycle != status.Draining || e.Flags != 0 {
			t.Errorf("%s: entry %+v (flags %v), want draining and no flags", in.ID, e, e.Flags)
		}
		got := h.wantHealth(in, "unknown", false)
		if len(got.Reasons) == 0 || got.Reasons[0] != "lifecycle draining" {
			t.Errorf("%s: reasons %q, want lifecycle draining first", in.ID, got.Reasons)
		}
	}
	h.wantEntry(fleet[2], status.Unknown, true)

	// The store terminates them after the drain window (30s by default).
	h.clk.Advance(31 * time.Second)
	for _, in := range fleet[:2] {
		waitFor(t, func() error {
			if got := h.instance(in); got.Lifecycle != status.Terminated {
				return fmt.Errorf("%s is %s, want terminated", in.ID, got.Lifecycle)
			}
			return nil
		})
	}
	h.tick(0)
	for _, in := range fleet[:2] {
		if e, ok := h.n.pub.Status(in.Key().String(), in.Incarnation); ok {
			t.Errorf("terminated %s still has an entry: %+v", in.ID, e)
		}
	}
	h.wantEntry(fleet[2], status.Unknown, true)
}

// TestHealthDisregarded: with 3 of 4 ready instances failing, the service
// is below its minimum healthy fraction: every instance stays published,
// the failing ones flagged, an event and a gauge say so; when they
// recover, health is restored.
func TestHealthDisregarded(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "d", 4)
	key := svc.Key()
	h.tick(0)
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(2 * time.Second)
	for _, in := range fleet[:3] {
		got := h.wantHealth(in, "unhealthy", true)
		if !status.Flags(got.Flags).Has(status.HealthDisregarded) || got.HealthEligible {
			t.Errorf("%s: committed %+v, want health_disregarded set, not health-eligible", in.ID, got)
		}
		e := h.wantEntry(in, status.Unhealthy, true)
		if !e.Flags.Has(status.HealthDisregarded) {
			t.Errorf("%s: entry flags %v, want health_disregarded", in.ID, e.Flags)
		}
	}
	if e := h.wantEntry(fleet[3], status.Unknown, true); e.Flags.Has(status.HealthDisregarded) {
		t.Errorf("the healthy instance is flagged: %v", e.Flags)
	}
	evs := events(h.st.Store, key, wire.EventHealthDisregarded, "")
	if len(evs) != 1 || evs[0].Reason != "1 of 4 ready instances healthy" || evs[0].Actor != "evaluator@n1" {
		t.Fatalf("health_disregarded events %+v, want one saying 1 of 4 ready instances healthy", evs)
	}
	if g := h.metric("cairn_health_disregarded_services"); g != 1 {
		t.Errorf("cairn_health_disregarded_services = %v, want 1", g)
	}

	for range 6 {
		for _, in := range fleet[:3] {
			h.probe("n1", in, true, false)
		}
		h.tick(2 * time.Second)
	}
	for _, in := range fleet[:3] {
		if e := h.wantEntry(in, status.Healthy, true); e.Flags.Has(status.HealthDisregarded) {
			t.Errorf("%s is still flagged after recovery: %v", in.ID, e.Flags)
		}
	}
	evs = events(h.st.Store, key, wire.EventHealthRestored, "")
	if len(evs) != 1 || evs[0].Reason != "4 of 4 ready instances healthy" {
		t.Errorf("health_restored events %+v, want one saying 4 of 4 ready instances healthy", evs)
	}
	if g := h.metric("cairn_health_disregarded_services"); g != 0 {
		t.Errorf("cairn_health_disregarded_services = %v after recovery, want 0", g)
	}
}

// TestSelfReport: a self-report saying not ready, or a failed dependency
// of the instance's own, withdraws at once on the report's evidence, and
// a report saying ready re-admits through the hysteresis: admit_after (5)
// evaluations that see it ready, spanning admit_min (10s).
func TestSelfReport(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := selfService("shop", "pay")
	h.apply(svc)
	fleet := h.fleet(svc, "s", 3)
	s0 := fleet[0]
	h.tick(0)
	report := func(rep wire.Report) {
		t.Helper()
		if _, err := h.st.Report(h.t.Context(), "instance:"+s0.ID, s0.Key(), s0.Incarnation, rep); err != nil {
			t.Fatal(err)
		}
	}

	report(wire.Report{Ready: false})
	reportedAt := h.clk.Now()
	h.tick(time.Second)
	got := h.wantHealth(s0, "unhealthy", false)
	if len(got.Reasons) == 0 || got.Reasons[0] != "self-report: not ready" ||
		got.Evidence == nil || *got.Evidence != (wire.Evidence{Class: "report", Observer: s0.ID, At: reportedAt}) {
		t.Errorf("health %+v (evidence %+v), want withdrawn on the self-report", got, got.Evidence)
	}
	h.wantEntry(s0, status.Unhealthy, false)
	evs := events(h.st.Store, svc.Key(), wire.EventEligibility, s0.ID)
	if last := evs[len(evs)-1]; last.To != "withdrawn/unhealthy" || last.Evidence == nil || last.Evidence.Class != "report" {
		t.Errorf("audit event %+v, want a withdrawal on the report's evidence", last)
	}

	report(wire.Report{Ready: true})
	for range 9 {
		h.tick(time.Second)
		h.wantHealth(s0, "unhealthy", false)
	}
	h.tick(time.Second)
	h.wantHealth(s0, "healthy", true)
	if e := h.wantEntry(s0, status.Healthy, true); !e.Flags.Has(status.SlowStart) {
		t.Errorf("re-admitted entry flags %v, want slow start", e.Flags)
	}

	// The next withdrawal needs a shrink window of its own (10s).
	h.clk.Advance(10 * time.Second)
	report(wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepFailed}})
	h.tick(time.Second)
	got = h.wantHealth(s0, "unhealthy", false)
	if !slices.Contains(got.Reasons, "dependency db failed") {
		t.Errorf("reasons %q, want dependency db failed", got.Reasons)
	}
}

// TestQuarantine: an instance whose eligibility changes a fifth time
// within two minutes is quarantined, with an event naming its
// incarnation, and stays out of the table.
func TestQuarantine(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := selfService("shop", "pay")
	h.apply(svc)
	fleet := h.fleet(svc, "s", 3)
	s0 := fleet[0]
	h.tick(0)
	for i := 1; i <= 5; i++ {
		h.clk.Advance(11 * time.Second) // a shrink window of its own each time
		ready := i%2 == 0
		if _, err := h.st.Report(h.t.Context(), "instance:s0", s0.Key(), s0.Incarnation, wire.Report{Ready: ready}); err != nil {
			t.Fatal(err)
		}
		h.tick(0)
		if ready { // re-admission: five evaluations over 10s
			for range 5 {
				h.tick(2500 * time.Millisecond)
			}
		}
	}
	got := h.wantHealth(s0, "quarantined", false)
	if want := h.clk.Now().Add(time.Minute); got.QuarantineLevel != 1 || !got.QuarantineUntil.Equal(want) {
		t.Errorf("quarantine level %d until %v, want 1 until %v", got.QuarantineLevel, got.QuarantineUntil, want)
	}
	h.wantEntry(s0, status.Quarantined, false)
	evs := events(h.st.Store, svc.Key(), wire.EventQuarantined, s0.ID)
	if len(evs) != 1 || evs[0].Incarnation != s0.Incarnation || !strings.Contains(evs[0].Reason, "quarantined for 1m0s (level 1)") {
		t.Fatalf("quarantine events %+v, want one about incarnation %d, level 1", evs, s0.Incarnation)
	}
	// A report saying ready does not end it.
	if _, err := h.st.Report(h.t.Context(), "instance:s0", s0.Key(), s0.Incarnation, wire.Report{Ready: true}); err != nil {
		t.Fatal(err)
	}
	h.tick(30 * time.Second)
	h.wantEntry(s0, status.Quarantined, false)
	for range 5 {
		h.tick(7 * time.Second)
	}
	h.wantEntry(s0, status.Healthy, true)
}
