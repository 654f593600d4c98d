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
	st       InstanceState // being built; its Classes, Report and Recent are in cls, rep and rec
	cls      [numSampleClasses]ClassState
	rep      ReportState
	rec      Recent
	fresh    bool     // any fresh evidence
	withdraw []string // reasons the evidence withdraws it
	notes    []string // other reasons (degraded, lease, …)
	hard     bool     // a hard failure is behind the withdrawal
	depLow   bool     // shared dependency factor applies
	outLow   bool     // outcome factor applies
	// outcome: the outcome class is behind the withdrawal (a candidate
	// for the max_ejection_percent cap when it is the only reason).
	outcome  bool
	degraded bool
	leaseExp bool
	expired  bool // past the lease's hard expiry: withdrawn uncapped
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
	var e Evaluator
	return e.Evaluate(p, instances, evidence, prev, now)
}

// Evaluator is Evaluate with working memory kept from one call to the
// next, for a loop that evaluates many services every round: a round
// then allocates nothing per instance once the Evaluator has seen the
// largest service. Result.Instances is the Evaluator's own, valid until
// its next call. The zero Evaluator is ready; it is not safe for
// concurrent use.
type Evaluator struct {
	ins     []Instance
	works   []work
	ptrs    []*work
	cands   []*work
	known   map[string]bool
	results []InstanceResult
	samples []Sample
	reasons []string
	// spare holds the Instances lists of recycled States, emptied;
	// observers and flaps their instances' lists, emptied; classes,
	// reports and recents their instances' class, report and recent
	// states.
	spare     [][]InstanceState
	observers [][]ObserverState
	flaps     [][]time.Time
	classes   []*ClassState
	reports   []*ReportState
	recents   []*Recent
}

// maxSpare bounds each of an Evaluator's lists of recycled memory.
const maxSpare = 1 << 16

// Recycle gives the Evaluator back a State that nobody reads any more (a
// service's previous State, once the next one has replaced it), so that
// a later call reuses its memory. The State must not be used afterwards.
func (e *Evaluator) Recycle(s State) {
	for i := range s.Instances {
		st := &s.Instances[i]
		if r := st.Recent; r != nil {
			if cap(r.Observers) > 0 && len(e.observers) < maxSpare {
				e.observers = append(e.observers, r.Observers[:0])
			}
			if cap(r.Flaps) > 0 && len(e.flaps) < maxSpare {
				e.flaps = append(e.flaps, r.Flaps[:0])
			}
			if len(e.recents) < maxSpare {
				*r = Recent{}
				e.recents = append(e.recents, r)
			}
		}
		for _, c := range st.Classes {
			if c != nil && len(e.classes) < maxSpare {
				e.classes = append(e.classes, c)
			}
		}
		if st.Report != nil && len(e.reports) < maxSpare {
			e.reports = append(e.reports, st.Report)
		}
	}
	if cap(s.Instances) == 0 {
		return
	}
	clear(s.Instances)
	if len(e.spare) >= maxSpareLists {
		// The oldest goes: the lists kept follow the sizes of the
		// services evaluated last.
		copy(e.spare, e.spare[1:])
		e.spare = e.spare[:len(e.spare)-1]
	}
	e.spare = append(e.spare, s.Instances[:0])
}

// giveBack keeps r's lists, which no State holds, for reuse.
func (e *Evaluator) giveBack(r Recent) {
	if cap(r.Observers) > 0 && len(e.observers) < maxSpare {
		e.observers = append(e.observers, r.Observers[:0])
	}
	if cap(r.Flaps) > 0 && len(e.flaps) < maxSpare {
		e.flaps = append(e.flaps, r.Flaps[:0])
	}
}

// maxSpareLists bounds the Instances lists an Evaluator keeps for reuse.
const maxSpareLists = 64

