package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// ErrCapacity is an evacuation refused because the rest of a service
// could not carry it; nothing was changed.
var ErrCapacity = errors.New("store: not enough capacity")

// evacStep is the leader's move of one evacuation, in an
// opEvacuationStep entry: an expiry, a step of its return, a pause or
// a resumption, or its end once the zone is back.
type evacStep struct {
	ID uint64 `json:"id"`
	// Expire ends an evacuation at its expiry: its return begins.
	Expire bool `json:"expire,omitempty"`
	// Returned and Paused are the return's progress as of the entry's
	// time; Reason says why it pauses.
	Returned wire.Duration `json:"returned,omitempty"`
	Paused   bool          `json:"paused,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	// Done removes the evacuation: the zone is back for every service.
	Done bool `json:"done,omitempty"`
}

// Shifted is signalled when an applied log entry has started or
// renewed an evacuation: traffic must leave the zone. The one reader,
// the node's table builder, then rebuilds its table from the replica at
// once rather than at its next round, so that an evacuation reaches DNS
// and xDS within a second (issue 30). An entry that ends one or steps,
// pauses or resumes a return moves traffic back, an admission: each
// node's next round (a second at most) publishes it, so that the
// servers' fan-outs of a step do not all fall at the same moment
// (docs/decisions.md, "A return's steps wait for each node's round").
func (s *Store) Shifted() <-chan struct{} { return s.shifts }

// ShiftRevision is the revision of the last applied entry (or installed
// snapshot) that moved an evacuation: a table built from a replica at
// that revision or later holds the shift.
func (s *Store) ShiftRevision() uint64 {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.fsm.shiftRev
}

// Evacuations returns the evacuations in force (evacuated, or their
// zone returning), oldest first.
func (s *Store) Evacuations() []wire.Evacuation {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.fsm.evacuationList()
}

func (f *fsm) evacuationList() []wire.Evacuation {
	out := make([]wire.Evacuation, 0, len(f.evacs))
	for _, e := range f.evacs {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b wire.Evacuation) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Evacuate starts an evacuation of req's scope, or, with req.Undo, ends
// the one of exactly that scope: its zone starts to return. Starting one
// of a scope already evacuated renews its reason and expiry; starting
// one of a scope returning sends the zone back to evacuated. An
// evacuation the rest of a service could not carry is refused with
// ErrCapacity, and one past a service's disruption budget with
// ErrBudget, unless req.Force.
func (s *Store) Evacuate(ctx context.Context, actor string, req wire.EvacuateRequest) (wire.Evacuation, error) {
	if err := req.Validate(); err != nil {
		return wire.Evacuation{}, err
	}
	// A ready leader refuses what the FSM would refuse without a log
	// entry, so that a refusal leaves the revision alone; before it has
	// caught up, the FSM alone decides.
	if s.LeaderReady() {
		s.fsm.mu.RLock()
		_, err := s.fsm.checkEvacuate(req, true)
		s.fsm.mu.RUnlock()
		if err != nil {
			return wire.Evacuation{}, err
		}
	}
	r, err := s.propose(ctx, command{Op: opEvacuate, Actor: actor, Evacuate: &req, Budget: true})
	if err != nil {
		return wire.Evacuation{}, err
	}
	return r.Evacuation, nil
}

// evacuate applies an opEvacuate entry.
func (f *fsm) evacuate(index uint64, c command) (wire.Evacuation, error) {
	req := c.Evacuate
	if req == nil {
		return wire.Evacuation{}, invalid("evacuate", "is required")
	}
	cur, err := f.checkEvacuate(*req, c.Budget)
	if err != nil {
		return wire.Evacuation{}, err
	}
	switch {
	case req.Undo && cur.EndedAt.IsZero():
		f.endEvacuation(cur, c.At, c.Actor, fmt.Sprintf("undone by %s", c.Actor))
		f.shifted = true
		return *cur, nil
	case req.Undo:
		f.rebase(cur, c.At, c.Actor)
		return *cur, nil
	}
	expires := req.Expires.D()
	if expires == 0 {
		expires = wire.DefaultEvacuationExpiry
	}
	e := wire.Evacuation{ID: index, Region: req.Region, Zone: req.Zone, Namespace: req.Namespace, Service: req.Service,
		To: req.To, Capacity: req.Capacity, Reason: req.Reason, Actor: c.Actor, StartedAt: c.At, ExpiresAt: c.At.Add(expires)}
	if cur != nil && cur.EndedAt.IsZero() {
		// Renewed: the same evacuation, with its new reason and expiry.
		e.ID, e.StartedAt, e.Forced = cur.ID, cur.StartedAt, cur.Forced
	}
	var short, over []string
	switch {
	case e.To != "":
		// A failover's capacity is the other region's, which only the
		// API's server sees (its table holds that region's view): it
		// checked, and says what it found in Capacity; forced past it,
		// Force says so.
		e.Forced = e.Forced || req.Force
	default:
		short = f.shortfall(e, cur)
		if c.Budget {
			over = f.overBudget(e)
		}
	}
	e.Forced = e.Forced || len(short) > 0 || len(over) > 0
	if cur != nil {
		delete(f.evacs, cur.ID)
	}
	f.evacs[e.ID] = &e
	f.shifted, f.shiftNow = true, true
	why := "started"
	switch {
	case cur != nil && cur.EndedAt.IsZero():
		why = "renewed"
	case cur != nil:
		why = "started again while the zone was returning"
	}
	reason := fmt.Sprintf("%s %s by %s until %s", e.Scope(), why, c.Actor, e.ExpiresAt.Format(time.RFC3339))
	if e.Reason != "" {
		reason += ": " + e.Reason
	}
	if len(short) > 0 {
		reason += " (forced past the capacity check: " + listShort(short) + ")"
	}
	if len(over) > 0 {
		reason += " (forced past the disruption budget: " + listShort(over) + ")"
	}
	if e.Capacity != "" {
		reason += " (" + e.Capacity + ")"
	}
	f.record(wire.Event{At: c.At, Kind: wire.EventEvacuated, Namespace: e.Namespace, Service: e.Service,
		To: "evacuated", Reason: reason, Actor: c.Actor})
	return e, nil
}

// checkEvacuate refuses what an opEvacuate entry of req must not do,
// with the error the FSM gives, and returns the evacuation of exactly
// req's scope, if any. With judge (the entry's Budget flag; entries
// written before budgets judged evacuations carry none, and replay as
// they were applied) an evacuation past a service's disruption budget
// is refused with ErrBudget.
func (f *fsm) checkEvacuate(req wire.EvacuateRequest, judge bool) (*wire.Evacuation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var cur *wire.Evacuation
	for _, e := range f.evacs {
		if req.Covers(*e) {
			cur = e
		}
	}
	if req.Undo {
		if cur == nil {
			return nil, fmt.Errorf("%s is not evacuated (see `cairn evacuations`): %w", req, ErrNotFound)
		}
		return cur, nil
	}
	if req.Service != "" {
		if _, ok := f.services[wire.ServiceKey{Namespace: req.Namespace, Name: req.Service}]; !ok {
			return nil, fmt.Errorf("service %s/%s is not defined: %w", req.Namespace, req.Service, ErrNotFound)
		}
	}
	if cur == nil && len(f.evacs) >= MaxEvacuations {
		// Every table refresh weighs each instance against each
		// evacuation: their number is bounded, force or not.
		return nil, fmt.Errorf("evacuating %s refused: %d evacuations are in force, the most a cluster keeps; undo one or let it end first: %w",
			req, len(f.evacs), ErrCapacity)
	}
	if req.Force {
		return cur, nil
	}
	e := wire.Evacuation{Region: req.Region, Zone: req.Zone, Namespace: req.Namespace, Service: req.Service, To: req.To}
	n := 0
	f.eachInScope(e, func(*wire.Service, *record) { n++ })
	if n == 0 {
		// A zone named wrong would otherwise be "evacuated" and the
		// operator none the wiser.
		return nil, fmt.Errorf("%s holds no instance; --force evacuates it all the same: %w", req, ErrNotFound)
	}
	if req.To != "" {
		return cur, nil // the API checked the other region's capacity (evacuate)
	}
	if short := f.shortfall(e, cur); len(short) > 0 {
		return nil, fmt.Errorf("evacuating %s refused: %s; --force overrides: %w", req, listShort(short), ErrCapacity)
	}
	if !judge {
		return cur, nil
	}
	if over := f.overBudget(e); len(over) > 0 {
		return nil, fmt.Errorf("evacuating %s refused: %s; --force overrides: %w", req, listShort(over), ErrBudget)
	}
	return cur, nil
}

// MaxEvacuations is how many evacuations may be in force at once
// (evacuated or returning). Each table build weighs every instance
// against every evacuation, and a registrar may start them (of its
// services, forced): without a bound, a token could make every build
// as slow as it liked. An operator evacuates zones, a handful at most.
const MaxEvacuations = 64

// maxShortListed is how many services an evacuation's refusal or forced
// start names: a zone of thousands of single-zone services would
// otherwise make an error, an audit event and a log entry of hundreds
// of kilobytes.
const maxShortListed = 5

// listShort joins the first maxShortListed shortfalls and counts the
// rest.
func listShort(short []string) string {
	if len(short) <= maxShortListed {
		return strings.Join(short, "; ")
	}
	return fmt.Sprintf("%s; and %d more service(s)", strings.Join(short[:maxShortListed], "; "), len(short)-maxShortListed)
}

// shortfall lists the services in e's scope whose eligible instances
// outside every evacuated zone (e's included, old's left out: e
// replaces it) would fall below their minimum healthy fraction of the
// service's ready instances, at least one: how many would be left and
// how many are needed.
func (f *fsm) shortfall(e wire.Evacuation, old *wire.Evacuation) []string {
	others := make([]*wire.Evacuation, 0, len(f.evacs))
	for _, o := range f.evacs {
		if o != old && o.EndedAt.IsZero() {
			others = append(others, o)
		}
	}
	var out []string
	keys := f.instances.services(nil)
	slices.SortFunc(keys, func(a, b wire.ServiceKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		if e.Service != "" && (k.Namespace != e.Namespace || k.Name != e.Service) {
			continue
		}
		svc := f.services[k]
		if svc == nil {
			continue
		}
		ready, inZone, left := 0, 0, 0
		for _, in := range f.instances.svcs[k] {
			if in.lifecycle != status.Ready {
				continue
			}
			ready++
			region, zone := in.origin.region, in.origin.zone
			if e.Covers(k.Namespace, k.Name, region, zone) {
				inZone++
				continue
			}
			if !in.eligible() || slices.ContainsFunc(others, func(o *wire.Evacuation) bool {
				return o.Covers(k.Namespace, k.Name, region, zone)
			}) {
				continue
			}
			left++
		}
		if inZone == 0 {
			continue
		}
		frac := wire.DefaultMinHealthyFraction
		if p := svc.Policy.MinHealthyFraction; p != nil {
			frac = *p
		}
		need := wire.CapacityNeeded(frac, ready)
		if left < need {
			out = append(out, fmt.Sprintf("%s would keep %d eligible instance(s) outside the zone and needs %d (min_healthy_fraction %g of %d ready)",
				k, left, need, frac, ready))
		}
	}
	return out
}

// eligible reports whether the record's instance is in rotation on its
// own health as the store knows it: its evaluator's last verdict (not
// one that serves it only because the guard disregards health), or,
// before the first, ready (unknown is eligible, SPEC §0.3).
func (r *record) eligible() bool {
	if r.lifecycle != status.Ready {
		return false
	}
	if v := r.verdict; v != nil && v.Incarnation() == r.incarnation {
		return v.Eligible() && !v.Flags().Has(status.HealthDisregarded)
	}
	return true
}

// endEvacuation ends e at at: its zone starts to return, from the
// number of instances withdrawn there now.
func (f *fsm) endEvacuation(e *wire.Evacuation, at time.Time, by, why string) {
	e.EndedAt, e.EndedBy, e.ReturnedAt, e.Returned = at, by, at, 0
	e.Baseline, e.Paused, e.PauseReason = f.withdrawnIn(*e), false, ""
	f.record(wire.Event{At: at, Kind: wire.EventEvacuationEnded, Namespace: e.Namespace, Service: e.Service,
		From: "evacuated", To: "returning", Reason: fmt.Sprintf("%s %s; the zone returns over its services' shift_back", e.Scope(), why),
		Actor: by})
}

// rebase is an undo of an evacuation already returning: the return
// resumes from where it is, counting its pause rule from the instances
// withdrawn now. It is how an operator moves on a return held by a
// failure the zone will not recover from (an instance that stays down).
func (f *fsm) rebase(e *wire.Evacuation, at time.Time, by string) {
	was := e.State()
	if !e.Paused {
		e.Returned += wire.Duration(max(at.Sub(e.ReturnedAt), 0))
	}
	e.ReturnedAt, e.Baseline, e.Paused, e.PauseReason = at, f.withdrawnIn(*e), false, ""
	f.shifted = true
	f.record(wire.Event{At: at, Kind: wire.EventEvacuationPaused, Namespace: e.Namespace, Service: e.Service,
		From: was, To: "returning", Actor: by,
		Reason: fmt.Sprintf("%s: its return resumes at the undo of %s, counting from the %d instance(s) withdrawn now", e.Scope(), by, e.Baseline)})
}

// withdrawnIn counts the ready instances in e's scope that are not in
// rotation.
func (f *fsm) withdrawnIn(e wire.Evacuation) int { return f.scanScope(&e).withdrawn }

// eachInScope calls fn with every live instance in e's scope and its
// service.
func (f *fsm) eachInScope(e wire.Evacuation, fn func(*wire.Service, *record)) {
	visit := func(k wire.ServiceKey, m map[string]*record) {
		svc := f.services[k]
		if svc == nil {
			return
		}
		for _, in := range m {
			if in.lifecycle != status.Terminated && e.Covers(k.Namespace, k.Name, in.origin.region, in.origin.zone) {
				fn(svc, in)
			}
		}
	}
	if e.Service != "" {
		k := wire.ServiceKey{Namespace: e.Namespace, Name: e.Service}
		visit(k, f.instances.svcs[k])
		return
	}
	for k, m := range f.instances.svcs {
		visit(k, m)
	}
}

// holdReturns, on a new leader's takeover entry, keeps the time without
// a leader out of every return: a return counts from the last step the
// log holds up to silent (the last moment a leader was at work), then
// again from the takeover at since. Without it the new leader's first
// step would count the outage as return, and a long one would bring the
// zone back whole at once (SPEC §0.5: recovery is the dangerous event).
func (f *fsm) holdReturns(since, silent time.Time) {
	for _, e := range f.evacs {
		if e.EndedAt.IsZero() || e.Paused {
			continue
		}
		if !silent.IsZero() && silent.After(e.ReturnedAt) {
			e.Returned += wire.Duration(silent.Sub(e.ReturnedAt))
		}
		if since.After(e.ReturnedAt) {
			e.ReturnedAt = since
		}
	}
}

// stepEvacuations applies an opEvacuationStep entry: each step names
// its evacuation by id, and one whose evacuation is gone or has moved
// on (ended, renewed) is ignored.
func (f *fsm) stepEvacuations(c command) {
	for _, st := range c.EvacSteps {
		e := f.evacs[st.ID]
		if e == nil {
			continue
		}
		switch {
		case st.Expire:
			if e.EndedAt.IsZero() && !c.At.Before(e.ExpiresAt) {
				f.endEvacuation(e, c.At, "expiry", "expired (set at "+e.StartedAt.Format(time.RFC3339)+" by "+e.Actor+")")
				f.shifted = true
			}
			continue
		case e.EndedAt.IsZero():
			continue
		}
		if st.Returned < e.Returned {
			continue // an older leader's view
		}
		was := e.Paused
		e.Returned, e.ReturnedAt, e.Paused, e.PauseReason = st.Returned, c.At, st.Paused, st.Reason
		f.shifted = true
		switch {
		case st.Done:
			delete(f.evacs, e.ID)
			f.record(wire.Event{At: c.At, Kind: wire.EventEvacuationReturned, Namespace: e.Namespace, Service: e.Service,
				From: "returning", To: "returned", Reason: e.Scope() + " is back: its share of the traffic is whole again", Actor: c.Actor})
		case st.Paused && !was:
			f.record(wire.Event{At: c.At, Kind: wire.EventEvacuationPaused, Namespace: e.Namespace, Service: e.Service,
				From: "returning", To: "paused", Reason: e.Scope() + ": " + st.Reason, Actor: c.Actor})
		case !st.Paused && was:
			f.record(wire.Event{At: c.At, Kind: wire.EventEvacuationPaused, Namespace: e.Namespace, Service: e.Service,
				From: "paused", To: "returning", Reason: e.Scope() + ": its return resumes", Actor: c.Actor})
		}
	}
}

// evacuationSteps is the leader's look at the evacuations at now: the
// steps due (expiries, returns moved on, pauses and resumptions, ends).
// A return moves on in the log only when some service's share changes,
// it pauses or resumes, or it is done, so that a return of five minutes
// costs a few entries, not one a tick.
func (f *fsm) evacuationSteps(now time.Time) []evacStep {
	return f.evacuationStepsWith(now, f.scanScope)
}

// evacScan is what a return's step needs of its scope: the shift_back
// windows of its services and how many of its ready instances are
// withdrawn, as of the replica's revision rev.
type evacScan struct {
	rev       uint64
	windows   []time.Duration
	withdrawn int
}

// scanScope visits every live instance in e's scope: a millisecond or
// more at 100,000 instances, under the FSM's lock, so the leader keeps
// the answer until the replica moves (Store.scanEvacuation).
func (f *fsm) scanScope(e *wire.Evacuation) evacScan {
	sc := evacScan{rev: f.rev}
	f.eachInScope(*e, func(svc *wire.Service, in *record) {
		if w := svc.Policy.ShiftBackWindow(); !slices.Contains(sc.windows, w) {
			sc.windows = append(sc.windows, w)
		}
		if in.lifecycle == status.Ready && !in.eligible() {
			sc.withdrawn++
		}
	})
	return sc
}

// evacuationStepsWith is evacuationSteps with the scope's scan given.
func (f *fsm) evacuationStepsWith(now time.Time, scan func(*wire.Evacuation) evacScan) []evacStep {
	var out []evacStep
	for _, id := range f.sortedEvacIDs() {
		e := f.evacs[id]
		if e.EndedAt.IsZero() {
			if !now.Before(e.ExpiresAt) {
				out = append(out, evacStep{ID: id, Expire: true})
			}
			continue
		}
		sc := scan(e)
		windows, withdrawn := sc.windows, sc.withdrawn
		returned := e.Returned
		if !e.Paused {
			returned += wire.Duration(max(now.Sub(e.ReturnedAt), 0))
		}
		next := *e
		next.Returned = returned
		done, moved := true, false
		for _, w := range windows {
			done = done && next.Done(w)
			moved = moved || next.Share(w) != e.Share(w)
		}
		st := evacStep{ID: id, Returned: returned}
		switch {
		case withdrawn > e.Baseline:
			st.Paused = true
			st.Reason = fmt.Sprintf("its return pauses: %d of the zone's ready instances are withdrawn, %d were when it began", withdrawn, e.Baseline)
			if e.Paused && e.PauseReason == st.Reason {
				continue
			}
		case done:
			st.Done = true
		case !moved && !e.Paused:
			continue
		}
		out = append(out, st)
	}
	return out
}

func (f *fsm) sortedEvacIDs() []uint64 {
	ids := make([]uint64, 0, len(f.evacs))
	for id := range f.evacs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// scanEvacuation is fsm.scanScope, kept while the replica's revision
// holds still: a return of five minutes is looked at every tick, and its
// scope changes only with the log. Called by the housekeeping goroutine
// alone, under the FSM's read lock.
func (s *Store) scanEvacuation(e *wire.Evacuation) evacScan {
	if sc, ok := s.evacScans[e.ID]; ok && sc.rev == s.fsm.rev {
		return sc
	}
	if len(s.evacScans) > 64 {
		clear(s.evacScans) // ended evacuations' scans
	}
	sc := s.fsm.scanScope(e)
	s.evacScans[e.ID] = sc
	return sc
}

// stepEvacuationsNow commits the leader's due evacuation steps, if any.
func (s *Store) stepEvacuationsNow(ctx context.Context) error {
	now := s.now()
	s.fsm.mu.RLock()
	steps := s.fsm.evacuationStepsWith(now, s.scanEvacuation)
	s.fsm.mu.RUnlock()
	if len(steps) == 0 {
		return nil
	}
	if _, err := s.propose(ctx, command{Op: opEvacuationStep, At: now, Actor: "node:" + s.cfg.NodeID, EvacSteps: steps}); err != nil {
		return fmt.Errorf("stepping evacuations: %w", err)
	}
	return nil
}
