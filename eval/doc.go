// Package eval is the health evaluator's pure core (SPEC §2): a
// deterministic function from a service's policy, its instances, new
// evidence, the previous state and the time to verdicts, a new state and
// the audit trail's transitions.
//
//	res, st = eval.Evaluate(policy, instances, samples, st, now)
//
// It owns the fusion rules: per-class hysteresis and decaying scores,
// silence, self-reports and dependencies, the lease, flap quarantine,
// slow start, the shrink cap and the minimum healthy fraction.
//
// # What it must not do
//
// Read a clock (now is a parameter), start goroutines, iterate a map in
// an order that reaches its output, or import the store, the API, the
// prober or raft (cmd/deps_test.go). The loop that gathers instances and
// evidence every round and commits the verdicts is package health; the
// status table is built from those commits (status.Entry takes Verdict
// and Flags unconverted). Of cairn it imports status (the verdicts,
// lifecycles and flags) and wire, where the policy defaults a service
// definition may set live once, and the committed verdict it maps its
// state to and from.
//
// # Threading
//
// Evaluate is a pure function, safe anywhere. An Evaluator keeps working
// memory from one call to the next and is not safe for concurrent use:
// the health loop owns one. A Result's Instances are the Evaluator's
// own, valid until its next call; a State passed to Recycle must not be
// used again.
//
// # Files
//
// eval.go (Evaluate, the Evaluator and its recycled memory, the round),
// evidence.go (samples, observers, outcome quorum, per-class counters),
// judge.go (verdict, flap quarantine, the service's guard and shrink cap,
// weights), policy.go (Policy and its defaults), input.go (what goes
// in), state.go (what carries over between rounds), commit.go (the one
// mapping between an instance's state and its committed verdict,
// wire.Health: Commit, Resume, Evaluator.Unchanged).
//
// # One instance, step by step
//
//  1. Samples newer than each class's watermark are consumed in time
//     order. A class (probe, outcome) turns failing after WithdrawAfter
//     consecutive failures, when its decaying failure rate exceeds
//     FailureThreshold (with at least ScoreMinWeight samples behind it),
//     or at once on a hard failure (a refused connection). An outcome
//     sample fails when its failure rate exceeds FailureThreshold. A
//     failing class recovers only after AdmitAfter consecutive successes
//     spanning at least AdmitMin, and a failing class stays failing
//     through silence.
//  2. The self-report counts while it is fresh or the lease is alive:
//     ready=false and a failed non-shared dependency withdraw; a failing
//     or degraded shared dependency halves the weight; any degraded
//     dependency makes the verdict degraded. Undeclared dependencies are
//     ignored.
//  3. An expired lease is silence (flag lease_expired). It withdraws only
//     when a probe or outcome class's latest fresh sample failed, or, for
//     ReadinessNone, once the hard expiry (HardExpiry after the last
//     renewal) has passed.
//  4. Verdict: quarantined, else unhealthy if anything withdraws, else
//     degraded, else healthy if any evidence is fresh, else unknown.
//     Unknown is eligible: silence never withdraws.
//  5. Health eligibility = lifecycle ready, nothing withdraws, not
//     quarantined. More than FlapLimit changes of it in FlapWindow
//     quarantine the instance for QuarantineBase × 2^(n−1), at most
//     QuarantineMax, where n counts this incarnation's quarantines.
//
// The diagram, for health eligibility (lifecycle ready):
//
//	                 WithdrawAfter failures | score > threshold
//	                 | hard failure | ready=false | own dependency failed
//	                 | lease expired + corroboration | hard expiry
//	┌───────────────┐ ─────────────────────────────────────▶ ┌───────────┐
//	│ eligible      │                                        │ withdrawn │
//	│ unknown,      │ ◀───────────────────────────────────── │ unhealthy │
//	│ healthy or    │   AdmitAfter successes over ≥ AdmitMin └───────────┘
//	│ degraded      │   (and the report ready again)               │
//	└───────────────┘                                              │
//	    │       ▲                                                  │
//	    │       └──── quarantine ends ──── ┌─────────────┐         │
//	    └──── > FlapLimit changes ───────▶ │ quarantined │ ◀───────┘
//	          within FlapWindow            └─────────────┘
//
// Draining and terminated instances are never eligible, and starting
// instances not yet; none of them counts in the guard.
//
// # The service, after every instance
//
//   - Guard: if fewer than MinHealthyFraction of the ready instances are
//     health-eligible, health is disregarded: every ready instance is
//     published (quarantined ones too: quarantine is a health judgement;
//     starting, draining and terminated never are), those eligible only
//     through the guard carry flag health_disregarded, the Result says
//     HealthDisregarded, and an event marks the change. The guard is
//     computed on health eligibility, before the shrink cap, so the cap's
//     deferrals cannot make it oscillate. Zones are reported with their
//     own guard (BelowGuard); spilling a zone's callers to the next tiers
//     is the DNS and xDS servers' job at query time (SPEC §3).
//   - Shrink cap: a published instance that health would withdraw is a
//     withdrawal; at most max(1, ⌊ShrinkCap × Base⌋) happen per
//     ShrinkWindow, Base being the published set when the window opened.
//     Hard failures go first, then the oldest failure, then by id; the
//     rest stay published, flagged withdrawal_deferred. Lifecycle
//     withdrawals (drain) are neither capped nor counted. The first
//     window of a fresh State has Base 0 and so allows one withdrawal.
//   - Slow start: an instance newly published gets 10% of its base weight,
//     rising linearly to 100% over SlowStart, or over the instance's
//     deploy ramp when that is longer (Instance.Ramp; flag slow_start);
//     the weight is at least 1 and 0 when not published.
//   - Transitions: every change of published eligibility or verdict, and
//     each instance's first evaluation, with its reason and evidence.
package eval