// instances returns an empty list for n states: the smallest of the
// spare lists that holds n with little room to spare (an eighth), or a
// new one of n. A State keeps its list for as long as it lives, so room
// it does not use is memory an instance: a list is never handed to a
// State smaller than it was made for, and lists sized by a large service,
// or by a service that has since shrunk, do not pile up in the States of
// small ones.
func (e *Evaluator) instances(n int) []InstanceState {
	if n == 0 {
		return nil
	}
	best := -1
	for i, l := range e.spare {
		if c := cap(l); c >= n && c <= n+n/8 && (best < 0 || c < cap(e.spare[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]InstanceState, 0, n)
	}
	l := e.spare[best]
	last := len(e.spare) - 1
	e.spare[best], e.spare[last] = e.spare[last], nil
	e.spare = e.spare[:last]
	return l
}

// take returns a pointer to a copy of v: one of free's, or a new one.
func take[T any](free *[]*T, v T) *T {
	var p *T
	if k := len(*free); k > 0 {
		p, *free = (*free)[k-1], (*free)[:k-1]
	} else {
		p = new(T)
	}
	*p = v
	return p
}

// cloneInto copies a previous State's list into one taken from free (a
// recycled list, emptied), or a new one when free has none.
func cloneInto[T any](free *[][]T, from []T) []T {
	if len(from) == 0 {
		return nil
	}
	if k := len(*free); k > 0 {
		buf := (*free)[k-1]
		*free = (*free)[:k-1]
		return append(buf, from...)
	}
	return append(make([]T, 0, len(from)+1), from...)
}

// Evaluate is the package's Evaluate, reusing e's memory.
func (e *Evaluator) Evaluate(p Policy, instances []Instance, evidence map[string][]Sample, prev State, now time.Time) (Result, State) {
	p = p.WithDefaults()
	res := Result{At: now, Instances: e.results[:0]}
	next := State{Shrink: prev.Shrink}

	// Instances in id order; of duplicates, the highest incarnation wins.
	ins := append(e.ins[:0], instances...)
	slices.SortStableFunc(ins, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(b.Incarnation, a.Incarnation))
	})
	ins = slices.CompactFunc(ins, func(a, b Instance) bool { return a.ID == b.ID })
	e.ins = ins
	next.Instances = e.instances(len(ins))

	if e.known == nil {
		e.known = make(map[string]bool, len(ins))
	}
	known := e.known
	clear(known)
	if cap(e.works) < len(ins) {
		e.works = make([]work, len(ins))
	}
	works := e.works[:len(ins)]
	ws := e.ptrs[:0]
	j := 0 // prev.Instances[j] is the first state whose id is not below in's
	for i, in := range ins {
		known[in.ID] = true
		w := &works[i]
		*w = work{in: in, withdraw: w.withdraw[:0], notes: w.notes[:0]}
		for j < len(prev.Instances) && prev.Instances[j].ID < in.ID {
			j++
		}
		if j < len(prev.Instances) && prev.Instances[j].ID == in.ID && prev.Instances[j].Incarnation == in.Incarnation {
			w.prev = prev.Instances[j]
		} else {
			w.prev = InstanceState{Incarnation: in.Incarnation}
		}
		w.st = w.prev
		w.st.ID = in.ID
		w.st.Classes, w.st.Report, w.st.Recent = [numSampleClasses]*ClassState{}, nil, nil
		for c := range w.cls {
			w.cls[c] = w.prev.Class(Class(c))
		}
		w.rep = w.prev.ReportState()
		w.rec = Recent{Flaps: cloneInto(&e.flaps, w.prev.Flaps()), Observers: cloneInto(&e.observers, w.prev.Observers())}
		res.Discarded += consume(p, &w.rec, &w.cls, in, evidence[in.ID], now, &e.samples)
		judge(p, w, now)
		ws = append(ws, w)
	}
	e.ptrs = ws
	capEjections(p, ws)
	for _, w := range ws {
		flap(p, w, now, &res)
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
	candidates := e.cands[:0]
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
		case w.prev.Published && !w.expired:
			candidates = append(candidates, w) // a withdrawal: capped
		default:
			w.pub = false // a hard expiry, like a drain, is not capped
		}
	}
	slices.SortFunc(candidates, func(a, b *work) int {
		if a.hard != b.hard {
			if a.hard {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.st.FailingSince, b.st.FailingSince), cmp.Compare(a.in.ID, b.in.ID))
	})
	// The cap counts net loss (SPEC §2): the view may not fall below its
	// floor, Base less max(1, ⌊ShrinkCap × Base⌋), so an instance that
	// came back (or a new one) makes room for a withdrawal. The
	// candidates in order are withdrawn while the floor holds; the rest
	// wait, published, for room.
	kept := 0
	for _, w := range ws {
		if w.pub && w.in.Lifecycle == status.Ready {
			kept++
		}
	}
	floor := sh.Base - max(1, int(math.Floor(p.ShrinkCap*float64(sh.Base))))
	withdraw := len(candidates) - min(len(candidates), max(0, floor-kept))
	if sh.Base == 0 {
		// The window opened on an empty view (a fresh evaluator, or a
		// service with nothing published): there is no floor to hold,
		// so it allows one withdrawal, as a window always does.
		withdraw = min(len(candidates), max(0, 1-sh.Used))
	}
	for i, w := range candidates {
		if i < withdraw {
			sh.Used++
			w.pub = false
			continue
		}
		w.pub = true
		w.flags |= status.WithdrawalDeferred
	}

	// Weights, results, transitions.
	arena := e.reasons[:0]
	for _, w := range ws {
		r := finish(p, w, now, &arena)
		res.Instances = append(res.Instances, r)
		from := Position{Eligible: w.prev.Published, Verdict: w.prev.Verdict}
		to := Position{Eligible: r.Eligible, Verdict: r.Verdict}
		if from != to || !w.prev.Seen {
			res.Transitions = append(res.Transitions, Transition{
				ID: w.in.ID, Incarnation: w.in.Incarnation, From: from, To: to,
				Reason: transitionReason(r), Evidence: r.Evidence, At: now,
			})
		}
		st := w.st
		for c, cs := range w.cls {
			if cs != (ClassState{}) {
				st.Classes[c] = take(&e.classes, cs)
			}
		}
		if w.rep != (ReportState{}) {
			st.Report = take(&e.reports, w.rep)
		}
		if len(w.rec.Flaps) > 0 || len(w.rec.Observers) > 0 {
			st.Recent = take(&e.recents, w.rec)
		} else {
			// Empty, but perhaps with room: the next evaluation's lists.
			e.giveBack(w.rec)
		}
		next.Instances = append(next.Instances, st)
	}
	e.cands = candidates[:0]
	e.results = res.Instances
	e.reasons = arena
	return res, next
}

