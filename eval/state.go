package eval

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is what one evaluation of a service carries to the next. It is
// computed state, disposable (SPEC §0.2): the zero State is a valid
// start, in which every instance is unknown and eligible.
//
// Evaluate never modifies the State it is given; it returns a new one.
// A State is not safe for concurrent mutation, but may be read
// concurrently.
type State struct {
	// Instances holds each instance's state, sorted by ID, at most one
	// per ID. Evaluate returns them in the order of its Result's: the
	// state of Result.Instances[i] is Instances[i]. They are values in
	// one slice, not a map of pointers: an evaluator keeps one per
	// instance for as long as it lives. Read one with Instance; build a
	// State by hand with Set.
	Instances []InstanceState
	// Shrink is the shrink cap's current window.
	Shrink ShrinkState
	// HealthDisregarded records whether the last evaluation disregarded
	// health, to raise an event when that changes.
	HealthDisregarded bool
}

// Instance returns the state of instance id, nil when s holds none. The
// pointer is into s: it is valid for as long as s is.
func (s State) Instance(id string) *InstanceState {
	i, ok := slices.BinarySearchFunc(s.Instances, id, func(st InstanceState, id string) int { return strings.Compare(st.ID, id) })
	if !ok {
		return nil
	}
	return &s.Instances[i]
}

// Set makes st the state of instance st.ID, in place of any it had,
// keeping Instances sorted. It takes constant time when st.ID sorts
// after every ID s holds (states set in ID order), linear time
// otherwise.
func (s *State) Set(st InstanceState) {
	n := len(s.Instances)
	if n == 0 || s.Instances[n-1].ID < st.ID {
		s.Instances = append(s.Instances, st)
		return
	}
	i, ok := slices.BinarySearchFunc(s.Instances, st.ID, func(x InstanceState, id string) int { return strings.Compare(x.ID, id) })
	if ok {
		s.Instances[i] = st
		return
	}
	s.Instances = slices.Insert(s.Instances, i, st)
}

// ShrinkState is the shrink cap's window: between Start and Start +
// ShrinkWindow, withdrawals may not take the published ready instances
// below Base − max(1, floor(ShrinkCap × Base)). It counts net loss: a
// re-admission or a new instance in the window makes room.
type ShrinkState struct {
	Start time.Time
	// Base is the number of eligible instances when the window started.
	Base int
	// Used is the number of capped withdrawals made in the window (for
	// the record; the floor decides).
	Used int
}

// ClassState is one evidence class's state for one instance.
type ClassState struct {
	// Last is the latest consumed sample (the class's watermark);
	// LastOK its result.
	Last   EvidenceRef
	LastOK bool
	// ConsecutiveOK and ConsecutiveFail are the current runs; RunStart
	// is the time of the first success of the current success run.
	ConsecutiveOK, ConsecutiveFail int
	RunStart                       time.Time
	// FailMass and TotalMass are the decaying failure and sample masses;
	// the score is FailMass/TotalMass.
	FailMass, TotalMass float64
	// Failing is the class's hysteresis state; FailingSince when it
	// began, Hard whether a refused connection began it, Why the reason.
	Failing      bool
	FailingSince time.Time
	Hard         bool
	Why          string
	// Trigger is the sample that turned Failing on or off.
	Trigger EvidenceRef
}

// Score is the class's decaying failure rate, 0 when it has no samples.
func (c ClassState) Score() float64 {
	if c.TotalMass == 0 {
		return 0
	}
	return c.FailMass / c.TotalMass
}

// InstanceState is one instance's state, bound to one incarnation.
//
// Its class and report states are pointers, nil while they are the zero
// value, as they are for most instances (one with probes has a probe
// class only), as are its recent flaps and observers, and its times are
// Nanos: an evaluator keeps one InstanceState per instance, and the two
// ClassStates and the ReportState were three quarters of it. Read and
// write them with Class, SetClass and ReportState; the ClassStates
// and ReportState a State holds are its own, shared with no other State,
// and never modified in place.
type InstanceState struct {
	// ID is the instance's id (Instance.ID).
	ID          string
	Incarnation uint64
	// Seen is false until the instance's first evaluation.
	Seen      bool
	Lifecycle Lifecycle
	// HealthEligible is the evaluator's judgement before the guard and
	// the shrink cap: the eligibility whose changes count as flapping.
	HealthEligible bool
	// Published is the eligibility last published; Verdict the verdict.
	Published bool
	Verdict   Verdict
	// QuarantineLevel counts this incarnation's quarantines;
	// QuarantineUntil is when the current one ends.
	QuarantineLevel int
	QuarantineUntil Nanos
	// EligibleSince is when Published last became true (slow start).
	EligibleSince Nanos
	// FailingSince is when HealthEligible last became false (the shrink
	// cap's order).
	FailingSince Nanos
	// Classes holds each evidence class's state, nil for the zero
	// ClassState.
	Classes [numSampleClasses]*ClassState
	// Report is the self-report's hysteresis, nil for the zero
	// ReportState.
	Report *ReportState
	// Recent is the instance's recent flaps and observers, nil when it
	// has neither.
	Recent *Recent
}

// Recent is what an instance's state keeps of its recent past. An
// InstanceState holds it behind a pointer, nil while both lists are
// empty, as they are for an instance that nobody probes or calls: the
// two lists' headers were a third of an InstanceState. Like the class
// states, the Recent a State holds is its own and never modified in
// place.
type Recent struct {
	// Flaps are the times of HealthEligible changes within FlapWindow.
	Flaps []time.Time
	// Observers is the latest sample of each observer in each class,
	// kept for as long as it may count (the freshness window for probes,
	// OutcomeWindow for outcomes): whether probers disagree and whether
	// callers reach their quorum is judged from it.
	Observers []ObserverState
}

