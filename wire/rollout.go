package wire

import (
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// Rollout is GET /v1/services/{ns}/{svc}/rollout: how far the newest
// rollout of a service has come, as the answering node serves it.
//
// The latest set is the instances registered since the newest rollout
// began. A rollout begins with a registration made when every live
// instance registered before it had had its slow-start window since its
// registration (so the service could have been at full weight
// throughout); the registrations that follow while some earlier one is
// still within its window belong to the same rollout. The rule reads
// only what the store holds (registration times, ramps, the policy's
// slow_start), so every node gives the same set, and the set changes
// only with a new registration.
type Rollout struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// StartedAt is when the newest rollout began: the registration time
	// of the first instance of the latest set; omitted when the service
	// has no live instance.
	StartedAt time.Time `json:"started_at,omitzero"`
	// SlowStart is the service's policy slow_start; an instance's own
	// window is the longer of it and its ramp.
	SlowStart Duration       `json:"slow_start"`
	Summary   RolloutSummary `json:"summary"`
	// Instances is every live instance: the latest set first, in the
	// order of their registrations, then the others by id.
	Instances []RolloutInstance `json:"instances"`
	// TableVersion and TableRevision name the status table the weights
	// and eligibility were read from (as in a View).
	TableVersion  uint64 `json:"table_version"`
	TableRevision uint64 `json:"table_revision"`
}

// RolloutSummary counts a service's live instances and, of the latest
// set, those in rotation (eligible), at full weight (in rotation, slow
// start over), still ramping (in rotation, in slow start) and not
// eligible. Complete: every instance of the latest set is in rotation
// at full weight.
type RolloutSummary struct {
	Instances   int  `json:"instances"`
	Latest      int  `json:"latest"`
	InRotation  int  `json:"in_rotation"`
	FullWeight  int  `json:"full_weight"`
	Ramping     int  `json:"ramping"`
	NotEligible int  `json:"not_eligible"`
	Complete    bool `json:"complete"`
}

// The phases of a RolloutInstance.
const (
	PhaseFullWeight  = "full_weight"
	PhaseRamping     = "ramping"
	PhaseNotEligible = "not_eligible"
)

// RolloutInstance is one live instance in a Rollout.
type RolloutInstance struct {
	InstanceID   string           `json:"instance_id"`
	Incarnation  uint64           `json:"incarnation"`
	RegisteredAt time.Time        `json:"registered_at"`
	Lifecycle    status.Lifecycle `json:"lifecycle"`
	Verdict      status.Verdict   `json:"verdict"`
	Eligible     bool             `json:"eligible"`
	// Weight is the published weight, BaseWeight the registered one, and
	// RampPercent Weight as a whole percentage of BaseWeight (0 when not
	// eligible).
	Weight      int `json:"weight"`
	BaseWeight  int `json:"base_weight"`
	RampPercent int `json:"ramp_percent"`
	// Ramp is the registration's deploy ramp (omitted: none), and
	// SlowStart the window that applies to the incarnation
	// (SlowStartWindow of the policy's and the ramp).
	Ramp      Duration `json:"ramp,omitempty"`
	SlowStart Duration `json:"slow_start"`
	// Phase is full_weight, ramping or not_eligible.
	Phase string `json:"phase"`
	// Latest: the instance is in the latest set.
	Latest bool `json:"latest"`
}

// LatestSince returns the start of the newest rollout among instances
// registered at regs with slow-start windows wins (regs[i] with
// wins[i]), by the rule Rollout describes; the zero time when there are
// none. It sorts neither slice.
func LatestSince(regs []time.Time, wins []time.Duration) time.Time {
	order := make([]int, len(regs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return regs[a].Compare(regs[b]) })
	var start, settled time.Time // settled: when every earlier instance's window ended
	for n, i := range order {
		if n == 0 || regs[i].After(settled) {
			start = regs[i]
		}
		if end := regs[i].Add(max(wins[i], 0)); n == 0 || end.After(settled) {
			settled = end
		}
	}
	return start
}