// consume feeds an instance's new samples, in a fixed order, into its
// class states, and returns how many it discarded.
// cls holds st's class states.
func consume(p Policy, st *Recent, cls *[numSampleClasses]ClassState, in Instance, samples []Sample, now time.Time, buf *[]Sample) int {
	discarded := 0
	ss := (*buf)[:0]
	defer func() { *buf = ss[:0] }()
	for _, s := range samples {
		switch {
		case s.Class >= numSampleClasses, s.At.After(now),
			s.Incarnation != 0 && s.Incarnation != in.Incarnation:
			discarded++
		case s.Pending:
			observeSample(p, st, s)
		case !s.At.After(cls[s.Class].Last.At):
			// At or before the class's watermark: consumed already, or
			// held back behind another observer's later sample (a
			// refusal is not held back). It is no news for the class,
			// but it may be its observer's latest: whether probers
			// disagree, and whether callers reach their quorum, is
			// judged from every observer's latest.
			observeSample(p, st, s)
		default:
			ss = append(ss, s)
		}
	}
	slices.SortFunc(ss, func(a, b Sample) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Observer, b.Observer),
			cmpBool(a.OK, b.OK), cmpBool(b.Hard, a.Hard),
			cmp.Compare(a.Successes, b.Successes), cmp.Compare(a.Failures, b.Failures), cmp.Compare(a.Timeouts, b.Timeouts))
	})
	var outcomes *Sample // the latest outcome sample consumed
	for i, s := range ss {
		if s.Class == ClassOutcome {
			// Each caller's window is its own judgement; the class
			// hears, once per evaluation, whether the callers reach
			// their quorum (below).
			if observeSample(p, st, s) {
				outcomes = &ss[i]
			}
			continue
		}
		ok := observeSample(p, st, s)
		feed(p, &cls[s.Class], EvidenceRef{Class: s.Class, Observer: s.Observer, At: s.At}, ok, s.Hard)
	}
	if outcomes != nil {
		failing, reporting := outcomeQuorum(p, st, outcomes.At)
		met := quorumMet(p, failing, reporting)
		feed(p, &cls[ClassOutcome], EvidenceRef{Class: ClassOutcome, Observer: outcomes.Observer, At: outcomes.At}, !met, false)
	}
	keep := max(p.Freshness, p.OutcomeWindow)
	st.Observers = slices.DeleteFunc(st.Observers, func(o ObserverState) bool { return now.Sub(o.At) > keep })
	return discarded
}

