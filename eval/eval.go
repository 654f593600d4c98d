package eval

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// work is one instance's evaluation in progress.
type work struct {
	in       Instance
	prev     InstanceState // as carried in (zero for a new incarnation)
	st       InstanceState // being built
	fresh    bool          // any fresh evidence
	withdraw []string      // reasons the evidence withdraws it
	notes    []string      // other reasons (degraded, lease, …)
	hard     bool          // a hard failure is behind the withdrawal
	depLow   bool          // shared dependency factor applies
	degraded bool
	leaseExp bool
	evidence EvidenceRef
	verdict  Verdict
	pub      bool
	flags    Flags
}

// Evaluate judges one service's instances: a pure, deterministic function
// of the policy, the instances, the new evidence (samples by instance
// id), the previous state and now. It reads no clock and starts no
// goroutine; equal inputs give equal outputs. It does not modify prev or
// its arguments. It applies p.WithDefaults but does not Validate p: the
// caller validates a policy once, when the service definition is
// applied.
//
// The steps, for each instance in id order: consume the new samples into
// the per-class hysteresis; derive the verdict and the health
// eligibility; count flaps and quarantine. Then, for the service: the
// minimum healthy fraction guard, the shrink cap, slow start and weights,
// transitions and events.
func Evaluate(p Policy, instances []Instance, evidence map[string][]Sample, prev State, now time.Time) (Result, State) {
	p = p.WithDefaults()
	res := Result{At: now}
	next := State{Instances: make(map[string]InstanceState, len(instances)), Shrink: prev.Shrink}

	// Instances in id order; of duplicates, the highest incarnation wins.
	ins := slices.Clone(instances)
	slices.SortStableFunc(ins, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(b.Incarnation, a.Incarnation))
	})
	ins = slices.CompactFunc(ins, func(a, b Instance) bool { return a.ID == b.ID })

	known := make(map[string]bool, len(ins))
	ws := make([]*work, 0, len(ins))
	for _, in := range ins {
		known[in.ID] = true
		w := &work{in: in}
		if st, ok := prev.Instances[in.ID]; ok && st.Incarnation == in.Incarnation {
			w.prev = st
		} else {
			w.prev = InstanceState{Incarnation: in.Incarnation}
		}
		w.st = w.prev
		w.st.Flaps = slices.Clone(w.prev.Flaps)
		res.Discarded += consume(p, &w.st, in, evidence[in.ID], now)
		judge(p, w, now)
		flap(p, w, now, &res)
		ws = append(ws, w)
	}
	for id, ss := range evidence {
		if !known[id] {
			res.Discarded += len(ss)
		}
	}

	// The guard, over health eligibility (before the shrink cap, so
	// that the cap's deferrals cannot make the guard oscillate).
	type zkey struct{ region, zone string }
	zones := map[zkey]*ZoneResult{}
	ready, healthy := 0, 0
	for _, w := range ws {
		if w.in.Lifecycle != status.Ready {
			continue
		}
		k := zkey{w.in.Region, w.in.Zone}
		z := zones[k]
		if z == nil {
			z = &ZoneResult{Region: k.region, Zone: k.zone}
			zones[k] = z
		}
		ready++
		z.Ready++
		if w.st.HealthEligible {
			healthy++
			z.Healthy++
		}
	}
	below := func(h, n int) bool { return n > 0 && float64(h) < p.MinHealthyFraction*float64(n) }
	for _, z := range zones {
		z.BelowGuard = below(z.Healthy, z.Ready)
		res.Zones = append(res.Zones, *z)
	}
	slices.SortFunc(res.Zones, func(a, b ZoneResult) int {
		return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone))
	})
	res.HealthDisregarded = below(healthy, ready)
	next.HealthDisregarded = res.HealthDisregarded
	if res.HealthDisregarded != prev.HealthDisregarded {
		ev := Event{Kind: EventHealthRestored, At: now,
			Detail: fmt.Sprintf("%d of %d ready instances healthy", healthy, ready)}
		if res.HealthDisregarded {
			ev.Kind = EventHealthDisregarded
		}
		res.Events = append(res.Events, ev)
	}

	// The shrink cap's window: Base is the published eligible set when
	// the window opens.
	sh := &next.Shrink
	if sh.Start.IsZero() || !now.Before(sh.Start.Add(p.ShrinkWindow)) || now.Before(sh.Start) {
		base := 0
		for _, w := range ws {
			if w.prev.Published && w.in.Lifecycle == status.Ready {
				base++
			}
		}
		*sh = ShrinkState{Start: now, Base: base}
	}

	// Publication.
	var candidates []*work
	for _, w := range ws {
		switch {
		case w.in.Lifecycle != status.Ready:
			w.pub = false // lifecycle: never capped, never guarded
		case res.HealthDisregarded:
			w.pub = true
			if !w.st.HealthEligible {
				w.flags |= status.HealthDisregarded
			}
		case w.st.HealthEligible:
			w.pub = true
		case w.prev.Published:
			candidates = append(candidates, w) // a withdrawal: capped
		default:
			w.pub = false
		}
	}
	slices.SortFunc(candidates, func(a, b *work) int {
		if a.hard != b.hard {
			if a.hard {
				return -1
			}
			return 1
		}
		return cmp.Or(a.st.FailingSince.Compare(b.st.FailingSince), cmp.Compare(a.in.ID, b.in.ID))
	})
	budget := max(1, int(math.Floor(p.ShrinkCap*float64(sh.Base)))) - sh.Used
	for _, w := range candidates {
		if budget > 0 {
			budget--
			sh.Used++
			w.pub = false
			continue
		}
		w.pub = true
		w.flags |= status.WithdrawalDeferred
	}

	// Weights, results, transitions.
	for _, w := range ws {
		r := finish(p, w, now)
		res.Instances = append(res.Instances, r)
		from := Position{Eligible: w.prev.Published, Verdict: w.prev.Verdict}
		to := Position{Eligible: r.Eligible, Verdict: r.Verdict}
		if from != to || !w.prev.Seen {
			res.Transitions = append(res.Transitions, Transition{
				ID: w.in.ID, Incarnation: w.in.Incarnation, From: from, To: to,
				Reason: transitionReason(r), Evidence: r.Evidence, At: now,
			})
		}
		next.Instances[w.in.ID] = w.st
	}
	return res, next
}

