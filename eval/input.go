package eval

import (
	"time"

	"github.com/cairn-sd/cairn/status"
)

// Lifecycle is an instance's lifecycle as its registrar declared it. It
// is status.Lifecycle (starting, ready, draining, terminated), so the
// evaluator's output goes into the status table unconverted.
type Lifecycle = status.Lifecycle

// Verdict is status.Verdict: unknown, healthy, degraded, unhealthy or
// quarantined.
type Verdict = status.Verdict

// Flags is status.Flags; the evaluator sets Eligible, HealthDisregarded,
// SlowStart, DependencyDegraded, LeaseExpired and WithdrawalDeferred.
type Flags = status.Flags

// Instance is what the evaluator needs of one registered instance of the
// service, copied from the store by the caller. It is not the store's
// type: the core of the evaluator is a pure function and imports neither
// the store nor the probes.
type Instance struct {
	// ID is the stable instance id, unique within the service.
	ID string
	// Incarnation is the instance's current incarnation. State carried
	// for another incarnation is discarded: a new incarnation starts
	// fresh (unknown, no history, no quarantine).
	Incarnation uint64
	// Region and Zone are the instance's locality; the minimum healthy
	// fraction is also reported per (Region, Zone).
	Region, Zone string
	// BaseWeight is the registered weight, 1–65535; 0 means 100.
	BaseWeight int
	// Ramp is the incarnation's deploy ramp (wire.Registration.Ramp), 0
	// for none: its slow start lasts the longer of it and the policy's
	// SlowStart (wire.SlowStartWindow).
	Ramp time.Duration
	// Lifecycle: only Ready instances are ever eligible.
	Lifecycle Lifecycle
	// LeaseExpiry is when the lease runs out as this node knows it; the
	// zero time means no lease (it never expires).
	LeaseExpiry time.Time
	// LeaseDeadline is the recorded deadline from which the hard expiry
	// counts (its last renewal is LeaseDeadline − LeaseTTL); the zero
	// time means LeaseExpiry.
	LeaseDeadline time.Time
	// Report is the instance's latest self-report, nil if none.
	Report *Report
}

// Report is an instance's self-report: its readiness and its
// dependencies' states, as the instance itself said at At.
type Report struct {
	Ready bool
	// Dependencies maps a dependency name to "ok", "degraded" or
	// "failed"; any other value counts as "failed".
	Dependencies map[string]string
	At           time.Time
}

// The dependency states a Report may give.
const (
	DependencyOK       = "ok"
	DependencyDegraded = "degraded"
	DependencyFailed   = "failed"
)

// Class is an evidence class (SPEC §2).
type Class uint8

// The evidence classes. ClassReport is the self-report; it never appears
// in a Sample (reports come with the Instance) but names it as evidence.
const (
	ClassProbe Class = iota
	ClassOutcome
	ClassReport
	numSampleClasses = 2
)

var classNames = [...]string{"probe", "outcome", "report"}

// String returns "probe", "outcome" or "report".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(?)"
}

// Sample is one piece of evidence about one instance: a probe result or a
// window of caller-observed outcomes.
//
// The caller may pass the same sample to several evaluations: each class
// keeps a watermark, and samples at or before it are ignored. Samples
// after now are discarded and counted (Result.Discarded).
type Sample struct {
	Class Class
	// Observer is who observed: the prober node or the calling client.
	Observer string
	// Incarnation, when non-zero, is the incarnation the sample is about;
	// a sample about another incarnation is discarded and counted
	// (SPEC §0.7). Zero means the observer did not know it.
	Incarnation uint64
	At          time.Time
	// OK is a probe's result. Outcome samples ignore it.
	OK bool
	// Hard marks a refused connection: the class fails at once.
	Hard bool
	// Successes, Failures and Timeouts are an outcome sample's counts over
	// its window; timeouts are failures. A sample with no calls is
	// ignored.
	Successes, Failures, Timeouts int
	// Pending marks a sample the caller holds back for now, so that an
	// observer's late result is not behind the class's watermark: it only
	// updates its observer's latest state (whether probers disagree,
	// whether callers reach their quorum). The caller passes it again,
	// without Pending, for the class to consume.
	Pending bool
}

// EvidenceRef names the evidence behind a decision: its class, observer
// and time. The zero EvidenceRef means none (a decision made on
// lifecycle, lease or time alone).
type EvidenceRef struct {
	Class    Class
	Observer string
	At       time.Time
}
