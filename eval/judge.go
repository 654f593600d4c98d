package eval

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// capEjections keeps the instances that caller outcomes alone withdraw
// within the service's MaxEjectionPercent of its ready instances (always
// at least one, none when it is negative): those withdrawn already keep
// their place, then the longest failing; the others stay in rotation at a
// lowered weight.
func capEjections(p Policy, ws []*work) {
	ready := 0
	var cands []*work
	for _, w := range ws {
		if w.in.Lifecycle != status.Ready {
			continue
		}
		ready++
		if w.outcome && len(w.withdraw) == 1 {
			cands = append(cands, w)
		}
	}
	budget := 0
	if p.MaxEjectionPercent >= 0 {
		budget = max(1, p.MaxEjectionPercent*ready/100)
	}
	if len(cands) <= budget {
		return
	}
	slices.SortFunc(cands, func(a, b *work) int {
		if a.prev.HealthEligible != b.prev.HealthEligible {
			if !a.prev.HealthEligible {
				return -1
			}
			return 1
		}
		return cmp.Or(a.cls[ClassOutcome].FailingSince.Compare(b.cls[ClassOutcome].FailingSince),
			cmp.Compare(a.in.ID, b.in.ID))
	})
	for _, w := range cands[budget:] {
		w.withdraw, w.outcome = nil, false
		w.outLow, w.degraded = true, true
		w.notes = append(w.notes, fmt.Sprintf("callers report failures: withdrawal held by max_ejection_percent %d", max(0, p.MaxEjectionPercent)))
		if w.verdict == status.Unhealthy {
			w.verdict, w.st.Verdict = status.Degraded, status.Degraded
		}
	}
}

// outcomeEvidence makes the callers' latest outcome the evidence of an
// instance their failures degrade: what the verdict rests on, not
// whichever class spoke last (a passing probe, say). A withdrawal's
// trigger, set before, stays the evidence.
func (w *work) outcomeEvidence(last EvidenceRef) {
	if len(w.withdraw) == 0 && !last.At.IsZero() {
		w.evidence = last
	}
}

