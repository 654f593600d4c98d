package status

import (
	"fmt"
	"strconv"
	"strings"
)

// Entry is one slot of a Table: what the evaluator concluded about one
// instance at the table's version.
//
// It is 32 bytes and holds no pointers, so a Table's entries are one flat
// allocation that the garbage collector never scans, and two entries
// share a cache line. The zero Entry is an unused slot: Key 0, not
// eligible, weight 0.
type Entry struct {
	// Key is KeyHash of the instance key the slot was assigned to; 0 marks
	// an unused slot (KeyHash never returns 0). A reader that found the
	// slot through an older table, or through its own index, compares Key
	// (and Incarnation) to tell that the slot still holds the instance it
	// expects: slots are reused after an instance goes.
	Key uint64
	// Incarnation is the instance's incarnation (SPEC §1) the verdict is
	// about.
	Incarnation uint64
	// Service is the index of the instance's service in the table's
	// Services; 0 is the empty name.
	Service uint32
	// Weight is the published weight: BaseWeight after the slow-start and
	// dependency factors (SPEC §2), never above BaseWeight; 0 when the
	// instance is not Eligible. 16 bits are enough: base weights are
	// 1–65535 (SPEC §1) and SRV weights are 16 bits on the wire.
	Weight uint16
	// BaseWeight is the registered base weight (1–65535, default 100).
	BaseWeight uint16
	// Region and Zone are the instance's locality, as ids in the table's
	// Localities; 0 is the empty name (locality not given).
	Region, Zone uint16
	Verdict      Verdict
	Lifecycle    Lifecycle
	Flags        Flags
	// Shift is how much of the traffic its zone would get an evacuation
	// (SPEC §6, `cairn evacuate`) moves away from the instance, in
	// percent: 0 none (the zero value: no evacuation), ShiftAll while
	// its zone is evacuated (it is in TierEvacuated for every caller),
	// and in between while the zone comes back (see Share).
	Shift uint8
}

// ShiftAll is the Shift of an instance whose zone is evacuated.
const ShiftAll = 100

// Evacuated reports whether the instance's zone is evacuated: it is in
// the last tier, TierEvacuated, for every caller.
func (e Entry) Evacuated() bool { return e.Shift >= ShiftAll }

// Returning reports whether the instance's zone is coming back from an
// evacuation: in its own tier again, at a share below 1.
func (e Entry) Returning() bool { return e.Shift > 0 && e.Shift < ShiftAll }

// Share is the fraction of its tier's traffic the instance's zone takes
// back while it returns from an evacuation (1 − Shift/100): the tier
// rules count it healthy only in that fraction, and its weight is
// scaled by it, as if that much of the zone were healthy (SPEC §6's
// rate-capped shift-back). 1 when nothing is shifted, and 1 for an
// evacuated instance too: in TierEvacuated it counts whole.
func (e Entry) Share() float64 {
	if e.Shift == 0 || e.Shift >= ShiftAll {
		return 1
	}
	return 1 - float64(e.Shift)/ShiftAll
}

// Used reports whether the slot holds an instance (a non-zero Key).
func (e Entry) Used() bool { return e.Key != 0 }

// Verdict is the evaluator's judgement of an instance's health (SPEC §1).
// It is evidence for rotation, not rotation itself: whether the instance
// is served is the Eligible flag (an Unknown instance stays eligible, a
// Degraded one may be, SPEC §2).
type Verdict uint8

// The verdicts. The zero value is Unknown: silence is unknown, not
// unhealthy (SPEC §0.3).
const (
	Unknown Verdict = iota
	Healthy
	Degraded
	Unhealthy
	Quarantined
)

var verdictNames = [...]string{"unknown", "healthy", "degraded", "unhealthy", "quarantined"}

// String returns the SPEC's name of v: "unknown", "healthy", "degraded",
// "unhealthy" or "quarantined"; "verdict(N)" for anything else.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// ParseVerdict returns the verdict named s, one of String's names; any
// other text is an error naming it.
func ParseVerdict(s string) (Verdict, error) {
	for i, name := range verdictNames {
		if name == s {
			return Verdict(i), nil
		}
	}
	return Unknown, fmt.Errorf("status: verdict %q is not one of %s", s, strings.Join(verdictNames[:], ", "))
}

// MarshalText writes v's name, as JSON and YAML carry it; a verdict
// without a name is an error.
func (v Verdict) MarshalText() ([]byte, error) {
	if int(v) >= len(verdictNames) {
		return nil, fmt.Errorf("status: %s has no name", v)
	}
	return []byte(verdictNames[v]), nil
}

// UnmarshalText reads a name MarshalText writes (ParseVerdict).
//
// A name this version does not know reads as Unknown, not as an error:
// a verdict is a judgement, and unknown is the one that withdraws
// nothing. A newer server's verdict must not stop an older replica from
// applying the log or restoring a snapshot that carries it, nor an older
// client from reading an answer (the rule health's reading of verdicts
// had before status owned their names). ParseVerdict is the strict form.
func (v *Verdict) UnmarshalText(b []byte) error {
	p, err := ParseVerdict(string(b))
	if err != nil {
		p = Unknown
	}
	*v = p
	return nil
}