// consume feeds an instance's new samples, in a fixed order, into its
// class states, and returns how many it discarded.
func consume(p Policy, st *InstanceState, in Instance, samples []Sample, now time.Time) int {
	discarded := 0
	ss := make([]Sample, 0, len(samples))
	for _, s := range samples {
		switch {
		case s.Class >= numSampleClasses, s.At.After(now),
			s.Incarnation != 0 && s.Incarnation != in.Incarnation:
			discarded++
		case !s.At.After(st.Classes[s.Class].Last.At):
			// at or before the watermark: already consumed
		default:
			ss = append(ss, s)
		}
	}
	slices.SortFunc(ss, func(a, b Sample) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Observer, b.Observer),
			cmpBool(a.OK, b.OK), cmpBool(b.Hard, a.Hard),
			cmp.Compare(a.Successes, b.Successes), cmp.Compare(a.Failures, b.Failures), cmp.Compare(a.Timeouts, b.Timeouts))
	})
	for _, s := range ss {
		c := &st.Classes[s.Class]
		fail, ok := 0.0, s.OK && !s.Hard
		if s.Class == ClassOutcome {
			n := s.Successes + s.Failures + s.Timeouts
			if n <= 0 {
				continue
			}
			fail = float64(s.Failures+s.Timeouts) / float64(n)
			ok = fail <= p.FailureThreshold
		} else if !ok {
			fail = 1
		}
		ref := EvidenceRef{Class: s.Class, Observer: s.Observer, At: s.At}
		if !c.Last.At.IsZero() {
			d := math.Pow(0.5, float64(s.At.Sub(c.Last.At))/float64(p.ScoreHalfLife))
			c.FailMass *= d
			c.TotalMass *= d
		}
		c.FailMass += fail
		c.TotalMass++
		c.Last, c.LastOK = ref, ok
		if ok {
			if c.ConsecutiveOK == 0 {
				c.RunStart = s.At
			}
			c.ConsecutiveOK++
			c.ConsecutiveFail = 0
		} else {
			c.ConsecutiveFail++
			c.ConsecutiveOK = 0
		}
		if !c.Failing {
			why := ""
			switch {
			case s.Hard && s.Class == ClassProbe:
				why = "hard failure (connection refused)"
			case c.ConsecutiveFail >= p.WithdrawAfter:
				why = fmt.Sprintf("%d consecutive failures", c.ConsecutiveFail)
			case !ok && c.TotalMass >= p.ScoreMinWeight && c.Score() > p.FailureThreshold:
				why = fmt.Sprintf("failure score %.2f above %.2f", c.Score(), p.FailureThreshold)
			}
			if why != "" {
				c.Failing, c.FailingSince, c.Hard, c.Why, c.Trigger = true, s.At, s.Hard, why, ref
			}
		} else if ok && c.ConsecutiveOK >= p.AdmitAfter && s.At.Sub(c.RunStart) >= p.AdmitMin {
			// Re-admitted: the score starts afresh so old failures do
			// not withdraw the instance again on its first miss.
			c.Failing, c.Hard, c.Why, c.Trigger = false, false, "", ref
			c.FailMass, c.TotalMass = 0, 0
		}
	}
	return discarded
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// judge derives an instance's verdict inputs and health eligibility.
func judge(p Policy, w *work, now time.Time) {
	in, st := w.in, &w.st
	isFresh := func(t time.Time) bool { return !t.IsZero() && !t.After(now) && now.Sub(t) <= p.Freshness }
	for i := range st.Classes {
		c := &st.Classes[i]
		if isFresh(c.Last.At) {
			w.fresh = true
			if w.evidence.At.Before(c.Last.At) {
				w.evidence = c.Last
			}
		}
		if c.Failing {
			// A failing class stays failing through silence: only a run
			// of successes re-admits.
			w.withdraw = append(w.withdraw, fmt.Sprintf("%v failing: %s", Class(i), c.Why))
			w.hard = w.hard || c.Hard
			w.evidence = c.Trigger
		}
	}
	leaseAlive := in.LeaseExpiry.IsZero() || now.Before(in.LeaseExpiry)
	if r := in.Report; r != nil && (isFresh(r.At) || (leaseAlive && !r.At.IsZero() && !r.At.After(now))) {
		w.fresh = true
		ref := EvidenceRef{Class: ClassReport, Observer: in.ID, At: r.At}
		if !r.Ready {
			w.withdraw = append(w.withdraw, "self-report: not ready")
			w.evidence = ref
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
				w.withdraw = append(w.withdraw, fmt.Sprintf("dependency %s failed", name))
				w.evidence = ref
			}
		}
		if w.evidence.At.IsZero() {
			w.evidence = ref
		}
	}
	if !leaseAlive {
		w.leaseExp = true
		corroborated := false
		for i := range st.Classes {
			c := st.Classes[i]
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
		case corroborated:
			w.withdraw = append(w.withdraw, "lease expired, corroborated by a failing class")
		case p.Readiness == ReadinessNone && !now.Before(deadline.Add(p.HardExpiry-p.LeaseTTL)):
			w.withdraw = append(w.withdraw, "lease past its hard expiry")
		default:
			w.notes = append(w.notes, "lease expired (silence)")
		}
	}

	quarantined := now.Before(st.QuarantineUntil)
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
	if counted && healthy != w.prev.HealthEligible {
		st.Flaps = append(st.Flaps, now)
	}
	st.Flaps = slices.DeleteFunc(st.Flaps, func(t time.Time) bool { return !t.After(now.Add(-p.FlapWindow)) })
	if len(st.Flaps) > p.FlapLimit && w.verdict != status.Quarantined {
		st.QuarantineLevel++
		d := p.QuarantineBase
		for i := 1; i < st.QuarantineLevel && d < p.QuarantineMax; i++ {
			d *= 2
		}
		d = min(d, p.QuarantineMax)
		st.QuarantineUntil = now.Add(d)
		st.Flaps = nil
		w.verdict, st.Verdict = status.Quarantined, status.Quarantined
		res.Events = append(res.Events, Event{Kind: EventQuarantined, ID: w.in.ID, At: now,
			Detail: fmt.Sprintf("more than %d eligibility transitions in %v: quarantined for %v (level %d)",
				p.FlapLimit, p.FlapWindow, d, st.QuarantineLevel)})
		healthy = false
	}
	if !healthy && (w.prev.HealthEligible || !w.prev.Seen) {
		st.FailingSince = now
	}
	st.HealthEligible = healthy
	st.Seen = true
	st.Lifecycle = w.in.Lifecycle
}

