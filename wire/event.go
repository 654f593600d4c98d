package wire

import "time"

// EventKind is the kind of an audit event.
type EventKind string

// Audit event kinds.
const (
	EventApplied      EventKind = "applied"
	EventRegistered   EventKind = "registered"
	EventDrained      EventKind = "drained"
	EventDeregistered EventKind = "deregistered"
	EventTerminated   EventKind = "terminated"  // drain window over
	EventExpired      EventKind = "expired"     // lease past its hard expiry
	EventExpiryHeld   EventKind = "expiry_held" // hard expiries held back by the shrink cap
	EventReported     EventKind = "reported"
	EventRefused      EventKind = "refused"
	EventTokenCreated EventKind = "token_created"
	EventTokenDeleted EventKind = "token_deleted"
	// EventBudgetOverridden: a forced drain or deregistration took a
	// service past its disruption budget.
	EventBudgetOverridden EventKind = "budget_overridden"
)

// Event is one entry of the durable audit trail.
type Event struct {
	Seq         uint64    `json:"seq"`
	At          time.Time `json:"at"`
	Kind        EventKind `json:"kind"`
	Namespace   string    `json:"namespace"`
	Service     string    `json:"service"`
	Instance    string    `json:"instance_id,omitempty"`
	Incarnation uint64    `json:"incarnation,omitempty"`
	From        string    `json:"from,omitempty"`
	To          string    `json:"to,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// Evidence is what an eligibility transition was decided on.
	Evidence *Evidence `json:"evidence,omitempty"`
	Actor    string    `json:"actor"`
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

// Evacuation reports whether k is one of an evacuation's kinds.
func (k EventKind) Evacuation() bool {
	switch k {
	case EventEvacuated, EventEvacuationEnded, EventEvacuationPaused, EventEvacuationReturned:
		return true
	}
	return false
}

// Audit event kinds of evacuations (SPEC §6): one started (or renewed),
// ended (undone or expired: its zone starts to return), its return
// paused or resumed, and its zone back.
const (
	EventEvacuated          EventKind = "evacuated"
	EventEvacuationEnded    EventKind = "evacuation_ended"
	EventEvacuationPaused   EventKind = "evacuation_paused"
	EventEvacuationReturned EventKind = "evacuation_returned"
)