// judge derives an instance's verdict inputs and health eligibility.
func judge(p Policy, w *work, now time.Time) {
	in, st := w.in, &w.st
	isFresh := func(t time.Time) bool { return !t.IsZero() && !t.After(now) && now.Sub(t) <= p.Freshness }
	for i := range w.cls {
		c := &w.cls[i]
		if isFresh(c.Last.At) {
			w.fresh = true
			// The freshest sample, unless a withdrawal's trigger is the
			// evidence already (a later class must not take its place).
			if w.evidence.At.Before(c.Last.At) && len(w.withdraw) == 0 {
				w.evidence = c.Last
			}
		}
		if Class(i) == ClassOutcome {
			failing, reporting := outcomeQuorum(p, &w.rec, now)
			switch {
			case c.Failing && now.Sub(c.Last.At) > p.OutcomeWindow:
				// A withdrawn instance is not called, so its callers
				// fall silent: once no caller has reported on it for
				// OutcomeWindow, the withdrawal is over (an ejection with
				// a time limit, as Envoy's outlier detection has). Callers
				// that report successes re-admit it through the run.
				*c = ClassState{Last: c.Last, LastOK: c.LastOK}
				w.notes = append(w.notes, "callers' failure reports aged out")
			case c.Failing:
				w.outcome = true
			case quorumMet(p, failing, reporting):
				// The quorum is met, but the class has not failed for
				// long enough to withdraw (WithdrawAfter, or the score).
				w.degraded, w.outLow = true, true
				w.notes = append(w.notes, fmt.Sprintf("%d of %d callers report failures, a quorum (%d, and a third), not yet for long enough to withdraw: weight lowered",
					failing, reporting, p.OutcomeQuorum))
				w.outcomeEvidence(c.Last)
			case failing > 0:
				w.degraded, w.outLow = true, true
				w.notes = append(w.notes, fmt.Sprintf("%d of %d callers report failures, short of the quorum (%d, and a third): weight lowered",
					failing, reporting, p.OutcomeQuorum))
				w.outcomeEvidence(c.Last)
			}
		}
		if !c.Failing {
			continue
		}
		// A failing class stays failing through silence: only a run of
		// successes re-admits. But two probers that disagree only
		// degrade an instance in rotation; one that is out comes back
		// through the run, however many probers pass it.
		if Class(i) == ClassProbe && (!w.prev.Seen || w.prev.HealthEligible) {
			if passed, failed := disagreement(p, &w.rec, now); passed != "" {
				w.degraded = true
				w.notes = append(w.notes, fmt.Sprintf("probers disagree: %s failed (%s), %s passed", failed, c.Why, passed))
				continue
			}
		}
		// The evidence is the trigger of the class that failed first
		// (the probe's, on a tie: it comes first).
		if len(w.withdraw) == 0 || c.Trigger.At.Before(w.evidence.At) {
			w.evidence = c.Trigger
		}
		w.withdraw = append(w.withdraw, fmt.Sprintf("%v failing: %s", Class(i), c.Why))
		w.hard = w.hard || c.Hard
	}
	leaseAlive := in.LeaseExpiry.IsZero() || now.Before(in.LeaseExpiry)
	if r := in.Report; r != nil && (isFresh(r.At) || (leaseAlive && !r.At.IsZero() && !r.At.After(now))) {
		w.fresh = true
		ref := EvidenceRef{Class: ClassReport, Observer: in.ID, At: r.At}
		var bad []string
		if !r.Ready {
			bad = append(bad, "self-report: not ready")
		}
		for _, name := range sortedKeys(r.Dependencies) {
			shared, declared := p.Dependencies[name]
			if !declared {
				continue
			}
			state := r.Dependencies[name]
			switch {
			case state == DependencyOK:
			case shared:
				w.depLow, w.degraded = true, true
				w.notes = append(w.notes, fmt.Sprintf("shared dependency %s %s", name, state))
			case state == DependencyDegraded:
				w.degraded = true
				w.notes = append(w.notes, fmt.Sprintf("dependency %s degraded", name))
			default:
				bad = append(bad, fmt.Sprintf("dependency %s failed", name))
			}
		}
		rs := &w.rep
		switch {
		case len(bad) > 0:
			if !rs.Failing {
				rs.Failing, rs.Since, rs.Why = true, r.At, bad[0]
			}
			rs.ReadySince, rs.ReadyRounds = time.Time{}, 0
			w.withdraw = append(w.withdraw, bad...)
			w.evidence = ref
		case rs.Failing:
			if rs.ReadySince.IsZero() {
				rs.ReadySince = r.At
			}
			rs.ReadyRounds++
			if rs.ReadyRounds >= p.AdmitAfter && now.Sub(rs.ReadySince) >= p.AdmitMin {
				*rs = ReportState{} // re-admitted
			} else {
				w.withdraw = append(w.withdraw, "self-report: ready again, not yet re-admitted (admit_after, admit_min)")
				w.evidence = ref
			}
		}
		if w.evidence.At.IsZero() {
			w.evidence = ref
		}
	} else if w.rep.Failing {
		// Silence keeps a failing report failing, as it does the classes.
		w.withdraw = append(w.withdraw, "self-report failing: "+w.rep.Why)
	}
	if !leaseAlive {
		w.leaseExp = true
		corroborated := false
		for i := range w.cls {
			c := w.cls[i]
			if isFresh(c.Last.At) && !c.LastOK {
				corroborated = true
				if len(w.withdraw) == 0 {
					w.evidence = c.Last
				}
			}
		}
		deadline := in.LeaseDeadline
		if deadline.IsZero() {
			deadline = in.LeaseExpiry
		}
		switch {
		case !now.Before(deadline.Add(p.HardExpiry - p.LeaseTTL)):
			// Whatever the capability and whatever probes say: the
			// address may belong to another process by now.
			w.withdraw = append(w.withdraw, "lease past its hard expiry")
			w.expired = true
		case corroborated:
			w.withdraw = append(w.withdraw, "lease expired, corroborated by a failing class")
		default:
			w.notes = append(w.notes, "lease expired (silence)")
		}
	}

	quarantined := now.Before(st.QuarantineUntil.Time())
	switch {
	case quarantined:
		w.verdict = status.Quarantined
	case len(w.withdraw) > 0:
		w.verdict = status.Unhealthy
	case w.degraded:
		w.verdict = status.Degraded
	case w.fresh:
		w.verdict = status.Healthy
	default:
		w.verdict = status.Unknown
	}
	st.Verdict = w.verdict
}