// finish computes the published weight, flags and reasons, and records
// publication in the state.
func finish(p Policy, w *work, now time.Time) InstanceResult {
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
	if w.in.Lifecycle != status.Ready {
		r.Reasons = append(r.Reasons, "lifecycle "+w.in.Lifecycle.String())
	}
	if w.verdict == status.Quarantined {
		r.Reasons = append(r.Reasons, "quarantined until "+st.QuarantineUntil.UTC().Format(time.RFC3339))
	}
	r.Reasons = append(r.Reasons, w.withdraw...)
	r.Reasons = append(r.Reasons, w.notes...)
	if w.verdict == status.Unknown {
		r.Reasons = append(r.Reasons, "no fresh evidence (silence is unknown)")
	}
	if w.pub {
		if !w.prev.Published {
			st.EligibleSince = now
		}
		var slow bool
		r.Weight, slow = Weight(p, w.in.BaseWeight, st.EligibleSince, w.depLow, now)
		if slow {
			flags |= status.SlowStart
			r.Reasons = append(r.Reasons, "slow start")
		}
		flags |= status.Eligible
		if flags.Has(status.HealthDisregarded) {
			// First: it is why the instance is served at all.
			r.Reasons = slices.Insert(r.Reasons, 0, "health disregarded (service below its minimum healthy fraction)")
		}
		if flags.Has(status.WithdrawalDeferred) {
			r.Reasons = append(r.Reasons, "withdrawal deferred by the shrink cap")
		}
	}
	st.Published = w.pub
	r.Flags = flags
	return r
}

// Weight is the published weight of an eligible instance (SPEC §2): its
// base weight (0 means 100, at most 65535), rising linearly from 10% to
// 100% over p.SlowStart from eligibleSince, times
// p.SharedDependencyFactor when a shared dependency is failing or
// degraded; never below 1. slow reports whether slow start still applies.
// p must have its defaults (WithDefaults). The status table builders of
// every node call it each rebuild, so that weights keep rising between
// the evaluator's commits.
func Weight(p Policy, base int, eligibleSince time.Time, depLow bool, now time.Time) (weight int, slow bool) {
	if base <= 0 {
		base = 100
	}
	base = min(base, 65535)
	f := 1.0
	if age := now.Sub(eligibleSince); age < p.SlowStart {
		f = 0.1 + 0.9*max(0, float64(age))/float64(p.SlowStart)
		slow = true
	}
	if depLow {
		f *= p.SharedDependencyFactor
	}
	return min(base, max(1, int(math.Round(float64(base)*f)))), slow
}

func transitionReason(r InstanceResult) string {
	for _, s := range r.Reasons {
		if s != "slow start" {
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
