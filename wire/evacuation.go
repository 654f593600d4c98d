package wire

import (
	"math"
	"time"
)

// Evacuation is a zone's evacuation (SPEC §6, `cairn evacuate`): a
// reversible preference shift away from the zone's instances, for one
// service or for all. The instances stay registered, probed and
// eligible; every caller gets them last (status.TierEvacuated) until the
// evacuation ends, by an undo or at its expiry. Then the zone returns
// over its services' shift_back window, its share of the traffic rising
// in steps, and the return pauses while the zone has more instances
// withdrawn than when it began.
type Evacuation struct {
	// ID is the store revision that started the evacuation: it names
	// it in the log's later entries, so that a step meant for one
	// evacuation never applies to the next of the same scope.
	ID uint64 `json:"id"`
	// The scope: a zone (in one region, or in every region when Region
	// is empty), of one service (Namespace and Service) or of all.
	Region    string `json:"region,omitempty"`
	Zone      string `json:"zone"`
	Namespace string `json:"namespace,omitempty"`
	Service   string `json:"service,omitempty"`
	// To, set, makes it a region's failover (`cairn region failover`):
	// Zone is empty and every zone of Region is in scope, and the
	// region's callers are given region To's endpoints first (To's
	// instances, another region's, are tier 2, and the region's own go
	// last). Capacity is what the check of To's eligible instances
	// found when it started.
	To       string `json:"to,omitempty"`
	Capacity string `json:"capacity,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Actor is who started it; Forced says it was started past the
	// capacity check or a disruption budget (`--force`; its evacuated
	// event says which).
	Actor     string    `json:"actor"`
	Forced    bool      `json:"forced,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// ExpiresAt is when it ends if nobody undoes it (SPEC: a forgotten
	// evacuation must not last for ever).
	ExpiresAt time.Time `json:"expires_at"`
	// EndedAt is when it ended (an undo, or the expiry: EndedBy says
	// which, "expiry" or the actor); zero while the zone is evacuated.
	EndedAt time.Time `json:"ended_at,omitzero"`
	EndedBy string    `json:"ended_by,omitempty"`
	// Returned is how long the zone has been returning, pauses left out,
	// as of ReturnedAt: the leader moves it on in the log, so that every
	// node publishes the same share and a new leader carries on from it.
	Returned   Duration  `json:"returned,omitempty"`
	ReturnedAt time.Time `json:"returned_at,omitzero"`
	// Baseline is how many of the zone's ready instances in scope were
	// withdrawn when the return began; the return pauses while more are
	// (Paused, with the reason).
	Baseline    int    `json:"baseline_withdrawn,omitempty"`
	Paused      bool   `json:"paused,omitempty"`
	PauseReason string `json:"pause_reason,omitempty"`
}

// CapacityNeeded is how many eligible instances must carry a service
// whose ready instances are ready when some are moved away (an
// evacuation's zone, a failover's region): its minimum healthy fraction
// of them, rounded up, and at least one.
func CapacityNeeded(minHealthyFraction float64, ready int) int {
	return max(1, int(math.Ceil(minHealthyFraction*float64(ready)-1e-9)))
}

// EvacuationSteps is how many steps a zone's return takes: its share is
// 1/EvacuationSteps as soon as it ends, and rises by as much every
// shift_back/EvacuationSteps.
const EvacuationSteps = 10

// DefaultEvacuationExpiry is how long an evacuation lasts when it is
// not given --expires; MaxEvacuationExpiry the longest it may be given.
const (
	DefaultEvacuationExpiry = 24 * time.Hour
	MaxEvacuationExpiry     = 7 * 24 * time.Hour
)

// State names where the evacuation is: "evacuated", "returning" or
// "paused".
func (e Evacuation) State() string {
	switch {
	case e.EndedAt.IsZero():
		return "evacuated"
	case e.Paused:
		return "paused"
	}
	return "returning"
}

// Covers reports whether an instance of service ns/svc in region/zone
// is in the evacuation's scope (every zone of its region for a
// failover).
func (e Evacuation) Covers(ns, svc, region, zone string) bool {
	return (zone == e.Zone || e.To != "") && (e.Region == "" || region == e.Region) &&
		(e.Service == "" || ns == e.Namespace && svc == e.Service)
}

// Share is the fraction of its traffic the zone has taken back, for a
// service whose shift_back window is window: 0 while evacuated; once
// ended, 1/EvacuationSteps at once and a step more every
// window/EvacuationSteps of return, 1 at the end (and at once for a
// window of 0).
func (e Evacuation) Share(window time.Duration) float64 {
	if e.EndedAt.IsZero() {
		return 0
	}
	if window <= 0 {
		return 1
	}
	step := int64(EvacuationSteps*e.Returned.D()/window) + 1
	return min(1, float64(step)/EvacuationSteps)
}

// Done reports whether the zone has fully returned for a service whose
// window is window.
func (e Evacuation) Done(window time.Duration) bool { return e.Share(window) >= 1 }

// Scope is the evacuation's scope as the CLI names it: "zone a",
// "zone a in region r1", "region r1 (failover to r2)", "… of shop/cart".
func (e Evacuation) Scope() string {
	s := "zone " + e.Zone
	if e.Region != "" {
		s += " in region " + e.Region
	}
	if e.To != "" {
		s = "region " + e.Region + " (failover to " + e.To + ")"
	}
	if e.Service != "" {
		s += " of " + e.Namespace + "/" + e.Service
	}
	return s
}

