package eval

import (
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// The committed verdict (wire.Health) is how an evaluation outlives its
// leader: the leader commits it when it changes, every replica builds
// its table from it, and a new leader resumes from it. This file is the
// one mapping between it and the evaluator's state: Commit one way,
// Resume the other; Evaluator.Unchanged tells whether a new one is worth
// a commit.

// slowStartReason is the reason Evaluate gives while slow start applies.
// Slow start is not committed: the table builders compute it from
// EligibleSince, and its end is not worth a commit.
const slowStartReason = "slow start"

// Commit returns the committed form of an instance's result r and its
// state st, decided at now.
func Commit(r InstanceResult, st InstanceState, now time.Time) wire.Health {
	var h wire.Health
	commitInto(&h, r, st, now, true)
	return h
}

// Unchanged reports whether the committed verdict old already says
// everything a reader acts on of the result r with its state st, that
// is of Commit(r, st, ·): the evidence and the time of the decision are
// left out, or every probe would be a commit, and so are a failing
// class's explanation and slow start, which the table builders compute.
// It builds that verdict in e's memory and, once that has grown,
// allocates nothing: it runs for every instance every round.
func (e *Evaluator) Unchanged(old wire.Health, r InstanceResult, st InstanceState) bool {
	commitInto(&e.draft, r, st, time.Time{}, false)
	return same(&old, &e.draft)
}

// commitInto writes Commit(r, st, now) into h, the evidence left out
// unless evidence is set, reusing h's lists: a zero h gets nil for an
// empty list, as a snapshot restores them.
func commitInto(h *wire.Health, r InstanceResult, st InstanceState, now time.Time, evidence bool) {
	failing, reasons := h.Failing[:0], h.Reasons[:0]
	*h = wire.Health{Incarnation: r.Incarnation, Verdict: r.Verdict, Eligible: r.Eligible,
		HealthEligible: st.HealthEligible, Flags: r.Flags &^ status.SlowStart, FailingSince: st.FailingSince.Time(),
		QuarantineLevel: st.QuarantineLevel, QuarantineUntil: st.QuarantineUntil.Time(), At: now}
	if r.Eligible {
		h.EligibleSince = st.EligibleSince.Time()
	}
	for i, c := range st.Classes {
		if c != nil && c.Failing {
			failing = append(failing, wire.FailingClass{Class: Class(i).String(), Since: c.FailingSince, Hard: c.Hard, Why: c.Why})
		}
	}
	if rep := st.Report; rep != nil && rep.Failing {
		failing = append(failing, wire.FailingClass{Class: ClassReport.String(), Since: rep.Since, Why: rep.Why})
	}
	for _, s := range r.Reasons {
		if s != slowStartReason {
			reasons = append(reasons, s)
		}
	}
	h.Failing, h.Reasons = failing, reasons
	if evidence && !r.Evidence.At.IsZero() {
		h.Evidence = &wire.Evidence{Class: r.Evidence.Class.String(), Observer: r.Evidence.Observer, At: r.Evidence.At}
	}
}

// same reports whether old says what next says, as Unchanged tells it.
func same(old, next *wire.Health) bool {
	const slow = status.SlowStart
	if old.Incarnation != next.Incarnation || old.Verdict != next.Verdict || old.Eligible != next.Eligible ||
		old.HealthEligible != next.HealthEligible || old.Flags&^slow != next.Flags&^slow ||
		!old.EligibleSince.Equal(next.EligibleSince) || !old.FailingSince.Equal(next.FailingSince) ||
		old.QuarantineLevel != next.QuarantineLevel || !old.QuarantineUntil.Equal(next.QuarantineUntil) ||
		len(old.Failing) != len(next.Failing) {
		return false
	}
	for i, f := range old.Failing {
		g := next.Failing[i]
		if f.Class != g.Class || f.Hard != g.Hard || !f.Since.Equal(g.Since) {
			return false
		}
	}
	// The reasons, slow start left out of old's (next has none).
	j := 0
	for _, reason := range next.Reasons {
		for j < len(old.Reasons) && old.Reasons[j] == slowStartReason {
			j++
		}
		if j >= len(old.Reasons) || old.Reasons[j] != reason {
			return false
		}
		j++
	}
	for j < len(old.Reasons) && old.Reasons[j] == slowStartReason {
		j++
	}
	return j == len(old.Reasons)
}

// Resume rebuilds the state of instance id, of lifecycle lc, from its
// committed verdict h: a new leader resumes failing classes
// (re-admission still takes the full run of successes), publication,
// slow start and quarantine. Flap history and scores start afresh.
//
// A failing probe class of an instance still in rotation (its probers
// disagreed) is not resumed: the new leader has neither prober's result,
// and would withdraw it; the probers' next results decide again. A
// failing outcome class resumes as last heard from at now, so the
// callers' silence ends it no earlier than one outcome window after the
// takeover.
func Resume(h wire.Health, id string, lc Lifecycle, now time.Time) InstanceState {
	st := InstanceState{ID: id, Incarnation: h.Incarnation, Seen: true, Lifecycle: lc,
		HealthEligible: h.HealthEligible, Published: h.Eligible, Verdict: h.Verdict,
		EligibleSince: NanosOf(h.EligibleSince), FailingSince: NanosOf(h.FailingSince),
		QuarantineLevel: h.QuarantineLevel, QuarantineUntil: NanosOf(h.QuarantineUntil)}
	for _, f := range h.Failing {
		if f.Class == ClassReport.String() {
			// Re-admission still waits for the ready report's run.
			st.Report = &ReportState{Failing: true, Since: f.Since, Why: f.Why}
			continue
		}
		i, last := ClassProbe, f.Since
		switch f.Class {
		case ClassOutcome.String():
			i, last = ClassOutcome, now
		case ClassProbe.String():
			if h.HealthEligible {
				continue
			}
		default:
			continue
		}
		st.Classes[i] = &ClassState{Failing: true, FailingSince: f.Since, Hard: f.Hard, Why: f.Why,
			Trigger: EvidenceRef{Class: i, At: f.Since}, Last: EvidenceRef{Class: i, At: last}}
	}
	return st
}
