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
	// draft is the committed verdict Unchanged builds to compare.
	draft wire.Health
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