// Nanos is a time as unix nanoseconds, 0 for the zero time: 8 bytes
// where a time.Time takes 24, for the times an InstanceState keeps. It
// holds no location and no monotonic reading; the times it stands for
// are compared and committed by their instant only.
type Nanos int64

// NanosOf returns t as Nanos (0 for the zero time). t must lie between
// the years 1678 and 2262, as time.Time.UnixNano requires.
func NanosOf(t time.Time) Nanos {
	if t.IsZero() {
		return 0
	}
	return Nanos(t.UnixNano())
}

// Time returns the time n stands for, in UTC (the zero time for 0).
func (n Nanos) Time() time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n)).UTC()
}

// Class returns the state of class c (the zero ClassState when it has
// none).
func (s *InstanceState) Class(c Class) ClassState {
	if p := s.Classes[c]; p != nil {
		return *p
	}
	return ClassState{}
}

// SetClass sets the state of class c to a new copy of cs (nil when cs is
// the zero ClassState).
func (s *InstanceState) SetClass(c Class, cs ClassState) {
	s.Classes[c] = nil
	if cs != (ClassState{}) {
		s.Classes[c] = &cs
	}
}

// Flaps returns the instance's recent flaps (see Recent).
func (s *InstanceState) Flaps() []time.Time {
	if s.Recent == nil {
		return nil
	}
	return s.Recent.Flaps
}

// Observers returns the instance's observers' latest samples (see
// Recent).
func (s *InstanceState) Observers() []ObserverState {
	if s.Recent == nil {
		return nil
	}
	return s.Recent.Observers
}

// ReportState returns the self-report's state (the zero ReportState when
// it has none).
func (s *InstanceState) ReportState() ReportState {
	if s.Report != nil {
		return *s.Report
	}
	return ReportState{}
}

// ObserverState is one observer's latest sample in one class.
type ObserverState struct {
	Observer string
	At       time.Time
	Class    Class
	// OK: the probe passed, or the outcome window's failure rate was at
	// most the policy's FailureThreshold.
	OK bool
}

// ReportState is the self-report's hysteresis: a report that the instance
// is not ready (or that a dependency of its own failed) withdraws it at
// once; a ready report re-admits it only after it has been seen ready in
// AdmitAfter evaluations in a row spanning AdmitMin, as a run of
// successes re-admits the other classes (SPEC §2).
type ReportState struct {
	Failing bool
	// Since is when the report began failing; Why is the first reason.
	Since time.Time
	Why   string
	// ReadySince is the time of the first ready report since; ReadyRounds
	// counts the evaluations that have seen it ready since.
	ReadySince  time.Time
	ReadyRounds int
}

// Result is one evaluation's output for one service.
type Result struct {
	At time.Time
	// Instances, sorted by ID.
	Instances []InstanceResult
	// HealthDisregarded: fewer than MinHealthyFraction of the service's
	// ready instances are healthy-eligible, so every ready instance is
	// published.
	HealthDisregarded bool
	// Zones reports the guard per (Region, Zone), sorted. Spilling a
	// zone's callers to the next tiers is the DNS and xDS servers' job at
	// query time (SPEC §3); the evaluator only says which zones are below.
	Zones []ZoneResult
	// Transitions are the changes of eligibility or verdict, by ID.
	Transitions []Transition
	// Events are service-level and quarantine events.
	Events []Event
	// Discarded counts samples discarded as unattributable (another
	// incarnation, an unknown instance) or from the future.
	Discarded int
}

// InstanceResult is one instance's verdict.
type InstanceResult struct {
	ID          string
	Incarnation uint64
	Lifecycle   Lifecycle
	Verdict     Verdict
	// Eligible is the published eligibility; Flags has status.Eligible
	// set exactly when it is true.
	Eligible bool
	// Weight is the published weight: 0 when not eligible, else between
	// 1 and the base weight.
	Weight int
	Flags  Flags
	// Reasons explain the verdict and eligibility, in a fixed order.
	Reasons []string
	// Evidence is the evidence behind the verdict (the zero value if
	// none).
	Evidence EvidenceRef
}

// ZoneResult is the minimum-healthy-fraction guard for one zone.
type ZoneResult struct {
	Region, Zone string
	// Ready counts the zone's ready instances; Healthy those of them the
	// evidence keeps eligible.
	Ready, Healthy int
	// BelowGuard: Healthy < MinHealthyFraction × Ready.
	BelowGuard bool
}

// Position is where an instance stands: published eligibility and
// verdict.
type Position struct {
	Eligible bool
	Verdict  Verdict
}

// String returns "eligible/healthy", "withdrawn/unhealthy" and so on.
func (p Position) String() string {
	if p.Eligible {
		return "eligible/" + p.Verdict.String()
	}
	return "withdrawn/" + p.Verdict.String()
}

// Transition is one audit-trail record (SPEC §2).
type Transition struct {
	ID          string
	Incarnation uint64
	From, To    Position
	Reason      string
	Evidence    EvidenceRef
	At          time.Time
}

func (t Transition) String() string {
	return fmt.Sprintf("%s#%d %v -> %v: %s", t.ID, t.Incarnation, t.From, t.To, t.Reason)
}

// EventKind says what an Event is about.
type EventKind uint8

// The events.
const (
	// EventHealthDisregarded: the service fell below its minimum healthy
	// fraction; every ready instance is served.
	EventHealthDisregarded EventKind = iota + 1
	// EventHealthRestored: the service is above the fraction again.
	EventHealthRestored
	// EventQuarantined: an instance flapped and is quarantined.
	EventQuarantined
)

// Event is a service-level or quarantine event.
type Event struct {
	Kind   EventKind
	ID     string // the instance, for EventQuarantined
	At     time.Time
	Detail string
}
