package eval

import (
	"errors"
	"fmt"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// Readiness is the readiness signal a service's capability declares
// (SPEC §1): which evidence class, besides caller outcomes, can tell the
// evaluator that an instance is ready.
type Readiness uint8

// The readiness signals. The zero value is ReadinessProbe, the SPEC's
// default capability.
const (
	// ReadinessProbe: active probes check the instance.
	ReadinessProbe Readiness = iota
	// ReadinessSelf: the instance reports its own readiness.
	ReadinessSelf
	// ReadinessNone: no readiness signal at all; only the lease (and any
	// caller outcomes) speak for the instance, so an expired lease
	// withdraws it after the hard expiry (SPEC §2).
	ReadinessNone
)

var readinessNames = [...]string{"probe", "self", "none"}

// String returns "probe", "self" or "none".
func (r Readiness) String() string {
	if int(r) < len(readinessNames) {
		return readinessNames[r]
	}
	return fmt.Sprintf("readiness(%d)", uint8(r))
}

// Policy is one service's health policy (SPEC §1, §2, §6.1). A zero field
// means "use the default"; WithDefaults fills them in and Validate checks
// the result. Evaluate applies WithDefaults itself, so a caller may pass a
// partly filled Policy, but should Validate it when the service
// definition is applied.
type Policy struct {
	// Readiness is the service's readiness signal. Defaults to
	// ReadinessProbe (the zero value).
	Readiness Readiness
	// Dependencies maps each declared dependency name to whether it is
	// shared (true) or the instance's own (false). A failing shared
	// dependency only lowers the published weight; a failing non-shared
	// one withdraws the instance. A reported dependency that is not
	// declared here is ignored (and named in no reason): the policy, not
	// the instance, decides what a dependency may do.
	Dependencies map[string]bool

	// CheckInterval is the active check's interval. Defaults to 2s.
	CheckInterval time.Duration
	// Freshness is how old evidence may be and still count: older
	// evidence is silence. Defaults to 3 × CheckInterval, so one or two
	// lost probes are not silence.
	Freshness time.Duration

	// WithdrawAfter is the run of consecutive failures in one class that
	// withdraws the instance. Defaults to 3 (SPEC §2).
	WithdrawAfter int
	// AdmitAfter is the run of consecutive successes in a failing class
	// that re-admits it, together with AdmitMin. It must be greater than
	// WithdrawAfter: recovery is the dangerous event (SPEC §0.5).
	// Defaults to 5.
	AdmitAfter int
	// AdmitMin is the least time from the first to the last success of
	// the re-admitting run. Defaults to 10s; a negative value means no
	// minimum (a service definition's admit_min: 0).
	AdmitMin time.Duration
	// FailureThreshold is the decaying failure-rate score (0–1) above
	// which a class is failing even without WithdrawAfter consecutive
	// failures (intermittent failure); it is also the failure rate above
	// which an outcome sample counts as a failure. Defaults to 0.5.
	FailureThreshold float64
	// ScoreHalfLife is the half-life of the per-class score's memory.
	// Defaults to 30s (about fifteen probes at the default interval).
	ScoreHalfLife time.Duration
	// ScoreMinWeight is the least (decayed) number of samples behind a
	// score before it may withdraw, so that one failure of a new instance
	// is not a 100% failure rate. Defaults to 5.
	ScoreMinWeight float64

	// LeaseTTL is the lease's time to live. Defaults to 30s.
	LeaseTTL time.Duration
	// HardExpiry is how long after the last renewal (LeaseDeadline −
	// LeaseTTL) a service without any other evidence class withdraws an
	// instance whose lease expired. Defaults to 5 × LeaseTTL (SPEC §2).
	HardExpiry time.Duration

	// MinHealthyFraction is the minimum healthy fraction (0–1]: below it,
	// health is disregarded. Defaults to 0.5; a negative value means
	// health is never disregarded (a service definition's
	// min_healthy_fraction: 0).
	MinHealthyFraction float64
	// ShrinkCap is the fraction (0–1] of the eligible set that may be
	// withdrawn per ShrinkWindow, always at least one. Defaults to 0.33.
	ShrinkCap float64
	// ShrinkWindow is the shrink cap's window. Defaults to 10s.
	ShrinkWindow time.Duration

	// FlapLimit: more than FlapLimit eligibility transitions within
	// FlapWindow quarantine the instance. Defaults to 4.
	FlapLimit int
	// FlapWindow defaults to 2m.
	FlapWindow time.Duration
	// QuarantineBase is the first quarantine's length; each further
	// quarantine of the same incarnation doubles it. Defaults to 1m.
	QuarantineBase time.Duration
	// QuarantineMax caps the quarantine's length. Defaults to 30m.
	QuarantineMax time.Duration

	// SlowStart is the window over which a newly eligible instance's
	// weight rises from 10% to 100%. Defaults to 30s; a negative value
	// means none (a service definition's slow_start: 0).
	SlowStart time.Duration
	// SharedDependencyFactor multiplies the weight of an instance whose
	// shared dependency is failing or degraded. Defaults to 0.5.
	SharedDependencyFactor float64

	// OutcomeQuorum: caller outcomes withdraw an instance only when at
	// least this many distinct callers report it failing within
	// OutcomeWindow, and they are at least a third of the callers that
	// reported on it there (SPEC §2: local evidence stays local).
	// Fewer only lower its weight by OutcomeWeightFactor. Defaults to 2.
	OutcomeQuorum int
	// OutcomeWindow is how recent a caller's latest outcome window must
	// be to count towards the quorum. Defaults to 30s.
	OutcomeWindow time.Duration
	// OutcomeWeightFactor multiplies the weight of an instance that
	// callers report failing without a quorum (or past
	// MaxEjectionPercent). Defaults to 0.5.
	OutcomeWeightFactor float64
	// MaxEjectionPercent caps the share of the service's ready instances
	// that caller outcomes alone may keep withdrawn: at most
	// floor(MaxEjectionPercent × ready / 100), and always at least one.
	// Defaults to 10; a negative value means outcomes never withdraw (a
	// service definition's max_ejection_percent: 0).
	MaxEjectionPercent int
	// CorrelatedFailureFraction: when one prober sees more than this
	// fraction of its targets in one zone time out or become unreachable
	// in one interval, its evidence of that kind about that zone is set
	// aside (SPEC §2: a prober cut off is silence). The evaluator's
	// caller applies it before handing samples over; it is here so that
	// a service's policy has one home. Defaults to 0.5.
	CorrelatedFailureFraction float64
}

// The defaults of what only the evaluator tunes (SPEC §2). Those a
// service definition may set, and the shrink window, live once, in wire
// (wire.Default*), where clients show and validate them; WithDefaults
// reads them from there.
const (
	DefaultFailureThreshold       = 0.5
	DefaultScoreHalfLife          = 30 * time.Second
	DefaultScoreMinWeight         = 5
	DefaultFlapWindow             = 2 * time.Minute
	DefaultQuarantineBase         = time.Minute
	DefaultQuarantineMax          = 30 * time.Minute
	DefaultSharedDependencyFactor = 0.5
	DefaultOutcomeWindow          = 30 * time.Second
	DefaultOutcomeWeightFactor    = 0.5
)

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	setD := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setI := func(i *int, v int) {
		if *i == 0 {
			*i = v
		}
	}
	setF := func(f *float64, v float64) {
		if *f == 0 {
			*f = v
		}
	}
	setD(&p.CheckInterval, wire.DefaultCheckInterval)
	setD(&p.Freshness, 3*p.CheckInterval)
	setI(&p.WithdrawAfter, wire.DefaultWithdrawAfter)
	setI(&p.AdmitAfter, wire.DefaultAdmitAfter)
	setD(&p.AdmitMin, wire.DefaultAdmitMin)
	setF(&p.FailureThreshold, DefaultFailureThreshold)
	setD(&p.ScoreHalfLife, DefaultScoreHalfLife)
	setF(&p.ScoreMinWeight, DefaultScoreMinWeight)
	setD(&p.LeaseTTL, wire.DefaultLeaseTTL)
	setD(&p.HardExpiry, 5*p.LeaseTTL)
	setF(&p.MinHealthyFraction, wire.DefaultMinHealthyFraction)
	setF(&p.ShrinkCap, wire.DefaultShrinkCap)
	setD(&p.ShrinkWindow, wire.DefaultShrinkWindow)
	setI(&p.FlapLimit, wire.DefaultFlapLimit)
	setD(&p.FlapWindow, DefaultFlapWindow)
	setD(&p.QuarantineBase, DefaultQuarantineBase)
	setD(&p.QuarantineMax, DefaultQuarantineMax)
	setD(&p.SlowStart, wire.DefaultSlowStart)
	setF(&p.SharedDependencyFactor, DefaultSharedDependencyFactor)
	setI(&p.OutcomeQuorum, wire.DefaultOutcomeQuorum)
	setD(&p.OutcomeWindow, DefaultOutcomeWindow)
	setF(&p.OutcomeWeightFactor, DefaultOutcomeWeightFactor)
	setI(&p.MaxEjectionPercent, wire.DefaultMaxEjectionPercent)
	setF(&p.CorrelatedFailureFraction, wire.DefaultCorrelatedFailure)
	return p
}