// observeSample records s as its observer's latest, if it is, and
// returns whether it passed (a probe) or counts at all (an outcome window
// with calls).
func observeSample(p Policy, st *Recent, s Sample) bool {
	if s.Class == ClassOutcome {
		n := s.Successes + s.Failures + s.Timeouts
		if n <= 0 {
			return false
		}
		fail := float64(s.Failures+s.Timeouts) / float64(n)
		observe(st, ObserverState{Class: ClassOutcome, Observer: s.Observer, At: s.At, OK: fail <= p.FailureThreshold})
		return true
	}
	ok := s.OK && !s.Hard
	observe(st, ObserverState{Class: s.Class, Observer: s.Observer, At: s.At, OK: ok})
	return ok
}

// maxObservers bounds Recent.Observers: the callers and probers
// heard from within the windows, the stalest dropped first.
const maxObservers = 32

// observe records o as its observer's latest sample in its class.
func observe(st *Recent, o ObserverState) {
	for i := range st.Observers {
		x := &st.Observers[i]
		if x.Class == o.Class && x.Observer == o.Observer {
			if o.At.After(x.At) {
				*x = o
			}
			return
		}
	}
	if len(st.Observers) >= maxObservers {
		oldest := 0
		for i, x := range st.Observers {
			if x.At.Before(st.Observers[oldest].At) {
				oldest = i
			}
		}
		st.Observers = slices.Delete(st.Observers, oldest, oldest+1)
	}
	st.Observers = append(st.Observers, o)
}

// disagreement returns, when the probe class is failing, an observer whose
// latest fresh probe passed no earlier than one check interval before the
// newest fresh failure of another observer (SPEC §2: two probers that
// disagree degrade the instance, they do not withdraw it), with that
// failing observer; empty strings when the probers agree.
func disagreement(p Policy, st *Recent, now time.Time) (passed, failed string) {
	var newest ObserverState
	for _, o := range st.Observers {
		if o.Class == ClassProbe && !o.OK && now.Sub(o.At) <= p.Freshness && o.At.After(newest.At) {
			newest = o
		}
	}
	if newest.Observer == "" {
		return "", ""
	}
	for _, o := range st.Observers {
		if o.Class == ClassProbe && o.OK && o.Observer != newest.Observer && now.Sub(o.At) <= p.Freshness &&
			!o.At.Before(newest.At.Add(-p.CheckInterval)) {
			return o.Observer, newest.Observer
		}
	}
	return "", ""
}

// quorumMet reports whether failing callers of reporting ones make the
// outcome quorum (SPEC §2): at least p.OutcomeQuorum, and at least a
// third of those that reported.
func quorumMet(p Policy, failing, reporting int) bool {
	return failing >= p.OutcomeQuorum && 3*failing >= reporting
}