// Lifecycle is the stage of an instance's life as its registrar declared
// it (SPEC §1), copied from the store.
type Lifecycle uint8

// The lifecycles, in the store's order. The zero value is Starting, which
// is never eligible, so a zeroed Entry is never served.
const (
	Starting Lifecycle = iota
	Ready
	Draining
	Terminated
)

var lifecycleNames = [...]string{"starting", "ready", "draining", "terminated"}

// String returns the SPEC's name of l: "starting", "ready", "draining" or
// "terminated"; "lifecycle(N)" for anything else.
func (l Lifecycle) String() string {
	if int(l) < len(lifecycleNames) {
		return lifecycleNames[l]
	}
	return "lifecycle(" + strconv.Itoa(int(l)) + ")"
}

// ParseLifecycle returns the lifecycle named s, one of String's names;
// any other text is an error naming it.
func ParseLifecycle(s string) (Lifecycle, error) {
	for i, name := range lifecycleNames {
		if name == s {
			return Lifecycle(i), nil
		}
	}
	return Starting, fmt.Errorf("status: lifecycle %q is not one of %s", s, strings.Join(lifecycleNames[:], ", "))
}

// MarshalText writes l's name, as JSON and YAML carry it; a lifecycle
// without a name is an error.
func (l Lifecycle) MarshalText() ([]byte, error) {
	if int(l) >= len(lifecycleNames) {
		return nil, fmt.Errorf("status: %s has no name", l)
	}
	return []byte(lifecycleNames[l]), nil
}

// UnmarshalText reads a name MarshalText writes (ParseLifecycle).
func (l *Lifecycle) UnmarshalText(b []byte) error {
	p, err := ParseLifecycle(string(b))
	if err == nil {
		*l = p
	}
	return err
}

// Flags is a set of per-instance facts the readers need besides the
// verdict. The evaluator sets them; the readers act on Eligible and
// HealthDisregarded and pass the others on (xDS metadata, the API).
//
// Flags has names (String, Names) but no MarshalText, on purpose: every
// encoding that carries them (the API's and the store's JSON, the table
// file, an agent's view) has always carried the bits as a number, and
// encoding/json writes a uint8 as one.
type Flags uint8

// The flags.
const (
	// Eligible: the instance is in rotation. DNS may return it and xDS
	// publishes it (HEALTHY, or UNKNOWN when the verdict is Unknown).
	// Weight is non-zero exactly when Eligible is set.
	Eligible Flags = 1 << iota
	// HealthDisregarded: the instance is Eligible only because its
	// service is below the minimum healthy fraction and the guard serves
	// every registered non-draining instance (SPEC §2). Answers that
	// include it say so (EDE 0 "health-disregarded", xDS metadata
	// cairn.health_disregarded). A reader that computes the guard per
	// caller's tiers (SPEC §3) uses it with the Verdict and Lifecycle.
	HealthDisregarded
	// SlowStart: the instance became eligible within its slow-start
	// window, and Weight is rising from 10% to 100% of BaseWeight.
	SlowStart
	// DependencyDegraded: a dependency declared shared is failing, and
	// Weight carries its factor (default × 0.5). It never withdraws.
	DependencyDegraded
	// LeaseExpired: the instance's lease expired. That is silence: it
	// withdraws only with corroboration or after the hard expiry.
	LeaseExpired
	// WithdrawalDeferred: the evaluator would withdraw the instance, but
	// the shrink cap keeps it Eligible until its turn (SPEC §2).
	WithdrawalDeferred
	// OutcomeDegraded: callers report the instance failing, but too few
	// of them to withdraw it (the outcome quorum) or past the service's
	// max_ejection_percent, and Weight carries the outcome factor
	// (default × 0.5).
	OutcomeDegraded
	// PeerStale: the instance is another region's, and the node's view
	// of that region is older than stale-after (its link cut, its
	// servers gone). It is served as the view last said, never dropped
	// for being old, and an answer that includes it is a stale answer
	// (EDE 3, TTLs capped), as an answer from a stale table is.
	PeerStale
)

var flagNames = [...]string{
	"eligible", "health_disregarded", "slow_start", "dependency_degraded",
	"lease_expired", "withdrawal_deferred", "outcome_degraded", "peer_stale",
}

// Has reports whether every flag in g is set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

// Names lists the names of the set flags in bit order, unknown bits as
// hexadecimal ("0x80"); empty, not nil, for none.
func (f Flags) Names() []string {
	out := []string{}
	for i, name := range flagNames {
		if f&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	if rest := f &^ (1<<len(flagNames) - 1); rest != 0 {
		out = append(out, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return out
}

// String lists the set flags joined by "|" ("eligible|slow_start"), "0"
// for none, and unknown bits as hexadecimal.
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	for i, name := range flagNames {
		if f&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(name)
	}
	if rest := f &^ (1<<len(flagNames) - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x" + strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}
