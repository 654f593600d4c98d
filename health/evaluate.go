package health

import (
	"context"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// evaluate runs the evaluator over every service (on the leader) and
// commits the verdicts that changed. It reports whether it committed.
//
// The round is paced (see package pace): it pauses between services once
// its slice is spent, and holds n.mu, which evidence reports wait on,
// only while it reads one service's evidence. A round allocates nothing
// per instance: the evaluator, the samples and the per-service maps are
// the loop's, reused.
func (n *Node) evaluate(ctx context.Context, now time.Time) bool {
	start := time.Now()
	n.pacer.Begin()
	// Evidence younger than one interval waits for the next round, so
	// that a late batch from another observer is not behind the class's
	// watermark when it arrives.
	cutoff := now.Add(-n.cfg.Interval)
	states := n.spareStates
	if states == nil {
		states = make(map[wire.ServiceKey]*eval.State, len(n.pub.Catalog().Services))
	}
	clear(states)
	var ups []store.HealthUpdate
	var evs []store.ServiceEvent
	disregarded := 0
	actor := "evaluator@" + n.cfg.Store.NodeID()

	prevAside := n.aside
	n.prune(n.currentInc, now.Add(-2*n.cfg.OutcomeHorizon))
	counts := n.correlation(now)
	aside := make(map[wire.ServiceKey]map[asideKey]bool, len(n.pub.Catalog().Services))
	asidePairs := map[asideKey]bool{}
	if n.samplesBy == nil {
		n.samplesBy = map[string][]eval.Sample{}
		n.stored = map[string]*store.Verdict{}
		n.trans = map[string]eval.Transition{}
	}
	for _, cs := range n.pub.Catalog().Services {
		if n.pacer.Due() {
			n.pacer.Pause()
			n.pub.PublishPending(ctx)
		}
		prev := n.states[cs.Key]
		if prev == nil {
			prev = &eval.State{}
		}
		var cur map[asideKey]bool
		for k, r := range counts {
			if setAside(r, cs.Policy.CorrelatedFailureFraction) && cs.HasZone(k.region, k.zone) {
				if cur == nil {
					cur = map[asideKey]bool{}
				}
				cur[k], asidePairs[k] = true, true
			}
		}
		aside[cs.Key] = cur
		for _, e := range asideEvents(cs.Key, n.aside[cs.Key], cur, counts) {
			evs = append(evs, e)
			n.log.Warn("probe evidence", "service", cs.Key, "kind", e.Kind, "detail", e.Detail)
		}
		ins := n.insBuf[:0]
		if cap(n.reportBuf) < len(cs.Instances) {
			n.reportBuf = make([]eval.Report, len(cs.Instances))
		}
		samples, stored := n.samplesBy, n.stored
		clear(samples)
		clear(stored)
		buf := n.sampleBuf[:0]
		n.mu.Lock()
		for i := range cs.Instances {
			in, id := &cs.Instances[i], cs.InstanceID(i)
			ins = append(ins, n.evalInstance(&cs, i, &n.reportBuf[i]))
			stored[id] = in.Health
			if in.Health != nil && in.Health.Incarnation() == in.Incarnation && prev.Instance(id) == nil {
				// A new term: resume from the committed verdict. The
				// instances come in id order, so on a fresh State this
				// appends.
				prev.Set(seed(in.Health.Health(), cs.Record(i), now))
				if in.Health.Flags().Has(status.HealthDisregarded) {
					prev.HealthDisregarded = true
				}
			}
			from := len(buf)
			buf = n.samples(buf, in.Key, in.Incarnation, cutoff, cur, in.Loc.Region, in.Loc.Zone)
			if len(buf) > from {
				samples[id] = buf[from:len(buf):len(buf)]
			}
		}
		n.mu.Unlock()
		n.insBuf, n.sampleBuf = ins[:0], buf[:0]
		res, next := n.ev.Evaluate(cs.Policy, ins, samples, *prev, now)
		n.ev.Recycle(*prev)
		// The replaced State stays in the previous round's map until
		// the next round clears it: it must not keep its list, or the
		// loop holds two rounds of states.
		*prev = eval.State{}
		states[cs.Key] = &next
		if res.HealthDisregarded {
			disregarded++
		}
		n.m.discarded.WithLabelValues("unattributable").Add(float64(res.Discarded))
		trans := n.trans
		clear(trans)
		for _, t := range res.Transitions {
			trans[t.ID] = t
		}
		for i, r := range res.Instances {
			st := &next.Instances[i] // the state of r (eval.State)
			if old := stored[r.ID]; old != nil && old.Incarnation() == r.Incarnation && unchanged(old.Health(), r, *st) {
				continue // the common case: nothing to build, nothing to commit
			}
			h := healthOf(r, *st, now)
			u := store.HealthUpdate{Key: wire.InstanceKey{Namespace: cs.Key.Namespace, Service: cs.Key.Name, ID: r.ID}, Health: h}
			if t, ok := trans[r.ID]; ok {
				u.Transition = &store.Transition{From: t.From.String(), To: t.To.String(), Reason: t.Reason}
				if stored[r.ID] == nil || stored[r.ID].Incarnation() != r.Incarnation {
					u.Transition.From = "new" // its first verdict: it was never withdrawn
				}
			}
			ups = append(ups, u)
		}
		for _, e := range res.Events {
			se := store.ServiceEvent{Namespace: cs.Key.Namespace, Service: cs.Key.Name, Instance: e.ID, Detail: e.Detail}
			switch e.Kind {
			case eval.EventHealthDisregarded:
				se.Kind = wire.EventHealthDisregarded
			case eval.EventHealthRestored:
				se.Kind = wire.EventHealthRestored
			case eval.EventQuarantined:
				se.Kind = wire.EventQuarantined
				if st := next.Instance(e.ID); st != nil {
					se.Incarnation = st.Incarnation
				}
			}
			evs = append(evs, se)
			n.log.Info("health event", "service", cs.Key, "kind", se.Kind, "instance", e.ID, "detail", e.Detail)
		}
	}
	// The states replaced were recycled one by one above; their map is
	// the next round's.
	n.spareStates = n.states
	n.states = states
	n.aside = aside
	n.m.setAside.Set(float64(len(asidePairs)))
	n.m.disregarded.Set(float64(disregarded))
	n.m.evaluations.Inc()
	n.m.evalSeconds.Observe(time.Since(start).Seconds())

	committed := false
	for len(ups) > 0 || len(evs) > 0 {
		k := min(len(ups), store.MaxHealthUpdates)
		var batchEvs []store.ServiceEvent
		if k == len(ups) {
			batchEvs, evs = evs, nil
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cfg.Store.CommitHealth(ctx, actor, ups[:k], batchEvs)
		cancel()
		if err != nil {
			// Start the next round from what the store holds.
			n.m.commitErrors.Inc()
			n.log.Warn("committing verdicts", "updates", len(ups), "err", err)
			n.states, n.spareStates = nil, nil
			n.aside = prevAside // their events were not committed either
			return committed
		}
		n.m.commits.Inc()
		committed = true
		for _, u := range ups[:k] {
			if u.Transition != nil {
				n.m.transitions.WithLabelValues(eligibility(u.Health.Eligible)).Inc()
			}
		}
		ups = ups[k:]
	}
	return committed
}

func eligibility(e bool) string {
	if e {
		return "eligible"
	}
	return "withdrawn"
}

// currentInc reports the current incarnation of a live instance, for
// pruning evidence.
func (n *Node) currentInc(key string) (uint64, bool) { return n.pub.CurrentIncarnation(key) }

// evalInstance copies what the evaluator needs of the service's instance
// i; a self-report goes into rep, the loop's (one per instance of the
// service).
func (n *Node) evalInstance(cs *publish.Service, i int, rep *eval.Report) eval.Instance {
	in := &cs.Instances[i]
	e := eval.Instance{ID: cs.InstanceID(i), Incarnation: in.Incarnation, Region: in.Loc.Region, Zone: in.Loc.Zone,
		BaseWeight: int(in.Weight), Lifecycle: in.Lifecycle, LeaseDeadline: publish.FromNanos(in.LeaseDeadline)}
	if in.LeaseTTL > 0 {
		e.LeaseExpiry = n.cfg.Store.LeaseExpiry(cs.Record(i))
	}
	if r := in.Report; r != nil {
		*rep = eval.Report{Ready: r.Ready, At: r.At}
		if len(r.Dependencies) > 0 {
			rep.Dependencies = make(map[string]string, len(r.Dependencies))
			for k, v := range r.Dependencies {
				rep.Dependencies[k] = string(v)
			}
		}
		e.Report = rep
	}
	return e
}

// healthOf is the committed form of one instance's result.
func healthOf(r eval.InstanceResult, st eval.InstanceState, now time.Time) wire.Health {
	h := wire.Health{Incarnation: r.Incarnation, Verdict: r.Verdict, Eligible: r.Eligible,
		HealthEligible: st.HealthEligible, Flags: r.Flags, FailingSince: st.FailingSince.Time(),
		QuarantineLevel: st.QuarantineLevel, QuarantineUntil: st.QuarantineUntil.Time(),
		Reasons: withoutSlowStart(r.Reasons), At: now}
	// Slow start is the table builders' to compute, from EligibleSince:
	// its end is not worth a commit.
	h.Flags &^= status.SlowStart
	if r.Eligible {
		h.EligibleSince = st.EligibleSince.Time()
	}
	for i, c := range st.Classes {
		if c != nil && c.Failing {
			h.Failing = append(h.Failing, wire.FailingClass{Class: eval.Class(i).String(), Since: c.FailingSince,
				Hard: c.Hard, Why: c.Why})
		}
	}
	if r := st.Report; r != nil && r.Failing {
		h.Failing = append(h.Failing, wire.FailingClass{Class: eval.ClassReport.String(), Since: r.Since, Why: r.Why})
	}
	if !r.Evidence.At.IsZero() {
		h.Evidence = &wire.Evidence{Class: r.Evidence.Class.String(), Observer: r.Evidence.Observer, At: r.Evidence.At}
	}
	return h
}

// unchanged reports whether the committed verdict old already says
// everything a reader acts on of the result r (with its state st): the
// evidence's time and the decision's are left out, or every probe would be
// a commit, and so is slow start, which the table builders compute. It
// allocates nothing: it runs for every instance every round.
func unchanged(old wire.Health, r eval.InstanceResult, st eval.InstanceState) bool {
	const slow = status.SlowStart
	eligibleSince := time.Time{}
	if r.Eligible {
		eligibleSince = st.EligibleSince.Time()
	}
	if old.Verdict != r.Verdict || old.Eligible != r.Eligible || old.HealthEligible != st.HealthEligible ||
		old.Flags&^slow != r.Flags&^slow || !old.EligibleSince.Equal(eligibleSince) ||
		!old.FailingSince.Equal(st.FailingSince.Time()) ||
		old.QuarantineLevel != st.QuarantineLevel || !old.QuarantineUntil.Equal(st.QuarantineUntil.Time()) {
		return false
	}
	i := 0
	for c, cs := range st.Classes {
		if cs == nil || !cs.Failing {
			continue
		}
		if i >= len(old.Failing) {
			return false
		}
		f := old.Failing[i]
		if f.Class != eval.Class(c).String() || f.Hard != cs.Hard || !f.Since.Equal(cs.FailingSince) {
			return false
		}
		i++
	}
	if r := st.Report; r != nil && r.Failing {
		if i >= len(old.Failing) {
			return false
		}
		f := old.Failing[i]
		if f.Class != eval.ClassReport.String() || !f.Since.Equal(r.Since) {
			return false
		}
		i++
	}
	if i != len(old.Failing) {
		return false
	}
	// The reasons, "slow start" left out on both sides.
	j := 0
	for _, reason := range r.Reasons {
		if reason == "slow start" {
			continue
		}
		for j < len(old.Reasons) && old.Reasons[j] == "slow start" {
			j++
		}
		if j >= len(old.Reasons) || old.Reasons[j] != reason {
			return false
		}
		j++
	}
	for j < len(old.Reasons) && old.Reasons[j] == "slow start" {
		j++
	}
	return j == len(old.Reasons)
}

func withoutSlowStart(rs []string) []string {
	return slices.DeleteFunc(slices.Clone(rs), func(s string) bool { return s == "slow start" })
}

// seed rebuilds an instance's evaluator state from its committed
// verdict: a new leader resumes failing classes (re-admission still
// takes the full run of successes), publication, slow start and
// quarantine. Flap history and scores start afresh.
//
// A failing probe class of an instance still in rotation (its probers
// disagreed) is not resumed: the new leader has neither prober's result,
// and would withdraw it; the probers' next results decide again. A
// failing outcome class resumes as last heard from at now, so the
// callers' silence ends it no earlier than one outcome window after the
// takeover.
func seed(h wire.Health, in wire.Instance, now time.Time) eval.InstanceState {
	st := eval.InstanceState{ID: in.ID, Incarnation: h.Incarnation, Seen: true, Lifecycle: in.Lifecycle,
		HealthEligible: h.HealthEligible, Published: h.Eligible, Verdict: h.Verdict,
		EligibleSince: eval.NanosOf(h.EligibleSince), FailingSince: eval.NanosOf(h.FailingSince),
		QuarantineLevel: h.QuarantineLevel, QuarantineUntil: eval.NanosOf(h.QuarantineUntil)}
	for _, f := range h.Failing {
		if f.Class == eval.ClassReport.String() {
			// Re-admission still waits for the ready report's run.
			st.Report = &eval.ReportState{Failing: true, Since: f.Since, Why: f.Why}
			continue
		}
		i, last := eval.ClassProbe, f.Since
		switch f.Class {
		case eval.ClassOutcome.String():
			i, last = eval.ClassOutcome, now
		case eval.ClassProbe.String():
			if h.HealthEligible {
				continue
			}
		default:
			continue
		}
		st.Classes[i] = &eval.ClassState{Failing: true, FailingSince: f.Since, Hard: f.Hard, Why: f.Why,
			Trigger: eval.EvidenceRef{Class: i, At: f.Since}, Last: eval.EvidenceRef{Class: i, At: last}}
	}
	return st
}