// outcomeQuorum counts the callers whose latest outcome window within
// OutcomeWindow reports the instance failing, and all those that
// reported on it there.
func outcomeQuorum(p Policy, st *Recent, now time.Time) (failing, reporting int) {
	for _, o := range st.Observers {
		if o.Class == ClassOutcome && now.Sub(o.At) <= p.OutcomeWindow {
			reporting++
			if !o.OK {
				failing++
			}
		}
	}
	return failing, reporting
}

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

// feed runs one sample through a class's score and hysteresis.
func feed(p Policy, c *ClassState, ref EvidenceRef, ok, hard bool) {
	fail := 0.0
	if !ok {
		fail = 1
	}
	if !c.Last.At.IsZero() {
		d := math.Pow(0.5, float64(ref.At.Sub(c.Last.At))/float64(p.ScoreHalfLife))
		c.FailMass *= d
		c.TotalMass *= d
	}
	c.FailMass += fail
	c.TotalMass++
	c.Last, c.LastOK = ref, ok
	if ok {
		if c.ConsecutiveOK == 0 {
			c.RunStart = ref.At
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
		case hard && ref.Class == ClassProbe:
			why = "hard failure (connection refused)"
		case c.ConsecutiveFail >= p.WithdrawAfter:
			why = fmt.Sprintf("%d consecutive failures", c.ConsecutiveFail)
		case !ok && c.TotalMass >= p.ScoreMinWeight && c.Score() > p.FailureThreshold:
			why = fmt.Sprintf("failure score %.2f above %.2f", c.Score(), p.FailureThreshold)
		}
		if why != "" {
			if ref.Class == ClassOutcome {
				why = "a quorum of callers report failures: " + why
			}
			c.Failing, c.FailingSince, c.Hard, c.Why, c.Trigger = true, ref.At, hard, why, ref
		}
	} else if ok && c.ConsecutiveOK >= p.AdmitAfter && ref.At.Sub(c.RunStart) >= p.AdmitMin {
		// Re-admitted: the score starts afresh so old failures do not
		// withdraw the instance again on its first miss.
		c.Failing, c.Hard, c.Why, c.Trigger = false, false, "", ref
		c.FailMass, c.TotalMass = 0, 0
	}
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
	for i := range w.cls {
		c := &w.cls[i]
		if isFresh(c.Last.At) {
			w.fresh = true
			if w.evidence.At.Before(c.Last.At) {
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
			case failing > 0:
				w.degraded, w.outLow = true, true
				w.notes = append(w.notes, fmt.Sprintf("%d of %d callers report failures, short of the quorum (%d, and a third): weight lowered",
					failing, reporting, p.OutcomeQuorum))
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
		w.withdraw = append(w.withdraw, fmt.Sprintf("%v failing: %s", Class(i), c.Why))
		w.hard = w.hard || c.Hard
		w.evidence = c.Trigger
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
		r.Weight, slow = Weight(p, w.in.BaseWeight, st.EligibleSince.Time(), flags, now)
		if slow {
			flags |= status.SlowStart
			reasons = append(reasons, "slow start")
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
// 100% over p.SlowStart from eligibleSince, times
// p.SharedDependencyFactor when flags has status.DependencyDegraded and
// p.OutcomeWeightFactor when it has status.OutcomeDegraded; never below
// 1. slow reports whether slow start still applies.
// p must have its defaults (WithDefaults). The status table builders of
// every node call it each rebuild, so that weights keep rising between
// the evaluator's commits.
func Weight(p Policy, base int, eligibleSince time.Time, flags Flags, now time.Time) (weight int, slow bool) {
	if base <= 0 {
		base = 100
	}
	base = min(base, 65535)
	f := 1.0
	if age := now.Sub(eligibleSince); age < p.SlowStart {
		f = 0.1 + 0.9*max(0, float64(age))/float64(p.SlowStart)
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
