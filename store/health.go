package store

import (
	"context"
	"slices"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func cloneHealth(h *wire.Health) *wire.Health {
	if h == nil {
		return nil
	}
	out := *h
	out.Failing = slices.Clone(h.Failing)
	out.Reasons = slices.Clone(h.Reasons)
	if h.Evidence != nil {
		e := *h.Evidence
		out.Evidence = &e
	}
	return &out
}

// HealthUpdate is one instance's new committed health, with the audit
// record of the transition that led to it when there was one.
type HealthUpdate struct {
	Key    wire.InstanceKey `json:"key"`
	Health wire.Health      `json:"health"`
	// Transition, when set, is recorded in the audit trail.
	Transition *Transition `json:"transition,omitempty"`
}

// Transition is an eligibility or verdict change, for the audit trail
// (SPEC §2: time, instance, incarnation, from → to, reason, evidence and
// observers, who triggered it; the time is the command's).
type Transition struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// ServiceEvent is a service-level evaluator event (health disregarded or
// restored, an instance quarantined) for the audit trail.
type ServiceEvent struct {
	Kind        wire.EventKind `json:"kind"`
	Namespace   string         `json:"namespace"`
	Service     string         `json:"service"`
	Instance    string         `json:"instance_id,omitempty"`
	Incarnation uint64         `json:"incarnation,omitempty"`
	Detail      string         `json:"detail"`
}

// MaxHealthUpdates is the most updates one CommitHealth call takes: one
// log entry of bounded size.
const MaxHealthUpdates = 4096

// CommitHealth commits a batch of health updates and evaluator events in
// one log entry (leader only). An update for an incarnation that is no
// longer current, or for a terminated instance, is skipped, so a late
// verdict never lands on a successor. actor names the evaluator (who
// triggered the transitions).
func (s *Store) CommitHealth(ctx context.Context, actor string, ups []HealthUpdate, evs []ServiceEvent) error {
	if len(ups) > MaxHealthUpdates {
		return invalid("updates", "at most %d health updates per commit, got %d", MaxHealthUpdates, len(ups))
	}
	if len(ups) == 0 && len(evs) == 0 {
		return nil
	}
	_, err := s.propose(ctx, command{Op: opHealth, Actor: actor, Health: ups, ServiceEvents: evs})
	return err
}

func (f *fsm) commitHealth(c command) {
	for _, u := range c.Health {
		in := f.instances.get(u.Key)
		if in == nil || in.incarnation != u.Health.Incarnation || in.lifecycle == status.Terminated {
			continue
		}
		h := u.Health
		if old := in.verdict; !h.Eligible && (old == nil || old.incarnation != in.incarnation || old.Eligible()) {
			f.withdraw(in)
		}
		// c was decoded for this Apply alone, so the record may keep its
		// lists instead of copies.
		in.verdict = f.verdictOf(&h)
		if t := u.Transition; t != nil {
			e := wire.Event{At: c.At, Kind: wire.EventEligibility, Namespace: in.svc.Namespace, Service: in.svc.Name,
				Instance: in.id, Incarnation: in.incarnation, From: t.From, To: t.To, Reason: t.Reason,
				Actor: c.Actor}
			if h.Evidence != nil {
				ev := *h.Evidence
				e.Evidence = &ev
			}
			f.record(e)
		}
	}
	for _, se := range c.ServiceEvents {
		switch se.Kind {
		case wire.EventHealthDisregarded, wire.EventHealthRestored, wire.EventQuarantined, wire.EventProbesSetAside, wire.EventProbesRestored:
		default:
			continue // not an evaluator event: ignored the same way everywhere
		}
		if _, ok := f.services[wire.ServiceKey{Namespace: se.Namespace, Name: se.Service}]; !ok {
			continue
		}
		f.record(wire.Event{At: c.At, Kind: se.Kind, Namespace: se.Namespace, Service: se.Service,
			Instance: se.Instance, Incarnation: se.Incarnation, Reason: se.Detail, Actor: c.Actor})
	}
}
