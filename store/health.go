package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Health is the evaluator's committed judgement of one incarnation of an
// instance (SPEC §1 "verdict"). The leader's evaluator commits it when it
// changes, so that every replica builds its status table from the same
// verdicts and a new leader starts from the last committed ones: a
// failover never sends a withdrawn instance back into rotation.
//
// The store does not interpret it beyond the incarnation fence: the
// vocabulary (verdict names, flag bits, classes) is the evaluator's.
type Health struct {
	Incarnation uint64 `json:"incarnation"`
	// Verdict is unknown, healthy, degraded, unhealthy or quarantined.
	Verdict string `json:"verdict"`
	// Eligible is the published eligibility; HealthEligible the
	// evaluator's judgement before the guard and the shrink cap.
	Eligible       bool `json:"eligible"`
	HealthEligible bool `json:"health_eligible"`
	// Flags are the status table's flag bits (status.Flags).
	Flags uint8 `json:"flags"`
	// EligibleSince is when the instance was last published (slow start
	// counts from it); FailingSince when it last stopped being healthy.
	EligibleSince time.Time `json:"eligible_since,omitzero"`
	FailingSince  time.Time `json:"failing_since,omitzero"`
	// Failing lists the evidence classes in their failing state: a new
	// leader resumes them, so re-admission still takes the full run.
	Failing         []FailingClass `json:"failing,omitempty"`
	QuarantineLevel int            `json:"quarantine_level,omitempty"`
	QuarantineUntil time.Time      `json:"quarantine_until,omitzero"`
	Reasons         []string       `json:"reasons,omitempty"`
	// Evidence is what led to the verdict.
	Evidence *Evidence `json:"evidence,omitempty"`
	// At is when the evaluator decided.
	At time.Time `json:"at"`
}

// FailingClass is one evidence class in its failing state.
type FailingClass struct {
	Class string    `json:"class"`
	Since time.Time `json:"since"`
	Hard  bool      `json:"hard,omitempty"`
	Why   string    `json:"why"`
}

// Evidence names one piece of evidence: its class (probe, outcome,
// report), who observed it and when.
type Evidence struct {
	Class    string    `json:"class"`
	Observer string    `json:"observer"`
	At       time.Time `json:"at"`
}

func (h *Health) clone() *Health {
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
	Key    InstanceKey `json:"key"`
	Health Health      `json:"health"`
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
	Kind        EventKind `json:"kind"`
	Namespace   string    `json:"namespace"`
	Service     string    `json:"service"`
	Instance    string    `json:"instance_id,omitempty"`
	Incarnation uint64    `json:"incarnation,omitempty"`
	Detail      string    `json:"detail"`
}

// Audit event kinds of the evaluator.
const (
	EventEligibility       EventKind = "eligibility"
	EventHealthDisregarded EventKind = "health_disregarded"
	EventHealthRestored    EventKind = "health_restored"
	EventQuarantined       EventKind = "quarantined"
	// EventProbesSetAside: one prober got no answer from most of its
	// targets in one zone, so its timeouts about that zone are set aside
	// (SPEC §2); EventProbesRestored: it reaches the zone again.
	EventProbesSetAside EventKind = "probes_set_aside"
	EventProbesRestored EventKind = "probes_restored"
)

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
		in := f.instances[u.Key]
		if in == nil || in.Incarnation != u.Health.Incarnation || in.Lifecycle == Terminated {
			continue
		}
		h := u.Health
		if !h.Eligible && (in.Health == nil || in.Health.Incarnation != in.Incarnation || in.Health.Eligible) {
			f.withdraw(in)
		}
		// c was decoded for this Apply alone, so the record may keep its
		// lists instead of copies.
		in.Health = &h
		f.internHealth(in.Health)
		if t := u.Transition; t != nil {
			e := Event{At: c.At, Kind: EventEligibility, Namespace: in.Namespace, Service: in.Service,
				Instance: in.ID, Incarnation: in.Incarnation, From: t.From, To: t.To, Reason: t.Reason,
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
		case EventHealthDisregarded, EventHealthRestored, EventQuarantined, EventProbesSetAside, EventProbesRestored:
		default:
			continue // not an evaluator event: ignored the same way everywhere
		}
		if _, ok := f.services[ServiceKey{se.Namespace, se.Service}]; !ok {
			continue
		}
		f.record(Event{At: c.At, Kind: se.Kind, Namespace: se.Namespace, Service: se.Service,
			Instance: se.Instance, Incarnation: se.Incarnation, Reason: se.Detail, Actor: c.Actor})
	}
}

// String returns "verdict eligible" or "verdict withdrawn", for logs.
func (h Health) String() string {
	if h.Eligible {
		return fmt.Sprintf("%s eligible", h.Verdict)
	}
	return fmt.Sprintf("%s withdrawn", h.Verdict)
}