// flap updates health eligibility, counts its changes and quarantines a
// flapping instance.
func flap(p Policy, w *work, now time.Time, res *Result) {
	st := &w.st
	healthy := w.in.Lifecycle == status.Ready && len(w.withdraw) == 0 && w.verdict != status.Quarantined
	counted := w.prev.Seen && w.prev.Lifecycle == status.Ready && w.in.Lifecycle == status.Ready
	rec := &w.rec
	if counted && healthy != w.prev.HealthEligible {
		rec.Flaps = append(rec.Flaps, now)
	}
	rec.Flaps = slices.DeleteFunc(rec.Flaps, func(t time.Time) bool { return !t.After(now.Add(-p.FlapWindow)) })
	if len(rec.Flaps) > p.FlapLimit && w.verdict != status.Quarantined {
		st.QuarantineLevel++
		d := p.QuarantineBase
		for i := 1; i < st.QuarantineLevel && d < p.QuarantineMax; i++ {
			d *= 2
		}
		d = min(d, p.QuarantineMax)
		st.QuarantineUntil = NanosOf(now.Add(d))
		rec.Flaps = nil
		w.verdict, st.Verdict = status.Quarantined, status.Quarantined
		res.Events = append(res.Events, Event{Kind: EventQuarantined, ID: w.in.ID, At: now,
			Detail: fmt.Sprintf("more than %d eligibility transitions in %v: quarantined for %v (level %d)",
				p.FlapLimit, p.FlapWindow, d, st.QuarantineLevel)})
		healthy = false
	}
	if !healthy && (w.prev.HealthEligible || !w.prev.Seen) {
		st.FailingSince = NanosOf(now)
	}
	st.HealthEligible = healthy
	st.Seen = true
	st.Lifecycle = w.in.Lifecycle
}

// finish computes the published weight, flags and reasons, and records
// publication in the state.
func finish(p Policy, w *work, now time.Time, arena *[]string) InstanceResult {
	st := &w.st
	r := InstanceResult{ID: w.in.ID, Incarnation: w.in.Incarnation, Lifecycle: w.in.Lifecycle,
		Verdict: w.verdict, Eligible: w.pub, Evidence: w.evidence}
	flags := w.flags
	if w.leaseExp {
		flags |= status.LeaseExpired
	}
	if w.depLow {
		flags |= status.DependencyDegraded
	}
	if w.outLow {
		flags |= status.OutcomeDegraded
	}
	// The reasons go into the Evaluator's arena: one result's reasons
	// are a slice of it, capped so that appending to them copies.
	reasons := *arena
	start := len(reasons)
	if w.pub && flags.Has(status.HealthDisregarded) {
		// First: it is why the instance is served at all.
		reasons = append(reasons, "health disregarded (service below its minimum healthy fraction)")
	}
	if w.in.Lifecycle != status.Ready {
		reasons = append(reasons, "lifecycle "+w.in.Lifecycle.String())
	}
	if w.verdict == status.Quarantined {
		reasons = append(reasons, "quarantined until "+st.QuarantineUntil.Time().Format(time.RFC3339))
	}
	reasons = append(reasons, w.withdraw...)
	reasons = append(reasons, w.notes...)
	if w.verdict == status.Unknown {
		reasons = append(reasons, "no fresh evidence (silence is unknown)")
	}
	if w.pub {
		if !w.prev.Published {
			st.EligibleSince = NanosOf(now)
		}
		var slow bool
		r.Weight, slow = Weight(p, w.in.BaseWeight, w.in.Ramp, st.EligibleSince.Time(), flags, now)
		if slow {
			flags |= status.SlowStart
			reasons = append(reasons, slowStartReason)
		}
		flags |= status.Eligible
		if flags.Has(status.WithdrawalDeferred) {
			reasons = append(reasons, "withdrawal deferred by the shrink cap")
		}
	}
	if len(reasons) > start {
		r.Reasons = reasons[start:len(reasons):len(reasons)]
	}
	*arena = reasons
	st.Published = w.pub
	r.Flags = flags
	return r
}

// Weight is the published weight of an eligible instance (SPEC §2): its
// base weight (0 means 100, at most 65535), rising linearly from 10% to
// 100% from eligibleSince over its slow-start window (the longer of
// p.SlowStart and the incarnation's deploy ramp, wire.SlowStartWindow), times
// p.SharedDependencyFactor when flags has status.DependencyDegraded and
// p.OutcomeWeightFactor when it has status.OutcomeDegraded; never below
// 1. slow reports whether slow start still applies.
// p must have its defaults (WithDefaults). The status table builders of
// every node call it each rebuild, so that weights keep rising between
// the evaluator's commits.
func Weight(p Policy, base int, ramp time.Duration, eligibleSince time.Time, flags Flags, now time.Time) (weight int, slow bool) {
	if base <= 0 {
		base = 100
	}
	base = min(base, 65535)
	f := 1.0
	if window := wire.SlowStartWindow(p.SlowStart, ramp); now.Sub(eligibleSince) < window {
		f = 0.1 + 0.9*max(0, float64(now.Sub(eligibleSince)))/float64(window)
		slow = true
	}
	if flags.Has(status.DependencyDegraded) {
		f *= p.SharedDependencyFactor
	}
	if flags.Has(status.OutcomeDegraded) {
		f *= p.OutcomeWeightFactor
	}
	return min(base, max(1, int(math.Round(float64(base)*f)))), slow
}

func transitionReason(r InstanceResult) string {
	for _, s := range r.Reasons {
		if s != slowStartReason {
			return s
		}
	}
	return r.Verdict.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