// EvacuateRequest asks to evacuate a zone (POST /v1/evacuations), or,
// with Undo, to end an evacuation of exactly that scope.
type EvacuateRequest struct {
	Region    string `json:"region,omitempty"`
	Zone      string `json:"zone"`
	Namespace string `json:"namespace,omitempty"`
	Service   string `json:"service,omitempty"`
	// To and Capacity make it a failover of Region (Evacuation.To): the
	// API of the server that takes a FailoverRequest fills them in,
	// Capacity with its check of To's eligible instances.
	To       string `json:"to,omitempty"`
	Capacity string `json:"capacity,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Expires is how long the evacuation lasts (default
	// DefaultEvacuationExpiry, at most MaxEvacuationExpiry).
	Expires Duration `json:"expires,omitempty"`
	// Force starts it even when the rest of a service could not carry
	// it; audited.
	Force bool `json:"force,omitempty"`
	Undo  bool `json:"undo,omitempty"`
}

// maxReason bounds an evacuation's reason: it is kept in the store and
// the audit trail.
const maxReason = 256

// Validate checks the request's fields, naming the first wrong one.
func (r EvacuateRequest) Validate() error {
	if r.To != "" {
		if err := r.validateFailover(); err != nil {
			return err
		}
	} else if err := CheckLabel("zone", r.Zone); err != nil {
		return err
	}
	if r.Region != "" {
		if err := CheckLabel("region", r.Region); err != nil {
			return err
		}
	}
	if (r.Namespace == "") != (r.Service == "") {
		return invalid("service", "names a service as NAMESPACE/SERVICE, both or neither")
	}
	if r.Service != "" {
		if err := CheckLabel("namespace", r.Namespace); err != nil {
			return err
		}
		if err := CheckLabel("service", r.Service); err != nil {
			return err
		}
	}
	if len(r.Reason) > maxReason {
		return invalid("reason", "is %d bytes; at most %d", len(r.Reason), maxReason)
	}
	if r.Expires < 0 || r.Expires.D() > MaxEvacuationExpiry {
		return invalid("expires", "%s is outside (0, %s]", r.Expires, Duration(MaxEvacuationExpiry))
	}
	if r.Undo && (r.Force || r.Reason != "" || r.Expires != 0) {
		return invalid("undo", "takes only the evacuation's scope (zone, region, service)")
	}
	return nil
}

// validateFailover checks a failover's own fields: a whole region, and
// another one to fail over to.
func (r EvacuateRequest) validateFailover() error {
	switch {
	case r.Zone != "":
		return invalid("zone", "must be empty for a failover: it moves a whole region")
	case r.Region == "":
		return invalid("from", "is required: the region whose callers fail over")
	case r.To == r.Region:
		return invalid("to", "is region %q, the region failing over", r.To)
	case len(r.Capacity) > maxReason:
		return invalid("capacity", "is %d bytes; at most %d", len(r.Capacity), maxReason)
	}
	return CheckLabel("to", r.To)
}

// Covers reports whether the request names exactly e's scope. A
// failover's scope is its region and service, whatever region it fails
// over to: a second failover of the scope renews it with its own.
func (r EvacuateRequest) Covers(e Evacuation) bool {
	return r.Region == e.Region && r.Zone == e.Zone && r.Namespace == e.Namespace && r.Service == e.Service &&
		(r.To == "") == (e.To == "")
}

// String names the request's scope, as Evacuation.Scope does.
func (r EvacuateRequest) String() string {
	return Evacuation{Region: r.Region, Zone: r.Zone, Namespace: r.Namespace, Service: r.Service, To: r.To}.Scope()
}

// FailoverRequest asks a region's servers to fail the region's callers
// over to another region (POST /v1/regions/failover, `cairn region
// failover`), for one service or for all, or with Undo to end the
// failover of exactly that scope: the region's own instances then come
// back over their services' shift_back, as a zone returns from an
// evacuation. From must be the region of the server asked: a region
// decides for its own callers only.
type FailoverRequest struct {
	From      string   `json:"from"`
	To        string   `json:"to"`
	Namespace string   `json:"namespace,omitempty"`
	Service   string   `json:"service,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Expires   Duration `json:"expires,omitempty"`
	// Force starts it even when To's eligible instances are too few,
	// or its view is stale; audited.
	Force bool `json:"force,omitempty"`
	Undo  bool `json:"undo,omitempty"`
}

// Evacuation returns the evacuation request that r is.
func (r FailoverRequest) Evacuation() EvacuateRequest {
	return EvacuateRequest{Region: r.From, To: r.To, Namespace: r.Namespace, Service: r.Service, Reason: r.Reason,
		Expires: r.Expires, Force: r.Force, Undo: r.Undo}
}

// Validate checks the request's fields, naming the first wrong one.
func (r FailoverRequest) Validate() error {
	if err := CheckLabel("from", r.From); err != nil {
		return err
	}
	if err := CheckLabel("to", r.To); err != nil {
		return err
	}
	return r.Evacuation().Validate()
}

// EvacuationView is an evacuation as the API lists it: with its state
// ("evacuated", "returning", "paused") and, while evacuated, the time
// left before it expires.
type EvacuationView struct {
	Evacuation
	State     string   `json:"state"`
	ExpiresIn Duration `json:"expires_in,omitempty"`
	Note      string   `json:"note,omitempty"`
}
