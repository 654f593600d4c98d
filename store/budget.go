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
// not judged here.

// unavailable says whether r, not terminated, holds part of its
// service's budget, and why.
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

// budget is svc's disruption budget as the replica holds it.
func (f *fsm) budget(svc *wire.Service) wire.DisruptionBudget {
	d := wire.DisruptionBudget{MaxUnavailable: svc.Policy.MaxUnavailable.OrDefault(),
		Default: svc.Policy.MaxUnavailable == "", Unavailable: []wire.Unavailable{}}
	for _, r := range f.instances.svcs[svc.Key()] {
		if r.lifecycle == status.Terminated {
			continue
		}
		d.Instances++
		if why, ok := unavailable(r); ok {
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
	if _, ok := unavailable(in); ok {
		return nil, nil // already counted: not a new disruption
	}
	svc := f.services[*in.svc]
	if svc == nil {
		return nil, nil
	}
	b := f.budget(svc)
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
