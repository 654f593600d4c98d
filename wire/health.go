package wire

import (
	"fmt"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// Health is the evaluator's committed judgement of one incarnation of an
// instance (SPEC §1 "verdict"). The leader's evaluator commits it when it
// changes, so that every replica builds its status table from the same
// verdicts and a new leader starts from the last committed ones: a
// failover never sends a withdrawn instance back into rotation.
//
// The store does not interpret it beyond the incarnation fence. The
// verdict and the flags are status's (their names, their bits); the
// evidence classes are the evaluator's.
type Health struct {
	Incarnation uint64 `json:"incarnation"`
	// Verdict is unknown, healthy, degraded, unhealthy or quarantined.
	Verdict status.Verdict `json:"verdict"`
	// Eligible is the published eligibility; HealthEligible the
	// evaluator's judgement before the guard and the shrink cap.
	Eligible       bool `json:"eligible"`
	HealthEligible bool `json:"health_eligible"`
	// Flags are the status table's flag bits, a number in JSON.
	Flags status.Flags `json:"flags"`
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

// String returns "verdict eligible" or "verdict withdrawn", for logs.
func (h Health) String() string {
	if h.Eligible {
		return fmt.Sprintf("%s eligible", h.Verdict)
	}
	return fmt.Sprintf("%s withdrawn", h.Verdict)
}
