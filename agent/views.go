package agent

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// view is one service as the agent holds it: the last view the server
// sent and accepted (got), what the agent serves of it (served: got,
// with the withdrawals the client-side shrink cap defers put back), and
// when it came.
type view struct {
	name    string // "<svc>.<ns>", the resource name
	version string // the resource version got came in, for a resumed stream
	got     *agentview.View
	// served is got.Instances itself when the cap defers nothing: read
	// it, never write it.
	served []agentview.Instance
	// received is when got came; refreshed when the agent last knew got
	// to be the server's current view (a stream open and answered).
	received, refreshed time.Time
	// The shrink cap's window: when it opened, and the eligible
	// instances served then (its base).
	windowStart time.Time
	windowBase  int
	deferred    int // withdrawals held back by the cap in served
	// removed: the server removed the view; got is then empty, and the
	// view goes once the cap has let every instance go.
	removed bool
}

// ErrOlder is what applying a view older than the one held returns.
var ErrOlder = fmt.Errorf("agent: an older revision than the view held")

// accept checks that got may replace what v holds: a lower revision
// never replaces a higher one (SPEC §5), whichever server sent it.
func (v *view) accept(got *agentview.View) error {
	if v.got != nil && got.Revision < v.got.Revision {
		return fmt.Errorf("%w: %s at revision %d, holding %d", ErrOlder, v.name, got.Revision, v.got.Revision)
	}
	return nil
}

// acceptRemoval checks that a server's word that v does not exist, said
// from a table at store revision rev, may replace what v holds. A removal
// carries no version: it is as old as the table it comes from, and a
// table older than the view held predates it (a server behind, or one
// that has not built a table since the service was defined), so its word
// is refused as an older view is.
func (v *view) acceptRemoval(rev uint64) error {
	if v.got != nil && rev < v.got.Revision {
		return fmt.Errorf("%w: %s removed by a table at revision %d, holding %d", ErrOlder, v.name, rev, v.got.Revision)
	}
	return nil
}

// serve recomputes what v serves of got at now: got itself, unless that
// would shrink the set in rotation below what the shrink cap allows in
// the current window (counted from the most in rotation since it
// opened), in which case enough of the instances withdrawn
// (or gone) since stay in rotation, marked WithdrawalDeferred, with the
// entry they had, until a later window lets them go. Instances the view
// shows draining or terminated are never held back: drains are not
// capped (SPEC §2). It reports whether anything it serves changed.
func (v *view) serve(now time.Time) bool {
	got := v.got
	capFrac, window := got.Service.ShrinkCap, got.Service.ShrinkWindow
	if capFrac <= 0 || capFrac > 1 {
		capFrac = wire.DefaultShrinkCap // for a view that names none
	}
	if window <= 0 {
		window = wire.DefaultShrinkWindow
	}
	// A window opens on what is served: the first view has nothing to
	// shrink from.
	if v.served != nil && (v.windowStart.IsZero() || now.Sub(v.windowStart) >= window) {
		v.windowStart, v.windowBase = now, eligible(v.served)
	}
	// The base is the most in rotation since the window opened, not
	// only at its start: a view that grew from 2 to 10 within a window
	// (instances registered one by one) and then lost 9 in one step must
	// not lose them all at once. A rolling replacement (one out, one in)
	// never falls below the floor, so it is not held back.
	v.windowBase = max(v.windowBase, eligible(v.served))
	floor := 0
	if base := v.windowBase; base > 0 {
		floor = base - max(1, int(math.Floor(capFrac*float64(base))))
	}
	// What is served is got's own slice unless the cap holds
	// withdrawals back: most views are served as they came, and a copy
	// of every instance would be a fifth of what the agent holds.
	next := got.Instances
	if n := eligible(next); n < floor && v.served != nil {
		next = slices.Clone(next)
		// Those in rotation now that the view takes out, by id; each
		// keeps its served entry (its weight), marked deferred.
		byID := make(map[string]int, len(next))
		for i, in := range next {
			byID[in.ID] = i
		}
		need := floor - n
		for _, old := range v.served {
			if need == 0 {
				break
			}
			if !old.Eligible() {
				continue
			}
			i, present := byID[old.ID]
			if present && (next[i].Eligible() || next[i].Lifecycle >= status.Draining || next[i].Incarnation != old.Incarnation) {
				continue // still in, drained, or a new incarnation
			}
			keep := old
			keep.Flags |= status.WithdrawalDeferred
			if present {
				next[i] = keep
			} else {
				next = append(next, keep)
			}
			need--
		}
		slices.SortFunc(next, func(a, b agentview.Instance) int { return strings.Compare(a.ID, b.ID) })
	}
	changed := !slices.EqualFunc(next, v.served, sameInstance)
	v.served = next
	v.deferred = 0
	for _, in := range next {
		if in.Flags.Has(status.WithdrawalDeferred) && !gotHas(got, in) {
			v.deferred++
		}
	}
	return changed
}

// gotHas reports whether got itself has in, as it is (not deferred by
// the agent).
func gotHas(got *agentview.View, in agentview.Instance) bool {
	i, ok := slices.BinarySearchFunc(got.Instances, in.ID, func(a agentview.Instance, id string) int { return strings.Compare(a.ID, id) })
	return ok && got.Instances[i].Flags == in.Flags && got.Instances[i].Weight == in.Weight
}

// eligible counts the instances in rotation.
func eligible(ins []agentview.Instance) int {
	n := 0
	for i := range ins {
		if ins[i].Eligible() {
			n++
		}
	}
	return n
}

func sameInstance(a, b agentview.Instance) bool {
	return a.ID == b.ID && a.Incarnation == b.Incarnation && a.Region == b.Region && a.Zone == b.Zone &&
		a.Verdict == b.Verdict && a.Lifecycle == b.Lifecycle && a.Flags == b.Flags && a.Weight == b.Weight &&
		a.BaseWeight == b.BaseWeight && a.Shift == b.Shift && slices.Equal(a.Addrs, b.Addrs) && maps.Equal(a.Ports, b.Ports)
}

// build lays out the views (sorted by name) in w, the writer of the
// agent's status table, and publishes a table of them: the agent is a
// second publisher over the server's writer (status.Writer), fed by its
// views instead of a store replica, so that the DNS server's per-slot
// caches stay valid while an instance is unchanged. Instances past the
// table's capacity are left out and counted.
func build(w *status.Writer, views []*view, revision uint64) (dropped int, err error) {
	services := make([]status.ServiceInfo, len(views))
	for i, v := range views {
		services[i] = v.got.Service
	}
	w.Begin(revision, services)
	for i, v := range views {
		for j := range v.served {
			in := &v.served[j]
			if _, slot := w.Add(i, status.Instance{ID: in.ID, Incarnation: in.Incarnation, Region: in.Region, Zone: in.Zone,
				Info: &in.InstanceInfo, Verdict: in.Verdict, Lifecycle: in.Lifecycle, Flags: in.Flags,
				Weight: in.Weight, BaseWeight: in.BaseWeight, Shift: in.Shift}); slot < 0 {
				dropped++
			}
		}
	}
	w.End()
	_, err = w.Build(nil)
	return dropped, err
}
