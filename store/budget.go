package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Disruption budgets (policy.max_unavailable, docs/decisions.md
// "Disruption budgets"). An instance that is not terminated is
// unavailable while it is starting or draining, or ready and withdrawn
// on evidence (its committed verdict for this incarnation is not
// health-eligible). A voluntary disruption, the drain or the
// deregistration of a ready instance that is available, is refused when
// it would make more of the service's instances unavailable than the
// budget allows; the drain or deregistration of an instance already
// unavailable is not a new disruption and always goes through. Failed
// probes and expiring leases count toward the budget and are never
// refused: they reach the store as verdicts and hard expiries, which are
// not judged here. An evacuation is a voluntary disruption too: a ready,
// available instance in a zone an evacuation holds counts as unavailable
// ("evacuated"), and an evacuation that would take a service past its
// budget is refused like a drain (overBudget).

// unavailable says whether r, not terminated, holds part of its
// service's budget on its own, and why.
func unavailable(r *record) (string, bool) {
	switch r.lifecycle {
	case status.Starting, status.Draining:
		return r.lifecycle.String(), true
	case status.Ready:
		if v := r.verdict; v != nil && v.incarnation == r.incarnation && !v.head.healthEligible {
			return v.head.verdict.String(), true
		}
	}
	return "", false
}

// whyUnavailable is unavailable, or, for a ready instance available on
// its own, "evacuated" when one of evacs covers it.
func whyUnavailable(r *record, evacs []*wire.Evacuation) (string, bool) {
	if why, ok := unavailable(r); ok || r.lifecycle != status.Ready {
		return why, ok
	}
	for _, e := range evacs {
		// A region's failover is not a disruption of the service: its
		// callers are served by another region, and the region's own
		// instances may be drained, replaced and mended meanwhile.
		if e.To == "" && e.Covers(r.svc.Namespace, r.svc.Name, r.origin.region, r.origin.zone) {
			return "evacuated", true
		}
	}
	return "", false
}

// evacuating lists the evacuations in force (not returning) that may
// cover service k.
func (f *fsm) evacuating(k wire.ServiceKey) []*wire.Evacuation {
	var out []*wire.Evacuation
	for _, e := range f.evacs {
		if e.EndedAt.IsZero() && (e.Service == "" || e.Namespace == k.Namespace && e.Service == k.Name) {
			out = append(out, e)
		}
	}
	return out
}

// budget is svc's disruption budget as the replica holds it.
func (f *fsm) budget(svc *wire.Service) wire.DisruptionBudget {
	return f.budgetWith(svc, f.evacuating(svc.Key()))
}

// budgetWith is svc's disruption budget with evacs the evacuations in
// force that hold part of it.
func (f *fsm) budgetWith(svc *wire.Service, evacs []*wire.Evacuation) wire.DisruptionBudget {
	d := wire.DisruptionBudget{MaxUnavailable: svc.Policy.MaxUnavailable.OrDefault(),
		Default: svc.Policy.MaxUnavailable == "", Unavailable: []wire.Unavailable{}}
	for _, r := range f.instances.svcs[svc.Key()] {
		if r.lifecycle == status.Terminated {
			continue
		}
		d.Instances++
		if why, ok := whyUnavailable(r, evacs); ok {
			d.Unavailable = append(d.Unavailable, wire.Unavailable{InstanceID: r.id, Incarnation: r.incarnation, Why: why})
		}
	}
	// By id: map order must not reach a message every replica writes.
	slices.SortFunc(d.Unavailable, func(a, b wire.Unavailable) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	d.InUse = len(d.Unavailable)
	d.Limit = d.MaxUnavailable.Limit(d.Instances)
	return d
}

// disruption judges c, a drain or deregistration of in (its current
// incarnation, not terminated), against the service's budget. It returns
// ErrBudget when the budget does not allow it, or, when c forces it past
// the budget, the audit event of the override. An entry written before
// budgets (no c.Budget) is not judged: it replays as it was applied.
func (f *fsm) disruption(c command, in *record) (*wire.Event, error) {
	if !c.Budget || in.lifecycle != status.Ready {
		return nil, nil
	}
	svc := f.services[*in.svc]
	if svc == nil {
		return nil, nil
	}
	var evacs []*wire.Evacuation
	if c.Evacs {
		evacs = f.evacuating(svc.Key())
	}
	if _, ok := whyUnavailable(in, evacs); ok {
		return nil, nil // already counted: not a new disruption
	}
	b := f.budgetWith(svc, evacs)
	if b.InUse < b.Limit {
		return nil, nil
	}
	held := "is used by " + b.Holders()
	if b.Limit == 0 {
		held = "allows no voluntary disruption"
	}
	what := fmt.Sprintf("%s of %s", c.Op, in.key())
	if !c.Force {
		return nil, fmt.Errorf("%s refused: disruption budget %s %s; --force overrides: %w", what, b.Describe(), held, ErrBudget)
	}
	return &wire.Event{At: c.At, Kind: wire.EventBudgetOverridden, Namespace: in.svc.Namespace, Service: in.svc.Name,
		Instance: in.id, Incarnation: in.incarnation, Actor: c.Actor,
		Reason: fmt.Sprintf("%s forced past disruption budget %s, which %s", what, b.Describe(), held)}, nil
}

// Budget returns service ns/name's disruption budget and what holds it,
// as this replica sees it.
func (s *Store) Budget(ns, name string) (wire.DisruptionBudget, bool) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	svc, ok := s.fsm.services[wire.ServiceKey{Namespace: ns, Name: name}]
	if !ok {
		return wire.DisruptionBudget{}, false
	}
	return s.fsm.budget(svc), true
}

// ForceDrain is Drain past the service's disruption budget; when the
// budget did not allow the drain, the override is in the audit trail.
func (s *Store) ForceDrain(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return s.drain(ctx, actor, key, inc, true)
}

// ForceDeregister is Deregister past the service's disruption budget,
// audited like ForceDrain.
func (s *Store) ForceDeregister(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return s.deregister(ctx, actor, key, inc, true)
}

// overBudget lists the services in e's scope that e would take past
// their disruption budgets: each one's budget, what holds it and how
// many available instances e would add. An instance already
// unavailable, or held by an evacuation in force (the one e renews
// included), is not a new disruption.
func (f *fsm) overBudget(e wire.Evacuation) []string {
	fresh := map[wire.ServiceKey]int{}
	evacs := map[wire.ServiceKey][]*wire.Evacuation{}
	f.eachInScope(e, func(svc *wire.Service, r *record) {
		k := svc.Key()
		others, ok := evacs[k]
		if !ok {
			others = f.evacuating(k)
			evacs[k] = others
		}
		if _, held := whyUnavailable(r, others); !held && r.lifecycle == status.Ready {
			fresh[k]++
		}
	})
	keys := make([]wire.ServiceKey, 0, len(fresh))
	for k := range fresh {
		keys = append(keys, k)
	}
	// By name: map order must not reach a message every replica writes.
	slices.SortFunc(keys, func(a, b wire.ServiceKey) int { return strings.Compare(a.String(), b.String()) })
	var out []string
	for _, k := range keys {
		b := f.budgetWith(f.services[k], evacs[k])
		if b.InUse+fresh[k] <= b.Limit {
			continue
		}
		held := ""
		if b.InUse > 0 {
			held = ", already used by " + b.Holders()
		}
		out = append(out, fmt.Sprintf("%s: its %d available instance(s) in the zone would make %d unavailable, past its disruption budget %s%s",
			k, fresh[k], b.InUse+fresh[k], b.Describe(), held))
	}
	return out
}