// ErrInvalidPolicy is wrapped by every error Validate returns.
var ErrInvalidPolicy = errors.New("eval: invalid policy")

// Validate checks p after WithDefaults.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Readiness > ReadinessNone:
		return bad("readiness %d", p.Readiness)
	case p.WithdrawAfter < 1:
		return bad("withdraw_after %d < 1", p.WithdrawAfter)
	case p.AdmitAfter <= p.WithdrawAfter:
		return bad("admit_after %d must exceed withdraw_after %d", p.AdmitAfter, p.WithdrawAfter)
	case p.FailureThreshold <= 0 || p.FailureThreshold >= 1:
		return bad("failure_threshold %v outside (0, 1)", p.FailureThreshold)
	case p.MinHealthyFraction == 0 || p.MinHealthyFraction > 1 || p.MinHealthyFraction != p.MinHealthyFraction:
		return bad("min_healthy_fraction %v outside (0, 1] (negative: never disregard)", p.MinHealthyFraction)
	case p.ShrinkCap <= 0 || p.ShrinkCap > 1:
		return bad("shrink_cap %v outside (0, 1]", p.ShrinkCap)
	case p.SharedDependencyFactor <= 0 || p.SharedDependencyFactor > 1:
		return bad("shared_dependency_factor %v outside (0, 1]", p.SharedDependencyFactor)
	case p.FlapLimit < 1:
		return bad("flap_limit %d < 1", p.FlapLimit)
	case p.QuarantineMax < p.QuarantineBase:
		return bad("quarantine_max %v < quarantine_base %v", p.QuarantineMax, p.QuarantineBase)
	case p.HardExpiry < p.LeaseTTL:
		return bad("hard_expiry %v < lease_ttl %v", p.HardExpiry, p.LeaseTTL)
	case p.ScoreMinWeight < 1:
		return bad("score_min_weight %v < 1", p.ScoreMinWeight)
	case p.OutcomeQuorum < 1:
		return bad("outcome_quorum %d < 1", p.OutcomeQuorum)
	case p.OutcomeWeightFactor <= 0 || p.OutcomeWeightFactor > 1:
		return bad("outcome_weight_factor %v outside (0, 1]", p.OutcomeWeightFactor)
	case p.MaxEjectionPercent > 100:
		return bad("max_ejection_percent %d > 100", p.MaxEjectionPercent)
	case !(p.CorrelatedFailureFraction > 0 && p.CorrelatedFailureFraction <= 1):
		return bad("correlated_failure_fraction %v outside (0, 1]", p.CorrelatedFailureFraction)
	}
	// AdmitMin and SlowStart may be negative: none.
	for _, d := range []time.Duration{p.CheckInterval, p.Freshness, p.ScoreHalfLife, p.LeaseTTL,
		p.ShrinkWindow, p.FlapWindow, p.QuarantineBase, p.OutcomeWindow} {
		if d <= 0 {
			return bad("negative duration %v", d)
		}
	}
	return nil
}
